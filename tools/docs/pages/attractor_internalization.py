"""The tables of ``docs/benchmarks/attractor_internalization.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import (
    PUBLISHED_CHOICES,
    _end_shares,
    _published_files,
    internalization_run,
    published_runs,
    run_set,
)
from tools.docs.results import markdown, pct


def internalization_cells(run: dict) -> list[str]:
    """One run's cells: iterations at the first and last evaluation (and their minimum), the held-out accuracy at
    T=0, T=1 and T* at the end, the gap T* - T=0, and the run's length (and its GPU, where it ran on one)."""
    first, last = run["rows"][0], run["rows"][-1]
    steps = [r["iterations"] for r in run["rows"]]
    at = [last["accuracy"].get(t) for t in ("0", "1", run["args"]["budget"])]  # T=0 (none for deq), T=1, T*
    where = "" if run.get("device", "cpu") == "cpu" else f" on an {run['device'].removeprefix('NVIDIA ')}"
    return [
        f"{first['iterations']:.1f} → {last['iterations']:.1f} (min {min(steps):.1f})",
        " / ".join("n/a" if a is None else pct(a) for a in at),
        "n/a" if at[0] is None else f"{100 * (at[2] - at[0]):+.1f}",
        f"{run['args']['steps']} steps, {run['train_seconds'] / 60:.0f} min{where}",
    ]


INTERNALIZATION_HEADER = ["iterations: start → end", "T=0 / T=1 / T* at the end", "T* − T=0", "run"]


def attractor_internalization() -> str:
    """A row per run (one not made yet says so), with :func:`internalization_cells`."""
    rows = []
    for name in run_set("attractor_internalization"):
        task, form, gradient = name.split("-", 2)
        label = [task, f"`{form}`", gradient.replace("-", "_")]
        run = internalization_run(name)
        rows.append([*label, "not run yet", "", "", ""] if run is None else [*label, *internalization_cells(run)])
    return markdown(["task", "map", "gradient", *INTERNALIZATION_HEADER], rows)


def _published_label(run: dict) -> str:
    """The choices as the tables name them ("all four", "`gates` alone", "`gates` + `optimizer`"), with the learning
    rate where ``--lr`` set it."""
    choices = run["published"]["choices"]
    label = "all four" if len(choices) == len(PUBLISHED_CHOICES) else " + ".join(f"`{c}`" for c in choices)
    label += " alone" if len(choices) == 1 else ""
    lr = run["published"]["training"].get("learning_rate")
    return label + (f" at lr {lr:g}" if run["args"].get("lr_given") == "True" and lr is not None else "")


def attractor_published() -> str:
    """A row per ``published-<choices>-<task>-seed<k>`` run: the paper's map with the published code's choices."""
    rows = []
    runs = [json.loads(path.read_text()) for path in _published_files()]
    for run in sorted(runs, key=lambda run: run["args"]["task"]):  # stable: by choices and seed within a task
        own = [r.get("iterations_per_sample", r["iterations"]) for r in run["rows"]]
        least = min(range(1, len(own)), key=own.__getitem__)
        trace = f"{own[0]:.1f} → {own[1]:.1f} (step {run['rows'][1]['step']}) → least {own[least]:.1f} (step "
        trace += f"{run['rows'][least]['step']}) → {own[-1]:.1f}"
        rows.append(
            [run["args"]["task"], _published_label(run), run["args"]["seed"], *internalization_cells(run), trace]
        )
    header = ["task", "the published code's choices", "seed", *INTERNALIZATION_HEADER]
    return markdown(header + ["the rows' own iterations: start → first evaluation → least after it → end"], rows)


def paper_baseline(task: str, device: str) -> dict | None:
    """The paper's map with the paper's choices on ``task`` (seed 0) trained on ``device`` (``cpu`` or a GPU's
    name), so that a published choice is compared with a run on the same kind of machine."""
    for path in sorted(
        (docs_results.RESULTS / "attractor_internalization").glob(f"{task}-paper-one-step*/internalization.json")
    ):
        run = json.loads(path.read_text())
        if run.get("device", "cpu") == device:
            return run
    return None


def _beyond_binomial(a: float, b: float, n: int) -> str:
    """``"SE: yes"`` where two shares of ``n`` rows each differ by more than two binomial standard errors of the
    difference (the two runs taken as independent samples), else ``"SE: no"``."""
    se = ((a * (1 - a) + b * (1 - b)) / n) ** 0.5
    return f"{100 * se:.1f}: " + ("yes" if abs(a - b) > 2 * se else "no")


def attractor_published_singles(task: str = "addition") -> str:
    """Each published choice alone (seed 0) against the paper's map with the paper's choices (seed 0, the same data):
    the end's T=0 and T*, and the change in T=0 (the internalization measure) against two standard errors: the
    binomial one of the held-out rows alone (the two runs taken as independent samples), and one that also counts
    the spread between seeds, ``sqrt(2)`` times the standard deviation of T=0 over the seeds of all four choices
    together; and the change in T* with its binomial standard error. The paper's run is the one trained on the same
    kind of machine as the single choices."""
    singles = published_runs(task, "gates").get(0)
    base = None if singles is None else paper_baseline(task, singles.get("device", "cpu"))
    if base is None:
        return "not run yet"
    b0, _, b_star = _end_shares(base)
    n = int(base["args"]["test_size"])
    combined = [_end_shares(run)[0] for run in published_runs(task, "all").values()]
    spread = statistics.stdev(combined) * 2**0.5 if len(combined) > 1 else None
    rows = [["none (the paper's)", pct(b0), pct(b_star), "", "", "", ""]]
    for choice in (*PUBLISHED_CHOICES, "gates+batch_stop+optimizer", "all"):
        run = published_runs(task, choice).get(0)
        label = "all four" if choice == "all" else " + ".join(f"`{c}`" for c in choice.split("+"))
        label += " alone" if choice in PUBLISHED_CHOICES else ""
        if run is None and "+" in choice:  # an optional combination: a row only where it was run
            continue
        if run is None:
            rows.append([label, "not run yet", "", "", "", "", ""])
            continue
        t0, _, t_star = _end_shares(run)
        change = t0 - b0
        seeds = "n/a" if spread is None else f"{100 * spread:.1f}: " + ("yes" if abs(change) > 2 * spread else "no")
        moved = _beyond_binomial(t0, b0, n)
        solved = f"{100 * (t_star - b_star):+.1f} ({_beyond_binomial(t_star, b_star, n)})"
        rows.append([label, pct(t0), pct(t_star), f"{100 * change:+.1f}", moved, seeds, solved])
    header = ["published choices (seed 0)", "T=0 at the end", "T* at the end", "T=0 change vs the paper's (pts)"]
    header += ["binomial SE: beyond 2 SE?", "SE with the seeds' spread: beyond 2 SE?", "T* change (pts; binomial SE)"]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "attractor-published": attractor_published,
    "attractor-published-singles": attractor_published_singles,
    "attractor-published-singles-sudoku": lambda: attractor_published_singles("sudoku"),
    "attractor-internalization": attractor_internalization,
}
