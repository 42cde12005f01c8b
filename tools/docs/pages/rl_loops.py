"""The tables of ``docs/benchmarks/rl_loops.md``, from ``docs/results/rl/`` (``benchmarks/bench_rl_loops.py``)."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import RESULTS, load, markdown

NAMES = {
    "grpo": "GRPO, 4 loops",
    "rltt": "RLTT (exit_pdf weights), 4 loops",
    "grpo_sampled": "GRPO, loops drawn 2-8 per step",
    "sft_wall": "SFT continued, GRPO's wall time",
    "sft_tokens": "SFT continued, GRPO's completion tokens",
    "base": "the base",
}


def _ordered(by_arm: dict) -> list[str]:
    """The arms of ``by_arm`` in the page's order (GRPO, RLTT, sampled loops, the SFT controls), then any others."""
    return [a for a in NAMES if a in by_arm] + sorted(set(by_arm) - set(NAMES))


def _cell(cell: dict) -> str:
    se = f" ± {100 * cell['se']:.1f}" if cell.get("se") is not None else ""
    return f"{100 * cell['mean']:.1f}%{se}"


def rl_loops() -> str:
    """Exact match on the 200 held-out sums per loop count: the base model, then each arm's mean ± s.e."""
    summary = load("rl/summary.json")
    loops = list(summary["base"])
    rows = [["base (recipe stopped early)", *(f"{100 * summary['base'][n]:.1f}%" for n in loops)]]
    for arm in _ordered(summary["arms"]):
        cells, n = summary["arms"][arm], len(summary["seeds"][arm])
        rows.append([f"{NAMES.get(arm, arm)} ({n} seeds)", *(_cell(cells[n_]) for n_ in loops)])
    return markdown(["model \\ loops", *loops], rows)


def rl_loops_minus_grpo() -> str:
    """Each arm minus GRPO, paired by seed: mean ± standard error of the difference, in points."""
    summary = load("rl/summary.json")
    loops = list(summary["base"])
    rows = []
    for arm in _ordered(summary["minus_grpo"]):
        cells = summary["minus_grpo"][arm]
        rows.append(
            [NAMES.get(arm, arm), *(f"{100 * cells[n]['mean']:+.1f} ± {100 * cells[n]['se']:.1f}" for n in loops)]
        )
    return markdown(["minus GRPO (points)", *(f"{n}" for n in loops)], rows)


def rl_loops_paired() -> str:
    """The per-problem paired tests at 4 loops: per seed the problems gained and lost and McNemar's p (marked
    where Holm's correction over the family keeps it), the difference paired by seed, and the verdict."""
    paired = load("rl/summary.json")["paired_tests"]
    tests = list(paired["tests"].values())
    seeds = sorted({s for t in tests for s in t["seeds"]}, key=int)
    rows = []
    for test in tests:
        cells = [test["seeds"].get(s) for s in seeds]
        rows.append(
            [
                f"{NAMES.get(test['a'], test['a'])} vs {NAMES.get(test['b'], test['b'])}",
                *(_paired_cell(c) if c else "" for c in cells),
                f"{100 * test['difference']['mean']:+.1f} ± {100 * (test['difference']['se'] or 0):.1f}",
                test["verdict"],
            ]
        )
    return markdown(["comparison", *(f"seed {s}: +/- (p)" for s in seeds), "difference (points)", "verdict"], rows)


def _paired_cell(cell: dict) -> str:
    mark = " **Holm**" if cell["holm"] else ""
    return f"+{cell['gained']} / -{cell['lost']} ({_p(cell['p'])}){mark}"


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def rl_loops_budgets() -> str:
    """The SFT controls' budgets: what each matches, GRPO's amount, the control's steps and what its runs used."""
    budgets, summary = load("rl/budgets.json"), load("rl/summary.json")
    grpo_s, grpo_tokens = summary["train_s"]["grpo"], summary["completion_tokens"]["grpo"]
    rows = [
        [NAMES["grpo"], f"{load('rl/grpo_seed0.json')['steps']}", f"{grpo_s:.1f} s", f"{grpo_tokens:,.0f}"],
    ]
    for arm in ("sft_wall", "sft_tokens"):
        if arm in summary["train_s"]:
            tokens = summary["completion_tokens"][arm]
            rows.append([NAMES[arm], str(budgets[arm]["steps"]), f"{summary['train_s'][arm]:.1f} s", f"{tokens:,.0f}"])
    return markdown(["arm", "steps", "training time (mean)", "completion tokens trained on (mean)"], rows)


def rl_loops_runs() -> str:
    """Every run: arm, seed, learning rate, steps, training time, accuracy at each loop count."""
    runs = [load(f"rl/{p.name}") for p in sorted((RESULTS / "rl").glob("*_seed*.json"))]
    order = {a: i for i, a in enumerate(_ordered({r["arm"]: r for r in runs}))}
    runs.sort(key=lambda r: (order[r["arm"]], r["seed"]))
    loops = list(load("rl/base.json")["accuracy"])
    rows = [
        [
            NAMES.get(r["arm"], r["arm"]),
            str(r["seed"]),
            f"{r['learning_rate']:g}",
            str(r["steps"]),
            f"{r['train_s']:.0f} s",
            *(f"{100 * r['accuracy'][n]:.1f}" for n in loops),
        ]
        for r in runs
    ]
    return markdown(["arm", "seed", "lr", "steps", "training", *(f"{n}" for n in loops)], rows)


def rl_loops_sweep() -> str:
    """The learning rates tried on seed 0 per arm, scored on the validation split at 4 loops."""
    sweep = load("rl/sweep.json")
    rates = sorted({rate for tried in sweep.values() for rate in tried}, key=float)
    rows = [
        [NAMES.get(o, o), *(f"{100 * tried[r]:.1f}%" if r in tried else "" for r in rates)]
        for o, tried in ((o, sweep[o]) for o in _ordered(sweep))
    ]
    return markdown(["arm", *(f"lr {r}" for r in rates)], rows)


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
    "rl-loops-paired": rl_loops_paired,
    "rl-loops-budgets": rl_loops_budgets,
}
