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


class LoopConfigMixin:
    """Mixed into every family's config class (before ``PreTrainedConfig``): a ``config.json`` written for another
    model type is refused (``ValueError``) instead of loaded with a warning, and keys renamed since a config was
    saved (``_renamed_keys``, old -> new) are read under their new names with a deprecation warning.

    Validation lives in the family's ``validate_architecture`` (and other ``validate_*``) hooks, which
    ``huggingface_hub``'s ``@strict`` runs at construction, when loading, before ``save_pretrained`` and on
    ``config.validate()``; ``validate_architecture`` sorts before transformers' own RoPE checks, so a nonsensical
    size gets our error (``ValueError`` naming the key and its allowed values, see :func:`raise_value_errors`)."""

    _renamed_keys: dict = {}

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        refuse_foreign_model_type(cls, config_dict)
        return super().from_dict(config_dict, **kwargs)

    def __post_init__(self, **kwargs):
        rename_legacy_keys(self, kwargs, self._renamed_keys)
        super().__post_init__(**kwargs)


def fill_attention_defaults(config) -> None:
    """``num_key_value_heads`` defaults to ``num_attention_heads`` and ``head_dim`` to ``hidden_size //
    num_attention_heads`` (after checking that the division can be made)."""
    if config.num_key_value_heads is None:
        config.num_key_value_heads = config.num_attention_heads
    check_int(config, 1, "num_attention_heads", "hidden_size", "num_key_value_heads")
    if config.head_dim is None:
        config.head_dim = config.hidden_size // config.num_attention_heads


def check_transformer(config, attention: bool = True) -> None:
    """The usual transformer constraints: positive sizes; (with ``attention``) heads divide the width, key/value
    heads divide the heads, an even head width for rotary embeddings; a positive norm epsilon and a dropout in
    ``[0, 1)``."""
    check_int(config, 1, "vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")
    check_int(config, 1, "head_dim")
    name = type(config).__name__
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if attention and config.hidden_size % heads != 0:
        raise ValueError(f"{name}: num_attention_heads ({heads}) must divide hidden_size ({config.hidden_size}).")
    if attention and heads % kv_heads != 0:
        raise ValueError(f"{name}: num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads}).")
    if attention and config.head_dim % 2 != 0:
        raise ValueError(f"{name}: head_dim must be even for rotary embeddings, got {config.head_dim}.")
    if not config.rms_norm_eps > 0:
        raise ValueError(f"{name}: rms_norm_eps must be > 0, got {config.rms_norm_eps}.")
    if not 0.0 <= float(config.attention_dropout) < 1.0:
        raise ValueError(f"{name}: attention_dropout must be in [0, 1), got {config.attention_dropout}.")


def check_choices(config, **allowed: tuple) -> None:
    """Raise unless each named attribute of ``config`` is one of its allowed values."""
    for key, values in allowed.items():
        if getattr(config, key) not in values:
            raise ValueError(f"{type(config).__name__}: {key} must be one of {values}, got {getattr(config, key)!r}.")


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
