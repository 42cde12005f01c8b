"""Training Equilibrium Reasoners with segmented online training (deep supervision with a carried state).

Each puzzle's trajectory is cut into segments of ``segment_loops`` iterations. Every training step runs one
segment for every row of the batch, supervises its answers (and the halting head), steps the optimizer, and
carries the detached state on to the next step. A row that halts (its halting head says its answer is right, or
it has run ``max_segments`` segments) is refilled with a fresh puzzle from the incoming batch, starting again
from a random (or learned) state. So one long trajectory is trained with constant memory, hard puzzles get
more segments than easy ones, and the batch stays full.

    from equilibria.trainers import EqRTrainer, EqRTrainingArguments

    args = EqRTrainingArguments(output_dir="out", segment_loops=8, max_segments=4, train_noise=0.1)
    EqRTrainer(model=model, args=args, train_dataset=puzzles["train"]).train()
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Annotated

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from transformers.utils import logging

from ..modeling.configuration_eqr import EqRConfig
from .common import LoopTrainer, TermScale
from .optimizers import AdamAtan2
from .training_args import Interval, LoopTrainingArguments, OneOf, preset_recipe

logger = logging.get_logger(__name__)

EMA_WEIGHTS_NAME = "ema.safetensors"  # the EMA's file in each checkpoint-N folder (see _EMACallback)

EQR_LOG_KEYS = (
    "lm_loss",
    "halt_loss",
    "cell_accuracy",
    "exact_accuracy",
    "residual",
    "halted_rate",
    "halted_segments",  # per step: segments summed over the rows replaced (logged as segments_at_halt)
)


SUPERVISIONS = ("online", "offline", "offline_terminal")
OPTIMIZERS = ("trainer", "adam_atan2")

# Training presets: every option a recipe sets. "published": the locuslab/EqR code's Sudoku training
# (config/train/eqr_sudoku.yaml, pretrain.py); with EqRConfig.from_preset("published") for the model.
PRESETS: dict[str, dict] = {
    "published": {
        "learning_rate": 1e-4,
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": 2000,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,
        "weight_decay": 1.0,  # on every parameter, as its optimizer is given them all
        "eqr_optimizer": "adam_atan2",
        "max_grad_norm": 0.0,  # no clipping
        "ema_decay": 0.999,
        "supervision": "online",
        "segment_loops": 3,  # its H_cycles (an iteration here is one H-cycle: l_cycles z_L updates, one z_H update)
        "grad_loops": 1,  # the last H-cycle with gradient, the first two without
        "max_segments": 16,  # halt_max_steps
        "halt_on_head": True,
        "halt_exploration": 0.1,
        "per_device_train_batch_size": 768,
        "max_steps": 50000,
    }
}


@dataclass
class EqRTrainingArguments(LoopTrainingArguments):
    """[`~transformers.TrainingArguments`] plus segmented online training for Equilibrium Reasoners."""

    segment_loops: Annotated[int | None, Interval(min=1)] = field(
        default=None, metadata={"help": "Iterations per supervised segment (>= 1; default: the config's num_loops)."}
    )
    max_segments: Annotated[int, Interval(min=1)] = field(
        default=4, metadata={"help": "Segments a puzzle runs at most before it is replaced."}
    )
    halt_on_head: bool = field(
        default=True,
        metadata={"help": "Replace a puzzle as soon as the halting head says its answer is right (prob > 0.5)."},
    )
    train_noise: Annotated[float | None, Interval(min=0, max=math.inf, exclude_max=True)] = field(
        default=None, metadata={"help": "Noise beta during training (>= 0; default: the config's train_noise)."}
    )
    random_init: bool | None = field(
        default=None,
        metadata={"help": "Start trajectories from random (True) or learned (False) states (default: the config's)."},
    )
    eval_num_loops: Annotated[int | None, Interval(min=1)] = field(
        default=None,
        metadata={
            "help": "Iterations for evaluation losses (default: segment_loops * max_segments), from a fresh start."
        },
    )
    ema_decay: Annotated[float | None, Interval(min=0, max=1, exclude_min=True, exclude_max=True)] = field(
        default=None,
        metadata={
            "help": "Keep an exponential moving average of the weights (e.g. 0.999); loaded at the end. Each checkpoint "
            f"holds it ({EMA_WEIGHTS_NAME}) and resume_from_checkpoint restores it."
        },
    )
    supervision: Annotated[str, OneOf(SUPERVISIONS)] = field(
        default="online",
        metadata={
            "help": "online: segmented online training (one supervised segment per step, the state carried on); "
            "offline: the paper's offline deep supervision (every step runs fresh puzzles max_segments segments, "
            "the state detached between them, and supervises every segment's end: one optimizer step per "
            "trajectory); offline_terminal: the same rollout without gradient but the last segment, whose end "
            "alone is supervised."
        },
    )

    grad_loops: Annotated[int | None, Interval(min=1)] = field(
        default=None,
        metadata={
            "help": "online supervision: only the segment's last grad_loops iterations are trained through, the ones "
            "before run without gradient (default: all; the published code: 1 of its 3)."
        },
    )
    halt_exploration: Annotated[float, Interval(min=0, max=1)] = field(
        default=0.0,
        metadata={
            "help": "online supervision: per row and segment, the probability of drawing a least number of segments "
            "(uniform in 2..max_segments) before the row may halt on its head (the published code's 0.1)."
        },
    )
    eqr_optimizer: Annotated[str, OneOf(OPTIMIZERS)] = field(
        default="trainer",
        metadata={
            "help": "trainer: the Trainer's optimizer (optim); adam_atan2: AdamATan2 as the published code uses it "
            "(adam-atan2 0.0.3's rule; learning_rate, adam_beta1/2, weight_decay on every parameter)."
        },
    )
    eqr_preset: Annotated[str | None, OneOf(tuple(PRESETS))] = field(
        default=None,
        metadata={
            "help": "the recipe these arguments were made from (EqRTrainingArguments.from_preset or `equilibria train "
            "--eqr_preset`), named in the training record and the card."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if self.ddp_find_unused_parameters is None:
            # the learned start is unused with random starts (and vice versa): DDP must allow that
            self.ddp_find_unused_parameters = True

    def validate_arguments(self) -> None:
        super().validate_arguments()
        loops = self.segment_loops
        if self.grad_loops is not None and loops is not None and self.grad_loops > loops:
            raise ValueError(
                f"EqRTrainingArguments: grad_loops ({self.grad_loops}) must be <= segment_loops ({loops})."
            )
        for option, off in (("grad_loops", self.grad_loops is None), ("halt_exploration", self.halt_exploration == 0)):
            if not off and self.supervision != "online":
                raise ValueError(
                    f"EqRTrainingArguments: {option} applies to supervision='online', got supervision={self.supervision!r}."
                )

    preset_option = "eqr_preset"  # the option naming a recipe whose options a command line applies

    @classmethod
    def preset_training_defaults(cls, name: str) -> dict:
        """The recipe ``name``'s options, which ``equilibria train --eqr_preset NAME`` makes its flags' defaults."""
        return dict(PRESETS[name])

    @classmethod
    def from_preset(cls, eqr_preset: str, **overrides) -> EqRTrainingArguments:
        """Arguments with every option of the recipe ``eqr_preset`` (``"published"``: the locuslab/EqR code's
        optimizer, schedule, EMA, segments and halting; pair it with ``EqRConfig.from_preset``), the keyword
        arguments overriding any of them."""
        if eqr_preset not in PRESETS:
            raise ValueError(
                f"EqRTrainingArguments.from_preset: eqr_preset must be one of {tuple(PRESETS)}, got {eqr_preset!r}."
            )
        return cls(eqr_preset=eqr_preset, **{**PRESETS[eqr_preset], **overrides})

    def recipe(self) -> dict:
        """``{"preset": name or None, "overrides": {option: value}}``: the preset and its options these arguments
        change (none without a preset)."""
        return preset_recipe(self, self.eqr_preset, PRESETS.get(self.eqr_preset, {}))


class _Carry:
    """The rows in flight: their puzzles, labels, states and how many segments each has run."""

    def __init__(self, batch: dict[str, torch.Tensor]):
        self.batch = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        n = self.batch["inputs"].shape[0]
        device = self.batch["inputs"].device
        self.state: torch.Tensor | None = None
        self.fresh = torch.ones(n, dtype=torch.bool, device=device)  # rows that start a new puzzle this step
        self.done = torch.zeros(n, dtype=torch.bool, device=device)  # rows to replace before the next step
        self.segments = torch.zeros(n, dtype=torch.long, device=device)

    def refill(self, batch: dict[str, torch.Tensor]) -> None:
        """Put the incoming batch's puzzles in the rows that halted; the other rows go on with theirs."""
        for key, value in self.batch.items():
            keep = self.done.view(-1, *([1] * (value.dim() - 1)))
            self.batch[key] = torch.where(keep, batch[key], value)
        self.fresh = self.done
        self.segments = torch.where(self.done, 0, self.segments)
        self.done = torch.zeros_like(self.done)


