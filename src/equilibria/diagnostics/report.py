"""The audit's report: [`AuditReport`] with its table (``str(report)``), its JSON and its three-panel plot, and
the number formats the table and the verdict's reasons share."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch


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
            f"  T1 substitution (z0 -> decoder)     {100 * s['accuracy']:7.2f}%   change {points(s)}",
            f"  zeroing (h* = 0; confounded)        {100 * z['accuracy']:7.2f}%   change {points(z)}",
        ]
        if p.get("solved") is not None:
            lines.append(
                f"  T2 linear probe  on h* / on z0      {pct(p.get('solved'))} / {pct(p.get('start'))}"
                f"   difference {points(p)} (majority class {pct(p.get('majority'))}, {p.get('test_rows', 0)} "
                "held-out rows)"
            )
        lines.append(
            f"  T3 iterations vs difficulty         Pearson {_signed(it['pearson'])}, "
            f"Spearman {_signed(it['spearman'])};"
            f" mean {it['mean_steps']:.1f} of cap {self.max_iter}, {100 * it['cap_share']:.1f}% hit the cap"
        )
        for row in self.displaced:
            lines.append(
                f"  {'T4 |d| = ' + format(row['scale'], 'g') + ' x |z0|':<36}back at h* {100 * row['returned']:5.1f}%, stayed "
                f"{100 * row['stayed']:5.1f}%, elsewhere {100 * row['elsewhere']:5.1f}%; accuracy "
                f"{100 * row['accuracy']:6.2f}% ({points(row)})"
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
        drawn = axes[0].bar(
            list(bars), [100 * v for v in bars.values()], color=["C0", "C1", "C7", "C2", "C3"][: len(bars)]
        )
        axes[0].bar_label(drawn, fmt="%.1f%%", fontsize=8)  # a bar at 0% has no height: its value says it is there
        axes[0].set_ylim(0, 110)
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
        else:
            axes[2].text(0.5, 0.5, "not run in this audit:\nno start z0 + d was tried", ha="center", va="center")
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


def points(row: dict) -> str:
    """A change in points with its standard error, e.g. ``-12.50 +/- 2.10 pts``."""
    return f"{row['change_points']:+.2f} +/- {row['se_points']:.2f} pts"


def _chance_text(chance: dict) -> str:
    if not chance:
        return ""
    return (
        f"(majority class {100 * chance['majority']:.2f}%; {chance['margin_se']:+.1f} SE: "
        f"{'beats' if chance['beats_chance'] else 'does not beat'} chance)"
    )


def pct(x) -> str:
    return "  n/a" if x is None else f"{100 * x:.2f}%"


def _signed(x) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def _jsonable(x):
    return x.tolist() if isinstance(x, torch.Tensor) else str(x)


__all__ = ["AuditReport", "pct", "points"]
