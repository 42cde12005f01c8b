"""What a training step keeps for its backward pass: the measure behind "constant training memory".

    from equilibria.diagnostics import saved_for_backward

    nbytes = saved_for_backward(lambda: model(ids, labels=ids).loss.backward())

A looped model trained with the one-step or implicit gradient keeps the same bytes whatever its loop count;
backpropagating through every iteration keeps them for each one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def saved_for_backward(step: Callable[[], object]) -> int:
    """Bytes of the distinct tensor storages autograd saves for the backward pass while ``step`` runs (its forward;
    run the backward inside ``step`` too, or after). Exact and device-independent: a storage shared by several
    saved tensors counts once; weights, gradients and optimizer state are not counted unless autograd saves them."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(storages.values())


__all__ = ["saved_for_backward"]
