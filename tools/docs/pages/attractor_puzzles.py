"""The tables of ``docs/benchmarks/attractor_puzzles.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import (
    ATTRACTOR_SETTINGS,
    attractor_chosen_runs,
    attractor_settings,
    chosen_attractor_setting,
    eqr_seeds,
    run_set,
)
from tools.docs.results import load, markdown, pct


def attractor_puzzles_select() -> str:
    """A row per setting of the search: parameters, the solver's converged share and iterations at the end of
    training, exact solve on the validation split (which chooses) and on the test split (which does not)."""
    runs, chosen = attractor_settings(), chosen_attractor_setting()
    rows = []
    for name, label in ATTRACTOR_SETTINGS.items():
        if name not in runs:
            rows.append([label, "not run yet", *[""] * 3])
            continue
        run, last = runs[name], runs[name]["log"][-1]
        valid, test = run["validation_accuracy_by_depth"], run["accuracy_by_depth"]
        rows.append(
            [
                f"**{label}** (chosen)" if name == chosen else label,
                f"{run['parameters']:,}",
                f"{pct(last['converged_rate'])}, {last['solver_steps']:.1f}",
                " / ".join(pct(valid[d]) for d in ("16", "32", "64")),
                pct(test["64"]),
            ]
        )
    header = [
        "setting",
        "parameters",
        "end of training: converged, iterations",
        "validation: depth 16 / 32 / 64",
        "test: depth 64 (not used to choose)",
    ]
    return markdown(header, rows)


def attractor_smoke() -> str:
    """A row per smoke-scale case: its data (held out or not) and the exact-solve share at each loop count."""
    path = docs_results.RESULTS / "attractor_smoke.json"
    if not path.exists():
        return markdown(["case", "data", "exact solve at each loop count"], [["not run yet", "", ""]])
    run = load("attractor_smoke.json")
    rows = []
    for name, case in run["cases"].items():
        held = "held out by class" if case["data"]["held_out"] else "NOT held out"
        scores = ", ".join(f"{n}: {pct(a)}" for n, a in case["accuracy"].items())
        rows.append([name, f"{case['data']['units']} test puzzles, {held}", scores])
    return markdown(["case", "data", f"exact solve at each loop count ({run['args']['steps']} steps)"], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "attractor-puzzles-sizes": lambda: eqr_seeds(
        ("weight_tied", "weight_tied (4 layers)", "eqr", "eqr (4 layers)", "attractor", "attractor (2 + 2 layers)"),
        (),
        (0, 4, 8, 16, 32, 64),
        run_set("attractor_puzzle_sizes"),
        kind_folders={
            "attractor (2 + 2 layers)": run_set("attractor_puzzle_sizes_split2"),
            "weight_tied (4 layers)": run_set("attractor_puzzle_sizes_4layer"),
            "eqr (4 layers)": run_set("attractor_puzzle_sizes_4layer"),
        },
    ),
    "attractor-puzzles-chosen": lambda: eqr_seeds(
        ("weight_tied", "eqr", "attractor (chosen settings)"),
        (("attractor (chosen settings)", "eqr"), ("attractor (chosen settings)", "weight_tied")),
        (0, 4, 8, 16, 32, 64),
        kind_folders={"attractor (chosen settings)": attractor_chosen_runs()},
    ),
    "attractor-puzzles-6x6": lambda: eqr_seeds(
        ("weight_tied", "eqr", "attractor"), (("attractor", "eqr"), ("attractor", "weight_tied")), (0, 4, 8, 16, 32, 64)
    ),
    "attractor-puzzles-select": attractor_puzzles_select,
    "attractor-smoke": attractor_smoke,
}
