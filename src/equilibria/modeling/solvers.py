"""The fixed-point machinery every family shares: solvers, the residual, and gradients through an equilibrium.

``fixed_point(f, z0, max_iter=..., tol=..., mode=...) -> (z, stats)`` is the one entry point. It solves
``z = f(z)`` for a batch of problems (the first dimension of ``z0``) without building a graph, then applies ``f``
once more at the solution with the gradient ``mode`` asks for (as in torchdeq, the model never sees the
dispatch):

* ``"one_step"``: ``f(z*.detach())``, the one-step ("phantom") gradient: cheap, constant memory, approximate;
* ``"one_step_neumann"``: the published Attractor code's default backward: the incoming gradient ``v`` becomes
  ``v + J^T v`` (the Neumann series of the implicit gradient cut after its first term; ``J = df/dz`` at ``z*``),
  with ``J^T v`` rescaled per sample to at most ``neumann_clip * ||v||``;
* ``"implicit"``: the exact implicit-function-theorem gradient: the backward pass solves ``g = J^T g + dL/dz``
  with the same solver (its own statistics land in ``stats.backward`` once ``backward()`` has run);
* ``"unrolled"``: ``max_iter`` plain applications of ``f`` from ``z0``, backpropagated through (memory grows with
  the budget; the baseline the other two are measured against).

With autograd disabled (inference) every mode is the solve plus that last application. Per-sample stopping
(``stop="per_sample"``): a sample stops iterating once its relative residual is below ``tol``; ``stop="batch"`` (the
published Attractor code's rule) iterates every sample until the batch's worst residual is below ``tol``. The solvers return, per sample, the iterate
with the lowest residual they saw; samples whose residual became NaN/inf or grew far beyond where it started, or
whose state ran away far past the start's scale (where a relative residual shrinks only because ``||f(z)||``
grows), are flagged as diverged, never as converged (and transformers' logger warns once per process), and ``fixed_point`` returns their lowest-residual iterate
rather than ``f`` of a blown-up state.

While ``torch.export`` or ``torch.compile`` traces, no Python branch may depend on data: the solvers then run their
whole budget (stopped samples keep their iterate, so the numbers equal eager's) and skip the divergence warning (the
flags are still returned and the lowest-residual iterates still used).

The residual has one definition, :func:`residual`: ``||f(z) - z||`` and ``||f(z) - z|| / ||f(z)||``, per sample
here and per token where a family needs that (Ouro's early exit). This module travels to the Hub as remote code:
it imports only torch and transformers' logging.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

Map = Callable[[torch.Tensor], torch.Tensor]  # a loop map: state -> state
SOLVERS = ("anderson", "picard")
GRADIENT_MODES = ("one_step", "implicit", "unrolled", "one_step_neumann")
STOP_RULES = ("per_sample", "batch")
DIVERGENCE_FACTOR = 1e3  # a residual (or a state) this many times above the starting one counts as divergence


@torch.no_grad()
def residual(z: torch.Tensor, fz: torch.Tensor, keep_dims: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(||f(z) - z||, ||f(z) - z|| / ||f(z)||)`` with the norms over every dimension after the first
    ``keep_dims`` (1: per sample; 2: per token of a ``(batch, seq_len, hidden)`` state), in at least float32,
    without gradient."""
    wide = fz.dtype if fz.dtype in (torch.float32, torch.float64) else torch.float32
    absolute = (fz - z).to(wide).flatten(keep_dims).norm(dim=-1)
    return absolute, absolute / fz.to(wide).flatten(keep_dims).norm(dim=-1).clamp_min(1e-12)


