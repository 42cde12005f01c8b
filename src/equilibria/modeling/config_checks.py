"""Validation helpers shared by the families' configuration classes: checks that raise ``ValueError`` naming the
key and its allowed values, run by the ``validate_*`` hooks of ``huggingface_hub``'s ``@strict`` dataclasses (at
construction, when loading, before ``save_pretrained`` and on ``config.validate()``), and the mapping of keys
renamed since a config was saved. Travels to the Hub as remote code beside the configuration files (standard
library and ``huggingface_hub``, a dependency of transformers).
"""

from __future__ import annotations

import functools
import math
import warnings

from huggingface_hub.errors import StrictDataclassClassValidationError


def raise_value_errors(cls):
    """Class decorator (above ``@strict``): constructing the config raises a failing ``validate_*`` hook's own
    ``ValueError`` (naming the key and its allowed values), not ``huggingface_hub``'s wrapper around it."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except StrictDataclassClassValidationError as err:
            if isinstance(err.__cause__, (ValueError, TypeError)):
                raise err.__cause__ from None
            raise

    cls.__init__ = __init__
    return cls


def rename_legacy_keys(config, extra: dict, renames: dict[str, str]) -> None:
    """Read values saved under an old key (popped from ``extra``, the unknown keyword arguments a config's
    ``__post_init__`` receives) into the new key, with a deprecation warning."""
    for old, new in renames.items():
        if old in extra:
            warnings.warn(
                f"{type(config).__name__}: the key {old!r} was renamed to {new!r}; the value was read as {new!r}. "
                f"Save the config again to write the new name.",
                FutureWarning,
                stacklevel=4,
            )
            setattr(config, new, extra.pop(old))


def is_number(value) -> bool:
    """A real number (not a bool, not NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def check_int(config, minimum: int, *names: str) -> None:
    """Raise unless every attribute in ``names`` of ``config`` is an integer >= ``minimum``."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{type(config).__name__}: {name} must be an integer >= {minimum}, got {value!r}.")


def check_finite(value, name: str, minimum: float = 0.0, inclusive: bool = True) -> float:
    """Return ``value`` as a float, or raise unless it is a finite number >= ``minimum`` (> when not
    ``inclusive``)."""
    ok = is_number(value) and value < math.inf and (value >= minimum if inclusive else value > minimum)
    if not ok:
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}.")
    return float(value)


def refuse_foreign_model_type(config_class, config_dict: dict) -> None:
    """Raise if a ``config.json`` dict was written for another model type than ``config_class.model_type``."""
    model_type = config_dict.get("model_type")
    if model_type is not None and model_type != config_class.model_type:
        raise ValueError(
            f"{config_class.__name__} cannot load a config with model_type {model_type!r}: expected "
            f"{config_class.model_type!r}. Load it with AutoConfig, or the config class of that model type."
        )
