"""The published Attractor code's optimizer, built from torch's own Muon and AdamW: Muon on the backbone's weight
matrices, AdamW on everything else (embeddings, the LM head, norms, and every parameter of the attractor module,
whose learning rate is scaled down), stepped together as one optimizer so that the Trainer's schedulers,
gradient clipping, accumulation and checkpoints treat it like any other.

    from equilibria.trainers import AttractorTrainingArguments

    args = AttractorTrainingArguments(..., attractor_optimizer="muon_adamw", learning_rate=8e-3,
                                      adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-10)
"""

from __future__ import annotations

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


__all__ = ["MuonAdamW", "published_attractor_optimizer"]
