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
import os
from pathlib import Path

from datasets import Dataset, DatasetDict

from .addition import tokenize_for_training
from .held_out import held_out_counts, held_out_record, hold_out, numbered, read_held_out, source_of
from .registry import TASK_RECORDS, TASKS, Task, task_record
from .row_files import load_rows
from .task_data import TaskData
from .tokenization import tokenizer_fields

TRAINING_RECORD = "training_data.json"


def question_key(task: str, row: dict) -> str:
    """What makes a question the same question (the task record's :attr:`~equilibria.tasks.registry.Task.question`):
    the prompt (addition), the theory and question (entailment), the encoded input (puzzles, reachability graphs
    with their query)."""
    return task_record(task).question(row)


def fingerprints(task: str, rows: Dataset) -> list[str]:
    """A 64-bit BLAKE2b fingerprint (hex) of each row's :func:`question_key`."""
    return [hashlib.blake2b(question_key(task, row).encode(), digest_size=8).hexdigest() for row in rows]


def class_fingerprints(task: str, rows: Dataset) -> list[str]:
    """A 64-bit fingerprint (hex) of each row's class key under the task's symmetries (its record's ``class_key``:
    a canonical form, or at 9x9 Sudoku an invariant, so a shared fingerprint may rarely join two classes); ``[]``
    for a task without symmetries."""
    key = task_record(task).class_key
    if key is None:
        return []
    return [hashlib.blake2b(str(key(row)).encode(), digest_size=8).hexdigest() for row in rows]


def class_record(task: str, train: Dataset, test: Dataset, split_by: str = "class") -> dict:
    """What a training record keeps of a puzzle task's classes (``{}`` for a task without symmetries): the split's
    :func:`split_census` and, unless the split was drawn by board (a memorisation check, ``split_by="board"``,
    which evaluation then follows), the training puzzles' class fingerprints, which evaluation excludes."""
    if task_record(task).class_key is None:
        return {}
    census = {"split_census": split_census(task, train, test)}
    if split_by == "board":
        return {**census, "split_by": "board"}
    return {**census, "class_fingerprints": sorted(set(class_fingerprints(task, train)))}


def split_census(task: str, train: Dataset, test: Dataset) -> dict:
    """How far ``test`` is held out from ``train`` up to the task's symmetries (its record's classes,
    :meth:`~equilibria.tasks.registry.Task.classes`; the exact question for a task without symmetries): the classes
    in each split and how many test rows fall in a training class. ``held_out`` is False when any does: results on
    such a split are a memorisation check, not evidence of generalisation."""
    record = task_record(task)
    up_to = "the task's symmetries" if record.class_key is not None else "the exact question"
    seen, tested = record.classes(), record.classes()
    for row in train:
        seen.add(row)
    shared = 0
    for row in test:
        shared += seen.find(row)
        tested.add(row)
    return {
        "up_to": up_to,
        "train_rows": len(train),
        "train_classes": len(seen),
        "test_rows": len(test),
        "test_classes": len(tested),
        "test_rows_in_training_classes": shared,
        "held_out": shared == 0,
    }


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


# ``config.equilibria_task`` of a language model whose last training stage read rows of text of your own
# (``--dataset_name``): no generated task is its task, so nothing is evaluated on one unless asked (``--task``)
ROWS_TASK = "rows"


def trained_on_rows(config, record: dict | None = None) -> bool:
    """Whether the last training stage of a model (its ``config``, and its folder's training ``record`` when it has
    one) read rows of text of your own rather than a task's problems: the config says so (``equilibria_task`` is
    :data:`ROWS_TASK`, written since 0.2), or the record names such rows (folders written before)."""
    if getattr(config, "equilibria_task", None) == ROWS_TASK:
        return True
    from .text_data import FORMATS

    source = (record or {}).get("source") or {}
    return source.get("format") in FORMATS


