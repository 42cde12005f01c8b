"""Adaptive computation at inference for the Equilibrium Reasoner: accuracy against function evaluations (NFE) when
each puzzle stops as soon as its halting head is confident (`solve(..., halt_threshold=p)`), beside fixed depths.

An EqR model is trained exactly as `bench_eqr_sudoku.py` trains its EqR (every training option of that script is
accepted here, e.g. ``--size 6 --min-clues 18``), or loaded with ``--model``. On held-out puzzles it is then run

* at each fixed depth of ``--fixed-depths`` (NFE = depth x breadth), and
* with halting at each threshold of ``--thresholds``, up to ``--max-depth`` iterations (NFE = the block
  applications each puzzle actually ran, summed over its restarts),

and scored on all held-out puzzles and on the easy split: the ``--easy-share`` of them the generator rates easiest
(fewest dead ends of the reference solver, ties to the puzzle with more clues). The held-out puzzles are halved:
settings are chosen on the validation half and reported on the test half (:mod:`comparisons` defines "equal
accuracy" once). On validation, the reference is the cheapest fixed depth within one standard error of the most
accurate one, and the threshold is the cheapest (lowest mean NFE) within one standard error of that reference. On
test, the two are compared: NFE and wall-time ratios, and the accuracy difference with its paired standard error.
The paper reports the same accuracy at 11.34x fewer evaluations on easy puzzles.

    python benchmarks/bench_eqr_halting.py --split-by board         # 4x4 Sudoku: a memorisation check
    python benchmarks/bench_eqr_halting.py --size 6 --min-clues 18 --steps 2400 --augmentations 2 \\
        --output-dir docs/results/eqr_halting_6x6
    python benchmarks/bench_eqr_halting.py --quick                  # seconds; a test runs this
    python benchmarks/bench_eqr_halting.py --size 6 --min-clues 18 --steps 2400 --augmentations 2 --seed 1 \\
        --model docs/results/eqr_6x6_seeds/seed1/eqr/models/eqr --output-dir docs/results/eqr_halting_6x6/seed1
                                    # a model trained by bench_eqr_sudoku with the same options (no training)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import bench_eqr_sudoku as sudoku
import results_json
import torch
from comparisons import cheapest_of_equal_accuracy, of_equal_accuracy, paired_difference

from equilibria import EqRForPuzzleSolving


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--model", type=Path, default=None, help="a saved EqR folder to evaluate (skips training)")
    p.add_argument("--fixed-depths", default="1,2,3,4,6,8,12,16,24,32")
    p.add_argument("--thresholds", default="0.5,0.7,0.8,0.9,0.95,0.98,0.99,0.995")
    p.add_argument("--max-depth", type=int, default=32)
    p.add_argument("--breadth", type=int, default=1)
    p.add_argument("--select", default="halt", choices=["residual", "vote", "halt"])
    p.add_argument("--easy-share", type=float, default=0.25)
    p.add_argument(
        "--eval-size",
        type=int,
        default=800,
        help="held-out puzzles: half validation, half test (each with its easy share)",
    )
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/eqr_halting"))
    own, rest = p.parse_known_args(argv)
    forwarded = rest + ["--only", "eqr", "--output-dir", str(own.output_dir), "--test-size", str(own.eval_size)]
    train_args = sudoku.parse(forwarded + (["--quick", "--test-size", "32"] if own.quick else []))
    if own.quick:
        own.fixed_depths, own.thresholds, own.max_depth = "1,2,4", "0.5,0.9", 4
    own.fixed_depths = [int(x) for x in own.fixed_depths.split(",")]
    own.thresholds = [float(x) for x in own.thresholds.split(",")]
    if not 0 < own.easy_share <= 1:
        p.error("--easy-share must be in (0, 1]")
    return own, train_args


def easy_split(test, share: float) -> list[int]:
    """Indices of the ``share`` of puzzles rated easiest (lowest rating, ties to more clues)."""
    clues = test["clues"] if "clues" in test.column_names else [0] * len(test)
    order = sorted(range(len(test)), key=lambda i: (test["rating"][i], -clues[i], i))
    return sorted(order[: max(1, round(share * len(test)))])


@torch.no_grad()
def run_point(model, test, depth: int, breadth: int, select: str, threshold, seed: int, batch: int = 256) -> dict:
    """Per puzzle: solved (bool) and NFE, and the wall time of the whole pass."""
    generator = torch.Generator().manual_seed(seed)
    solved, nfe = [], []
    started = time.perf_counter()
    for start in range(0, len(test), batch):
        rows = test[start : start + batch]
        out = model.solve(
            rows["inputs"], depth=depth, breadth=breadth, select=select, halt_threshold=threshold, generator=generator
        )
        solved.append((out.answers == rows["labels"]).all(-1))
        nfe.append(out.nfe)
    return {"solved": torch.cat(solved), "nfe": torch.cat(nfe).double(), "seconds": time.perf_counter() - started}


def summarise(point: dict) -> dict:
    return {
        "accuracy": float(point["solved"].double().mean()),
        "mean_nfe": float(point["nfe"].mean()),
        "seconds": point["seconds"],
    }


def sweep(model, test, args) -> dict:
    """Every fixed depth and threshold, run (and timed) on the easy share and on all of ``test``; per point its
    per-puzzle results (:func:`summaries` gives what the JSON keeps)."""
    splits = {"easy": test.select(easy_split(test, args.easy_share)), "all": test}
    result = {}
    for split, rows in splits.items():
        rows = rows.with_format("torch")
        fixed = {d: run_point(model, rows, d, args.breadth, args.select, None, 0) for d in args.fixed_depths}
        halting = {p: run_point(model, rows, args.max_depth, args.breadth, args.select, p, 0) for p in args.thresholds}
        result[split] = {"puzzles": len(rows), "fixed": fixed, "halting": halting}
    return result


def summaries(swept: dict) -> dict:
    """``swept`` with each point's summary in place of its per-puzzle results."""
    return {
        split: {
            "puzzles": res["puzzles"],
            "fixed": {d: summarise(p) for d, p in res["fixed"].items()},
            "halting": {t: summarise(p) for t, p in res["halting"].items()},
        }
        for split, res in swept.items()
    }


