"""Training Attractor LMs: the LM loss on the fixed point, differentiated without unrolling the solver, plus
two optional stabilisers, with the solver's behaviour logged as training goes.

    from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments

    args = AttractorTrainingArguments(output_dir="out", train_num_loops=16, jacobian_weight=0.1)
    AttractorTrainer(model=model, args=args, train_dataset=train).train()

Multi-GPU: put the same script behind ``accelerate launch`` or ``torchrun`` (see the README).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import torch

from ..modeling.configuration_attractor import AttractorConfig
from ..modeling.solvers import GRADIENT_MODES
from .common import LoopTrainer, TermScale
from .optimizers import published_attractor_optimizer
from .training_args import Interval, LoopTrainingArguments, OneOf

OPTIMIZERS = ("trainer", "muon_adamw")

ATTRACTOR_LOG_KEYS = (
    "lm_loss",
    "solver_steps",
    "rel_residual",
    "converged_rate",
    "diverged_rate",
    "jacobian_penalty",
    "correction_loss",
)


@dataclass
class AttractorTrainingArguments(LoopTrainingArguments):
    """[`~transformers.TrainingArguments`] plus the Attractor LM's training options.

    The loss is ``LM(y*) + jacobian_weight * J + correction_weight * C`` where

    * ``J`` is a Hutchinson estimate (``jacobian_samples`` Gaussian probes) of ``||dT/dy||_F^2`` per state entry
      at the fixed point: it keeps the attractor contractive, so the solver keeps converging in few steps
      (Bai et al., 2021, "Stabilizing Equilibrium Models by Jacobian Regularization");
    * ``C`` is the mean LM loss read from ``T`` applied at ``correction_states`` intermediate iterates of the
      solve (one-step gradient at each; "fixed-point correction", Bai et al., 2022), which teaches the
      attractor to move toward good predictions from anywhere along the path, not only at the end.
    """

    train_num_loops: Annotated[int | None, Interval(min=1)] = field(
        default=None, metadata={"help": "Solver budget in training (>= 1; default: the model config's num_loops)."}
    )
    eval_num_loops: Annotated[int | None, Interval(min=0)] = field(
        default=None, metadata={"help": "Solver budget for evaluation losses (>= 0; default: the config's)."}
    )
    gradient_mode: Annotated[str | None, OneOf(GRADIENT_MODES)] = field(
        default=None,
        metadata={
            "help": "'one_step', 'implicit', 'unrolled' or 'one_step_neumann' (default: the model config's "
            "gradient_mode)."
        },
    )
    jacobian_weight: Annotated[float, Interval(min=0)] = field(
        default=0.0, metadata={"help": "Weight of the Jacobian-norm penalty (>= 0; 0 disables it)."}
    )
    jacobian_samples: Annotated[int, Interval(min=1)] = field(
        default=1, metadata={"help": "Hutchinson probes per step (>= 1)."}
    )
    correction_weight: Annotated[float, Interval(min=0)] = field(
        default=0.0, metadata={"help": "Weight of the fixed-point correction loss (>= 0; 0 disables it)."}
    )
    correction_states: Annotated[int, Interval(min=1)] = field(
        default=2, metadata={"help": "Intermediate iterates the correction loss reads (>= 1)."}
    )
    attractor_optimizer: Annotated[str, OneOf(OPTIMIZERS)] = field(
        default="trainer",
        metadata={
            "help": "'trainer' (the Trainer's own optimizer, `optim`) or 'muon_adamw' (the published code's: Muon "
            "on the backbone's weight matrices, AdamW with `adam_beta1/2`, `adam_epsilon` on the rest)."
        },
    )
    attractor_lr_scale: Annotated[float, Interval(min=0, exclude_min=True)] = field(
        default=0.5, metadata={"help": "muon_adamw: the attractor module's learning rate over `learning_rate`."}
    )
    attractor_weight_decay: Annotated[float, Interval(min=0)] = field(
        default=0.1, metadata={"help": "muon_adamw: weight decay of the attractor's weight matrices."}
    )
    muon_weight_decay: Annotated[float, Interval(min=0)] = field(
        default=0.2, metadata={"help": "muon_adamw: Muon's weight decay (the published code tapers it to 0)."}
    )


class AttractorTrainer(LoopTrainer):
    """[`~transformers.Trainer`] for Attractor LMs (``AttractorForCausalLM``, also wrapped by PEFT).

    Logged next to the loss (progress bar, TensorBoard, W&B, ``state.log_history``), as means over the logging
    interval and the processes: ``lm_loss``, ``solver_steps`` (iterations per sequence), ``rel_residual`` (the
    solve's final relative residual), ``converged_rate`` and ``diverged_rate`` (shares of sequences), and, when
    enabled, ``jacobian_penalty`` and ``correction_loss``.

    Gradient accumulation, multi-process runs (DDP: the penalty's gradients are all-reduced with the LM loss's),
    PEFT and checkpoint resume work as with the plain Trainer.
    """

    model_types = (AttractorConfig.model_type,)
    arguments_class = AttractorTrainingArguments
    model_description = "an Attractor model (one containing an AttractorModel, such as AttractorForCausalLM)"
    log_keys = ATTRACTOR_LOG_KEYS
    weighted_log_keys = {"jacobian_penalty": "jacobian_weight", "correction_loss": "correction_weight"}

    def own_optimizer_setting(self) -> str | None:
        """``attractor_optimizer="muon_adamw"``: the published code's optimizer
        ([`~equilibria.trainers.optimizers.published_attractor_optimizer`])."""
        choice = self.args.attractor_optimizer
        return None if choice == "trainer" else f"attractor_optimizer={choice!r}"

    def build_own_optimizer(self, model) -> torch.optim.Optimizer:
        args: AttractorTrainingArguments = self.args
        return published_attractor_optimizer(
            model,
            lr=args.learning_rate,
            betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon,
            weight_decay=args.weight_decay,
            attractor_lr_scale=args.attractor_lr_scale,
            attractor_weight_decay=args.attractor_weight_decay,
            muon_weight_decay=args.muon_weight_decay,
        )

    def double_backward_option(self, args) -> str | None:
        return "the Jacobian penalty (jacobian_weight > 0)" if args.jacobian_weight > 0 else None

    def model_inputs(self, model, inputs: dict, training: bool) -> dict:
        """The options set: the solver's budget (evaluation: ``eval_num_loops``), the gradient mode and the options
        of the terms whose weight is on."""
        args: AttractorTrainingArguments = self.args
        options = {"num_loops": args.eval_num_loops}
        if training:
            if inputs.get("labels") is None:
                raise ValueError("AttractorTrainer: the batch has no `labels`, so the model returns no loss.")
            options = {
                "num_loops": args.train_num_loops,
                "gradient_mode": args.gradient_mode,
                "jacobian_samples": args.jacobian_samples if args.jacobian_weight > 0 else None,
                "correction_states": args.correction_states if args.correction_weight > 0 else None,
            }
        return {**inputs, "use_cache": False, **{k: v for k, v in options.items() if v is not None}}

    def objective(self) -> str:
        args: AttractorTrainingArguments = self.args
        terms = [f"{w:g} x {name}" for name, w in (("jacobian_penalty", args.jacobian_weight),
                                                     ("correction_loss", args.correction_weight)) if w > 0]  # fmt: skip
        return " + ".join(["lm_loss", *terms])

    def add_terms(self, model, lm_loss, outputs, batch: dict, scale: TermScale):
        """``LM + jacobian_weight * J + correction_weight * C`` (``J`` a mean over the micro-batch, ``C`` normalised
        like the LM loss), with the solver's statistics."""
        args: AttractorTrainingArguments = self.args
        loss = lm_loss
        zero = torch.zeros((), device=lm_loss.device)
        penalty = correction = zero
        if args.jacobian_weight > 0 and outputs.jacobian_penalty is not None:
            penalty = outputs.jacobian_penalty
            loss = loss + args.jacobian_weight * penalty * scale.per_batch
        if args.correction_weight > 0 and outputs.correction_loss is not None:
            correction = outputs.correction_loss.mean() * scale.like_lm
            loss = loss + args.correction_weight * correction
        steps = outputs.solver_steps
        solved = steps is not None
        return loss, {
            "lm_loss": lm_loss * scale.report,
            "solver_steps": steps.float().mean() if solved else zero,
            "rel_residual": outputs.rel_residual.float().mean() if solved else zero,
            "converged_rate": outputs.converged.float().mean() if solved else zero,
            "diverged_rate": outputs.diverged.float().mean() if solved else zero,
            "jacobian_penalty": penalty,
            "correction_loss": correction * scale.report,
        }
