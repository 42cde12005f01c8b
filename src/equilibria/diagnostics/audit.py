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

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm  # a dependency of transformers and datasets

from .adapters import LoopAdapter, adapter_for

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


@dataclass
class AuditReport:
    """The audit's findings; ``str(report)`` is a table, ``save(dir)`` writes JSON and a plot."""

    model_type: str
    family: dict
    num_units: int
    max_iter: int
    accuracy: float
    displacement: dict
    substitution: dict
    zeroing: dict
    probe: dict
    iterations: dict
    displaced: list
    verdict: str
    reasons: list
    thresholds: dict = field(default_factory=dict)
    chance: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)  # what the units are (set by the caller, e.g. ``equilibria audit``)
    weights: str | None = None  # the fingerprint of the weights audited (``equilibria.provenance``; set by the caller)
    # the verdict rules it was made with (SCHEMA): 3 = T1 and zeroing decided by the exact sign test, EqR's start
    # is the state after its first step; 2 = no verdict without recurrence, explosions by the states' scale,
    # `computing` needs a second sign; 1 = the rules before (a file without the key)
    schema: int = 1

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, default=_jsonable) + "\n"
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, path: str | Path) -> AuditReport:
        return cls(**json.loads(Path(path).read_text()))

    def __str__(self) -> str:
        d, s, z, p, it = self.displacement, self.substitution, self.zeroing, self.probe, self.iterations
        lines = [
            f"computation audit: {self.model_type} ({self.num_units} units; start {self.family['start']}; "
            f"solved {self.family['solved']})",
            *([f"  data: {self.data['name']}; {self.data['note']}"] if self.data.get("note") else []),
            f"  accuracy (decoder on h*)            {100 * self.accuracy:7.2f}%   {_chance_text(self.chance)}",
            f"  ||h* - z0||  median / mean / max    {d['median']:.3g} / {d['mean']:.3g} / {d['max']:.3g}"
            f"   (relative median {d['relative_median']:.3g})",
            f"  T1 substitution (z0 -> decoder)     {100 * s['accuracy']:7.2f}%   change {_points(s)}",
            f"  zeroing (h* = 0; confounded)        {100 * z['accuracy']:7.2f}%   change {_points(z)}",
        ]
        if p.get("solved") is not None:
            lines.append(
                f"  T2 linear probe  on h* / on z0      {_pct(p.get('solved'))} / {_pct(p.get('start'))}"
                f"   difference {_points(p)} (majority class {_pct(p.get('majority'))}, {p.get('test_rows', 0)} "
                "held-out rows)"
            )
        lines.append(
            f"  T3 iterations vs difficulty         Pearson {_num(it['pearson'])}, Spearman {_num(it['spearman'])};"
            f" mean {it['mean_steps']:.1f} of cap {self.max_iter}, {100 * it['cap_share']:.1f}% hit the cap"
        )
        for row in self.displaced:
            lines.append(
                f"  {'T4 |d| = ' + format(row['scale'], 'g') + ' x |z0|':<36}back at h* {100 * row['returned']:5.1f}%, stayed "
                f"{100 * row['stayed']:5.1f}%, elsewhere {100 * row['elsewhere']:5.1f}%; accuracy "
                f"{100 * row['accuracy']:6.2f}% ({_points(row)})"
            )
        if not self.family.get("t4_applies", True):
            lines.append("  T4 forced displacement              not applicable (no fixed point to return to)")
        lines.append(f"  verdict: {self.verdict.upper()}")
        lines += [f"    - {reason}" for reason in self.reasons]
        return "\n".join(lines)

    def plot(self, path: str | Path) -> None:
        """Save a three-panel figure: the decoder's accuracy on h*, z0 and 0 with the linear probes (T1, zeroing,
        T2), the displacement histogram, and T4's outcomes by displacement size."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        bars = {
            "h*": self.accuracy,
            "z0 (T1)": self.substitution["accuracy"],
            "0 (zeroing)": self.zeroing["accuracy"],
        }
        if self.probe:
            bars["probe h*"] = self.probe.get("solved") or 0.0
            bars["probe z0"] = self.probe.get("start") or 0.0
        axes[0].bar(list(bars), [100 * v for v in bars.values()], color=["C0", "C1", "C7", "C2", "C3"][: len(bars)])
        axes[0].set_ylabel("accuracy (%)")
        axes[0].set_title("decoder on h*, on z0, on 0; linear probes")
        axes[0].tick_params(axis="x", labelsize=8)
        hist = self.displacement.get("log10_histogram")
        if hist:
            edges, counts = hist["edges"], hist["counts"]
            axes[1].bar(edges[:-1], counts, width=[b - a for a, b in zip(edges[:-1], edges[1:])], align="edge")
        axes[1].set_xlabel("log10 ||h* - z0||")
        axes[1].set_ylabel("units")
        axes[1].set_title(f"displacement (cap share {100 * self.iterations['cap_share']:.0f}%)")
        if self.displaced:
            scales = [row["scale"] for row in self.displaced]
            for key, label in (("returned", "back at h*"), ("stayed", "stayed at z0 + d"), ("elsewhere", "elsewhere")):
                axes[2].plot(scales, [100 * row[key] for row in self.displaced], marker="o", label=label)
            axes[2].plot(scales, [100 * row["accuracy"] for row in self.displaced], "k--", label="accuracy")
            axes[2].set_xscale("log")
            axes[2].legend(fontsize=8)
        elif not self.family.get("t4_applies", True):
            axes[2].text(0.5, 0.5, "not applicable:\nno fixed point to return to", ha="center", va="center")
        axes[2].set_xlabel("|d| / |z0|")
        axes[2].set_ylabel("%")
        axes[2].set_title("T4: starting from z0 + d")
        fig.suptitle(f"computation audit of {self.model_type}: {self.verdict}")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    def save(self, directory: str | Path) -> Path:
        """Write ``audit.json`` and ``audit.png`` (when matplotlib is installed) into ``directory``, saying so when
        that replaces an audit of other data or weights."""
        from ..provenance import replacement_note

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        note = replacement_note(directory / "audit.json", self.to_dict())
        if note:
            print(note)
        self.to_json(directory / "audit.json")
        try:
            self.plot(directory / "audit.png")
        except ImportError:
            pass
        return directory


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
    batches = adapter.batches(dataset, batch_size)
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
            displacement=_displacement_summary(cat),
            substitution=paired_change(cat["t1"], correct),
            zeroing={**paired_change(cat["zero"], correct), "confounded": True},
            probe=self._probe_result(),
            iterations=_iteration_summary(cat, adapter.max_iter, thresholds.explosion_growth),
            displaced=[{"scale": scale, **_rates(row, correct)} for scale, row in self.t4.items() if row["correct"]],
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
        return _probe_both(solved, start, torch.cat(self.probe["targets"])[:rows], self.seed)


def _rates(row: dict, correct: torch.Tensor) -> dict:
    """T4's outcome shares at one scale, and the decoder's accuracy from the displaced run with its paired
    change from the undisturbed run (``accuracy``, ``change_points``, ``se_points``, ``z``)."""
    merged = {k: torch.cat(v).float().mean().item() for k, v in row.items() if k != "correct"}
    return {**merged, **paired_change(torch.cat(row["correct"]), correct)}


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


def _displacement_summary(cat: dict) -> dict:
    disp, rel = cat["disp"], cat["rel"]
    finite = torch.isfinite(disp)
    return {
        "median": _stat(disp[finite], "median"),
        "mean": _stat(disp[finite], "mean"),
        "max": _stat(disp[finite], "max"),
        "relative_median": _stat(rel[torch.isfinite(rel)], "median"),
        "start_norm_median": _stat(cat["n0"], "median"),
        "solved_norm_median": _stat(cat["n1"], "median"),
        "nonfinite": int((~finite).sum()),
        "log10_histogram": _histogram(disp[finite]),
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


def _iteration_summary(cat: dict, max_iter: int, growth: float) -> dict:
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


def verdict(report: AuditReport, thresholds: AuditThresholds | None = None) -> tuple[str, list[str]]:
    """The verdict and its reasons from a report's numbers (see the module docstring for the rules)."""
    th = thresholds or AuditThresholds()
    d = report.displacement
    t1, zero = report.substitution["change_points"], report.zeroing["change_points"]
    t1_matters, zero_matters = _matters(report.substitution, th), _matters(report.zeroing, th)
    support = _supporting(report, th)
    exploded = _explosion(report, th)
    withheld = _withheld(report, th, exploded)
    if withheld:
        return withheld[0], withheld[1] + support
    if exploded:
        if zero_matters and zero > 0:
            exploded.append(f"zeroing h* improves accuracy by {_points(report.zeroing)}: the solved state hurts")
        return "solver explosion", exploded + support
    if not t1_matters and d["relative_median"] <= th.identity_displacement:
        reasons = [
            f"median ||h* - z0|| / max(||z0||, ||h*||) = {d['relative_median']:.2g} (<= {th.identity_displacement:g}):"
            " the solved state is its start",
            f"substituting z0 for h* changes accuracy by {_points(report.substitution)} (not a change that matters)",
        ]
        return "lazy identity collapse", reasons + support
    if t1_matters and t1 < 0:
        name, reasons = _t1_costs(report, th)
        return name, reasons + support
    if not t1_matters and not zero_matters:
        name, reasons = _nothing_changes(report, th)
        return name, reasons + support
    reasons = [
        f"T1 changes accuracy by {_points(report.substitution)} and zeroing by {_points(report.zeroing)} with "
        f"median relative displacement {d['relative_median']:.2g}: no rule applies cleanly"
    ]
    return "inconclusive", reasons + support


