"""What the looped models share around their loop, in the order a forward meets it:

1. the checks of a ``forward``'s arguments (every family): keywords it does not take, integer arguments such as
   ``num_loops``, the output fields one output passes on to another;
2. the preamble of a looped language model's ``forward`` (:meth:`LoopedLMBase.prepare_inputs`: input checks,
   embedding, the cache and its old keyword ``past_key_values``, positions) and the recording of attention weights
   across loop steps;
3. what the causal-LM heads share (:class:`LoopedLMHead`): the class attributes transformers reads, the kept
   positions of the logits, the loss options the Trainer passes through ``forward``, and ``generate``'s loop
   arguments (an older ``generation_config.json``'s loop default moves into the model config on load; one in a
   ``GenerationConfig`` passed to ``generate`` becomes that call's argument);
4. a KV cache that also keeps per-position loop telemetry (:class:`TelemetryCache`; pass one to ``generate``).

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers).
"""

from __future__ import annotations

import copy
import inspect
import numbers
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import ClassVar, NamedTuple

import torch
from torch import nn
from transformers import GenerationConfig
from transformers.cache_utils import Cache, DynamicCache
from transformers.utils import logging
from transformers.utils.generic import TransformersKwargs

logger = logging.get_logger(__name__)

# --------------------------------------------------------------------------------------------------
# 1. Checks of forward's arguments (every family)
# --------------------------------------------------------------------------------------------------

# keywords transformers' models take through **kwargs (attention kernels, the Trainer, PEFT, generate); the cache's
# name before transformers 5.24, ``past_key_values``, is one (the language models take it as ``cache``)
PASSED_THROUGH = frozenset(getattr(TransformersKwargs, "__annotations__", {})) | {
    "return_dict",
    "cache_position",
    "past_key_values",
}
# the loss options the Trainer passes through a head's ``forward``
LOSS_KWARGS = ("num_items_in_batch", "ignore_index", "shift_labels")


def check_keywords(model, kwargs: dict) -> None:
    """Raise ``TypeError`` naming the keywords in ``kwargs`` (what ``model.forward`` got beyond its own arguments)
    that are not ones transformers passes through (a misspelt ``num_loop=8`` must not be silently ignored)."""
    unknown = sorted(set(kwargs) - PASSED_THROUGH)
    if unknown:
        own = [name for name in inspect.signature(type(model).forward).parameters if name not in ("self", "kwargs")]
        raise TypeError(
            f"{type(model).__name__}.forward() got unexpected keyword argument(s) {unknown}; it takes {own} (a head "
            "passes it every keyword the head's own forward does not take), plus the keywords transformers passes "
            f"through ({sorted(PASSED_THROUGH)})."
        )


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


FAR_BEYOND = 4  # a loop count more than this many times the configured one draws a warning (once per model)


def warn_far_beyond(model, num_loops, configured: int, key: str) -> None:
    """Warn once per ``model`` when ``generate`` runs ``num_loops`` passes, more than :data:`FAR_BEYOND` times the
    ``configured`` count (its config's ``key``: what it was saved with, and for a trained folder what it was trained
    at): a loop trained at a few passes is rarely right far beyond them, and nothing else would say so."""
    try:
        loops = as_int(num_loops, "num_loops", 1, "")
    except ValueError:
        return  # the forward's own check names it
    if loops <= FAR_BEYOND * configured or getattr(model, "_warned_far_beyond", False):
        return
    model._warned_far_beyond = True
    warnings.warn(
        f"generate(num_loops={loops}) runs {loops / configured:.0f}x the {configured} loops of this model's config "
        f"({key}, the count it was saved with): a looped model trained at a few loops is rarely right that far "
        "beyond them; measure it (equilibria eval FOLDER --loops ...) before trusting the answers.",
        UserWarning,
        stacklevel=3,
    )


