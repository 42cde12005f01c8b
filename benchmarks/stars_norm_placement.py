"""The STARS paper's norm diagnosis on our runs: the loop trajectory of models that differ only in
``OuroConfig.norm_placement`` (``sandwich``, ``pre``, ``post``), each trained plain (fixed loops) and with STARS by
``bench_stars_addition.py`` on the same data, cut and seed. The paper's claim: pre-norm states diverge over loops,
post-norm ones stall, a STARS-trained loop settles.

This script trains nothing: it reads the finished runs (``runs/<kind>_seed<seed>.json`` under each placement's
``--output-dir`` of ``bench_stars_addition.py``), puts side by side what the trajectory diagnostic recorded for each
(the state's norm and the relative step per loop step, the spectral-radius estimates, ``diverged_at``) with the
run's exact match, and plots the trajectories (``trajectories.png``) into ``--output-dir`` with ``results.json``.

    python benchmarks/stars_norm_placement.py --runs sandwich=docs/results/stars_equilibria_addition4 \\
        pre=docs/results/stars_norm_pre post=docs/results/stars_norm_post --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import results_json

PLACEMENTS = ("sandwich", "pre", "post")
#: the loop steps (1-based) and the loop counts at which the table reads the trajectory and the accuracy
READ_AT = (4, 16, 64, 100)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--runs",
        nargs="+",
        required=True,
        metavar="PLACEMENT=FOLDER",
        help=f"each placement ({', '.join(PLACEMENTS)}) and the --output-dir of its bench_stars_addition.py runs",
    )
    p.add_argument("--kinds", default="plain,stars", help="the training kinds compared (comma-separated)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the runs compared")
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/stars_norm_placement"))
    args = p.parse_args(argv)
    folders = {}
    for item in args.runs:
        placement, sep, folder = item.partition("=")
        if not sep or placement not in PLACEMENTS:
            p.error(f"--runs takes PLACEMENT=FOLDER with PLACEMENT one of {', '.join(PLACEMENTS)}; got {item!r}")
        folders[placement] = Path(folder)
    args.runs, args.kinds = folders, [k for k in args.kinds.split(",") if k]
    return args


def read_run(folder: Path, placement: str, kind: str, seed: int) -> dict:
    """One finished run's JSON, checked to be of this placement."""
    path = folder / "runs" / f"{kind}_seed{seed}.json"
    if not path.is_file():
        raise SystemExit(
            f"--runs {placement}={folder}: no finished run {path.name} (train it with bench_stars_addition.py)"
        )
    run = json.loads(path.read_text())
    recorded = run.get("norm_placement") or run["dynamics"]["model"].get("norm_placement", "sandwich")
    if recorded != placement:
        raise SystemExit(f"--runs {placement}={folder}: {path.name} was trained with norm_placement={recorded!r}")
    return run


def at_step(values: list[float], step: int) -> float | None:
    """The value at loop step ``step`` (1-based) of a per-step list, None past its end (the loop diverged)."""
    return values[step - 1] if step <= len(values) else None


def row(run: dict) -> dict:
    """What the table and the note read of one run."""
    dyn = run["dynamics"]
    return {
        "accuracy": {str(n): run["accuracy"].get(str(n)) for n in READ_AT},
        "state_norm": {str(t): at_step(dyn["state_norm"], t) for t in READ_AT},
        "relative_step": {str(t): at_step(dyn["relative_step"], t) for t in READ_AT},
        "spectral_radius": {str(t): dyn["spectral_radius"].get(str(t)) for t in READ_AT},
        "start_norm": dyn["start_norm"],
        "diverged_at": dyn["diverged_at"],
        "recipe": run["recipe"],
    }


def plot(runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (norms, steps) = plt.subplots(1, 2, figsize=(11, 4))
    colours = dict(zip(PLACEMENTS, ("tab:blue", "tab:red", "tab:green")))
    for placement, by_kind in runs.items():
        for kind, run in by_kind.items():
            dyn, style = run["dynamics"], "-" if kind == "stars" else ("--" if kind == "plain" else ":")
            label = f"{placement}, {kind}"
            t = range(1, len(dyn["state_norm"]) + 1)
            norms.plot(t, dyn["state_norm"], style, color=colours[placement], label=label)
            steps.plot(t, dyn["relative_step"], style, color=colours[placement], label=label)
    for axis, title, ylabel in (
        (norms, "does the state grow?", "mean norm of a position's state"),
        (steps, "does the state settle?", "||z_t - z_(t-1)|| / ||z_(t-1)||"),
    ):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("loop step t")
        axis.set_ylabel(ylabel)
        axis.set_title(title)
    steps.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    runs = {
        placement: {kind: read_run(folder, placement, kind, args.seed) for kind in args.kinds}
        for placement, folder in sorted(args.runs.items(), key=lambda item: PLACEMENTS.index(item[0]))
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    plot(runs, args.output_dir / "trajectories.png")
    payload = {
        "command": "python benchmarks/stars_norm_placement.py " + " ".join(argv),
        "seed": args.seed,
        "sources": {placement: str(folder) for placement, folder in args.runs.items()},
        "read_at": list(READ_AT),
        "placements": {p: {kind: row(run) for kind, run in by_kind.items()} for p, by_kind in runs.items()},
    }
    results_json.save_results(args.output_dir / "results.json", payload, indent=1, default=str)
    for placement, by_kind in payload["placements"].items():
        for kind, r in by_kind.items():
            print(f"{placement:<9}{kind:<9}norm {r['state_norm']}  step {r['relative_step']}  acc {r['accuracy']}")
    return payload


if __name__ == "__main__":
    main()
