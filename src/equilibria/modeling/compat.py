"""The one place that meets transformers releases where they differ, within the range the package admits.

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers' public
functions). Each shim names the releases it serves:

* ``cache`` / ``past_key_values``: transformers 5.24 renamed the cache keyword of ``create_causal_mask`` and
  ``create_sliding_window_causal_mask``; :data:`MASK_CACHE_KEYWORD` is the name the installed release takes.
* the outputs' cache field (``BaseModelOutputWithPast.cache`` from 5.24 on, ``past_key_values`` before), which is
  also the key ``generate`` keeps the cache under in its model keywords: :data:`OUTPUT_CACHE_FIELD`
  (``LoopedLMBase.generate`` passes a ``cache=`` on under it).

Two more differences are met where they arise, in ``looped_lm``: ``Cache.crop``'s argument (the number of positions to
remove when negative, every release; the length to keep when positive, before 5.18), which ``TelemetryCache.crop``
follows both ways; and the forward keyword ``past_key_values``, the name transformers before 5.24 passes the cache
under (5.24 renamed it ``cache``), which ``LoopedLMBase.prepare_inputs`` takes as the cache, without a warning.
"""

from __future__ import annotations

import dataclasses
import inspect

from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast


def _cache_keyword(function) -> str:
    """The name ``function`` takes the cache under: ``cache`` (transformers >= 5.24) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(function).parameters else "past_key_values"


MASK_CACHE_KEYWORD = _cache_keyword(create_causal_mask)
OUTPUT_CACHE_FIELD = (
    "cache" if "cache" in {f.name for f in dataclasses.fields(BaseModelOutputWithPast)} else "past_key_values"
)


__all__ = ["MASK_CACHE_KEYWORD", "OUTPUT_CACHE_FIELD"]
