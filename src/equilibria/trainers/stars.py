"""STARS fine-tuning (Yang et al., 2026, "Stabilizing Recurrent Dynamics for Test-Time Scalable Latent Reasoning
in Looped Language Models"): random loop-count sampling plus a Jacobian spectral-radius regulariser (JSRR), so
that a looped model keeps working when run with more loops than it was trained with.

    from equilibria.trainers import StarsTrainer, StarsTrainingArguments

    args = StarsTrainingArguments(output_dir="out", min_loops=1, max_loops=8, jsrr_weight=0.1)
    StarsTrainer(model=model, args=args, train_dataset=train).train()

Multi-GPU: put the same script behind ``accelerate launch`` or ``torchrun`` (see the README).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
from dataclasses import dataclass, field, fields
from typing import Annotated

import torch
from torch import nn
from transformers import TrainingArguments
from transformers.utils import logging

from ..families import ServesFamiliesWith, families_with, family_record
from ..modeling.regularization import JSRR_ESTIMATORS, JSRR_PROBES, JSRROptions
from .common import LoopTrainer, TermScale, find_core
from .stars_presets import STARS_OPTIONS, STARS_PRESETS, preset_values
from .training_args import FILLED_IN, Interval, LoopTrainingArguments, OneOf, preset_recipe, same_value

logger = logging.get_logger(__name__)

JSRR_PENALTIES = ("square", "hinge")
LOOP_DRAWS = ("per_step", "per_micro_batch")
JSRR_STATES = ("final", "random_step")
STARS_LOG_KEYS = ("num_loops", "spectral_radius", "lm_loss", "jsrr_penalty", "exit_entropy")


@dataclass
class StarsTrainingArguments(LoopTrainingArguments):
    """[`~transformers.TrainingArguments`] plus the STARS options.

    Presets: ``stars_preset`` sets every STARS option left unset (``None``) to a recipe's value:
    ``"reference_addition"`` and ``"reference_ouro"`` (the STARS reference code's two experiments) or
    ``"equilibria"`` (the recipe of this package's earlier STARS numbers); an option given explicitly overrides it.
    :meth:`from_preset` also applies the recipe's optimiser, schedule, length and batch; :meth:`recipe` names the
    preset and the overrides (the training record and the card show it). Without a preset, unset options take the
    defaults listed in ``trainers/stars_presets.py`` (``DEFAULTS``). ``docs/stars.md`` has the presets' table.

    Loop sampling: ``num_loops = clip(round(exp(N(loop_log_mean, loop_log_std^2))), min_loops, max_loops)``, drawn
    once per optimizer step (``loop_draws="per_step"``; the generator is seeded by ``(seed, global step)``) or once
    per micro-batch (``"per_micro_batch"``, as the reference code draws per forward; seeded by ``(seed, global
    step, micro-batch index)``), so that all processes of a multi-process run (and a resumed run) use the same count
    at the same step.

    JSRR: at the sampled count ``T``, the spectral radius ``rho`` of the Jacobian of one loop step ``h -> f(h)`` at
    the final state ``h_T`` (detached) is estimated by ``jsrr_power_iters`` power iterations of vector-Jacobian
    products (``jsrr_estimator="vjp"``) or of Jacobian-vector products in forward mode (``"jvp"``, the paper's).
    ``jsrr_probe="sequence"``: each sequence's start vector is drawn from ``(seed, step, its tokens)`` and
    normalised on its own, so the estimate does not depend on how a batch is split into micro-batches or
    processes, and the penalty is a mean over sequences. ``"batch"`` (the reference code's): the micro-batch's
    start vectors are normalised together over the whole state tensor, ``rho`` is that of the micro-batch's
    block-diagonal Jacobian and the penalty is one number per micro-batch. The loss is ``(1 - jsrr_weight) * LM +
    jsrr_weight * penalty`` with ``penalty = rho^2`` (``"square"``) or ``max(0, rho - jsrr_target)^2``
    (``"hinge"``). ``jsrr_sample_fraction < 1`` computes the penalty on that fraction of the sequences only
    (chosen from each sequence's tokens and the step; the sum over them is divided by the expected count, an
    unbiased estimate of the full mean at a fraction of its cost; ``benchmarks/bench_stars_cost.py``).
    ``jsrr_state="random_step"`` linearises at the state after a step drawn uniformly from ``1 .. T`` (keyed by
    ``(seed, step, micro-batch)``) instead of at ``h_T``.
    """

    stars_preset: Annotated[str | None, OneOf(STARS_PRESETS)] = field(
        default=None,
        metadata={"help": f"A STARS recipe, one of {STARS_PRESETS}: sets every STARS option not given explicitly."},
    )
    min_loops: Annotated[int | None, Interval(min=1), FILLED_IN] = field(
        default=None, metadata={"help": "Fewest loop steps sampled per draw (>= 1; default 1 or the preset's)."}
    )
    max_loops: Annotated[int | None, Interval(min=1), FILLED_IN] = field(
        default=None, metadata={"help": "Most loop steps sampled per draw (>= min_loops; default 16 or the preset's)."}
    )
    loop_log_mean: Annotated[float | None, FILLED_IN] = field(
        default=None, metadata={"help": "Mean of log(num_loops) of the log-normal loop sampler (default 1.7)."}
    )
    loop_log_std: Annotated[float | None, Interval(min=0), FILLED_IN] = field(
        default=None,
        metadata={"help": "Std of log(num_loops) (default 0.4); 0 trains always at round(exp(loop_log_mean))."},
    )
    loop_draws: Annotated[str | None, OneOf(LOOP_DRAWS), FILLED_IN] = field(
        default=None,
        metadata={"help": "'per_step' (one loop count per optimizer step, the default) or 'per_micro_batch'."},
    )
    jsrr_weight: Annotated[float | None, Interval(min=0, max=1, exclude_max=True, symbol="lambda"), FILLED_IN] = field(
        default=None,
        metadata={"help": "lambda in [0, 1): loss = (1 - lambda) * LM + lambda * penalty (default 0.1); 0: off."},
    )
    jsrr_power_iters: Annotated[int | None, Interval(min=1), FILLED_IN] = field(
        default=None, metadata={"help": "Power iterations per spectral-radius estimate (>= 1; default 4)."}
    )
    jsrr_estimator: Annotated[str | None, OneOf(JSRR_ESTIMATORS), FILLED_IN] = field(
        default=None,
        metadata={"help": "'vjp' (vector-Jacobian products, the default) or 'jvp' (forward mode, the paper's)."},
    )
    jsrr_probe: Annotated[str | None, OneOf(JSRR_PROBES), FILLED_IN] = field(
        default=None,
        metadata={
            "help": "'sequence' (a start vector per sequence, the default) or 'batch' (one normalised over the "
            "micro-batch's state tensor, the reference code's)."
        },
    )
    jsrr_penalty: Annotated[str | None, OneOf(JSRR_PENALTIES), FILLED_IN] = field(
        default=None, metadata={"help": "'square' (rho^2, the default) or 'hinge' (max(0, rho - target)^2)."}
    )
    jsrr_target: Annotated[float | None, Interval(min=0, exclude_min=True), FILLED_IN] = field(
        default=None, metadata={"help": "The hinge penalty's target radius (> 0; default 1.0)."}
    )
    jsrr_warmup_steps: Annotated[int | None, Interval(min=0), FILLED_IN] = field(
        default=None,
        metadata={"help": "Optimizer steps trained on the LM loss alone before the penalty starts (default 0)."},
    )
    jsrr_sample_fraction: Annotated[float | None, Interval(min=0, max=1, exclude_min=True), FILLED_IN] = field(
        default=None,
        metadata={"help": "Fraction of the sequences the penalty is computed on, in (0, 1] (default 1)."},
    )
    jsrr_state: Annotated[str | None, OneOf(JSRR_STATES), FILLED_IN] = field(
        default=None,
        metadata={
            "help": "Where the penalty linearises the loop: 'final' (the state after the sampled count, the reference "
            "code's and the default) or 'random_step' (after a step drawn uniformly from 1 .. the count, per "
            "micro-batch: our reading of the paper's 'an iteration inside the loop')."
        },
    )
    eval_num_loops: Annotated[int | None, Interval(min=1)] = field(
        default=None, metadata={"help": "Loop steps for evaluation losses (default: the model config's)."}
    )

    def __post_init__(self):
        values = preset_values(self.stars_preset, "stars") if self.stars_preset in (None, *STARS_PRESETS) else {}
        defaults = preset_values(None, "stars")
        for option in STARS_OPTIONS:
            if getattr(self, option) is None:
                setattr(self, option, values.get(option, defaults[option]))
        super().__post_init__()
        if self.stars_preset is not None:
            warn_training_part_not_applied(self)

    def validate_arguments(self) -> None:
        super().validate_arguments()
        if self.min_loops > self.max_loops:
            raise ValueError(
                f"StarsTrainingArguments: min_loops ({self.min_loops}) must be <= max_loops ({self.max_loops})"
            )

    preset_option = "stars_preset"  # the option naming a recipe whose training part a command line applies
    preset_options = STARS_OPTIONS  # the options a preset fills in where they are unset (a command line leaves them)

    @classmethod
    def preset_training_defaults(cls, name: str) -> dict:
        """The recipe ``name``'s optimiser, schedule, length and batch (``TrainingArguments`` options), which
        ``equilibria train --stars_preset NAME`` makes the defaults of its flags."""
        return preset_values(name, "training")

    @classmethod
    def from_preset(cls, stars_preset: str, **overrides) -> StarsTrainingArguments:
        """Arguments with every choice of the recipe ``stars_preset`` (its STARS options and its optimiser,
        schedule, length and batch), the keyword arguments overriding any of them."""
        return cls(stars_preset=stars_preset, **{**cls.preset_training_defaults(stars_preset), **overrides})

    def recipe(self) -> dict:
        """``{"preset": name or None, "overrides": {option: value}}``: the preset and every option of it (or, without
        one, every STARS default) that these arguments change."""
        wanted = {**preset_values(self.stars_preset, "stars"), **preset_values(self.stars_preset, "training")}
        return preset_recipe(self, self.stars_preset, wanted)


def warn_training_part_not_applied(args: StarsTrainingArguments) -> None:
    """A warning when none of a preset's optimiser/schedule options (of those whose value is not also
    ``TrainingArguments``' default) has the preset's value: the preset set only its
    STARS options (``StarsTrainingArguments(stars_preset=...)``), not ``from_preset`` or the command line. It names
    those left at ``TrainingArguments``' defaults."""
    defaults = {f.name: f.default for f in fields(TrainingArguments)}
    training = preset_values(args.stars_preset, "training")
    telling = {k: v for k, v in training.items() if k not in defaults or not same_value(defaults[k], v)}
    if any(same_value(getattr(args, k), v) for k, v in telling.items()):  # the training part was applied
        return
    left = [
        f"{k}={getattr(getattr(args, k), 'value', getattr(args, k))!r} (the preset's {v!r})"
        for k, v in training.items()
        if k in defaults and not same_value(getattr(args, k), v) and same_value(getattr(args, k), defaults[k])
    ]
    if left:
        logger.warning(
            f"StarsTrainingArguments: stars_preset={args.stars_preset!r} set its STARS options, but these keep "
            f"TrainingArguments' defaults: {', '.join(left)}. StarsTrainingArguments.from_preset(...) (or `equilibria "
            "train --stars_preset ...`) applies the whole recipe; pass them to silence this."
        )


def sample_num_loops(
    step: int,
    seed: int,
    log_mean: float,
    log_std: float,
    min_loops: int,
    max_loops: int,
    micro_batch: int | None = None,
) -> int:
    """The loop count of training step ``step`` (and, for per-micro-batch draws, of its micro-batch
    ``micro_batch``): a log-normal draw rounded and clipped to ``[min, max]``, deterministic in ``(seed, step,
    micro_batch)``."""
    key = f"stars-{seed}-{step}" if micro_batch is None else f"stars-{seed}-{step}-{micro_batch}"
    value = math.exp(log_mean) if log_std == 0 else random.Random(key).lognormvariate(log_mean, log_std)
    return int(min(max_loops, max(min_loops, round(value))))


def _sequence_generators(inputs: dict, key: str):
    """``(row, real positions, generator)`` per sequence of the batch, each generator seeded by ``key`` and the
    sequence's own real tokens (``input_ids`` where ``attention_mask`` is 1; ``inputs_embeds`` when there are no
    ids), so that a sequence gets the same draws whichever micro-batch or process it lands in."""
    rows = inputs.get("input_ids")
    rows = inputs["inputs_embeds"] if rows is None else rows
    mask = inputs.get("attention_mask")
    seq_len = rows.shape[1]
    for b in range(rows.shape[0]):
        real = torch.ones(seq_len, dtype=torch.bool) if mask is None else mask[b].bool().cpu()
        tokens = rows[b].detach().cpu()[real]
        digest = hashlib.blake2b(key.encode(), digest_size=8)
        digest.update(
            tokens.float().numpy().tobytes() if tokens.is_floating_point() else tokens.long().numpy().tobytes()
        )
        yield b, real, torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") % (2**63))


def row_probes(inputs: dict, width: int, seed: int, step: int) -> torch.Tensor:
    """Power-iteration start vectors of the loop state's shape ``(batch, seq_len, width)`` (float32, on the inputs'
    device), one per sequence, drawn from ``(seed, step)`` and the sequence's own real tokens, placed at its real
    positions and zero at padding."""
    rows = inputs.get("input_ids")
    rows = inputs["inputs_embeds"] if rows is None else rows
    probes = torch.zeros((*rows.shape[:2], width), dtype=torch.float32)
    for b, real, generator in _sequence_generators(inputs, f"jsrr-{seed}-{step}"):
        probes[b, real] = torch.randn((int(real.sum()), width), generator=generator)
    return probes.to(device=rows.device)


def penalty_rows(inputs: dict, fraction: float, seed: int, step: int) -> torch.Tensor | None:
    """The batch rows the penalty is computed on at this step: each sequence independently with probability
    ``fraction``, decided by ``(seed, step)`` and its tokens (so the same whatever the micro-batch or process);
    ``None`` (every row) for a fraction of 1."""
    if fraction >= 1.0:
        return None
    picked = [
        b
        for b, _, g in _sequence_generators(inputs, f"jsrr-rows-{seed}-{step}")
        if torch.rand((), generator=g) < fraction
    ]
    device = next(v.device for v in inputs.values() if isinstance(v, torch.Tensor))
    return torch.tensor(picked, dtype=torch.long, device=device)


def find_looped_core(model: nn.Module) -> nn.Module | None:
    """The base model of a looped model StarsTrainer drives (``OuroModel``, or the base model of a transformers looped
    LM) inside ``model`` and any wrapper around it (PEFT, DDP), or ``None``."""
    return find_core(model, StarsTrainer.model_types)


def _math_attention():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def exit_entropy(outputs, labels: torch.Tensor | None) -> torch.Tensor:
    """The mean entropy (nats) of the exit distribution over the loop steps at the positions the loss reads (those
    whose next label is not -100; every position without labels): the term Ouro's ``exit_loss="expected"``
    rewards."""
    probs = outputs.exit_probs.detach().float()
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
    if labels is None:
        return entropy.mean()
    valid = (labels[:, 1:] != -100).to(entropy.device)
    return (entropy[:, :-1] * valid).sum() / valid.sum().clamp_min(1)


class _LoopedModels:
    """``StarsTrainer.model_description``, read when an error needs it: the head classes of the families it serves."""

    def __get__(self, instance, owner) -> str:
        heads = [family_record(t).heads[0].model_class.__name__ for t in families_with("sampled_loops")]
        return f"a looped model whose forward takes a loop count per call: {', '.join(heads)}, also inside PEFT"


class StarsTrainer(LoopTrainer):
    """[`~transformers.Trainer`] with STARS' random loop sampling and Jacobian spectral-radius regularisation.

    The model must be a looped model whose ``forward`` takes ``num_loops`` and that contains an Ouro base model
    (``OuroForCausalLM``, also wrapped by PEFT), or a looped LM that transformers ships (Dory, HRM-text,
    Inkling2-loop), which it gives :func:`~equilibria.looped` (the penalty is then computed in that forward, on the
    loop map of its protocol in :mod:`equilibria.loops`). Logged next to the loss (so the progress bar,
    TensorBoard and W&B show them): ``num_loops`` (mean sampled count), ``spectral_radius``, ``lm_loss`` and
    ``jsrr_penalty`` (means over the logging interval and the processes).

    Gradient accumulation, multi-process runs (DDP, the penalty's gradients are all-reduced with the LM
    loss's), PEFT, checkpoint resume and gradient checkpointing work (with the penalty on, torch's non-reentrant
    checkpoint, transformers' default, is used, and SDPA runs its math kernel; ``use_reentrant=True`` cannot take
    the penalty's double backward and is refused).
    """

    model_types = ServesFamiliesWith("sampled_loops")  # read when used: a family registered later is served
    arguments_class = StarsTrainingArguments
    model_description = _LoopedModels()
    log_keys = STARS_LOG_KEYS
    weighted_log_keys = {"spectral_radius": "jsrr_weight", "jsrr_penalty": "jsrr_weight"}

    def __init__(self, model=None, args: StarsTrainingArguments | None = None, **kwargs):
        if getattr(getattr(model, "config", None), "model_type", None) in self.model_types:
            family = family_record(model)
            family.protocol.prepare(model)  # num_loops per call (transformers' looped LMs: looped())
            if isinstance(args, StarsTrainingArguments) and args.jsrr_weight > 0:
                family.require("stars_penalty", "StarsTrainer with jsrr_weight > 0 (set it 0 to train without)")
        if isinstance(args, StarsTrainingArguments) and args.gradient_checkpointing and args.jsrr_weight > 0:
            given = dict(args.gradient_checkpointing_kwargs or {})
            if given.get("use_reentrant") is True:
                raise ValueError(
                    "StarsTrainer: gradient_checkpointing_kwargs={'use_reentrant': True} cannot differentiate the JSRR "
                    "penalty (jsrr_weight > 0; it takes a double backward through the checkpointed layers): leave "
                    "use_reentrant out or set it False (torch's non-reentrant checkpoint)."
                )
            args.gradient_checkpointing_kwargs = {**given, "use_reentrant": False}  # whatever the release's default
        super().__init__(model=model, args=args, **kwargs)
        if self.args.jsrr_probe == "batch" and self.args.n_gpu > 1:
            raise ValueError(
                "StarsTrainer: jsrr_probe='batch' normalises over a process's whole micro-batch, which nn.DataParallel "
                f"splits across its {self.args.n_gpu} GPUs; run one process per GPU (torchrun / accelerate launch)."
            )
        self._micro_batches = (-1, -1)  # (optimizer step, index of its last training micro-batch)
        # the penalty's double backward recomputes checkpointed layers inside a grad-of-grad, where SDPA picks
        # another kernel than in the forward (whose saved tensors then do not match): one kernel for both
        checkpointed = self.args.gradient_checkpointing and self.args.jsrr_weight > 0
        self._attention_kernel = _math_attention if checkpointed else contextlib.nullcontext
        exit_loss = getattr(self.core.config, "exit_loss", "final")
        if exit_loss != "final" and self.args.max_loops > self.args.min_loops:
            logger.warning(
                f"StarsTrainer: the model's exit_loss is {exit_loss!r}; with it the exit gate learns to exit early and "
                "the deeper sampled steps go almost untrained (the README's demo: 95.5% -> 27.0% at 8 loops). For "
                "STARS set config.exit_loss='final' before building the model (`--exit_loss final`)."
            )

    def double_backward_option(self, args) -> str | None:
        return "the JSRR penalty (jsrr_weight > 0)" if args.jsrr_weight > 0 else None

    def objective(self) -> str:
        weight = self.args.jsrr_weight
        lm = "lm_loss"
        if self._entropy_weight() is not None:  # Ouro's exit_loss="expected": the gate's entropy bonus is in it
            lm = f"lm_loss (the gate-weighted cross-entropy - {self._entropy_weight():g} x exit_entropy)"
        if weight == 0:
            return lm
        warmup = self.args.jsrr_warmup_steps
        after = f" from step {warmup} (lm_loss before)" if warmup else ""
        return f"{1 - weight:g} x {lm} + {weight:g} x jsrr_penalty{after}"

    def _entropy_weight(self) -> float | None:
        """The weight of the exit distribution's entropy inside the model's loss (Ouro's ``exit_loss="expected"``:
        ``sum_t p_t CE_t - w H(p)``), else ``None``."""
        config = self.core.config
        return config.exit_entropy_weight if getattr(config, "exit_loss", None) == "expected" else None

    def logged_means(self, means: dict[str, float]) -> dict[str, float]:
        means = super().logged_means(means)
        return means if self._entropy_weight() is not None else {k: v for k, v in means.items() if k != "exit_entropy"}

    @property
    def state_width(self) -> int:
        """The width of the loop state per position (the hidden size; HRM-text's ``(z_H, z_L)``: twice it)."""
        return family_record(self.core).protocol.state_width(self.core.config)

    # -- the loss ---------------------------------------------------------------------------------------

    def current_num_loops(self, micro_batch: int | None = None) -> int:
        """The loop count for the current optimizer step, or for its micro-batch ``micro_batch`` with
        ``loop_draws="per_micro_batch"`` (the same on every process, and after a resume)."""
        a = self.args
        micro_batch = micro_batch if a.loop_draws == "per_micro_batch" else None
        return sample_num_loops(
            self.state.global_step, a.seed, a.loop_log_mean, a.loop_log_std, a.min_loops, a.max_loops, micro_batch
        )

    def training_step(self, *args, **kwargs):
        """[`Trainer.training_step`]; under gradient checkpointing with the penalty on, with SDPA's math kernel
        (the forward and its recomputation in the double backward must run the same kernel)."""
        with self._attention_kernel():
            return super().training_step(*args, **kwargs)

    def next_micro_batch(self) -> int:
        """The index of the training micro-batch about to run within the current optimizer step (0, 1, ...). Every
        process counts its own micro-batches in the same order; a resumed run restarts at a step's first."""
        step = self.state.global_step
        index = self._micro_batches[1] + 1 if self._micro_batches[0] == step else 0
        self._micro_batches = (step, index)
        return index

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
        batch = {**inputs, "num_loops": self.current_num_loops(self.next_micro_batch()), "use_cache": False}
        if self.penalty_on():
            step, micro = self.state.global_step, self._micro_batches[1]
            batch["jsrr"] = JSRROptions(
                iters=args.jsrr_power_iters,
                estimator=args.jsrr_estimator,
                start=row_probes(inputs, self.state_width, args.seed, step),
                probe=args.jsrr_probe,
                rows=penalty_rows(inputs, args.jsrr_sample_fraction, args.seed, step),
                step=random.Random(f"jsrr-state-{args.seed}-{step}-{micro}").randint(1, batch["num_loops"])
                if args.jsrr_state == "random_step"
                else None,
            )
        return batch

    def penalty(self, rho: torch.Tensor, batch_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(penalty, logged radius)`` of the forward's estimates ``rho``. ``jsrr_probe="sequence"``: the sum of
        the sequences' penalties over the expected number of estimated rows (``jsrr_sample_fraction`` of the
        micro-batch's ``batch_rows``; the mean when every row is estimated). ``"batch"``: the penalty of the
        micro-batch's estimate ``||rho||`` (one number)."""
        args: StarsTrainingArguments = self.args
        if rho.numel() == 0:  # no row sampled in this micro-batch
            zero = rho.new_zeros(())
            return zero, zero
        radius = rho.norm().reshape(1) if args.jsrr_probe == "batch" else rho
        each = radius**2 if args.jsrr_penalty == "square" else torch.relu(radius - args.jsrr_target) ** 2
        if args.jsrr_probe == "batch":
            return each.sum(), radius.detach().sum()
        return each.sum() / (args.jsrr_sample_fraction * batch_rows), radius.detach().mean()

    def add_terms(self, model, lm_loss, outputs, batch: dict, scale: TermScale):
        """``(1 - lambda) * LM + lambda * penalty`` once the penalty is on (:meth:`penalty`), else the LM loss."""
        args: StarsTrainingArguments = self.args
        loss = lm_loss
        rho_mean = penalty = torch.zeros((), device=lm_loss.device, dtype=torch.float32)
        if self.penalty_on():
            rows = next(v for k, v in batch.items() if k in ("input_ids", "inputs_embeds") and v is not None)
            penalty, rho_mean = self.penalty(outputs.spectral_radius.float(), rows.shape[0])
            loss = (1.0 - args.jsrr_weight) * lm_loss + args.jsrr_weight * penalty * scale.per_batch
        metrics = {"num_loops": float(batch["num_loops"]), "spectral_radius": rho_mean, "jsrr_penalty": penalty}
        metrics["exit_entropy"] = (
            exit_entropy(outputs, batch.get("labels")) if self._entropy_weight() is not None else 0.0
        )
        return loss, {**metrics, "lm_loss": lm_loss * scale.report}  # the LM loss as a per-token mean
