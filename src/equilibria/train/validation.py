"""``equilibria train``'s validation: the validation split scored during training (every ``--eval_steps`` under
``--eval_strategy steps``) by the measure the loop-scaling evaluation scores the test split with, at one loop count,
so that ``Trainer``'s ``load_best_model_at_end`` keeps the best checkpoint and ``--validation_target`` stops the run;
and what the finished run's folder keeps of it (which step's weights, and why; no ``checkpoint-N`` folders)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

from ..families import family_record, model_task
from ..scaling import Scoring, loop_scores, metric_label
from ..trainers.common import Validation
from ..wording import counted


def validation_for(
    model, data, loops: int | None = None, target: float | None = None, task: str | None = None
) -> Validation | None:
    """The :class:`~equilibria.trainers.common.Validation` of a run on ``data`` (``None`` when it has no validation
    split): ``data.validation`` scored at ``loops`` (``--validation_loops``; default the model's config's count) as
    the test split is scored after training (``task``: the generated task, for the words), stopping at ``target``
    (``--validation_target``); ``ValueError`` when no validation row is left (every one repeats a training
    question)."""
    rows = data.validation
    if rows is None:
        return None
    if not len(rows):
        raise ValueError(
            "no validation row is left (each one held out repeats a training question): give more rows, or "
            "--eval_strategy no"
        )
    family = family_record(model)
    loops = loops or getattr(model.config, family.loops_key)
    tokenizer = copy.deepcopy(data.tokenizer) if data.tokenizer is not None else None  # scoring pads it on the left
    scoring = Scoring(metric=data.metric, tokenizer=tokenizer)

    def score(trained) -> float:
        return loop_scores(trained, rows, [loops], scoring).accuracy[loops]

    unit = "validation problem" if data.prompts is not None or data.tokenizer is None else "validation row"
    what = f"{metric_label(data.metric, task or model_task(model))} at {loops} loops on {counted(len(rows), unit)}"
    return Validation(score, what, target)


def remove_checkpoints(folder: str | Path) -> list[str]:
    """Remove the ``checkpoint-N`` folders a finished run left in ``folder`` (the Trainer's, for resuming); their
    names."""
    removed = sorted(path.name for path in Path(folder).glob("checkpoint-*") if path.is_dir())
    for name in removed:
        shutil.rmtree(Path(folder) / name)
    return removed


__all__ = ["remove_checkpoints", "validation_for"]
