"""Canonical forms of puzzles: equal exactly when a symmetry of the task maps one puzzle onto the other."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from equilibria.tasks import augment_sudoku, build_maze_dataset, build_sudoku_dataset, task_record
from equilibria.tasks.sudoku import format_board, is_valid_solution, parse_board
from equilibria.tasks.symmetry import maze_canonical, sudoku_canonical, sudoku_transforms


@pytest.mark.parametrize("size, count", [(4, 128), (6, 3456)])
def test_the_sudoku_group_maps_solutions_to_solutions(size, count):
    transforms = sudoku_transforms(size)
    assert transforms.shape == (count, size * size)
    assert len({row.tobytes() for row in transforms}) == count  # all different
    assert (np.sort(transforms, axis=1) == np.arange(size * size)).all()  # each a permutation of the cells
    solution = parse_board(build_sudoku_dataset(size, 1, 0, seed=0)["train"]["answer"][0], size, blanks=False)
    for row in transforms[:: max(1, count // 64)]:
        assert is_valid_solution([solution[i] for i in row], size)


@pytest.mark.parametrize("size", [4, 6])
def test_a_transformed_relabelled_puzzle_has_the_same_canonical_form(size):
    rng = random.Random(1)
    data = build_sudoku_dataset(size, 40, 0, seed=1, min_clues=18 if size == 6 else None)["train"]
    for question, answer in zip(data["question"], data["answer"]):
        moved = augment_sudoku(question, answer, rng)[0]
        assert sudoku_canonical(moved) == sudoku_canonical(question)


def _equivalent_by_search(a: str, b: str, size: int) -> bool:
    """Brute force, independent of the canonical form: a cell transform and a digit relabelling map a onto b."""
    x, y = parse_board(a, size), parse_board(b, size)
    for row in sudoku_transforms(size):
        moved = [x[i] for i in row]
        if [v == 0 for v in moved] != [v == 0 for v in y]:
            continue
        pairs = {(u, v) for u, v in zip(moved, y) if u}
        if len({u for u, _ in pairs}) == len(pairs) == len({v for _, v in pairs}):
            return True
    return False


def test_the_4x4_canonical_form_separates_exactly_the_classes_a_search_finds():
    boards = build_sudoku_dataset(4, 60, 0, seed=2)["train"]["question"]
    verdicts = []
    for a, b in itertools.combinations(boards[:25], 2):
        verdicts.append(sudoku_canonical(a) == sudoku_canonical(b))
        assert verdicts[-1] == _equivalent_by_search(a, b, 4), (a, b)
    assert 0 < sum(verdicts) < len(verdicts)  # both equivalent and different pairs were compared


def test_9x9_is_refused_with_the_sizes_that_are_enumerated():
    with pytest.raises(ValueError, match=r"enumerated for sizes \(4, 6\)"):
        sudoku_canonical("." * 81)


def test_a_maze_rotated_reflected_or_walked_backwards_is_the_same_maze():
    data = build_maze_dataset(7, 30, 0, seed=0, min_path=7)["train"]
    for maze in data["question"]:
        grid = np.array(list(maze)).reshape(7, 7)
        swapped = "".join(maze).replace("S", "x").replace("G", "S").replace("x", "G")
        variants = ["".join(np.rot90(grid, k).ravel()) for k in range(4)] + ["".join(grid.T.ravel()), swapped]
        assert {maze_canonical(v) for v in variants} == {maze_canonical(maze)}
    assert len({maze_canonical(m) for m in data["question"]}) > 1


def test_the_task_records_give_the_class_of_a_row():
    sudoku = build_sudoku_dataset(6, 3, 0, seed=0, min_clues=18)["train"]
    record = task_record("sudoku")
    assert [record.canonical(row) for row in sudoku] == [sudoku_canonical(q) for q in sudoku["question"]]
    mazes = build_maze_dataset(7, 3, 0, seed=0)["train"]
    assert [task_record("maze").canonical(row) for row in mazes] == [maze_canonical(q) for q in mazes["question"]]
    assert format_board(parse_board(sudoku["question"][0])) == sudoku["question"][0]


def test_maze_splits_share_no_maze_up_to_symmetry_and_say_so():
    from equilibria.tasks.catalog import split_census

    data = build_maze_dataset(9, 120, 30, seed=0, min_path=9)
    census = split_census("maze", data["train"], data["test"])
    assert census["held_out"] and census["test_rows_in_training_classes"] == 0
    assert census["train_classes"] == 120 and census["test_classes"] == 30
    with pytest.raises(ValueError, match=r"could not draw 400 distinct 7x7 mazes up to rotation, reflection"):
        build_maze_dataset(7, 300, 100, seed=0, min_path=7)  # the generator has about 151 classes at 7x7


def test_a_4x4_sudoku_split_is_reported_as_not_held_out():
    """4x4 Sudoku has few classes (36 seen in 5000 draws): its test puzzles are symmetric variants of training
    ones, and the census says so (its results are a memorisation check)."""
    from equilibria.tasks.catalog import split_census

    data = build_sudoku_dataset(4, 300, 40, seed=0)
    census = split_census("sudoku", data["train"], data["test"])
    assert not census["held_out"] and census["test_rows_in_training_classes"] > 0
    assert census["train_classes"] <= 36 and census["up_to"] == "the task's symmetries"
