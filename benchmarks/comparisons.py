"""What "equal accuracy" means in the benchmarks, defined once.

A setting is *of equal accuracy* to a reference when its accuracy is at least the reference's minus one standard
error of the reference's accuracy (binomial, over the puzzles or problems scored, Agresti-Coull adjusted so that
a reference at 100% still has one). A saving at equal accuracy is
measured against the *cheapest* setting of equal accuracy to the most accurate one, and the settings compared are
chosen on a validation split and then reported on a test split they were not chosen on.
"""

from __future__ import annotations

import math
from collections.abc import Hashable


def standard_error(accuracy: float, n: int) -> float:
    """The binomial standard error of an accuracy measured on ``n`` items, Agresti-Coull adjusted (two successes
    and two failures added), so that 100% (or 0%) on a finite sample does not have a standard error of 0."""
    if not n:
        return float("inf")
    adjusted = (accuracy * n + 2) / (n + 4)
    return math.sqrt(adjusted * (1 - adjusted) / (n + 4))


def of_equal_accuracy(accuracy: float, reference: float, n: int) -> bool:
    """Whether ``accuracy`` is within one standard error (of ``reference``, on ``n`` items) of ``reference`` or above."""
    return accuracy >= reference - standard_error(reference, n) - 1e-12


def cheapest_of_equal_accuracy(points: dict[Hashable, dict], n: int, cost: str, reference: float | None = None):
    """The key of the cheapest point (lowest ``point[cost]``) whose ``accuracy`` is of equal accuracy to
    ``reference`` (default: the most accurate point's); ``None`` when none is."""
    if reference is None:
        reference = max(p["accuracy"] for p in points.values())
    equal = [k for k, p in points.items() if of_equal_accuracy(p["accuracy"], reference, n)]
    return min(equal, key=lambda k: (points[k][cost], k)) if equal else None


def paired_difference(a: list[bool], b: list[bool]) -> tuple[float, float]:
    """``(mean of a - b, its standard error)`` over the same items scored twice (a paired comparison)."""
    n = len(a)
    diffs = [float(x) - float(y) for x, y in zip(a, b)]
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else float("inf")
    return mean, math.sqrt(var / n)


__all__ = ["cheapest_of_equal_accuracy", "of_equal_accuracy", "paired_difference", "standard_error"]