def choose(validation: dict, test: dict) -> dict:
    """Per split: the reference depth and the threshold chosen on ``validation`` (the cheapest of equal accuracy,
    :mod:`comparisons`) and how the two compare on ``test``."""
    chosen = {}
    for split, val in summaries(validation).items():
        n = val["puzzles"]
        depth = cheapest_of_equal_accuracy(val["fixed"], n, "mean_nfe")
        threshold = cheapest_of_equal_accuracy(val["halting"], n, "mean_nfe", val["fixed"][depth]["accuracy"])
        fixed = test[split]["fixed"][depth]
        row = {"reference_depth": depth, "threshold": threshold, "validation_puzzles": n}
        row.update(test_puzzles=test[split]["puzzles"], test_depth=summarise(fixed))
        if threshold is not None:
            halt = test[split]["halting"][threshold]
            diff, se = paired_difference(halt["solved"].tolist(), fixed["solved"].tolist())
            row.update(test_halting=summarise(halt), accuracy_difference=diff, difference_se=se)
            row["nfe_ratio"] = row["test_depth"]["mean_nfe"] / row["test_halting"]["mean_nfe"]
            row["time_ratio"] = fixed["seconds"] / halt["seconds"]
            row["equal_accuracy_on_test"] = of_equal_accuracy(
                row["test_halting"]["accuracy"], row["test_depth"]["accuracy"], row["test_puzzles"]
            )
        chosen[split] = row
    return chosen


