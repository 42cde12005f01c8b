"""The audit's statistics: paired accuracy changes with their exact sign test, the majority-class baseline, Holm's
correction, and the summaries of the per-unit evidence (displacements, iterations, T4's outcomes, explosions).

Every function takes plain tensors (one entry per unit) or lists and returns numbers or dicts of numbers: nothing
here knows a model.
"""

from __future__ import annotations

import math
from collections import Counter

import torch


def paired_change(after: torch.Tensor, before: torch.Tensor) -> dict:
    """The accuracy of per-unit correctness ``after`` and its paired change from ``before`` (same units): the
    change and its standard error in points, ``z`` = change / standard error (inf when every unit that moves
    moves the same way and the spread is 0, 0 when none moves), and ``p``: the exact two-sided sign test on the
    units that changed (McNemar's), which the normal ``z`` overstates when few units change (4 of 4 moving one
    way is z = inf but p = 0.125)."""
    diff = after.double() - before.double()
    n = len(diff)
    mean = diff.mean().item()
    se = diff.std().item() / math.sqrt(n) if n > 1 else 0.0
    z = 0.0 if mean == 0.0 else (math.copysign(math.inf, mean) if se == 0.0 else mean / se)
    gained, lost = int((diff > 0).sum()), int((diff < 0).sum())
    return {
        "accuracy": after.double().mean().item(),
        "change_points": 100 * mean,
        "se_points": 100 * se,
        "z": z,
        "p": sign_test(gained, lost),
    }


def sign_test(gained: int, lost: int) -> float:
    """The exact two-sided p-value that ``gained`` against ``lost`` changed units are a fair coin's split."""
    moved = gained + lost
    if moved == 0:
        return 1.0
    tail = sum(math.comb(moved, k) for k in range(min(gained, lost) + 1))
    return min(1.0, 2 * tail / (1 << moved))  # integers: exact (and correctly rounded) for any count


def two_sided_p(z: float) -> float:
    """The two-sided p-value of a normal ``z`` (a paired change over its standard error)."""
    return math.erfc(abs(z) / math.sqrt(2)) if math.isfinite(z) else 0.0


def holm(p_values: list[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down correction over many tests (many audited runs): which are still significant at
    family-wise error ``alpha``. A benchmark that audits many runs reports how many verdicts rest on a T1 that
    survives it."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    kept = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        kept[i] = True
    return kept


def chance_baseline(correct: torch.Tensor, answers: list[tuple], significance: float) -> dict:
    """How the accuracy compares with the majority class at the unit level: ``majority`` (the share of units
    whose whole answer is the most common one: what a constant answer gets), ``se`` (the binomial standard error
    of an accuracy at that rate on these units), ``margin_se`` ((accuracy - majority) / se) and ``beats_chance``
    (margin >= ``significance``; never when one answer covers every unit)."""
    n = len(answers)
    majority = max(Counter(answers).values()) / n
    accuracy = correct.double().mean().item()
    se = math.sqrt(majority * (1.0 - majority) / n)
    margin = (accuracy - majority) / se if se > 0 else 0.0
    return {"majority": majority, "se": se, "margin_se": margin, "beats_chance": margin >= significance}


def displacement_outcomes(row: dict, correct: torch.Tensor) -> dict:
    """T4's outcome shares at one scale, and the decoder's accuracy from the displaced run with its paired
    change from the undisturbed run (``accuracy``, ``change_points``, ``se_points``, ``z``)."""
    merged = {k: torch.cat(v).float().mean().item() for k, v in row.items() if k != "correct"}
    return {**merged, **paired_change(torch.cat(row["correct"]), correct)}


def displacement_summary(cat: dict) -> dict:
    disp, rel = cat["disp"], cat["rel"]
    finite = torch.isfinite(disp)
    return {
        "median": _summary_stat(disp[finite], "median"),
        "mean": _summary_stat(disp[finite], "mean"),
        "max": _summary_stat(disp[finite], "max"),
        "relative_median": _summary_stat(rel[torch.isfinite(rel)], "median"),
        "start_norm_median": _summary_stat(cat["n0"], "median"),
        "solved_norm_median": _summary_stat(cat["n1"], "median"),
        "nonfinite": int((~finite).sum()),
        "log10_histogram": _log10_histogram(disp[finite]),
    }


def exploded_solves(cat: dict, growth: float) -> torch.Tensor:
    """Per unit: did the solve explode? Flagged diverged (or non-finite), or unconverged with ``||h*||`` at least
    ``growth`` times the states' scale: the median solved norm of the converged units (of the starts when none
    converged). The start's own norm does not enter, so a converged solve from a small start is not one."""
    conv, n1 = cat["conv"], cat["n1"]
    finite = torch.isfinite(n1)
    scale_from = n1[conv & finite] if bool((conv & finite).any()) else cat["n0"][torch.isfinite(cat["n0"])]
    scale = float(scale_from.median()) if len(scale_from) else 0.0
    grown = ~conv & finite & (n1 >= growth * scale) if scale > 0 else torch.zeros_like(conv)
    return cat["div"] | ~finite | grown


def iteration_summary(cat: dict, max_iter: int, growth: float) -> dict:
    steps, difficulty = cat["steps"], cat["difficulty"]
    capped = (steps >= max_iter) & ~cat["conv"]
    iterations = {
        "mean_steps": steps.mean().item(),
        "cap_share": capped.float().mean().item(),
        "converged_share": cat["conv"].float().mean().item(),
        "diverged_share": cat["div"].float().mean().item(),
        "exploded_share": exploded_solves(cat, growth).float().mean().item(),
        "pearson": None,
        "spearman": None,
        "note": "",
    }
    if difficulty is None:
        iterations["note"] = "no difficulty column: correlation not computed"
    elif steps.std() == 0 or difficulty.std() == 0:
        iterations["note"] = "iterations or difficulty constant: correlation undefined"
    else:
        iterations["pearson"] = _pearson(steps, difficulty)
        iterations["spearman"] = _pearson(_ranks(steps), _ranks(difficulty))
    return iterations


def _pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    return float((x * y).sum() / (x.norm() * y.norm()).clamp_min(1e-300))


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks with ties averaged (for Spearman's r)."""
    x = x.double()
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(len(x), dtype=torch.float64)
    values, inverse = torch.unique(x, return_inverse=True)
    sums = torch.zeros(len(values), dtype=torch.float64).index_add_(0, inverse, ranks)
    counts = torch.zeros(len(values), dtype=torch.float64).index_add_(0, inverse, torch.ones_like(ranks))
    return (sums / counts)[inverse]


def _summary_stat(x: torch.Tensor, how: str) -> float:
    if x.numel() == 0:
        return float("nan")
    return float(getattr(x.double(), how)())


def _log10_histogram(x: torch.Tensor, bins: int = 30) -> dict | None:
    if x.numel() == 0:
        return None
    logs = x.double().clamp_min(1e-30).log10()
    lo, hi = float(logs.min()), float(logs.max())
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    counts = torch.histc(logs, bins=bins, min=lo, max=hi)
    edges = torch.linspace(lo, hi, bins + 1)
    return {"edges": [round(float(e), 4) for e in edges], "counts": [int(c) for c in counts]}


__all__ = [
    "chance_baseline",
    "displacement_outcomes",
    "displacement_summary",
    "exploded_solves",
    "holm",
    "iteration_summary",
    "paired_change",
    "sign_test",
    "two_sided_p",
]
