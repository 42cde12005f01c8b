"""The tables of ``docs/benchmarks/puzzle_census.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import load, markdown


def generator_cell(row: dict) -> str:
    """The class count of a generator row, saying what kind of number it is."""
    seen = f"{row['seen']} seen in {row['draws']} draws, {row['once']} once"
    if row["kind"] == "saturated":
        return f"{row['classes']} (saturated: {seen})"
    if row["kind"] == "lower bound":
        return f"more than {row['seen']} (a lower bound: {seen})"
    return f"about {row['classes']:,} (Chao1 estimate: {seen}, {row['twice']} twice)"


def puzzle_generators() -> str:
    rows = [[g["name"], generator_cell(g)] for g in load("puzzle_census.json")["generators"]]
    return markdown(["generator", "classes up to symmetry"], rows)


def puzzle_splits() -> str:
    rows = []
    for split in load("puzzle_census.json")["splits"]:
        for run in split["runs"]:
            held = "held out" if run["held_out"] else "**memorisation check**"
            rows.append(
                [
                    split["name"],
                    str(run["seed"]),
                    f"{run['train_rows']} / {run['train_classes']}",
                    f"{run['test_rows']} / {run['test_classes']}",
                    str(run["test_rows_in_training_classes"]),
                    held,
                ]
            )
    header = ["split", "seed", "training puzzles / classes", "test puzzles / classes", "test in a training class", ""]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "puzzle-generators": puzzle_generators,
    "puzzle-splits": puzzle_splits,
}
