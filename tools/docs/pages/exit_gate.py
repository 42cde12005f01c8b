"""The tables of ``docs/benchmarks/exit_gate.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import load, markdown, pct

EXIT_LOSSES = {
    "expected_logits": "`expected_logits` (published, default)",
    "expected": "`expected` (paper, entropy 0.05)",
    "final": "`final` (gate untrained)",
}


def exit_gate() -> str:
    losses = load("exit_gate.json")["losses"]

    def points(runs: dict, keys: tuple[str, ...]) -> str:
        return " / ".join(f"{pct(runs[k]['accuracy'])} @ {runs[k]['mean_steps']:.2f}" for k in keys)

    rows = []
    for loss, label in EXIT_LOSSES.items():
        runs = losses[loss]
        fixed = " / ".join(f"{100 * runs['fixed'][k]['accuracy']:.1f}" for k in ("1", "2", "3", "4")) + "%"
        rows.append(
            [
                label,
                fixed,
                points(runs["frozen"], ("0.5", "0.9", "0.95")),
                points(runs["reference"], ("0.3", "0.5", "0.9")),
            ]
        )
    header = [
        "exit_loss",
        "fixed 1 / 2 / 3 / 4 loops",
        "frozen exit, threshold 0.5 / 0.9 / 0.95",
        "reference readout, 0.3 / 0.5 / 0.9",
    ]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "exit-gate": exit_gate,
}
