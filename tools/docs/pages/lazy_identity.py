"""The tables of ``docs/benchmarks/lazy_identity.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import json
from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import AUDIT_HEADER, audit_cells, lazy_runs, per_seed
from tools.docs.results import markdown


def lazy_identity_audit(task: str) -> str:
    """The audit table of the lazy-identity regime's runs on ``task``, with the tightest tolerance 99% reach."""
    rows = []
    for model, runs in lazy_runs(task).items():
        seeds = " / ".join(str(r["seed"]) for r in runs)
        accuracy = " / ".join(f"{100 * r['accuracy']:.1f}" for r in runs)
        tight = per_seed(runs, "tolerances", lambda t: "none" if t["tightest_99"] is None else f"{t['tightest_99']:g}")
        rows.append([seeds, model, accuracy] + audit_cells(runs)[:-1] + [tight, audit_cells(runs)[-1]])
    header = AUDIT_HEADER[:-1] + ["at cap: tol 1e-4", "tightest tol 99% reach", "verdict"]
    header.remove("at cap")
    return markdown(header, rows)


def lazy_identity_ablations(task: str) -> str:
    """Per model: the noisy starts (where the solve ends, the accuracy there), how strongly the decoder reads h*,
    the learned potential's scale, the anchor removed at test time, and the gradient reaching the dynamics."""
    rows = []
    for model, runs in lazy_runs(task).items():
        noisy = [r["noisy_starts"] for r in runs if r.get("noisy_starts")]
        ends = ", ".join(f"{n['to_noisy_start']:.2g} / {n['to_z0']:.2g}" for n in noisy) or "n/a (zero start)"
        change = " / ".join(f"{100 * (n['accuracy_noisy'] - n['accuracy_clean']):+.1f}" for n in noisy) or "n/a"
        reads = per_seed(
            runs, "decoder", lambda d: f"{d['state_over_context']:.2f}" if "state_over_context" in d else "no context"
        )
        removed = [r["anchor_removed"] for r in runs if "anchor_removed" in r]
        anchor = " / ".join(f"{a['steps']:.0f} it, {100 * a['cap']:.0f}%, {100 * a['accuracy']:.1f}%" for a in removed)
        grads = []
        for r in runs:
            g = r["gradients"]
            key = "direct_path" if "direct_path" in g else None
            grads.append(
                f"{g['dynamics']['first'] / g[key]['first']:.2g} -> {g['dynamics']['last'] / g[key]['last']:.2g}"
                if key
                else f"{g['dynamics']['first']:.2g} -> {g['dynamics']['last']:.2g} (abs.)"
            )
        rows.append(
            [model, ends, change, reads, per_seed(runs, "potential_scale", ".3g"), anchor or "n/a", ", ".join(grads)]
        )
    header = ["model", "noisy start: end to s / to z0 (per noise norm)", "acc. change from noisy starts (pts)"]
    header += ["decoder reads h* / context (RMS weight)", "potential scale (mean abs; init 0.01)"]
    header += [
        "anchor set to 0 at test: iterations, at cap, acc.",
        "gradient dynamics / direct path, first -> last tenth",
    ]
    return markdown(header, rows)


def lazy_identity_holm() -> str:
    """Every lazy-identity run's T1 and today's `studied` runs' on the same task, with Holm's correction over all of
    them per task."""
    from equilibria.diagnostics.statistics import two_sided_p

    rows = []
    for task in ("reachability", "entailment"):
        path = docs_results.RESULTS / "lazy_identity" / task / "summary.json"
        if not path.exists():
            continue
        for row in json.loads(path.read_text())["holm"]["runs"]:
            p = two_sided_p(row["t1_z"])
            rows.append(
                [
                    task,
                    row["run"],
                    f"{row['t1_z']:+.2f}",
                    f"{p:.2g}",
                    "yes" if row["t1_significant"] else "no",
                    row["verdict"],
                ]
            )
    header = ["task", "run", "T1 z", "p (two-sided)", "significant after Holm (0.05, per task)", "verdict"]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "lazy-identity-reachability": lambda: lazy_identity_audit("reachability"),
    "lazy-identity-entailment": lambda: lazy_identity_audit("entailment"),
    "lazy-identity-ablations-reachability": lambda: lazy_identity_ablations("reachability"),
    "lazy-identity-ablations-entailment": lambda: lazy_identity_ablations("entailment"),
    "lazy-identity-holm": lazy_identity_holm,
}
