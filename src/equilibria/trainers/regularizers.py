"""Jacobian-based regularisers of a loop map, computed with vector-Jacobian products (J is never formed)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def spectral_radius(
    f: Callable[[torch.Tensor], torch.Tensor],
    h: torch.Tensor,
    num_iters: int = 4,
    valid: torch.Tensor | None = None,
    create_graph: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Estimate the spectral radius of the Jacobian of ``f`` at ``h``, per batch row, by power iteration.

    ``f`` maps a state of shape ``(batch, *dims)`` to one of the same shape, rows independent of each other
    (as a loop step is: attention mixes positions within a sequence, never across sequences). Each iteration is
    one vector-Jacobian product ``u = J^T v`` (the spectra of ``J`` and ``J^T`` are equal), ``v <- u / ||u||``;
    the estimate is ``||J^T v||`` at the last iteration. With ``create_graph=True`` that last product is
    differentiable with respect to the parameters of ``f`` (not ``h``, which is detached), so the estimate can
    be used as a penalty. Few iterations *underestimate* the radius (power iteration approaches it from below).

    Args:
        f: the map, e.g. ``OuroModel.loop_map(input_ids)``.
        h: the state at which to linearise.
        num_iters: power iterations (>= 1).
        valid: optional ``(batch, seq_len)`` mask; positions where it is 0 (padding) are left out.
        create_graph: make the estimate differentiable (for a penalty).
        generator: seeds the random start vector; it must live on ``h``'s device.

    Returns:
        ``(batch,)`` tensor of estimates.

    The map is evaluated with PyTorch's math attention kernel: the fused CPU kernels support neither double
    backward nor forward-mode AD.
    """
    if num_iters < 1:
        raise ValueError(f"num_iters must be >= 1, got {num_iters}")
    h = h.detach().requires_grad_(True)
    with sdpa_kernel(SDPBackend.MATH), torch.enable_grad():
        fh = f(h)
    if fh.shape != h.shape:
        raise ValueError(f"f must map a state to one of the same shape, got {tuple(h.shape)} -> {tuple(fh.shape)}")
    mask = None
    if valid is not None:
        mask = valid.to(h.dtype).reshape(*valid.shape, *([1] * (h.dim() - valid.dim())))
    v = torch.randn(h.shape, generator=generator, dtype=h.dtype, device=h.device)
    if mask is not None:
        v = v * mask
    v = v / _row_norm(v).clamp_min(1e-12).reshape(-1, *([1] * (h.dim() - 1)))
    for i in range(num_iters):
        last = i == num_iters - 1
        (u,) = torch.autograd.grad(fh, h, v, retain_graph=not last or create_graph, create_graph=last and create_graph)
        if mask is not None:
            u = u * mask
        norm = _row_norm(u)
        if not last:
            v = (u / norm.clamp_min(1e-12).reshape(-1, *([1] * (h.dim() - 1)))).detach()
    return norm


def _row_norm(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1).norm(dim=1)