class _EMACallback(TrainerCallback):
    """An exponential moving average of the trained model's parameters, kept as a
    :class:`torch.optim.swa_utils.AveragedModel` with ``get_ema_multi_avg_fn(decay)``: built from the unwrapped model
    when training begins (after the Trainer has loaded a resumed checkpoint's weights), updated after every optimizer
    step (the first update copies the weights: ``ema_1 = w_1``, then ``ema_k = decay ema_{k-1} + (1 - decay) w_k``)
    and copied into the model's parameters when training ends. Buffers are not averaged.

    Under DDP every replica averages its own unwrapped model, whose parameters are identical on every rank after each
    step, so the averages stay identical too; only the process that saves (``args.should_save``) writes the file.

    :meth:`save` writes ``ema.safetensors``: the averaged parameters keyed by their names in the unwrapped model
    (``named_parameters``; the trainable ones, and any frozen one whose average differs from its value), with the
    number of updates (``n_averaged``) and the decay in its metadata. A frozen parameter left out equals the
    checkpoint's own weight. :meth:`load` puts such a file back into the average."""

    def __init__(self, trainer: EqRTrainer, decay: float):
        self.trainer, self.decay = trainer, decay
        self.averaged: AveragedModel | None = None
        self.training = False  # between on_train_begin and on_train_end: the average is not in the model yet
        self.resume_from: str | None = None  # the checkpoint folder whose average the next training starts from

    def _model(self) -> torch.nn.Module:
        return self.trainer.accelerator.unwrap_model(self.trainer.model)

    def on_train_begin(self, args, state, control, **kwargs):
        model = self._model()
        self.averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.decay)).requires_grad_(False)
        self.training = True
        if self.resume_from is not None:  # kept until train() returns: auto_find_batch_size may begin again
            self.load(self.resume_from, trainable={n for n, p in model.named_parameters() if p.requires_grad})

    def on_step_end(self, args, state, control, **kwargs):
        self.averaged.update_parameters(self._model())

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False
        if self.averaged is not None and self.averaged.n_averaged > 0:
            with torch.no_grad():
                for param, average in zip(self._model().parameters(), self.averaged.module.parameters(), strict=True):
                    param.copy_(average)

    def weights(self) -> dict[str, torch.Tensor] | None:
        """The averaged parameters by name (``None`` before the first optimizer step)."""
        if self.averaged is None or self.averaged.n_averaged == 0:
            return None
        return {name: param.detach() for name, param in self.averaged.module.named_parameters()}

    def save(self, folder: str) -> None:
        """Write the average to ``folder/ema.safetensors`` (see the class)."""
        model = dict(self._model().named_parameters())
        tensors = {
            name: average.detach().contiguous()
            for name, average in self.averaged.module.named_parameters()
            if model[name].requires_grad or not torch.equal(average, model[name])
        }
        metadata = {"n_averaged": str(int(self.averaged.n_averaged)), "decay": repr(self.decay)}
        os.makedirs(folder, exist_ok=True)
        save_file(tensors, os.path.join(folder, EMA_WEIGHTS_NAME), metadata=metadata)

    def load(self, folder: str, trainable: set[str]) -> None:
        """Put ``folder/ema.safetensors`` back into the average; ``ValueError`` if it names parameters the model
        lacks or leaves out one that trains."""
        path = os.path.join(folder, EMA_WEIGHTS_NAME)
        averages = dict(self.averaged.module.named_parameters())
        with safe_open(path, framework="pt") as handle:
            names, metadata = set(handle.keys()), handle.metadata() or {}
            unknown, missing = sorted(names - set(averages)), sorted(trainable - names)
            if unknown or missing or "n_averaged" not in metadata:
                raise ValueError(
                    f"{path} is not this model's EMA: parameters it names that the model lacks: {unknown}; trainable "
                    f"parameters it lacks: {missing}; n_averaged in its metadata: {'n_averaged' in metadata}"
                )
            with torch.no_grad():
                for name in names:
                    averages[name].copy_(handle.get_tensor(name))
        self.averaged.n_averaged.fill_(int(metadata["n_averaged"]))
        if metadata.get("decay") not in (None, repr(self.decay)):
            logger.warning(f"{path} was averaged with decay {metadata['decay']}; it goes on with {self.decay}.")


