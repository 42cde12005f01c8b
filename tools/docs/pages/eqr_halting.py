"""The tables of ``docs/benchmarks/eqr_halting.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import json
from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.results import load, markdown, pct


def eqr_halting(folder: str, seeds: tuple[int, ...]) -> str:
    """Per seed and split: the fixed depth and threshold chosen on the validation half (the cheapest of equal
    accuracy, ``benchmarks/comparisons.py``) and how they compare on the test half."""
    rows = []
    for seed in seeds:
        if not (docs_results.RESULTS / folder / f"seed{seed}" / "eqr_halting.json").exists():
            rows.append([f"seed {seed}", "not run yet", *[""] * 6])
            continue
        data = load(f"{folder}/seed{seed}/eqr_halting.json")
        for split in ("easy", "all"):
            row = data["chosen"][split]
            depth = row["test_depth"]
            cells = [f"seed {seed}, {split} ({row['validation_puzzles']} / {row['test_puzzles']})"]
            cells += [str(row["reference_depth"]), f"{pct(depth['accuracy'])} / {depth['mean_nfe']:.0f}"]
            if row["threshold"] is None:
                rows.append(cells + ["none of equal accuracy", "", "", "", ""])
                continue
            halt = row["test_halting"]
            cells += [f"{row['threshold']:g}", f"{pct(halt['accuracy'])} / {halt['mean_nfe']:.1f}"]
            cells += [
                f"{row['nfe_ratio']:.2f}x",
                f"{100 * row['accuracy_difference']:+.1f} ± {100 * row['difference_se']:.1f}",
            ]
            cells.append("yes" if row["equal_accuracy_on_test"] else "**no**")
            rows.append(cells)
    header = [
        "seed, split (validation / test puzzles)",
        "fixed depth (chosen)",
        "test: exact / NFE",
        "threshold (chosen)",
        "test: exact / mean NFE",
        "fewer evaluations",
        "difference (pts, paired SE)",
        "equal accuracy on test",
    ]
    return markdown(header, rows)


def eqr_depth_breadth(folder: str, seeds: tuple[int, ...]) -> str:
    """Per seed and depth, exact solve at each breadth of ``<folder>/seed<k>/eqr/eqr_sudoku.json``'s grid, the
    answer chosen by the lowest residual / by vote / by the halting head (a seed not run yet says so)."""
    rows, breadths = [], None
    for seed in seeds:
        path = docs_results.RESULTS / folder / f"seed{seed}" / "eqr" / "eqr_sudoku.json"
        if not path.exists():
            rows.append([f"seed {seed}", "not run yet"])
            continue
        grid = json.loads(path.read_text())["eqr"].get("grid")
        if grid is None:  # saved before its grid (the grid runs last)
            rows.append([f"seed {seed}", "grid not run yet"])
            continue
        cells = {tuple(int(x) for x in key.split("x")): value for key, value in grid.items()}
        breadths = breadths or sorted({b for _, b in cells})
        for depth in sorted({d for d, _ in cells}):
            rule = [cells.get((depth, b)) for b in breadths]
            rows.append(
                [f"seed {seed}", str(depth)]
                + [
                    "" if r is None else " / ".join(pct(r[k]) for k in ("residual", "vote", "halt") if k in r)
                    for r in rule
                ]
            )
    header = ["seed", "depth (iterations)"] + [f"breadth {b}" for b in (breadths or [1])]
    width = len(header)
    return markdown(header, [row + [""] * (width - len(row)) for row in rows])


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "eqr-halting-6x6": lambda: eqr_halting("eqr_halting_6x6", (1, 2)),
    "eqr-halting-published-6x6": lambda: eqr_halting("eqr_halting_published_6x6", (0, 1, 2)),
    "eqr-depth-breadth-published-6x6": lambda: eqr_depth_breadth("eqr_published_6x6", (0, 1, 2)),
}
