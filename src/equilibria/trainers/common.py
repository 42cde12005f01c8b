"""Pieces the family trainers share: the base class (the skeleton of every family's loss: ``Trainer``'s own LM loss
plus the family's terms through one hook; the checks of a trainer's arguments and model; running means of its
metrics next to the loss), and the model card."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel, ProgressCallback, Trainer, TrainingArguments
from transformers.integrations import is_deepspeed_zero3_enabled

from ..families import Family, family_record
from .callbacks import SteadyProgressCallback


def find_core(model: nn.Module | None, model_types: tuple[str, ...]) -> nn.Module | None:
    """The family's base model (the first pretrained model whose config is of one of ``model_types`` and that holds
    no base model of its own, as a head does) inside ``model`` and any wrapper around it (PEFT, DDP), or ``None``.
    The same object stays inside wrappers added later. Works on classes loaded as remote code too (it reads the
    config, not the class)."""
    if model is None:
        return None
    for module in model.modules():
        if not isinstance(module, PreTrainedModel) or module.config.model_type not in model_types:
            continue
        if not isinstance(getattr(module, module.base_model_prefix, None), nn.Module):
            return module
    return None


@dataclass(frozen=True)
class TermScale:
    """Factors that put a family's extra loss terms on the scale of the LM loss ``Trainer.compute_loss`` returned
    (:meth:`LoopTrainer.term_scale` says when each differs from 1)."""

    per_batch: float = 1.0  # a per-micro-batch mean (a regulariser) times this
    like_lm: float = 1.0  # a term the model normalised like its LM loss (by ``num_items_in_batch``) times this
    report: float = 1.0  # the returned LM loss (or a ``like_lm`` term) times this: the per-token mean to log


class RunningMeans:
    """Sums of named scalar metrics over the micro-batches since the last log and over the whole run, kept on the
    device (no host sync per step); :meth:`pop` averages those since the last log, :meth:`run` those of the run,
    over the micro-batches and the processes."""

    def __init__(self, keys: tuple[str, ...]):
        self.keys = keys
        self._sums: torch.Tensor | None = None
        self._count = 0
        self._run_sums: torch.Tensor | None = None
        self._run_count = 0

    def add(self, values: dict[str, torch.Tensor | float], device: torch.device) -> None:
        row = torch.stack([torch.as_tensor(values[k], dtype=torch.float32, device=device).detach() for k in self.keys])
        self._sums = row if self._sums is None else self._sums + row
        self._run_sums = row.double() if self._run_sums is None else self._run_sums + row.double()
        self._count += 1
        self._run_count += 1

    def _mean(self, sums: torch.Tensor | None, count: int, accelerator) -> dict[str, float]:
        if count == 0:
            return {}
        values = (sums / count).double()
        if accelerator.num_processes > 1:
            values = accelerator.reduce(values, reduction="mean")
        return {k: round(v, 6) for k, v in zip(self.keys, values.tolist())}

    def pop(self, accelerator) -> dict[str, float]:
        """The means since the last call (``{}`` if nothing was added), averaged over the processes. Every rank
        logs at the same step, so the collective cannot hang."""
        means = self._mean(self._sums, self._count, accelerator)
        self._sums, self._count = None, 0
        return means

    def run(self, accelerator) -> dict[str, float]:
        """The means over every micro-batch of the run so far (of this trainer object), averaged over the
        processes."""
        return self._mean(self._run_sums, self._run_count, accelerator)


def finish_distributed() -> None:
    """Leave the process group cleanly at the end of a multi-process run (a no-op in a single process): a barrier,
    then ``destroy_process_group``. Exiting with a live gloo group can abort at interpreter shutdown ("terminate
    called without an active exception") when one rank tears down while another's background thread still runs."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class ModelCardMixin:
    """Mixed into a ``Trainer``: ``create_model_card`` (called by ``push_to_hub``, so also by
    ``TrainingArguments(push_to_hub=True)``) records the run in the output folder's training history and writes
    the family's card there (:func:`equilibria.hub_cards.publish.write_model_card`), beside the weights and the
    remote code; intermediate pushes (``hub_strategy="every_save"`` ...) carry the remote code and the card too.
    Set ``trainer.loop_scaling`` (``{loops: accuracy}`` or ``equilibria eval``'s JSON) and ``trainer.audit_report``
    before pushing and they go into the folder (``loop_scaling.json``, or ``eval_loop_scaling.json`` for ``equilibria
    eval``'s JSON; ``audit.json``) and the card."""

    loop_scaling: dict | None = None
    audit_report = None

    def create_model_card(
        self,
        language: str | None = None,
        license: str | None = None,
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        finetuned_from: str | None = None,
        tasks: str | list[str] | None = None,
        dataset_tags: str | list[str] | None = None,
        dataset: str | list[str] | None = None,
        dataset_args: str | list[str] | None = None,
        **card_kwargs,
    ) -> None:
        if not self.is_world_process_zero():
            return
        from ..hub_cards.publish import model_source, record_training_stage, write_model_card

        folder = Path(self.args.output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        model = self.accelerator.unwrap_model(self.model)
        self._write_results(folder)
        record_training_stage(folder, self, source=model_source(model))
        datasets = dataset_tags or dataset
        write_model_card(
            model,
            folder,
            repo_id=getattr(self, "hub_model_id", None) or self.args.hub_model_id,
            tags=[tags] if isinstance(tags, str) else tags,
            model_name=model_name,
            license=license or "apache-2.0",
            base_model=finetuned_from,
            datasets=[datasets] if isinstance(datasets, str) else datasets,
            language=language,
            **card_kwargs,
        )

    def _write_results(self, folder: Path) -> None:
        """``trainer.loop_scaling`` / ``trainer.audit_report`` as the folder's result files (the card reads them),
        recorded as computed on the weights the folder holds unless they say which."""
        from ..provenance import LOOP_SCALING_FILES, weights_fingerprint

        results = {}
        if self.loop_scaling is not None:
            scaling = self.loop_scaling
            payload = scaling if isinstance(scaling, dict) and "accuracy" in scaling else {"accuracy": scaling}
            results[LOOP_SCALING_FILES[payload.get("by", "equilibria train")]] = {
                **payload,
                "accuracy": {str(k): v for k, v in dict(payload["accuracy"]).items()},
            }
        if self.audit_report is not None:
            audit = self.audit_report.to_dict() if hasattr(self.audit_report, "to_dict") else dict(self.audit_report)
            results["audit.json"] = audit
        weights = weights_fingerprint(folder) if results else None
        for name, result in results.items():
            result = {**result, "weights": result.get("weights") or weights}
            (folder / name).write_text(json.dumps(result, indent=2) + "\n")

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """transformers copies only the weights and the config of a checkpoint into the folder it pushes: copy the
        remote code too (``config.json``'s ``auto_map`` needs it) and write the card, then push."""
        if self.is_world_process_zero():
            output_dir = Path(self.args.output_dir)
            for code in Path(checkpoint_folder).glob("*.py"):
                shutil.copy(code, output_dir / code.name)
            self.create_model_card()
        super()._push_from_checkpoint(checkpoint_folder)


class SteadyProgressMixin:
    """Mixed into a ``Trainer``: its training progress bar is :class:`~equilibria.trainers.callbacks.
    SteadyProgressCallback` (transformers' bar, with the ETA measured from the end of the first step) in place of
    transformers' ``ProgressCallback``; a notebook's bar or ``disable_tqdm`` are left as they are."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.pop_callback(ProgressCallback) is not None:  # the plain bar only: a notebook's is no ProgressCallback
            self.add_callback(SteadyProgressCallback())


@dataclass(frozen=True)
class Validation:
    """What a family trainer's ``evaluate`` measures during training in place of ``Trainer``'s loss on
    ``eval_dataset`` (``equilibria train`` sets it): ``score(model)``, the share of ``rows`` validation rows right
    (``what``: how they are scored, e.g. ``"exact match at 4 loops on 200 validation problems"``), reported as
    ``eval_accuracy``; training stops once it reaches ``target`` (``None``: it runs its length)."""

    score: Callable[[nn.Module], float]
    what: str
    target: float | None = None


class ValidationMixin:
    """Mixed into a ``Trainer``: with a :class:`Validation` (``validation=`` to the constructor), ``evaluate()``
    scores it on the model as it stands (``eval_accuracy``; ``Trainer``'s own ``eval_strategy``, ``eval_steps``,
    ``load_best_model_at_end`` and ``metric_for_best_model="accuracy"`` then keep the best checkpoint) and stops
    training at its target; :meth:`kept_checkpoint` says which step's weights the run ends with, and why."""

    def __init__(self, *args, validation: Validation | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.validation = validation

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        if self.validation is None or eval_dataset is not None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        model = self.accelerator.unwrap_model(self.model)
        training, start = model.training, time.perf_counter()
        try:
            value = float(self.validation.score(model.eval()))
        finally:
            model.train(training)
        metrics = {f"{metric_key_prefix}_accuracy": value, f"{metric_key_prefix}_runtime": time.perf_counter() - start}
        best = self.state.best_metric
        if best is not None and value == best and self.args.greater_is_better:  # of equal ones the later, trained
            self.state.best_metric = math.nextafter(best, -math.inf)  # longer, is kept (Trainer keeps the first)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        if self.validation.target is not None and value >= self.validation.target:
            self.control.should_training_stop = True
        return metrics

    def kept_checkpoint(self) -> dict | None:
        """Which step's weights the run ends with and why (``None`` without validation): the step, its validation
        accuracy, the evaluations (``[step, accuracy]``), what they measure, and whether the run stopped at its
        target or kept its best checkpoint (``load_best_model_at_end``) or its last step."""
        if self.validation is None:
            return None
        state, args = self.state, self.args
        evaluations = [[h["step"], round(h["eval_accuracy"], 6)] for h in state.log_history if "eval_accuracy" in h]
        if not evaluations:
            return None
        target = self.validation.target
        reached = [step for step, value in evaluations if target is not None and value >= target]
        stopped = bool(reached) and reached[0] == state.global_step < state.max_steps
        best = args.load_best_model_at_end and state.best_global_step
        step = state.best_global_step if best else state.global_step
        value = dict(evaluations).get(step)
        how = "best" if best else "last"
        return {
            "step": step,
            "accuracy": value,
            "how": how,
            "stopped_at_target": stopped,
            "target": target,
            "steps_run": state.global_step,
            "validation": self.validation.what,
            "every": evaluations[0][0],  # the first evaluation's step: eval_steps, or its share of the run
            "evaluations": evaluations,
        }


class EquilibriaTrainer(ValidationMixin, SteadyProgressMixin, ModelCardMixin, Trainer):
    """The plain ``Trainer`` with the family's model card (for models trained without an extra objective, such as
    the PH-DEQ)."""

    arguments_class = TrainingArguments


class LoopTrainer(ValidationMixin, SteadyProgressMixin, ModelCardMixin, Trainer):
    """Base of the family trainers. It checks that ``args`` is the trainer's ``arguments_class`` and that the model
    contains the family's base model (``core``: the same object inside any wrapper added later, PEFT or DDP),
    refuses options that clash with the loss computed here, and logs the running means of ``log_keys`` next to the
    loss (a key of ``weighted_log_keys`` only while the weight option it names is non-zero).

    The loss (:meth:`compute_loss`) is ``Trainer``'s own: its forward, token counts (``num_items_in_batch``) and
    scaling for gradient accumulation and data parallelism, on the batch with the family's forward keywords
    (:meth:`model_inputs`). In training the family then adds its terms, put on that loss's scale, and names the
    metrics to log (:meth:`add_terms`, the one hook for a new term)."""

    model_types: tuple[str, ...] = ()  # the families it drives: a subclass declares their model types
    arguments_class: type = TrainingArguments
    model_description = ""  # what the error says the model must be
    log_keys: tuple[str, ...] = ()
    weighted_log_keys: dict[str, str] = {}  # log key -> the weight option whose 0 leaves it out of the logs
    loss_is_scaled_for_ga = None  # Trainer's rule: the loss is scaled when the model normalised it by the token count

    @classmethod
    def families(cls) -> tuple[Family, ...]:
        """The records of the families whose base models the trainer drives: those it (or the trainer it derives
        from) declares in ``model_types``."""
        if not cls.model_types:
            raise ValueError(f"{cls.__name__} declares no family: set model_types = ('<its model_type>',)")
        return tuple(family_record(model_type) for model_type in cls.model_types)

    def __init__(self, model=None, args=None, **kwargs):
        name, wanted = type(self).__name__, self.arguments_class.__name__
        if not isinstance(args, self.arguments_class):
            raise ValueError(f"{name} needs {wanted} (args={wanted}(...)), got {type(args).__name__}.")
        core = find_core(model, tuple(f.model_type for f in self.families()))
        if core is None:
            raise ValueError(f"{name} needs {self.model_description}; got {type(model).__name__}.")
        if args.label_smoothing_factor > 0 or kwargs.get("compute_loss_func") is not None:
            raise ValueError(
                f"{name} computes its own loss: label_smoothing_factor and compute_loss_func are not supported."
            )
        attn = str(getattr(getattr(model, "config", None), "_attn_implementation", ""))
        penalty = self.double_backward_option(args)
        if penalty and attn.startswith("flash"):
            raise ValueError(
                f"{name}: {penalty} needs double backward through attention, which {attn} does not support; load the "
                "model with attn_implementation='sdpa' or 'eager', or turn it off."
            )
        if penalty and is_deepspeed_zero3_enabled():
            raise ValueError(
                f"{name}: {penalty} needs double backward through the loop's weights, which DeepSpeed ZeRO stage 3 "
                "frees after each forward (its backward fails on an empty weight); use ZeRO stage 1 or 2, or DDP, "
                "or turn the penalty off."
            )
        super().__init__(model=model, args=args, **kwargs)
        self.core = core
        self.means = RunningMeans(self.log_keys)

    def double_backward_option(self, args) -> str | None:
        """The name of an enabled option that differentiates through a gradient (a Jacobian penalty), if any."""
        return None

    def own_optimizer_setting(self) -> str | None:
        """The option by which the family builds its own optimizer (e.g. ``"attractor_optimizer='muon_adamw'"``),
        or None when the Trainer's is used. A family that has one also overrides :meth:`build_own_optimizer`."""
        return None

    def build_own_optimizer(self, model) -> torch.optim.Optimizer:
        raise NotImplementedError

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        """``Trainer``'s optimizer, or the family's own (:meth:`own_optimizer_setting`), refused (``ValueError``)
        where ``optim`` or ``optimizer_cls_and_kwargs`` asks for another one as well."""
        setting = self.own_optimizer_setting()
        if self.optimizer is not None or setting is None:
            return super().create_optimizer(model)
        default_optim = next(f.default for f in dataclasses.fields(TrainingArguments) if f.name == "optim")
        if str(getattr(self.args.optim, "value", self.args.optim)) != str(
            getattr(default_optim, "value", default_optim)
        ):
            raise ValueError(
                f"{setting} builds the optimizer itself; optim={self.args.optim!r} would be ignored: leave `optim` at "
                "its default or use the Trainer's optimizer."
            )
        if getattr(self, "optimizer_cls_and_kwargs", None) is not None:
            raise ValueError(
                f"{setting} builds the optimizer itself; the Trainer was also given `optimizer_cls_and_kwargs`: "
                "pass one or the other."
            )
        self.optimizer = self.build_own_optimizer(self.model if model is None else model)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """``Trainer``'s schedule, with ``num_decay_steps`` of a ``warmup_stable_decay`` schedule set from
        ``args.lr_decay_fraction`` and the run's length when the arguments give the fraction."""
        fraction = getattr(self.args, "lr_decay_fraction", None)
        if fraction is None or self.lr_scheduler is not None:
            return super().create_scheduler(num_training_steps, optimizer)
        given = self.args.lr_scheduler_kwargs
        kwargs = json.loads(given) if isinstance(given, str) else dict(given or {})
        # for this call only: the arguments (and the recipe recorded from them) keep what the user gave
        self.args.lr_scheduler_kwargs = {**kwargs, "num_decay_steps": max(1, round(fraction * num_training_steps))}
        try:
            return super().create_scheduler(num_training_steps, optimizer)
        finally:
            self.args.lr_scheduler_kwargs = given

    # -- the loss ---------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """``Trainer.compute_loss`` on the batch with the family's forward keywords: the model's loss, for
        evaluation as is; in training plus the family's terms, whose metrics go into the running means."""
        training = model.training and torch.is_grad_enabled()
        batch = self.model_inputs(model, inputs, training)
        loss, outputs = self.lm_loss(model, batch, num_items_in_batch)
        if training:
            loss, metrics = self.add_terms(model, loss.mean(), outputs, batch, self.term_scale(num_items_in_batch))
            if self.log_keys:
                self.means.add(metrics, loss.device)
        return (loss, outputs) if return_outputs else loss

    def lm_loss(self, model, batch: dict, num_items_in_batch=None) -> tuple[torch.Tensor, object]:
        """``(loss, outputs)`` of one forward on ``batch`` through ``Trainer.compute_loss`` (it passes
        ``num_items_in_batch`` to a model that takes it and scales the loss across processes); a vector under
        ``nn.DataParallel``."""
        return super().compute_loss(model, batch, return_outputs=True, num_items_in_batch=num_items_in_batch)

    def model_inputs(self, model, inputs: dict, training: bool) -> dict:
        """The keywords of the model's forward: the batch plus the family's options (a loop count, a solver's
        settings); ``training`` is False for evaluation and prediction."""
        return inputs

    def add_terms(self, model, lm_loss: torch.Tensor, outputs, batch: dict, scale: TermScale):
        """The family's hook, in training: ``(loss, metrics)``, the loss to backpropagate (``lm_loss``, the scalar
        ``Trainer.compute_loss`` returned, plus the family's terms, each multiplied by its factor of ``scale``) and
        the values of ``log_keys`` for this micro-batch. ``batch`` is what the forward got. Default: the LM loss."""
        return lm_loss, {}

    def term_scale(self, num_items_in_batch) -> TermScale:
        """How ``Trainer`` scaled the LM loss, for the terms added to it. When the model took ``num_items_in_batch``
        (Trainer's rule for ``loss_is_scaled_for_ga = None``), that loss is normalised over the labelled tokens of
        the whole accumulated batch of every process, ``training_step`` leaves it undivided and ``compute_loss``
        multiplied it by the data-parallel replicas when it averages tokens across devices (DDP then averages the
        gradients): a per-micro-batch mean is divided by the accumulation steps and a term normalised like the LM
        loss takes the replicas. Otherwise the LM loss is a micro-batch mean, ``training_step`` divides the whole
        loss by the accumulation steps and every factor is 1."""
        if not (self.model_accepts_loss_kwargs and num_items_in_batch is not None):
            return TermScale()
        accumulation, args = self.current_gradient_accumulation_steps, self.args
        replicas = 1
        if args.average_tokens_across_devices:  # the factor Trainer.compute_loss applies
            replicas = self.accelerator.num_processes // self.get_tp_size() if args.n_gpu <= 1 else args.n_gpu
        return TermScale(per_batch=1.0 / accumulation, like_lm=float(replicas), report=float(accumulation))

    # -- logging ----------------------------------------------------------------------------------------

    def logged_means(self, means: dict[str, float]) -> dict[str, float]:
        """The means to log: without the keys of a term whose weight is 0 (a subclass derives more)."""
        off = {key for key, weight in self.weighted_log_keys.items() if getattr(self.args, weight) == 0}
        return {key: value for key, value in means.items() if key not in off}

    def objective(self) -> str:
        """The training loss in terms of the logged parts (``train_loss`` is its mean over the run): a family with
        added terms says how they are weighted."""
        return "lm_loss"

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            logs.update(self.logged_means(self.means.pop(self.accelerator)))
        if "train_loss" in logs and self.log_keys:  # the run's summary: each part of the loss over the whole run
            parts = self.logged_means(self.means.run(self.accelerator))
            logs.update({f"train_{key}": value for key, value in parts.items()})
        super().log(logs, start_time)
