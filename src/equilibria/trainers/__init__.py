"""Trainer subclasses that add each family's objective to ``transformers.Trainer``."""

from .attractor import AttractorTrainer, AttractorTrainingArguments
from .regularizers import spectral_radius
from .stars import StarsTrainer, StarsTrainingArguments, find_looped_core, sample_num_loops

__all__ = [
    "AttractorTrainer",
    "AttractorTrainingArguments",
    "StarsTrainer",
    "StarsTrainingArguments",
    "find_looped_core",
    "sample_num_loops",
    "spectral_radius",
]
