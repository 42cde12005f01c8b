"""Trainer subclasses that add each family's objective to ``transformers.Trainer``."""

from .attractor import AttractorTrainer, AttractorTrainingArguments
from .common import EquilibriaTrainer, ModelCardMixin
from .eqr import EqRTrainer, EqRTrainingArguments
from ..modeling.regularization import spectral_radius
from .stars import StarsTrainer, StarsTrainingArguments, find_looped_core, sample_num_loops

__all__ = [
    "AttractorTrainer",
    "AttractorTrainingArguments",
    "EqRTrainer",
    "EquilibriaTrainer",
    "ModelCardMixin",
    "EqRTrainingArguments",
    "StarsTrainer",
    "StarsTrainingArguments",
    "find_looped_core",
    "sample_num_loops",
    "spectral_radius",
]
