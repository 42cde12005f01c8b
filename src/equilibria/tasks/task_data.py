"""The splits a training run reads (:class:`TaskData`), whoever builds them: a generated task
(:func:`~equilibria.tasks.build_task`) or rows of your own (:func:`~equilibria.tasks.text_data.build_text_data`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from datasets import Dataset
from transformers import PreTrainedTokenizerBase


@dataclass
class TaskData:
    """A task's splits and what it fixes in a model config (``config_fields``; for text, also the tokenizer).
    ``metric`` is how the loop-scaling evaluation scores ``test``: ``"task"`` (the task's own measure), or for
    rows of your own (:func:`~equilibria.tasks.text_data.build_text_data`) ``"token_accuracy"`` or
    ``"exact_match"``; ``test_description`` says what the test rows are; ``record``: what the training record
    (:func:`save_training_record`) adds for rows of your own (their source and which are held out); ``prompts``: the
    training rows untokenised (``prompt``, ``answer``) of a generated text task, for reinforcement learning;
    ``validation``: rows held out like ``test`` and in its form, that training is validated on (``None``: none)."""

    name: str
    train: Dataset
    test: Dataset
    config_fields: dict = field(default_factory=dict)
    tokenizer: PreTrainedTokenizerBase | None = None
    train_fingerprints: list[str] = field(default_factory=list)
    description: str = ""
    metric: str = "task"
    test_description: str = ""
    record: dict = field(default_factory=dict)
    prompts: Dataset | None = None  # a generated text task's training rows as drawn (prompt, answer): what RL reads
    validation: Dataset | None = None


__all__ = ["TaskData"]
