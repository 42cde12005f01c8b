"""The model card's text of each family: its record's (:class:`~equilibria.families.card_text.FamilyText`, in the
family's module in :mod:`equilibria.families`), or, for a family added with ``register_family`` without one, the text
derived from its record (:func:`~equilibria.families.card_text.record_text`); a model of no family is a
``ValueError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..families import FAMILIES, family_record
from ..families.card_text import LM_USAGE, FamilyText, record_text


class _FamilyTexts(Mapping):
    """Model type -> the card text its record holds, read from :data:`~equilibria.families.FAMILIES` when used."""

    def __getitem__(self, model_type: str) -> FamilyText:
        card = FAMILIES[model_type].card
        if card is None:
            raise KeyError(model_type)
        return card

    def __iter__(self) -> Iterator[str]:
        return (model_type for model_type, family in FAMILIES.items() if family.card is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: the card text of every family whose record holds one
FAMILY_TEXTS: Mapping[str, FamilyText] = _FamilyTexts()


def family_text(model_or_config) -> FamilyText:
    """The card text of a model's (or config's) family: its record's, or one derived from the record
    (:func:`record_text`); ``ValueError`` for a model of no equilibria family."""
    family = family_record(model_or_config, "model card template")
    return family.card or record_text(family)


__all__ = ["FAMILY_TEXTS", "FamilyText", "LM_USAGE", "family_text", "record_text"]
