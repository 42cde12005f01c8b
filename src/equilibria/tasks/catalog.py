"""The tasks by name: training and evaluation splits for ``equilibria train`` / ``eval`` / ``audit``, and what a task
fixes in a model's config (vocabulary, puzzle size, input width). A task is chosen by name (the one a model was
trained on is saved in its config as ``equilibria_task``), never guessed back from a config's sizes; a saved model
whose config does not fit the task named gets a ``ValueError`` saying what fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from .addition import addition_tokenizer, build_addition_dataset, tokenize_for_training
from .embedding import EMBEDDING_SIZE, SentenceEmbedder, embed_entailment
from .entailment import build_entailment_dataset
from .maze import build_maze_dataset
from .reachability import build_reachability_dataset, reachability_input_size
from .sudoku import build_sudoku_dataset
from .tokenization import tokenizer_fields

TASKS = ("reachability", "entailment", "sudoku", "maze", "addition")
PUZZLE_VOCAB = {"sudoku": 11, "maze": 6}  # the published encodings: digit + 1 / "# SGo" + 1, PAD = 0


@dataclass
class TaskData:
    """A task's splits and what it fixes in a model config (``config_fields``; for text, also the tokenizer)."""

    name: str
    train: Dataset
    test: Dataset
    config_fields: dict = field(default_factory=dict)
    tokenizer: PreTrainedTokenizerBase | None = None


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return task


def build_task(
    task: str, train_size: int, test_size: int, seed: int, digits: int = 2, size: int = 4, nodes: int = 16
) -> TaskData:
    """Fresh training and test splits of ``task``: ``digits`` (addition operands), ``size`` (sudoku / maze side),
    ``nodes`` (reachability graphs). The training split is tokenised for text tasks; the test split is raw."""
    check_task(task)
    if task == "addition":
        raw = build_addition_dataset(digits, train_size, test_size, seed=seed)
        tokenizer = addition_tokenizer()
        train = tokenize_for_training(raw["train"], tokenizer)
        return TaskData(task, train, raw["test"], tokenizer_fields(tokenizer), tokenizer)
    if task in PUZZLE_VOCAB:
        build = build_sudoku_dataset if task == "sudoku" else build_maze_dataset
        extra = {} if task == "sudoku" else {"min_path": size}
        data = build(size, train_size, test_size, seed=seed, **extra)
        return TaskData(task, data["train"], data["test"], dict(vocab_size=PUZZLE_VOCAB[task], max_seq_len=size**2))
    if task == "reachability":
        data = build_reachability_dataset(train_size, test_size, num_nodes=nodes, seed=seed)
        width = reachability_input_size(nodes)
    else:
        raw = build_entailment_dataset(train_size, test_size, seed=seed)
        embedder = SentenceEmbedder()
        data = {split: embed_entailment(raw[split], embedder) for split in ("train", "test")}
        width = 2 * embedder.dim
    train = data["train"].select_columns(["inputs", "labels"])
    return TaskData(task, train, data["test"], dict(input_size=width, num_labels=2))


def eval_split(config, task: str, num: int, seed: int, digits: int = 2) -> Dataset:
    """``num`` fresh test rows of ``task`` shaped for a model with this ``config`` (puzzle side from
    ``max_seq_len``, graph size from ``input_size``); ``ValueError`` when the config cannot read the task."""
    check_task(task)
    if task == "addition":
        return build_addition_dataset(digits, 1, num, seed=seed)["test"]
    if task in PUZZLE_VOCAB:
        side = math.isqrt(config.max_seq_len)
        vocab = PUZZLE_VOCAB[task]
        if side * side != config.max_seq_len or config.vocab_size != vocab:
            raise ValueError(
                f"a {task} model reads square boards with vocab_size {vocab}; this one has max_seq_len "
                f"{config.max_seq_len} and vocab_size {config.vocab_size}: pass the task it was trained on"
            )
        if task == "sudoku":
            return build_sudoku_dataset(side, 1, num, seed=seed)["test"]
        return build_maze_dataset(side, 1, num, seed=seed, min_path=side)["test"]
    if task == "reachability":
        nodes = (math.isqrt(9 + 4 * config.input_size) - 3) // 2  # input_size = n^2 + 3n
        if reachability_input_size(nodes) != config.input_size:
            raise ValueError(f"input_size {config.input_size} is not a reachability encoding (n^2 + 3n for n nodes)")
        return build_reachability_dataset(1, num, num_nodes=nodes, seed=seed)["test"]
    if config.input_size != 2 * EMBEDDING_SIZE:
        raise ValueError(
            f"an entailment model reads two MiniLM embeddings (input_size {2 * EMBEDDING_SIZE}); this one has "
            f"input_size {config.input_size}: pass the task it was trained on"
        )
    return embed_entailment(build_entailment_dataset(1, num, seed=seed)["test"])


__all__ = ["PUZZLE_VOCAB", "TASKS", "TaskData", "build_task", "check_task", "eval_split"]
