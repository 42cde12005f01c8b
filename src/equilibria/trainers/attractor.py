"""Training Attractor LMs: the LM loss on the fixed point, differentiated without unrolling the solver, plus
two optional stabilisers, with the solver's behaviour logged as training goes.

    from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments

    args = AttractorTrainingArguments(output_dir="out", train_num_loops=16, jacobian_weight=0.1)
    AttractorTrainer(model=model, args=args, train_dataset=train).train()

Multi-GPU: put the same script behind ``accelerate launch`` or ``torchrun`` (see the README).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments

from ..modeling.solvers import GRADIENT_MODES
from .common import LoopTrainer, loss_scales

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
class AttractorTrainingArguments(TrainingArguments):
    """[`~transformers.TrainingArguments`] plus the Attractor LM's training options.

    The loss is ``LM(y*) + jacobian_weight * J + correction_weight * C`` where

    * ``J`` is a Hutchinson estimate (``jacobian_samples`` Gaussian probes) of ``||dT/dy||_F^2`` per state entry
      at the fixed point: it keeps the attractor contractive, so the solver keeps converging in few steps
      (Bai et al., 2021, "Stabilizing Equilibrium Models by Jacobian Regularization");
    * ``C`` is the mean LM loss read from ``T`` applied at ``correction_states`` intermediate iterates of the
      solve (one-step gradient at each; "fixed-point correction", Bai et al., 2022), which teaches the
      attractor to move toward good predictions from anywhere along the path, not only at the end.
    """

    train_num_loops: int | None = field(
        default=None, metadata={"help": "Solver budget in training (>= 1; default: the model config's num_loops)."}
    )
    eval_num_loops: int | None = field(
        default=None, metadata={"help": "Solver budget for evaluation losses (>= 0; default: the config's)."}
    )
    gradient_mode: str | None = field(
        default=None,
        metadata={"help": "'one_step', 'implicit' or 'unrolled' (default: the model config's gradient_mode)."},
    )
    jacobian_weight: float = field(
        default=0.0, metadata={"help": "Weight of the Jacobian-norm penalty (>= 0; 0 disables it)."}
    )
    jacobian_samples: int = field(default=1, metadata={"help": "Hutchinson probes per step (>= 1)."})
    correction_weight: float = field(
        default=0.0, metadata={"help": "Weight of the fixed-point correction loss (>= 0; 0 disables it)."}
    )
    correction_states: int = field(
        default=2, metadata={"help": "Intermediate iterates the correction loss reads (>= 1)."}
    )

    def __post_init__(self):
        super().__post_init__()
        if self.train_num_loops is not None and not _is_int(self.train_num_loops, 1):
            raise ValueError(
                f"AttractorTrainingArguments: train_num_loops must be None or an integer >= 1, got "
                f"{self.train_num_loops!r}"
            )
        if self.eval_num_loops is not None and not _is_int(self.eval_num_loops, 0):
            raise ValueError(
                f"AttractorTrainingArguments: eval_num_loops must be None or an integer >= 0, got {self.eval_num_loops!r}"
            )
        if self.gradient_mode is not None and self.gradient_mode not in GRADIENT_MODES:
            raise ValueError(
                f"AttractorTrainingArguments: gradient_mode must be None or one of {GRADIENT_MODES}, got "
                f"{self.gradient_mode!r}"
            )
        for name in ("jacobian_weight", "correction_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"AttractorTrainingArguments: {name} must be a number >= 0, got {value!r}")
        for name in ("jacobian_samples", "correction_states"):
            if not _is_int(getattr(self, name), 1):
                raise ValueError(
                    f"AttractorTrainingArguments: {name} must be an integer >= 1, got {getattr(self, name)!r}"
                )


def _is_int(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


class AttractorTrainer(LoopTrainer):
    """[`~transformers.Trainer`] for Attractor LMs (``AttractorForCausalLM``, also wrapped by PEFT).

    Logged next to the loss (progress bar, TensorBoard, W&B, ``state.log_history``), as means over the logging
    interval and the processes: ``lm_loss``, ``solver_steps`` (iterations per sequence), ``rel_residual`` (the
    solve's final relative residual), ``converged_rate`` and ``diverged_rate`` (shares of sequences), and, when
    enabled, ``jacobian_penalty`` and ``correction_loss``.

    Gradient accumulation, multi-process runs (DDP: the penalty's gradients are all-reduced with the LM loss's),
    PEFT and checkpoint resume work as with the plain Trainer.
    """

    model_types = ("attractor_lm",)
    arguments_class = AttractorTrainingArguments
    model_description = "an Attractor model (one containing an AttractorModel, such as AttractorForCausalLM)"
    log_keys = ATTRACTOR_LOG_KEYS

    def double_backward_option(self, args) -> str | None:
        return "the Jacobian penalty (jacobian_weight > 0)" if args.jacobian_weight > 0 else None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        args: AttractorTrainingArguments = self.args
        if not (model.training and torch.is_grad_enabled()):
            return self.evaluation_loss(model, inputs, return_outputs, use_cache=False, num_loops=args.eval_num_loops)

        extra = {"num_items_in_batch": num_items_in_batch} if num_items_in_batch is not None else {}
        if args.train_num_loops is not None:
            extra["num_loops"] = args.train_num_loops
        if args.gradient_mode is not None:
            extra["gradient_mode"] = args.gradient_mode
        if args.jacobian_weight > 0:
            extra["jacobian_samples"] = args.jacobian_samples
        if args.correction_weight > 0:
            extra["correction_states"] = args.correction_states
        outputs = model(**inputs, use_cache=False, **extra)
        if outputs.loss is None:
            raise ValueError("AttractorTrainer: the batch has no `labels`, so the model returned no loss.")

        lm_loss = outputs.loss.mean()  # a vector under nn.DataParallel
        lm_scale, report_scale, reg_scale = loss_scales(self, num_items_in_batch)
        loss = lm_loss * lm_scale
        zero = torch.zeros((), device=lm_loss.device)
        penalty = correction = zero
        if args.jacobian_weight > 0 and outputs.jacobian_penalty is not None:
            penalty = outputs.jacobian_penalty
            loss = loss + args.jacobian_weight * penalty * reg_scale
        if args.correction_weight > 0 and outputs.correction_loss is not None:
            correction = outputs.correction_loss.mean()  # the same token normalisation as the LM loss
            loss = loss + args.correction_weight * correction * lm_scale
            correction = correction * report_scale
        steps = outputs.solver_steps
        solved = steps is not None
        self.means.add(
            {
                "lm_loss": lm_loss * report_scale,
                "solver_steps": steps.float().mean() if solved else zero,
                "rel_residual": outputs.rel_residual.float().mean() if solved else zero,
                "converged_rate": outputs.converged.float().mean() if solved else zero,
                "diverged_rate": outputs.diverged.float().mean() if solved else zero,
                "jacobian_penalty": penalty,
                "correction_loss": correction,
            },
            lm_loss.device,
        )
        return (loss, outputs) if return_outputs else loss

    def logged_means(self, means: dict[str, float]) -> dict[str, float]:
        off = {"jacobian_penalty": self.args.jacobian_weight == 0, "correction_loss": self.args.correction_weight == 0}
        return {k: v for k, v in means.items() if not off.get(k, False)}
