"""Trainer subclasses that add each family's objective to ``transformers.Trainer``."""

from ..modeling.regularization import spectral_radius
from .arguments import LoopTrainingArguments
from .attractor import AttractorTrainer, AttractorTrainingArguments
from .callbacks import GradientNormCallback, group_norm, phdeq_gradient_groups
from .common import EquilibriaTrainer, LoopTrainer, ModelCardMixin, finish_distributed
from .eqr import EqRTrainer, EqRTrainingArguments
from .for_family import callbacks_for, trainer_for
from .stars import StarsTrainer, StarsTrainingArguments, find_looped_core, sample_num_loops

__all__ = [
    "AttractorTrainer",
    "AttractorTrainingArguments",
    "EqRTrainer",
    "EquilibriaTrainer",
    "GradientNormCallback",
    "LoopTrainer",
    "LoopTrainingArguments",
    "ModelCardMixin",
    "EqRTrainingArguments",
    "StarsTrainer",
    "StarsTrainingArguments",
    "find_looped_core",
    "finish_distributed",
    "group_norm",
    "phdeq_gradient_groups",
    "callbacks_for",
    "sample_num_loops",
    "spectral_radius",
    "trainer_for",
]
