"""The parts the looped language models' causal-LM heads share (each head's ``forward`` is in its model file): the
class attributes transformers reads, the language-model logits and loss, loop arguments kept out of generation
configs (an older ``generation_config.json``'s loop default moves into the model config on load; one in a
``GenerationConfig`` passed to ``generate`` becomes that call's argument), and a KV cache that also carries
per-position loop telemetry (pass one to ``generate`` to get it).

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers).
"""

from __future__ import annotations

import copy
import warnings

import torch
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache

from .argument_checks import shared_fields
from .compat import keep_positions


class LoopGenerationMixin:
    """Mixed into a family's ``*ForCausalLM`` (whose ``__init__`` builds ``model`` and ``lm_head`` and whose
    ``forward`` names the loop arguments, so that ``generate(num_loops=8)`` reaches it). ``_loop_defaults`` maps
    each loop argument to the model-config key holding its default (``None``: no default, per call only)."""

    _auto_class = "AutoModelForCausalLM"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}
    _loop_defaults: dict[str, str | None] = {}

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """[`PreTrainedModel.from_pretrained`]; a loop default that an older ``generation_config.json`` carries
        (``num_loops``, saved by equilibria 0.1) is moved into the model config, with a warning: there
        ``generate`` would take ``generate(num_loops=...)`` as a generation option and never pass it on."""
        loaded = super().from_pretrained(*args, **kwargs)
        move_loop_defaults(loaded[0] if isinstance(loaded, tuple) else loaded)
        return loaded

    def generate(self, *args, **kwargs):
        """[`GenerationMixin.generate`]. Loop arguments (``num_loops=8`` ...) are ``forward``'s and reach it. A loop
        default set on ``model.generation_config`` is first moved to the model config (with a warning), and one in a
        ``GenerationConfig`` passed in counts as that call's argument (an explicit keyword wins): left in a
        generation config, ``generate`` would take it as a generation option and never pass it on."""
        move_loop_defaults(self)
        args = [self._loop_arguments_out_of(a, kwargs) if isinstance(a, GenerationConfig) else a for a in args]
        if isinstance(kwargs.get("generation_config"), GenerationConfig):
            kwargs["generation_config"] = self._loop_arguments_out_of(kwargs["generation_config"], kwargs)
        return super().generate(*args, **kwargs)

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
        """``(logits, loss)`` of ``lm_head`` on ``hidden`` (the kept positions), the loss the shifted cross-entropy
        with ``labels`` (``None`` without them)."""
        logits = self.lm_head(keep_positions(hidden, logits_to_keep))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **loss_kwargs)
        return logits, loss

    def passed_on(self, outputs, output_class: type, extra_states: bool, output_hidden_states: bool | None) -> dict:
        """The fields of the base model's ``outputs`` the head's ``output_class`` carries on. ``extra_states``: the
        head asked for every step's state for itself, so ``hidden_states`` is dropped unless the caller (or the
        config) asked for it too."""
        fields_ = shared_fields(outputs, output_class)
        wanted = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        if extra_states and not wanted:
            fields_["hidden_states"] = None
        return fields_


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


__all__ = ["LoopGenerationMixin", "TelemetryCache", "move_loop_defaults"]
