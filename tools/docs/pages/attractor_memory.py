"""The tables of ``docs/benchmarks/attractor_memory.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.pages.common import memory_runs
from tools.docs.results import markdown


def attractor_memory() -> str:
    """A row per map and gradient mode: saved-for-backward and peak-increase MiB at each budget, and the ratios of
    the largest budget to the smallest."""
    runs = memory_runs()
    if not runs:
        return markdown(["map", "gradient", "saved / peak (MiB) at each budget"], [["not run yet", "", ""]])
    budgets = sorted({int(key.split("@")[1]) for key in runs})  # keys: "<form>/<mode>@<budget>"
    rows = []
    for form, mode in dict.fromkeys(tuple(key.split("@")[0].split("/")) for key in runs):
        cells = [runs[f"{form}/{mode}@{b}"] for b in budgets]
        last = cells[-1]
        rows.append(
            [
                f"`{form}`",
                mode,
                *(f"{c['saved_bytes'] / 2**20:.1f} / {c['peak_increase_bytes'] / 2**20:.1f}" for c in cells),
                f"{last['saved_ratio']:.2f}, {last['peak_ratio']:.2f}",
            ]
        )
    ratio = f"ratio {budgets[-1]} / {budgets[0]} (saved, peak)"
    return markdown(["map", "gradient", *(f"budget {b}: saved / peak MiB" for b in budgets), ratio], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "attractor-memory": attractor_memory,
}
