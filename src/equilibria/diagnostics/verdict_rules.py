"""The verdict rules: from a report's numbers to one of ``VERDICTS`` with its reasons, and the thresholds
([`AuditThresholds`]) where the rules draw their lines. The rules are described in
:mod:`equilibria.diagnostics.audit`; ``SCHEMA`` is their version, recorded in every report."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .report import AuditReport, pct, points
from .statistics import two_sided_p

SCHEMA = 3  # audit.json's version: the verdict rules it was made with (see AuditReport.schema)
VERDICTS = ("computing", "lazy identity collapse", "decoder bypass", "solver explosion", "at chance", "inconclusive")


@dataclass
class AuditThresholds:
    """Where the verdict draws its lines (all documented in the report's reasons).

    Args:
        substitution_points: A T1 change smaller than this (in accuracy points) counts as "costs nothing".
        identity_displacement: A median relative displacement ``||h* - z0|| / max(||z0||, ||h*||)`` at or
            below this counts as "the solved state is its start".
        explosion_share: A share of exploded solves at or above this is an explosion. A solve exploded when the
            solver flagged it diverged (its residual non-finite or grown a thousandfold), its state is non-finite,
            or it ended unconverged with ``||h*||`` at least ``explosion_growth`` times the states' scale.
        explosion_growth: The norm, relative to the states' scale (the median ``||h*||`` of the converged solves;
            of the starts when none converged), past which an unconverged solve counts as exploded. A converged
            solve never does, however small its start.
        return_tolerance: T4 counts a displaced run as back at ``h*`` (or still at its start) when it ends within
            this fraction of ``|d|`` of it.
        significance: An accuracy change (T1, zeroing) counts only when it is also significant at the level of
            this many standard errors (two-sided p <= 0.046 at 2), by the exact sign test on the units that changed
            (so that chance differences on few units do not decide: 4 of 4 one way is p = 0.125);
            the model's accuracy must beat the majority class by this many binomial standard errors for any
            verdict but "at chance" and "inconclusive".
    """

    substitution_points: float = 1.0
    identity_displacement: float = 1e-3
    explosion_share: float = 0.5
    explosion_growth: float = 100.0
    return_tolerance: float = 0.1
    significance: float = 2.0


def verdict(report: AuditReport, thresholds: AuditThresholds | None = None) -> tuple[str, list[str]]:
    """The verdict and its reasons from a report's numbers (the rules: :mod:`equilibria.diagnostics.audit`)."""
    th = thresholds or AuditThresholds()
    d = report.displacement
    t1, zero = report.substitution["change_points"], report.zeroing["change_points"]
    t1_matters, zero_matters = _change_matters(report.substitution, th), _change_matters(report.zeroing, th)
    support = _supporting_reasons(report, th)
    exploded = _explosion_reasons(report, th)
    withheld = _withheld_verdict(report, th, exploded)
    if withheld:
        return withheld[0], withheld[1] + support
    if exploded:
        if zero_matters and zero > 0:
            exploded.append(f"zeroing h* improves accuracy by {points(report.zeroing)}: the solved state hurts")
        return "solver explosion", exploded + support
    if not t1_matters and d["relative_median"] <= th.identity_displacement:
        reasons = [
            f"median ||h* - z0|| / max(||z0||, ||h*||) = {d['relative_median']:.2g} (<= {th.identity_displacement:g}):"
            " the solved state is its start",
            f"substituting z0 for h* changes accuracy by {points(report.substitution)} (not a change that matters)",
        ]
        return "lazy identity collapse", reasons + support
    if t1_matters and t1 < 0:
        name, reasons = _when_t1_costs(report, th)
        return name, reasons + support
    if not t1_matters and not zero_matters:
        name, reasons = _when_nothing_changes(report, th)
        return name, reasons + support
    reasons = [
        f"T1 changes accuracy by {points(report.substitution)} and zeroing by {points(report.zeroing)} with "
        f"median relative displacement {d['relative_median']:.2g}: no rule applies cleanly"
    ]
    return "inconclusive", reasons + support


def _change_matters(row: dict, th: AuditThresholds) -> bool:
    """Whether an accuracy change (T1, zeroing) is both large and not chance: by the exact sign test where the
    report has it (``p``), else by the normal ``z`` (reports of schema 2 and before)."""
    significant = row["p"] <= two_sided_p(th.significance) if "p" in row else abs(row["z"]) >= th.significance
    return abs(row["change_points"]) >= th.substitution_points and significant


def _when_t1_costs(report: AuditReport, th: AuditThresholds) -> tuple[str, list[str]]:
    """Substituting z0 costs accuracy: ``computing`` when a second, independent sign agrees, else ``inconclusive``."""
    t1 = report.substitution
    test = f"exact sign test p = {t1['p']:.2g}" if "p" in t1 else f"{-t1['z']:.1f} standard errors"
    reasons = [
        f"substituting z0 for h* costs {-t1['change_points']:.2f} points (+/- {t1['se_points']:.2f}, {test}): the "
        "decoder needs what the loop computed",
        f"median relative displacement ||h* - z0|| = {report.displacement['relative_median']:.2g}",
    ]
    second = second_sign(report, th)
    if second:
        return "computing", reasons + [f"and independently: {second}"]
    return "inconclusive", reasons + [
        "but no second, independent sign agrees (the probe does not read the answer better from h* than from "
        f"z0 by {th.significance:g} standard errors, and displaced starts do not return to h*): T1 alone does not "
        "decide"
    ]