def _matters(row: dict, th: AuditThresholds) -> bool:
    """Whether an accuracy change (T1, zeroing) is both large and not chance: by the exact sign test where the
    report has it (``p``), else by the normal ``z`` (reports of schema 2 and before)."""
    significant = row["p"] <= two_sided_p(th.significance) if "p" in row else abs(row["z"]) >= th.significance
    return abs(row["change_points"]) >= th.substitution_points and significant


def _t1_costs(report: AuditReport, th: AuditThresholds) -> tuple[str, list[str]]:
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


def _nothing_changes(report: AuditReport, th: AuditThresholds) -> tuple[str, list[str]]:
    """Neither T1 nor zeroing changes accuracy significantly: ``decoder bypass``, or ``inconclusive`` when a change
    is large but on too few units that changed to tell from chance."""
    large = [
        row for row in (report.substitution, report.zeroing) if abs(row["change_points"]) >= th.substitution_points
    ]
    if large:
        row = large[0]
        test = f"exact sign test p = {row['p']:.2g}" if "p" in row else f"normal p = {two_sided_p(row['z']):.2g}"
        return "inconclusive", [
            f"{'T1' if row is report.substitution else 'zeroing'} changes accuracy by {_points(row)}, more than "
            f"{th.substitution_points:g} point, but not significantly ({test}): neither a change nor its absence is "
            "shown; more units would decide"
        ]
    return "decoder bypass", [
        f"the loop moves the state (median relative displacement {report.displacement['relative_median']:.2g}) but "
        f"neither substituting z0 ({_points(report.substitution)}) nor zeroing h* ({_points(report.zeroing)}) "
        "changes accuracy: the decoder ignores the solved state"
    ]


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


