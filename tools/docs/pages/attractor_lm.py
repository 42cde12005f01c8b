"""The tables of ``docs/benchmarks/attractor_lm.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.pages.common import LM_KINDS, difference_cell, lm_iterations, lm_paired, lm_runs, seeds_label
from tools.docs.results import markdown, mean_se


def attractor_lm() -> str:
    """A row per model kind: validation perplexity per seed and its mean, the paired difference from the
    transformer (mean ± SE over the seeds both have), and each run's mean cost."""
    runs = lm_runs()
    rows = []
    for kind, label in LM_KINDS.items():
        by_seed = runs[kind]
        if not by_seed:
            rows.append([label, "not run yet", "", "", "", "", "", ""])
            continue
        ppl = [r["val_perplexity"] for r in by_seed.values()]
        paired = lm_paired(runs, kind)
        diff = (
            "" if kind == "llama" or not paired else f"{difference_cell(paired, digits=2)} ({seeds_label(len(paired))})"
        )
        cost = {
            k: mean_se([r[k] for r in by_seed.values()])[0] for k in ("train_flops", "train_seconds", "saved_bytes")
        }
        rows.append(
            [
                label,
                f"{next(iter(by_seed.values()))['parameters']:,}",
                " / ".join(f"{v:.2f}" for v in ppl) + f" (mean {mean_se(ppl)[0]:.2f})",
                diff,
                lm_iterations(by_seed.values()),
                f"{cost['train_flops'] / 1e12:.1f}",
                f"{cost['train_seconds'] / 60:.1f}",
                f"{cost['saved_bytes'] / 2**20:.1f}",
            ]
        )
    header = ["model", "parameters", "validation perplexity per seed", "minus the transformer's"]
    return markdown([*header, ITERATIONS, "training TFLOPs", "minutes", "saved for backward (MiB)"], rows)


ITERATIONS = "solver iterations in training: first → least → last"


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "attractor-lm": attractor_lm,
}
