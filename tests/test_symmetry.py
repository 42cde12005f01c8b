"""Canonical forms of puzzles: equal exactly when a symmetry of the task maps one puzzle onto the other."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from equilibria.tasks import augment_sudoku, build_maze_dataset, build_sudoku_dataset, task_record
from equilibria.tasks.sudoku import format_board, is_valid_solution, parse_board, relabelled
from equilibria.tasks.symmetry import (
    SymmetryClasses,
    maze_canonical,
    sudoku_canonical,
    sudoku_class_key,
    sudoku_classes,
    sudoku_equivalent,
    sudoku_transforms,
)


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
    assert [record.class_key(row) for row in sudoku] == [sudoku_canonical(q) for q in sudoku["question"]]
    mazes = build_maze_dataset(7, 3, 0, seed=0)["train"]
    assert [task_record("maze").class_key(row) for row in mazes] == [maze_canonical(q) for q in mazes["question"]]
    assert format_board(parse_board(sudoku["question"][0])) == sudoku["question"][0]


@pytest.mark.slow
def test_maze_splits_share_no_maze_up_to_symmetry_and_say_so():
    from equilibria.tasks.named_splits import split_census

    data = build_maze_dataset(9, 120, 30, seed=0, min_path=9)
    census = split_census("maze", data["train"], data["test"])
    assert census["held_out"] and census["test_rows_in_training_classes"] == 0
    assert census["train_classes"] == 120 and census["test_classes"] == 30
    with pytest.raises(ValueError, match=r"could not draw 400 distinct 7x7 mazes up to rotation, reflection"):
        build_maze_dataset(7, 300, 100, seed=0, min_path=7)  # the generator has about 151 classes at 7x7


def test_a_4x4_sudoku_split_is_reported_as_not_held_out():
    """4x4 Sudoku has few classes (36 seen in 5000 draws): its test puzzles are symmetric variants of training
    ones, and the census says so (its results are a memorisation check)."""
    from equilibria.tasks.named_splits import split_census

    data = build_sudoku_dataset(4, 300, 40, seed=0, split_by="board")
    census = split_census("sudoku", data["train"], data["test"])
    assert not census["held_out"] and census["test_rows_in_training_classes"] > 0
    assert census["train_classes"] <= 36 and census["up_to"] == "the task's symmetries"
    with pytest.raises(ValueError, match=r"outside the \d+ classes of the 300 training puzzles.*split_by='board'"):
        build_sudoku_dataset(4, 300, 40, seed=0)  # held out by class: the 4x4 generator has run out of classes


@pytest.mark.slow
@pytest.mark.parametrize("size, train, test", [(4, 8, 6), (6, 60, 20), (9, 30, 10)])
def test_sudoku_splits_are_held_out_by_class(size, train, test):
    from equilibria.tasks.named_splits import split_census

    data = build_sudoku_dataset(size, train, test, seed=0, min_clues=18 if size == 6 else None, augmentations=1)
    census = split_census("sudoku", data["train"], data["test"])
    assert census["held_out"] and census["test_classes"] == test and census["train_classes"] <= train
    base = build_sudoku_dataset(size, train, test, seed=0, min_clues=18 if size == 6 else None, split_by="board")
    assert base["train"]["question"] == data["train"]["question"][:train]  # training boards do not depend on it


@pytest.mark.parametrize("split_by", ["class", "board"])
def test_a_validation_split_is_held_out_from_train_and_test_and_changes_neither(split_by):
    from equilibria.tasks.named_splits import split_census

    options = dict(seed=0, min_clues=18, augmentations=2, split_by=split_by)
    plain = build_sudoku_dataset(6, 40, 10, **options)
    data = build_sudoku_dataset(6, 40, 10, num_validation=12, **options)
    assert len(data["validation"]) == 12
    for name in ("train", "test"):
        assert data[name]["question"] == plain[name]["question"]  # choosing settings does not change the data
    if split_by == "class":
        for other in ("train", "test"):
            census = split_census("sudoku", data[other], data["validation"])
            assert census["held_out"] and census["test_classes"] == 12
    else:
        seen = {relabelled(q) for name in ("train", "test") for q in data[name]["question"]}
        assert not seen & {relabelled(q) for q in data["validation"]["question"]}
    with pytest.raises(ValueError, match="num_validation >= 0"):
        build_sudoku_dataset(6, 4, 1, min_clues=18, num_validation=-1)


def _near_misses(board: str, size: int) -> list[str]:
    """Boards one edit away from ``board``: a clue's digit swapped with another clue's in one cell only, and a clue
    moved to a blank cell. None is equivalent to ``board`` (their class invariants may still agree)."""
    cells = parse_board(board, size)
    clues = [i for i, v in enumerate(cells) if v]
    a = next(i for i in clues if cells[i] != cells[clues[0]])
    swapped = list(cells)
    swapped[clues[0]], swapped[a] = cells[a], cells[clues[0]]
    moved = list(cells)
    blank = next(i for i, v in enumerate(cells) if not v)
    moved[blank], moved[clues[-1]] = cells[clues[-1]], 0
    return [format_board(swapped), format_board(moved)]


@pytest.mark.slow
def test_9x9_classes_by_invariant_and_exact_check():
    rng = random.Random(0)
    data = build_sudoku_dataset(9, 6, 0, seed=4)["train"]
    for question, answer in zip(data["question"], data["answer"]):
        moved = augment_sudoku(question, answer, rng)[0]
        assert sudoku_class_key(moved) == sudoku_class_key(question) and sudoku_class_key(moved).startswith("inv:")
        assert sudoku_equivalent(question, moved) and sudoku_equivalent(moved, question)
        for other in _near_misses(question, 9):
            assert not sudoku_equivalent(question, other)
    classes = sudoku_classes()
    assert [classes.add(q) for q in data["question"]] == [True] * 6
    assert not classes.add(augment_sudoku(data["question"][2], data["answer"][2], rng)[0]) and len(classes) == 6


@pytest.mark.parametrize("size", [4, 6])
def test_the_exact_check_agrees_with_the_canonical_form(size):
    """An invariant confirmed by :func:`sudoku_equivalent` (here the weakest: the clue count) sorts boards into the
    same classes as the enumerated canonical form: the mechanism 9x9 relies on, checked where both exist."""
    rng = random.Random(5)
    data = build_sudoku_dataset(size, 24, 0, seed=5, min_clues=18 if size == 6 else None, split_by="board")["train"]
    boards = list(data["question"])
    boards += [augment_sudoku(q, a, rng)[0] for q, a in zip(data["question"][:8], data["answer"][:8])]
    boards += [m for q in data["question"][:4] for m in _near_misses(q, size)]
    weak = SymmetryClasses(lambda b: sum(ch != "." for ch in b), sudoku_equivalent)
    exact = SymmetryClasses(sudoku_canonical)
    assert [weak.add(b) for b in boards] == [exact.add(b) for b in boards]
    assert len(exact) < len(boards) - 6  # equivalent boards were among them


def test_evaluation_leaves_out_the_training_classes():
    """:func:`kept_rows` with the training classes drops a symmetric variant of a training puzzle that the exact
    question check keeps."""
    from equilibria.tasks.named_splits import class_fingerprints, fingerprints, kept_rows

    data = build_sudoku_dataset(4, 12, 30, seed=0, split_by="board")
    train, test = data["train"], data["test"]
    exact = kept_rows("sudoku", test, set(fingerprints("sudoku", train)))
    by_class = kept_rows("sudoku", test, set(fingerprints("sudoku", train)), set(class_fingerprints("sudoku", train)))
    assert len(exact) == len(test) and len(by_class) < len(test)
    kept = test.select(by_class)
    assert not set(class_fingerprints("sudoku", kept)) & set(class_fingerprints("sudoku", train))


def test_a_generated_training_record_keeps_the_classes_evaluation_excludes():
    """``build_task`` records the training puzzles' class fingerprints and the split's census; evaluation draws
    fresh puzzles outside those classes. A board split (4x4) records that it was one and keeps no classes."""
    from equilibria.evaluation import _exclusion
    from equilibria.tasks.named_splits import build_task, class_fingerprints, eval_split

    data = build_task("sudoku", 12, 4, seed=0, size=4)
    assert data.record["split_census"]["held_out"] and len(data.record["class_fingerprints"]) <= 12
    training = {"task": "sudoku", "description": data.description, "fingerprints": data.train_fingerprints}
    training.update(data.record)
    questions, classes, held = _exclusion(training, "sudoku")
    assert classes == set(data.record["class_fingerprints"]) and "classes up to the task's symmetries" in held["note"]

    class Config:
        vocab_size, max_seq_len = 11, 16

    fresh = eval_split(Config, "sudoku", 10, seed=1, exclude=questions, exclude_classes=classes)
    assert len(fresh) and not set(class_fingerprints("sudoku", fresh)) & classes
    board = build_task("sudoku", 300, 20, seed=0, size=4, split_by="board")
    assert board.record["split_by"] == "board" and "class_fingerprints" not in board.record
    assert not board.record["split_census"]["held_out"]
    with pytest.raises(ValueError, match="split_by='board'"):
        build_task("sudoku", 300, 20, seed=0, size=4)


@pytest.mark.slow
def test_the_census_benchmark_quick_mode_runs(tmp_path):
    from conftest import load_benchmark

    bench = load_benchmark("puzzle_census")
    results = bench.main(["--quick", "--output-dir", str(tmp_path)])
    kinds = {row["name"]: row for row in results["generators"]}
    assert kinds["sudoku 4x4"]["seen"] <= 36 and all(
        r["kind"] in ("saturated", "Chao1", "lower bound") for r in kinds.values()
    )
    splits = {s["name"]: s["runs"][0] for s in results["splits"]}
    assert not splits["EqR 4x4 Sudoku (eqr_sudoku, eqr_halting)"]["held_out"]  # a board split: a memorisation check
    assert splits["EqR 9x9 mazes"]["held_out"] and (tmp_path / "puzzle_census.json").exists()
    assert bench.generator_cell({"kind": "lower bound", "seen": 40, "draws": 40, "once": 40}).startswith("more than 40")


@pytest.mark.slow
def test_train_records_the_census_and_eval_leaves_the_training_classes_out(tmp_path):
    import json

    from equilibria.cli import main

    out = tmp_path / "eqr"
    argv = ["train", "--family", "eqr", "--task", "sudoku", "--size", "4", "--train_size", "10", "--test_size", "4"]
    argv += ["--max_steps", "1", "--hidden_size", "16", "--num_attention_heads", "2", "--eval_loops", "1"]
    assert main([*argv, "--output_dir", str(out), "--save_strategy", "no", "--report_to", "none"]) == 0
    data = json.loads((out / "loop_scaling.json").read_text())["data"]
    assert data["held_out"] and data["split_census"]["test_rows_in_training_classes"] == 0
    assert "held out up to the task's symmetries" in data["note"]
    record = json.loads((out / "training_data.json").read_text())
    assert len(record["class_fingerprints"]) == data["split_census"]["train_classes"]
    assert main(["eval", str(out), "--loops", "1", "--num-examples", "6", "--output-dir", str(out)]) == 0
    evaluated = json.loads((out / "eval_loop_scaling.json").read_text())["data"]
    assert "classes up to the task's symmetries" in evaluated["note"]
    board = tmp_path / "board"
    assert main([*argv, "--split_by", "board", "--output_dir", str(board), "--save_strategy", "no"]) == 0
    assert json.loads((board / "training_data.json").read_text())["split_by"] == "board"
    assert main(["eval", str(board), "--loops", "1", "--num-examples", "6", "--output-dir", str(board)]) == 0
    evaluated = json.loads((board / "eval_loop_scaling.json").read_text())["data"]
    assert not evaluated["held_out"] and "memorisation check" in evaluated["note"]
