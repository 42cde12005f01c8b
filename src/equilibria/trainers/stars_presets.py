"""STARS recipes as presets of :class:`~equilibria.trainers.StarsTrainingArguments`: every choice of a published or
packaged recipe at once, so that a result says which recipe made it.

A preset has two parts:

* ``stars``: the STARS options (the loop sampler and how its draws are keyed, the penalty's form, estimator, probe,
  weight and warm-up). ``StarsTrainingArguments(stars_preset=NAME)`` applies them to every option left unset
  (``None``); an option given explicitly overrides the preset.
* ``training``: the recipe's optimiser, schedule, length and batch (plain ``TrainingArguments`` options, whose
  defaults cannot tell "unset" from "set"). :meth:`StarsTrainingArguments.from_preset` and ``equilibria train
  --stars_preset NAME`` apply them as defaults under the arguments given.

``StarsTrainingArguments.recipe()`` returns the preset and every option whose value differs from it (the
overrides), which the training record and the model card name.

The presets (``docs/stars.md`` has the table and the sources):

* ``reference_addition``: the STARS reference code's addition experiment (``train_addition/``, njuyxw/STARS).
* ``reference_ouro``: the STARS reference code's Ouro-1.4B fine-tuning (``ouro_experiment/``).
* ``equilibria``: the recipe of this package's STARS numbers before the presets existed (the addition benchmark's
  defaults up to release 0.2).
"""

from __future__ import annotations

import math

# The STARS options every preset sets; "defaults" are the values of arguments made without a preset
STARS_OPTIONS = (
    "min_loops",
    "max_loops",
    "loop_log_mean",
    "loop_log_std",
    "loop_draws",
    "jsrr_weight",
    "jsrr_power_iters",
    "jsrr_estimator",
    "jsrr_probe",
    "jsrr_penalty",
    "jsrr_target",
    "jsrr_warmup_steps",
    "jsrr_sample_fraction",
    "jsrr_state",
)

DEFAULTS = {
    "min_loops": 1,
    "max_loops": 16,
    "loop_log_mean": 1.7,
    "loop_log_std": 0.4,
    "loop_draws": "per_step",
    "jsrr_weight": 0.1,
    "jsrr_power_iters": 4,
    "jsrr_estimator": "vjp",
    "jsrr_probe": "sequence",
    "jsrr_penalty": "square",
    "jsrr_target": 1.0,
    "jsrr_warmup_steps": 0,
    "jsrr_sample_fraction": 1.0,
    "jsrr_state": "final",
}

# The published code's penalty: one vector-Jacobian product at the detached final state, of a Gaussian vector
# normalised over the whole micro-batch's state tensor; the penalty is the product's squared norm
_REFERENCE_PENALTY = {
    "jsrr_weight": 0.1,
    "jsrr_power_iters": 1,
    "jsrr_estimator": "vjp",
    "jsrr_probe": "batch",
    "jsrr_penalty": "square",
    "jsrr_target": 1.0,
    "jsrr_sample_fraction": 1.0,
    "jsrr_state": "final",
    "loop_draws": "per_micro_batch",
}

PRESETS: dict[str, dict[str, dict]] = {
    "reference_addition": {
        "stars": {
            **_REFERENCE_PENALTY,
            "min_loops": 1,
            "max_loops": 100,
            "loop_log_mean": 2.0,
            "loop_log_std": 0.7,
            "jsrr_warmup_steps": 2001,  # the code's `step > 2000` on a 0-based step: on from the 2002nd step
        },
        "training": {
            "learning_rate": 1e-4,
            "adam_beta1": 0.9,
            "adam_beta2": 0.999,
            "weight_decay": 0.01,
            "lr_scheduler_type": "cosine",
            "warmup_steps": 2000,
            "max_grad_norm": 0.0,  # no clipping
            "max_steps": 10000,
            "per_device_train_batch_size": 512,
        },
    },
    "reference_ouro": {
        "stars": {
            **_REFERENCE_PENALTY,
            "min_loops": 1,
            "max_loops": 16,
            "loop_log_mean": 1.7,
            "loop_log_std": 0.4,
            "jsrr_warmup_steps": 0,
        },
        "training": {
            "learning_rate": 1e-6,
            "adam_beta1": 0.9,
            "adam_beta2": 0.95,
            "weight_decay": 0.0,
            "lr_scheduler_type": "warmup_stable_decay",
            "warmup_steps": 0.1,
            "lr_decay_fraction": 0.1,
            "lr_scheduler_kwargs": {"min_lr_ratio": 0.001},
            "max_grad_norm": 1e6,  # the code's threshold: in effect no clipping
        },
    },
    "equilibria": {
        "stars": {
            "min_loops": 2,
            "max_loops": 16,
            "loop_log_mean": math.log(5),
            "loop_log_std": 0.5,
            "loop_draws": "per_step",
            "jsrr_weight": 0.1,
            "jsrr_power_iters": 4,
            "jsrr_estimator": "vjp",
            "jsrr_probe": "sequence",
            "jsrr_penalty": "hinge",
            "jsrr_target": 0.9,
            "jsrr_warmup_steps": 1000,
            "jsrr_sample_fraction": 1.0,
            "jsrr_state": "final",
        },
        "training": {
            "learning_rate": 1e-3,
            "weight_decay": 0.01,
            "lr_scheduler_type": "cosine",
            "warmup_steps": 0.05,
            "max_grad_norm": 1.0,
            "max_steps": 4500,
            "per_device_train_batch_size": 64,
        },
    },
}

STARS_PRESETS = tuple(PRESETS)


def preset_values(name: str | None, part: str) -> dict:
    """The ``part`` (``"stars"`` or ``"training"``) of preset ``name``; for ``None`` the STARS defaults and no
    training options."""
    if name is None:
        return dict(DEFAULTS) if part == "stars" else {}
    if name not in PRESETS:
        raise ValueError(f"stars_preset must be one of {STARS_PRESETS} or None, got {name!r}")
    return dict(PRESETS[name][part])


__all__ = ["DEFAULTS", "PRESETS", "STARS_OPTIONS", "STARS_PRESETS", "preset_values"]
