"""Pieces every model family of equilibria shares: strict loading, remote-code saving, and routing the loop
arguments (``num_loops`` ...) of ``generate`` to ``forward``.

This module travels to the Hub as remote code beside the families' modeling files: it imports only torch and
transformers.
"""

from __future__ import annotations

import inspect
import numbers
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import NamedTuple

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_utils import slice_logits_to_keep
from transformers.utils import can_return_tuple, logging
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import TransformersKwargs

logger = logging.get_logger(__name__)


class LoopMap(NamedTuple):
    """One step of a model's loop as a function of the state alone, for fixed inputs, with the state the loop
    starts from: ``f, z0 = model.loop_map(...)``. ``f(z)`` (or ``loop_map(z)``) applies one step; every family's
    base model returns one from ``loop_map``, and the solvers, the Jacobian regularisers, the trainers and the
    computation audit work on it (``solve(f, z0)``, ``autograd.grad(f(z), z, v)``, ``torch.func.jvp``)."""

    step: Callable[[torch.Tensor], torch.Tensor]
    start: torch.Tensor

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return self.step(z)


class StrictLoadingMixin:
    """Mixed into a family's ``PreTrainedModel``: ``from_pretrained`` refuses checkpoints that do not match the
    config, ``save_pretrained`` writes an ``auto_map`` so the folder loads with ``trust_remote_code=True``, and the
    class attributes every family shares are set here.

    Subclasses set ``_remote_auto_map`` (Auto class name -> ``"module.Class"``)."""

    _remote_auto_map: dict[str, str] = {}
    _head_weight_prefixes: tuple[str, ...] = ("lm_head.",)  # a head's weights, ignored when loading the base model
    base_model_prefix = "model"  # every family's heads hold the base model as `model`
    _auto_class = "AutoModel"  # a base model saves its own class in the auto_map; heads override

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """[`PreTrainedModel.from_pretrained`], but strict for the body: a checkpoint whose body weights are missing,
        unexpected or of the wrong shape raises ``ValueError`` naming them instead of leaving randomly initialised
        weights behind a warning. ``ignore_mismatched_sizes=True`` keeps transformers' lenient behaviour for shapes.
        As in transformers, a base-model checkpoint loads into a class with a head: the head's weights (the only
        ones missing) are newly initialised, named in transformers' load report, and listed in ``missing_keys`` of
        ``output_loading_info=True``; a head checkpoint loads into the base model, its head weights ignored."""
        want_info = kwargs.pop("output_loading_info", False)
        lenient_shapes = kwargs.pop("ignore_mismatched_sizes", False)
        # load leniently, then report every problem at once in one clear error
        try:
            model, info = super().from_pretrained(
                *args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
            )
        except SafetensorError as error:
            where = args[0] if args else kwargs.get("pretrained_model_name_or_path")
            raise ValueError(
                f"{cls.__name__}.from_pretrained: cannot read the weights {unreadable_weights(where) or where} "
                f"(truncated or not a safetensors file: {error}); save or download the checkpoint again."
            ) from None
        problems = []
        # a missing head is new, as in transformers (its load report names it); a missing body is refused
        missing = sorted(k for k in info.get("missing_keys", []) if not k.startswith(cls._head_weight_prefixes))
        unexpected = sorted(k for k in info.get("unexpected_keys", []) if not k.startswith(cls._head_weight_prefixes))
        mismatched = info.get("mismatched_keys", [])
        if missing:
            problems.append(f"missing weights (would be left randomly initialised): {missing[:12]}")
        if unexpected:
            problems.append(f"unexpected weights (not part of {cls.__name__}): {unexpected[:12]}")
        if mismatched and not lenient_shapes:
            shapes = [
                f"{key}: checkpoint {tuple(ckpt)} vs model {tuple(ours)}" for key, ckpt, ours in list(mismatched)[:12]
            ]
            problems.append(f"weights of the wrong shape: {shapes}")
        if problems:
            raise ValueError(
                f"{cls.__name__}.from_pretrained: the checkpoint does not match the config: " + "; ".join(problems)
            )
        return (model, info) if want_info else model

    def save_pretrained(self, save_directory, *args, **kwargs):
        """[`PreTrainedModel.save_pretrained`], writing the remote code and an ``auto_map`` for the family's Auto
        classes, so the folder loads with ``trust_remote_code=True`` where ``equilibria`` is not installed."""
        self.config.auto_map = dict(self._remote_auto_map)
        return super().save_pretrained(save_directory, *args, **kwargs)

    def push_to_hub(self, repo_id: str, *, commit_message: str | None = None, **kwargs):
        """[`PushToHubMixin.push_to_hub`], publishing the model card an installed ``equilibria`` writes (found
        through the ``equilibria.model_card`` entry point; the results of the folder the model was loaded from go
        along with it) instead of transformers' blank template. Without the package, transformers' behaviour."""
        writer = model_card_writer()
        if writer is None:
            return super().push_to_hub(repo_id, commit_message=commit_message, **kwargs)
        from huggingface_hub import HfApi

        api = HfApi(token=kwargs.get("token"))
        repo_id = api.create_repo(repo_id, private=kwargs.get("private"), exist_ok=True).repo_id
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder, max_shard_size=kwargs.get("max_shard_size") or "50GB")
            tags = kwargs.get("tags") or []
            tags = [tags] if isinstance(tags, str) else tags
            writer(self, folder, repo_id=repo_id, tags=list(dict.fromkeys([*(self.model_tags or []), *tags])))
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                commit_message=commit_message or "Upload model",
                commit_description=kwargs.get("commit_description"),
                revision=kwargs.get("revision"),
                create_pr=kwargs.get("create_pr", False),
            )