@dataclass
class SolverStats:
    """Per-sample telemetry of a fixed-point solve (tensors of shape ``(batch,)``)."""

    steps: torch.Tensor  # iterations run until the sample stopped
    abs_residual: torch.Tensor  # ||f(z) - z|| at the returned iterate
    rel_residual: torch.Tensor  # ||f(z) - z|| / ||f(z)|| at the returned iterate
    converged: torch.Tensor  # rel_residual <= tol
    diverged: torch.Tensor  # residual became NaN/inf or grew by DIVERGENCE_FACTOR
    backward: SolverStats | None = None  # the implicit backward solve's, filled in when backward() runs

    @property
    def max_steps(self) -> int:
        return int(self.steps.max().item()) if self.steps.numel() else 0

    @classmethod
    def measure(cls, z: torch.Tensor, fz: torch.Tensor, steps: int, tol: float) -> SolverStats:
        """Stats of an iterate not found by a solver (e.g. after a fixed number of plain steps): the residual of
        ``z`` given ``fz = f(z)``, with ``steps`` recorded for every sample."""
        absolute, relative = residual(z, fz)
        steps_ = torch.full_like(absolute, steps, dtype=torch.long)
        return cls(steps_, absolute, relative, relative <= tol, ~torch.isfinite(absolute))

    @classmethod
    def pending(cls, batch: int, device: torch.device) -> SolverStats:
        """Placeholders (steps -1, residuals NaN) for a solve that has not run yet."""
        nan = torch.full((batch,), float("nan"), device=device)
        no = torch.zeros(batch, dtype=torch.bool, device=device)
        return cls(torch.full((batch,), -1, dtype=torch.long, device=device), nan, nan.clone(), no, no.clone())

    def copy_(self, other: SolverStats) -> None:
        """Overwrite these tensors in place with ``other``'s (so that holders of them see the new values)."""
        for name in ("steps", "abs_residual", "rel_residual", "converged", "diverged"):
            getattr(self, name).copy_(getattr(other, name))

    def telemetry(self) -> dict[str, torch.Tensor | None]:
        """The fields of :class:`SolverTelemetry` (a model output's names) filled from these stats."""
        back = self.backward
        return dict(
            solver_steps=self.steps,
            abs_residual=self.abs_residual,
            rel_residual=self.rel_residual,
            converged=self.converged,
            diverged=self.diverged,
            backward_steps=None if back is None else back.steps,
            backward_rel_residual=None if back is None else back.rel_residual,
        )


@dataclass
class SolverTelemetry:
    r"""The solver's telemetry in a model output (all of shape ``(batch,)``; ``None`` when no solve ran).

    solver_steps (`torch.LongTensor`): iterations the solver ran per sample.
    abs_residual, rel_residual (`torch.FloatTensor`): ``||f(z) - z||`` and ``||f(z) - z|| / ||f(z)||`` at the
        returned iterate.
    converged (`torch.BoolTensor`): ``rel_residual <= solver_tol``.
    diverged (`torch.BoolTensor`): the residual became NaN/inf or grew without bound; the lowest-residual
        iterate was returned (and a warning issued).
    backward_steps, backward_rel_residual (`torch.Tensor`): with ``gradient_mode="implicit"`` in training, the
        backward fixed-point solve's iterations and final relative residual per sample: -1 and NaN until
        ``backward()`` has run, then filled in place.
    """

    solver_steps: torch.LongTensor | None = None
    abs_residual: torch.FloatTensor | None = None
    rel_residual: torch.FloatTensor | None = None
    converged: torch.BoolTensor | None = None
    diverged: torch.BoolTensor | None = None
    backward_steps: torch.LongTensor | None = None
    backward_rel_residual: torch.FloatTensor | None = None


Solution = tuple[torch.Tensor, SolverStats]  # what a solver returns: the state and its stats


