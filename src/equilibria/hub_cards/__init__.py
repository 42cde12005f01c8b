"""Model cards for the Hub: ``build_model_card(model, ...)`` for every family (metadata with ``model-index``
results per loop count, loading snippets with and without the package, loop scaling, audit verdict, training), from
each family's card text (:mod:`~equilibria.hub_cards.family_text`)."""

from .card import build_model_card, card_metadata_round_trips
from .family_text import FAMILY_TEXTS, FamilyText, family_text

__all__ = ["FAMILY_TEXTS", "FamilyText", "build_model_card", "card_metadata_round_trips", "family_text"]
