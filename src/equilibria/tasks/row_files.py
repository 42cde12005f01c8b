"""Rows from where users keep them: a local ``.json`` / ``.jsonl`` / ``.csv`` / ``.parquet`` file, a folder written
by ``save_to_disk``, or a Hub dataset id (:func:`load_rows`).

JSON Lines and CSV files are read here, line by line, so that a bad line is a ``ValueError`` naming the file and
the line (a JSON error, a CSV row with too many or too few values, a value whose type differs from the rows
before), and an empty file says so; their rows carry the line they start on in the column :data:`LINE`, which the
row checks of :mod:`equilibria.tasks.text_data` quote. Parquet files, ``save_to_disk`` folders and Hub datasets are
read by ``datasets``.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from datasets import Dataset, DatasetDict

from .puzzle_csv import check_csv_width

DATA_FILES = (".csv", ".json", ".jsonl", ".parquet")
LINE = "__line__"  # the line of a JSON Lines / CSV file a row starts on


def load_rows(name: str, config_name: str | None = None) -> DatasetDict:
    """The splits of ``name``: a local data file (``DATA_FILES``; one split, ``train``), a ``save_to_disk`` folder,
    or a Hub dataset id. ``ValueError`` naming ``name`` (and the line, for a bad line of a JSON Lines or CSV file)
    when none of these reads it."""
    from datasets import load_dataset, load_from_disk

    path = Path(name)
    if path.suffix in DATA_FILES or path.is_file():
        if path.suffix not in DATA_FILES:
            raise ValueError(f"--dataset_name {name}: a data file must be one of {list(DATA_FILES)}")
        if not path.is_file():
            raise ValueError(f"--dataset_name {name}: no such file")
        return DatasetDict(train=_read_file(path, name))
    if path.is_dir():
        try:
            data = load_from_disk(str(path))
        except FileNotFoundError:
            raise ValueError(
                f"--dataset_name {name}: a folder must be written by Dataset.save_to_disk (or give a data file)"
            ) from None
        return data if isinstance(data, DatasetDict) else DatasetDict(train=data)
    try:
        return load_dataset(name, config_name)
    except Exception as err:  # noqa: BLE001
        raise ValueError(
            f"--dataset_name {name}: not a local file or folder, and not loadable from the Hub ({_reason(err)})"
        ) from None


def _reason(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]


def _read_file(path: Path, name: str) -> Dataset:
    if path.suffix == ".parquet":
        from datasets import load_dataset

        try:
            return load_dataset("parquet", data_files={"train": str(path)})["train"]
        except Exception as err:  # noqa: BLE001 (the reader raises many kinds; say which file and why)
            raise ValueError(f"--dataset_name {name}: cannot read it as parquet ({_reason(err)})") from None
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"--dataset_name {name}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    if path.suffix == ".csv":
        rows = _csv_rows(text, name)
    elif path.suffix == ".json":
        try:
            document = json.loads(text) if text.strip() else []
        except json.JSONDecodeError:  # JSON Lines in a .json file (as datasets reads them)
            rows = _jsonl_rows(text, name)
        else:
            rows = _document_rows(document, name)
    else:
        rows = _jsonl_rows(text, name)
    if not rows:
        raise ValueError(f"--dataset_name {name}: the file holds no rows")
    return _dataset(rows, name)


def _jsonl_rows(text: str, name: str) -> list[dict]:
    rows = []
    for line, raw in enumerate(text.split("\n"), start=1):  # not splitlines: U+2028 and kin may sit inside a string
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"{name}, line {line}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{name}, line {line}: a row must be a JSON object ({{...}}), got {type(row).__name__}")
        rows.append({**row, LINE: line})
    return rows


def _document_rows(data, name: str) -> list[dict]:
    """The rows of a JSON document: a list of objects, an object of equally long columns, or one object (a row)."""
    if isinstance(data, dict):
        lengths = {len(v) if isinstance(v, list) else -1 for v in data.values()}
        columns = len(lengths) == 1 and -1 not in lengths
        data = [dict(zip(data, values)) for values in zip(*data.values())] if columns else [data]
    if not isinstance(data, list):
        raise ValueError(f"{name}: a JSON file holds a list of rows ({{...}} objects), got {type(data).__name__}")
    bad = next((i for i, row in enumerate(data) if not isinstance(row, dict)), None)
    if bad is not None:
        raise ValueError(
            f"{name}, row {bad + 1}: a row must be a JSON object ({{...}}), got {type(data[bad]).__name__}"
        )
    return data


def _csv_rows(text: str, name: str) -> list[dict]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames:
        return []
    rows, start = [], reader.line_num + 1
    for record in reader:
        try:
            check_csv_width(record, reader.fieldnames)
        except ValueError as err:
            raise ValueError(f"{name}, line {start}: {err}") from None
        rows.append({**record, LINE: start})
        start = reader.line_num + 1
    return rows


def _dataset(rows: list[dict], name: str) -> Dataset:
    """``Dataset.from_list(rows)``; a column whose values change type (a number where earlier rows have text) is
    a ``ValueError`` naming the first row that differs."""
    kinds: dict[str, type] = {}
    for i, row in enumerate(rows):
        for column, value in row.items():
            if value is None:
                continue
            kind = kinds.setdefault(column, type(value))
            if type(value) is not kind and not {kind, type(value)} <= {int, float}:
                where = f"line {row[LINE]}" if LINE in row else f"row {i + 1}"
                raise ValueError(
                    f"{name}, {where}: `{column}` is {type(value).__name__}, but {kind.__name__} in the rows before; "
                    "a column holds one type"
                )
    try:
        return Dataset.from_list(rows)
    except Exception as err:  # noqa: BLE001 (arrow's errors: nested values of mixed shapes)
        raise ValueError(f"--dataset_name {name}: cannot make a table of its rows ({_reason(err)})") from None


__all__ = ["DATA_FILES", "LINE", "load_rows"]
