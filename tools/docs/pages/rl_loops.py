"""The tables of ``docs/benchmarks/rl_loops.md``, from ``docs/results/rl/`` (``benchmarks/bench_rl_loops.py``)."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.engine import RESULTS, load, markdown

NAMES = {
    "grpo": "GRPO, 4 loops",
    "rltt": "RLTT (exit_pdf weights), 4 loops",
    "grpo_sampled": "GRPO, loops drawn 2-8 per step",
}


def _ordered(by_objective: dict) -> list[str]:
    """The objectives of ``by_objective`` in the page's order (GRPO, RLTT, sampled loops), then any others."""
    return [o for o in NAMES if o in by_objective] + sorted(set(by_objective) - set(NAMES))


def _cell(cell: dict) -> str:
    se = f" ± {100 * cell['se']:.1f}" if cell.get("se") is not None else ""
    return f"{100 * cell['mean']:.1f}%{se}"


def rl_loops() -> str:
    """Exact match on the 200 held-out sums per loop count: the base model, then each objective's mean ± s.e."""
    summary = load("rl/summary.json")
    loops = list(summary["base"])
    rows = [["base (recipe stopped early)", *(f"{100 * summary['base'][n]:.1f}%" for n in loops)]]
    for objective in _ordered(summary["objectives"]):
        cells, n = summary["objectives"][objective], len(summary["seeds"][objective])
        rows.append([f"{NAMES.get(objective, objective)} ({n} seeds)", *(_cell(cells[n_]) for n_ in loops)])
    return markdown(["model \\ loops", *loops], rows)


def rl_loops_minus_grpo() -> str:
    """Each objective minus GRPO, paired by seed: mean ± standard error of the difference, in points."""
    summary = load("rl/summary.json")
    loops = list(summary["base"])
    rows = []
    for objective in _ordered(summary["minus_grpo"]):
        cells = summary["minus_grpo"][objective]
        rows.append(
            [
                NAMES.get(objective, objective),
                *(f"{100 * cells[n]['mean']:+.1f} ± {100 * cells[n]['se']:.1f}" for n in loops),
            ]
        )
    return markdown(["minus GRPO (points)", *(f"{n}" for n in loops)], rows)


def rl_loops_runs() -> str:
    """Every run: objective, seed, learning rate, mean step time, accuracy at each loop count."""
    runs = [load(f"rl/{p.name}") for p in sorted((RESULTS / "rl").glob("*_seed*.json"))]
    order = {o: i for i, o in enumerate(_ordered({r["objective"]: r for r in runs}))}
    runs.sort(key=lambda r: (order[r["objective"]], r["seed"]))
    loops = list(load("rl/base.json")["accuracy"])
    rows = [
        [
            NAMES.get(r["objective"], r["objective"]),
            str(r["seed"]),
            f"{r['learning_rate']:g}",
            f"{r['step_time_s']:.2f} s",
            *(f"{100 * r['accuracy'][n]:.1f}" for n in loops),
        ]
        for r in runs
    ]
    return markdown(["objective", "seed", "lr", "step", *(f"{n}" for n in loops)], rows)


def rl_loops_sweep() -> str:
    """The learning rates tried on seed 0, scored on the validation split at 4 loops."""
    sweep = load("rl/sweep.json")
    rates = sorted({rate for tried in sweep.values() for rate in tried}, key=float)
    rows = [
        [NAMES.get(o, o), *(f"{100 * tried[r]:.1f}%" if r in tried else "" for r in rates)]
        for o, tried in ((o, sweep[o]) for o in _ordered(sweep))
    ]
    return markdown(["objective", *(f"lr {r}" for r in rates)], rows)


def rl_loops_cost() -> str:
    """A step of each objective against plain GRPO, measured side by side (``cost.json``)."""
    cost = load("rl/cost.json")
    rows = [
        [
            NAMES.get(o, o),
            f"{cost['median_step_s'][o]:.3f} s",
            f"{cost['vs_grpo'][o]:.2f}x",
            str(cost["steps_timed"][o]),
        ]
        for o in _ordered(cost["median_step_s"])
    ]
    return markdown(["objective", "median step", "vs GRPO", "steps timed"], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "rl-loops": rl_loops,
    "rl-loops-minus-grpo": rl_loops_minus_grpo,
    "rl-loops-cost": rl_loops_cost,
    "rl-loops-runs": rl_loops_runs,
    "rl-loops-sweep": rl_loops_sweep,
}
