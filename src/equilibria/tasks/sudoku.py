"""Sudoku puzzles: a generator of unique-solution puzzles for 4x4, 6x6 and 9x9 boards, symmetry augmentation,
the published encoding, and a loader for the Sudoku-Extreme CSV format.

Boards are strings in row-major order, one character per cell: digits ``1..n`` and ``'.'`` for a blank
(the published format, e.g. Sudoku-Extreme: columns ``source,question,answer,rating``, 81-character strings).
Tokens follow the published encoding: a cell's token is its digit + 1, a blank is 1 (digit 0 + 1), and 0 is
reserved for padding, so the vocabulary has 11 tokens for every board size.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from .puzzle_csv import read_puzzle_csv

SUDOKU_PAD = 0
SUDOKU_VOCAB_SIZE = 11  # pad, blank, digits 1..9
BOX_SHAPES = {4: (2, 2), 6: (2, 3), 9: (3, 3)}


def box_shape(size: int) -> tuple[int, int]:
    """``(rows, cols)`` of one box of a ``size x size`` board."""
    if size not in BOX_SHAPES:
        raise ValueError(f"Sudoku size must be one of {sorted(BOX_SHAPES)}, got {size!r}")
    return BOX_SHAPES[size]


def board_size(text: str) -> int:
    """The board size whose cell count is ``len(text)`` (16 -> 4, 36 -> 6, 81 -> 9)."""
    for size in BOX_SHAPES:
        if len(text) == size * size:
            return size
    raise ValueError(
        f"a Sudoku board string has 16, 36 or 81 characters (4x4, 6x6, 9x9); got {len(text)}: {text[:90]!r}"
    )


def parse_board(text: str, size: int | None = None, blanks: bool = True) -> list[int]:
    """Cells of a board string as ints (0 = blank). Raises ``ValueError`` naming the problem for a wrong length,
    a character other than ``'.'`` (or ``'0'``) and ``1..size``, or (``blanks=False``) a blank cell."""
    if not isinstance(text, str):
        raise ValueError(f"a Sudoku board must be a string, got {type(text).__name__}")
    if size is None:
        size = board_size(text)
    box_shape(size)
    if len(text) != size * size:
        raise ValueError(f"a {size}x{size} Sudoku board has {size * size} characters, got {len(text)}: {text!r}")
    cells = []
    for i, ch in enumerate(text):
        if ch in ".0":
            if not blanks:
                raise ValueError(f"cell {i} (row {i // size}, column {i % size}) is blank in a solution: {text!r}")
            cells.append(0)
        elif ch.isdigit() and 1 <= int(ch) <= size:
            cells.append(int(ch))
        else:
            raise ValueError(
                f"cell {i} (row {i // size}, column {i % size}) is {ch!r}; allowed: '.' or '0' for a blank and the "
                f"digits 1..{size}"
            )
    return cells


def format_board(cells: list[int]) -> str:
    return "".join("." if c == 0 else str(c) for c in cells)


def encode_board(text: str) -> list[int]:
    """Tokens of a board string in the published encoding: digit + 1, blank -> 1 (0 is padding)."""
    return [c + 1 for c in parse_board(text)]


def decode_board(tokens) -> str:
    """The board string of a token sequence (inverse of :func:`encode_board`); padding (0) is not allowed."""
    tokens = [int(t) for t in tokens]
    if any(not 1 <= t <= SUDOKU_VOCAB_SIZE - 1 for t in tokens):
        raise ValueError(f"Sudoku tokens are 1..{SUDOKU_VOCAB_SIZE - 1} (blank = 1, digit d = d + 1), got {tokens}")
    return format_board([t - 1 for t in tokens])


# --------------------------------------------------------------------------------------------------
# Solver: bitmask search with the most-constrained cell first
# --------------------------------------------------------------------------------------------------


@dataclass
class SolveResult:
    solutions: list[list[int]]  # up to the requested limit
    nodes: int  # search nodes visited (1 for a puzzle that needs no guessing)
    backtracks: int  # dead ends met


class _Board:
    def __init__(self, cells: list[int], size: int):
        self.size = size
        self.rows_box = box_shape(size)
        self.cells = list(cells)
        full = (1 << (size + 1)) - 2  # bits 1..size
        self.full = full
        self.row = [0] * size
        self.col = [0] * size
        self.box = [0] * size
        for i, v in enumerate(self.cells):
            if v:
                bit = 1 << v
                r, c, b = self._where(i)
                if self.row[r] & bit or self.col[c] & bit or self.box[b] & bit:
                    raise ValueError(f"the clues break a Sudoku rule: digit {v} repeats (cell {i})")
                self.row[r] |= bit
                self.col[c] |= bit
                self.box[b] |= bit

    def _where(self, i: int) -> tuple[int, int, int]:
        size, (br, bc) = self.size, self.rows_box
        r, c = divmod(i, size)
        return r, c, (r // br) * (size // bc) + c // bc

    def candidates(self, i: int) -> int:
        r, c, b = self._where(i)
        return self.full & ~(self.row[r] | self.col[c] | self.box[b])

    def place(self, i: int, v: int) -> None:
        r, c, b = self._where(i)
        bit = 1 << v
        self.cells[i] = v
        self.row[r] |= bit
        self.col[c] |= bit
        self.box[b] |= bit

    def clear(self, i: int, v: int) -> None:
        r, c, b = self._where(i)
        bit = ~(1 << v)
        self.cells[i] = 0
        self.row[r] &= bit
        self.col[c] &= bit
        self.box[b] &= bit


def solve_sudoku(cells: list[int], size: int, limit: int = 2, rng: random.Random | None = None) -> SolveResult:
    """Find up to ``limit`` solutions of a board (0 = blank) by depth-first search, filling the cell with the
    fewest candidates first (digits in random order when ``rng`` is given). Also counts search nodes and
    backtracks, a measure of difficulty."""
    board = _Board(cells, size)
    result = SolveResult([], 0, 0)

    def search() -> bool:  # True: stop (limit reached)
        result.nodes += 1
        best, best_mask, best_count = -1, 0, size + 1
        for i, v in enumerate(board.cells):
            if v == 0:
                mask = board.candidates(i)
                count = mask.bit_count()
                if count < best_count:
                    best, best_mask, best_count = i, mask, count
                    if count <= 1:
                        break
        if best < 0:
            result.solutions.append(list(board.cells))
            return len(result.solutions) >= limit
        if best_count == 0:
            result.backtracks += 1
            return False
        digits = [d for d in range(1, size + 1) if best_mask >> d & 1]
        if rng is not None:
            rng.shuffle(digits)
        for d in digits:
            board.place(best, d)
            if search():
                return True
            board.clear(best, d)
        return False

    search()
    return result


def is_valid_solution(cells: list[int], size: int) -> bool:
    """Whether a filled board obeys every row, column and box rule."""
    if len(cells) != size * size or any(not 1 <= v <= size for v in cells):
        return False
    try:
        _Board(cells, size)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------------


def generate_sudoku(size: int, rng: random.Random, min_clues: int | None = None) -> dict:
    """One puzzle with a unique solution: a random full board, then clues removed in random order as long as
    the solution stays unique (down to ``min_clues`` clues at the least, when given). Returns ``question``,
    ``answer`` (board strings), ``clues`` and ``rating``: the dead ends :func:`solve_sudoku` meets before finding
    the solution (0 = solvable without a wrong guess; the higher, the harder)."""
    solution = solve_sudoku([0] * (size * size), size, limit=1, rng=rng).solutions[0]
    puzzle = list(solution)
    order = list(range(size * size))
    rng.shuffle(order)
    clues = size * size
    for i in order:
        if min_clues is not None and clues <= min_clues:
            break
        keep = puzzle[i]
        puzzle[i] = 0
        if len(solve_sudoku(puzzle, size, limit=2).solutions) != 1:
            puzzle[i] = keep
        else:
            clues -= 1
    rating = float(solve_sudoku(puzzle, size, limit=1).backtracks)
    return {"question": format_board(puzzle), "answer": format_board(solution), "clues": clues, "rating": rating}


def augment_sudoku(question: str, answer: str, rng: random.Random) -> tuple[str, str]:
    """A random validity-preserving transform of a puzzle and its solution: digit permutation, band and stack
    shuffles, row shuffles within bands, column shuffles within stacks, and (square boxes only: 4x4, 9x9) a
    transposition. The puzzle keeps its clue count and a unique solution."""
    size = board_size(question)
    br, bc = box_shape(size)
    q, a = parse_board(question, size), parse_board(answer, size, blanks=False)
    digits = list(range(1, size + 1))
    rng.shuffle(digits)
    relabel = [0] + digits
    bands = list(range(size // br))  # groups of br rows
    stacks = list(range(size // bc))  # groups of bc columns
    rng.shuffle(bands)
    rng.shuffle(stacks)
    rows = [band * br + r for band in bands for r in rng.sample(range(br), br)]
    cols = [stack * bc + c for stack in stacks for c in rng.sample(range(bc), bc)]
    transpose = br == bc and rng.random() < 0.5

    def apply(cells):
        out = []
        for r in range(size):
            for c in range(size):
                src_r, src_c = (rows[c], cols[r]) if transpose else (rows[r], cols[c])
                out.append(relabel[cells[src_r * size + src_c]])
        return format_board(out)

    return apply(q), apply(a)


def relabelled(board: str) -> str:
    """The board with digits relabelled in order of first appearance (digit permutations collapse)."""
    mapping: dict[str, str] = {".": "."}
    return "".join(mapping.setdefault(ch, str(len(mapping))) for ch in board)


def _to_dataset(rows: list[dict]) -> Dataset:
    columns = ("source", "question", "answer", "rating", "clues")
    data = {k: [r[k] for r in rows] for k in columns}
    data["inputs"] = [encode_board(r["question"]) for r in rows]
    data["labels"] = [encode_board(r["answer"]) for r in rows]
    return Dataset.from_dict(data)


def load_sudoku_csv(path: str | Path, check_unique: bool = False, limit: int | None = None) -> Dataset:
    """Load a CSV in the published Sudoku-Extreme layout (header ``source,question,answer,rating``; board
    strings with ``'.'`` for blanks), validating every row: board lengths, characters, the answer filling the
    question's clues and obeying the rules, and (``check_unique=True``) that the question has no other solution.
    A bad row raises ``ValueError`` naming its line and the problem. Adds ``clues`` and the ``inputs`` /
    ``labels`` tokens."""
    return _to_dataset(
        read_puzzle_csv(path, "Sudoku-Extreme", lambda record: _check_record(record, check_unique), limit)
    )


def _check_record(record: dict, check_unique: bool) -> dict:
    question, answer = record["question"].strip(), record["answer"].strip()
    size = board_size(question)
    q = parse_board(question, size)
    a = parse_board(answer, size, blanks=False)
    if not is_valid_solution(a, size):
        raise ValueError(f"the answer breaks a Sudoku rule: {answer!r}")
    clash = [i for i, (x, y) in enumerate(zip(q, a)) if x and x != y]
    if clash:
        raise ValueError(f"the answer changes the question's clue at cell {clash[0]}: {question!r} vs {answer!r}")
    if check_unique:
        found = solve_sudoku(q, size, limit=2).solutions
        if len(found) != 1:
            raise ValueError(f"the question has {'no' if not found else 'more than one'} solution: {question!r}")
    return {"question": format_board(q), "answer": answer, "clues": sum(1 for v in q if v)}