def _explosion(report: AuditReport, th: AuditThresholds) -> list[str]:
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


def _withheld(report: AuditReport, th: AuditThresholds, exploded: list[str]) -> tuple[str, list[str]] | None:
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


def _points(row: dict) -> str:
    """A change in points with its standard error, e.g. ``-12.50 +/- 2.10 pts``."""
    return f"{row['change_points']:+.2f} +/- {row['se_points']:.2f} pts"


def _chance_text(chance: dict) -> str:
    if not chance:
        return ""
    return (
        f"(majority class {100 * chance['majority']:.2f}%; {chance['margin_se']:+.1f} SE: "
        f"{'beats' if chance['beats_chance'] else 'does not beat'} chance)"
    )


def _supporting(report: AuditReport, th: AuditThresholds) -> list[str]:
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
            f"T2: a linear probe reads the answer from h* at {_pct(p['solved'])}, from z0 at {_pct(p['start'])} "
            f"(difference {_points(p)}; majority class {_pct(p['majority'])}; {p['test_rows']} held-out rows)"
        )
    for row in report.displaced:
        where = max(("returned", "stayed", "elsewhere"), key=lambda k: row[k])
        label = {"returned": "return to h*", "stayed": "stay at their displaced start", "elsewhere": "end elsewhere"}
        out.append(
            f"T4: from z0 + d with |d| = {row['scale']:g} x |z0|, {100 * row[where]:.0f}% {label[where]}; accuracy "
            f"{100 * row['accuracy']:.2f}% ({_points(row)})"
        )
    if not report.family.get("t4_applies", True):
        out.append("T4: not applicable (a fixed number of loop steps has no fixed point to return to)")
    return out


