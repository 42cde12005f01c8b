"""Fixed-point solvers and their gradients, shared by the equilibrium families.

``solve(f, z0, ...) -> (z_star, stats)`` finds ``z = f(z)`` for a batch of problems (the first dimension
of ``z0``), with per-sample stopping: a sample stops iterating once its relative residual
``||f(z) - z|| / ||f(z)||`` is below ``tol``. Every solver returns, per sample, the iterate with the lowest
residual it saw; samples whose residual became NaN/inf or grew far beyond where it started are flagged as
diverged in the stats (and a warning is issued once), never returned silently as if converged.

Gradients are a separate piece (as in torchdeq):

* ``one_step_gradient(f, z_star)``: ``f(z*.detach())``, the one-step ("phantom") gradient: cheap, constant
  memory, approximate;
* ``implicit_gradient(f, z_star)``: exact implicit-function-theorem gradient, obtained by solving the backward
  fixed point ``g = J^T g + dL/dz*`` with the same solvers.

Both keep memory independent of the number of forward iterations. This module travels to the Hub as remote
code: it imports only torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

SOLVERS = ("anderson", "picard")
DIVERGENCE_FACTOR = 1e3  # a residual this many times above the starting one counts as divergence


@dataclass
class SolverStats:
    """Per-sample telemetry of a fixed-point solve (tensors of shape ``(batch,)``)."""

    steps: torch.Tensor  # iterations run until the sample stopped
    abs_residual: torch.Tensor  # ||f(z) - z|| at the returned iterate
    rel_residual: torch.Tensor  # ||f(z) - z|| / ||f(z)|| at the returned iterate
    converged: torch.Tensor  # rel_residual <= tol
    diverged: torch.Tensor  # residual became NaN/inf or grew by DIVERGENCE_FACTOR

    @property
    def max_steps(self) -> int:
        return int(self.steps.max().item()) if self.steps.numel() else 0


def _row_norm(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1).norm(dim=1)


def _expand(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.reshape(-1, *([1] * (like.dim() - 1)))


def _check(z0: torch.Tensor, max_iter: int, tol: float, damping: float) -> None:
    if z0.dim() < 1 or z0.shape[0] < 1:
        raise ValueError(f"z0 must have a batch dimension, got shape {tuple(z0.shape)}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
        raise ValueError(f"max_iter must be an integer >= 0, got {max_iter!r}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if not 0 < damping <= 1:
        raise ValueError(f"damping must be in (0, 1], got {damping!r}")


class _Tracker:
    """Keeps, per sample, the lowest-residual iterate, the stop step and the divergence flag."""

    def __init__(self, z0: torch.Tensor, fz0: torch.Tensor, tol: float):
        self.tol = tol
        res = _row_norm(fz0 - z0)
        self.start = res.clone()
        self.best_z = z0.clone()
        self.best_abs = torch.full_like(res, float("inf"))
        self.best_rel = torch.full_like(res, float("inf"))
        self.steps = torch.zeros(z0.shape[0], dtype=torch.long, device=z0.device)
        self.active = torch.ones(z0.shape[0], dtype=torch.bool, device=z0.device)
        self.diverged = torch.zeros_like(self.active)

    def update(self, z: torch.Tensor, fz: torch.Tensor, step: int) -> None:
        """Record iterate ``z`` (with ``f(z) = fz``) reached after ``step`` iterations."""
        res = _row_norm(fz - z)
        rel = res / _row_norm(fz).clamp_min(1e-12)
        finite = torch.isfinite(res)
        better = self.active & finite & (res < self.best_abs)
        self.best_z = torch.where(_expand(better, z), z, self.best_z)
        self.best_abs = torch.where(better, res, self.best_abs)
        self.best_rel = torch.where(better, rel, self.best_rel)
        blown = self.active & (~finite | (res > DIVERGENCE_FACTOR * self.start.clamp_min(1e-12)))
        self.diverged |= blown
        self.steps = torch.where(self.active, step, self.steps)
        self.active &= ~blown & ~(rel <= self.tol)

    def stats(self) -> SolverStats:
        return SolverStats(
            steps=self.steps,
            abs_residual=self.best_abs,
            rel_residual=self.best_rel,
            converged=self.best_rel <= self.tol,
            diverged=self.diverged,
        )


def picard(
    f: Callable[[torch.Tensor], torch.Tensor],
    z0: torch.Tensor,
    max_iter: int = 50,
    tol: float = 1e-4,
    damping: float = 1.0,
) -> tuple[torch.Tensor, SolverStats]:
    """Damped fixed-point iteration ``z <- (1 - damping) z + damping f(z)``."""
    _check(z0, max_iter, tol, damping)
    z = z0
    fz = f(z)
    tracker = _Tracker(z, fz, tol)
    tracker.update(z, fz, 0)
    for step in range(1, max_iter + 1):
        if not bool(tracker.active.any()):
            break
        new = (1 - damping) * z + damping * fz
        z = torch.where(_expand(tracker.active, z), new, z)
        fz = f(z)
        tracker.update(z, fz, step)
    return tracker.best_z, tracker.stats()


def anderson(
    f: Callable[[torch.Tensor], torch.Tensor],
    z0: torch.Tensor,
    max_iter: int = 50,
    tol: float = 1e-4,
    memory: int = 5,
    damping: float = 1.0,
    ridge: float = 1e-4,
) -> tuple[torch.Tensor, SolverStats]:
    """Anderson acceleration (type II) with ``memory`` past iterates, mixing ``damping`` and a ridge term on
    the small least-squares system; batched, each sample with its own mixing weights."""
    _check(z0, max_iter, tol, damping)
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
        raise ValueError(f"memory must be an integer >= 1, got {memory!r}")
    batch = z0.shape[0]
    shape = z0.shape
    flat = z0.reshape(batch, -1)
    dim = flat.shape[1]
    xs = flat.new_zeros(batch, memory, dim)  # past iterates
    gs = flat.new_zeros(batch, memory, dim)  # f at past iterates
    z = z0
    fz = f(z)
    tracker = _Tracker(z, fz, tol)
    tracker.update(z, fz, 0)
    if max_iter == 0:
        return tracker.best_z, tracker.stats()
    xs[:, 0], gs[:, 0] = flat, fz.reshape(batch, -1)
    z = fz
    fz = f(z)
    tracker.update(z, fz, 1)
    xs[:, 1 % memory], gs[:, 1 % memory] = z.reshape(batch, -1), fz.reshape(batch, -1)
    for step in range(2, max_iter + 1):
        if not bool(tracker.active.any()):
            break
        n = min(step, memory)
        residuals = (gs[:, :n] - xs[:, :n]).to(torch.float64)  # (batch, n, dim)
        # minimise ||sum_i alpha_i r_i|| subject to sum_i alpha_i = 1 (regularised normal equations)
        gram = residuals @ residuals.transpose(1, 2)
        gram = gram + ridge * torch.eye(n, dtype=gram.dtype, device=gram.device) * gram.diagonal(dim1=1, dim2=2).mean(
            -1
        ).clamp_min(1e-30).reshape(-1, 1, 1)
        ones = torch.ones(batch, n, 1, dtype=gram.dtype, device=gram.device)
        try:
            w = torch.linalg.solve(gram, ones)
        except RuntimeError:  # singular for some sample: fall back to a plain step for everyone
            w = torch.zeros_like(ones)
            w[:, (step - 1) % memory] = 1.0
        alpha = (w / w.sum(dim=1, keepdim=True)).to(flat.dtype)  # (batch, n, 1)
        mixed = damping * (alpha * gs[:, :n]).sum(1) + (1 - damping) * (alpha * xs[:, :n]).sum(1)
        mixed = torch.where(torch.isfinite(mixed), mixed, gs[:, (step - 1) % memory])
        new = mixed.reshape(shape)
        z = torch.where(_expand(tracker.active, z), new, z)
        fz = f(z)
        tracker.update(z, fz, step)
        slot = step % memory
        xs[:, slot], gs[:, slot] = z.reshape(batch, -1), fz.reshape(batch, -1)
    return tracker.best_z, tracker.stats()


_warned = False


def solve(
    f: Callable[[torch.Tensor], torch.Tensor],
    z0: torch.Tensor,
    solver: str = "anderson",
    max_iter: int = 50,
    tol: float = 1e-4,
    **kwargs,
) -> tuple[torch.Tensor, SolverStats]:
    """Solve ``z = f(z)`` from ``z0`` without building a graph; see the module docstring.

    Args:
        solver: ``"anderson"`` (``memory``, ``damping``, ``ridge``) or ``"picard"`` (``damping``).
        max_iter: iteration budget (0 returns ``z0`` with its residual).
        tol: relative-residual tolerance for per-sample stopping.
    """
    global _warned
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    with torch.no_grad():
        z, stats = (anderson if solver == "anderson" else picard)(f, z0, max_iter=max_iter, tol=tol, **kwargs)
    if bool(stats.diverged.any()) and not _warned:
        _warned = True
        warnings.warn(
            f"fixed-point solver diverged for {int(stats.diverged.sum())} of {len(stats.diverged)} samples "
            "(residual NaN/inf or growing); returning their lowest-residual iterates, flagged in stats.diverged",
            RuntimeWarning,
            stacklevel=2,
        )
    return z, stats


def residual_stats(z: torch.Tensor, fz: torch.Tensor, steps: int, tol: float) -> SolverStats:
    """Stats of iterates that were not found by ``solve`` (e.g. a fixed number of plain steps): the residual of
    ``z`` given ``fz = f(z)``, with ``steps`` recorded for every sample."""
    abs_res = (fz - z).detach().float().flatten(1).norm(dim=1)
    rel_res = abs_res / fz.detach().float().flatten(1).norm(dim=1).clamp_min(1e-12)
    return SolverStats(
        steps=torch.full_like(abs_res, steps, dtype=torch.long),
        abs_residual=abs_res,
        rel_residual=rel_res,
        converged=rel_res <= tol,
        diverged=~torch.isfinite(abs_res),
    )


def one_step_gradient(f: Callable[[torch.Tensor], torch.Tensor], z_star: torch.Tensor) -> torch.Tensor:
    """``f(z*)`` with ``z*`` detached: the value is (at convergence) the fixed point, and its gradient with
    respect to the parameters of ``f`` and its inputs is the one-step approximation ``df/dtheta`` at ``z*``."""
    return f(z_star.detach())


def implicit_gradient(
    f: Callable[[torch.Tensor], torch.Tensor],
    z_star: torch.Tensor,
    solver: str = "anderson",
    max_iter: int = 50,
    tol: float = 1e-6,
    **kwargs,
) -> torch.Tensor:
    """``f(z*)`` whose backward pass is the implicit-function-theorem gradient: the incoming gradient ``v`` is
    replaced by the solution ``g`` of ``g = J^T g + v`` (``J = df/dz`` at ``z*``), found with the fixed-point
    solvers, so ``dL/dtheta = g^T df/dtheta``. Memory does not depend on the forward iterations."""
    z = z_star.detach().requires_grad_(True)
    with torch.enable_grad():
        fz = f(z)
    if not fz.requires_grad:
        return fz
    state = {}

    def backward_hook(v: torch.Tensor) -> torch.Tensor:
        if state.get("busy"):  # the VJPs below go through this same tensor
            return v

        def backward_map(g: torch.Tensor) -> torch.Tensor:
            state["busy"] = True
            try:
                (jtg,) = torch.autograd.grad(fz, z, g, retain_graph=True)
            finally:
                state["busy"] = False
            return jtg + v

        g, stats = solve(backward_map, v, solver=solver, max_iter=max_iter, tol=tol, **kwargs)
        state["stats"] = stats
        return g

    fz.register_hook(backward_hook)
    return fz
