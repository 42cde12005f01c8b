"""Reading the published puzzle CSV layout (``source,question,answer,rating``) shared by Sudoku-Extreme and
Maze-Hard / Maze-Unique, with every row validated and a bad row reported by its line."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

PUZZLE_COLUMNS = ("source", "question", "answer", "rating")


def read_puzzle_csv(path: str | Path, layout: str, check_row: Callable[[dict], dict], limit: int | None = None) -> list:
    """Rows of a CSV in the published layout, each passed through ``check_row`` (which returns the cleaned row or
    raises ``ValueError``); ``rating`` is parsed as a float (empty: 0). An error names the file, the line and the
    problem; a file without the columns names the ``layout`` and the columns it needs."""
    path = Path(path)
    rows = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = set(PUZZLE_COLUMNS) - set(reader.fieldnames or [])
        if missing:
            raise ValueError(
                f"{path}: the {layout} CSV layout has columns {','.join(PUZZLE_COLUMNS)}; missing {sorted(missing)} "
                f"(found {reader.fieldnames})"
            )
        for line, record in enumerate(reader, start=2):
            if limit is not None and len(rows) >= limit:
                break
            try:
                rating = record["rating"]
                try:
                    rating = float(rating) if rating not in ("", None) else 0.0
                except ValueError:
                    raise ValueError(f"rating must be a number, got {rating!r}") from None
                rows.append({**check_row(record), "source": record["source"], "rating": rating})
            except ValueError as err:
                raise ValueError(f"{path}, line {line}: {err}") from None
    return rows
