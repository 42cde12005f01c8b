"""Canonical forms of puzzles under their symmetries: two puzzles that one symmetry maps onto the other are the
same puzzle, and get the same canonical form. Evaluation that must not repeat a training puzzle compares these.

* Sudoku: digit relabelling, row swaps within a band, column swaps within a stack, band swaps, stack swaps and,
  where the boxes are square (4x4, 9x9), the transposition. :func:`sudoku_canonical` is exact for 4x4 (128
  transforms of the cells) and 6x6 (3,456): it applies every transform, relabels the digits in order of first
  appearance and keeps the smallest board. 9x9 (about 3.4 million transforms) is not enumerated.
* Mazes: the 8 rotations and reflections of the grid, and swapping start and goal (the shortest path is the same
  path walked the other way). :func:`maze_canonical` keeps the smallest of the 16 strings.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from .sudoku import board_size, box_shape, format_board, parse_board

ENUMERATED_SUDOKU_SIZES = (4, 6)


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
def sudoku_transforms(size: int) -> np.ndarray:
    """``(transforms, size * size)`` cell indices: transform ``t`` of a board ``b`` is ``b[indices[t]]``."""
    if size not in ENUMERATED_SUDOKU_SIZES:
        raise ValueError(
            f"Sudoku symmetries are enumerated for sizes {ENUMERATED_SUDOKU_SIZES}; {size}x{size} has too many "
            "transforms to enumerate"
        )
    br, bc = box_shape(size)
    rows, cols = _orders(size // br, br), _orders(size // bc, bc)
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


__all__ = ["ENUMERATED_SUDOKU_SIZES", "maze_canonical", "sudoku_canonical", "sudoku_transforms"]
