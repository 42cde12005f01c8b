"""The tasks by name: training and evaluation splits for ``equilibria train`` / ``eval`` / ``audit``, and what a task
fixes in a model's config (vocabulary, puzzle size, input width). A task is chosen by name (the one a model was
trained on is saved in its config as ``equilibria_task``), never guessed back from a config's sizes; a saved model
whose config does not fit the task named gets a ``ValueError`` saying what fits.

Held-out evaluation: a model folder written by ``equilibria train`` (or the demo) holds ``training_data.json``, a
fingerprint of every training question (:func:`save_training_record`); :func:`eval_split` draws fresh questions
and drops every one whose fingerprint is in it, so evaluation data never repeats a training question.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path

from datasets import Dataset, DatasetDict

from .addition import addition_tokenizer, build_addition_dataset, tokenize_for_training
from .embedding import EMBEDDING_SIZE, SentenceEmbedder, embed_entailment
from .entailment import build_entailment_dataset
from .held_out import held_out_record, hold_out, numbered, read_held_out, source_of
from .maze import build_maze_dataset
from .reachability import build_reachability_dataset, reachability_input_size
from .sudoku import build_sudoku_dataset
from .task_data import TaskData
from .tokenization import tokenizer_fields

TASKS = ("reachability", "entailment", "sudoku", "maze", "addition")
TRAINING_RECORD = "training_data.json"
PUZZLE_VOCAB = {"sudoku": 11, "maze": 6}  # the published encodings: digit + 1 / "# SGo" + 1, PAD = 0


def question_key(task: str, row: dict) -> str:
    """What makes a question the same question: the prompt (addition), the theory and question (entailment),
    the encoded input (puzzles, reachability graphs with their query)."""
    if task == "addition":
        return row["prompt"]
    if task == "entailment":
        return json.dumps([row["theory"], row["question"]])
    return json.dumps(row["inputs"])


def fingerprints(task: str, rows: Dataset) -> list[str]:
    """A 64-bit BLAKE2b fingerprint (hex) of each row's :func:`question_key`."""
    return [hashlib.blake2b(question_key(task, row).encode(), digest_size=8).hexdigest() for row in rows]


def save_training_record(folder: str | Path, task: str, fingerprints_: list[str], description: str, **extra) -> Path:
    """Write ``training_data.json`` into a model folder (after its weights): the task, what the training data was,
    its fingerprint, the fingerprint of the weights it produced, ``extra`` (for rows of your own: their ``source``
    and ``held_out`` rows, :func:`~equilibria.tasks.text_data.build_text_data`), and the fingerprint of every
    training question (what evaluation excludes)."""
    from ..provenance import data_fingerprint, weights_fingerprint

    path = Path(folder) / TRAINING_RECORD
    source = extra.get("source")
    if source and source.get("path") and Path(source["path"]).is_absolute():  # relative: the folder may move, or be
        extra = {**extra, "source": {**source, "path": os.path.relpath(source["path"], folder)}}  # published
    record = {
        "task": task,
        "description": description,
        "num_examples": len(fingerprints_),
        "fingerprint": data_fingerprint(fingerprints_),
        "weights": weights_fingerprint(folder),
        **extra,
    }
    path.write_text(json.dumps({**record, "fingerprints": sorted(set(fingerprints_))}) + "\n")
    return path


def load_training_record(folder: str | Path) -> dict | None:
    """The folder's ``training_data.json`` (``None`` when it has none)."""
    path = Path(folder) / TRAINING_RECORD
    return json.loads(path.read_text()) if path.is_file() else None


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
    described = {"addition": f"{digits}-digit addition", "reachability": f"{nodes}-node reachability"}
    what = described.get(task, f"{size}x{size} {task}" if task in PUZZLE_VOCAB else "entailment")
    description = f"{train_size} generated {what} problems (seed {seed})"
    if task == "addition":
        raw = build_addition_dataset(digits, train_size, test_size, seed=seed)
        tokenizer = addition_tokenizer()
        train = tokenize_for_training(raw["train"], tokenizer)
        prints = fingerprints(task, raw["train"])
        return TaskData(task, train, raw["test"], tokenizer_fields(tokenizer), tokenizer, prints, description)
    if task in PUZZLE_VOCAB:
        build = build_sudoku_dataset if task == "sudoku" else build_maze_dataset
        extra = {} if task == "sudoku" else {"min_path": size}
        data = build(size, train_size, test_size, seed=seed, **extra)
        fields = dict(vocab_size=PUZZLE_VOCAB[task], max_seq_len=size**2)
        return TaskData(task, data["train"], data["test"], fields, None, fingerprints(task, data["train"]), description)
    if task == "reachability":
        data = build_reachability_dataset(train_size, test_size, num_nodes=nodes, seed=seed)
        width = reachability_input_size(nodes)
    else:
        raw = build_entailment_dataset(train_size, test_size, seed=seed)
        embedder = SentenceEmbedder()
        data = {split: embed_entailment(raw[split], embedder) for split in ("train", "test")}
        width = 2 * embedder.dim
    prints = fingerprints(task, data["train"])
    train = data["train"].select_columns(["inputs", "labels"])
    return TaskData(task, train, data["test"], dict(input_size=width, num_labels=2), None, prints, description)


