"""Mazes with a unique shortest path: a generator (randomized depth-first search, optionally with extra openings
that keep the shortest path unique), BFS verification, the published encoding and a loader for the published
CSV layout (Maze-Hard / Maze-Unique).

A maze is a row-major string of ``size * size`` characters over ``"# SGo"``: wall, open, start, goal, path
(the published format, 900 characters for 30x30). The question has ``S`` and ``G``; the answer is the same
maze with the cells of the shortest path between them (``S`` and ``G`` excluded) marked ``o``. Tokens follow
the published encoding: ``#`` 1, space 2, ``S`` 3, ``G`` 4, ``o`` 5, with 0 reserved for padding.
"""

from __future__ import annotations

import math
import random
from collections import deque
from pathlib import Path

from datasets import Dataset, DatasetDict

from .puzzle_csv import draw_distinct, read_puzzle_csv
from .symmetry import SymmetryClasses, check_split_by, maze_canonical

MAZE_CHARS = "# SGo"
MAZE_PAD = 0
MAZE_VOCAB_SIZE = 6  # pad + the five characters
MAX_MAZE_SIZE = 30


def maze_size(text: str) -> int:
    """The side of a square maze string (``len(text)`` must be a square, at least 5 x 5)."""
    side = math.isqrt(len(text))
    if side * side != len(text) or side < 5:
        raise ValueError(f"a maze string holds a square grid of at least 5x5 cells; got {len(text)} characters")
    return side


def check_maze_text(text: str, size: int | None = None, path_allowed: bool = False) -> int:
    """Validate a maze string and return its side: square length, characters from ``"# SGo"`` (``o`` only when
    ``path_allowed``), exactly one ``S`` and one ``G``. Raises ``ValueError`` naming the problem."""
    if not isinstance(text, str):
        raise ValueError(f"a maze must be a string, got {type(text).__name__}")
    side = maze_size(text) if size is None else size
    if len(text) != side * side:
        raise ValueError(f"a {side}x{side} maze has {side * side} characters, got {len(text)}")
    allowed = MAZE_CHARS if path_allowed else MAZE_CHARS.replace("o", "")
    bad = next((i for i, ch in enumerate(text) if ch not in allowed), None)
    if bad is not None:
        raise ValueError(
            f"cell {bad} (row {bad // side}, column {bad % side}) is {text[bad]!r}; allowed characters: {allowed!r}"
        )
    for mark in "SG":
        if text.count(mark) != 1:
            raise ValueError(f"a maze has exactly one {mark!r}, found {text.count(mark)}")
    return side


def encode_maze(text: str) -> list[int]:
    """Tokens of a maze string in the published encoding (``#`` 1, space 2, ``S`` 3, ``G`` 4, ``o`` 5)."""
    bad = next((ch for ch in text if ch not in MAZE_CHARS), None)
    if bad is not None:
        raise ValueError(f"maze characters are {MAZE_CHARS!r}, got {bad!r}")
    return [MAZE_CHARS.index(ch) + 1 for ch in text]


def decode_maze(tokens) -> str:
    tokens = [int(t) for t in tokens]
    if any(not 1 <= t <= len(MAZE_CHARS) for t in tokens):
        raise ValueError(f"maze tokens are 1..{len(MAZE_CHARS)} ({MAZE_CHARS!r}), got {tokens}")
    return "".join(MAZE_CHARS[t - 1] for t in tokens)


def shortest_paths(text: str) -> tuple[int | None, int, list[int]]:
    """BFS from ``S`` over non-wall cells: ``(length, count, path)`` where ``length`` is the number of steps
    from ``S`` to ``G`` (``None`` if unreachable), ``count`` the number of distinct shortest paths (capped at 2),
    and ``path`` one shortest path's cells strictly between ``S`` and ``G``."""
    side = maze_size(text)
    start, goal = text.index("S"), text.index("G")
    dist = [-1] * len(text)
    ways = [0] * len(text)
    parent = [-1] * len(text)
    dist[start], ways[start] = 0, 1
    queue = deque([start])
    while queue:
        i = queue.popleft()
        r, c = divmod(i, side)
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < side and 0 <= nc < side:
                j = nr * side + nc
                if text[j] == "#":
                    continue
                if dist[j] < 0:
                    dist[j], parent[j] = dist[i] + 1, i
                    ways[j] = ways[i]
                    queue.append(j)
                elif dist[j] == dist[i] + 1:
                    ways[j] = min(2, ways[j] + ways[i])
    if dist[goal] < 0:
        return None, 0, []
    path, i = [], parent[goal]
    while i != start:
        path.append(i)
        i = parent[i]
    return dist[goal], ways[goal], path[::-1]