def held_out_split(record: dict | None) -> str | None:
    """Which split the held-out rows a training ``record`` names come from, for a result's ``split``: the split's
    name when the data had a split of its own for them (``test``), else ``"train, held out before training"``
    (rows kept out of the training split); ``None`` when the record names no held-out rows."""
    held = (record or {}).get("held_out")
    if not held:
        return None
    train = record.get("train_split", "train")  # recorded since 0.2; "train", the default, before
    return f"{held['split']}, held out before training" if held["split"] == train else held["split"]


def check_task(task: str) -> str:
    """``task``, when it is the name of a task (:data:`~equilibria.tasks.registry.TASK_RECORDS`), else ``ValueError``
    naming the tasks there are."""
    return task_record(task).name


def build_task(
    task: str,
    train_size: int,
    test_size: int,
    seed: int,
    digits: int = 2,
    size: int = 4,
    nodes: int = 16,
    split_by: str = "class",
    options: dict | None = None,
    validation_size: int = 0,
) -> TaskData:
    """Fresh training and test splits of ``task``: ``digits`` (addition operands), ``size`` (sudoku / maze side),
    ``nodes`` (reachability graphs): the one the task's record names as its ``shape_option``. Puzzle test splits
    are held out up to the task's symmetries (``split_by="class"``) or only by board (``"board"``: a memorisation
    check, :meth:`~equilibria.tasks.registry.Task.draw`). ``options``: the task's format options (addition:
    ``reverse_answer``), kept in the training record (``generator``) with the shape, so that evaluation draws
    problems of the same kind. The training split is tokenised for text tasks; the test split is raw (puzzles and
    classification tasks: their ``inputs``). ``validation_size``: a validation split of that many problems as well
    (:func:`validation_split`), raw like the test split, its questions recorded (``validation_fingerprints``) so
    that no later evaluation draws them."""
    record = task_record(task)
    shape = {"digits": digits, "size": size, "nodes": nodes}.get(record.shape_option)
    options = record.check_options(options)
    raw = record.draw(shape, train_size, test_size, seed, split_by, options)
    prints = fingerprints(task, raw["train"])
    description = f"{train_size} generated {record.describe(shape, **options)} problems (seed {seed})"
    extra = class_record(task, raw["train"], raw["test"], split_by)
    if record.shape_option is not None:
        extra["generator"] = {record.shape_option: shape, **options}
    validation = validation_split(task, shape, raw, validation_size, seed, split_by, options)
    if validation is not None:
        extra["validation_fingerprints"] = sorted(set(fingerprints(task, validation)))
    if record.tokenizer is not None:
        tokenizer = record.tokenizer(**options)
        train = tokenize_for_training(raw["train"], tokenizer)
        fields = tokenizer_fields(tokenizer)
        return TaskData(
            task, train, raw["test"], fields, tokenizer, prints, description, record=extra, prompts=raw["train"],
            validation=validation,
        )  # fmt: skip
    train, test = (record.prepare(raw[split]) if record.prepare else raw[split] for split in ("train", "test"))
    if validation is not None and record.prepare:
        validation = record.prepare(validation)
    fields = record.config_fields(train, f"generated {task}")
    columns = train.select_columns(["inputs", "labels"])
    return TaskData(task, columns, test, fields, None, prints, description, record=extra, validation=validation)


VALIDATION_SEED_OFFSET = 1_000_000  # a validation split is drawn with the run's data seed plus this


def validation_split(
    task: str, shape, raw: DatasetDict, size: int, seed: int, split_by: str = "class", options: dict | None = None
) -> Dataset | None:
    """``size`` fresh raw problems of ``task`` held out like the test split of ``raw`` (the splits drawn with
    ``seed``): none a training or test question and, for puzzles split by class, none in a training or test
    puzzle's class; drawn with ``seed + VALIDATION_SEED_OFFSET``. ``None`` for ``size`` 0; ``ValueError`` when the
    task has no problem left for it."""
    if not size:
        return None
    exclude = set(fingerprints(task, raw["train"])) | set(fingerprints(task, raw["test"]))
    classes = set()
    if split_by == "class":
        classes = set(class_fingerprints(task, raw["train"])) | set(class_fingerprints(task, raw["test"]))
    rows = fresh_rows(
        task_record(task), shape, size, seed + VALIDATION_SEED_OFFSET, exclude, classes, split_by, options
    )
    if not len(rows):
        raise ValueError(
            f"--validation_size {size}: no {task} problem of this size is left apart from the training and test "
            "splits; make them smaller or pass --validation_size 0"
        )
    return rows


