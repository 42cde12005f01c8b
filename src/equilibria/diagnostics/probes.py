"""T2's representation probe: a fresh multinomial logistic regression trained on frozen states, held-out rows
scored, on the solved state and on the start for contrast."""

from __future__ import annotations

import math

import torch

from .statistics import paired_change


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
    return _held_out_correct(train_x, train_y, test_x, test_y, weight_decay, max_iter).double().mean().item()


def probe_solved_and_start(solved: torch.Tensor, start: torch.Tensor, targets: torch.Tensor, seed: int) -> dict:
    n = len(targets)
    if n < 4 or targets.unique().numel() < 2:
        return {"note": "too few rows or a single class: probe not trained"}
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    train, test = perm[: n // 2], perm[n // 2 :]
    counts = torch.bincount(targets[train])
    majority = (targets[test] == counts.argmax()).float().mean().item()
    on_solved = _held_out_correct(solved[train], targets[train], solved[test], targets[test])
    on_start = _held_out_correct(start[train], targets[train], start[test], targets[test])
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


def _held_out_correct(
    train_x, train_y, test_x, test_y, weight_decay: float = 1e-3, max_iter: int = 200
) -> torch.Tensor:
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


__all__ = ["linear_probe", "probe_solved_and_start"]
