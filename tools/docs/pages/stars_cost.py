"""The tables of ``docs/benchmarks/stars_cost.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import load, markdown


def stars_cost() -> str:
    by_loops = load("stars_cost.json")["by_loops"]
    columns = ["vjp@1", "vjp@2", "vjp@4", "jvp@1", "jvp@2", "jvp@4"]
    rows = [
        [loops, f"{row['plain_seconds']:.2f} s", *(f"{row[c]:.2f}x" for c in columns)]
        for loops, row in by_loops.items()
    ]
    return markdown(["loops", "plain step", "vjp, 1 iteration", "2", "4", "jvp, 1 iteration", "2", "4"], rows)


def stars_cost_cheaper() -> str:
    """The cheaper penalty forms against a plain step, and the subsample's error against the full penalty."""
    cost = load("stars_cost.json")["by_loops"]
    rows = []
    for n, row in cost.items():
        error = row["sampling_error"]
        rows.append(
            [
                n,
                *(f"{row[f]:.2f}x" for f in ("vjp@1", "batch@1", "vjp@1 rows 1/4", "batch@1 rows 1/4")),
                f"{100 * error['relative_bias']:+.1f}%",
                f"{100 * error['mean_relative_error']:.0f}%",
                f"{error['gradient_cosine']:.2f}",
            ]
        )
    header = [
        "loops",
        "vjp@1, every sequence",
        "batch probe (the reference code's)",
        "vjp@1, 1/4 of the sequences",
        "batch probe, 1/4",
        "subsample: bias",
        "mean abs. error",
        "gradient cosine",
    ]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "stars-cost-cheaper": stars_cost_cheaper,
    "stars-cost": stars_cost,
}
