"""Pieces every model family of equilibria shares: strict loading, remote-code saving, and routing the loop
arguments (``num_loops`` ...) of ``generate`` to ``forward``.

This module travels to the Hub as remote code beside the families' modeling files: it imports only torch and
transformers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.cache_utils import DynamicCache


class StrictLoadingMixin:
    """Mixed into a family's ``PreTrainedModel``: ``from_pretrained`` refuses checkpoints that do not match the
    config, and ``save_pretrained`` writes an ``auto_map`` so the folder loads with ``trust_remote_code=True``.

    Subclasses set ``_remote_auto_map`` (Auto class name -> ``"module.Class"``)."""

    _remote_auto_map: dict[str, str] = {}
    _head_weight_prefixes: tuple[str, ...] = ("lm_head.",)  # a head's weights, ignored when loading the base model

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """[`PreTrainedModel.from_pretrained`], but strict: a checkpoint whose weights are missing, unexpected or
        of the wrong shape raises ``ValueError`` naming them instead of leaving randomly initialised weights
        behind a warning. ``ignore_mismatched_sizes=True`` keeps transformers' lenient behaviour for shapes."""
        want_info = kwargs.pop("output_loading_info", False)
        lenient_shapes = kwargs.pop("ignore_mismatched_sizes", False)
        # load leniently, then report every problem at once in one clear error
        model, info = super().from_pretrained(*args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
        problems = []
        missing = sorted(info.get("missing_keys", []))
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


class LoopGenerationMixin:
    """Mixed into a family's ``*ForCausalLM``: the loop arguments listed in ``_loop_generate_kwargs`` (each with
    a validator returning the cleaned value) reach ``forward`` from ``generate``. A default saved in the
    generation config (``generation_config.num_loops``) is honoured and an explicit argument wins over it;
    without this, ``GenerationConfig.update`` would swallow the argument."""

    _loop_generate_kwargs: dict[str, Callable] = {}
    _generation_cache_class: type | None = None  # the dynamic cache generate should use instead of DynamicCache

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


def as_int(value, name: str, minimum: int, meaning: str) -> int:
    """Return ``value`` as an int (a one-element integer tensor is accepted), or raise ``ValueError`` unless it is
    an integer >= ``minimum``."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} ({meaning}), got {value!r}.")
    return value


__all__ = ["LoopGenerationMixin", "StrictLoadingMixin", "TelemetryCache", "as_int"]
