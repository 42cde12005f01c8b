"""The one place that meets transformers releases where they differ, within the range the package admits.

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers' public
functions). Each shim names the releases it serves:

* ``cache`` / ``past_key_values``: transformers 5.24 renamed the cache keyword of ``create_causal_mask``,
  ``create_sliding_window_causal_mask`` and the decoder layers; :data:`MASK_CACHE_KEYWORD` and
  :func:`layer_cache_keyword` are the name the installed release takes.
* the outputs' cache field (``BaseModelOutputWithPast.cache`` from 5.24 on, ``past_key_values`` before), which is
  also the key ``generate`` keeps the cache under in its model keywords: :data:`OUTPUT_CACHE_FIELD`.
* ``slice_logits_to_keep`` (in ``transformers.modeling_utils`` from 5.24 on): :func:`keep_positions` does the same
  slicing for every release.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import torch
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast


def _cache_keyword(function) -> str:
    """The name ``function`` takes the cache under: ``cache`` (transformers >= 5.24) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(function).parameters else "past_key_values"


MASK_CACHE_KEYWORD = _cache_keyword(create_causal_mask)
OUTPUT_CACHE_FIELD = (
    "cache" if "cache" in {f.name for f in dataclasses.fields(BaseModelOutputWithPast)} else "past_key_values"
)


@functools.cache
def layer_cache_keyword(layer_class: type) -> str:
    """The keyword a transformers decoder layer class (e.g. ``LlamaDecoderLayer``) takes the cache under."""
    return _cache_keyword(layer_class.forward)


def keep_positions(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """The positions of ``hidden`` (``(batch, seq, width)``) whose logits are wanted: an int ``k`` keeps the last
    ``k`` (0: all); a 1-D tensor holds positions kept for every row; a 2-D integer tensor positions per row; a 2-D
    boolean tensor a mask (the kept positions flattened to ``(kept, width)``)."""
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.ndim == 2:
        if logits_to_keep.dtype == torch.bool:
            return hidden[logits_to_keep]
        return torch.take_along_dim(hidden, logits_to_keep[..., None], dim=1)
    if isinstance(logits_to_keep, int):
        return hidden[:, slice(-logits_to_keep, None), :]
    return hidden[:, logits_to_keep, :]


__all__ = ["MASK_CACHE_KEYWORD", "OUTPUT_CACHE_FIELD", "keep_positions", "layer_cache_keyword"]