def shared_fields(source, target_class) -> dict:
    """The fields of the output dataclass ``target_class`` that ``source`` (another output) also has, with its
    values (``last_hidden_state`` excepted: a head reads it, it does not pass it on)."""
    have = {f.name for f in fields(source)}
    return {
        f.name: getattr(source, f.name)
        for f in fields(target_class)
        if f.name in have and f.name != "last_hidden_state"
    }


# --------------------------------------------------------------------------------------------------
# 2. A looped language model's forward preamble, and attention weights across loop steps
# --------------------------------------------------------------------------------------------------


class LMInputs(NamedTuple):
    """What a looped causal LM's forward works on after :meth:`LoopedLMBase.prepare_inputs`."""

    inputs_embeds: torch.Tensor
    cache: Cache | None
    position_ids: torch.Tensor
    output_hidden_states: bool
    output_attentions: bool


class LoopedLMBase:
    """Mixed into a looped language model's base ``PreTrainedModel`` (one with ``embed_tokens``): the preamble of
    its ``forward``. Subclasses set ``_cache_class`` (the cache built when ``use_cache`` is on and none is
    passed)."""

    _cache_class: type | None = None

    def prepare_inputs(
        self, input_ids, inputs_embeds, cache, use_cache, position_ids, output_hidden_states, kwargs: dict
    ) -> LMInputs:
        """Check the inputs and the keywords left in ``kwargs`` (``output_attentions`` and ``past_key_values``, the
        cache's name before transformers 5.24, are taken out of it), embed ``input_ids`` (refusing ids outside the
        vocabulary), decide on the cache (one passed in is always used; otherwise one is built unless training with
        gradients), and default ``position_ids`` to continue the cache (warning once past
        ``config.max_position_embeddings``: rotary positions continue there, as rope scaling intends)."""
        config, name = self.config, type(self).__name__
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        old_cache = kwargs.pop("past_key_values", None)
        if old_cache is not None and cache is not None:
            raise ValueError("Pass the cache once: as cache= (or past_key_values=, its old name), not both.")
        cache = old_cache if cache is None else cache
        attentions = kwargs.pop("output_attentions", None)
        attentions = bool(config.output_attentions if attentions is None else attentions)
        if attentions and config._attn_implementation != "eager":  # as transformers' models do: warn, no weights
            logger.warning_once(
                f"{name}: output_attentions=True needs the eager attention ({config._attn_implementation!r} does not "
                "return the weights, so `attentions` is None); load the model with attn_implementation='eager' or "
                "call model.set_attn_implementation('eager')."
            )
            attentions = False
        check_keywords(self, kwargs)
        training_with_grad = self.training and torch.is_grad_enabled()
        if use_cache is None:
            use_cache = cache is not None or (config.use_cache and not training_with_grad)
        if use_cache and self.gradient_checkpointing and training_with_grad:
            logger.warning_once(f"{name}: the KV cache is incompatible with gradient checkpointing; running without.")
            use_cache = False
        if inputs_embeds is None:  # ids outside the embedding's rows: a clear error, not an IndexError (a GPU assert)
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}.")
            if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
                raise ValueError(f"input_ids must hold integer token ids (a LongTensor), got dtype {input_ids.dtype}.")
            vocab = self.embed_tokens.num_embeddings
            if input_ids.numel() and not torch.compiler.is_compiling():  # one min/max reduction per forward
                low, high = torch.stack(torch.aminmax(input_ids)).tolist()
                if low < 0 or high >= vocab:
                    raise ValueError(
                        f"input_ids holds token id {high if high >= vocab else low}, outside the vocabulary "
                        f"(vocab_size={vocab}: ids 0 to {vocab - 1}); was it tokenised with another tokenizer than the model's?"
                    )
            inputs_embeds = self.embed_tokens(input_ids)
        cache = (cache if cache is not None else self._cache_class()) if use_cache else None
        past = cache.get_seq_length() if cache is not None else 0  # an int, or a 0-d tensor (a static cache)
        if position_ids is None:
            position_ids = (torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past)[None]
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and not torch.compiler.is_compiling() and int(past) + inputs_embeds.shape[1] > limit:
            if int(position_ids.max()) >= limit:  # packed rows restart their positions: read them (a sync, only here)
                logger.warning_once(
                    f"{name}: positions past the {limit} the model was configured for (config.max_position_embeddings); "
                    "rotary positions continue there, but the model was not trained on them unless its rope scaling "
                    "says so"
                )
        hidden = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return LMInputs(inputs_embeds, cache, position_ids, bool(hidden), attentions)


