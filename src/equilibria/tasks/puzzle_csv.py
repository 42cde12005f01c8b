"""What the puzzle tasks share: reading the published puzzle CSV layout (``source,question,answer,rating``) of
Sudoku-Extreme and Maze-Hard / Maze-Unique, with every row validated and a bad row reported by its line, and
drawing distinct generated puzzles."""

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
                check_csv_width(record, reader.fieldnames)
                rating = record["rating"]
                try:
                    rating = float(rating) if rating not in ("", None) else 0.0
                except ValueError:
                    raise ValueError(f"rating must be a number, got {rating!r}") from None
                rows.append({**check_row(record), "source": record["source"], "rating": rating})
            except ValueError as err:
                raise ValueError(f"{path}, line {line}: {err}") from None
    return rows


def check_csv_width(record: dict, header: list[str]) -> None:
    """A row must have one value per header column (``csv.DictReader`` fills a short row with ``None`` and puts
    the surplus of a long one under the key ``None``)."""
    if record.get(None):
        raise ValueError(f"{len(header) + len(record[None])} values for the {len(header)} columns {header}")
    missing = [name for name in header if record.get(name) is None]
    if missing:
        raise ValueError(f"no value for the column(s) {missing} (the header has {header})")


def draw_distinct(draw: Callable[[], dict], accept: Callable[[dict], bool], count: int, what: str) -> list[dict]:
    """``count`` puzzles from ``draw()`` that ``accept`` takes (e.g. :meth:`SymmetryClasses.add
    <equilibria.tasks.symmetry.SymmetryClasses.add>`: a puzzle of a class not seen yet); ``what`` names them in the
    error when the generator cannot supply that many within ``50 * count + 100`` draws."""
    rows: list[dict] = []
    for _ in range(50 * count + 100):
        if len(rows) == count:
            return rows
        puzzle = draw()
        if accept(puzzle):
            rows.append(puzzle)
    if len(rows) < count:
        raise ValueError(f"could not draw {count} distinct {what}")
    return rows
