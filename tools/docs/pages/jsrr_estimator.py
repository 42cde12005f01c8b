"""The tables of ``docs/benchmarks/jsrr_estimator.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import load, markdown, pct


def jsrr_estimator() -> str:
    rows = []
    for name, data in load("jsrr_estimator.json")["maps"].items():
        rho = data["exact_radius"]
        label = f"{'at ' if name == 'initialisation' else ''}{name} (rho {min(rho):.2f}-{max(rho):.2f})"
        for estimator, shown in (("vjp", "vjp"), ("jvp", "jvp (paper)")):
            iters = [1, 2, 4, 8]
            errors = [f"{data['errors'][f'{estimator}@{k}']['mean_rel_error']:+.2f}" for k in iters]
            cost = " / ".join(f"{data['cost'][f'{estimator}@{k}']:.1f}" for k in iters)
            rows.append([label if estimator == "vjp" else "", shown, *errors, cost])
    return markdown(["map", "estimator", "1 iteration", "2", "4", "8", "cost at 1 / 2 / 4 / 8"], rows)


def jsrr_spread() -> str:
    """The spread the mean error hides: the mean absolute relative error, and the share of estimates above rho."""
    rows = []
    for name, data in load("jsrr_estimator.json")["maps"].items():
        for estimator in ("vjp", "jvp"):
            errors = [data["errors"][f"{estimator}@{k}"] for k in (1, 2, 4, 8)]
            rows.append(
                [name if estimator == "vjp" else "", estimator]
                + [" / ".join(f"{e['mean_abs_rel_error']:.2f}" for e in errors)]
                + [" / ".join(pct(e["overestimates"], 0) for e in errors)]
            )
    header = ["map", "estimator", "mean absolute error at 1 / 2 / 4 / 8", "estimates above rho at 1 / 2 / 4 / 8"]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "jsrr-estimator": jsrr_estimator,
    "jsrr-spread": jsrr_spread,
}
