"""The tables of ``docs/benchmarks/gpu.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import json
from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import gib
from tools.docs.results import markdown


def gpu_section(name: str) -> dict | None:
    """The section ``name`` of the prepared GPU run (``docs/results/gpu/NAME.json``, ``gpu_run.py``), or ``None``."""
    path = docs_results.RESULTS / "gpu" / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


GPU_NOT_RUN = "(not run on a GPU yet: the device commands above write it)"


def gpu_stars_reference() -> str:
    """Per arm of ``stars_reference``: the seeds run, the mean exact match at each test loop count (± s.e. over
    seeds), and where it ran."""
    section = gpu_section("stars_reference")
    if not section or not section["stars_reference"].get("summary"):
        return GPU_NOT_RUN
    summary, runs = section["stars_reference"]["summary"]["accuracy"], section["stars_reference"]["runs"]
    loops = sorted(next(iter(summary.values())), key=int)
    rows = [
        [arm, ", ".join(sorted(runs[arm], key=int)), *[percent_se(summary[arm][n]) for n in loops]] for arm in summary
    ]
    where = f"{section['device']}, torch {section['torch']}, transformers {section['transformers']}"
    return markdown(["arm", "seeds", *[f"{n} loops" for n in loops]], rows) + f"\n\nRan on {where}."


def percent_se(row: dict) -> str:
    return f"{100 * row['mean']:.1f}%" + ("" if row.get("se") is None else f" ± {100 * row['se']:.1f}")


def gpu_ouro_real_size() -> str:
    """``ouro_real_size``: decode speed against the Llama of equal depth, the compiled and early-exit decodes, the
    training steps and the bf16 logits' distance from float32 CPU ones."""
    section = gpu_section("ouro_real_size")
    if not section:
        return GPU_NOT_RUN
    r, rows = section["ouro_real_size"], []
    for batch, row in r.get("decode", {}).items():
        for mode in ("per_loop", "last_loop"):
            vs = row[f"{mode}_vs_llama"]
            rows.append([f"decode, batch {batch}, `{mode}`", f"{row['tokens_per_s'][mode]:.1f} tokens/s",
                         "{:.3f} [{:.3f}, {:.3f}] of the equal-depth Llama's time".format(vs["ratio"], *vs["range"]),
                         gib(row["peak_bytes"][mode])])  # fmt: skip
    if "compiled_decode" in r:
        c = r["compiled_decode"]
        rows.append(["static cache, compiled step, batch 1", f"first call {c['first_call_s']:.1f} s",
                     "{:.3f} [{:.3f}, {:.3f}] of eager decoding's time".format(c["ratio"], *c["range"]), "-"])  # fmt: skip
    if "early_exit" in r:
        e = r["early_exit"]
        rows.append([f"early exit at {e['threshold']} (mean {e['mean_exit_steps']:.2f} steps)", "-",
                     "{:.3f} [{:.3f}, {:.3f}] of the full loop's time".format(e["ratio"], *e["range"]), "-"])  # fmt: skip
    for adapter, steps in r.get("training_step", {}).items():
        for penalty in ("plain", "jsrr"):
            run, ratio = steps[penalty], steps.get("jsrr_over_plain")
            value = run["error"][:60] if "error" in run else f"{run['step_s']:.2f} s"
            rows.append([f"STARS step, {adapter}, penalty {'on' if penalty == 'jsrr' else 'off'}", value,
                         f"{ratio:.2f}x on / off" if penalty == "jsrr" and ratio else "",
                         gib(run.get("peak_bytes"))])  # fmt: skip
    for loops, d in r.get("logits_bf16_vs_cpu_fp32", {}).items():
        rows.append([f"bf16 logits vs float32 on the CPU, {loops} loops", f"top token agrees {d['top1_agreement']:.1%}",
                     f"max / mean |diff| {d['max_abs_over_std']:.3f} / {d['mean_abs_over_std']:.4f} std", "-"])  # fmt: skip
    skipped = ", ".join(s["part"] for s in r.get("skipped", [])) or "none"
    header = ["measure", "value", "ratio", "peak GPU memory (a decode: above the loaded models)"]
    return markdown(header, rows) + (
        f"\n\nRan on {section['device']} (torch {section['torch']}, transformers {section['transformers']}); "
        f"skipped: {skipped}."
    )


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "gpu-stars-reference": gpu_stars_reference,
    "gpu-ouro-real-size": gpu_ouro_real_size,
}
