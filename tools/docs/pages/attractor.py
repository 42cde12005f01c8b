"""The tables of ``docs/attractor.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.pages.common import difference_cell, internalization_run, lm_iterations, lm_paired, lm_runs, memory_runs
from tools.docs.results import markdown, mean_se

FORMS = ("paper", "gated", "deq")  # the columns of the Attractor page's comparison, one per ``residual_form``


FORM_LINKS = {
    "internalization": "[internalization](benchmarks/attractor_internalization.md)",
    "memory": "[memory](benchmarks/attractor_memory.md)",
    "lm": "[LM](benchmarks/attractor_lm.md)",
}


def _form_iterations(name: str) -> str:
    """The internalization run's iterations to tolerance: start -> least -> end."""
    run = internalization_run(name)
    if run is None:
        return "not run yet"
    steps = [r["iterations"] for r in run["rows"]]
    return f"{steps[0]:.1f} -> {min(steps):.1f} -> {steps[-1]:.1f}"


def _form_exact(name: str) -> str:
    """The internalization run's held-out exact match at the end, at T=0 / T=1 / T* (``-`` where it has none)."""
    run = internalization_run(name)
    if run is None:
        return "not run yet"
    last = run["rows"][-1]["accuracy"]
    cells = [last.get(t) for t in ("0", "1", run["args"]["budget"])]
    return " / ".join("-" if a is None else f"{100 * a:.1f}%" for a in cells)


def _form_saved(memory: dict, form: str) -> str:
    """The map's one-step saved-for-backward MiB, one number when every budget agrees."""
    bytes_ = {memory[k]["saved_bytes"] for k in memory if k.startswith(f"{form}/one_step@")}
    return f"{bytes_.pop() / 2**20:.1f} MiB" if len(bytes_) == 1 else "differs by budget"


def _form_perplexity(lm: dict[str, dict[int, dict]], kind: str) -> str:
    """The kind's mean validation perplexity, and its paired difference from the transformer's."""
    if not lm[kind]:
        return "not run yet"
    mean = mean_se([r["val_perplexity"] for r in lm[kind].values()])[0]
    return f"{mean:.2f} ({difference_cell(lm_paired(lm, kind), digits=2)})"


def attractor_forms() -> str:
    """The Attractor page's comparison of its maps, from the internalization, memory and language-model runs: a row
    per measure, a column per ``residual_form``."""
    memory, lm = memory_runs(), lm_runs()
    first = internalization_run("addition-paper-one-step")
    steps = first["args"]["steps"] if first else "?"
    llama = list(lm["llama"].values())
    params = f"{llama[0]['parameters'] / 1e6:.1f}M" if llama else "?"
    tol = llama[0]["args"]["tol"] if llama else "?"
    lm_steps = {
        kind: lm_iterations(lm[kind].values()).replace("→", "->") or "not run yet"
        for kind in ("attractor-paper", "attractor-gated")
    }
    rows = [
        [f"addition, {steps} steps: iterations to tolerance (start -> least -> end)"]
        + [_form_iterations(f"addition-{f}-one-step") for f in FORMS]
        + [FORM_LINKS["internalization"]],
        ["addition: held-out exact at T=0 / T=1 / T*"]
        + [_form_exact(f"addition-{f}-one-step") for f in FORMS]
        + [FORM_LINKS["internalization"]],
        [
            "training memory saved for backward, one-step, any budget",
            _form_saved(memory, "paper"),
            _form_saved(memory, "gated"),
            "",
            FORM_LINKS["memory"],
        ],
        [
            f"language model ({params} parameters, {len(llama)} seeds): validation perplexity, mean (minus the "
            "transformer's)",
            _form_perplexity(lm, "attractor-paper"),
            _form_perplexity(lm, "attractor-gated"),
            "",
            FORM_LINKS["lm"],
        ],
        [
            f"language model: iterations to {float(tol):.0e} in training (start -> least -> end)".replace("e-0", "e-"),
            lm_steps["attractor-paper"],
            lm_steps["attractor-gated"],
            "",
            FORM_LINKS["lm"],
        ],
    ]
    return markdown(["on", '`"paper"`', '`"gated"`', '`"deq"`', "page"], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "attractor-forms": attractor_forms,
}