def task_splits(name: str, task: str, config_name: str | None = None) -> DatasetDict:
    """The splits of a file of yours holding rows of ``task``: a CSV in the published layout (Sudoku-Extreme,
    Maze-Hard; ``source,question,answer,rating``; one split, ``train``), or a data file / ``save_to_disk`` folder /
    Hub dataset whose rows have the task's ``inputs`` and ``labels`` columns. ``ValueError`` naming the file and what
    is missing."""
    record = task_record(task)
    if record.load_published and Path(name).suffix == record.published_suffix and Path(name).is_file():
        return DatasetDict(train=record.load_published(name))
    splits = load_rows(name, config_name)
    for rows in splits.values():
        missing = sorted({"inputs", "labels"} - set(rows.column_names))
        if missing:
            layout = f" or a {record.published_format}" if record.load_published else ""
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
    validation_size: int | None = 0,
) -> TaskData:
    """Training and held-out splits of ``task`` from a file of yours (:func:`task_splits`), as
    :func:`~equilibria.tasks.text_data.build_text_data` splits rows of text: ``test_split`` when there is one, else
    ``test_size`` rows (default a tenth, 5 to 200) held out of the shuffled ``train_split``; held-out puzzles that
    are training puzzles, or (a task with symmetries) in a training puzzle's class, dropped; ``record`` names the
    held-out rows so that evaluation reads them again. ``validation_size`` rows of ``train_split`` (``None``: a
    tenth, 5 to 200) are held out the same way for validation during training."""
    splits = task_splits(name, task, config_name)
    keys = functools.partial(fingerprints, task)
    train, test, held_split, trained, held, validation = hold_out(
        splits, train_split, test_split, test_size, train_size, seed, keys, validation_size
    )
    classes, distinct = set(class_fingerprints(task, train)), len(test)

    def unseen_classes(rows: Dataset) -> Dataset:  # held out up to symmetry: a rotated maze is the same puzzle
        return rows.select([i for i, key in enumerate(class_fingerprints(task, rows)) if key not in classes])

    if classes:
        test = unseen_classes(test)
        validation = unseen_classes(validation) if validation is not None else None
    source = {**source_of(name, config_name), "format": f"task:{task}", "task": task}
    where = "its test split" if held_split != train_split else "held out of it before training"
    none = "none a training question" + (" nor in a training puzzle's class" if classes else "")
    what = f"{len(test)} {task} rows of {source['label']} ({where}), {none}"
    record = {"source": source, **({"held_out": held_out_record(held_split, test, what)} if len(test) else {})}
    if held:
        record["held_out_counts"] = held_out_counts(held, len(test), distinct - len(test))
    record.update(class_record(task, train, test))
    if validation is not None:
        record["validation_fingerprints"] = sorted(set(keys(validation)))
    columns = ["inputs", "labels"]
    return TaskData(
        f"dataset:{name}",
        train.select_columns(columns),
        test,
        task_record(task).config_fields(train, name),
        None,
        trained,
        f"{len(train)} {task} rows of {source['label']}",
        "task",
        what,
        record,
        validation=validation,
    )


def task_held_out_rows(record: dict, folder: str | Path | None = None) -> Dataset:
    """The held-out rows of a model (in ``folder``) trained on ``task`` rows of a file (:func:`build_task_rows`),
    read again; ``ValueError`` when the file has changed since."""
    source = record["source"]

    def read(location: str, split: str) -> Dataset:
        return load_task_rows(location, source["task"], split, source.get("config"))[0]

    return read_held_out(record, read, folder)


