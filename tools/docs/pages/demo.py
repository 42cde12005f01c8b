"""The tables of ``docs/demo.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import load


def demo_output() -> str:
    """The middle of ``./run demo``'s output, the loop-scaling table and the audit of both loops, as the demo
    prints them (``equilibria.demo``), from what it recorded in ``demo_results.json``."""
    data = load("demo_results.json")
    curves = {f"plain, {data['steps']} + {data['continuation_steps']} steps": data["accuracy_by_loops"]}
    curves["STARS"] = data["stars_accuracy_by_loops"]
    loops = list(data["accuracy_by_loops"])
    n = int(data["evaluation_data"].split()[0])
    lines = [
        f"[5/7] exact match on the {n} held-out problems at loops [{', '.join(loops)}] (trained at {data['trained_loops']})"
    ]
    lines.append("  loops | " + " | ".join(f"{name:>24}" for name in curves))
    lines += [f"  {k:>5} | " + " | ".join(f"{curve[k]:>24.1%}" for curve in curves.values()) for k in loops]
    lines.append(
        "[6/7] the computation audit of both loops on the held-out problems (start: the state after the first loop "
        "step; solved: after the last; do the extra steps compute?)"
    )
    for name, audit in data["audit"].items():
        lines.append(
            f"  {name}: {audit['verdict'].upper()}, resting on: accuracy {100 * audit['accuracy']:.1f}% per sequence "
            f"against {100 * audit['majority_class']:.1f}% for the most common answer ({audit['margin_se']:+.1f} SE)"
        )
        lines += ["    - " + reason for reason in audit["reasons"][:2]]
    return "```\n" + "\n".join(lines) + "\n```"


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "demo-output": demo_output,
}
