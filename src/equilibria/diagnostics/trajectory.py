"""The loop's trajectory: per loop step, how large the state is, how far one step moves it, and how strongly the
loop map expands around it (a spectral-radius estimate of its Jacobian). The STARS paper's norm diagnosis reads
these: pre-norm states grow without bound, post-norm ones stop moving early, a stable loop settles with a
spectral radius below 1.

from equilibria.diagnostics import loop_trajectory

trajectory = loop_trajectory(model, dataset, loops=[1, 2, 4, 8, 16, 32, 64])
print(trajectory)                 # a table, one row per loop count of ``loops``
trajectory.save("diagnose-out")   # trajectory.json + trajectory.png

Works on every family through its audit adapter's :meth:`~equilibria.diagnostics.LoopAdapter.loop` (the
``loop_map`` protocol): the loop is iterated as the model's forward iterates it (Ouro's steps, EqR's damped update
without noise, the Attractor's and the PH-DEQ's map as a plain fixed-point iteration, not their solvers' steps).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..modeling.regularization import spectral_radius
from .adapters import LoopAdapter, adapter_for


@dataclass
class LoopTrajectory:
    """What :func:`loop_trajectory` measured. Per loop step ``t`` (``steps``: 1 .. max(loops)): ``state_norm`` (the
    mean norm of a position's state ``z_t``), ``relative_step`` (per unit ``||z_t - z_{t-1}|| / ||z_{t-1}||``, the
    mean over units) and at each ``t`` of ``loops`` ``spectral_radius`` (the mean over units of the power-iteration
    estimate at ``z_t``, with its standard error). ``start_norm`` is ``z_0``'s. ``diverged_at``: the first step
    whose state was not finite (the trajectory stops there)."""

    family: str
    loops: list[int]
    steps: list[int]
    state_norm: list[float]
    relative_step: list[float]
    spectral_radius: dict[int, float]
    spectral_radius_se: dict[int, float]
    start_norm: float
    units: int
    power_iters: int
    diverged_at: int | None = None
    data: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def at(self, t: int) -> dict:
        """The row of loop step ``t``: ``{"loop", "state_norm", "relative_step", "spectral_radius", ...}``."""
        i = self.steps.index(t)
        return {
            "loop": t,
            "state_norm": self.state_norm[i],
            "relative_step": self.relative_step[i],
            "spectral_radius": self.spectral_radius.get(t),
            "spectral_radius_se": self.spectral_radius_se.get(t),
        }

    def __str__(self) -> str:
        lines = [
            f"loop trajectory of {self.family} on {self.units} units (|z_0| = {self.start_norm:.3g}; spectral radius "
            f"by {self.power_iters} power iterations)",
            f"  {'loop':>5} | {'|z_t|':>10} | {'|z_t - z_t-1| / |z_t-1|':>24} | {'spectral radius':>17}",
        ]
        for t in self.loops:
            if t not in self.steps:
                continue
            row = self.at(t)
            radius = (
                "n/a"
                if row["spectral_radius"] is None
                else f"{row['spectral_radius']:.3f} +/- {row['spectral_radius_se']:.3f}"
            )
            lines.append(f"  {t:>5} | {row['state_norm']:>10.4g} | {row['relative_step']:>24.3e} | {radius:>17}")
        if self.diverged_at is not None:
            lines.append(f"  diverged: the state is not finite from loop step {self.diverged_at} on")
        return "\n".join(lines)

    def plot(self, path: str | Path) -> bool:
        """Three panels against the loop step (log scale): the state's norm (the start's ``|z_0|`` a dashed line), the
        relative step, the spectral radius (a dotted line at 1, saying what above and below mean). False (no file)
        without matplotlib."""
        try:
            import matplotlib
        except ImportError:
            return False
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
        axes[0].plot(self.steps, self.state_norm, marker=".")
        # t = 0 has no place on a log axis: the start's norm is a line across it
        axes[0].axhline(self.start_norm, color="gray", ls="--", lw=1, label=f"|z_0| = {self.start_norm:.3g} (start)")
        axes[0].legend(fontsize=8)
        axes[0].set_ylabel("mean |z_t|")
        axes[1].plot(self.steps, self.relative_step, marker=".")
        axes[1].set_yscale("log")
        axes[1].set_ylabel("|z_t - z_t-1| / |z_t-1|")
        radius = sorted(self.spectral_radius.items())
        axes[2].errorbar(
            [t for t, _ in radius], [r for _, r in radius], yerr=[self.spectral_radius_se[t] for t, _ in radius],
            marker="o", capsize=3,
        )  # fmt: skip
        axes[2].axhline(
            1.0,
            color="gray",
            ls=":",
            lw=1,
            label="1: above, a small change of the state\ngrows over a step; below, it shrinks",
        )
        axes[2].legend(fontsize=7)
        axes[2].set_ylabel("spectral radius of the loop map")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("loop step t")
            ax.grid(alpha=0.3)
        fig.suptitle(f"loop trajectory of {self.family} ({self.units} units)")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True

    def save(self, directory: str | Path) -> Path:
        """Write ``trajectory.json`` and ``trajectory.png`` (when matplotlib is installed) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "trajectory.json").write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        self.plot(directory / "trajectory.png")
        return directory


