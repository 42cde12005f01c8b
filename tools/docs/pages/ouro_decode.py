"""The tables of ``docs/benchmarks/ouro_decode.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tools.docs.results import load, markdown, pct


def ouro_decode() -> str:
    data = load("ouro_decode.json")
    a, over, early, cache = data["args"], data["loop_overhead"], data["early_exit"], data["cache"]
    layers, loops = int(a["layers"]), int(a["loops"])
    rows = [
        [
            "loop overhead",
            f"Ouro {layers} layers x {loops} loops vs Llama {layers * loops} layers, width {a['width']}, "
            f"{a['new_tokens']} new tokens",
            "{:.3f} [{:.3f}, {:.3f}]".format(over["ratio"], *over["ratio_range"]),
            "<= 1.10",
        ],
        [
            "early exit",
            f"{early['loops']} loops, threshold {early['threshold']:.3f} (mean exit {early['mean_exit_steps']:.2f} "
            "steps), vs no early exit",
            "{:.3f} [{:.3f}, {:.3f}]".format(early["ratio"], *early["ratio_range"]),
            "<= 0.60",
        ],
        [
            "KV cache",
            f"{cache['new_tokens']} new tokens, width {a['cache_width']}, cache vs none",
            "{:.2f}x faster [{:.2f}, {:.2f}]".format(cache["speedup"], *cache["speedup_range"]),
            "> 1",
        ],
    ]
    return markdown(["measure", "setting", "ratio [min, max]", "target"], rows)


def ouro_cache_modes() -> str:
    """The cache layouts on saved models (``bench_ouro_decode.py --sections cache_modes``)."""
    section = load("ouro_decode.json").get("cache_modes")
    if not section:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections cache_modes --models FOLDERS`)"
    rows = []
    for model in section["models"]:
        for loops, r in model["loops"].items():
            held, exact = r["cache_bytes"], r["exact_match"]
            rows.append(
                [
                    f"`{Path(model['model']).name}` ({model['data']['units']} held-out rows)",
                    loops,
                    f"{pct(exact['per_loop'])} / {pct(exact['last_loop'])}",
                    f"{100 * r['difference']:+.1f} ± {100 * r['difference_se']:.1f} pts",
                    pct(r["same_answers"]),
                    f"{held['per_loop'] / 1024:.0f} / {held['last_loop'] / 1024:.0f} KiB ({held['per_loop'] / held['last_loop']:.1f}x)",
                    "{:.3f} [{:.3f}, {:.3f}]".format(r["time_ratio"], *r["time_ratio_range"]),
                ]
            )
    header = [
        "model (data)",
        "loops",
        "exact match per_loop / last_loop",
        "last - per (± SE, paired)",
        "same answers",
        "cache after decoding a batch",
        "time last / per [min, max]",
    ]
    return markdown(header, rows)


def ouro_exit_at_one() -> str:
    """Every token exiting after step 1 against a one-loop run (``--sections exit_at_one``)."""
    section = load("ouro_decode.json").get("exit_at_one")
    if not section:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections exit_at_one`)"
    names = {
        "exit_per_loop": "compute-saving exit, `per_loop` cache",
        "exit_last_loop": "compute-saving exit, `last_loop` cache",
        "exit_static": "compute-saving exit, static cache (`per_loop`)",
        "full": f"no exit: all {section['loops']} steps",
    }
    rows = [
        [names[name], "{:.3f} [{:.3f}, {:.3f}]".format(ratio, *section["ratio_range"][name])]
        for name, ratio in section["ratio_to_one_loop"].items()
    ]
    return markdown(["run (every token exits after step 1)", "time / a one-loop run [min, max]"], rows)


def ouro_exit_rows() -> str:
    """Dropping exited rows against running every row (``--sections exit_rows``), one row per batch size."""
    section = load("ouro_decode.json").get("exit_rows")
    if not section or "batches" not in section:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections exit_rows`)"
    rows = [
        [
            f"{batch} rows, {r['loops']} loops, threshold {r['threshold']} (mean exit {r['mean_exit_steps']:.2f} steps)",
            "{:.3f} [{:.3f}, {:.3f}]".format(r["ratio"], *r["ratio_range"]),
            "yes" if r["same_tokens"] else "**no**",
        ]
        for batch, r in section["batches"].items()
    ]
    return markdown(["batch", "time dropping / running every row [min, max]", "same tokens"], rows)


def ouro_compile() -> str:
    """The compiled decoding step against eager decoding (``bench_ouro_decode.py --sections compile``)."""
    r = load("ouro_decode.json").get("compile")
    if not r:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections compile`)"
    names = {"eager_dynamic": "eager, dynamic cache (the default)", "eager_static": "eager, static cache"}
    rows = [
        [
            f"compiled ({r['backend']}, whole graph, static cache) vs {names[name]}",
            "{:.3f} [{:.3f}, {:.3f}]".format(ratio, *r["ratio_range"][name]),
        ]
        for name, ratio in r["ratio"].items()
    ]
    sweep = ", ".join(f"{graphs} after {loops}" for loops, graphs in r["graphs_after_loops"].items())
    rows.append(
        [
            "first call (compiles)",
            f"{r['first_call_s']:.1f} s; same tokens as eager: {'yes' if r['same_tokens'] else '**no**'}",
        ]
    )
    rows.append(["graphs compiled over a loop sweep (each loop count run twice)", sweep])
    return markdown(["measure", "time ratio [min, max] or value"], rows)


def ouro_real_scale() -> str:
    """An Ouro-1.4B-shaped model with random weights on the CPU (``--sections real_scale``)."""
    r = load("ouro_decode.json").get("real_scale")
    if not r:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections real_scale`)"
    gib = 1024**3
    rows = [
        [
            dtype,
            mode,
            f"{run['tokens_per_s']:.2f}",
            f"{run['weight_bytes'] / gib:.2f} GiB",
            f"{run['cache_bytes'] / 1024**2:.1f} MiB",
            f"{run['peak_rss_bytes'] / gib:.2f} GiB",
        ]
        for (dtype, mode), run in ((key.split("/"), run) for key, run in r["runs"].items())
    ]
    table = markdown(
        [
            "dtype",
            "cache",
            "tokens / s",
            "weights",
            "cache after 32 + " + str(r["new_tokens"]) + " tokens",
            "peak memory of the process",
        ],
        rows,
    )
    drift = [
        [loops, f"{d['max_abs_over_std']:.3f}", f"{d['mean_abs_over_std']:.4f}", pct(d["top1_agreement"])]
        for loops, d in r["drift"].items()
    ]
    header = ["loops", "bf16 - fp32 logits, max / std", "mean / std", "same top token (32 positions)"]
    return table + "\n\n" + markdown(header, drift)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "ouro-decode": ouro_decode,
    "ouro-cache-modes": ouro_cache_modes,
    "ouro-exit-at-one": ouro_exit_at_one,
    "ouro-exit-rows": ouro_exit_rows,
    "ouro-compile": ouro_compile,
    "ouro-real-scale": ouro_real_scale,
}