def check_tol(value, name: str = "tol") -> float:
    """Return ``value`` as a float, or raise ``ValueError`` unless it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return float(value)


def _check(z0: torch.Tensor, max_iter: int, tol: float, mixing: float, stop: str = "per_sample") -> None:
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {STOP_RULES}, got {stop!r}")
    if z0.dim() < 1 or z0.shape[0] < 1:
        raise ValueError(f"z0 must have a batch dimension, got shape {tuple(z0.shape)}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
        raise ValueError(f"max_iter must be an integer >= 0, got {max_iter!r}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")  # NaN included
    if not 0 < mixing <= 1:
        raise ValueError(f"mixing must be in (0, 1], got {mixing!r}")


def _iterate(
    f: Map, z0: torch.Tensor, max_iter: int, tol: float, propose: Callable[..., torch.Tensor], stop: str = "per_sample"
) -> Solution:
    """The loop every solver shares: ``propose(step, z, f(z))`` gives the next iterate and samples that have stopped
    keep theirs (``stop="batch"``: no sample stops before every one has converged or diverged). Per sample it keeps
    the lowest-residual iterate, the stop step and the divergence flag: a residual
    NaN/inf or ``DIVERGENCE_FACTOR`` times its start, or a state ``DIVERGENCE_FACTOR`` times the start's scale (where
    the relative residual ``||f(z) - z|| / ||f(z)||`` shrinks only because ``||f(z)||`` grows without bound)."""
    batch, device = z0.shape[0], z0.device
    column = (-1, *([1] * (z0.dim() - 1)))  # a per-sample flag, shaped to select whole states
    z, fz = z0, f(z0)
    start = residual(z, fz)[0].clamp_min(1e-12)
    wide = torch.promote_types(z0.dtype, torch.float32)  # norms in at least float32
    with torch.no_grad():
        scale = torch.maximum(z.to(wide).flatten(1).norm(dim=-1), fz.to(wide).flatten(1).norm(dim=-1)).clamp_min(1e-12)
    best_z = z.clone()
    best_abs, best_rel = torch.full_like(start, float("inf")), torch.full_like(start, float("inf"))
    steps = torch.zeros(batch, dtype=torch.long, device=device)
    active = torch.ones(batch, dtype=torch.bool, device=device)
    diverged = torch.zeros_like(active)
    for step in range(max_iter + 1):
        if step > 0:
            if not torch.compiler.is_compiling() and not bool(active.any()):
                break
            z = torch.where(active.view(column), propose(step, z, fz), z)
            fz = f(z)
        res, rel = residual(z, fz)
        finite = torch.isfinite(res)
        better = active & finite & (res < best_abs)
        best_z = torch.where(better.view(column), z, best_z)
        best_abs, best_rel = torch.where(better, res, best_abs), torch.where(better, rel, best_rel)
        with torch.no_grad():
            runaway = fz.to(wide).flatten(1).norm(dim=-1) > DIVERGENCE_FACTOR * scale
        blown = active & (~finite | (res > DIVERGENCE_FACTOR * start) | runaway)
        diverged |= blown
        steps = torch.where(active, step, steps)
        done = rel <= tol
        if stop == "batch":  # the worst live sample decides for all (no Python branch on data: compile-safe)
            finished = done | diverged
            done = finished & finished.all()
        active &= ~blown & ~done
    return best_z, SolverStats(steps, best_abs, best_rel, (best_rel <= tol) & ~diverged, diverged)


def picard(
    f: Map, z0: torch.Tensor, max_iter: int = 50, tol: float = 1e-4, mixing: float = 1.0, stop: str = "per_sample"
) -> Solution:
    """Fixed-point iteration ``z <- (1 - mixing) z + mixing f(z)``."""
    _check(z0, max_iter, tol, mixing, stop)
    return _iterate(f, z0, max_iter, tol, lambda step, z, fz: (1 - mixing) * z + mixing * fz, stop)


def anderson(
    f: Map,
    z0: torch.Tensor,
    max_iter: int = 50,
    tol: float = 1e-4,
    memory: int = 5,
    mixing: float = 1.0,
    ridge=1e-4,
    stop: str = "per_sample",
) -> Solution:
    """Anderson acceleration (type II) with ``memory`` past iterates, the weight ``mixing`` of ``f`` in each
    update and a ridge term on the small least-squares system; batched, each sample with its own weights: the last
    ``memory`` iterates ``x_i`` and their images ``g_i = f(x_i)`` are mixed with the weights ``alpha`` that minimise
    ``||sum_i alpha_i (g_i - x_i)||`` subject to ``sum_i alpha_i = 1`` (regularised normal equations)."""
    _check(z0, max_iter, tol, mixing, stop)
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
        raise ValueError(f"memory must be an integer >= 1, got {memory!r}")
    batch = z0.shape[0]
    xs = z0.new_zeros(batch, memory, z0[0].numel())  # past iterates
    gs = torch.zeros_like(xs)  # f at past iterates

    def mix(step: int, z: torch.Tensor, fz: torch.Tensor) -> torch.Tensor:
        last = (step - 1) % memory
        xs[:, last], gs[:, last] = z.reshape(batch, -1), fz.reshape(batch, -1)
        n = min(step, memory)
        if n == 1:  # a plain step until there are two iterates to mix
            return fz
        residuals = gs[:, :n] - xs[:, :n]  # (batch, n, dim)
        wide = residuals if residuals.dtype in (torch.float32, torch.float64) else residuals.float()
        gram = torch.bmm(wide, wide.transpose(1, 2)).to(torch.float64)  # the small system is solved in float64
        scale = gram.diagonal(dim1=1, dim2=2).mean(-1).clamp_min(1e-30).reshape(-1, 1, 1)
        gram = gram + ridge * torch.eye(n, dtype=gram.dtype, device=gram.device) * scale
        ones = torch.ones(batch, n, 1, dtype=gram.dtype, device=gram.device)
        try:
            w = torch.linalg.solve(gram, ones)
        except RuntimeError:  # singular for some sample: fall back to a plain step for everyone
            w = torch.zeros_like(ones)
            w[:, last] = 1.0
        alpha = (w / w.sum(dim=1, keepdim=True)).to(z.dtype).transpose(1, 2)  # (batch, 1, n)
        mixed = torch.bmm(alpha, gs[:, :n])[:, 0]
        if mixing != 1.0:
            mixed = mixing * mixed + (1 - mixing) * torch.bmm(alpha, xs[:, :n])[:, 0]
        mixed = torch.where(torch.isfinite(mixed), mixed, gs[:, last])
        return mixed.reshape(z.shape)

    return _iterate(f, z0, max_iter, tol, mix, stop)


DIVERGED = (
    "fixed-point solver diverged for some samples (residual NaN/inf or growing); returning their lowest-residual "
    "iterates, flagged in stats.diverged (said once per process)"
)


def solve(
    f: Map, z0: torch.Tensor, solver: str = "anderson", max_iter: int = 50, tol: float = 1e-4, **kwargs
) -> Solution:
    """Solve ``z = f(z)`` from ``z0`` without building a graph; see the module docstring.

    Args:
        solver: ``"anderson"`` (``memory``, ``mixing``, ``ridge``) or ``"picard"`` (``mixing``).
        max_iter: iteration budget (0 returns ``z0`` with its residual).
        tol: relative-residual tolerance for per-sample stopping.
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    with torch.no_grad():
        z, stats = (anderson if solver == "anderson" else picard)(f, z0, max_iter=max_iter, tol=tol, **kwargs)
    if not torch.compiler.is_compiling() and bool(stats.diverged.any()):
        logger.warning_once(DIVERGED)  # deduplicated by its text: the counts go to the debug log
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(f"fixed-point solver: {int(stats.diverged.sum())} of {len(stats.diverged)} samples diverged")
    return z, stats


