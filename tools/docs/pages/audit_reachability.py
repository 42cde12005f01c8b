"""The tables of ``docs/benchmarks/audit_reachability.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import AUDIT_HEADER, audit_cells
from tools.docs.results import load, markdown

AUDIT_ROWS = {  # the order of the table, and the summary file each model's runs are in
    "studied": "audit_studied.json",
    "no_anchor": "audit_no_anchor.json",
    "noisy_start": "audit_studied.json",
    "amortised": "audit_controls.json",
    "control": "audit_controls.json",
    "mlp": "audit_controls.json",
}


def audit_reachability(folder: str = "audit_reachability") -> str:
    """A row per model, each cell its three seeds (one value when they agree): the audit's numbers and verdict."""
    rows = []
    for model, summary in AUDIT_ROWS.items():
        runs = sorted((r for r in load(f"{folder}/{summary}")["runs"] if r["model"] == model), key=lambda r: r["seed"])
        seeds = " / ".join(str(r["seed"]) for r in runs)
        accuracy = " / ".join(f"{100 * r['accuracy']:.1f}" for r in runs)
        if "verdict" not in runs[0]:  # the MLP baseline: accuracy only
            rows.append([seeds, model, accuracy] + [""] * 8)
            continue
        rows.append([seeds, model, accuracy] + audit_cells(runs))
    return markdown(AUDIT_HEADER, rows)


def audit_holm(folder: str = "audit_reachability", alpha: float = 0.05) -> str:
    """Every audited run's T1 (its z and two-sided p) and whether T1 is still significant after Holm's correction
    over all the runs of the benchmark, beside the verdict the run got."""
    from equilibria.diagnostics import AuditReport, verdict
    from equilibria.diagnostics.statistics import holm, two_sided_p
    from equilibria.diagnostics.verdict_rules import SCHEMA

    runs = sorted((docs_results.RESULTS / folder).glob("*-seed*/audit.json"))
    reports = [(path.parent.name, AuditReport.from_json(path)) for path in runs]
    p_values = [two_sided_p(r.substitution["z"]) for _, r in reports]
    survives = holm(p_values, alpha)
    rows = [
        [name, f"{r.verdict} (schema {r.schema})", verdict(r)[0]]
        + [f"{r.substitution['change_points']:+.1f}", f"{r.substitution['z']:+.2f}", f"{p:.2g}"]
        + ["yes" if kept else "no"]
        for (name, r), p, kept in zip(reports, p_values, survives)
    ]
    header = ["run", "verdict (recorded)", f"verdict by today's rules (schema {SCHEMA}, from the recorded numbers)"]
    header += ["T1 pts", "T1 z", "p (two-sided)", f"T1 significant after Holm ({alpha:g})"]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "audit-reachability": audit_reachability,
    "audit-reachability-holm": audit_holm,
}