@contextmanager
def recording_attentions(modules: Iterable[nn.Module]) -> Iterator[list]:
    """While active, collect the attention weights (the second output) of every call of ``modules``, in call
    order, into the list it yields."""
    weights: list[torch.Tensor] = []
    handles = [module.register_forward_hook(lambda _m, _a, out: weights.append(out[1])) for module in modules]
    try:
        yield weights
    finally:
        for handle in handles:
            handle.remove()


def recorded_calls(fn: Callable, modules: Iterable[nn.Module], sink: list) -> Callable:
    """``fn`` wrapped so that each call leaves the attention weights of ``modules`` (see
    :func:`recording_attentions`) in ``sink``, replacing what it held."""

    def wrapped(*args, **kwargs):
        with recording_attentions(modules) as weights:
            out = fn(*args, **kwargs)
        sink[:] = weights
        return out

    return wrapped


# --------------------------------------------------------------------------------------------------
# 3. What the causal-LM heads share
# --------------------------------------------------------------------------------------------------


def keep_positions(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """The positions of ``hidden`` (``(batch, seq, width)``) whose logits are wanted: an int ``k`` keeps the last
    ``k`` (0: all); a 1-D tensor holds positions kept for every row; a 2-D integer tensor positions per row; a 2-D
    boolean tensor a mask (the kept positions flattened to ``(kept, width)``). transformers' own
    ``slice_logits_to_keep`` is in its releases from 5.23 on only."""
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.ndim == 2:
        if logits_to_keep.dtype == torch.bool:
            return hidden[logits_to_keep]
        return torch.take_along_dim(hidden, logits_to_keep[..., None], dim=1)
    if isinstance(logits_to_keep, int):
        return hidden[:, slice(-logits_to_keep, None), :]
    return hidden[:, logits_to_keep, :]


class LoopedLMHead:
    """Mixed into a family's ``*ForCausalLM`` (whose ``__init__`` builds ``model`` and ``lm_head`` and whose
    ``forward`` names the loop arguments, so that ``generate(num_loops=8)`` reaches it). ``_loop_defaults`` maps
    each loop argument to the model-config key holding its default (``None``: no default, per call only)."""

    _auto_class = "AutoModelForCausalLM"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}
    _loop_defaults: dict[str, str | None] = {}
    # the key generate keeps the cache under in its model keywords (a head sets compat.OUTPUT_CACHE_FIELD: this file
    # imports no other: transformers 5.4 copies only the files a modeling file imports itself, with remote code)
    output_cache_field: ClassVar[str] = "cache"

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """[`PreTrainedModel.from_pretrained`]; a loop default that an older ``generation_config.json`` carries
        (``num_loops``, saved by equilibria 0.1) is moved into the model config, with a warning: there
        ``generate`` would take ``generate(num_loops=...)`` as a generation option and never pass it on."""
        loaded = super().from_pretrained(*args, **kwargs)
        move_loop_defaults(loaded[0] if isinstance(loaded, tuple) else loaded)
        return loaded

    def generate(self, *args, **kwargs):
        """[`GenerationMixin.generate`]. ``cache=`` is the cache on every admitted release (before transformers 5.24,
        ``generate`` knows it as ``past_key_values``). Loop arguments (``num_loops=8`` ...) are ``forward``'s and
        reach it. A loop default set on ``model.generation_config`` is first moved to the model config (with a
        warning), and one in a ``GenerationConfig`` passed in counts as that call's argument (an explicit keyword
        wins): left in a generation config, ``generate`` would take it as a generation option and never pass it
        on."""
        move_loop_defaults(self)
        args = [self._loop_arguments_out_of(a, kwargs) if isinstance(a, GenerationConfig) else a for a in args]
        if isinstance(kwargs.get("generation_config"), GenerationConfig):
            kwargs["generation_config"] = self._loop_arguments_out_of(kwargs["generation_config"], kwargs)
        given = [a for a in args if isinstance(a, GenerationConfig)] + [kwargs.get("generation_config")]
        self._check_generate_call(kwargs, next((g for g in given if g is not None), self.generation_config))
        field = self.output_cache_field  # before 5.24 generate knows the cache as past_key_values
        if "cache" in kwargs and field not in kwargs:
            kwargs[field] = kwargs.pop("cache")
        return super().generate(*args, **kwargs)

    def _check_generate_call(self, kwargs: dict, generation_config: GenerationConfig | None) -> None:
        """Refuse a ``generate`` call the loop arguments in ``kwargs`` make wrong (a family's hook; ``kwargs`` are
        ``generate``'s keywords, ``generation_config`` the one it will start from)."""

    @staticmethod
    def speculative_option(kwargs: dict, generation_config: GenerationConfig | None) -> str | None:
        """The option of this ``generate`` call that makes it assisted (speculative) decoding, verifying several
        proposed tokens in one forward (``assistant_model``, ``prompt_lookup_num_tokens``, ``assistant_early_exit``),
        or ``None``."""
        for name in ("assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit"):
            value = kwargs.get(name, getattr(generation_config, name, None))
            if value is not None:
                return name
        return None

    def _loop_arguments_out_of(self, generation_config: GenerationConfig, kwargs: dict) -> GenerationConfig:
        """A copy of ``generation_config`` without loop arguments, which go into ``kwargs`` unless given there."""
        found = loop_values(generation_config, self._loop_defaults)
        if not found:
            return generation_config
        generation_config = copy.deepcopy(generation_config)
        for key, value in found.items():
            delattr(generation_config, key)
            kwargs.setdefault(key, value)
        return generation_config

    def lm_logits_and_loss(self, hidden, labels, loss_kwargs: dict, logits_to_keep: int | torch.Tensor = 0):
        """``(logits, loss)`` of ``lm_head`` on ``hidden`` (the kept positions), the loss :func:`head_loss` (``None``
        without ``labels``)."""
        logits = self.lm_head(keep_positions(hidden, logits_to_keep))
        return logits, None if labels is None else head_loss(self, logits, labels, loss_kwargs)


