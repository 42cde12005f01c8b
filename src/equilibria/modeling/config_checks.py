"""Validation helpers shared by the families' configuration classes: checks that raise ``ValueError`` naming the
key and its allowed values. Travels to the Hub as remote code beside the configuration files (standard library
only)."""

from __future__ import annotations

import math


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