def check_loops(loops) -> list[int]:
    """``loops`` as a sorted list of distinct integers >= 1 (``ValueError`` naming ``loops`` otherwise)."""
    values = list(loops) if not isinstance(loops, int) else [loops]
    if not values or any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in values):
        raise ValueError(f"loops must be loop counts, integers >= 1, got {loops!r}")
    return sorted(set(values))


class _Sums:
    """Running sums per loop step over batches (sums of values and of squares, counts)."""

    def __init__(self):
        self.total, self.squares, self.count = {}, {}, {}

    def add(self, t: int, values: torch.Tensor) -> None:
        values = values.double()
        self.total[t] = self.total.get(t, 0.0) + values.sum().item()
        self.squares[t] = self.squares.get(t, 0.0) + values.square().sum().item()
        self.count[t] = self.count.get(t, 0) + values.numel()

    def mean(self, t: int) -> float:
        return self.total[t] / self.count[t]

    def se(self, t: int) -> float:
        n = self.count[t]
        if n < 2:
            return 0.0
        variance = max(self.squares[t] / n - self.mean(t) ** 2, 0.0) * n / (n - 1)
        return math.sqrt(variance / n)


def _batch_trajectory(
    adapter: LoopAdapter, batch, last: int, loops: set, power_iters: int, seed: int, sums
) -> int | None:
    """Iterate one batch's loop to ``last`` steps, adding its measurements to ``sums``; the first non-finite step."""
    loop_map, valid = adapter.loop(batch)
    z = loop_map.start.detach()
    positions = torch.ones(z.shape[: z.dim() - 1], dtype=torch.bool) if valid is None else valid
    keep = positions[..., None].to(z.dtype)

    def unit_norm(x):
        return (x * keep).flatten(1).norm(dim=1)

    sums["start"].add(0, z.norm(dim=-1)[positions])
    for t in range(1, last + 1):
        with torch.no_grad():
            new = loop_map(z).detach()
        if not torch.isfinite(new[positions]).all():
            return t
        sums["norm"].add(t, new.norm(dim=-1)[positions])
        sums["step"].add(t, unit_norm(new - z) / unit_norm(z).clamp_min(1e-30))
        z = new
        if t in loops:
            with torch.enable_grad():
                rho = spectral_radius(
                    loop_map, z, num_iters=power_iters, valid=valid, create_graph=False,
                    generator=torch.Generator(z.device).manual_seed(seed + t),
                )  # fmt: skip
            sums["radius"].add(t, rho.detach())
    return None


def loop_trajectory(
    model,
    dataset,
    loops=(1, 2, 4, 8, 16, 32, 64),
    *,
    num_examples: int | None = 64,
    batch_size: int = 32,
    power_iters: int = 20,
    seed: int = 0,
    adapter: LoopAdapter | None = None,
) -> LoopTrajectory:
    """The trajectory of ``model``'s loop on the first ``num_examples`` units of ``dataset`` (``None``: all), run to
    ``max(loops)`` steps from the loop's own start, with the spectral radius of the loop map's Jacobian estimated
    at each step of ``loops`` by ``power_iters`` power iterations (:func:`~equilibria.modeling.regularization.
    spectral_radius`, vector-Jacobian products, start vectors seeded by ``seed``). ``dataset`` has the columns the
    family's audit adapter reads (e.g. ``input_ids`` and ``labels`` for a language model)."""
    loops = check_loops(loops)
    if isinstance(power_iters, bool) or not isinstance(power_iters, int) or power_iters < 1:
        raise ValueError(f"power_iters must be an integer >= 1, got {power_iters!r}")
    adapter = adapter if adapter is not None else adapter_for(model, seed=seed)
    if num_examples is not None:
        dataset = dataset.select(range(min(num_examples, len(dataset))))
    was_training = model.training
    model.eval()
    sums = {name: _Sums() for name in ("start", "norm", "step", "radius")}
    diverged = None
    try:
        for batch in adapter.on_model_device(adapter.batches(dataset, batch_size)):
            stop = _batch_trajectory(adapter, batch, max(loops), set(loops), power_iters, seed, sums)
            diverged = stop if diverged is None or (stop is not None and stop < diverged) else diverged
    finally:
        model.train(was_training)
    steps = sorted(sums["norm"].count) if diverged is None else sorted(t for t in sums["norm"].count if t < diverged)
    radius_steps = [t for t in sorted(sums["radius"].count) if t in steps]
    return LoopTrajectory(
        family=adapter.family,
        loops=loops,
        steps=steps,
        state_norm=[sums["norm"].mean(t) for t in steps],
        relative_step=[sums["step"].mean(t) for t in steps],
        spectral_radius={t: sums["radius"].mean(t) for t in radius_steps},
        spectral_radius_se={t: sums["radius"].se(t) for t in radius_steps},
        start_norm=sums["start"].mean(0),
        units=len(dataset),
        power_iters=power_iters,
        diverged_at=diverged,
        model=_model_record(model),
    )


def _model_record(model) -> dict:
    config = model.config
    record = {"model_type": getattr(config, "model_type", type(model).__name__)}
    if hasattr(config, "norm_placement"):
        record["norm_placement"] = config.norm_placement
    return record


__all__ = ["LoopTrajectory", "check_loops", "loop_trajectory"]
