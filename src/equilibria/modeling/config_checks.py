"""Validation helpers shared by the families' configuration classes, and the mapping of keys renamed since a config
was saved. Travels to the Hub as remote code beside the configuration files (standard library and
``huggingface_hub``, a dependency of transformers).

A config class is a ``huggingface_hub`` ``@strict`` dataclass (as transformers' own configs are): a key's type and
single-key range are declared on the field, with the validators transformers and ``huggingface_hub`` ship
(``interval(min=...)`` from ``transformers.utils.type_validators``, ``Literal[NAMES]`` for a key with named
choices, a tuple subscript being the same as listing its items; :func:`or_none` for an optional key); they run on
every assignment, so at construction and when loading too. Checks that relate several keys stay in the class's
``validate_*`` hooks, which run at construction, when loading, before ``save_pretrained`` and on
``config.validate()``. :func:`raise_value_errors` makes every one of those paths raise ``ValueError`` naming the
class, the key and its allowed values, instead of ``huggingface_hub``'s wrappers (which are not ``ValueError``).
"""

from __future__ import annotations

import math
import warnings
from typing import Literal, get_args, get_origin

from huggingface_hub.dataclasses import as_validated_field
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError

# A key LoopConfigMixin writes into every family's config.json: ``{"model_type": ""}``. Where the family is unknown and
# remote code is not trusted, ``AutoTokenizer.from_pretrained(folder, trust_remote_code=False)`` reads the config with
# ``PreTrainedConfig`` (``model_type`` ""), which warns "You are using a model of type `<its type>` to instantiate a model
# of type ``" unless the config holds a dict of that model type (transformers' way to find a composite model's
# part); it reads this one, and the tokenizer loads from its own files without the warning.
STANDALONE_KEY = "standalone_tokenizer"


class LoopConfigMixin:
    """Mixed into every family's config class (before ``PreTrainedConfig``): a ``config.json`` written for another
    model type is refused (``ValueError``) instead of loaded with a warning, keys renamed since a config was
    saved (``_renamed_keys``, old -> new) are read under their new names with a deprecation warning, and a key
    added with a new default (``_defaults_of_older_saves``, key -> the old behaviour) keeps a saved config's old behaviour.

    Validation: see the module's docstring; ``validate_architecture`` sorts before transformers' own RoPE checks, so
    a nonsensical shape gets our error."""

    _renamed_keys: dict = {}
    # key -> the value a config saved before the key existed meant (its behaviour then), where that differs from
    # the default of a new config: read when loading a config.json without the key
    _defaults_of_older_saves: dict = {}

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        refuse_foreign_model_type(cls, config_dict)
        missing = {key: value for key, value in cls._defaults_of_older_saves.items() if key not in config_dict}
        return super().from_dict({**config_dict, **missing}, **kwargs)

    def __post_init__(self, **kwargs):
        rename_legacy_keys(self, kwargs, self._renamed_keys)
        kwargs.pop(STANDALONE_KEY, None)  # what an earlier save wrote; set again below
        super().__post_init__(**kwargs)
        setattr(self, STANDALONE_KEY, {"model_type": ""})


def or_none(validated_field):
    """The shipped field validator ``validated_field`` (e.g. ``interval(min=1)``) for an optional key: ``None``
    passes, any other value is checked by it. Use as ``or_none(interval(min=1))(default=None)``."""
    checks = validated_field().metadata["validator"]

    @as_validated_field
    def check(value) -> None:
        if value is not None:
            for validator in checks:
                validator(value)

    return check


def raise_value_errors(cls):
    """Class decorator (above ``@strict``): a value a field validator refuses (on construction, loading or
    assignment) and a failing ``validate_*`` hook (on construction, loading, ``config.validate()`` and
    ``save_pretrained``) raise ``ValueError`` naming the class, the key and its allowed values, not
    ``huggingface_hub``'s ``StrictDataclassFieldValidationError`` / ``StrictDataclassClassValidationError``."""
    strict_setattr, strict_validate = cls.__setattr__, cls.validate

    def __setattr__(self, key: str, value) -> None:
        try:
            strict_setattr(self, key, value)
        except StrictDataclassFieldValidationError as err:
            raise field_value_error(self, key, value, err.__cause__) from None

    def validate(self) -> None:
        """Run the class's ``validate_*`` hooks; ``ValueError`` naming the key if one fails."""
        try:
            strict_validate(self)
        except StrictDataclassClassValidationError as err:
            if isinstance(err.__cause__, ValueError):
                raise err.__cause__ from None
            raise ValueError(f"{type(self).__name__}: {err.__cause__}") from err.__cause__

    # @strict runs ``cls.validate`` after __init__ and would refuse to decorate a subclass whose ``validate`` it
    # did not write: the marker it leaves on its own (huggingface_hub's, undocumented; an attribute that older
    # releases ignore); tests/test_core.py decorates a subclass to pin it
    validate.__is_defined_by_strict_decorator__ = True
    cls.__setattr__, cls.validate = __setattr__, validate
    return cls


def field_value_error(config, key: str, value, cause: Exception | None) -> ValueError:
    """The ``ValueError`` for ``value`` refused for ``config``'s field ``key``: the allowed values are the choices of
    a ``Literal`` key, the key's type for a value of another type, or else the field validator's own message
    (``interval``'s "Value must be greater or equal to 0, got -1.", with the key for "Value")."""
    name = type(config).__name__
    field = config.__dataclass_fields__.get(key)
    expected = field.type if field is not None else None
    if get_origin(expected) is Literal:
        return ValueError(f"{name}: {key} must be one of {get_args(expected)}, got {value!r}.")
    if isinstance(cause, TypeError) and expected is not None:
        expected = expected.__name__ if type(expected) is type else expected  # int, not <class 'int'>
        return ValueError(f"{name}: {key} must be of type {expected}, got {value!r}.")
    message = str(cause)
    if message.startswith("Value "):
        return ValueError(f"{name}: {key} {message.removeprefix('Value ')}")
    return ValueError(f"{name}: {key}: {message} (got {value!r})")


def fill_attention_defaults(config) -> None:
    """``num_key_value_heads`` defaults to ``num_attention_heads`` and ``head_dim`` to ``hidden_size //
    num_attention_heads`` (both sizes are integers >= 1, checked by their fields)."""
    if config.num_key_value_heads is None:
        config.num_key_value_heads = config.num_attention_heads
    if config.head_dim is None:
        config.head_dim = config.hidden_size // config.num_attention_heads


def check_attention_heads(config) -> None:
    """The constraints of attention that relate several keys: the heads divide the width, the key/value heads
    divide the heads, and the head width is even (for rotary embeddings)."""
    name = type(config).__name__
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if config.hidden_size % heads != 0:
        raise ValueError(f"{name}: num_attention_heads ({heads}) must divide hidden_size ({config.hidden_size}).")
    if heads % kv_heads != 0:
        raise ValueError(f"{name}: num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads}).")
    if config.head_dim % 2 != 0:
        raise ValueError(f"{name}: head_dim must be even for rotary embeddings, got {config.head_dim}.")


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
    """Raise unless every attribute in ``names`` of ``config`` is an integer >= ``minimum`` (for attributes that
    are not fields of the config class, such as ``num_labels``)."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{type(config).__name__}: {name} must be an integer >= {minimum}, got {value!r}.")


def check_finite(value, name: str, minimum: float = 0.0, inclusive: bool = True) -> float:
    """Return ``value`` as a float, or raise unless it is a finite number >= ``minimum`` (> when not
    ``inclusive``); for arguments that override a config key for one call."""
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