def head_loss(head, logits: torch.Tensor, labels: torch.Tensor, loss_kwargs: dict | None = None) -> torch.Tensor:
    """The loss of every head that reads a vocabulary: transformers' ``head.loss_function`` (its ``loss_type``: the
    shifted cross-entropy of a causal LM, a puzzle head's per-cell ``ForMaskedLM``; -100 skipped) of ``logits``
    against ``labels``, with the Trainer's ``loss_kwargs`` (``num_items_in_batch``)."""
    return head.loss_function(logits=logits, labels=labels, vocab_size=head.config.vocab_size, **(loss_kwargs or {}))


def loop_values(generation_config: GenerationConfig | None, keys) -> dict:
    """The loop arguments among ``keys`` that ``generation_config`` sets (``{}`` for no generation config)."""
    found = {key: getattr(generation_config, key, None) for key in keys} if generation_config is not None else {}
    return {key: value for key, value in found.items() if value is not None}


def move_loop_defaults(model) -> None:
    """Move loop defaults found on ``model.generation_config`` into ``model.config`` (``model._loop_defaults`` names
    where each goes; one without a config home is dropped), with a warning saying what moved."""
    generation = getattr(model, "generation_config", None)
    found = loop_values(generation, model._loop_defaults)
    if not found:
        return
    moved, dropped = [], []
    for key, value in found.items():
        delattr(generation, key)
        target = model._loop_defaults[key]
        if target is None:
            dropped.append(f"{key}={value!r}")
        else:
            setattr(model.config, target, value)
            moved.append(f"{key}={value!r} -> config.{target}")
    if dropped:
        moved.append(f"dropped, pass per call instead: {', '.join(dropped)}")
    warnings.warn(
        f"{type(model).__name__}: the generation config saved with this model sets loop defaults; they belong in "
        f"the model config (in the generation config, generate(num_loops=...) would be swallowed as a generation "
        f"option): {'; '.join(moved)}. Save the model again to update the folder.",
        UserWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------------------------------
# 4. A KV cache with per-position loop telemetry, and a read-only view of a cache
# --------------------------------------------------------------------------------------------------


@dataclass
class ReadOnlyCache:
    """Stands in for ``cache`` in attention calls that must see its past without adding to it: ``update`` returns
    the layer's cached keys/values followed by the given ones (what a dynamic layer's ``update`` returns) and writes
    nothing. The Attractor's solver iterations attend through one (their keys/values are appended once, at the
    solution), and so do Ouro's loop steps before the last with ``recurrent_kv_cache_mode="last_loop"``. Meant for
    plain dynamic layers (``DynamicLayer``, ``DynamicSlidingWindowLayer``: ``READABLE``), whose ``keys`` hold the
    past as ``update`` returns it."""

    READABLE: ClassVar[frozenset] = frozenset({"DynamicLayer", "DynamicSlidingWindowLayer"})  # names: classes move
    cache: Cache

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        layers = self.cache.layers
        if layer_idx < len(layers) and getattr(layers[layer_idx], "is_initialized", False):
            past_keys, past_values = layers[layer_idx].keys, layers[layer_idx].values
            if past_keys is not None and past_keys.shape[-2] > 0:
                return torch.cat([past_keys, key_states], dim=-2), torch.cat([past_values, value_states], dim=-2)
        return key_states, value_states


class TelemetryCache(DynamicCache):
    """A lazily growing [`~transformers.DynamicCache`] that also keeps per-position telemetry: for each name in
    ``telemetry_names`` an attribute holding a ``(batch, seq_len)`` tensor (``None``, a class default, before the
    first forward), extended by every forward and kept in step with the keys/values through beam reordering, batch
    expansion/selection and cropping."""

    telemetry_names: tuple[str, ...] = ()

    def record(self, **values: torch.Tensor) -> None:
        """Append each of ``values`` (``name=(batch, new_positions)``) to the telemetry of that name."""
        for name, new in values.items():
            old = getattr(self, name)
            setattr(self, name, new if old is None else torch.cat([old, new.to(old.device)], dim=1))

    def _apply(self, fn) -> None:
        for name in self.telemetry_names:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, fn(value))

    def reset(self) -> None:
        super().reset()
        for name in self.telemetry_names:
            setattr(self, name, None)

    def crop(self, length: int) -> None:
        """[`DynamicCache.crop`], keeping the telemetry in step, in either meaning transformers gave the argument: a
        negative value removes that many positions (every release); a positive one is the length to keep (before
        5.18; from 5.18 on transformers refuses it)."""
        before = self.get_seq_length()
        super().crop(length)
        keep = before + length if length < 0 else min(length, before)
        if keep < before:
            self._apply(lambda t: t[:, :keep])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._apply(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._apply(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._apply(lambda t: t[indices])


__all__ = [
    "LOSS_KWARGS",
    "PASSED_THROUGH",
    "LMInputs",
    "ReadOnlyCache",
    "LoopedLMBase",
    "LoopedLMHead",
    "TelemetryCache",
    "as_int",
    "check_keywords",
    "head_loss",
    "keep_positions",
    "move_loop_defaults",
    "recorded_calls",
    "recording_attentions",
    "shared_fields",
]
