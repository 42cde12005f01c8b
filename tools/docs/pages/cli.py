"""The tables of ``docs/cli.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.engine import load, markdown, pct
from tools.docs.pages.common import recipe_range, recipe_runs_label


def cli_commands() -> str:
    """The subcommands of ``equilibria`` with their one-line help, read from the parser itself (what ``equilibria
    --help`` prints)."""
    import argparse

    from equilibria.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    rows = [[f"`equilibria {choice.dest}`", " ".join(choice.help.split())] for choice in sub._choices_actions]
    return markdown(["command", "what it does (`equilibria COMMAND --help` for its options)"], rows)


def recipes() -> str:
    """Every documented training command (``benchmarks/recipes.py``): what it gives at its trained loop count over
    every seed and thread count run, the wall time, and what the page's earlier command gave."""
    rows = []
    for name, entry in load("recipes.json")["recipes"].items():
        runs, loops = entry["runs"], entry["loops"]
        before = entry.get("before", {}).get("runs") or []
        walls = [run["wall_s"] for run in runs]
        rows.append([
            f"`{name}` ({entry['page'] if entry.get('shown', True) else 'no page: the recipe alone'})",
            f"`{entry['command']}`",
            entry["what"],
            f"{recipe_range(runs, loops)} ({recipe_runs_label(runs)})",
            "" if entry["target"] is None else f">= {pct(entry['target'], 0)}",
            "-".join(sorted({f"{min(walls) / 60:.1f}", f"{max(walls) / 60:.1f}"}, key=float)) + " min",
            f"{recipe_range(before, loops)} ({recipe_runs_label(before)})" if before else "",
        ])  # fmt: skip
    header = ["recipe", "command (`--seed S` added)", "result", "measured", "promised", "wall time", "before"]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "cli-commands": cli_commands,
    "recipes": recipes,
}
