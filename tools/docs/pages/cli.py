"""The tables of ``docs/cli.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.pages.common import recipe_range, recipe_runs_label
from tools.docs.results import load, markdown, pct


def cli_commands() -> str:
    """The subcommands of ``equilibria`` with their one-line help, read from the parser itself (what ``equilibria
    --help`` prints)."""
    import argparse

    from equilibria.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    rows = [[f"`equilibria {choice.dest}`", " ".join(choice.help.split())] for choice in sub._choices_actions]
    return markdown(["command", "what it does (`equilibria COMMAND --help` for its options)"], rows)


def recipes() -> str:
    """Every documented training command (``benchmarks/recipes.py``): what it gives at its trained loop count on the
    seeds it was not chosen on (every run on a seed outside 0-2, at every thread count; how many reach the target),
    on seeds 0-2 (those it was chosen on), the wall time, and what the page's earlier command gave."""
    rows = []
    for name, entry in load("recipes.json")["recipes"].items():
        runs, loops, target = entry["runs"], entry["loops"], entry["target"]
        measured = [run for run in runs if run["seed"] > 2]
        chosen = [run for run in runs if run["seed"] <= 2]
        before = entry.get("before", {}).get("runs") or []
        walls = [run["wall_s"] for run in runs]
        reached = ""
        if measured and target is not None:
            hits = sum(run["accuracy"][str(loops)] >= target for run in measured)
            reached = f"; {hits} of {len(measured)} reach it"
        rows.append([
            f"`{name}` ({entry['page'] if entry.get('shown', True) else 'no page: the recipe alone'})",
            f"`{entry['command']}`",
            entry["what"],
            f"{recipe_range(measured, loops)} ({recipe_runs_label(measured)})" if measured else "not run yet",
            f"{recipe_range(chosen, loops)} ({recipe_runs_label(chosen)})" if chosen else "",
            "" if target is None else f">= {pct(target, 0)}{reached}",
            "-".join(sorted({f"{min(walls) / 60:.1f}", f"{max(walls) / 60:.1f}"}, key=float)) + " min",
            f"{recipe_range(before, loops)} ({recipe_runs_label(before)})" if before else "",
        ])  # fmt: skip
    header = [
        "recipe", "command (`--seed S` added)", "result", "on seeds it was not chosen on", "on seeds 0-2",
        "promised", "wall time", "before",
    ]  # fmt: skip
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "cli-commands": cli_commands,
    "recipes": recipes,
}
