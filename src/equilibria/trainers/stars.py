"""STARS fine-tuning (Yang et al., 2026, "Stabilizing Recurrent Dynamics for Test-Time Scalable Latent Reasoning
in Looped Language Models"): random loop-count sampling plus a Jacobian spectral-radius regulariser (JSRR), so
that a looped model keeps working when run with more loops than it was trained with.

    from equilibria.trainers import StarsTrainer, StarsTrainingArguments

    args = StarsTrainingArguments(output_dir="out", min_loops=1, max_loops=8, jsrr_weight=0.1)
    StarsTrainer(model=model, args=args, train_dataset=train).train()

Multi-GPU: put the same script behind ``accelerate launch`` or ``torchrun`` (see the README).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Annotated

import torch
from torch import nn
from transformers.utils import logging

from ..modeling.regularization import JSRR_ESTIMATORS
from .arguments import Interval, LoopTrainingArguments, OneOf
from .common import LoopTrainer, TermScale, find_core

logger = logging.get_logger(__name__)

JSRR_PENALTIES = ("square", "hinge")
STARS_LOG_KEYS = ("num_loops", "spectral_radius", "lm_loss", "jsrr_penalty")


@dataclass
class StarsTrainingArguments(LoopTrainingArguments):
    """[`~transformers.TrainingArguments`] plus the STARS options.

    Loop sampling: every optimizer step trains with ``num_loops = clip(round(exp(N(loop_log_mean,
    loop_log_std^2))), min_loops, max_loops)``, drawn from a generator seeded by ``(seed, global step)``, so all
    processes of a multi-process run (and a resumed run) use the same count at the same step.

    JSRR: at the sampled count ``T``, the spectral radius ``rho`` of the Jacobian of one loop step
    ``h -> f(h)`` at the final state ``h_T`` (detached), is estimated by ``jsrr_power_iters`` power iterations
    of vector-Jacobian products (``jsrr_estimator="vjp"``, the default) or of Jacobian-vector products in
    forward mode (``"jvp"``, the paper's); each sequence's start vector is drawn from ``(seed, step, its
    tokens)``, so the estimate does not depend on how a batch is split into micro-batches or processes. The
    two estimators are equally accurate on small Ouro loop steps (``benchmarks/bench_jsrr_estimator.py``; the
    README has the table) and ``"vjp"`` is the cheaper (``benchmarks/bench_stars_cost.py``). The loss is ``(1 - jsrr_weight) * LM + jsrr_weight *
    penalty`` with ``penalty = rho^2`` (``"square"``) or ``max(0, rho - jsrr_target)^2`` (``"hinge"``),
    averaged over sequences.

    Defaults: the loop sampler and lambda follow the STARS reference code's Ouro fine-tuning (log-normal mean
    1.7 and std 0.4 of the log, loops in [1, 16], lambda = 0.1; its addition experiment used mean 2.0, std 0.7,
    loops in [1, 100], one power iteration and 2000 warm-up steps of 10000), the squared radius is the paper's
    penalty; the power iterations (4), the estimator ("vjp"), the hinge target (1.0) and no warm-up are this
    package's choices. The README's table gives the reason for each.
    """

    min_loops: Annotated[int, Interval(min=1)] = field(
        default=1, metadata={"help": "Fewest loop steps sampled per training step (>= 1)."}
    )
    max_loops: Annotated[int, Interval(min=1)] = field(
        default=16, metadata={"help": "Most loop steps sampled per training step (>= min_loops)."}
    )
    loop_log_mean: float = field(
        default=1.7, metadata={"help": "Mean of log(num_loops) of the log-normal loop sampler."}
    )
    loop_log_std: Annotated[float, Interval(min=0)] = field(
        default=0.4, metadata={"help": "Std of log(num_loops); 0 trains always at round(exp(loop_log_mean))."}
    )
    jsrr_weight: Annotated[float, Interval(min=0, max=1, exclude_max=True, symbol="lambda")] = field(
        default=0.1,
        metadata={"help": "lambda in [0, 1): loss = (1 - lambda) * LM + lambda * penalty; 0 disables JSRR."},
    )
    jsrr_power_iters: Annotated[int, Interval(min=1)] = field(
        default=4, metadata={"help": "Power iterations per spectral-radius estimate (>= 1)."}
    )
    jsrr_estimator: Annotated[str, OneOf(JSRR_ESTIMATORS)] = field(
        default="vjp",
        metadata={"help": "'vjp' (vector-Jacobian products) or 'jvp' (forward mode, the STARS paper's)."},
    )
    jsrr_penalty: Annotated[str, OneOf(JSRR_PENALTIES)] = field(
        default="square", metadata={"help": "'square' (rho^2) or 'hinge' (max(0, rho - target)^2)."}
    )
    jsrr_target: Annotated[float, Interval(min=0, exclude_min=True)] = field(
        default=1.0, metadata={"help": "The hinge penalty's target radius (> 0)."}
    )
    jsrr_warmup_steps: Annotated[int, Interval(min=0)] = field(
        default=0,
        metadata={
            "help": "Optimizer steps trained on the LM loss alone before the penalty starts (the STARS "
            "reference code's addition run waits 2000 of 10000 steps)."
        },
    )
    eval_num_loops: Annotated[int | None, Interval(min=1)] = field(
        default=None, metadata={"help": "Loop steps for evaluation losses (default: the model config's)."}
    )

    def validate_arguments(self) -> None:
        if self.min_loops > self.max_loops:
            raise ValueError(
                f"StarsTrainingArguments: min_loops ({self.min_loops}) must be <= max_loops ({self.max_loops})"
            )


def sample_num_loops(step: int, seed: int, log_mean: float, log_std: float, min_loops: int, max_loops: int) -> int:
    """The loop count of training step ``step``: a log-normal draw rounded and clipped to ``[min, max]``,
    deterministic in ``(seed, step)``."""
    value = (
        math.exp(log_mean) if log_std == 0 else random.Random(f"stars-{seed}-{step}").lognormvariate(log_mean, log_std)
    )
    return int(min(max_loops, max(min_loops, round(value))))


def row_probes(inputs: dict, width: int, seed: int, step: int) -> torch.Tensor:
    """Power-iteration start vectors of the loop state's shape ``(batch, seq_len, width)`` (float32, on the inputs'
    device), one per sequence, each drawn from a generator seeded by ``(seed, step)`` and the sequence's own real
    tokens (``input_ids`` where ``attention_mask`` is 1; ``inputs_embeds`` when there are no ids), placed at its real
    positions and zero at padding. A sequence thus gets the same probe whichever micro-batch or process it lands in."""
    rows = inputs.get("input_ids")
    rows = inputs["inputs_embeds"] if rows is None else rows
    mask = inputs.get("attention_mask")
    batch, seq_len = rows.shape[:2]
    probes = torch.zeros((batch, seq_len, width), dtype=torch.float32)
    for b in range(batch):
        real = torch.ones(seq_len, dtype=torch.bool) if mask is None else mask[b].bool().cpu()
        tokens = rows[b].detach().cpu()[real]
        digest = hashlib.blake2b(f"jsrr-{seed}-{step}".encode(), digest_size=8)
        digest.update(
            tokens.float().numpy().tobytes() if tokens.is_floating_point() else tokens.long().numpy().tobytes()
        )
        generator = torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") % (2**63))
        probes[b, real] = torch.randn((int(real.sum()), width), generator=generator)
    return probes.to(device=rows.device)


def find_looped_core(model: nn.Module) -> nn.Module | None:
    """The module that exposes ``loop_map`` (e.g. ``OuroModel``) inside ``model`` and any wrapper around it
    (PEFT, DDP), or ``None``."""
    return find_core(model, StarsTrainer.family().model_type)


class StarsTrainer(LoopTrainer):
    """[`~transformers.Trainer`] with STARS' random loop sampling and Jacobian spectral-radius regularisation.

    The model must be a looped model whose ``forward`` takes ``num_loops`` and that contains an Ouro base model
    (``OuroForCausalLM``, also wrapped by PEFT). Logged next to the loss (so the progress bar,
    TensorBoard and W&B show them): ``num_loops`` (mean sampled count), ``spectral_radius``, ``lm_loss`` and
    ``jsrr_penalty`` (means over the logging interval and the processes).

    Gradient accumulation, multi-process runs (DDP, the penalty's gradients are all-reduced with the LM
    loss's), PEFT and checkpoint resume work. Gradient checkpointing works with ``jsrr_weight=0``; with the
    penalty on it is refused, since the double backward through checkpointed layers is not supported here.
    """

    model_types = ("ouro",)
    arguments_class = StarsTrainingArguments
    model_description = "a looped model (one containing an Ouro base model with `loop_map`, such as OuroForCausalLM)"
    log_keys = STARS_LOG_KEYS
    weighted_log_keys = {"spectral_radius": "jsrr_weight", "jsrr_penalty": "jsrr_weight"}

    def __init__(self, model=None, args: StarsTrainingArguments | None = None, **kwargs):
        if isinstance(args, StarsTrainingArguments) and args.gradient_checkpointing and args.jsrr_weight > 0:
            raise ValueError(
                "StarsTrainer: gradient_checkpointing=True is not supported together with the JSRR penalty "
                "(jsrr_weight > 0); turn one of them off."
            )
        super().__init__(model=model, args=args, **kwargs)
        exit_loss = getattr(self.core.config, "exit_loss", "final")
        if exit_loss != "final" and self.args.max_loops > self.args.min_loops:
            logger.warning(
                f"StarsTrainer: the model's exit_loss is {exit_loss!r}; with it the exit gate learns to exit early and "
                "the deeper sampled steps go almost untrained (the README's demo: 95.5% -> 27.0% at 8 loops). For "
                "STARS set config.exit_loss='final' before building the model (`--exit_loss final`)."
            )

    def double_backward_option(self, args) -> str | None:
        return "the JSRR penalty (jsrr_weight > 0)" if args.jsrr_weight > 0 else None

    # -- the loss ---------------------------------------------------------------------------------------

    def current_num_loops(self) -> int:
        """The loop count for the current optimizer step (the same for all micro-batches and processes)."""
        a = self.args
        return sample_num_loops(
            self.state.global_step, a.seed, a.loop_log_mean, a.loop_log_std, a.min_loops, a.max_loops
        )

    def penalty_on(self) -> bool:
        """Whether the JSRR penalty trains at this step (a weight and the warm-up passed)."""
        return self.args.jsrr_weight > 0 and self.state.global_step >= self.args.jsrr_warmup_steps

    def model_inputs(self, model, inputs: dict, training: bool) -> dict:
        """The step's sampled loop count (evaluation: ``eval_num_loops``, else the config's) and, with the penalty
        on, the spectral-radius estimate's options: it is estimated inside the model's forward, so that any wrapper
        (DDP, FSDP, DeepSpeed) sees it."""
        args: StarsTrainingArguments = self.args
        if not training:
            loops = {} if args.eval_num_loops is None else {"num_loops": args.eval_num_loops}
            return {**inputs, "use_cache": False, **loops}
        batch = {**inputs, "num_loops": self.current_num_loops(), "use_cache": False}
        if self.penalty_on():
            step = self.state.global_step
            batch.update(
                spectral_radius_iters=args.jsrr_power_iters,
                spectral_radius_estimator=args.jsrr_estimator,
                spectral_radius_start=row_probes(inputs, self.core.config.hidden_size, args.seed, step),
            )
        return batch

    def add_terms(self, model, lm_loss, outputs, batch: dict, scale: TermScale):
        """``(1 - lambda) * LM + lambda * penalty`` once the penalty is on (the penalty is a mean over the
        micro-batch's sequences), else the LM loss."""
        args: StarsTrainingArguments = self.args
        loss = lm_loss
        rho_mean = penalty = torch.zeros((), device=lm_loss.device, dtype=torch.float32)
        if self.penalty_on():
            rho = outputs.spectral_radius.float()
            if args.jsrr_penalty == "square":
                penalty = (rho**2).mean()
            else:
                penalty = (torch.relu(rho - args.jsrr_target) ** 2).mean()
            rho_mean = rho.detach().mean()
            loss = (1.0 - args.jsrr_weight) * lm_loss + args.jsrr_weight * penalty * scale.per_batch
        metrics = {"num_loops": float(batch["num_loops"]), "spectral_radius": rho_mean, "jsrr_penalty": penalty}
        return loss, {**metrics, "lm_loss": lm_loss * scale.report}  # the LM loss as a per-token mean
