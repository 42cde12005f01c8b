"""The published Attractor code's optimizer, built from torch's own Muon and AdamW: Muon on the backbone's weight
matrices, AdamW on everything else (embeddings, the LM head, norms, and every parameter of the attractor module,
whose learning rate is scaled down), stepped together as one optimizer so that the Trainer's schedulers,
gradient clipping, accumulation and checkpoints treat it like any other.

    from equilibria.trainers import AttractorTrainingArguments

    args = AttractorTrainingArguments(..., attractor_optimizer="muon_adamw", learning_rate=8e-3,
                                      adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-10)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


class MuonAdamW(torch.optim.Optimizer):
    """``torch.optim.Muon`` over ``muon_groups`` and ``torch.optim.AdamW`` over ``adamw_groups``, as one optimizer.

    Both inner optimizers hold the same parameter-group dicts as this one, so a scheduler that sets a group's
    ``lr`` here sets it for the inner optimizer that steps it; loading a state (accelerate does so when it prepares
    the optimizer) replaces the inner dicts, and this optimizer's list is rebuilt from them. ``state_dict`` holds
    both inner states."""

    def __init__(self, muon_groups: list[dict], adamw_groups: list[dict], muon: dict, adamw: dict):
        if not hasattr(torch.optim, "Muon"):
            raise ValueError(
                f"attractor_optimizer='muon_adamw' needs torch.optim.Muon, which this torch "
                f"({torch.__version__}) lacks: upgrade torch or use attractor_optimizer='trainer'."
            )
        flat = [p for group in muon_groups for p in group["params"]]
        if any(p.dim() != 2 for p in flat):
            raise ValueError("MuonAdamW: Muon takes 2-D weight matrices only; put every other parameter in AdamW.")
        self.muon = torch.optim.Muon(muon_groups, **muon) if flat else None
        self.adamw = torch.optim.AdamW(adamw_groups, **adamw)
        super().__init__(self._inner_groups(), defaults={})

    def _inner_groups(self) -> list[dict]:
        return [group for o in (self.muon, self.adamw) if o is not None for group in o.param_groups]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for inner in (self.muon, self.adamw):
            if inner is not None:
                inner.step()
        return loss

    def state_dict(self) -> dict:
        return {"muon": None if self.muon is None else self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        if set(state_dict) != {"muon", "adamw"} or (state_dict["muon"] is None) != (self.muon is None):
            raise ValueError(
                "MuonAdamW: this state was not saved by a MuonAdamW over the same parameters (a checkpoint of "
                "another optimizer?); resume with the optimizer it was saved with (attractor_optimizer)."
            )
        if self.muon is not None:
            self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        self.param_groups = self._inner_groups()  # the inner optimizers now hold new group dicts


def _part(name: str) -> str:
    """Which part a parameter belongs to by its name (PEFT and DDP prefixes allowed): backbone, attractor, other."""
    dotted = f".{name}."
    for part in ("attractor", "backbone"):
        if f".{part}." in dotted:
            return part
    return "other"


def published_attractor_optimizer(
    model: nn.Module,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    attractor_lr_scale: float,
    attractor_weight_decay: float,
    muon_weight_decay: float,
    muon_momentum: float = 0.95,
) -> MuonAdamW:
    """The published code's split: Muon (``lr``, ``muon_weight_decay``, Nesterov momentum ``muon_momentum``, the
    learning rate scaled by ``sqrt(max(1, rows / cols))`` as torch's Muon does by default) on the backbone's 2-D
    weights; AdamW (``betas``, ``eps``) on the attractor's weights (``lr * attractor_lr_scale``, its matrices with
    ``attractor_weight_decay``, the rest with none) and on everything else (``lr``, ``weight_decay``)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    muon = [p for n, p in named if _part(n) == "backbone" and p.dim() == 2]
    chosen = {id(p) for p in muon}
    groups = {"attractor_matrices": [], "attractor_other": [], "other": []}
    for n, p in named:
        if id(p) in chosen:
            continue
        if _part(n) == "attractor":
            groups["attractor_matrices" if p.dim() == 2 else "attractor_other"].append(p)
        else:
            groups["other"].append(p)
        chosen.add(id(p))
    scaled = lr * attractor_lr_scale
    adamw_groups = [
        {"params": groups["attractor_matrices"], "lr": scaled, "weight_decay": attractor_weight_decay},
        {"params": groups["attractor_other"], "lr": scaled, "weight_decay": 0.0},
        {"params": groups["other"], "lr": lr, "weight_decay": weight_decay},
    ]
    return MuonAdamW(
        [{"params": muon}] if muon else [],
        [g for g in adamw_groups if g["params"]],
        muon=dict(lr=lr, weight_decay=muon_weight_decay, momentum=muon_momentum, nesterov=True),
        adamw=dict(lr=lr, betas=betas, eps=eps),
    )


def _math_dtype(param: torch.Tensor) -> torch.dtype:
    """float64 parameters are updated in float64; every other floating dtype (float32, bf16, fp16) in float32."""
    return torch.float64 if param.dtype == torch.float64 else torch.float32