def report(results: dict, args) -> None:
    for part in ("validation", "test"):
        for split, res in results[part].items():
            print(
                f"\n{part}, {split} held-out puzzles ({res['puzzles']}), breadth {args.breadth}, select {args.select}"
            )
            print("  fixed depth   exact  mean NFE  seconds")
            for d, s in res["fixed"].items():
                print(f"  {d:>11} {100 * s['accuracy']:6.1f}% {s['mean_nfe']:9.1f} {s['seconds']:8.2f}")
            print(f"  halt p (max {args.max_depth})")
            for p, s in res["halting"].items():
                print(f"  {p:>11} {100 * s['accuracy']:6.1f}% {s['mean_nfe']:9.1f} {s['seconds']:8.2f}")
    for split, row in results["chosen"].items():
        print(f"\n{split}: chosen on validation: fixed depth {row['reference_depth']}, threshold {row['threshold']}")
        if row["threshold"] is None:
            print("  no threshold of equal accuracy on validation")
            continue
        d, h = row["test_depth"], row["test_halting"]
        print(
            f"  test: depth {100 * d['accuracy']:.1f}% at {d['mean_nfe']:.1f} NFE, halting {100 * h['accuracy']:.1f}% at "
            f"{h['mean_nfe']:.1f} NFE: {row['nfe_ratio']:.2f}x fewer evaluations ({row['time_ratio']:.2f}x time), "
            f"difference {100 * row['accuracy_difference']:+.1f} +- {100 * row['difference_se']:.1f} pts, "
            f"equal accuracy on test: {row['equal_accuracy_on_test']}"
        )


def plot(result: dict, args, path: Path) -> None:
    """Accuracy against mean NFE on the test half: fixed depths and halting thresholds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(result), figsize=(5 * len(result), 3.8))
    for ax, (split, res) in zip(axes, result.items()):
        fixed, halting = res["fixed"], res["halting"]
        ax.plot(
            [s["mean_nfe"] for s in fixed.values()],
            [100 * s["accuracy"] for s in fixed.values()],
            "o-",
            label="fixed depth",
        )
        ax.plot(
            [s["mean_nfe"] for s in halting.values()],
            [100 * s["accuracy"] for s in halting.values()],
            "s-",
            label=f"halting (max depth {args.max_depth})",
        )
        for p, s in halting.items():
            ax.annotate(
                f"{p:g}", (s["mean_nfe"], 100 * s["accuracy"]), fontsize=7, xytext=(3, -8), textcoords="offset points"
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("mean function evaluations per puzzle")
        ax.set_ylabel("exact solve (%)")
        ax.set_title(f"test half, {split} ({res['puzzles']})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> dict:
    args, train_args = parse(argv)
    data, train_args.vocab_size = sudoku.load_task(train_args)
    results = {
        "args": {k: str(v) for k, v in {**vars(train_args), **vars(args)}.items() if k != "split_census"},
        "split_census": train_args.split_census,
    }
    if args.model is not None:
        model = EqRForPuzzleSolving.from_pretrained(args.model)
    else:
        model, seconds, log = sudoku.train(train_args, "eqr", data)
        results["train_seconds"], results["log"], results["recipe"] = seconds, log, train_args.recipe
        print(f"  trained EqR in {seconds:.0f} s")
        model.save_pretrained(args.output_dir / "model")
    half = len(data["test"]) // 2
    swept = {
        "validation": sweep(model.eval(), data["test"].select(range(half)), args),
        "test": sweep(model, data["test"].select(range(half, len(data["test"]))), args),
    }
    results.update({part: summaries(res) for part, res in swept.items()})
    results["chosen"] = choose(swept["validation"], swept["test"])
    report(results, args)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    try:
        plot(results["test"], args, args.output_dir / "eqr_halting.png")
        print(f"wrote {args.output_dir / 'eqr_halting.png'}")
    except ImportError:
        print("matplotlib is not installed: no plot")
    results_json.save_results((args.output_dir / "eqr_halting.json"), results, indent=2, default=str)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