class EqRTrainer(LoopTrainer):
    """[`~transformers.Trainer`] with segmented online training for [`EqRForPuzzleSolving`] (also wrapped by
    PEFT). The dataset gives ``inputs`` and ``labels`` (``(seq_len,)`` token lists, e.g. from
    ``build_sudoku_dataset``); use ``dataloader_drop_last=True`` or the carry restarts when a batch of another
    size arrives.

    Logged next to the loss: ``lm_loss``, ``halt_loss``, ``cell_accuracy`` and ``exact_accuracy`` of the
    segment's answers, ``residual`` (final relative residual of the segment), ``halted_rate`` (share of rows
    replaced after the step) and ``segments_at_halt`` (mean segments a replaced row had run).

    With ``ema_decay``, an exponential moving average of the weights is kept (a ``torch.optim.swa_utils``
    ``AveragedModel``) and copied into the model when training ends (the usual practice for these models);
    ``trainer.ema_weights`` holds it. Every ``save_model`` during training, so every ``checkpoint-N`` folder, gets
    it as ``ema.safetensors`` beside the weights (parameter names as in the model, so
    ``model.load_state_dict(load_file(".../ema.safetensors"), strict=False)`` puts a checkpoint's average into a
    model loaded from that checkpoint); ``train(resume_from_checkpoint=...)`` restores it, so a resumed run ends
    with the average of an uninterrupted one. Resuming a checkpoint without that file raises ``ValueError`` rather
    than restarting the average.
    """

    model_types = (EqRConfig.model_type,)
    arguments_class = EqRTrainingArguments
    model_description = "an Equilibrium Reasoner (a model containing EqRModel, such as EqRForPuzzleSolving)"
    log_keys = EQR_LOG_KEYS

    def __init__(self, model=None, args: EqRTrainingArguments | None = None, **kwargs):
        super().__init__(model=model, args=args, **kwargs)
        self._carry: _Carry | None = None
        self._ema = _EMACallback(self, args.ema_decay) if args.ema_decay is not None else None
        if self._ema is not None:
            self.add_callback(self._ema)

    @property
    def ema_weights(self) -> dict[str, torch.Tensor] | None:
        """The exponential moving average of the parameters by name (``None`` without ``ema_decay`` or before the
        first optimizer step)."""
        return None if self._ema is None else self._ema.weights()

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, ignore_keys_for_eval=None):
        """[`~transformers.Trainer.train`]; with ``ema_decay``, a resumed run also restores the checkpoint's
        ``ema.safetensors``, and a checkpoint without one is refused (``ValueError``) before anything loads."""
        if self._ema is not None and resume_from_checkpoint not in (None, False):
            folder = resume_from_checkpoint
            if folder is True:  # the newest checkpoint, as the Trainer finds it (it raises if there is none)
                folder = get_last_checkpoint(self.args.output_dir) if os.path.isdir(self.args.output_dir) else None
            if folder is not None and not os.path.isfile(os.path.join(folder, EMA_WEIGHTS_NAME)):
                raise ValueError(
                    f"EqRTrainer: ema_decay is set but the checkpoint {folder} has no {EMA_WEIGHTS_NAME} (it was "
                    "saved without an EMA, or the file was removed); resuming would restart the average from its "
                    "weights. Resume without ema_decay, or load the model from the checkpoint (from_pretrained) and "
                    "start a new run to average from there."
                )
            self._ema.resume_from = folder
        try:
            return super().train(resume_from_checkpoint, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval)
        finally:
            if self._ema is not None:
                self._ema.resume_from = None

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """[`~transformers.Trainer.save_model`]; during training with ``ema_decay`` (the Trainer calls it for
        every ``checkpoint-N`` folder), the process that saves also writes the average there as ``ema.safetensors``,
        before the Trainer pushes the checkpoint anywhere. After training the average is in the weights."""
        if self._ema is not None and self._ema.training and self.args.should_save:
            self._ema.save(output_dir if output_dir is not None else self.args.output_dir)
        super().save_model(output_dir, _internal_call=_internal_call)

    def own_optimizer_setting(self) -> str | None:
        """``eqr_optimizer="adam_atan2"``: [`~equilibria.trainers.optimizers.AdamAtan2`] over every parameter."""
        choice = self.args.eqr_optimizer
        return None if choice == "trainer" else f"eqr_optimizer={choice!r}"

    def build_own_optimizer(self, model) -> torch.optim.Optimizer:
        args: EqRTrainingArguments = self.args
        params = [p for p in model.parameters() if p.requires_grad]
        return AdamAtan2(
            params, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2), weight_decay=args.weight_decay
        )

    def _segment_loops(self) -> int:
        return self.args.segment_loops or self.core.config.num_loops

    def model_inputs(self, model, inputs: dict, training: bool) -> dict:
        """Evaluation: a fresh trajectory of ``eval_num_loops`` (default: every segment's). Training: the segment to
        supervise, for the rows in flight (the batch's puzzles refill the rows that halted): from the carried state
        (online, fresh rows from a new start), from a new start (offline), or from where a rollout without gradient
        of all but the last segment ends (offline_terminal)."""
        args: EqRTrainingArguments = self.args
        loops = self._segment_loops()
        if not training:
            return {
                "inputs": inputs["inputs"],
                "labels": inputs.get("labels"),
                "num_loops": args.eval_num_loops or loops * args.max_segments,
            }
        carry = self._carry
        if carry is None or carry.batch["inputs"].shape != inputs["inputs"].shape:
            carry = self._carry = _Carry(inputs)
        else:
            carry.refill(inputs)
        core = self.core
        batch, seq_len = carry.batch["inputs"].shape
        start = core.initial_state(batch, seq_len, random_init=args.random_init, dtype=core.embed_tokens.weight.dtype)
        extra = {"noise": args.train_noise} if args.train_noise is not None else {}
        run = dict(inputs=carry.batch["inputs"], attention_mask=carry.batch.get("attention_mask"), **extra)
        state = start
        if args.supervision == "online" and carry.state is not None:
            state = torch.where(carry.fresh[:, None, None], start, carry.state)
        elif args.supervision == "offline_terminal" and args.max_segments > 1:
            with torch.no_grad():
                state = model(**run, state=start, num_loops=loops * (args.max_segments - 1)).state.detach()
        if args.grad_loops is not None and args.grad_loops < loops:  # the segment's first iterations: no gradient
            with torch.no_grad():
                state = model(**run, state=state, num_loops=loops - args.grad_loops).state.detach()
            loops = args.grad_loops
        return {**run, "labels": carry.batch["labels"], "state": state, "num_loops": loops}

    def objective(self) -> str:
        weight = getattr(self.core.config, "halt_loss_weight", 0)
        each = f"lm_loss + {weight:g} x halt_loss" if weight else "lm_loss"
        return f"the mean over segments of {each}" if self.args.supervision == "offline" else each

    def add_terms(self, model, lm_loss, outputs, batch: dict, scale: TermScale):
        """EqR's loss is the supervised segments' (a per-micro-batch mean, as the model's ``accepts_loss_kwargs =
        False`` tells the Trainer, which divides it for accumulation): under "offline" every segment of the fresh
        trajectory, each from the previous one's detached end (one optimizer step for the whole trajectory, so later
        segments start from states the pre-update weights produced), the loss being their mean. Then the (last)
        segment's metrics, and the rows to replace."""
        args: EqRTrainingArguments = self.args
        loss = lm_loss
        if args.supervision == "offline":
            losses = [lm_loss]
            for _ in range(args.max_segments - 1):
                segment, outputs = self.lm_loss(model, {**batch, "state": outputs.state.detach()})
                losses.append(segment.mean())
            loss = torch.stack(losses).mean()
        with torch.no_grad():
            return loss, self._record(self._carry, outputs)

    def _record(self, carry: _Carry, outputs) -> dict[str, torch.Tensor]:
        """The (last) segment's metrics; marks the rows to replace (every row under offline supervision)."""
        args: EqRTrainingArguments = self.args
        labels = carry.batch["labels"]
        valid = labels != -100
        right = (outputs.logits.argmax(-1) == labels) & valid
        exact = (right | ~valid).all(dim=1)
        carry.segments += 1 if args.supervision == "online" else args.max_segments
        done = carry.segments >= args.max_segments
        if args.halt_on_head and outputs.halt_logits is not None:
            done |= outputs.halt_logits[:, -1] > 0
        if args.halt_exploration > 0:  # some rows must first run a least number of segments, drawn afresh
            n, device = done.shape[0], done.device
            least = torch.randint(2, args.max_segments + 1, (n,), device=device)
            least = torch.where(torch.rand(n, device=device) < args.halt_exploration, least, 0)
            done &= carry.segments >= least
        carry.state = outputs.state.detach()
        zero = torch.zeros((), device=labels.device)
        carry.done = done
        return {
            "lm_loss": outputs.lm_loss,
            "halt_loss": outputs.halt_loss if outputs.halt_loss is not None else zero,
            "cell_accuracy": right.sum() / valid.sum().clamp_min(1),
            "exact_accuracy": exact.float().mean(),
            "residual": outputs.residuals[:, -1].mean(),
            "halted_rate": done.float().mean(),
            "halted_segments": carry.segments[done].float().sum(),
        }

    def logged_means(self, means: dict[str, float]) -> dict[str, float]:
        """The means, with ``segments_at_halt`` (segments per replaced row) derived from the step's sums."""
        means = super().logged_means(means)
        if means:
            halted_rows = means["halted_rate"] * self._carry.done.numel()  # mean rows replaced per step
            halted_segments = means.pop("halted_segments")
            means["segments_at_halt"] = round(halted_segments / halted_rows, 6) if halted_rows > 0 else 0.0
        return means
