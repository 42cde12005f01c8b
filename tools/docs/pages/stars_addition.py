"""The tables of ``docs/benchmarks/stars_addition.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.pages.common import stars_preset_runs
from tools.docs.results import load, markdown, pct, small

STARS_KINDS = {
    "plain": "plain, trained at {train_loops}",
    "sampling": "loop sampling only",
    "jsrr": "JSRR only, at {train_loops}",
    "stars": "STARS",
}


def stars_accuracy(relative: str) -> str:
    data = load(relative)
    results, args = data["results"], data["args"]
    loops = list(next(iter(results.values()))["accuracy"])
    rows = [
        [label.format(**args)] + [pct(results[kind]["accuracy"][n]) for n in loops]
        for kind, label in STARS_KINDS.items()
        if kind in results
    ]
    return markdown(["loops at test time", *loops], rows)


def stars_dynamics() -> str:
    results = load("stars_addition/results.json")["results"]
    rows = []
    for kind, label in STARS_KINDS.items():
        radius, step = results[kind]["dynamics"]["spectral_radius"], results[kind]["dynamics"]["relative_step"]
        label = label.split(",")[0].replace("loop sampling", "sampling")
        rows.append(
            [
                label,
                " / ".join(f"{radius[t]:.2f}" for t in ("4", "16", "64")),
                " / ".join(small(step[t - 1]) for t in (4, 16, 63)),
            ]
        )
    return markdown(["kind", "radius at t = 4 / 16 / 64", "relative step at t = 4 / 16 / 63"], rows)


def stars_norm_placement() -> str:
    """The norm diagnosis (``stars_norm_placement/results.json``): per placement and training kind the state's norm
    and the relative step at loop steps 4, 16 and 100, the spectral radius at 64 and exact match at 4, 16 and 100
    loops."""
    data = load("stars_norm_placement/results.json")

    def cells(values: dict, keys: tuple, fmt) -> str:
        return " / ".join("diverged" if values[k] is None else fmt(values[k]) for k in keys)

    rows = [
        [
            f"`{placement}`, {kind}",
            cells(r["state_norm"], ("4", "16", "100"), lambda v: f"{v:.3g}"),
            cells(r["relative_step"], ("4", "16", "100"), small),
            "-" if r["spectral_radius"]["64"] is None else f"{r['spectral_radius']['64']:.2f}",
            " / ".join(pct(r["accuracy"][n]) for n in ("4", "16", "100")),
        ]
        for placement, by_kind in data["placements"].items()
        for kind, r in by_kind.items()
    ]
    header = ["placement, training", "state norm at t = 4 / 16 / 100", "relative step at t = 4 / 16 / 100"]
    return markdown([*header, "radius at t = 64", "exact match at 4 / 16 / 100 loops"], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "stars-addition": lambda: stars_accuracy("stars_addition/results.json"),
    "stars-addition-3digit": lambda: stars_accuracy("stars_addition_3digit/results.json"),
    "stars-dynamics": stars_dynamics,
    "stars-reference-addition": lambda: stars_preset_runs("stars_reference_addition"),
    "stars-equilibria-addition4": lambda: stars_preset_runs("stars_equilibria_addition4"),
    "stars-norm-placement": stars_norm_placement,
}