def task_splits(name: str, task: str, config_name: str | None = None) -> DatasetDict:
    """The splits of a file of yours holding rows of ``task``: a CSV in the published layout (Sudoku-Extreme,
    Maze-Hard; ``source,question,answer,rating``; one split, ``train``), or a data file / ``save_to_disk`` folder /
    Hub dataset whose rows have the task's ``inputs`` and ``labels`` columns. ``ValueError`` naming the file and what
    is missing."""
    from .maze import load_maze_csv
    from .row_files import load_rows
    from .sudoku import load_sudoku_csv

    check_task(task)
    if Path(name).suffix == ".csv" and task in PUZZLE_VOCAB and Path(name).is_file():
        return DatasetDict(train=(load_sudoku_csv if task == "sudoku" else load_maze_csv)(name))
    splits = load_rows(name, config_name)
    for rows in splits.values():
        missing = sorted({"inputs", "labels"} - set(rows.column_names))
        if missing:
            layout = " or a CSV in the published puzzle layout" if task in PUZZLE_VOCAB else ""
            raise ValueError(f"{name}: {task} rows need `inputs` and `labels` columns{layout}; missing {missing}")
    return splits


def load_task_rows(name: str, task: str, split: str | None = None, config_name: str | None = None):
    """``(rows, split)``: the numbered rows of one split of :func:`task_splits` (default ``test`` when there is
    one, else ``train``)."""
    splits = task_splits(name, task, config_name)
    split = split or ("test" if "test" in splits else "train")
    if split not in splits:
        raise ValueError(f"split {split!r} is not in {name} (splits: {sorted(splits)})")
    return numbered(splits[split]), split


def build_task_rows(
    name: str,
    task: str,
    *,
    config_name: str | None = None,
    train_split: str = "train",
    test_split: str = "test",
    test_size: int | None = None,
    train_size: int | None = None,
    seed: int = 0,
) -> TaskData:
    """Training and held-out splits of ``task`` from a file of yours (:func:`task_splits`), as
    :func:`~equilibria.tasks.text_data.build_text_data` splits rows of text: ``test_split`` when there is one, else
    ``test_size`` rows (default a tenth, 5 to 200) held out of the shuffled ``train_split``; held-out puzzles that
    are training puzzles dropped; ``record`` names the held-out rows so that evaluation reads them again."""
    splits = task_splits(name, task, config_name)
    keys = functools.partial(fingerprints, task)
    train, test, held_split, trained = hold_out(splits, train_split, test_split, test_size, train_size, seed, keys)
    source = {**source_of(name, config_name), "format": f"task:{task}", "task": task}
    where = "its test split" if held_split != train_split else "held out of it before training"
    held = f"{len(test)} {task} rows of {source['label']} ({where}), none a training question"
    record = {"source": source, **({"held_out": held_out_record(held_split, test, held)} if len(test) else {})}
    columns = ["inputs", "labels"]
    return TaskData(
        f"dataset:{name}",
        train.select_columns(columns),
        test,
        _row_fields(task, train, name),
        None,
        trained,
        f"{len(train)} {task} rows of {source['label']}",
        "task",
        held,
        record,
    )


def _row_fields(task: str, rows: Dataset, name: str) -> dict:
    """What rows of ``task`` fix in a new model's config: the board's cells and vocabulary (puzzles), the input
    width and the classes (reachability, entailment)."""
    widths = {len(x) for x in rows["inputs"]}
    if len(widths) != 1:
        raise ValueError(f"{name}: every {task} row must have as many inputs; found lengths {sorted(widths)}")
    width = widths.pop()
    if task in PUZZLE_VOCAB:
        return dict(vocab_size=PUZZLE_VOCAB[task], max_seq_len=width)
    return dict(input_size=width, num_labels=max(2, max(rows["labels"]) + 1))