def one_step_gradient(f: Map, z_star: torch.Tensor) -> torch.Tensor:
    """``f(z*)`` with ``z*`` detached: the value is (at convergence) the fixed point, and its gradient with
    respect to the parameters of ``f`` and its inputs is the one-step approximation ``df/dtheta`` at ``z*``."""
    return f(z_star.detach())


def _with_adjoint(f: Map, z_star: torch.Tensor, adjoint: Callable) -> torch.Tensor:
    """``f(z*)`` whose backward pass replaces the incoming gradient ``v`` by ``adjoint(vjp, v)``, where
    ``vjp(g) = J^T g`` with ``J = df/dz`` at ``z*``; the parameters of ``f`` then receive ``adjoint(vjp, v)^T df``."""
    z = z_star.detach().requires_grad_(True)
    with torch.enable_grad():
        fz = f(z)
    if not fz.requires_grad:
        return fz
    busy = []

    def vjp(g: torch.Tensor) -> torch.Tensor:
        busy.append(True)  # the VJP below goes through this same tensor's hook
        try:
            (jtg,) = torch.autograd.grad(fz, z, g, retain_graph=True)
        finally:
            busy.pop()
        return jtg

    fz.register_hook(lambda v: v if busy else adjoint(vjp, v))
    return fz


def implicit_gradient(
    f: Map,
    z_star: torch.Tensor,
    solver: str = "anderson",
    max_iter: int = 50,
    tol: float = 1e-6,
    record: SolverStats | None = None,
    **kwargs,
) -> torch.Tensor:
    """``f(z*)`` whose backward pass is the implicit-function-theorem gradient: the incoming gradient ``v`` is
    replaced by the solution ``g`` of ``g = J^T g + v`` (``J = df/dz`` at ``z*``), found with the fixed-point
    solvers, so ``dL/dtheta = g^T df/dtheta``. Memory does not depend on the forward iterations. The backward
    solve's statistics are copied into ``record`` (e.g. ``SolverStats.pending(...)``) when it runs."""

    def adjoint(vjp: Callable, v: torch.Tensor) -> torch.Tensor:
        g, stats = solve(lambda g: vjp(g) + v, v, solver=solver, max_iter=max_iter, tol=tol, **kwargs)
        if record is not None:
            record.copy_(stats)
        return g

    return _with_adjoint(f, z_star, adjoint)


