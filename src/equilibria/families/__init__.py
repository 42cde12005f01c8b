"""The model families of equilibria: one record per ``model_type``, one module each (:mod:`.ouro`, :mod:`.attractor`,
:mod:`.eqr`, :mod:`.phdeq`, :mod:`.transformers_lms`), the single place that knows which exist (:data:`FAMILIES`).

A record holds what the package knows of a family: its base model class (whose config class and model type are the
family's), its heads with their Auto classes, the kind of head each is and the tasks it is trained on, its loop protocol, a small-config factory, its
capabilities (:data:`CAPABILITIES`), its card text, its recipes and, where the audit's adapters do not fit, its own
adapter. ``import equilibria`` registers the Auto classes from it, and every layer above reads it. Nothing here
imports a layer above: the trainers (:func:`equilibria.trainers.trainer_for`) declare the model types or
capabilities they serve, the audit adapters (:func:`equilibria.diagnostics.adapter_for`) the head kinds and loop
forms, the evaluators (:data:`equilibria.scaling.EVALUATORS`) the head kinds, and their own layer chooses among
them. :func:`register_family` adds a family of your own.

The small-config factories (:func:`small_ouro_config`, :func:`small_attractor_config` and each record's
``make_config``) build a config for a task's data: the task fixes the vocabulary or input width, the caller the
sizes.
"""

from .attractor import ATTRACTOR, small_attractor_config
from .eqr import EQR
from .ouro import OURO, small_ouro_config
from .phdeq import PHDEQ
from .record import (
    CAPABILITIES,
    FAMILIES,
    HEAD_KINDS,
    Family,
    Head,
    HeadKind,
    ServesFamiliesWith,
    add_family,
    families_with,
    family_record,
    loop_count,
    model_task,
    register_auto_classes,
    register_family,
    running_loops,
    serving,
)
from .transformers_lms import transformers_families

for _family in (OURO, ATTRACTOR, EQR, PHDEQ, *transformers_families()):
    add_family(_family)

__all__ = [
    "CAPABILITIES",
    "FAMILIES",
    "Family",
    "HeadKind",
    "HEAD_KINDS",
    "Head",
    "ServesFamiliesWith",
    "families_with",
    "family_record",
    "loop_count",
    "running_loops",
    "model_task",
    "register_auto_classes",
    "register_family",
    "serving",
    "small_attractor_config",
    "small_ouro_config",
]
