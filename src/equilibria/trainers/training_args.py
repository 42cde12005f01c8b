"""The base of the family trainers' argument dataclasses and the checks of their options.

As a configuration class declares each key's range on its field (``modeling/config_checks.py``), a family's
``TrainingArguments`` subclass declares each option's allowed values on its type, which the field keeps for
``HfArgumentParser`` (it reads the plain type: ``int``, ``float``, ``str``, ``X | None``):

    min_loops: Annotated[int, Interval(min=1)] = field(default=1, metadata={"help": "..."})
    jsrr_penalty: Annotated[str, OneOf(("square", "hinge"))] = field(default="square", metadata={"help": "..."})

A field's metadata is passed to ``argparse`` as is, so the declaration cannot live there (the configs' validated
fields keep their validator in it). :class:`LoopTrainingArguments` checks every declared option at construction
(``None`` passes where the type is optional), then runs ``validate_arguments``, the hook for checks that relate
several options. A refused value raises ``ValueError`` naming the class, the option and its allowed values.
"""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass, field
from typing import Annotated, Union, get_args, get_origin, get_type_hints

from transformers import TrainingArguments

from ..tasks.recipes import same_value


@dataclass(frozen=True)
class Interval:
    """An integer or real option's range (the bounds of transformers' ``interval`` validator, which the configs
    use); ``symbol`` is the option's name in the papers, shown in the error (``jsrr_weight (lambda)``)."""

    min: float | None = None
    max: float | None = None
    exclude_min: bool = False
    exclude_max: bool = False
    symbol: str | None = None

    def allows(self, value, kind: type) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if kind is int else (int, float)):
            return False
        above = self.min is None or (value > self.min if self.exclude_min else value >= self.min)
        below = self.max is None or (value < self.max if self.exclude_max else value <= self.max)
        return not math.isnan(value) and above and below

    def describe(self, kind: type) -> str:
        """``an integer >= 1``, ``> 0``, ``in [0, 1)``, ``finite and >= 0``."""
        bounded = self.max is not None and self.max < math.inf
        if self.min is not None and bounded:
            text = f"in {'(' if self.exclude_min else '['}{self.min:g}, {self.max:g}{')' if self.exclude_max else ']'}"
        else:
            text = f"{'>' if self.exclude_min else '>='} {self.min:g}" if self.min is not None else "a number"
            if bounded:
                text = f"{'<' if self.exclude_max else '<='} {self.max:g}"
            elif self.max == math.inf and self.exclude_max:
                text = f"finite and {text}"
        return f"an integer {text}" if kind is int else text


@dataclass(frozen=True)
class OneOf:
    """A string option with named choices (the configs declare theirs as ``Literal[...]``, which
    ``HfArgumentParser`` would turn into ``argparse`` choices with its own error)."""

    choices: tuple[str, ...]
    symbol: str | None = None

    def allows(self, value, kind: type) -> bool:
        return value in self.choices

    def describe(self, kind: type) -> str:
        return f"one of {self.choices}"


@dataclass(frozen=True)
class FilledIn:
    """Marks an option typed ``X | None`` whose ``None`` means "unset": the arguments class fills it in (from a
    preset or a default) before the checks, so ``None`` is not one of its allowed values."""


FILLED_IN = FilledIn()


@functools.cache
def declared_options(cls: type) -> dict[str, tuple[Interval | OneOf, type, bool]]:
    """``{option: (allowed values, int / float / str, whether None passes)}`` for the options of ``cls`` whose type
    declares its allowed values."""
    declared = {}
    for name, hint in get_type_hints(cls, include_extras=True).items():
        if get_origin(hint) is not Annotated:
            continue
        kind, *extras = get_args(hint)
        allowed = [extra for extra in extras if isinstance(extra, (Interval, OneOf))]
        optional = get_origin(kind) in (Union, types.UnionType) and type(None) in get_args(kind)
        if optional:
            kind = next(arg for arg in get_args(kind) if arg is not type(None))
        if allowed:
            declared[name] = (allowed[0], kind, optional and FILLED_IN not in extras)
    return declared


@dataclass
class LoopTrainingArguments(TrainingArguments):
    """[`~transformers.TrainingArguments`] whose own options are checked as declared on their types (see the
    module's docstring); the family trainers' arguments derive from it.

    ``lr_decay_fraction``: with ``lr_scheduler_type="warmup_stable_decay"``, the fraction of the run's optimizer
    steps the learning rate decays over (transformers' schedule takes ``num_decay_steps`` in
    ``lr_scheduler_kwargs``, a count that depends on the run's length; the trainer sets it from this fraction when
    it builds the schedule)."""

    lr_decay_fraction: Annotated[float | None, Interval(min=0, max=1, exclude_min=True)] = field(
        default=None,
        metadata={
            "help": "warmup_stable_decay: the fraction of the steps the learning rate decays over (sets "
            "lr_scheduler_kwargs' num_decay_steps from the run's length), in (0, 1]."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        name = type(self).__name__
        for option, (allowed, kind, optional) in declared_options(type(self)).items():
            value = getattr(self, option)
            if not ((optional and value is None) or allowed.allows(value, kind)):
                label = f"{option} ({allowed.symbol})" if allowed.symbol else option
                expected = f"None or {allowed.describe(kind)}" if optional else allowed.describe(kind)
                raise ValueError(f"{name}: {label} must be {expected}, got {value!r}")
        self.validate_arguments()

    def validate_arguments(self) -> None:
        """The checks that relate several options (a subclass adds them; each option's own range is declared on
        its type)."""
        scheduler = getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type)
        if self.lr_decay_fraction is not None and scheduler != "warmup_stable_decay":
            raise ValueError(
                f"{type(self).__name__}: lr_decay_fraction applies to lr_scheduler_type='warmup_stable_decay' only, "
                f"got lr_scheduler_type={scheduler!r}"
            )


def preset_recipe(args, preset: str | None, wanted: dict) -> dict:
    """``{"preset": name or None, "overrides": {option: value}}``: the preset and every option of ``wanted`` (its
    values) that ``args`` changes; what the training record and the model card name."""
    changed = [k for k, v in wanted.items() if not same_value(getattr(args, k), v)]
    overrides = {k: getattr(getattr(args, k), "value", getattr(args, k)) for k in changed}  # enums as their values
    return {"preset": preset, "overrides": overrides}