def neumann_gradient(f: Map, z_star: torch.Tensor, clip: float | None = 1.0) -> torch.Tensor:
    """``f(z*)`` whose backward pass replaces the incoming gradient ``v`` by ``v + J^T v``, the first two terms of
    the implicit gradient's Neumann series (the published Attractor code's default backward), with ``J^T v``
    rescaled per sample so that ``||J^T v|| <= clip * ||v||`` (``clip=None``: no rescaling)."""

    def adjoint(vjp: Callable, v: torch.Tensor) -> torch.Tensor:
        jtv = vjp(v)
        if clip is not None:  # the norms in float32 at least, so that a zero gradient gives 0, not 0 / 0
            shape = (-1, *([1] * (v.dim() - 1)))
            norm_v, norm_j = (t.flatten(1).float().norm(dim=-1) for t in (v, jtv))
            scale = (clip * norm_v / norm_j.clamp_min(1e-30)).clamp(max=1.0)
            jtv = jtv * scale.to(jtv.dtype).view(shape)
        return v + jtv

    return _with_adjoint(f, z_star, adjoint)


def solver_options(config) -> dict:
    """The solver arguments a family's config sets: ``solver``, Anderson's ``memory`` (``anderson_memory``), the
    update's ``mixing`` (``solver_mixing``, 1 when the config has none) and the stopping rule (``solver_stop``,
    per sample when the config has none)."""
    options = dict(solver=config.solver, mixing=float(getattr(config, "solver_mixing", 1.0)))
    if getattr(config, "solver_stop", "per_sample") != "per_sample":
        options["stop"] = config.solver_stop
    if config.solver == "anderson":
        options["memory"] = config.anderson_memory
    return options


def fixed_point(
    f: Map,
    z0: torch.Tensor,
    *,
    max_iter: int,
    tol: float,
    mode: str = "one_step",
    solver: str = "anderson",
    readout: Map | None = None,
    neumann_clip: float | None = 1.0,
    **solver_kwargs,
) -> Solution:
    """Solve ``z = f(z)`` from ``z0`` and return ``(readout(z*), stats)`` with the gradient of ``mode`` (see the
    module docstring). ``max_iter=0`` returns ``z0`` itself (its graph kept) with its residual.

    Args:
        readout: the map applied once at the solution (default ``f``): the same function as ``f`` with side
            effects that belong to the solution only, such as appending keys/values to a cache.
        neumann_clip: ``mode="one_step_neumann"``: the bound on ``||J^T v||`` relative to ``||v||`` (None: none).
        solver_kwargs: ``memory``, ``mixing``, ``ridge``, ``stop`` of the solver; the implicit backward solve uses
            the same solver, budget and tolerance.
    """
    if mode not in GRADIENT_MODES:
        raise ValueError(f"gradient mode must be one of {GRADIENT_MODES}, got {mode!r}")
    if neumann_clip is not None and not (isinstance(neumann_clip, (int, float)) and 0 < neumann_clip < float("inf")):
        raise ValueError(f"neumann_clip must be None or a finite number > 0, got {neumann_clip!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    _check(z0, max_iter, tol, solver_kwargs.get("mixing", 1.0), solver_kwargs.get("stop", "per_sample"))
    readout = f if readout is None else readout
    if max_iter == 0:
        _, stats = solve(f, z0.detach(), solver=solver, max_iter=0, tol=tol, **solver_kwargs)
        return z0, stats
    if mode == "unrolled" and torch.is_grad_enabled():
        z = z0
        for _ in range(max_iter - 1):
            z = f(z)
        out = readout(z)
        return out, SolverStats.measure(z, out, max_iter, tol)
    z_star, stats = solve(f, z0.detach(), solver=solver, max_iter=max_iter, tol=tol, **solver_kwargs)
    if mode == "implicit" and torch.is_grad_enabled():
        stats.backward = SolverStats.pending(z0.shape[0], z0.device)
        kwargs = dict(solver=solver, max_iter=max_iter, tol=tol, record=stats.backward, **solver_kwargs)
        out = implicit_gradient(readout, z_star, **kwargs)
    elif mode == "one_step_neumann" and torch.is_grad_enabled():
        out = neumann_gradient(readout, z_star, neumann_clip)
    else:
        out = readout(z_star.detach())  # the one-step gradient (see one_step_gradient)
    if torch.compiler.is_compiling() or bool(
        stats.diverged.any()
    ):  # never pass f of a blown-up state on: keep the lowest-residual
        diverged = stats.diverged.view(-1, *([1] * (out.dim() - 1)))  # iterate
        out = torch.where(diverged, z_star.to(out.dtype), out)
    return out, stats


__all__ = [
    "GRADIENT_MODES",
    "SOLVERS",
    "SolverStats",
    "SolverTelemetry",
    "anderson",
    "fixed_point",
    "STOP_RULES",
    "implicit_gradient",
    "neumann_gradient",
    "one_step_gradient",
    "picard",
    "residual",
    "solve",
    "solver_options",
]
