"""Trainer subclasses that add each family's objective to ``transformers.Trainer``."""

from ..modeling.regularization import spectral_radius
from .attractor import AttractorTrainer, AttractorTrainingArguments
from .callbacks import GradientNormCallback, group_norm, phdeq_gradient_groups
from .common import EquilibriaTrainer, LoopTrainer, ModelCardMixin, finish_distributed
from .eqr import EqRTrainer, EqRTrainingArguments
from .for_family import callbacks_for, trainer_for
from .stars import StarsTrainer, StarsTrainingArguments, find_looped_core, sample_num_loops
from .training_args import LoopTrainingArguments

#: defined in .grpo, which needs the ``rl`` extra (TRL): imported on first use
OPTIONAL = {"LoopGRPOConfig": "grpo", "LoopGRPOTrainer": "grpo"}


def __getattr__(name: str):
    if name in OPTIONAL:
        try:
            from . import grpo
        except ImportError as err:
            raise ImportError(f"{name} needs TRL: pip install 'equilibria[rl]' ({err})") from err
        return getattr(grpo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AttractorTrainer",
    "AttractorTrainingArguments",
    "EqRTrainer",
    "EquilibriaTrainer",
    "GradientNormCallback",
    "LoopGRPOConfig",
    "LoopGRPOTrainer",
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