class AdamAtan2(torch.optim.Optimizer):
    """Adam with ``atan2`` in place of the division by ``sqrt(v) + eps`` (Everett et al. 2024,
    arXiv:2407.05872): the update rule of the ``adam-atan2`` package, version 0.0.3 (imoneoi/adam-atan2, whose
    CUDA-fused ``AdamATan2`` the Equilibrium Reasoner's published code imports), in plain PyTorch.

    Per parameter ``p`` with gradient ``g``, moments ``m`` and ``v`` (zero at first) and step ``t`` (incremented
    first, so 1 on the first step)::

        p <- p * (1 - lr * weight_decay)                  # decoupled decay, before the moments
        m <- m + (1 - beta1) * (g - m)
        v <- beta2 * v + (1 - beta2) * g**2
        p <- p - lr / (1 - beta1**t) * atan2(m, sqrt(v) / sqrt(1 - beta2**t))

    There is no ``eps`` (``atan2(0, 0) = 0``, so a zero gradient moves nothing but the decay) and no scale
    constants (``a = b = 1``). The first bias correction sits outside the ``atan2``, as in 0.0.3's reference and
    kernel (0.0.2 had moved it inside; 0.0.3 reverted that). Math runs in float32 for float32, bf16 and fp16
    parameters, whose moments are kept in float32, and in float64 for float64 parameters.

    ``adam-atan2-pytorch`` (lucidrains) is a different rule: ``p -= lr * a * atan2(m / (1 - beta1**t),
    b * sqrt(v / (1 - beta2**t)))`` with ``a = 1.27`` by default, i.e. the first bias correction inside the
    ``atan2``, and its own weight-decay scaling and defaults. With ``a = b = 1`` the two differ only while
    ``beta1**t`` is not negligible (the first ~100 steps at ``beta1 = 0.9``): on step 1 this rule moves each entry
    by ``lr * atan(1 - beta1) / (1 - beta1)`` (~0.997 lr), that one by ``lr * pi / 4``.

    The state per parameter is ``step`` (a float32 CPU scalar tensor, as torch's Adam keeps it), ``exp_avg`` and
    ``exp_avg_sq``; ``state_dict``/``load_state_dict`` are torch's, except that loading keeps the moments of
    bf16/fp16 parameters in float32 (torch would cast them to the parameter's dtype)."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 1e-2,
    ) -> None:
        if isinstance(lr, torch.Tensor) or not 0.0 <= lr:
            raise ValueError(f"AdamAtan2: lr must be a float >= 0, got {lr!r}.")
        if len(betas) != 2:
            raise ValueError(f"AdamAtan2: betas must be a pair (beta1, beta2), got {betas!r}.")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"AdamAtan2: betas[{i}] (beta{i + 1}) must be in [0, 1), got {beta!r}.")
        if not 0.0 <= weight_decay:
            raise ValueError(f"AdamAtan2: weight_decay must be >= 0, got {weight_decay!r}.")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    def _state(self, p: torch.Tensor) -> dict[str, Any]:
        """``p``'s state, created on its first step, with the moments in ``p``'s math dtype."""
        state = self.state[p]
        dtype = _math_dtype(p)
        if len(state) == 0:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        for key in ("exp_avg", "exp_avg_sq"):
            if state[key].dtype != dtype or state[key].device != p.device:
                state[key] = state[key].to(device=p.device, dtype=dtype)
        return state

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One update of every parameter that has a gradient; ``closure`` (re-evaluates the loss) as in torch."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamAtan2 does not support sparse gradients; use a dense gradient.")
                if torch.is_complex(p):
                    raise RuntimeError("AdamAtan2 does not support complex parameters (atan2 is real-valued).")
                state = self._state(p)
                t = int(state["step"]) + 1
                state["step"] = torch.tensor(float(t), dtype=torch.float32)  # a new tensor: never aliases a loaded one
                _adam_atan2_update(
                    p,
                    p.grad,
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    t,
                    group["lr"],
                    beta1,
                    beta2,
                    group["weight_decay"],
                )
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loading, then the saved float32 moments of bf16/fp16 parameters put back uncast."""
        super().load_state_dict(state_dict)
        saved = state_dict["state"]
        ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for i, p in zip(ids, params, strict=True):
            if p.dtype == _math_dtype(p) or i not in saved:
                continue
            for key in ("exp_avg", "exp_avg_sq"):
                value = saved[i].get(key)
                if isinstance(value, torch.Tensor):
                    self.state[p][key] = value.to(device=p.device, dtype=_math_dtype(p))


def _adam_atan2_update(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
) -> None:
    """The rule of :class:`AdamAtan2` on one tensor, in place, in the moments' dtype (``param``'s math dtype)."""
    p = param if param.dtype == exp_avg.dtype else param.to(exp_avg.dtype)
    g = grad.to(exp_avg.dtype)
    if weight_decay != 0.0:
        p.mul_(1.0 - lr * weight_decay)
    exp_avg.lerp_(g, 1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
    denom = exp_avg_sq.sqrt().div_(math.sqrt(1.0 - beta2**step))
    p.add_(torch.atan2(exp_avg, denom), alpha=-lr / (1.0 - beta1**step))
    if p is not param:
        param.copy_(p)


__all__ = ["AdamAtan2", "MuonAdamW", "published_attractor_optimizer"]
