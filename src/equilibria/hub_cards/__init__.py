"""Model cards for the Hub: ``build_model_card(model, ...)`` for every family (metadata with ``model-index``
results per loop count, loading snippets with and without the package, loop scaling, audit verdict, training)."""

from .card import build_model_card, card_metadata_round_trips, family_info

__all__ = ["build_model_card", "card_metadata_round_trips", "family_info"]
