"""Claims about the puzzle tasks: generated Sudoku and mazes have unique solutions (checked by independent
solvers), the encodings match the published ones and round-trip, splits share no puzzle, and the loaders read
files in the published CSV layout (tests/data holds small files written in that layout) and refuse bad rows."""

import itertools
import random
import re
from pathlib import Path

import pytest

from equilibria.tasks.maze import (
    MAZE_VOCAB_SIZE,
    build_maze_dataset,
    check_maze_answer,
    decode_maze,
    encode_maze,
    generate_maze,
    load_maze_csv,
    shortest_paths,
)
from equilibria.tasks.sudoku import (
    SUDOKU_VOCAB_SIZE,
    augment_sudoku,
    box_shape,
    decode_board,
    encode_board,
    generate_sudoku,
    is_valid_solution,
    load_sudoku_csv,
    parse_board,
    solve_sudoku,
)
from equilibria.tasks.sudoku_splits import build_sudoku_dataset

DATA = Path(__file__).parent / "data"


def brute_force_solutions(question: str, size: int, limit: int = 2) -> list[str]:
    """An independent, naive solver (row by row, no bitmasks, no heuristics) to check uniqueness."""
    cells = parse_board(question, size)
    br, bc = box_shape(size)
    found = []

    def ok(i, d):
        r, c = divmod(i, size)
        if any(cells[r * size + k] == d for k in range(size)) or any(cells[k * size + c] == d for k in range(size)):
            return False
        r0, c0 = r - r % br, c - c % bc
        return all(cells[(r0 + a) * size + c0 + b] != d for a in range(br) for b in range(bc))

    def go(i):
        if len(found) >= limit:
            return
        if i == size * size:
            found.append("".join(map(str, cells)))
            return
        if cells[i]:
            go(i + 1)
            return
        for d in range(1, size + 1):
            if ok(i, d):
                cells[i] = d
                go(i + 1)
                cells[i] = 0

    go(0)
    return found


@pytest.mark.parametrize("size", [4, 6, 9])
def test_generated_sudoku_have_exactly_one_solution(size):
    rng = random.Random(size)
    for _ in range(3 if size == 9 else 6):
        puzzle = generate_sudoku(size, rng)
        assert brute_force_solutions(puzzle["question"], size) == [puzzle["answer"]]
        assert puzzle["clues"] == sum(ch != "." for ch in puzzle["question"])
        assert puzzle["rating"] >= 0


def test_sudoku_encoding_is_the_published_one_and_round_trips():
    question = "1.3." + "." * 12
    assert encode_board(question)[:4] == [2, 1, 4, 1]  # digit + 1, blank 1, pad 0 unused
    assert SUDOKU_VOCAB_SIZE == 11
    data = build_sudoku_dataset(size=4, num_train=20, num_test=5, seed=1, split_by="board")
    for row in data["train"]:
        assert decode_board(row["inputs"]) == row["question"] and decode_board(row["labels"]) == row["answer"]
        assert all(1 <= t <= 10 for t in row["inputs"])


def test_sudoku_splits_share_no_puzzle_even_up_to_relabelling():
    data = build_sudoku_dataset(size=4, num_train=60, num_test=20, seed=3, augmentations=3, split_by="board")

    def canonical(board):  # relabel digits in order of first appearance
        mapping = {".": "."}
        return "".join(mapping.setdefault(ch, str(len(mapping))) for ch in board)

    train = {canonical(q) for q in data["train"]["question"]}
    test = {canonical(q) for q in data["test"]["question"]}
    assert len(test) == 20 and not train & test
    again = build_sudoku_dataset(size=4, num_train=60, num_test=20, seed=3, augmentations=3, split_by="board")
    assert again["test"]["question"] == data["test"]["question"]  # seeded
    assert again["train"]["question"] == data["train"]["question"]


@pytest.mark.parametrize("size", [4, 6, 9])
def test_augmentation_keeps_validity_clues_and_uniqueness(size):
    rng = random.Random(7)
    puzzle = generate_sudoku(size, rng)
    seen = set()
    for _ in range(8):
        question, answer = augment_sudoku(puzzle["question"], puzzle["answer"], rng)
        assert is_valid_solution(parse_board(answer, size), size)
        assert sum(ch != "." for ch in question) == puzzle["clues"]
        assert all(q in (".", a) for q, a in zip(question, answer))
        # the naive solver is too slow on some 9x9 transforms; the fast one is checked against it above
        found = brute_force_solutions(question, size) if size < 9 else solve_sudoku(parse_board(question), 9).solutions
        assert [s if isinstance(s, str) else "".join(map(str, s)) for s in found] == [answer]
        seen.add(question)
    assert len(seen) > 1
    augmented = build_sudoku_dataset(size=4, num_train=5, num_test=2, seed=0, augmentations=2)["train"]
    assert 5 < len(augmented) <= 15 and augmented["source"].count("generated") == 5


def test_the_sudoku_extreme_loader_reads_the_published_layout():
    data = load_sudoku_csv(DATA / "sudoku-extreme-sample.csv", check_unique=True)
    assert len(data) == 6 and set(data.column_names) >= {"source", "question", "answer", "rating", "inputs", "labels"}
    assert all(len(q) == 81 for q in data["question"])
    assert decode_board(data[0]["inputs"]) == data[0]["question"]


