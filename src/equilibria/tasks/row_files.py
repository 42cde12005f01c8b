"""Rows from where users keep them: a local ``.json`` / ``.jsonl`` / ``.csv`` / ``.parquet`` file, a folder written
by ``save_to_disk``, or a Hub dataset id (:func:`load_rows`).

JSON Lines and CSV files are read here, line by line, so that a bad line is a ``ValueError`` naming the file and
the line (a JSON error, a CSV row with too many or too few values, a value whose type differs from the rows
before), and an empty file says so; their rows carry the line they start on in the column :data:`LINE`, which the
row checks of :mod:`equilibria.tasks.text_data` quote. Parquet files, ``save_to_disk`` folders and Hub datasets are
read by ``datasets``.

``columns`` (``--dataset_columns``) maps a dataset's own columns onto the row formats without editing it: onto
``prompt`` / ``completion`` / ``text`` / ``messages`` (renamed), or onto chat roles (``system``, ``user``,
``assistant``), which make a ``messages`` conversation of those columns in the order given; e.g. NuminaMath's
``problem=user,solution=assistant`` (:func:`parse_columns`, :func:`map_columns`).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from datasets import Dataset, DatasetDict

from .puzzle_csv import check_csv_width

DATA_FILES = (".csv", ".json", ".jsonl", ".parquet")
ROW_COLUMNS = ("prompt", "completion", "text", "messages")  # what --dataset_columns may rename a column to
CHAT_ROLES = ("system", "user", "assistant")  # or the turn of a conversation it becomes
LINE = "__line__"  # the line of a JSON Lines / CSV file a row starts on


def parse_columns(text: str | None, flag: str = "--dataset_columns") -> dict[str, str] | None:
    """``"problem=user,solution=assistant"`` -> ``{"problem": "user", "solution": "assistant"}`` (``None`` for none);
    ``ValueError`` naming ``flag`` unless every target is one of :data:`ROW_COLUMNS` or :data:`CHAT_ROLES`, not
    both kinds, each column and target once."""
    if text is None or isinstance(text, dict):
        return text or None
    pairs = [part.split("=", 1) for part in str(text).split(",") if part.strip()]
    allowed = (*ROW_COLUMNS, *CHAT_ROLES)
    if not pairs or any(len(p) != 2 or not p[0].strip() or p[1].strip() not in allowed for p in pairs):
        raise ValueError(
            f"{flag} must be COLUMN=TARGET pairs, comma-separated, each TARGET one of {list(allowed)} (e.g. "
            f"problem=user,solution=assistant), got {text!r}"
        )
    mapping = {column.strip(): target.strip() for column, target in pairs}
    roles = [t for t in mapping.values() if t in CHAT_ROLES]
    if len(mapping) != len(pairs) or len(set(mapping.values())) != len(pairs) or 0 < len(roles) < len(pairs):
        raise ValueError(
            f"{flag}: each column and each target once, and either all targets chat roles or none, got {text!r}"
        )
    return mapping


def map_columns(splits: DatasetDict, columns: dict[str, str] | None, name: str) -> DatasetDict:
    """``splits`` with ``columns`` applied (:func:`parse_columns`): renamed, or made into ``messages``, the other
    columns kept; ``ValueError`` naming a column the rows lack."""
    if not columns:
        return splits
    for split, rows in splits.items():
        missing = [c for c in columns if c not in rows.column_names]
        if missing:
            raise ValueError(
                f"--dataset_columns names {missing}, which {name} ({split} split) lacks; its columns are "
                f"{sorted(c for c in rows.column_names if not c.startswith('__'))}"
            )
    if set(columns.values()) <= set(ROW_COLUMNS):
        return DatasetDict({split: rows.rename_columns(columns) for split, rows in splits.items()})
    order = list(columns.items())

    def conversation(row: dict) -> dict:
        return {"messages": [{"role": role, "content": row[column]} for column, role in order]}

    return DatasetDict({split: rows.map(conversation, remove_columns=list(columns)) for split, rows in splits.items()})


def load_rows(name: str, config_name: str | None = None, columns: dict[str, str] | None = None) -> DatasetDict:
    """The splits of ``name``: a local data file (``DATA_FILES``; one split, ``train``), a ``save_to_disk`` folder,
    or a Hub dataset id, with ``columns`` mapped (:func:`map_columns`). ``ValueError`` naming ``name`` (and the line,
    for a bad line of a JSON Lines or CSV file) when none of these reads it."""
    return map_columns(_load_splits(name, config_name), columns, name)


def _load_splits(name: str, config_name: str | None) -> DatasetDict:
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


__all__ = ["CHAT_ROLES", "DATA_FILES", "LINE", "ROW_COLUMNS", "load_rows", "map_columns", "parse_columns"]