def solve_maze(question: str) -> str:
    """The answer string of a question: the maze with one shortest path marked ``o``. Raises ``ValueError`` if
    ``G`` cannot be reached."""
    check_maze_text(question)
    length, _, path = shortest_paths(question)
    if length is None:
        raise ValueError("the goal cannot be reached from the start")
    cells = list(question)
    for i in path:
        cells[i] = "o"
    return "".join(cells)


def check_maze_answer(question: str, answer: str, check_unique: bool = False) -> int:
    """Validate a (question, answer) pair and return the path length: the answer must be the question with
    ``o`` on exactly the cells of a shortest ``S``-``G`` path (and, with ``check_unique``, the only one)."""
    side = check_maze_text(question)
    check_maze_text(answer, side, path_allowed=True)
    changed = [i for i, (q, a) in enumerate(zip(question, answer)) if q != a]
    if any(question[i] != " " or answer[i] != "o" for i in changed):
        i = next(i for i in changed if question[i] != " " or answer[i] != "o")
        raise ValueError(
            f"the answer changes cell {i} from {question[i]!r} to {answer[i]!r}; it may only mark open cells 'o'"
        )
    length, count, _ = shortest_paths(question)
    if length is None:
        raise ValueError("the goal cannot be reached from the start")
    if len(changed) != length - 1:
        raise ValueError(f"the marked path has {len(changed)} cells, a shortest path has {length - 1}")
    marked = set(changed)
    walled = "".join(ch if ch in "#SG" or i in marked else "#" for i, ch in enumerate(answer))
    if shortest_paths(walled)[0] != length:
        raise ValueError("the cells marked 'o' do not form a path from S to G")
    if check_unique and count != 1:
        raise ValueError("the maze has more than one shortest path")
    return length