def eval_split(
    config,
    task: str,
    num: int,
    seed: int,
    digits: int = 2,
    exclude: set[str] | frozenset = frozenset(),
    exclude_classes: set[str] | frozenset = frozenset(),
    split_by: str = "class",
    options: dict | None = None,
) -> Dataset:
    """``num`` fresh test rows of ``task`` shaped for a model with this ``config`` (puzzle side from
    ``max_seq_len``, graph size from ``input_size``), none whose question fingerprint is in ``exclude`` (the
    model's training questions: :func:`load_training_record`) or whose class fingerprint is in ``exclude_classes``
    (:func:`class_fingerprints` of the training puzzles). Puzzles are drawn distinct by class (``split_by="class"``)
    or by board (``"board"``, for a model whose training split was: a memorisation check). Fewer rows only when the
    task has no more distinct questions; ``options``: the task's format options (:func:`build_task`). ``ValueError``
    when the config cannot read the task."""
    record = task_record(task)
    shape = record.shape_of(config)
    shape = {"digits": digits}.get(record.shape_option) if shape is None else shape
    rows = fresh_rows(record, shape, num, seed, exclude, exclude_classes, split_by, options)
    return record.prepare(rows) if record.prepare else rows


def fresh_rows(
    record: Task,
    shape,
    num: int,
    seed: int,
    exclude: set[str] | frozenset = frozenset(),
    exclude_classes: set[str] | frozenset = frozenset(),
    split_by: str = "class",
    options: dict | None = None,
) -> Dataset:
    """``num`` raw rows of the task ``record`` at ``shape`` drawn with ``seed``, distinct by class or by board
    (``split_by``), none whose question fingerprint is in ``exclude`` or whose class fingerprint is in
    ``exclude_classes``; fewer only when the task has no more distinct questions."""
    task = record.name

    def draw(n: int) -> Dataset:
        return record.draw(shape, 1, n, seed, split_by, options)["test"]

    rows, drawn, wanted = None, 0, num
    for _ in range(16):  # draw more until enough rows survive the exclusion (bisect down if the task runs out)
        try:
            candidates = draw(wanted)
        except ValueError:  # fewer distinct questions than asked for
            wanted = (drawn + wanted) // 2
            if wanted <= drawn:
                break
            continue
        keep = kept_rows(task, candidates, exclude, exclude_classes)
        rows, drawn = candidates.select(keep[:num]), wanted
        if len(rows) == num:
            break
        wanted = 2 * wanted + len(exclude) + len(exclude_classes)
    return draw(num) if rows is None else rows


def kept_rows(task: str, rows: Dataset, exclude: set | frozenset, exclude_classes: set | frozenset = frozenset()):
    """Indices of ``rows`` whose question fingerprint is not in ``exclude`` and whose class fingerprint is not in
    ``exclude_classes``."""
    questions = fingerprints(task, rows)
    classes = class_fingerprints(task, rows) if exclude_classes else []
    classes = classes or [None] * len(questions)  # a task without symmetries has no class to leave out
    return [i for i, (q, c) in enumerate(zip(questions, classes)) if q not in exclude and c not in exclude_classes]


def task_shape(config, task: str) -> dict:
    """What a model with this ``config`` reads of ``task``, as the keyword of :func:`build_task` the task's record
    names (``{"size": side}`` for puzzles, ``{"nodes": n}`` for reachability), else ``{}``; ``ValueError`` when the
    config cannot read the task."""
    record = task_record(task)
    shape = record.shape_of(config)
    return {} if shape is None else {record.shape_option: shape}


__all__ = [
    "TASK_RECORDS",
    "Task",
    "build_task_rows",
    "load_task_rows",
    "task_held_out_rows",
    "task_splits",
    "TASKS",
    "TRAINING_RECORD",
    "TaskData",
    "build_task",
    "check_task",
    "class_record",
    "class_fingerprints",
    "kept_rows",
    "eval_split",
    "fingerprints",
    "fresh_rows",
    "validation_split",
    "load_training_record",
    "ROWS_TASK",
    "held_out_split",
    "trained_on_rows",
    "save_training_record",
    "split_census",
    "task_record",
    "task_shape",
]
