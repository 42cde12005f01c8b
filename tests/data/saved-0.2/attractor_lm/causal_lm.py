"""The preamble of a looped language model's ``forward`` (input checks, embedding, cache, positions), recording
attention weights across loop steps, and the loss options the Trainer passes through ``forward``.

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.utils import logging

from .argument_checks import check_keywords

logger = logging.get_logger(__name__)


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
            check_token_ids(input_ids, self.embed_tokens.num_embeddings)
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


def check_token_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    """``ValueError`` naming the offending id and ``vocab_size`` when ``input_ids`` holds an id outside
    ``[0, vocab_size)`` (the embedding's rows), instead of the embedding's bare ``IndexError`` (or, on a GPU, a
    device-side assert). One min/max reduction per forward; skipped while compiling."""
    if input_ids.numel() == 0 or torch.compiler.is_compiling():
        return
    if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids (a LongTensor), got dtype {input_ids.dtype}.")
    low, high = (int(v) for v in torch.stack(torch.aminmax(input_ids)).tolist())
    if low < 0 or high >= vocab_size:
        bad = high if high >= vocab_size else low
        raise ValueError(
            f"input_ids holds token id {bad}, outside the vocabulary (vocab_size={vocab_size}: ids 0 to "
            f"{vocab_size - 1}); was it tokenised with another tokenizer than the model's?"
        )


def check_positions(model, last: int | None) -> None:
    """Warn once when position ``last`` (counted from 0) is past the ``config.max_position_embeddings`` the model
    was configured for. Rotary positions have no table that ends (and rope scaling exists to go past that length,
    as transformers' own rotary models allow), so nothing is refused; outputs there are only as good as the
    model's length generalisation."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and last is not None and last >= limit:
        logger.warning_once(
            f"{type(model).__name__}: positions past the {limit} the model was configured for "
            "(config.max_position_embeddings); rotary positions continue there, but the model was not trained "
            "on them unless its rope scaling says so"
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


__all__ = [
    "CausalLoopMixin",
    "LMInputs",
    "LOSS_KWARGS",
    "check_positions",
    "check_token_ids",
    "pop_loss_kwargs",
    "recorded_calls",
    "recording_attentions",
]
