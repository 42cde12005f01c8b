"""Checks of the arguments a family's ``forward`` gets: keywords it does not take (a misspelt ``num_loop=8`` must not
be ignored) and integer arguments such as ``num_loops``; and the fields one output passes on to another.

Hub-portable: travels as remote code beside the modeling files (it imports only torch and transformers).
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import fields

import torch
from transformers.utils.generic import TransformersKwargs

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


def shared_fields(source, target_class) -> dict:
    """The fields of the output dataclass ``target_class`` that ``source`` (another output) also has, with its
    values (``last_hidden_state`` excepted: a head reads it, it does not pass it on)."""
    have = {f.name for f in fields(source)}
    return {
        f.name: getattr(source, f.name)
        for f in fields(target_class)
        if f.name in have and f.name != "last_hidden_state"
    }


__all__ = ["PASSED_THROUGH", "as_int", "check_keywords", "shared_fields"]
