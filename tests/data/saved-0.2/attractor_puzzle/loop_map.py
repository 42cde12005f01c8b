"""The loop of a model as a function of its state alone (:class:`LoopMap`): what every family's base model returns
from ``loop_map``, and what the solvers, the Jacobian regularisers, the trainers and the computation audit work on.

Hub-portable: travels as remote code beside the modeling files (it imports only torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch


class LoopMap(NamedTuple):
    """One step of a model's loop as a function of the state alone, for fixed inputs, with the state the loop
    starts from: ``f, z0 = model.loop_map(...)``. ``f(z)`` (or ``loop_map(z)``) applies one step; every family's
    base model returns one from ``loop_map``, and the solvers, the Jacobian regularisers, the trainers and the
    computation audit work on it (``solve(f, z0)``, ``autograd.grad(f(z), z, v)``, ``torch.func.jvp``)."""

    step: Callable[[torch.Tensor], torch.Tensor]
    start: torch.Tensor

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return self.step(z)


__all__ = ["LoopMap"]
