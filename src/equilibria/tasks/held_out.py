"""Rows held out of a file of yours before training, recorded so that evaluation reads the same rows again.

A training record (``training_data.json``) of a model trained on rows of a file names the file (``source``: its
name, its absolute path when local) and the held-out rows (``held_out``: their split, their positions in it as
read, a fingerprint of what they ask, a description). :func:`held_out_record` writes that part,
:func:`read_held_out` reads the rows again and refuses when the file has changed since. Text rows
(:mod:`~equilibria.tasks.text_data`) and task rows (:func:`~equilibria.tasks.build_task_rows`) both use them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from datasets import Dataset, DatasetDict

POSITION = "__row__"  # a row's position (from 0) in its split as read, kept through shuffles and selections


def numbered(rows: Dataset) -> Dataset:
    """``rows`` with their position in the split (column :data:`POSITION`), kept through shuffles and selections."""
    return rows if POSITION in rows.column_names else rows.add_column(POSITION, list(range(len(rows))))


def held_out_count(rows: int) -> int:
    """How many of a file's ``rows`` are held out when it has no test split and ``--test_size`` is not given: a
    tenth, at least 5 and at most 200."""
    return min(200, max(5, rows // 10))


def split_rows(splits: DatasetDict, train_split: str, test_split: str, test_size: int | None, seed: int):
    """``(train, test, the split the test rows come from)``, numbered (:func:`numbered`), the training rows shuffled
    with ``seed``; ``test_size`` ``None``: at most 200 rows of the test split, else :func:`held_out_count` rows of
    the training split."""
    train = numbered(splits[train_split]).shuffle(seed=seed)
    if test_split in splits and test_split != train_split:
        test = numbered(splits[test_split])
        return train, test.select(range(min(200 if test_size is None else test_size, len(test)))), test_split
    test_size = held_out_count(len(train)) if test_size is None else test_size
    if test_size >= len(train):
        raise ValueError(
            f"--test_size {test_size} holds out every one of the {len(train)} training rows; make it smaller "
            f"(0 skips the evaluation) or give a {test_split!r} split"
        )
    return train.select(range(test_size, len(train))), train.select(range(test_size)), train_split


def held_out_record(split: str, rows: Dataset, keys: list[str], description: str) -> dict:
    """The training record's ``held_out`` entry for ``rows`` (numbered) of ``split``, whose questions' fingerprints
    are ``keys``."""
    from ..provenance import data_fingerprint

    return {
        "split": split,
        "positions": list(rows[POSITION]),
        "fingerprint": data_fingerprint(keys),
        "description": description,
    }


def source_location(source: dict) -> str:
    """Where to read a recorded source: its absolute path when it is still there, else the name it was given."""
    return source["path"] if source.get("path") and Path(source["path"]).exists() else source["name"]


def read_held_out(record: dict, read: Callable[[str, str], Dataset], keys: Callable[[Dataset], list[str]]) -> Dataset:
    """The held-out rows ``record`` names, read again: ``read(location, split)`` gives the numbered rows of a split
    (``ValueError`` when it cannot), ``keys(rows)`` their question fingerprints. ``ValueError`` when they cannot be
    read or the file has changed since training."""
    from ..provenance import data_fingerprint

    held = record["held_out"]
    location = source_location(record["source"])
    try:
        rows = read(location, held["split"])
    except ValueError as err:
        raise ValueError(
            f"the model's held-out rows ({held['description']}) cannot be read again: {err}; pass --dataset_name"
        ) from None
    if max(held["positions"], default=-1) >= len(rows):
        raise ValueError(f"{location} has changed since training: its {held['split']!r} split lacks the held-out rows")
    rows = rows.select(held["positions"])
    if data_fingerprint(keys(rows)) != held["fingerprint"]:
        raise ValueError(
            f"{location} has changed since training: the rows at the held-out positions ask other questions; pass "
            "--dataset_name to evaluate it as a new file (training questions are still left out)"
        )
    return rows


__all__ = [
    "POSITION",
    "held_out_count",
    "held_out_record",
    "numbered",
    "read_held_out",
    "source_location",
    "split_rows",
]
