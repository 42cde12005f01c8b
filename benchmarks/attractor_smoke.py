"""Smoke-scale runs of the Attractor's puzzle head on the paper's other puzzle tasks, through the CLI a user runs:
9x9 mazes (generated, test mazes outside every training maze's class) and 9x9 Sudoku read through the
Sudoku-Extreme loader (a CSV in the published layout, written here from generated puzzles, its held-out rows
outside every training puzzle's class). Each case is one ``equilibria train --family attractor_lm`` run; its
loop-scaling evaluation is collected into ``docs/results/attractor_smoke.json``.

Smoke scale: a few hundred steps of a small model show that the path runs end to end (data, training, the solve,
evaluation held out by class); they do not say what an Attractor can learn on these tasks (the paper trains 27M
parameters for hours on 1,000 puzzles with 1,000 augmentations each).

    python benchmarks/attractor_smoke.py            # about 10 minutes on 2 CPU cores
    python benchmarks/attractor_smoke.py --quick    # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import results_json

from equilibria.cli import main as cli
from equilibria.tasks import build_sudoku_dataset

QUIET = ["--report_to", "none", "--use_cpu", "--disable_tqdm", "true", "--save_strategy", "no"]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--train-size", type=int, default=1000)
    p.add_argument("--test-size", type=int, default=100)
    p.add_argument("--loops", default="0,4,16")
    p.add_argument("--output", type=Path, default=Path("docs/results/attractor_smoke.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.hidden_size, args.train_size, args.test_size, args.loops = 2, 32, 24, 8, "0,2"
    return args


def sudoku_csv(path: Path, rows: int) -> Path:
    """``rows`` generated 9x9 puzzles in the Sudoku-Extreme CSV layout (source, question, answer, rating)."""
    puzzles = build_sudoku_dataset(9, rows, 1, seed=0)["train"]
    puzzles.select_columns(["source", "question", "answer", "rating"]).to_csv(path, index=False)
    return path


def run_case(name: str, task_args: list[str], args, work: Path) -> dict:
    out = work / name
    argv = ["train", "--family", "attractor_lm", *task_args, "--output_dir", str(out), "--max_steps", str(args.steps)]
    argv += ["--hidden_size", str(args.hidden_size), "--num_attention_heads", "2", "--eval_loops", args.loops]
    if cli([*argv, *QUIET]) != 0:
        raise SystemExit(f"the {name} run failed: {' '.join(argv)}")
    scaling = json.loads((out / "loop_scaling.json").read_text())
    config = json.loads((out / "config.json").read_text())
    data = scaling["data"]
    return {
        "command": "equilibria " + " ".join(argv).replace(str(work), "<work>"),  # the run's scratch folder
        "accuracy": scaling["accuracy"],
        "data": {key: data.get(key) for key in ("name", "held_out", "units", "note")},
        "residual_form": config["residual_form"],
        "cells": config["max_position_embeddings"],
    }


def main(argv=None) -> dict:
    args = parse(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        csv = sudoku_csv(work / "sudoku9.csv", args.train_size + args.test_size)
        cases = {
            "9x9 maze (generated)": ["--task", "maze", "--size", "9", "--train_size", str(args.train_size)]
            + ["--test_size", str(args.test_size)],
            "9x9 Sudoku (Sudoku-Extreme loader)": ["--task", "sudoku", "--dataset_name", str(csv)]
            + ["--test_size", str(args.test_size)],
        }
        results = {
            name: run_case(name.split(" (")[0].replace(" ", "-"), task, args, work) for name, task in cases.items()
        }
    for name, result in results.items():
        cells = "  ".join(f"{n} loops: {100 * a:.1f}%" for n, a in result["accuracy"].items())
        print(f"{name}: {cells}  ({result['data']['name']})")
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "cases": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    results_json.save_results(args.output, record, indent=2)
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
