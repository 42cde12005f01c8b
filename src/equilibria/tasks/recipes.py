"""The default recipe of every family and task ``equilibria train`` trains from scratch, and of fine-tuning a
checkpoint: the learning rate, batch, schedule, length, loop settings, sizes and data a run uses wherever no flag
(or config-file key) says otherwise.

``transformers.TrainingArguments``' own defaults (learning rate 5e-5, batch 8, three epochs) are made for
fine-tuning a pretrained model; a 0.3M-parameter looped model trained from scratch on generated problems learns
nothing useful with them. A recipe is a mapping from ``equilibria train`` flag names to values, so that it is
applied, shown (``--show_recipe``) and recorded (training history, model card) the way the flags are, and any flag
given explicitly overrides it. What each documented recipe delivers on seeds 0-2 is measured by
``benchmarks/recipes.py`` into ``docs/results/recipes.json``; the pages state that range.

Each family's record declares its recipes (``Family.recipes``, built from the settings here), and they join
:data:`RECIPES` with it. Layers above choose: :func:`recipe_for` takes the family's ``model_type`` (a string: this
module names no family), the task (or :data:`~equilibria.tasks.named_splits.ROWS_TASK` for rows of your own) and
whether a checkpoint is fine-tuned (with LoRA or not).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Recipe:
    """One recipe: its ``name`` (in a family's record, the task it trains, ``"addition"``; in :data:`RECIPES`,
    ``"<model type>/<task>"``; ``"fine-tune/lora"``), what it is for (``summary``) and
    ``settings``, ``{flag name: value}`` of ``equilibria train`` (``TrainingArguments`` fields, the family trainer's
    own options, the new model's sizes and the generated data's sizes)."""

    name: str
    summary: str
    settings: Mapping[str, object] = field(default_factory=dict)
    sized: tuple[str, ...] = ()  # settings made for the recipe's board --size only (its puzzle data)

    def __post_init__(self):
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))

    def at_size(self, size: int | None) -> Recipe:
        """This recipe for a run at board ``size`` (``None``: not given, the recipe's own). At another size the
        settings made for the recipe's (:attr:`sized`, e.g. ``min_clues``) are left out, the defaults hold for
        them, and the summary says so."""
        own = self.settings.get("size")
        if size is None or own is None or size == own or not self.sized:
            return self
        note = f"; at --size {size} without its settings for size {own} ({', '.join('--' + k for k in self.sized)})"
        kept = {k: v for k, v in self.settings.items() if k not in self.sized}
        return Recipe(self.name, self.summary + note, kept)

    def overrides(self, values: Mapping[str, object]) -> dict:
        """``{flag: value}`` of ``values`` (what a run used) that differ from this recipe's settings."""
        return {k: values[k] for k, v in self.settings.items() if k in values and not same_value(values[k], v)}

    def describe(self, values: Mapping[str, object] | None = None) -> list[str]:
        """Lines for ``--show_recipe`` and the start of a run: each setting, and where ``values`` (what a run
        uses) differs, the value used and the recipe's."""
        values = values or {}
        changed = self.overrides(values)
        width = max((len(k) for k in self.settings), default=0)
        lines = [f"recipe {self.name}: {self.summary}"]
        for key, value in self.settings.items():
            shown = f"{_plain(changed[key])} (given; the recipe's {_plain(value)})" if key in changed else _plain(value)
            lines.append(f"  --{key:<{width}}  {shown}")
        return lines


def same_value(value, wanted) -> bool:
    """Whether a value is a recipe's (enums compared by value, numbers within rounding); the presets of the
    trainers' arguments compare the same way."""
    value = getattr(value, "value", value)
    if isinstance(wanted, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return math.isclose(value, wanted, rel_tol=1e-9, abs_tol=1e-12)
    return value == wanted


def _plain(value) -> str:
    value = getattr(value, "value", value)
    return f"{value:g}" if isinstance(value, float) else str(value)


# From scratch: AdamW at 1e-3 with a short warm-up and a cosine decay, batch 64, clipped gradients; each recipe
# below adds its length, loop settings and data. Logging: ten points per run (train sets logging_steps 0.1).
SCRATCH = {
    "learning_rate": 1e-3,
    "per_device_train_batch_size": 64,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.05,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
}
# a looped LM trained at one loop count (STARS' sampling and penalty off): what its loop-scaling table is read against.
# 2e-3 learns the sums in fewer steps than 1e-3. Each recipe below sets its length; what they give on seeds nobody
# chose them on is in docs/results/recipes.json (docs/cli.md#recipes).
LOOPED_LM_ADDITION = {
    **SCRATCH,
    "learning_rate": 2e-3,
    "max_steps": 2000,
    "train_size": 8000,
    "num_loops": 4,
    "min_loops": 4,
    "max_loops": 4,
    "jsrr_weight": 0.0,
}
# Validation during training: every 250 steps the validation split (200 problems apart from the training and test
# splits) is scored at the trained loop count and the run ends with the best checkpoint (of equal ones, the later);
# the test split is read once, after training
VALIDATED = {
    "eval_strategy": "steps",
    "eval_steps": 250,
    "save_strategy": "best",
    "save_total_limit": 1,
    "load_best_model_at_end": True,
}
UNTIL_TARGET = {**VALIDATED, "validation_target": 0.99}  # and stops once validation reaches 99%


# 6x6 Sudoku puzzles of at least 18 clues, each with 2 symmetric variants (EqR's recipe; the Attractor's puzzle recipe
# reads the same puzzles)
SUDOKU_DATA = {"size": 6, "train_size": 3000, "min_clues": 18, "augmentations": 2, "eval_loops": "1,2,4,8,16,32"}
SUDOKU_SIZED = ("train_size", "min_clues", "augmentations")  # another --size: the defaults (4x4 has 16 cells)


def scratch_recipe(task: str, summary: str, sized: tuple[str, ...] = (), **settings) -> Recipe:
    """A family's recipe for ``task`` of the generic settings, not tuned for its family and task (docs/cli.md#recipes:
    what they give)."""
    return Recipe(task, f"{summary} (generic settings, untuned; what they give: docs/cli.md#recipes)",
                  {**SCRATCH, **settings}, sized)  # fmt: skip


def looped_lm_recipe(task: str, summary: str, **settings) -> Recipe:
    """A looped LM's recipe for ``task``: the looped-LM addition settings, with ``settings`` on top."""
    return Recipe(task, summary, {**LOOPED_LM_ADDITION, **settings})


#: every family's recipes by (model type, task), each named "<model type>/<task>": the recipes a family's record
#: declares (``Family.recipes``), added with the record (the package's at import, a registered family's by
#: ``register_family``). Puzzles: the smallest boards whose generators have classes enough for a test split held out
#: by class (4x4 Sudoku has 36 classes up to symmetry, 7x7 mazes too few: `--size 4 --split_by board` is a
#: memorisation check)
RECIPES: dict[tuple[str, str], Recipe] = {}


def add_recipes(model_type: str, recipes: tuple[Recipe, ...]) -> None:
    """Add a family's recipes (each named by its task) to :data:`RECIPES`, named ``"<model_type>/<task>"``."""
    for recipe in recipes:
        RECIPES[model_type, recipe.name] = dataclasses.replace(recipe, name=f"{model_type}/{recipe.name}")


# Fine-tuning a checkpoint (--model_name_or_path) on your rows or a task: with LoRA or all weights; no warm-up (the
# weights are trained already, and the first step moves them)
FINE_TUNE_RECIPES: dict[str, Recipe] = {
    "lora": Recipe(
        "fine-tune/lora",
        "LoRA on a checkpoint: a LoRA-sized learning rate, a cosine decay, validated every 250 steps",
        {"learning_rate": 1e-3, "lr_scheduler_type": "cosine", "warmup_steps": 0, "weight_decay": 0.0, **UNTIL_TARGET},
    ),
    "full": Recipe(
        "fine-tune/full",
        "all the weights of a checkpoint: a small learning rate, a cosine decay, validated every 250 steps",
        {
            "learning_rate": 1e-4,
            "lr_scheduler_type": "cosine",
            "warmup_steps": 0,
            "weight_decay": 0.01,
            **UNTIL_TARGET,
        },
    ),
}


def recipe_for(model_type: str, task: str | None, fine_tune: bool = False, lora: bool = False) -> Recipe | None:
    """The recipe ``equilibria train`` uses: fine-tuning a checkpoint (``fine_tune``; with LoRA or not) whatever
    the task, else the family's recipe for ``task``; ``None`` where there is none (a new model on rows of your own:
    the flags decide)."""
    if fine_tune:
        return FINE_TUNE_RECIPES["lora" if lora else "full"]
    return RECIPES.get((model_type, task))


__all__ = [
    "FINE_TUNE_RECIPES",
    "RECIPES",
    "Recipe",
    "add_recipes",
    "looped_lm_recipe",
    "recipe_for",
    "same_value",
    "scratch_recipe",
]