def task_held_out_rows(record: dict, folder: str | Path | None = None) -> Dataset:
    """The held-out rows of a model (in ``folder``) trained on ``task`` rows of a file (:func:`build_task_rows`),
    read again; ``ValueError`` when the file has changed since."""
    source = record["source"]

    def read(location: str, split: str) -> Dataset:
        return load_task_rows(location, source["task"], split, source.get("config"))[0]

    return read_held_out(record, read, folder)


def eval_split(
    config, task: str, num: int, seed: int, digits: int = 2, exclude: set[str] | frozenset = frozenset()
) -> Dataset:
    """``num`` fresh test rows of ``task`` shaped for a model with this ``config`` (puzzle side from
    ``max_seq_len``, graph size from ``input_size``), none whose question fingerprint is in ``exclude`` (the
    model's training questions: :func:`load_training_record`). Fewer rows only when the task has no more
    distinct questions. ``ValueError`` when the config cannot read the task."""
    check_task(task)
    draw = _fresh_rows(config, task, seed, digits)
    rows, drawn, wanted = None, 0, num
    for _ in range(16):  # draw more until enough rows survive the exclusion (bisect down if the task runs out)
        try:
            candidates = draw(wanted)
        except ValueError:  # fewer distinct questions than asked for
            wanted = (drawn + wanted) // 2
            if wanted <= drawn:
                break
            continue
        keep = [i for i, key in enumerate(fingerprints(task, candidates)) if key not in exclude]
        rows, drawn = candidates.select(keep[:num]), wanted
        if len(rows) == num:
            break
        wanted = 2 * wanted + len(exclude)
    rows = draw(num) if rows is None else rows
    return embed_entailment(rows) if task == "entailment" else rows


def task_shape(config, task: str) -> dict:
    """What a model with this ``config`` reads of ``task``: ``{"size": side}`` (puzzles, from ``max_seq_len``),
    ``{"nodes": n}`` (reachability, from ``input_size``), else ``{}``; ``ValueError`` when it cannot read it."""
    if task in PUZZLE_VOCAB:
        side = math.isqrt(config.max_seq_len)
        vocab = PUZZLE_VOCAB[task]
        if side * side != config.max_seq_len or config.vocab_size != vocab:
            raise ValueError(
                f"a {task} model reads square boards with vocab_size {vocab}; this one has max_seq_len "
                f"{config.max_seq_len} and vocab_size {config.vocab_size}: pass the task it was trained on"
            )
        return {"size": side}
    if task == "reachability":
        nodes = (math.isqrt(9 + 4 * config.input_size) - 3) // 2  # input_size = n^2 + 3n
        if reachability_input_size(nodes) != config.input_size:
            raise ValueError(f"input_size {config.input_size} is not a reachability encoding (n^2 + 3n for n nodes)")
        return {"nodes": nodes}
    if task == "entailment" and config.input_size != 2 * EMBEDDING_SIZE:
        raise ValueError(
            f"an entailment model reads two MiniLM embeddings (input_size {2 * EMBEDDING_SIZE}); this one has "
            f"input_size {config.input_size}: pass the task it was trained on"
        )
    return {}


def _fresh_rows(config, task: str, seed: int, digits: int):
    """``draw(n)``: ``n`` raw test rows of ``task`` for this config (checked here); entailment rows unembedded."""
    shape = task_shape(config, task)
    if task == "addition":
        return lambda n: build_addition_dataset(digits, 1, n, seed=seed)["test"]
    if task == "sudoku":
        return lambda n: build_sudoku_dataset(shape["size"], 1, n, seed=seed)["test"]
    if task == "maze":
        return lambda n: build_maze_dataset(shape["size"], 1, n, seed=seed, min_path=shape["size"])["test"]
    if task == "reachability":
        return lambda n: build_reachability_dataset(1, n, num_nodes=shape["nodes"], seed=seed)["test"]
    return lambda n: build_entailment_dataset(1, n, seed=seed)["test"]


__all__ = [
    "PUZZLE_VOCAB",
    "build_task_rows",
    "load_task_rows",
    "task_held_out_rows",
    "task_splits",
    "TASKS",
    "TRAINING_RECORD",
    "TaskData",
    "build_task",
    "check_task",
    "eval_split",
    "fingerprints",
    "load_training_record",
    "save_training_record",
    "task_shape",
]
