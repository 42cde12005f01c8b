"""The Sudoku dataset builder: train/test splits of generated Sudoku puzzles that are held out up to the task's
symmetries (in a module of its own because it needs :mod:`~equilibria.tasks.symmetry`, which reads boards with
:mod:`~equilibria.tasks.sudoku`).

``split_by="class"`` (the default) draws test puzzles from classes no training puzzle falls in
(:mod:`~equilibria.tasks.symmetry`: a rotated maze or a relabelled, row-swapped Sudoku is the same puzzle), so a
score on the test split is evidence of generalisation. ``split_by="board"`` only keeps test boards different from
training boards (Sudoku: up to a relabelling of the digits): a memorisation check, for sizes whose generator has
too few classes to hold any out (4x4 Sudoku: 36). :func:`~equilibria.tasks.named_splits.split_census` reports which a
split is.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from datasets import DatasetDict

from .puzzle_csv import draw_distinct
from .sudoku import _to_dataset, augment_sudoku, box_shape, generate_sudoku, relabelled
from .symmetry import SymmetryClasses, check_split_by, sudoku_classes


def build_sudoku_dataset(
    size: int = 4,
    num_train: int = 1000,
    num_test: int = 200,
    seed: int = 0,
    min_clues: int | None = None,
    augmentations: int = 0,
    split_by: str = "class",
    num_validation: int = 0,
) -> DatasetDict:
    """Seeded train/test splits of unique-solution puzzles. Training boards differ up to a relabelling of the
    digits; test puzzles (``split_by="class"``) fall in no training puzzle's class and in no other test puzzle's
    (the whole symmetry group: digits, rows, columns, bands, stacks, transposition), or (``"board"``) only differ
    from every other board up to a relabelling. When the generator runs out of classes outside the training
    puzzles' (4x4 has 36: a few dozen training puzzles cover them), ``"class"`` is a ``ValueError``. Columns: ``question``, ``answer`` (board strings), ``clues``, ``rating``,
    ``source``, and the tokens ``inputs`` / ``labels`` in the published encoding. ``augmentations=k`` adds ``k``
    random symmetry transforms of every training puzzle (in its class; with ``"board"``, never one that equals a
    test puzzle up to relabelling; the test split is not augmented). ``num_validation=n`` adds a ``validation``
    split of ``n`` puzzles held out from the training and test puzzles as the test split is (for choosing settings
    without looking at the test split); it is drawn from its own random stream, so ``train`` and ``test`` are the
    same with or without it."""
    box_shape(size)
    check_split_by(split_by)
    if num_train < 1 or num_test < 0 or augmentations < 0 or num_validation < 0:
        raise ValueError(
            f"num_train must be >= 1, num_test, augmentations and num_validation >= 0, got {num_train}, {num_test}, "
            f"{augmentations}, {num_validation}"
        )
    rng = random.Random(f"sudoku-{size}-{seed}")

    def drawing_from(stream: random.Random) -> Callable[[], dict]:
        return lambda: {**generate_sudoku(size, stream, min_clues=min_clues), "source": "generated"}

    draw = drawing_from(rng)

    boards = SymmetryClasses(lambda puzzle: relabelled(puzzle["question"]))
    train = draw_distinct(draw, boards.add, num_train, f"{size}x{size} puzzles")
    if split_by == "class":
        classes = sudoku_classes()
        for row in train:
            classes.add(row["question"])
        known = len(classes)
        what = (
            f"{size}x{size} puzzles outside the {known} classes of the {num_train} training puzzles (the generator has "
            "few classes at this size: a larger size, fewer training puzzles, or split_by='board' for a "
            "memorisation check: `--split_by board` in `equilibria train`, `--split-by board` in the benchmarks)"
        )
        accept = lambda puzzle: classes.add(puzzle["question"])  # noqa: E731
    else:
        accept, what = boards.add, f"{size}x{size} puzzles"
    test = draw_distinct(draw, accept, num_test, what)
    held_out = {relabelled(row["question"]) for row in test}
    for row in list(train):
        for _ in range(augmentations):
            question, answer = augment_sudoku(row["question"], row["answer"], rng)
            if relabelled(question) not in held_out:
                train.append({**row, "question": question, "answer": answer, "source": "augmented"})
    splits = {"train": _to_dataset(train), "test": _to_dataset(test)}
    if num_validation:
        for row in train:  # augmented boards too: with split_by="board" they are not in `boards` yet
            accept(row)
        draw = drawing_from(random.Random(f"sudoku-{size}-{seed}-validation"))  # its own stream
        splits["validation"] = _to_dataset(draw_distinct(draw, accept, num_validation, f"validation {what}"))
    return DatasetDict(splits)


__all__ = ["build_sudoku_dataset"]
