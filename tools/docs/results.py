"""What the docs' table builders share, and the docs tool's engine reads: where the results are (``RESULTS``, read at
call time, so that a test can point it elsewhere) and how a table is written. A leaf: it imports nothing of the docs
tool, the package or the benchmarks, so the pages (:mod:`tools.docs.pages`) and the engine
(:mod:`tools.docs.engine`) both import it without a circle."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def load(relative: str) -> dict:
    return json.loads((RESULTS / relative).read_text())


def markdown(header: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"

    return "\n".join([line(header), "|" + " --- |" * len(header), *(line(row) for row in rows)])


def pct(value: float, digits: int = 1) -> str:
    return f"{100 * value:.{digits}f}%"


def small(value: float) -> str:
    """Two decimals from 0.1 up, else one significant digit and a short exponent (``1.5e-2``)."""
    if value >= 0.1:
        return f"{value:.2f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (n - 1 degrees of freedom; NaN for one value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, (sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values)) ** 0.5
