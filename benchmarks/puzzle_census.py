"""How many distinct puzzles the generators make, up to each task's symmetries, and how far the benchmarks' splits
are held out.

A Sudoku is the same puzzle after relabelling its digits, swapping rows within a band, columns within a stack,
bands, stacks or (square boxes) transposing; a maze after a rotation, a reflection or swapping start and goal
(:mod:`equilibria.tasks.symmetry`). For each generator setting, ``--draws`` puzzles are drawn and sorted into
classes: the classes seen are a lower bound on what the generator can make; when every class was seen at least
twice the count is saturated (taken as exact), else the Chao1 estimate (classes + singletons^2 / (2 x doubletons))
says roughly how many there are. For each benchmark split, :func:`~equilibria.tasks.named_splits.split_census` counts the
classes in the training and test puzzles and the test puzzles that fall in a training class.

    python benchmarks/puzzle_census.py            # about 10 minutes on 2 CPU cores; writes docs/results/puzzle_census.json
    python benchmarks/puzzle_census.py --quick    # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

import results_json

from equilibria.tasks import build_maze_dataset, build_sudoku_dataset, generate_maze, generate_sudoku, split_census
from equilibria.tasks.symmetry import SymmetryClasses, maze_canonical, sudoku_classes
from tools.docs.pages.puzzle_census import generator_cell

# (name, task, size, generator options, draws)
GENERATORS = [
    ("sudoku 4x4", "sudoku", 4, {}, 5000),
    ("sudoku 6x6, 18+ clues", "sudoku", 6, {"min_clues": 18}, 2000),
    ("sudoku 9x9", "sudoku", 9, {}, 300),
    ("maze 7x7, min_path 7", "maze", 7, {"min_path": 7}, 5000),
    ("maze 9x9, min_path 9", "maze", 9, {"min_path": 9}, 5000),
]
# (name, task, size, train, test, seeds, options): the splits the EqR benchmarks train and test on
SPLITS = [
    ("EqR 4x4 Sudoku (eqr_sudoku, eqr_halting)", "sudoku", 4, 3000, 400, (0,), {"split_by": "board"}),
    ("EqR 6x6 Sudoku, 18+ clues", "sudoku", 6, 3000, 200, (0, 1, 2), {"min_clues": 18}),
    ("EqR 7x7 mazes (before: boards distinct)", "maze", 7, 2000, 200, (0, 1), {"min_path": 7, "split_by": "board"}),
    ("EqR 9x9 mazes", "maze", 9, 2000, 200, (0, 1, 2), {"min_path": 9}),
]


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a few draws and tiny splits (seconds)")
    p.add_argument("--output-dir", type=Path, default=Path("docs/results"))
    return p.parse_args(argv)


def generator_classes(task: str, size: int, options: dict, draws: int) -> dict:
    """Classes among ``draws`` generated puzzles, with the singletons and doubletons, and what they say."""
    rng = random.Random(f"census-{task}-{size}")
    classes = sudoku_classes() if task == "sudoku" else SymmetryClasses(maze_canonical)
    generate = generate_sudoku if task == "sudoku" else generate_maze
    counts = Counter(classes.index(generate(size, rng, **options)["question"]) for _ in range(draws))
    seen, once, twice = len(counts), sum(c == 1 for c in counts.values()), sum(c == 2 for c in counts.values())
    row = {"draws": draws, "seen": seen, "once": once, "twice": twice}
    if once == 0:  # every class seen twice or more
        return {**row, "classes": seen, "kind": "saturated"}
    if twice == 0:  # nothing to estimate from: only that there are more
        return {**row, "classes": None, "kind": "lower bound"}
    return {**row, "classes": round(seen + once * once / (2 * twice)), "kind": "Chao1"}


def split_row(task: str, size: int, train: int, test: int, seed: int, options: dict) -> dict:
    """The census of one benchmark split (the training puzzles before augmentation: an augmented puzzle is in its
    source's class)."""
    options = dict(options)
    if task == "sudoku":
        data = build_sudoku_dataset(size, train, test, seed=seed, **options)
    else:
        data = build_maze_dataset(size, train, test, seed=seed, **options)
    return {"seed": seed, **split_census(task, data["train"], data["test"])}


def main(argv=None) -> dict:
    args = parse(argv)
    generators, splits = GENERATORS, SPLITS
    if args.quick:
        generators = [(n, t, s, o, 40) for n, t, s, o, _ in GENERATORS if s != 9 or t == "maze"]
        splits = [(n, t, s, 30, 6, seeds[:1], o) for n, t, s, _, _, seeds, o in SPLITS if t == "maze" or s == 4]
    results = {"args": {"quick": args.quick}, "generators": [], "splits": []}
    for name, task, size, options, draws in generators:
        start = time.perf_counter()
        row = {"name": name, **generator_classes(task, size, options, draws)}
        results["generators"].append(row)
        print(f"{name}: {generator_cell(row)} ({time.perf_counter() - start:.0f} s)")
    for name, task, size, train, test, seeds, options in splits:
        runs = [split_row(task, size, train, test, seed, options) for seed in seeds]
        results["splits"].append({"name": name, "task": task, "size": size, "options": options, "runs": runs})
        for run in runs:
            print(
                f"{name}, seed {run['seed']}: {run['train_classes']} training classes, {run['test_classes']} test "
                f"classes, {run['test_rows_in_training_classes']} of {run['test_rows']} test puzzles in a training "
                "class"
            )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results_json.save_results(args.output_dir / "puzzle_census.json", results, indent=2)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
