"""The trainer, its training arguments and the callbacks ``equilibria train`` uses for a family: the classes here
that declare its ``model_type`` in their ``model_types`` (the family record names none of them), else the plain
[`EquilibriaTrainer`] with transformers' ``TrainingArguments``. A new trainer or callback declares the families it
serves and is listed here."""

from __future__ import annotations

from transformers import Trainer, TrainerCallback

from ..families import family_record, serving
from .attractor import AttractorTrainer
from .callbacks import GradientNormCallback
from .common import EquilibriaTrainer
from .eqr import EqRTrainer
from .stars import StarsTrainer

TRAINERS = (StarsTrainer, AttractorTrainer, EqRTrainer)
CALLBACKS = (GradientNormCallback,)


def trainer_for(model_type: str) -> type[Trainer]:
    """The trainer of the family ``model_type`` (its arguments class is the trainer's ``arguments_class``);
    ``ValueError`` for a model type of no family."""
    family_record(model_type, "trainer")
    found = serving(TRAINERS, model_type)
    return found[0] if found else EquilibriaTrainer


def callbacks_for(model_type: str) -> list[TrainerCallback]:
    """New instances of the callbacks ``equilibria train`` adds for the family ``model_type``."""
    return [callback() for callback in serving(CALLBACKS, model_type)]


__all__ = ["CALLBACKS", "TRAINERS", "callbacks_for", "trainer_for"]