@pytest.mark.parametrize(
    "question, answer, message",
    [
        ("1" * 80, "1" * 81, "16, 36 or 81 characters"),
        ("x" + "." * 80, None, "'x'; allowed"),
        (None, "." + "1" * 80, "blank in a solution"),
        (None, "CLASH", "changes the question's clue"),
        (None, "RULE", "breaks a Sudoku rule"),
        ("NONUNIQUE", None, "more than one solution"),
    ],
)
def test_bad_sudoku_rows_are_clear_errors(tmp_path, question, answer, message):
    good = load_sudoku_csv(DATA / "sudoku-extreme-sample.csv")[0]
    q, a = question or good["question"], answer or good["answer"]
    if answer == "CLASH":  # relabel two digits: still a valid grid, but it contradicts the clues
        a = good["answer"].translate(str.maketrans("12", "21"))
    if answer == "RULE":
        q, a = "." * 81, "123456789" * 9
    if question == "NONUNIQUE":
        q = "." * 81
    path = tmp_path / "bad.csv"
    path.write_text(f"source,question,answer,rating\nx,{q},{a},1\n")
    with pytest.raises(ValueError, match=message) as err:
        load_sudoku_csv(path, check_unique=True)
    assert "line 2" in str(err.value)


def test_a_csv_without_the_published_columns_is_refused(tmp_path):
    path = tmp_path / "wrong.csv"
    path.write_text("puzzle,solution\n1,2\n")
    with pytest.raises(ValueError, match="source,question,answer,rating"):
        load_sudoku_csv(path)
    with pytest.raises(ValueError, match="source,question,answer,rating"):
        load_maze_csv(path)


@pytest.mark.parametrize("loader", ["sudoku", "maze"])
@pytest.mark.parametrize(
    "row, message",
    [("x,{q},{a}", "no value for the column(s) ['rating']"), ("x,{q},{a},1,extra", "5 values for the 4 columns")],
)
def test_a_row_with_a_missing_or_extra_column_is_refused_by_line(tmp_path, loader, row, message):
    load = load_sudoku_csv if loader == "sudoku" else load_maze_csv
    sample = DATA / ("sudoku-extreme-sample.csv" if loader == "sudoku" else "maze-hard-sample.csv")
    good = load(sample)[0]
    path = tmp_path / "bad.csv"
    path.write_text("source,question,answer,rating\n" + f"x,{good['question']},{good['answer']},1\n" * 2)
    assert len(load(path)) == 2
    path.write_text(
        "source,question,answer,rating\n"
        + f"x,{good['question']},{good['answer']},1\n"
        + row.format(q=good["question"], a=good["answer"])
        + "\n"
    )
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        load(path)
    assert "line 3" in str(err.value)


def brute_force_path_count(question: str) -> tuple[int, int]:
    """Independent check by exhaustive DFS over simple paths on small mazes: (shortest length, how many)."""
    side = int(len(question) ** 0.5)
    start, goal = question.index("S"), question.index("G")
    best, count = [10**9], [0]

    def go(i, visited, steps):
        if steps > best[0]:
            return
        if i == goal:
            if steps < best[0]:
                best[0], count[0] = steps, 1
            elif steps == best[0]:
                count[0] += 1
            return
        r, c = divmod(i, side)
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            j = nr * side + nc
            if 0 <= nr < side and 0 <= nc < side and question[j] != "#" and j not in visited:
                visited.add(j)
                go(j, visited, steps + 1)
                visited.discard(j)

    go(start, {start}, 0)
    return best[0], count[0]


@pytest.mark.parametrize("size, openings", [(7, 0), (9, 2), (11, 4)])
def test_generated_mazes_have_a_unique_shortest_path(size, openings):
    rng = random.Random(size)
    for _ in range(4):
        maze = generate_maze(size, rng, min_path=4, openings=openings)
        length, count = brute_force_path_count(maze["question"])
        assert count == 1 and length == maze["rating"]
        assert check_maze_answer(maze["question"], maze["answer"], check_unique=True) == length
        assert maze["answer"].count("o") == length - 1


def test_maze_sizes_up_to_30_and_path_length_ranges():
    rng = random.Random(0)
    maze = generate_maze(30, rng, min_path=60, max_path=120, openings=10)
    assert len(maze["question"]) == 900 and 60 <= maze["rating"] <= 120
    assert shortest_paths(maze["question"])[1] == 1
    with pytest.raises(ValueError, match=r"maze size must be an integer in \[5, 30\]"):
        generate_maze(31, rng)


def test_maze_encoding_is_the_published_one_and_splits_are_disjoint():
    assert encode_maze("# SGo") == [1, 2, 3, 4, 5] and MAZE_VOCAB_SIZE == 6
    data = build_maze_dataset(size=9, num_train=30, num_test=10, seed=2, min_path=4)
    assert not set(data["train"]["question"]) & set(data["test"]["question"])
    for row in itertools.islice(data["test"], 5):
        assert decode_maze(row["inputs"]) == row["question"] and decode_maze(row["labels"]) == row["answer"]


def test_the_maze_loader_reads_the_published_layout_and_refuses_bad_rows(tmp_path):
    data = load_maze_csv(DATA / "maze-hard-sample.csv", check_unique=True)
    assert len(data) == 3 and all(len(q) == 900 for q in data["question"])
    good = data[0]
    bad_cases = {
        "allowed characters": (good["question"].replace(" ", "x", 1), good["answer"]),
        "exactly one 'S'": (good["question"].replace("S", " "), good["answer"]),
        "shortest path has": (good["question"], good["answer"].replace("o", " ", 1)),
        "may only mark open cells": (good["question"], good["answer"].replace("#", "o", 1)),
    }
    for message, (q, a) in bad_cases.items():
        path = tmp_path / "bad.csv"
        path.write_text(f"source,question,answer,rating\nx,{q},{a},1\n")
        with pytest.raises(ValueError, match=message):
            load_maze_csv(path)
