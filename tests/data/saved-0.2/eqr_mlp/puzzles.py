"""What every puzzle head shares: the checks on a batch of puzzle tokens and the exact-solve test.

A puzzle head reads one token per cell and answers one token per cell (``AutoModelForTokenClassification``).
Hub-portable: travels as remote code beside the modeling files (it imports only torch).
"""

from __future__ import annotations

import torch


def puzzle_inputs(inputs, input_ids, vocab_size: int, max_cells: int, cells_key: str) -> torch.LongTensor:
    """The puzzle tokens, given as ``inputs`` or ``input_ids`` (exactly one), checked: a 2-D integer tensor of at
    most ``max_cells`` cells (the config's ``cells_key``), every token in ``[0, vocab_size)``."""
    if (inputs is None) == (input_ids is None):
        raise ValueError("Pass the puzzle tokens as exactly one of inputs or input_ids.")
    inputs = inputs if inputs is not None else input_ids
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2:
        raise ValueError(f"inputs must be a (batch, seq_len) LongTensor, got {getattr(inputs, 'shape', inputs)!r}")
    if inputs.is_floating_point() or inputs.is_complex() or inputs.dtype == torch.bool:
        raise ValueError(f"inputs must hold integer token ids (a LongTensor), got dtype {inputs.dtype}")
    if inputs.shape[1] > max_cells:
        raise ValueError(f"puzzles have at most {cells_key}={max_cells} cells, got {inputs.shape[1]}")
    if ((inputs < 0) | (inputs >= vocab_size)).any():
        raise ValueError(
            f"inputs must be token ids in [0, {vocab_size - 1}] (vocab_size={vocab_size}), got values "
            f"from {int(inputs.min())} to {int(inputs.max())}"
        )
    return inputs


def check_puzzle_labels(labels: torch.Tensor, inputs: torch.Tensor) -> torch.LongTensor:
    """``labels`` as a LongTensor of the inputs' shape (-100 skips a cell), or ``ValueError``."""
    if not isinstance(labels, torch.Tensor) or labels.shape != inputs.shape:
        raise ValueError(
            f"labels must have the inputs' shape {tuple(inputs.shape)}, got {tuple(getattr(labels, 'shape', ()))}"
        )
    return labels.long()


def puzzle_solved(logits: torch.Tensor, labels: torch.Tensor) -> torch.BoolTensor:
    """Per puzzle: whether the argmax answer equals the labels on every labelled cell (-100 skipped)."""
    right = (logits.argmax(-1) == labels) | (labels == -100)
    return right.all(dim=1)


__all__ = ["check_puzzle_labels", "puzzle_inputs", "puzzle_solved"]
