"""Merge per-kind runs of ``bench_eqr_sudoku.py`` into one ablation table and plot.

The ablation kinds take 20-45 minutes each at 6x6, so they are trained one per process, each into its own folder:

    for k in feedforward weight_tied eqr ri_only ni_only untied eqr_offline; do
      python benchmarks/bench_eqr_sudoku.py --size 6 --min-clues 18 --steps 2400 --augmentations 2 \\
        --kinds $k --output-dir docs/results/eqr_ablation_6x6/$k
    done
    python benchmarks/eqr_ablation_summary.py docs/results/eqr_ablation_6x6

This script checks that every run had the same budget and data (all options but ``--kinds``/``--only``/
``--output-dir``), then prints a markdown table (exact solve by depth with the mean final residual, the selection
rules at the deepest depth and widest breadth, training time) and writes ``summary.json`` and ``ablation.png``
into the folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_json  # noqa: E402  (benchmarks/ is the script folder)
from bench_eqr_sudoku import KINDS, looped  # noqa: E402

from tools.docs.pages.eqr_ablations import depth_table, selection_table  # noqa: E402

PER_RUN = {"kinds", "only", "output_dir"}  # the options allowed to differ between the merged runs


def load_runs(folder: Path) -> tuple[dict[str, dict], dict]:
    """({kind: its result}, the shared options) from every ``<folder>/*/eqr_sudoku.json``, kinds in the
    ablation's order; refuses runs whose budget or data differ, or a kind found twice."""
    runs, reference = {}, None
    for path in sorted(folder.glob("*/eqr_sudoku.json")):
        result = json.loads(path.read_text())
        shared = {k: v for k, v in result["args"].items() if k not in PER_RUN}
        if reference is None:
            reference = (path, shared)
        elif shared != reference[1]:
            diff = sorted(k for k in shared.keys() | reference[1].keys() if shared.get(k) != reference[1].get(k))
            raise SystemExit(f"{path} and {reference[0]} differ in {diff}: not an equal-budget comparison")
        for kind in KINDS:
            if kind in result:
                if kind in runs:
                    raise SystemExit(f"kind {kind!r} appears twice under {folder}")
                runs[kind] = result[kind]
    if not runs:
        raise SystemExit(f"no */eqr_sudoku.json under {folder}")
    return {kind: runs[kind] for kind in KINDS if kind in runs}, reference[1]


def markdown(runs: dict[str, dict]) -> str:
    """Both tables, as printed."""
    return "\n\n".join(t for t in (depth_table(runs), selection_table(runs)) if t)


def plot(runs: dict[str, dict], shared: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for kind, r in runs.items():
        depths = sorted(int(d) for d in r["accuracy_by_depth"])
        style = "-o" if len(depths) > 1 else "D"
        (line,) = axes[0].plot(depths, [100 * r["accuracy_by_depth"][str(d)] for d in depths], style, label=kind)
        if looped(kind):  # an untied stack has no shared map, so no fixed-point residual
            axes[1].plot(depths, [r["residual_by_depth"][str(d)] for d in depths], style, color=line.get_color())
    labels = ("exact solve, one trajectory (%)", "mean final relative residual (weight-tied kinds)")
    for ax, ylabel in zip(axes, labels):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("depth (block applications)")
        ax.set_ylabel(ylabel)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=8)
    size = shared.get("size", "?")
    fig.suptitle(
        f"{shared.get('task', 'sudoku')} {size}x{size}: the ablation, {shared.get('steps')} supervised segment batches each"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="holds one sub-folder per run of bench_eqr_sudoku.py")
    args = p.parse_args(argv)
    runs, shared = load_runs(args.folder)
    table = markdown(runs)
    print(table)
    summary = {"args": shared, "kinds": runs, "table": table}
    results_json.save_results((args.folder / "summary.json"), summary, indent=2)
    try:
        plot(runs, shared, args.folder / "ablation.png")
        print(f"wrote {args.folder / 'ablation.png'}")
    except ImportError:
        print("matplotlib is not installed: no plot")
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