MODEL_CARD_ENTRY_POINT = "equilibria.model_card"


def model_card_writer() -> Callable | None:
    """The model-card writer ``write(model, folder, repo_id=..., tags=...)`` an installed package registers under the
    ``equilibria.model_card`` entry point, or ``None`` (this module imports nothing of the package itself)."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=MODEL_CARD_ENTRY_POINT):
        return entry.load()
    return None


def unreadable_weights(folder) -> list[str]:
    """The ``.safetensors`` files in a local ``folder`` that do not open (truncated or garbage)."""
    if folder is None or not os.path.isdir(folder):
        return []
    broken = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            path = os.path.join(folder, name)
            try:
                with safe_open(path, framework="pt") as handle:
                    for key in handle.keys():
                        handle.get_slice(key)
            except (SafetensorError, OSError):
                broken.append(path)
    return broken


class LoopGenerationMixin:
    """Mixed into a family's ``*ForCausalLM``: the head itself (``model``, the family's ``_base_model_class``, and
    ``lm_head``), its output (logits, loss and the loop's telemetry), and the loop arguments listed in
    ``_loop_generate_kwargs`` (each with a validator returning the cleaned value), which reach ``forward`` from
    ``generate``. A default saved in the generation config (``generation_config.num_loops``) is honoured and an
    explicit argument wins over it; without this, ``GenerationConfig.update`` would swallow the argument."""

    _auto_class = "AutoModelForCausalLM"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}
    _loop_generate_kwargs: dict[str, Callable] = {}
    _head_kwargs: tuple[str, ...] = ()  # forward keywords the head reads itself (also listed in the above)
    _generation_cache_class: type | None = None  # the dynamic cache generate should use instead of DynamicCache
    _base_model_class: type  # the family's base model, built as ``self.model``
    _output_class: type  # the family's causal-LM output

    def __init__(self, config):
        super().__init__(config)
        self.model = self._base_model_class(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        cache_class = self._generation_cache_class
        if cache_class is None:
            return super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        implementation = generation_config.cache_implementation
        if model_kwargs.get("cache") is None and implementation not in (None, "dynamic"):
            raise ValueError(
                f"{type(self).__name__} generates with its own {cache_class.__name__}; cache_implementation must be "
                f"None or 'dynamic', got {implementation!r}."
            )
        user_cache = model_kwargs.get("cache")
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        if user_cache is None and type(model_kwargs.get("cache")) is DynamicCache:
            model_kwargs["cache"] = cache_class()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save as usual; a loop default set on the generation config (``generation_config.num_loops = 8``) is
        kept in ``generation_config.json``. (A generation config derived from the model config is marked
        ``_from_model_config``, and transformers drops unknown keys when loading such a file.)"""
        generation_config = getattr(self, "generation_config", None)
        if generation_config is not None and any(
            getattr(generation_config, key, None) is not None for key in self._loop_generate_kwargs
        ):
            generation_config._from_model_config = False
        return super().save_pretrained(save_directory, *args, **kwargs)

    def lm_logits_and_loss(self, hidden, labels, loss_kwargs: dict, logits_to_keep: int | torch.Tensor = 0):
        """``(logits, loss)`` of ``lm_head`` on ``hidden`` (the kept positions), the loss the shifted cross-entropy
        with ``labels`` (``None`` without them)."""
        logits = self.lm_head(slice_logits_to_keep(hidden, logits_to_keep))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **loss_kwargs)
        return logits, loss

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        output_hidden_states: bool | None = None,
        **kwargs,
    ):
        r"""Language-model forward: the base model (``self.model``), then ``lm_head`` on the kept positions and,
        with ``labels``, the usual shifted cross-entropy (plus the family's own losses, see
        :meth:`extra_losses`). The loop arguments (``num_loops`` and the family's others, listed in its base
        model's ``forward``) pass through ``**kwargs``; the output is the family's ``_output_class``, carrying the
        base model's loop telemetry."""
        loss_kwargs = pop_loss_kwargs(kwargs)
        head_kwargs = {key: kwargs.pop(key) for key in self._head_kwargs if key in kwargs}
        step_states = self.needs_step_states(labels, head_kwargs)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=True if step_states else output_hidden_states,
            **kwargs,
        )
        logits, loss, extra = self.head_output(outputs, labels, loss_kwargs, logits_to_keep, head_kwargs)
        fields_ = shared_fields(outputs, self._output_class)
        if step_states and not (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        ):
            fields_["hidden_states"] = None  # asked for by the head only
        return self._output_class(loss=loss, logits=logits, **fields_, **extra)

    def needs_step_states(self, labels, head_kwargs: dict) -> bool:
        """Whether :meth:`head_output` reads the state of every loop step (``outputs.hidden_states``)."""
        return False

    def head_output(self, outputs, labels, loss_kwargs: dict, logits_to_keep, head_kwargs: dict):
        """``(logits, loss, extra outputs)`` from the base model's ``outputs``: by default ``lm_head`` on the last
        state, the shifted cross-entropy with ``labels``, and :meth:`extra_losses`. ``head_kwargs`` are the
        keywords listed in ``_head_kwargs`` (read by the head, not the base model)."""
        logits, loss = self.lm_logits_and_loss(outputs.last_hidden_state, labels, loss_kwargs, logits_to_keep)
        return logits, loss, self.extra_losses(outputs, labels, loss_kwargs)

    def extra_losses(self, outputs, labels, loss_kwargs: dict) -> dict:
        """Losses besides the LM loss that the family's head output carries (none by default)."""
        return {}

    def _validate_model_kwargs(self, model_kwargs: dict) -> None:
        # the loop arguments reach the base model through forward's **kwargs (generate checks names against
        # forward's signature, and would refuse them)
        super()._validate_model_kwargs({k: v for k, v in model_kwargs.items() if k not in self._loop_generate_kwargs})

    def _prepare_generation_config(self, generation_config, **kwargs):
        loop_kwargs = {k: kwargs.pop(k) for k in self._loop_generate_kwargs if k in kwargs}
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)
        for key, check in self._loop_generate_kwargs.items():
            value = loop_kwargs.get(key)
            if value is None:
                value = getattr(generation_config, key, None)
            if value is not None:
                model_kwargs[key] = check(value)
        return generation_config, model_kwargs


