"""Canonical forms of puzzles under their symmetries: two puzzles that one symmetry maps onto the other are the
same puzzle, and get the same canonical form. Evaluation that must not repeat a training puzzle compares these.

* Sudoku: digit relabelling, row swaps within a band, column swaps within a stack, band swaps, stack swaps and,
  where the boxes are square (4x4, 9x9), the transposition. :func:`sudoku_canonical` is exact for 4x4 (128
  transforms of the cells) and 6x6 (3,456): it applies every transform, relabels the digits in order of first
  appearance and keeps the smallest board. 9x9 (about 3.4 million transforms) is not enumerated: there
  :func:`sudoku_class_key` is an invariant (equal for equivalent boards, rarely equal for others) and
  :func:`sudoku_equivalent` decides a shared key exactly, by a search pruned on the blank pattern.
* Mazes: the 8 rotations and reflections of the grid, and swapping start and goal (the shortest path is the same
  path walked the other way). :func:`maze_canonical` keeps the smallest of the 16 strings.

:class:`SymmetryClasses` assigns puzzles to classes exactly, from a key and (where the key is only an invariant) an
equivalence test; split building, :func:`~equilibria.tasks.named_splits.split_census` and evaluation use it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

from .sudoku import board_size, box_shape, format_board, parse_board

ENUMERATED_SUDOKU_SIZES = (4, 6)
SPLIT_BY = ("class", "board")  # test puzzles outside the training classes / only different boards
T = TypeVar("T")


def check_split_by(split_by: str) -> str:
    """``split_by`` when it is one of :data:`SPLIT_BY`, else a ``ValueError`` naming them."""
    if split_by not in SPLIT_BY:
        raise ValueError(f"split_by must be one of {SPLIT_BY}, got {split_by!r}")
    return split_by


def _orders(groups: int, width: int) -> list[list[int]]:
    """Every order of ``groups * width`` lines that keeps each group of ``width`` together: the groups permuted,
    and the lines permuted within each group."""
    inner = list(itertools.permutations(range(width)))
    orders = []
    for outer in itertools.permutations(range(groups)):
        for within in itertools.product(inner, repeat=groups):
            orders.append([group * width + within[k][j] for k, group in enumerate(outer) for j in range(width)])
    return orders


@functools.cache
def _line_orders(size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(row orders, column orders)`` of a Sudoku of this size: the symmetries of each axis alone."""
    br, bc = box_shape(size)
    rows, cols = np.array(_orders(size // br, br)), np.array(_orders(size // bc, bc))
    rows.flags.writeable = cols.flags.writeable = False
    return rows, cols


@functools.cache
def sudoku_transforms(size: int) -> np.ndarray:
    """``(transforms, size * size)`` cell indices: transform ``t`` of a board ``b`` is ``b[indices[t]]``."""
    if size not in ENUMERATED_SUDOKU_SIZES:
        raise ValueError(
            f"Sudoku symmetries are enumerated for sizes {ENUMERATED_SUDOKU_SIZES}; {size}x{size} has too many "
            "transforms to enumerate"
        )
    br, bc = box_shape(size)
    rows, cols = _line_orders(size)
    grid = np.arange(size * size).reshape(size, size)
    found = [grid[np.ix_(r, c)].ravel() for r in rows for c in cols]
    if br == bc:
        found += [grid[np.ix_(r, c)].T.ravel() for r in rows for c in cols]
    transforms = np.stack(found)
    transforms.flags.writeable = False  # cached: shared by every caller
    return transforms


def _relabel(boards: np.ndarray, size: int) -> np.ndarray:
    """Each board (row) with its digits renamed 1, 2, ... in order of first appearance (0, a blank, stays)."""
    positions = np.arange(boards.shape[1])
    digits = np.arange(1, size + 1)
    hits = boards[:, :, None] == digits[None, None, :]
    first = np.where(hits, positions[None, :, None], boards.shape[1]).min(axis=1)  # (boards, size)
    rank = np.argsort(np.argsort(first, axis=1, kind="stable"), axis=1, kind="stable") + 1
    mapping = np.concatenate([np.zeros((boards.shape[0], 1), dtype=rank.dtype), rank], axis=1)
    return np.take_along_axis(mapping, boards.astype(np.int64), axis=1)


def sudoku_canonical(board: str) -> str:
    """The smallest board (as a string, ``.`` for a blank) among all symmetry transforms of ``board`` with their
    digits relabelled in order of first appearance: equal for two boards exactly when one symmetry maps one onto
    the other. ``ValueError`` for a size whose transforms are not enumerated (9x9)."""
    size = board_size(board)
    cells = np.asarray(parse_board(board, size), dtype=np.int8)
    boards = _relabel(cells[sudoku_transforms(size)], size)
    smallest = boards[np.lexsort(boards.T[::-1])[0]]
    return format_board([int(v) for v in smallest])


def _grid(board: str) -> np.ndarray:
    size = board_size(board)
    return np.asarray(parse_board(board, size), dtype=np.int64).reshape(size, size)


def _signature(grid: np.ndarray, size: int) -> tuple:
    """What row, column, band, stack and relabelling symmetries leave unchanged (not the transposition): the sorted
    clue-count profiles of the bands and stacks, and per clue its row, column and box counts, its digit's count,
    its band's and stack's profiles and its digit's count in its band and its stack, sorted."""
    br, bc = box_shape(size)
    mask = grid > 0
    rows, cols = mask.sum(1).tolist(), mask.sum(0).tolist()
    boxes = mask.reshape(size // br, br, size // bc, bc).sum((1, 3)).tolist()
    freq = np.bincount(grid.ravel(), minlength=size + 1).tolist()
    band = [tuple(sorted(rows[b * br : (b + 1) * br])) for b in range(size // br)]
    stack = [tuple(sorted(cols[s * bc : (s + 1) * bc])) for s in range(size // bc)]
    in_band = [np.bincount(grid[b * br : (b + 1) * br].ravel(), minlength=size + 1).tolist() for b in range(size // br)]
    in_stack = [
        np.bincount(grid[:, s * bc : (s + 1) * bc].ravel(), minlength=size + 1).tolist() for s in range(size // bc)
    ]
    cells = []
    for r, c in zip(*np.nonzero(mask)):
        d, b, s = int(grid[r, c]), r // br, c // bc
        cells.append((rows[r], cols[c], boxes[b][s], freq[d], band[b], stack[s], in_band[b][d], in_stack[s][d]))
    return tuple(sorted(band)), tuple(sorted(stack)), tuple(sorted(cells))


@functools.lru_cache(maxsize=1 << 16)  # a split's rows are keyed again by its census
def sudoku_class_key(board: str) -> str:
    """A key of the board's class: its canonical form where the group is enumerated (4x4, 6x6: equal exactly
    for equivalent boards), else (9x9) ``inv:`` and a hash of invariants under the whole group, equal for
    equivalent boards and rarely for others (:func:`sudoku_equivalent` decides those: :meth:`Task.classes`)."""
    size = board_size(board)
    if size in ENUMERATED_SUDOKU_SIZES:
        return sudoku_canonical(board)
    grid = _grid(board)
    forms = [repr(_signature(grid, size))]
    if len(set(box_shape(size))) == 1:
        forms.append(repr(_signature(grid.T, size)))
    return "inv:" + hashlib.blake2b(min(forms).encode(), digest_size=16).hexdigest()


def _relabels_onto(moved: np.ndarray, target: np.ndarray) -> np.ndarray:
    """For boards ``moved`` ``(k, cells)`` with the blanks of ``target`` ``(cells,)``: whether a one-to-one renaming of
    the digits maps each onto ``target``."""
    digits = np.arange(1, math.isqrt(moved.shape[1]) + 1)  # 1..size; a digit the board lacks matches nothing
    hit = moved[:, :, None] == digits  # (k, cells, digits)
    low = np.where(hit, target[None, :, None], 10**6).min(1)
    high = np.where(hit, target[None, :, None], -1).max(1)
    present = hit.any(1)
    consistent = ((low == high) | ~present).all(1)
    images = np.sort(np.where(present, low, -np.arange(1, digits.size + 1)), axis=1)
    return consistent & (np.diff(images, axis=1) != 0).all(1)


def sudoku_equivalent(a: str, b: str) -> bool:
    """Whether a symmetry (row, column, band and stack swaps, transposition for square boxes, and a relabelling of
    the digits) maps board ``a`` onto board ``b``: exact, for every size. Searched as row orders x column orders
    (1,296 x 1,296 at 9x9, in each orientation), kept only where the blank patterns agree, then the digits: tens of
    milliseconds per pair at 9x9."""
    x, y = _grid(a), _grid(b)
    size = x.shape[0]
    if y.shape != x.shape or (x > 0).sum() != (y > 0).sum():
        return False
    if sorted(np.bincount(x.ravel(), minlength=size + 1)[1:]) != sorted(np.bincount(y.ravel(), minlength=size + 1)[1:]):
        return False
    rows, cols = _line_orders(size)
    weights = 1 << np.arange(size)
    target = ((y > 0) * weights[:, None]).sum(0)  # each column of b's blank pattern as a number
    for grid in (x, x.T) if len(set(box_shape(size))) == 1 else (x,):
        codes = np.einsum("rij,i->rj", (grid[rows] > 0).astype(np.int64), weights)  # (row orders, columns)
        for start in range(0, len(rows), 128):
            match = (codes[start : start + 128][:, cols] == target).all(-1)  # (chunk, column orders)
            r, c = np.nonzero(match)
            for k in range(0, r.size, 2048):  # a board with few clues matches many pairs: bounded memory
                pairs = slice(k, k + 2048)
                if _relabels_onto(_moved(grid, rows[start + r[pairs]], cols[c[pairs]]), y.ravel()).any():
                    return True
    return False


def _moved(grid: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``grid`` under each pair of a row order and a column order, flattened: ``(pairs, cells)``."""
    size = grid.shape[0]
    return grid.ravel()[(rows[:, :, None] * size + cols[:, None, :]).reshape(len(rows), -1)]


class SymmetryClasses(Generic[T]):
    """Puzzles sorted into classes under a symmetry group, exactly. ``key(item)`` is equal for two items of one
    class: a canonical form (``same`` is ``None``: equal keys are one class) or an invariant, with ``same(a, b)``
    deciding items whose keys are equal. :meth:`index` files an item and gives its class's number (0, 1, ... in
    order of first appearance); :meth:`add` files it and says whether its class is new; :meth:`find` only looks."""

    def __init__(self, key: Callable[[T], Hashable], same: Callable[[T, T], bool] | None = None):
        self.key, self.same = key, same
        self._buckets: dict[Hashable, list[tuple[T, int]]] = {}
        self.classes = 0

    def _locate(self, item: T) -> tuple[Hashable, int | None]:
        name = self.key(item)  # once: a key under a symmetry group is not cheap
        for seen, index in self._buckets.get(name, []):
            if self.same is None or self.same(seen, item):
                return name, index
        return name, None

    def find(self, item: T) -> bool:
        """Whether ``item``'s class holds an item filed before."""
        return self._locate(item)[1] is not None

    def index(self, item: T) -> int:
        """File ``item``; the number of its class."""
        name, index = self._locate(item)
        if index is None:
            index, self.classes = self.classes, self.classes + 1
            kept = item if self.same is not None else None  # only an invariant key needs the item to compare
            self._buckets.setdefault(name, []).append((kept, index))
        return index

    def add(self, item: T) -> bool:
        """File ``item``; True when its class is new."""
        before = self.classes
        self.index(item)
        return self.classes > before

    def __len__(self) -> int:
        return self.classes


def sudoku_classes() -> SymmetryClasses[str]:
    """Classes of Sudoku board strings (any size): :func:`sudoku_class_key`, confirmed by
    :func:`sudoku_equivalent` where the key is an invariant."""
    return SymmetryClasses(
        sudoku_class_key, lambda a, b: board_size(a) in ENUMERATED_SUDOKU_SIZES or sudoku_equivalent(a, b)
    )


@functools.lru_cache(maxsize=1 << 16)  # a split's rows are keyed again by its census
def maze_canonical(maze: str) -> str:
    """The smallest of the maze's 8 rotations and reflections, each also with start and goal swapped: equal for
    two mazes exactly when one symmetry maps one onto the other."""
    side = int(round(len(maze) ** 0.5))
    grid = np.array(list(maze)).reshape(side, side)
    swapped = np.where(grid == "S", "G", np.where(grid == "G", "S", grid))
    forms = []
    for base in (grid, swapped):
        for turn in range(4):
            rotated = np.rot90(base, turn)
            forms += ["".join(rotated.ravel()), "".join(rotated.T.ravel())]
    return min(forms)


__all__ = [
    "ENUMERATED_SUDOKU_SIZES",
    "SPLIT_BY",
    "check_split_by",
    "SymmetryClasses",
    "maze_canonical",
    "sudoku_canonical",
    "sudoku_class_key",
    "sudoku_classes",
    "sudoku_equivalent",
    "sudoku_transforms",
]