def generate_maze(
    size: int, rng: random.Random, min_path: int = 1, max_path: int | None = None, openings: int = 0
) -> dict:
    """One maze with a unique shortest path between ``S`` and ``G``.

    The maze is carved by a randomized depth-first search on the cells at odd coordinates (a perfect maze: one
    path between any two cells); ``openings`` walls are then knocked out at random where the shortest path stays
    unique, which adds loops and dead-end shortcuts. ``S`` and ``G`` are placed on open cells whose path length
    (steps) lies in ``[min_path, max_path]``. Returns ``question``, ``answer``, ``rating`` (the path length)."""
    if not isinstance(size, int) or not 5 <= size <= MAX_MAZE_SIZE:
        raise ValueError(f"maze size must be an integer in [5, {MAX_MAZE_SIZE}], got {size!r}")
    grid = [["#"] * size for _ in range(size)]
    last = size - 2 if size % 2 == 1 else size - 3  # the last odd coordinate with a wall beyond it
    cells = [(r, c) for r in range(1, last + 1, 2) for c in range(1, last + 1, 2)]
    start = rng.choice(cells)
    grid[start[0]][start[1]] = " "
    stack = [start]
    while stack:
        r, c = stack[-1]
        steps = [
            (dr, dc) for dr, dc in ((-2, 0), (2, 0), (0, -2), (0, 2)) if 1 <= r + dr <= last and 1 <= c + dc <= last
        ]
        fresh = [(dr, dc) for dr, dc in steps if grid[r + dr][c + dc] == "#"]
        if not fresh:
            stack.pop()
            continue
        dr, dc = rng.choice(fresh)
        grid[r + dr // 2][c + dc // 2] = " "
        grid[r + dr][c + dc] = " "
        stack.append((r + dr, c + dc))
    text = "".join("".join(row) for row in grid)
    max_path = max_path if max_path is not None else size * size
    for _ in range(200):
        s, g = rng.sample(cells, 2)
        question = _place(text, size, s, g)
        length, count, _ = shortest_paths(question)
        if length is not None and min_path <= length <= max_path and count == 1:
            break
    else:
        raise ValueError(f"no start/goal pair with a path length in [{min_path}, {max_path}] in a {size}x{size} maze")
    walls = [i for i, ch in enumerate(question) if ch == "#" and _interior_wall(i, size, last)]
    rng.shuffle(walls)
    opened = 0
    for i in walls:
        if opened >= openings:
            break
        trial = question[:i] + " " + question[i + 1 :]
        trial_length, trial_count, _ = shortest_paths(trial)
        if trial_count == 1 and min_path <= trial_length <= max_path:
            question, opened = trial, opened + 1
    answer = solve_maze(question)
    return {"question": question, "answer": answer, "rating": float(shortest_paths(question)[0])}


def _interior_wall(i: int, size: int, last: int) -> bool:
    r, c = divmod(i, size)
    return 1 <= r <= last and 1 <= c <= last and (r % 2 == 1) != (c % 2 == 1)  # a wall between two cells


def _place(text: str, size: int, s: tuple[int, int], g: tuple[int, int]) -> str:
    cells = list(text)
    cells[s[0] * size + s[1]] = "S"
    cells[g[0] * size + g[1]] = "G"
    return "".join(cells)


def build_maze_dataset(
    size: int = 9,
    num_train: int = 1000,
    num_test: int = 200,
    seed: int = 0,
    min_path: int = 1,
    max_path: int | None = None,
    openings: int = 0,
    split_by: str = "class",
) -> DatasetDict:
    """Seeded train/test splits of mazes distinct up to the task's symmetries (``split_by="class"``): no two rows,
    in either split, are rotations or reflections of each other or the same maze with start and goal swapped
    (:func:`~equilibria.tasks.symmetry.maze_canonical`), so the test split is held out up to symmetry. A small size
    has few such classes (7x7 with ``min_path=7``: 151 seen in 5000 draws); asking for more is a ``ValueError``.
    ``split_by="board"`` only keeps the mazes different as strings (a memorisation check). Columns: ``source``,
    ``question``, ``answer``, ``rating`` (the shortest path's length) and the tokens ``inputs`` / ``labels``."""
    if num_train < 1 or num_test < 0:
        raise ValueError(f"num_train must be >= 1 and num_test >= 0, got {num_train} and {num_test}")
    by_class = check_split_by(split_by) == "class"
    rng = random.Random(f"maze-{size}-{seed}")
    seen = SymmetryClasses(lambda maze: maze_canonical(maze["question"]) if by_class else maze["question"])
    rows = draw_distinct(
        lambda: {
            "source": "generated",
            **generate_maze(size, rng, min_path=min_path, max_path=max_path, openings=openings),
        },
        seen.add,
        num_train + num_test,
        f"{size}x{size} mazes"
        + (
            " up to rotation, reflection and swapping start and goal (a larger size has more; split_by='board', "
            "`--split_by board`, draws a memorisation check)"
            if by_class
            else ""
        ),
    )
    return DatasetDict(train=_to_dataset(rows[:num_train]), test=_to_dataset(rows[num_train:]))


def _to_dataset(rows: list[dict]) -> Dataset:
    data = {k: [r[k] for r in rows] for k in ("source", "question", "answer", "rating")}
    data["inputs"] = [encode_maze(r["question"]) for r in rows]
    data["labels"] = [encode_maze(r["answer"]) for r in rows]
    return Dataset.from_dict(data)


def load_maze_csv(path: str | Path, check_unique: bool = False, limit: int | None = None) -> Dataset:
    """Load a CSV in the published Maze-Hard layout (header ``source,question,answer,rating``; maze strings over
    ``"# SGo"``), validating every row with :func:`check_maze_answer`; a bad row raises ``ValueError`` naming
    its line and the problem."""

    def check_row(record: dict) -> dict:
        check_maze_answer(record["question"], record["answer"], check_unique=check_unique)
        return {"question": record["question"], "answer": record["answer"]}

    return _to_dataset(read_puzzle_csv(path, "maze", check_row, limit))
