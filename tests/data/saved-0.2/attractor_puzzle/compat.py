"""The one place that meets transformers releases where they differ, within the range the package admits.

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers' public
functions). Each shim names the releases it serves:

* ``cache`` / ``past_key_values``: transformers 5.24 renamed the cache keyword of ``create_causal_mask`` and
  ``create_sliding_window_causal_mask``; :data:`MASK_CACHE_KEYWORD` is the name the installed release takes.
* the outputs' cache field (``BaseModelOutputWithPast.cache`` from 5.24 on, ``past_key_values`` before), which is
  also the key ``generate`` keeps the cache under in its model keywords: :data:`OUTPUT_CACHE_FIELD`.
* ``Cache.crop``'s argument: the number of positions to remove when negative (every release), the length to keep
  when positive (before 5.18): ``TelemetryCache.crop`` (in ``loop_generation``) follows both.
* the forward keyword ``past_key_values``: transformers before 5.24 passes the cache under that name (5.24 renamed it
  ``cache`` and keeps the old one as a deprecated alias); :func:`cache_alias` takes both, without a warning.
* ``slice_logits_to_keep`` (in ``transformers.modeling_utils`` of 5.23 and 5.24, not of 5.4, 5.12 or 5.18):
  :func:`keep_positions` does the same slicing for every release.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable

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


def cache_alias(forward: Callable) -> Callable:
    """``forward`` (which takes the cache as ``cache``) also taking it as ``past_key_values``, the name ``generate``
    uses before transformers 5.24 (and callers written for those releases)."""

    @functools.wraps(forward)
    def wrapper(*args, **kwargs):
        if "past_key_values" in kwargs:
            old = kwargs.pop("past_key_values")
            if kwargs.get("cache") is not None and old is not None:
                raise ValueError("Pass the cache once: as cache= (or past_key_values=, its old name), not both.")
            kwargs["cache"] = kwargs.get("cache") if old is None else old
        return forward(*args, **kwargs)

    return wrapper


__all__ = ["MASK_CACHE_KEYWORD", "OUTPUT_CACHE_FIELD", "cache_alias", "keep_positions"]
