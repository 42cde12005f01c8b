"""Rows held out of a file of yours before training, recorded so that evaluation reads the same rows again.

A training record (``training_data.json``) of a model trained on rows of a file names the file (``source``: its
name, its absolute path when local) and the held-out rows (``held_out``: their split, their positions in it as
read, a fingerprint of what they ask, a description). :func:`held_out_record` writes that part,
:func:`read_held_out` reads the rows again and refuses when the file has changed since. Text rows
(:mod:`~equilibria.tasks.text_data`) and task rows (:func:`~equilibria.tasks.build_task_rows`) both use them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from datasets import Dataset, DatasetDict

from .row_files import LINE

POSITION = "__row__"  # a row's position (from 0) in its split as read, kept through shuffles and selections


def numbered(rows: Dataset) -> Dataset:
    """``rows`` with their position in the split (column :data:`POSITION`), kept through shuffles and selections."""
    return rows if POSITION in rows.column_names else rows.add_column(POSITION, list(range(len(rows))))


def held_out_count(rows: int) -> int:
    """How many of a file's ``rows`` are held out when it has no test split and ``--test_size`` is not given: a
    tenth, at least 5 and at most 200."""
    return min(200, max(5, rows // 10))


def split_rows(
    splits: DatasetDict,
    train_split: str,
    test_split: str,
    test_size: int | None,
    seed: int,
    validation_size: int | None = 0,
):
    """``(train, test, the split the test rows come from, validation)``, numbered (:func:`numbered`), the training
    rows shuffled with ``seed``; ``test_size`` ``None``: at most 200 rows of the test split, else
    :func:`held_out_count` rows of the training split. ``validation_size`` rows (``None``: :func:`held_out_count`, at
    most a quarter of the rows the test leaves) are held out of the training split after the test rows
    (``validation`` is ``None`` for 0)."""
    train = numbered(splits[train_split]).shuffle(seed=seed)
    test = None
    if test_split in splits and test_split != train_split:
        test = numbered(splits[test_split])
        test = test.select(range(min(200 if test_size is None else test_size, len(test))))
    elif test_size is None and len(train) < 10:
        raise ValueError(
            f"the data has {len(train)} rows, too few to hold some out for the evaluation: give more rows, a "
            f"{test_split!r} split, or --test_size 0 (no held-out evaluation)"
        )
    taken = 0 if test is not None else held_out_count(len(train)) if test_size is None else test_size
    # by default as many as the test rows, but never more than a quarter of those left: a small file keeps its rows
    default = min(held_out_count(len(train)), max(0, len(train) - taken) // 4)
    validation = default if validation_size is None else validation_size
    if taken + validation >= len(train):
        flags = [f"--{name} {n}" for name, n in (("test_size", taken), ("validation_size", validation)) if n]
        one = len(flags) == 1
        raise ValueError(
            f"{' and '.join(flags)} {'holds' if one else 'hold'} out every one of the {len(train)} training rows; make "
            f"{'it' if one else 'them'} smaller (0 skips {'the evaluation' if taken else 'the validation'}) or give a "
            f"{test_split!r} split"
        )
    if test is None:
        test, test_split = train.select(range(taken)), train_split
    held = train.select(range(taken, taken + validation)) if validation else None
    return train.select(range(taken + validation, len(train))), test, test_split, held


class HeldOut(NamedTuple):
    """What :func:`hold_out` returns: the training rows, the test rows (those asking a training question dropped),
    the split the test rows come from, the training questions' keys, how many test rows were held out before the
    drop, and the validation rows (``None``: none; those asking a training question dropped)."""

    train: Dataset
    test: Dataset
    test_split: str
    trained: list[str]
    held: int
    validation: Dataset | None = None


def hold_out(
    splits: DatasetDict,
    train_split: str,
    test_split: str,
    test_size: int | None,
    train_size: int | None,
    seed: int,
    keys: Callable[[Dataset], list[str]],
    validation_size: int | None = 0,
) -> HeldOut:
    """:func:`split_rows`, the first ``train_size`` training rows, and the test and validation rows without those
    asking a training question (``keys(rows)``: what each row asks, e.g.
    :func:`~equilibria.tasks.text_data.row_key`); :func:`held_out_counts` says what was dropped of the test rows."""
    if train_split not in splits:
        raise ValueError(f"--dataset_train_split {train_split!r} is not in the data (splits: {sorted(splits)})")
    train, test, held_split, validation = split_rows(splits, train_split, test_split, test_size, seed, validation_size)
    if train_size is not None:
        train = train.select(range(min(train_size, len(train))))
    trained = keys(train)
    seen = set(trained)

    def unseen(rows: Dataset) -> Dataset:
        return rows.select([i for i, key in enumerate(keys(rows)) if key not in seen])

    validation = unseen(validation) if validation is not None else None
    validation = validation if validation is not None and len(validation) else None  # each one a training question
    return HeldOut(train, unseen(test), held_split, trained, len(test), validation)


def held_out_counts(held: int, kept: int, same_class: int = 0) -> dict:
    """The training record's ``held_out_counts``: ``held`` rows held out, ``kept`` of them left for the evaluation,
    the others dropped as repeats of training questions (``same_class`` of those only up to the task's
    symmetries)."""
    counts = {"held_out": held, "dropped": held - kept, "kept": kept}
    return {**counts, "dropped_same_class": same_class} if same_class else counts


def describe_held_out_counts(counts: dict) -> str:
    """``held out 30, dropped 9 as repeats of training questions, kept 21`` (what ``equilibria train`` prints)."""
    classes = counts.get("dropped_same_class", 0)
    dropped = f"dropped {counts['dropped']} as repeats of training questions" + (
        f" ({classes} of them up to the task's symmetries: in a training puzzle's class)" if classes else ""
    )
    return f"held out {counts['held_out']}, {dropped}, kept {counts['kept'] or 'none'}"


def content_keys(rows: Dataset) -> list[str]:
    """A fingerprint of each row's whole content (every column but the position and line bookkeeping): what tells
    a changed file from the one a model was trained on."""
    skip = (POSITION, LINE)
    return [
        hashlib.blake2b(
            json.dumps({k: v for k, v in row.items() if k not in skip}, sort_keys=True, default=str).encode(),
            digest_size=8,
        ).hexdigest()
        for row in rows
    ]


def source_of(name: str, config_name: str | None = None) -> dict:
    """Where rows come from, for a training record: the name given, a label (a local file by its name, not its
    path), the absolute path of a local file (made relative to the model folder when the record is saved) and the
    Hub configuration."""
    local = Path(name).exists()
    return {
        "name": name,
        "label": Path(name).name if local else name,
        "path": str(Path(name).resolve()) if local else None,
        "config": config_name,
    }


def held_out_record(split: str, rows: Dataset, description: str) -> dict:
    """The training record's ``held_out`` entry for ``rows`` (numbered) of ``split``: their positions and the
    fingerprint of their content."""
    from ..provenance import data_fingerprint

    return {
        "split": split,
        "positions": list(rows[POSITION]),
        "fingerprint": data_fingerprint(content_keys(rows)),
        "description": description,
    }


def source_location(source: dict, folder: str | Path | None = None) -> str:
    """Where to read a recorded source: its path (relative to the model ``folder``, or absolute) when the file is
    still there, else the name it was given."""
    path = source.get("path")
    if path:
        path = Path(folder) / path if folder is not None and not Path(path).is_absolute() else Path(path)
        if path.exists():
            return str(path)
    return source["name"]


def read_held_out(record: dict, read: Callable[[str, str], Dataset], folder: str | Path | None = None) -> Dataset:
    """The held-out rows ``record`` (of the model in ``folder``) names, read again: ``read(location, split)`` gives
    the numbered rows of a split (``ValueError`` when it cannot). ``ValueError`` when they cannot be read or the
    file has changed since training (another row at a held-out position, or one of them edited)."""
    from ..provenance import data_fingerprint

    held = record["held_out"]
    location = source_location(record["source"], folder)
    try:
        rows = read(location, held["split"])
    except ValueError as err:
        raise ValueError(
            f"the model's held-out rows ({held['description']}) cannot be read again: {err}; pass --dataset_name"
        ) from None
    if max(held["positions"], default=-1) >= len(rows):
        raise ValueError(f"{location} has changed since training: its {held['split']!r} split lacks the held-out rows")
    rows = rows.select(held["positions"])
    if data_fingerprint(content_keys(rows)) != held["fingerprint"]:
        raise ValueError(
            f"{location} has changed since training: the rows at the held-out positions differ from the ones held "
            "out; pass --dataset_name to evaluate it as a new file (training questions are still left out)"
        )
    return rows


__all__ = [
    "POSITION",
    "HeldOut",
    "content_keys",
    "describe_held_out_counts",
    "hold_out",
    "held_out_counts",
    "source_of",
    "held_out_count",
    "held_out_record",
    "numbered",
    "read_held_out",
    "source_location",
    "split_rows",
]
