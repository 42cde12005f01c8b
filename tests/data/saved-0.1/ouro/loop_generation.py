"""``generate`` for looped language models: the causal-LM head that routes the loop arguments (``num_loops`` ...)
from ``generate`` to ``forward``, and a KV cache that also carries per-position loop telemetry.

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.utils import can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

from .argument_checks import shared_fields
from .causal_lm import pop_loss_kwargs
from .compat import OUTPUT_CACHE_FIELD, keep_positions


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
        if model_kwargs.get(OUTPUT_CACHE_FIELD) is None and implementation not in (None, "dynamic"):
            raise ValueError(
                f"{type(self).__name__} generates with its own {cache_class.__name__}; cache_implementation must be "
                f"None or 'dynamic', got {implementation!r}."
            )
        user_cache = model_kwargs.get(OUTPUT_CACHE_FIELD)
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        if user_cache is None and type(model_kwargs.get(OUTPUT_CACHE_FIELD)) is DynamicCache:
            model_kwargs[OUTPUT_CACHE_FIELD] = cache_class()

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
        logits = self.lm_head(keep_positions(hidden, logits_to_keep))
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


__all__ = ["LoopGenerationMixin", "TelemetryCache"]