def _probe_both(solved: torch.Tensor, start: torch.Tensor, targets: torch.Tensor, seed: int) -> dict:
    n = len(targets)
    if n < 4 or targets.unique().numel() < 2:
        return {"note": "too few rows or a single class: probe not trained"}
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    train, test = perm[: n // 2], perm[n // 2 :]
    counts = torch.bincount(targets[train])
    majority = (targets[test] == counts.argmax()).float().mean().item()
    on_solved = _probe_correct(solved[train], targets[train], solved[test], targets[test])
    on_start = _probe_correct(start[train], targets[train], start[test], targets[test])
    n = len(test)
    difference = paired_change(on_solved, on_start)
    return {
        "solved": on_solved.double().mean().item(),
        "solved_se": math.sqrt(difference["accuracy"] * (1 - difference["accuracy"]) / n),
        "start": on_start.double().mean().item(),
        "start_se": on_start.double().std().item() / math.sqrt(n),
        "change_points": difference["change_points"],
        "se_points": difference["se_points"],
        "majority": majority,
        "train_rows": len(train),
        "test_rows": len(test),
    }


def linear_probe(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    weight_decay: float = 1e-3,
    max_iter: int = 200,
) -> float:
    """Held-out accuracy of a multinomial logistic regression (standardised features, L2, L-BFGS) trained on
    ``(train_x, train_y)``."""
    return _probe_correct(train_x, train_y, test_x, test_y, weight_decay, max_iter).double().mean().item()


def _probe_correct(train_x, train_y, test_x, test_y, weight_decay: float = 1e-3, max_iter: int = 200) -> torch.Tensor:
    """Per held-out row: is :func:`linear_probe`'s prediction right?"""
    mean, std = train_x.mean(0), train_x.std(0).clamp_min(1e-6)
    xtr, xte = (train_x - mean) / std, (test_x - mean) / std
    xtr, xte = torch.nan_to_num(xtr), torch.nan_to_num(xte)
    classes = int(max(train_y.max(), test_y.max())) + 1
    linear = torch.nn.Linear(xtr.shape[1], classes).double()
    torch.nn.init.zeros_(linear.weight)
    torch.nn.init.zeros_(linear.bias)
    xtr, xte = xtr.double(), xte.double()
    optimizer = torch.optim.LBFGS(linear.parameters(), lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        with torch.enable_grad():
            loss = torch.nn.functional.cross_entropy(linear(xtr), train_y) + weight_decay * linear.weight.pow(2).sum()
            loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return linear(xte).argmax(-1) == test_y


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


def _stat(x: torch.Tensor, how: str) -> float:
    if x.numel() == 0:
        return float("nan")
    return float(getattr(x.double(), how)())


def _histogram(x: torch.Tensor, bins: int = 30) -> dict | None:
    if x.numel() == 0:
        return None
    logs = x.double().clamp_min(1e-30).log10()
    lo, hi = float(logs.min()), float(logs.max())
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    counts = torch.histc(logs, bins=bins, min=lo, max=hi)
    edges = torch.linspace(lo, hi, bins + 1)
    return {"edges": [round(float(e), 4) for e in edges], "counts": [int(c) for c in counts]}


def _pct(x) -> str:
    return "  n/a" if x is None else f"{100 * x:.2f}%"


def _num(x) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def _jsonable(x):
    return x.tolist() if isinstance(x, torch.Tensor) else str(x)


__all__ = [
    "VERDICTS",
    "AuditReport",
    "AuditThresholds",
    "audit",
    "chance_baseline",
    "linear_probe",
    "paired_change",
    "verdict",
]
