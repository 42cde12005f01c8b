"""Regularisers of a loop that a forward pass may compute (so that they also work where the model is wrapped, e.g.
by FSDP): two Jacobian estimators of a loop map ``f`` at a state ``h``, computed with Jacobian-vector or
vector-Jacobian products
(``J`` is never formed), and the iterate sampling of the fixed-point correction loss.

* :func:`spectral_radius`: power iteration for the spectral radius of ``J`` (STARS' JSRR penalty), with
  Jacobian-vector products (forward mode, as the STARS paper) or vector-Jacobian products;
* :func:`hutchinson_frobenius`: the Hutchinson estimate of ``||J||_F^2`` per state entry (Bai et al., 2021,
  "Stabilizing Equilibrium Models by Jacobian Regularization");
* :class:`IterateSampler`: about ``count`` iterates of a solve, evenly spread, in constant memory, at which the
  fixed-point correction loss (Bai et al., 2022) re-reads the model.

Schedules, weights and loop sampling belong to the trainers. This module travels to the Hub as remote code: it
imports only torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def _linearise(f: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, f(h))`` with ``h`` detached and requiring grad, ``f(h)`` with its graph; the attention runs on the
    math kernel, the only one on every device with double backward and forward-mode AD."""
    h = h.detach().requires_grad_(True)
    with sdpa_kernel(SDPBackend.MATH), torch.enable_grad():
        fh = f(h)
    if fh.shape != h.shape:
        raise ValueError(f"f must map a state to one of the same shape, got {tuple(h.shape)} -> {tuple(fh.shape)}")
    return h, fh


def _mask_like(valid: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor | None:
    """``valid`` (``(batch, seq_len)``, 0 at padding) broadcast over the trailing dimensions of ``h``."""
    if valid is None:
        return None
    return valid.to(h.dtype).reshape(*valid.shape, *([1] * (h.dim() - valid.dim())))


def _row_norm(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1).norm(dim=1)


JSRR_ESTIMATORS = ("vjp", "jvp")
JSRR_PROBES = ("sequence", "batch")


def _jacobian_product(
    f: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor, estimator: str, create_graph: bool
) -> Callable[[torch.Tensor, bool], torch.Tensor]:
    """``v -> J^T v`` (``"vjp"``: one forward, then a backward per product) or ``v -> J v`` (``"jvp"``: a
    forward-mode pass per product) for ``J = df/dh`` at ``h``; the product marked ``last`` keeps its graph to
    the parameters of ``f`` when ``create_graph``. ``h`` itself is detached: no gradient flows into it."""
    if estimator == "vjp":
        h, fh = _linearise(f, h)

        def vjp(v: torch.Tensor, last: bool) -> torch.Tensor:
            keep = last and create_graph
            return torch.autograd.grad(fh, h, v, retain_graph=not last or create_graph, create_graph=keep)[0]

        return vjp
    h = h.detach()

    def jvp(v: torch.Tensor, last: bool) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.MATH), torch.set_grad_enabled(last and create_graph):
            fh, u = torch.func.jvp(f, (h,), (v,))
        if fh.shape != h.shape:
            raise ValueError(f"f must map a state to one of the same shape, got {tuple(h.shape)} -> {tuple(fh.shape)}")
        return u

    return jvp


