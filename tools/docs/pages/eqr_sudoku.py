"""The tables of ``docs/benchmarks/eqr_sudoku.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import eqr_seeds, run_set
from tools.docs.results import load, markdown


def eqr_breadth(seeds: tuple[int, ...] = (0, 1, 2)) -> str:
    """EqR's depth x breadth grid per seed (6x6): exact solve with the answer picked by the lowest residual / vote
    / halting head, and the correlation of a restart's log residual with its being right."""
    rows, folders = [], run_set("eqr_6x6_seeds")
    for seed in seeds:
        if not (docs_results.RESULTS / folders[seed] / "eqr" / "eqr_sudoku.json").exists():
            continue  # not run yet (the seeds table says so)
        run = load(f"{folders[seed]}/eqr/eqr_sudoku.json")["eqr"]
        breadths = sorted({int(key.split("x")[1]) for key in run["grid"]})  # the same options for every seed
        for depth in sorted({int(key.split("x")[0]) for key in run["grid"]}):
            cells = []
            for b in breadths:
                point = run["grid"][f"{depth}x{b}"]
                cells.append(" / ".join(f"{100 * point[rule]:.1f}" for rule in ("residual", "vote", "halt")))
            r = run["residual_correctness_r"].get(str(depth))
            rows.append([f"seed {seed}, depth {depth}", *cells, "" if r is None else f"{r:+.2f}"])
    header = ["EqR (exact solve %: residual / vote / halting head)", *(f"breadth {b}" for b in breadths)]
    return markdown([*header, "r(log residual, right)"], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "eqr-6x6-seeds": eqr_seeds,
    "eqr-6x6-breadth": eqr_breadth,
}
