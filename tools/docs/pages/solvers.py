"""The tables of ``docs/benchmarks/solvers.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import re
from collections.abc import Callable

from tools.docs.results import load, markdown


def solvers() -> str:
    data = load("solvers.json")
    results, dim = data["results"], data["args"]["dim"]

    def cell(run: dict, lam: bool = False) -> str:
        seconds = f"{run['seconds']:.3f}" if run["map"].startswith("tanh") else f"{run['seconds']:.2f}"
        extra = " (`{}`)".format(re.search(r"lam=([\d.e-]+)", run["solver"]).group(1)) if lam else ""
        return f"{run['iterations']} it, {seconds} s{extra}"

    rows = []
    for name, best in data["best_torchdeq"].items():
        label = (
            f"tanh(Wz + x), dim {dim}, {name.split(', ')[1].replace('=', ' = ')}"
            if name.startswith("tanh")
            else ("Attractor LM map (width 256, 64 tokens, layers x10)")
        )
        runs = [
            results[f"{name} | {s}"]
            for s in ("equilibria anderson (m=5)", "equilibria picard", "torchdeq anderson (m=5, lam=0.0001)")
        ]
        rows.append([label, *(cell(r) for r in runs), cell(best, lam=True)])
    header = [
        "map",
        "equilibria Anderson",
        "equilibria Picard",
        "torchdeq Anderson, default `lam=1e-4`",
        "torchdeq Anderson, best `lam`",
    ]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "solvers": solvers,
}