class TelemetryCache(DynamicCache):
    """A lazily growing [`~transformers.DynamicCache`] that also keeps per-position telemetry: for each name in
    ``telemetry_names`` an attribute holding a ``(batch, seq_len)`` tensor (or ``None`` before the first
    forward), extended by every forward and kept in step with the keys/values through beam reordering, batch
    expansion/selection and cropping."""

    telemetry_names: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        for name in self.telemetry_names:
            setattr(self, name, None)

    def record(self, name: str, values: torch.Tensor) -> None:
        """Append ``values`` (``(batch, new_positions)``) to the telemetry ``name``."""
        old = getattr(self, name)
        setattr(self, name, values if old is None else torch.cat([old, values.to(old.device)], dim=1))

    def _apply(self, fn) -> None:
        for name in self.telemetry_names:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, fn(value))

    def reset(self) -> None:
        super().reset()
        for name in self.telemetry_names:
            setattr(self, name, None)

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if tokens_to_remove < 0:
            self._apply(lambda t: t[:, :tokens_to_remove])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._apply(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._apply(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._apply(lambda t: t[indices])


class LMInputs(NamedTuple):
    """What a looped causal LM's forward works on after :meth:`CausalLoopMixin.prepare_lm_inputs`."""

    inputs_embeds: torch.Tensor
    cache: Cache | None
    position_ids: torch.Tensor
    output_hidden_states: bool
    output_attentions: bool


class CausalLoopMixin:
    """Mixed into a looped language model's base ``PreTrainedModel`` (one with ``embed_tokens``): the preamble of
    its ``forward``, shared by the families. Subclasses set ``_cache_class`` (the cache built when ``use_cache``
    is on and none is passed)."""

    _cache_class: type | None = None

    def prepare_lm_inputs(
        self, input_ids, inputs_embeds, cache, use_cache, position_ids, output_hidden_states, kwargs: dict
    ) -> LMInputs:
        """Check the inputs, embed ``input_ids``, decide on the cache (one passed in is always used; otherwise
        one is built unless training with gradients), and default ``position_ids`` to continue the cache."""
        name = type(self).__name__
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        attentions = kwargs.pop("output_attentions", None)
        attentions = bool(self.config.output_attentions if attentions is None else attentions)
        implementation = self.config._attn_implementation
        if attentions and implementation != "eager":  # as transformers' models do: warn, return no weights
            logger.warning_once(
                f"{name}: output_attentions=True needs the eager attention ({implementation!r} does not return the "
                "weights, so `attentions` is None); load the model with attn_implementation='eager' or call "
                "model.set_attn_implementation('eager')."
            )
            attentions = False
        check_keywords(self, kwargs)
        training_with_grad = self.training and torch.is_grad_enabled()
        if use_cache is None:
            use_cache = cache is not None or (self.config.use_cache and not training_with_grad)
        if use_cache and self.gradient_checkpointing and training_with_grad:
            logger.warning_once(f"{name}: the KV cache is incompatible with gradient checkpointing; running without.")
            use_cache = False
        if inputs_embeds is None:
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}.")
            inputs_embeds = self.embed_tokens(input_ids)
        cache = (cache if cache is not None else self._cache_class()) if use_cache else None
        past = cache.get_seq_length() if cache is not None else 0
        last = past + inputs_embeds.shape[1] - 1  # the last position, or a bound on it when positions are given
        if position_ids is None:
            position_ids = torch.arange(past, last + 1, device=inputs_embeds.device)[None]
        elif last >= getattr(self.config, "max_position_embeddings", last + 1) and not torch.compiler.is_compiling():
            last = int(position_ids.max())  # packed rows restart their positions: read them (a sync, only here)
        check_positions(self, last)
        hidden = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return LMInputs(inputs_embeds, cache, position_ids, bool(hidden), attentions)


def check_positions(model, last: int | None) -> None:
    """``ValueError`` when position ``last`` (counted from 0) is past the ``config.max_position_embeddings`` the
    model handles (the positions it was built and trained for: beyond them its outputs are not to be trusted)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and last is not None and last >= limit:
        raise ValueError(
            f"{type(model).__name__}: position {last} is past the {limit} positions the model handles "
            "(config.max_position_embeddings); shorten the input or generate fewer tokens"
        )


# keywords transformers' models take through **kwargs (attention kernels, the Trainer, PEFT, generate)
PASSED_THROUGH = frozenset(getattr(TransformersKwargs, "__annotations__", {})) | {"return_dict", "cache_position"}


def check_keywords(model, kwargs: dict) -> None:
    """Raise ``TypeError`` naming the keywords in ``kwargs`` (what ``model.forward`` got beyond its own arguments)
    that are not ones transformers passes through (a misspelt ``num_loop=8`` must not be silently ignored)."""
    unknown = sorted(set(kwargs) - PASSED_THROUGH)
    if unknown:
        own = [name for name in inspect.signature(type(model).forward).parameters if name not in ("self", "kwargs")]
        raise TypeError(
            f"{type(model).__name__}.forward() got unexpected keyword argument(s) {unknown}; it takes {own}, plus "
            f"the keywords transformers passes through ({sorted(PASSED_THROUGH)})."
        )


@contextmanager
def recording_attentions(modules: Iterable[nn.Module], enabled: bool) -> Iterator[list | None]:
    """While active, collect the attention weights (the second output) of every call of ``modules``, in call
    order, into the list it yields (``None`` when not ``enabled``: nothing is hooked)."""
    if not enabled:
        yield None
        return
    weights: list[torch.Tensor] = []
    handles = [module.register_forward_hook(lambda _m, _a, out: weights.append(out[1])) for module in modules]
    try:
        yield weights
    finally:
        for handle in handles:
            handle.remove()


def recorded_calls(fn: Callable, modules: Iterable[nn.Module], sink: list | None) -> Callable:
    """``fn`` wrapped so that each call leaves the attention weights of ``modules`` (see
    :func:`recording_attentions`) in ``sink``, replacing what it held; ``fn`` itself when ``sink`` is ``None``."""
    if sink is None:
        return fn

    def wrapped(*args, **kwargs):
        with recording_attentions(modules, True) as weights:
            out = fn(*args, **kwargs)
        sink[:] = weights
        return out

    return wrapped


LOSS_KWARGS = ("num_items_in_batch", "ignore_index", "shift_labels")


def pop_loss_kwargs(kwargs: dict) -> dict:
    """Remove and return the loss options the Trainer passes through ``forward``'s ``**kwargs``."""
    return {key: kwargs.pop(key) for key in LOSS_KWARGS if key in kwargs}


def shared_fields(source, target_class) -> dict:
    """The fields of the output dataclass ``target_class`` that ``source`` (another output) also has, with its
    values (``last_hidden_state`` excepted: a head reads it, it does not pass it on)."""
    have = {f.name for f in fields(source)}
    return {
        f.name: getattr(source, f.name)
        for f in fields(target_class)
        if f.name in have and f.name != "last_hidden_state"
    }


def as_int(value, name: str, minimum: int, meaning: str) -> int:
    """Return ``value`` as an int (a one-element integer tensor or a NumPy integer is accepted), or raise
    ``ValueError`` unless it is an integer >= ``minimum``."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value.item())
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} ({meaning}), got {value!r}.")
    return value


__all__ = [
    "CausalLoopMixin",
    "LMInputs",
    "LoopGenerationMixin",
    "LoopMap",
    "pop_loss_kwargs",
    "recorded_calls",
    "recording_attentions",
    "shared_fields",
    "StrictLoadingMixin",
    "TelemetryCache",
    "as_int",
    "check_keywords",
]
