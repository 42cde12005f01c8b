"""The computation audit: is the loop computing, or has it collapsed onto its start state?

A recurrent or equilibrium model can look healthy (it converges, it is accurate, it uses its iteration budget)
while its loop does nothing: the solved state equals the solver's start, and the decoder gets the answer from a
direct path. ``audit(model, dataset)`` runs four tests and a contrast on any family of this package:

* **T1 substitution**: feed the start state ``z0`` to the decoder in place of ``h*``; the accuracy it costs, in
  points. A loop that computes is needed: substituting its start loses accuracy.
* **T2 representation probe**: a fresh linear probe trained on frozen ``h*`` (and on ``z0`` for contrast); what
  the solved state encodes linearly.
* **T3 iteration-difficulty correlation**: Pearson and Spearman ``r`` between the iterations used and the
  difficulty label, and the share of solves that hit the cap.
* **T4 forced displacement**: start the loop from ``z0 + d`` for several ``|d|``; the share that returns to
  ``h*``, stays near the displaced start, or goes elsewhere, and the accuracy from there.
* **Zeroing** (``h* = 0``), reported beside T1 and marked as confounded: a zero state is off the decoder's
  input distribution, so a loss there does not show the loop computes.

Plus the displacement ``||h* - z0||`` and a verdict with its reasons: ``computing``, ``lazy identity collapse``,
``decoder bypass`` (the loop moves the state but the decoder ignores it), ``solver explosion``, ``at chance`` or
``inconclusive``.

``computing`` needs T1 and a second, independent sign (the T2 probe, or T4's return to ``h*``), each beating its
own standard error; a loop of one step, or without shared weights, gets ``inconclusive`` (no recurrence to test).
Every verdict but ``at chance`` and ``inconclusive`` needs a model that does something: its accuracy (per unit:
an example, a puzzle with every cell right, a sequence with every labelled token right) must beat the majority
class (the share of units whose whole answer is the most common one) by ``significance`` binomial standard
errors. Every accuracy change (T1, zeroing, T2, T4) is reported with its standard error.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import asdict

import torch
from tqdm.auto import tqdm  # a dependency of transformers and datasets

from .adapters import LoopAdapter, adapter_for
from .probes import probe_solved_and_start
from .report import AuditReport
from .statistics import (
    chance_baseline,
    displacement_outcomes,
    displacement_summary,
    iteration_summary,
    paired_change,
)
from .verdict_rules import SCHEMA, AuditThresholds, verdict


@torch.no_grad()
def audit(
    model,
    dataset,
    *,
    adapter: LoopAdapter | None = None,
    num_loops: int | None = None,
    batch_size: int = 64,
    max_units: int | None = None,
    displacement_scales: tuple[float, ...] = (0.1, 1.0, 10.0),
    probe: bool = True,
    probe_rows: int = 20000,
    thresholds: AuditThresholds | None = None,
    seed: int = 0,
    progress: bool = True,
    **adapter_options,
) -> AuditReport:
    """Audit ``model``'s loop on ``dataset`` (a ``datasets.Dataset`` with the columns its family's adapter
    reads: see :mod:`equilibria.diagnostics.adapters`). Returns an [`AuditReport`].

    Args:
        adapter: How to read the model; default: the adapter of its ``config.model_type``.
        num_loops: The loop's budget (solver cap, EqR depth, Ouro steps); default: the config's.
        max_units: Audit only the first this many examples.
        displacement_scales: T4's ``|d|`` as multiples of ``||z0||`` (of ``||h*||`` where ``z0 = 0``).
        probe: Run T2 (train linear probes).
        probe_rows: At most this many rows (examples, cells or tokens) for the probes.
        thresholds: The verdict's lines, [`AuditThresholds`].
        seed: Seeds the displacements, the probes' split and EqR's start states.
    """
    thresholds = thresholds or AuditThresholds()
    scales = _check_audit_arguments(dataset, batch_size, displacement_scales)
    if max_units is not None:
        dataset = dataset.select(range(min(max_units, len(dataset))))
    if adapter is None:
        adapter_options.setdefault("seed", seed)
        adapter = adapter_for(model, num_loops=num_loops, **adapter_options)
    was_training = model.training
    model.eval()
    evidence = _Evidence(scales, thresholds.return_tolerance, probe_rows if probe else 0, seed)
    batches = adapter.on_model_device(adapter.batches(dataset, batch_size))
    total = math.ceil(len(dataset) / batch_size)
    try:
        for batch in tqdm(batches, total=total, desc="audit", disable=not progress):
            evidence.add(adapter, batch)
    finally:
        model.train(was_training)
    return evidence.report(model, adapter, thresholds)


def _check_audit_arguments(dataset, batch_size: int, displacement_scales) -> tuple[float, ...]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    scales = tuple(float(s) for s in displacement_scales)
    if any(not (s > 0 and math.isfinite(s)) for s in scales):
        raise ValueError(f"displacement_scales must be finite numbers > 0, got {displacement_scales!r}")
    if len(dataset) == 0:
        raise ValueError("the dataset is empty: nothing to audit")
    return scales


class _Evidence:
    """What the audit collects batch by batch (per-unit tensors), and the report made from it."""

    def __init__(self, scales: tuple[float, ...], tolerance: float, probe_rows: int, seed: int):
        self.scales, self.tolerance, self.probe_rows, self.seed = scales, tolerance, probe_rows, seed
        self.generator = torch.Generator().manual_seed(seed)
        keys = ("correct", "t1", "zero", "steps", "conv", "div", "disp", "rel", "n0", "n1", "difficulty")
        self.units: dict[str, list] = {k: [] for k in keys}
        self.answers: list[tuple] = []
        outcomes = ("returned", "stayed", "elsewhere", "diverged", "correct")
        self.t4 = {s: {k: [] for k in outcomes} for s in scales}
        self.probe = {"solved": [], "start": [], "targets": []}

    def add(self, adapter: LoopAdapter, batch: dict) -> None:
        """Run one batch through the loop, the decoder on z0 and on 0, the displaced starts and the probe rows."""
        run = adapter.run(batch)
        start, solved = run.start.float(), run.solved.float()
        gap = (solved - start).norm(dim=1)
        n0, n1 = start.norm(dim=1), solved.norm(dim=1)
        difficulty = adapter.difficulty(batch)
        for key, value in (
            ("correct", run.correct),
            ("t1", adapter.decode(batch, run, run.start)),
            ("zero", adapter.decode(batch, run, torch.zeros_like(run.solved))),
            ("steps", run.steps.double()),
            ("conv", run.converged),
            ("div", run.diverged | ~torch.isfinite(solved).all(1)),
            ("disp", gap),
            ("rel", gap / torch.maximum(n0, n1).clamp_min(1e-30)),
            ("n0", n0),
            ("n1", n1),
            ("difficulty", difficulty),
        ):
            if value is not None:
                self.units[key].append(value)
        self.answers += adapter.answers(batch)
        base = torch.where(n0 > 0, n0, torch.where(n1 > 0, n1, torch.ones_like(n1)))
        for scale in self.scales if adapter.displacement_applies else ():
            self._displace(adapter, batch, run, scale, scale * base)
        if self.probe_rows and sum(len(t) for t in self.probe["targets"]) < self.probe_rows:
            feats, targets = adapter.probe_examples(batch, run, run.solved)
            feats0, _ = adapter.probe_examples(batch, run, run.start)
            self.probe["solved"].append(feats.float())
            self.probe["start"].append(feats0.float())
            self.probe["targets"].append(targets)

    def _displace(self, adapter: LoopAdapter, batch: dict, run, scale: float, size: torch.Tensor) -> None:
        """T4 at one scale: start from ``z0 + d`` with ``|d| = size`` in a random direction (padding stays 0)."""
        start, solved = run.start.float(), run.solved.float()
        direction = torch.randn(start.shape, generator=self.generator, dtype=start.dtype)
        if run.valid is not None:
            direction = direction * run.valid.to(direction.dtype)
        d = direction / direction.norm(dim=1, keepdim=True).clamp_min(1e-30) * size[:, None]
        moved = adapter.run(batch, start=(start + d).to(run.start.dtype))
        end = moved.solved.float()
        reach = self.tolerance * d.norm(dim=1)
        returned = (end - solved).norm(dim=1) <= reach
        stayed = ~returned & ((end - (start + d)).norm(dim=1) <= reach)
        bad = moved.diverged | ~torch.isfinite(end).all(1)
        row = self.t4[scale]
        row["returned"].append(returned & ~bad)
        row["stayed"].append(stayed & ~bad)
        row["elsewhere"].append(~returned & ~stayed | bad)
        row["diverged"].append(bad)
        row["correct"].append(moved.correct)

    def report(self, model, adapter: LoopAdapter, thresholds: AuditThresholds) -> AuditReport:
        cat = {k: torch.cat(v) if v else None for k, v in self.units.items()}
        correct = cat["correct"]
        family = {**adapter.describe(), "unit": adapter.unit_name, "t4_applies": adapter.displacement_applies}
        untestable = adapter.untestable()
        if untestable:
            family["untestable"] = untestable
        report = AuditReport(
            model_type=str(model.config.model_type),
            family=family,
            num_units=len(correct),
            max_iter=int(adapter.max_iter),
            accuracy=correct.float().mean().item(),
            displacement=displacement_summary(cat),
            substitution=paired_change(cat["t1"], correct),
            zeroing={**paired_change(cat["zero"], correct), "confounded": True},
            probe=self._probe_result(),
            iterations=iteration_summary(cat, adapter.max_iter, thresholds.explosion_growth),
            displaced=[
                {"scale": scale, **displacement_outcomes(row, correct)}
                for scale, row in self.t4.items()
                if row["correct"]
            ],
            verdict="",
            reasons=[],
            thresholds=asdict(thresholds),
            chance=chance_baseline(correct, self.answers, thresholds.significance),
            schema=SCHEMA,
        )
        report.verdict, report.reasons = verdict(report, thresholds)
        return report

    def _probe_result(self) -> dict:
        if not self.probe["targets"]:
            return {}
        rows = self.probe_rows
        solved, start = torch.cat(self.probe["solved"])[:rows], torch.cat(self.probe["start"])[:rows]
        return probe_solved_and_start(solved, start, torch.cat(self.probe["targets"])[:rows], self.seed)


# public names this module held before the audit was split by concern (#41): importing one from here still works,
# with a warning, for one release
# (each new module is imported above, so it is in sys.modules)
_MOVED = {
    "VERDICTS": "verdict_rules",
    "second_sign": "verdict_rules",
    "exploded_solves": "statistics",
    "holm": "statistics",
    "sign_test": "statistics",
    "two_sided_p": "statistics",
    "linear_probe": "probes",
}


def __getattr__(name: str):
    """The names in ``_MOVED`` from their new modules, with a ``DeprecationWarning``."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new = sys.modules[f"{__package__}.{_MOVED[name]}"]
    warnings.warn(
        f"{__name__}.{name} is now {new.__name__}.{name} (the old path goes in the next release)", DeprecationWarning, 2
    )
    return getattr(new, name)


__all__ = ["audit"]
