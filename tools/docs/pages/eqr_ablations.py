"""The tables of ``docs/benchmarks/eqr_ablations.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.pages.common import eqr_seeds, run_set
from tools.docs.results import load


def depth_table(
    runs: dict[str, dict], title: str = "exact solve (mean final residual)", suffix: str = "", training: bool = True
) -> str:
    """Exact solve by depth (with the mean final residual) of every kind, a row each (``suffix`` after the kind's
    name), with the training steps and seconds unless ``training`` is off."""
    depths = sorted({int(d) for r in runs.values() for d in r["accuracy_by_depth"]})
    header = [title, *(f"depth {d}" for d in depths)] + (["training"] if training else [])
    lines = ["| " + " | ".join(header) + " |", "| --- " * len(header) + "|"]
    for kind, r in runs.items():
        acc, res = r["accuracy_by_depth"], r["residual_by_depth"]
        cells = [f"{100 * acc[str(d)]:.1f}% ({res[str(d)]:.2g})" if str(d) in acc else "" for d in depths]
        if training:
            steps = f"{r['train_steps']} steps, " if "train_steps" in r else ""
            cells.append(f"{steps}{r['train_seconds']:.0f} s")
        lines.append(f"| {kind}{suffix} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def selection_table(runs: dict[str, dict]) -> str:
    """Among 16 restarts at the deepest depth: exact solve by each selection rule, for the kinds whose restarts
    differ (empty when none do), and the correlation of the log residual with being right."""
    picked = {k: r["selection"] for k, r in runs.items() if r.get("selection")}
    if not picked:
        return ""
    lines = [
        "| selection rule | lowest residual | vote | halting head | r(log residual, right) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, s in picked.items():
        cells = [f"{100 * s[rule]:.1f}%" if rule in s else "" for rule in ("residual", "vote", "halt")]
        lines.append(f"| {kind} | " + " | ".join(cells) + f" | {s['residual_correctness_r']:+.2f} |")
    return "\n".join(lines)


def eqr_depths(relative: str, **options) -> str:
    return depth_table(load(relative)["kinds"], **options)


def eqr_selection(relative: str) -> str:
    return selection_table(load(relative)["kinds"])


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "eqr-ablation-6x6": lambda: eqr_depths("eqr_ablation_6x6/summary.json"),
    "eqr-ablation-6x6-selection": lambda: eqr_selection("eqr_ablation_6x6/summary.json"),
    "eqr-ablation-maze7": lambda: eqr_depths("eqr_ablation_maze7/summary.json"),
    "eqr-ablation-maze7-selection": lambda: eqr_selection("eqr_ablation_maze7/summary.json"),
    "eqr-ablation-maze7-seed1": lambda: eqr_depths(
        "eqr_ablation_maze7_seed1/summary.json", title="seed 1: exact solve (mean final residual)", training=False
    ),
    "eqr-maze7-fullbackprop": lambda: eqr_depths(
        "eqr_maze7_fullbackprop/summary.json", suffix=", 8-step backprop", training=False
    ),
    "eqr-maze9-seeds": lambda: eqr_seeds(
        ("untied", "weight_tied", "eqr"),
        (("eqr", "weight_tied"), ("eqr", "untied"), ("weight_tied", "untied")),
        (4, 8, 16, 32, 64),
        run_set("eqr_maze9"),
    ),
}
