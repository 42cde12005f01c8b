"""Adaptive computation at inference for the Equilibrium Reasoner: accuracy against function evaluations (NFE) when
each puzzle stops as soon as its halting head is confident (`solve(..., halt_threshold=p)`), beside fixed depths.

An EqR model is trained exactly as `bench_eqr_sudoku.py` trains its EqR (every training option of that script is
accepted here, e.g. ``--size 6 --min-clues 18``), or loaded with ``--model``. On held-out puzzles it is then run

* at each fixed depth of ``--fixed-depths`` (NFE = depth x breadth), and
* with halting at each threshold of ``--thresholds``, up to ``--max-depth`` iterations (NFE = the block
  applications each puzzle actually ran, summed over its restarts),

and scored on all held-out puzzles and on the easy split: the ``--easy-share`` of them the generator rates easiest
(fewest dead ends of the reference solver, ties to the puzzle with more clues). For every threshold the table
names the cheapest fixed depth that is at least as accurate, and the ratio of the two NFEs (and of the two wall
times, measured in the same run). The paper reports the same accuracy at 11.34x fewer evaluations on easy puzzles.

    python benchmarks/bench_eqr_halting.py                          # 4x4 Sudoku
    python benchmarks/bench_eqr_halting.py --size 6 --min-clues 18 --steps 2400 --augmentations 2 \\
        --output-dir docs/results/eqr_halting_6x6
    python benchmarks/bench_eqr_halting.py --quick                  # seconds; a test runs this
    python benchmarks/bench_eqr_halting.py --rematch docs/results/eqr_halting_6x6/eqr_halting.json
                                    # recompute the fixed-depth comparisons of a saved run (no training)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import bench_eqr_sudoku as sudoku
import doc_tables
import torch

from equilibria import EqRForPuzzleSolving


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--model", type=Path, default=None, help="a saved EqR folder to evaluate (skips training)")
    p.add_argument("--rematch", type=Path, default=None, help="only recompute the comparisons of a saved JSON")
    p.add_argument("--fixed-depths", default="1,2,3,4,6,8,12,16,24,32")
    p.add_argument("--thresholds", default="0.5,0.7,0.8,0.9,0.95,0.98,0.99,0.995")
    p.add_argument("--max-depth", type=int, default=32)
    p.add_argument("--breadth", type=int, default=1)
    p.add_argument("--select", default="halt", choices=["residual", "vote", "halt"])
    p.add_argument("--easy-share", type=float, default=0.25)
    p.add_argument("--eval-size", type=int, default=800, help="held-out puzzles (the easy split is a share of them)")
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/eqr_halting_4x4"))
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


def match(halting: dict, fixed: dict[int, dict]) -> dict:
    """Against this halting point: the cheapest fixed depth at least as accurate (``matched_*``, None when every
    fixed depth is less accurate) and the most accurate fixed depth (``best_*``, the cheapest among ties), with
    the NFE and wall-time ratios fixed / halting and the accuracy of halting minus that of the fixed depth."""
    out = {}
    enough = [d for d, s in sorted(fixed.items()) if s["accuracy"] >= halting["accuracy"]]
    best = max(sorted(fixed), key=lambda d: fixed[d]["accuracy"])
    for name, depth in (("matched", enough[0] if enough else None), ("best", best)):
        point = fixed.get(depth)
        out[f"{name}_depth"] = depth
        out[f"{name}_nfe_ratio"] = point and point["mean_nfe"] / halting["mean_nfe"]
        out[f"{name}_time_ratio"] = point and point["seconds"] / halting["seconds"]
        out[f"{name}_accuracy_gain"] = point and halting["accuracy"] - point["accuracy"]
    return out


def sweep(model, test, args) -> dict:
    """Every fixed depth and threshold, run (and timed) on the easy split and on all puzzles."""
    splits = {"easy": test.select(easy_split(test, args.easy_share)), "all": test}
    result = {}
    for split, rows in splits.items():
        rows = rows.with_format("torch")
        fixed = {d: summarise(run_point(model, rows, d, args.breadth, args.select, None, 0)) for d in args.fixed_depths}
        halting = {}
        for p in args.thresholds:
            halting[p] = summarise(run_point(model, rows, args.max_depth, args.breadth, args.select, p, 0))
            halting[p].update(match(halting[p], fixed))
        result[split] = {"puzzles": len(rows), "fixed": fixed, "halting": halting}
    return result


def report(result: dict, args) -> None:
    for split, res in result.items():
        print(f"\n{split} held-out puzzles ({res['puzzles']}), breadth {args.breadth}, select {args.select}")
        print("  fixed depth   exact  mean NFE  seconds")
        for d, s in res["fixed"].items():
            print(f"  {d:>11} {100 * s['accuracy']:6.1f}% {s['mean_nfe']:9.1f} {s['seconds']:8.2f}")
        print(
            f"  halt p (max {args.max_depth})  exact  mean NFE  seconds   NFE / time ratio to the cheapest fixed depth "
            "as accurate | to the most accurate fixed depth (accuracy gain)"
        )
        for p, s in res["halting"].items():
            matched = (
                f"depth {s['matched_depth']}: {s['matched_nfe_ratio']:.2f}x / {s['matched_time_ratio']:.2f}x"
                if s["matched_depth"] is not None
                else "none as accurate"
            )
            best = (
                f"depth {s['best_depth']}: {s['best_nfe_ratio']:.2f}x / {s['best_time_ratio']:.2f}x "
                f"({100 * s['best_accuracy_gain']:+.1f} pts)"
            )
            print(
                f"  {p:>14} {100 * s['accuracy']:6.1f}% {s['mean_nfe']:9.1f} {s['seconds']:8.2f}   {matched} | {best}"
            )


def plot(result: dict, args, path: Path) -> None:
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
        ax.set_title(f"{split} held-out puzzles ({res['puzzles']})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def rematch(path: Path) -> None:
    """Recompute the derived comparisons of a saved ``eqr_halting.json`` (after a change to `match`)."""
    results = json.loads(path.read_text())
    for split in ("easy", "all"):
        fixed = {int(d): s for d, s in results[split]["fixed"].items()}
        for point in results[split]["halting"].values():
            point.update(match(point, fixed))
    doc_tables.save_results(path, results, indent=2, default=str)


def main(argv=None) -> dict:
    args, train_args = parse(argv)
    if args.rematch is not None:
        rematch(args.rematch)
        return json.loads(args.rematch.read_text())
    data, train_args.vocab_size = sudoku.load_task(train_args)
    results = {"args": {k: str(v) for k, v in {**vars(train_args), **vars(args)}.items()}}
    if args.model is not None:
        model = EqRForPuzzleSolving.from_pretrained(args.model)
    else:
        model, seconds, log = sudoku.train(train_args, "eqr", data)
        results["train_seconds"], results["log"] = seconds, log
        print(f"  trained EqR in {seconds:.0f} s")
        model.save_pretrained(args.output_dir / "model")
    result = sweep(model.eval(), data["test"], args)
    report(result, args)
    results.update(result)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    try:
        plot(result, args, args.output_dir / "eqr_halting.png")
        print(f"wrote {args.output_dir / 'eqr_halting.png'}")
    except ImportError:
        print("matplotlib is not installed: no plot")
    doc_tables.save_results((args.output_dir / "eqr_halting.json"), results, indent=2, default=str)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