def check_estimator_fits(modules, estimator: str) -> None:
    """``ValueError`` when ``estimator`` cannot run inside a forward over ``modules``: the ``"vjp"`` estimator runs a
    backward pass during the forward, which crashes torch (a segmentation fault, torch 2.13) when any of them is
    sharded by FSDP2 on its own (``fully_shard`` per layer), as its backward hooks then fire mid-forward. The
    ``"jvp"`` estimator (forward mode) and a model sharded as one unit work."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return
    if estimator == "vjp" and any(isinstance(module, FSDPModule) for module in modules):
        raise ValueError(
            "the spectral-radius estimator 'vjp' runs a backward pass inside forward, which torch cannot do when "
            "layers are sharded by FSDP2 one by one; use the 'jvp' estimator (StarsTrainingArguments(jsrr_estimator="
            "'jvp'), --jsrr_estimator jvp) or shard the model as one unit"
        )


def spectral_radius(
    f: Callable[[torch.Tensor], torch.Tensor],
    h: torch.Tensor,
    num_iters: int = 4,
    valid: torch.Tensor | None = None,
    create_graph: bool = True,
    generator: torch.Generator | None = None,
    estimator: str = "vjp",
    start: torch.Tensor | None = None,
    probe: str = "sequence",
) -> torch.Tensor:
    """Estimate the spectral radius of the Jacobian ``J`` of ``f`` at ``h``, per batch row, by power iteration.

    ``f`` maps a state of shape ``(batch, *dims)`` to one of the same shape, rows independent of each other
    (as a loop step is: attention mixes positions within a sequence, never across sequences). From a unit start
    vector ``v_0``, each iteration applies ``J`` and normalises, ``v_{k+1} = A v_k / ||A v_k||``; the estimate is
    ``||A v_{K-1}||`` at the last of ``K = num_iters`` iterations, where ``A`` is

    * ``J`` with ``estimator="jvp"``: a Jacobian-vector product in forward mode (``torch.func.jvp``), the
      STARS paper's estimator; each iteration re-runs ``f`` with a tangent;
    * ``J^T`` with ``estimator="vjp"``: a vector-Jacobian product (``J`` and ``J^T`` have the same
      eigenvalues); ``f`` runs once and each iteration is one backward pass.

    With ``create_graph=True`` the last product is differentiable with respect to the parameters of ``f`` (not
    ``h``, which is detached), so the estimate can be used as a penalty.

    Bias: ``||A v||`` for a unit ``v`` lies between the smallest and the largest singular value of ``J``, and
    converges to the spectral radius ``rho`` as ``K`` grows when one eigenvalue dominates. For a normal ``J``
    (e.g. symmetric) it rises monotonically towards ``rho``: few iterations underestimate. For a non-normal
    ``J``, the case of a trained loop step, few iterations can *overestimate* ``rho`` by a lot (for
    ``J = [[0.5, 10], [0, 0.5]]``, ``rho = 0.5`` and ``||J||_2 = 10.02``: from a random start one iteration
    gives 6.3 on average, two give 1.0, eight 0.57), and the two estimators' errors differ. ``benchmarks/bench_jsrr_estimator.py`` measures both
    against the exact radius of a small Ouro loop step.

    Args:
        f: the map, e.g. ``OuroModel.loop_map(input_ids)``.
        h: the state at which to linearise.
        num_iters: power iterations (>= 1).
        valid: optional ``(batch, seq_len)`` mask; positions where it is 0 (padding) are left out.
        create_graph: make the estimate differentiable (for a penalty).
        generator: seeds the random start vector; it must live on ``h``'s device.
        estimator: ``"vjp"`` or ``"jvp"`` (see above).
        start: the start vector (shape of ``h``; normalised here) instead of a random one, e.g. probes
            drawn per row so that the estimate does not depend on how a batch is split.
        probe: ``"sequence"``: each row's vector is normalised on its own, one estimate per row (rows are
            sequences for a language model); ``"batch"``: the vector is normalised over the whole tensor, the power
            iteration of the batch's block-diagonal Jacobian (the STARS reference code's, with one iteration).

    Returns:
        ``(batch,)`` tensor: with ``"sequence"`` each row's estimate; with ``"batch"`` each row's part of the last
        product, whose Euclidean norm (``result.norm()``) is the batch's estimate.
    """
    if isinstance(num_iters, bool) or not isinstance(num_iters, int) or num_iters < 1:
        raise ValueError(f"num_iters must be an integer >= 1, got {num_iters!r}")
    if estimator not in JSRR_ESTIMATORS:
        raise ValueError(f"estimator must be one of {JSRR_ESTIMATORS}, got {estimator!r}")
    if probe not in JSRR_PROBES:
        raise ValueError(f"probe must be one of {JSRR_PROBES}, got {probe!r}")
    if start is not None and start.shape != h.shape:
        raise ValueError(f"start must have the state's shape {tuple(h.shape)}, got {tuple(start.shape)}")
    product = _jacobian_product(f, h, estimator, create_graph)
    mask = _mask_like(valid, h)
    v = torch.randn(h.shape, generator=generator, dtype=h.dtype, device=h.device) if start is None else start
    v = v.to(device=h.device, dtype=h.dtype)
    for i in range(num_iters):
        v = v if mask is None else v * mask
        norm = _row_norm(v).reshape(-1, *([1] * (h.dim() - 1))) if probe == "sequence" else v.norm()
        v = (v / norm.clamp_min(1e-12)).detach()
        v = product(v, i == num_iters - 1)
    v = v if mask is None else v * mask
    return _row_norm(v)


#: the ``forward`` keywords that ask for the estimate, one per field of :class:`JSRROptions`
JSRR_KEYWORDS = ("iters", "estimator", "start", "probe", "rows", "step")


@dataclass
class JSRROptions:
    """The spectral-radius estimate a looped model's ``forward`` computes at a loop state (STARS' JSRR penalty,
    inside ``forward`` so that any wrapper sees it): ``iters`` power iterations (:func:`spectral_radius`) with
    ``estimator`` and ``probe``, from ``start`` (the state's shape; random otherwise), on the batch ``rows`` alone
    (all otherwise), linearised at the state after loop step ``step`` (1-based; the last otherwise)."""

    iters: int
    estimator: str = "vjp"
    start: torch.Tensor | None = None
    probe: str = "sequence"
    rows: torch.LongTensor | None = None
    step: int | None = None

    def __post_init__(self):
        if isinstance(self.iters, bool) or not isinstance(self.iters, int) or self.iters < 1:
            raise ValueError(f"spectral_radius_iters must be an integer >= 1, got {self.iters!r}")
        if self.step is not None and (isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 1):
            raise ValueError(f"spectral_radius_step must be an integer >= 1 (a loop step), got {self.step!r}")

    def check_step(self, num_loops: int) -> None:
        """``ValueError`` unless the linearised step is one of a forward's ``num_loops`` steps."""
        if (self.step or 1) > num_loops:
            raise ValueError(f"spectral_radius_step must be at most num_loops={num_loops}, got {self.step}")

    @classmethod
    def pop_from(cls, kwargs: dict, given: JSRROptions | None = None) -> JSRROptions | None:
        """The options of a ``forward`` call: ``given`` (its ``jsrr`` argument), or those its ``spectral_radius_*``
        keywords name (popped from ``kwargs``; ``spectral_radius_iters`` 0 or absent: no estimate); ``None`` when
        no estimate is asked for. ``ValueError`` for both."""
        named = {
            key: kwargs.pop(f"spectral_radius_{key}") for key in JSRR_KEYWORDS if f"spectral_radius_{key}" in kwargs
        }
        if given is not None and named:
            raise ValueError("pass the estimate's options as jsrr= or as spectral_radius_* keywords, not both")
        if given is not None or not named.get("iters"):
            return given
        return cls(**named)


def rows_of(value, rows: torch.Tensor, batch: int):
    """``value`` (a tensor, or tuples / lists / dicts of them) with the batch rows ``rows`` kept in every tensor whose
    first dimension is the batch (``batch`` rows); other values unchanged."""
    if isinstance(value, torch.Tensor):
        return value.index_select(0, rows.to(value.device)) if value.dim() and value.shape[0] == batch > 1 else value
    if isinstance(value, (tuple, list)):
        return type(value)(rows_of(v, rows, batch) for v in value)
    if isinstance(value, dict):
        return {k: rows_of(v, rows, batch) for k, v in value.items()}
    return value


def jsrr_estimate(
    make_step: Callable[[Callable], Callable[[torch.Tensor], torch.Tensor]],
    state: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: JSRROptions,
) -> torch.Tensor:
    """The JSRR estimate of every looped model (:class:`JSRROptions`): the spectral radius of the loop step's
    Jacobian at ``state``, over the real tokens of a 2-D ``attention_mask``. ``make_step(pick)`` builds the loop step
    from what ``pick`` keeps of the forward's batch-first inputs (its masks, position embeddings, recorded calls):
    with ``options.rows``, those rows alone, so that the step runs on them only."""
    valid = attention_mask if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 else None
    start, pick = options.start, lambda value: value
    if options.rows is not None:
        if options.rows.numel() == 0:
            return state.new_zeros((0,), dtype=torch.float32)
        pick = lambda value, batch=state.shape[0]: rows_of(value, options.rows, batch)  # noqa: E731
        state, valid, start = pick(state), pick(valid), pick(start)
    return spectral_radius(
        make_step(pick),
        state,
        num_iters=options.iters,
        valid=valid,
        estimator=options.estimator,
        start=start,
        probe=options.probe,
    )


def hutchinson_frobenius(
    f: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor, samples: int, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Hutchinson estimate of ``||J||_F^2 / n`` for ``J = df/dh`` at ``h``: the mean of ``||e^T J||^2 / n`` over
    ``samples`` Gaussian probes ``e`` restricted to the ``n`` real entries of each row (``valid``, ``(batch,
    seq_len)``, 0 at padding), averaged over the batch. Differentiable in the parameters of ``f``."""
    h, fh = _linearise(f, h)
    mask = _mask_like(valid, h)
    mask = torch.ones_like(h) if mask is None else mask.expand_as(h)
    entries = mask.flatten(1).sum(1).clamp_min(1)
    total = 0.0
    for _ in range(samples):
        (vjp,) = torch.autograd.grad(fh, h, torch.randn_like(h) * mask, create_graph=True, retain_graph=True)
        total = total + vjp.float().pow(2).flatten(1).sum(1) / entries
    return (total / samples).mean()


class IterateSampler:
    """Keeps about ``count`` iterates of a solve spread evenly over however many iterations it runs, in
    constant memory: it stores every ``stride``-th iterate and, when more than ``2 * count`` are stored, doubles
    the stride and drops every other one. :meth:`wrap` a loop map to record every state it is applied to."""

    def __init__(self, count: int):
        self.count = count
        self.stride = 1
        self.calls = 0
        self.kept: list[tuple[int, torch.Tensor]] = []

    def wrap(self, f: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
        def recorded(z: torch.Tensor) -> torch.Tensor:
            self.offer(z)
            return f(z)

        return recorded

    def offer(self, z: torch.Tensor) -> None:
        index, self.calls = self.calls, self.calls + 1
        if index % self.stride == 0:
            self.kept.append((index, z.detach().clone()))
            if len(self.kept) > 2 * self.count:
                self.stride *= 2
                self.kept = [(i, t) for i, t in self.kept if i % self.stride == 0]

    def select(self, last: int) -> list[torch.Tensor]:
        """Up to ``count`` of the kept iterates before iteration ``last`` (the solution), evenly spread."""
        candidates = [t for i, t in self.kept if i < last]
        if len(candidates) <= self.count:
            return candidates
        picks = {round((len(candidates) - 1) * (j + 1) / self.count) for j in range(self.count)}
        return [candidates[j] for j in sorted(picks)]


__all__ = [
    "JSRR_ESTIMATORS",
    "JSRR_KEYWORDS",
    "JSRR_PROBES",
    "IterateSampler",
    "JSRROptions",
    "check_estimator_fits",
    "hutchinson_frobenius",
    "jsrr_estimate",
    "rows_of",
    "spectral_radius",
]