def _when_nothing_changes(report: AuditReport, th: AuditThresholds) -> tuple[str, list[str]]:
    """Neither T1 nor zeroing changes accuracy significantly: ``decoder bypass``, or ``inconclusive`` when a change
    is large but on too few units that changed to tell from chance."""
    large = [
        row for row in (report.substitution, report.zeroing) if abs(row["change_points"]) >= th.substitution_points
    ]
    if large:
        row = large[0]
        test = f"exact sign test p = {row['p']:.2g}" if "p" in row else f"normal p = {two_sided_p(row['z']):.2g}"
        return "inconclusive", [
            f"{'T1' if row is report.substitution else 'zeroing'} changes accuracy by {points(row)}, more than "
            f"{th.substitution_points:g} point, but not significantly ({test}): neither a change nor its absence is "
            "shown; more units would decide"
        ]
    return "decoder bypass", [
        f"the loop moves the state (median relative displacement {report.displacement['relative_median']:.2g}) but "
        f"neither substituting z0 ({points(report.substitution)}) nor zeroing h* ({points(report.zeroing)}) "
        "changes accuracy: the decoder ignores the solved state"
    ]


def second_sign(report: AuditReport, th: AuditThresholds) -> str | None:
    """A sign that the loop computes, independent of T1, each beating its own standard error (``None`` when none
    does): the linear probe reads the answer better from h* than from z0 by ``significance`` standard errors of the
    paired difference; or (where T4 applies) at some scale more than half the displaced starts return to h*, by
    ``significance`` binomial standard errors."""
    p = report.probe
    if p.get("se_points") and p["change_points"] > 0 and p["change_points"] >= th.significance * p["se_points"]:
        return f"T2: the probe reads the answer from h* {p['change_points']:+.2f} points better than from z0"
    if not report.family.get("t4_applies", True):
        return None
    half_se = 0.5 / math.sqrt(max(report.num_units, 1))
    for row in report.displaced:
        if row["returned"] - 0.5 >= th.significance * half_se:
            return f"T4: {100 * row['returned']:.0f}% of the starts displaced by {row['scale']:g} x |z0| return to h*"
    return None


def _explosion_reasons(report: AuditReport, th: AuditThresholds) -> list[str]:
    """Reasons to call the solves exploded (empty when they are not)."""
    it = report.iterations
    out = []
    if it["diverged_share"] >= th.explosion_share:
        out.append(f"{100 * it['diverged_share']:.0f}% of solves diverged (>= {100 * th.explosion_share:.0f}%)")
    elif it.get("exploded_share", 0.0) >= th.explosion_share:
        out.append(
            f"{100 * it['exploded_share']:.0f}% of solves exploded (>= {100 * th.explosion_share:.0f}%): diverged, or "
            f"unconverged with ||h*|| at least {th.explosion_growth:g}x the states' scale"
        )
    return out


def _withheld_verdict(report: AuditReport, th: AuditThresholds, exploded: list[str]) -> tuple[str, list[str]] | None:
    """``("at chance", reasons)`` when the model does not beat the majority class, ``("inconclusive", reasons)``
    when its loop has nothing to test; ``None`` when a verdict can be earned."""
    c, unit = report.chance, report.family.get("unit", "unit")
    at_chance = []
    if c and not c["beats_chance"]:
        at_chance = [
            f"accuracy {100 * report.accuracy:.2f}% per {unit} does not beat the majority class "
            f"({100 * c['majority']:.2f}%, the share of {unit}s with the most common answer) by "
            f"{th.significance:g} binomial standard errors ({c['margin_se']:+.1f} SE over {report.num_units} "
            f"{unit}s): an untrained or failed model, so nothing can be said about what its loop does"
        ]
    if report.family.get("untestable"):  # first: however it scores, a loop without recurrence has nothing to test
        return "inconclusive", [report.family["untestable"]] + [f"also: {r}" for r in at_chance]
    if at_chance:
        return "at chance", at_chance + [f"also: {e}" for e in exploded]
    return None


def _supporting_reasons(report: AuditReport, th: AuditThresholds) -> list[str]:
    """Evidence from T2-T4 that goes with any verdict."""
    out = []
    it = report.iterations
    if it["pearson"] is not None:
        out.append(
            f"T3: iterations vs difficulty r = {it['pearson']:+.3f} (Spearman {it['spearman']:+.3f}); "
            f"{100 * it['cap_share']:.1f}% of solves hit the cap of {report.max_iter}"
        )
    else:
        out.append(f"T3: {it['note']}; {100 * it['cap_share']:.1f}% of solves hit the cap of {report.max_iter}")
    p = report.probe
    if p.get("solved") is not None:
        out.append(
            f"T2: a linear probe reads the answer from h* at {pct(p['solved'])}, from z0 at {pct(p['start'])} "
            f"(difference {points(p)}; majority class {pct(p['majority'])}; {p['test_rows']} held-out rows)"
        )
    for row in report.displaced:
        where = max(("returned", "stayed", "elsewhere"), key=lambda k: row[k])
        label = {"returned": "return to h*", "stayed": "stay at their displaced start", "elsewhere": "end elsewhere"}
        out.append(
            f"T4: from z0 + d with |d| = {row['scale']:g} x |z0|, {100 * row[where]:.0f}% {label[where]}; accuracy "
            f"{100 * row['accuracy']:.2f}% ({points(row)})"
        )
    if not report.family.get("t4_applies", True):
        out.append("T4: not applicable (a fixed number of loop steps has no fixed point to return to)")
    return out


__all__ = ["SCHEMA", "VERDICTS", "AuditThresholds", "second_sign", "verdict"]
