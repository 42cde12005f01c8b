"""The tasks of equilibria: one :class:`Task` record per task, the single place that knows which exist.

Everything that varies by task reads its record: the CLI's ``--task`` choices, the training and
evaluation splits (:mod:`equilibria.tasks.named_splits`), the held-out check (what makes two rows the same question),
the loader of the task's published file format, and what a task fixes in a model's config. The families name the
tasks their heads are trained on (:mod:`equilibria.families`).

Adding a task is its module here (a generator returning ``train`` / ``test`` splits; for a solver task, ``inputs``
and ``labels`` columns) and one :class:`Task` in :data:`TASK_RECORDS`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from datasets import Dataset, DatasetDict

from ..wording import counted
from .addition import STARS_ADDITION_FORMAT, addition_tokenizer, build_addition_dataset
from .embedding import EMBEDDING_SIZE, SentenceEmbedder, embed_entailment
from .entailment import build_entailment_dataset
from .maze import MAZE_VOCAB_SIZE, build_maze_dataset, decode_maze, load_maze_csv
from .reachability import build_reachability_dataset, reachability_input_size
from .sudoku import SUDOKU_VOCAB_SIZE, board_size, decode_board, load_sudoku_csv
from .sudoku_splits import build_sudoku_dataset
from .symmetry import (
    ENUMERATED_SUDOKU_SIZES,
    SymmetryClasses,
    check_split_by,
    maze_canonical,
    sudoku_class_key,
    sudoku_equivalent,
)

SHAPE_OPTIONS = (None, "digits", "size", "nodes")  # the size knobs `equilibria train` has flags for


@dataclass(frozen=True)
class Task:
    """Everything about one task that code outside its module needs.

    ``generate(shape, train_size, test_size, seed)`` draws fresh ``train`` / ``test`` splits that share no question
    (``shape``: the value of the task's ``shape_option``, e.g. the operands' digits); ``question(row)`` is what makes
    two rows the same question (their fingerprint, :func:`~equilibria.tasks.named_splits.fingerprints`); rows of tasks
    with the same ``question_kind`` compare (addition problems and prompt/completion rows are both keyed by the
    prompt). ``shape_of(config)`` reads the shape a saved model's config was built for, or raises ``ValueError``
    when the config cannot read the task (``None``: the caller's ``shape_option`` decides). A task with a
    ``tokenizer`` is a text task (its rows are ``prompt`` / ``answer``); the others give ``inputs`` / ``labels``,
    made from the raw rows by ``prepare`` when they need it (entailment: sentence embeddings).
    ``class_key(row)``: a key of the row's class under the task's symmetries (:mod:`~equilibria.tasks.symmetry`),
    equal for two rows that a symmetry maps onto each other; ``same_class(a, b)`` decides rows whose keys are equal
    where the key is only an invariant (``None``: equal keys are one class). Both ``None``: no symmetries declared,
    a row is its own class. A task with classes draws splits ``split_by`` class or by board (:meth:`draw`)."""

    name: str
    summary: str
    shape_option: str | None
    describe: Callable[[int | None], str]
    generate: Callable[[int | None, int, int, int], DatasetDict]
    question: Callable[[dict], str]
    shape_of: Callable[[object], int | None]
    metric: str
    question_kind: str = ""
    tokenizer: Callable[[], object] | None = None
    prompt_format: str | None = None
    prepare: Callable[[Dataset], Dataset] | None = None
    vocab_size: int | None = None  # a puzzle task's token vocabulary (the published encoding)
    load_published: Callable[[str], Dataset] | None = None  # reads a file of the published format (by its suffix)
    published_format: str = ""
    published_suffix: str = ".csv"
    class_key: Callable[[dict], str] | None = None
    same_class: Callable[[dict, dict], bool] | None = None
    options: tuple[str, ...] = ()  # keyword options of generate, describe and tokenizer (a variant of the format)

    def __post_init__(self):
        if self.shape_option not in SHAPE_OPTIONS:
            raise ValueError(
                f"Task {self.name!r}: shape_option must be one of {SHAPE_OPTIONS}, got {self.shape_option!r}"
            )

    def draw(
        self, shape: int | None, train: int, test: int, seed: int, split_by: str = "class", options: dict | None = None
    ) -> DatasetDict:
        """Fresh splits (:attr:`generate`, with the task's ``options``); for a task with classes, test puzzles
        outside the training classes (``split_by="class"``) or only different boards (``"board"``: a memorisation
        check)."""
        check_split_by(split_by)
        options = self.check_options(options)
        if self.class_key is None:
            return self.generate(shape, train, test, seed, **options)
        return self.generate(shape, train, test, seed, split_by=split_by, **options)

    def check_options(self, options: dict | None) -> dict:
        """``options`` without the unset (``None``) ones; ``ValueError`` for one the task does not take."""
        options = {k: v for k, v in (options or {}).items() if v is not None}
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            takes = f"it takes {', '.join('--' + k for k in self.options)}" if self.options else "it takes none"
            flags = ", ".join(f"--{k}" for k in unknown)
            raise ValueError(f"{flags} {'does' if len(unknown) == 1 else 'do'} not apply to task {self.name} ({takes})")
        return options

    def classes(self) -> SymmetryClasses[dict]:
        """An empty :class:`~equilibria.tasks.symmetry.SymmetryClasses` of this task's rows: by class where the
        task declares symmetries, else by question."""
        if self.class_key is None:
            return SymmetryClasses(self.question)
        return SymmetryClasses(self.class_key, self.same_class)

    @property
    def kind(self) -> str:
        """What the task's question fingerprints are taken of (:attr:`question_kind`, default the task's name)."""
        return self.question_kind or self.name

    def config_fields(self, rows: Dataset, name: str) -> dict:
        """What ``inputs`` / ``labels`` rows of this task fix in a new model's config: the board's cells and the
        vocabulary (puzzles), else the input width and the classes; ``ValueError`` naming ``name`` (where the rows
        come from) when the rows' inputs differ in length."""
        widths = {len(x) for x in rows["inputs"]}
        if len(widths) != 1:
            raise ValueError(f"{name}: every {self.name} row must have as many inputs; found lengths {sorted(widths)}")
        width = widths.pop()
        if self.vocab_size is not None:
            return dict(vocab_size=self.vocab_size, max_seq_len=width)
        return dict(input_size=width, num_labels=max(2, max(rows["labels"]) + 1))


def _inputs_key(row: dict) -> str:
    return json.dumps(row["inputs"])


def _same_sudoku(a: dict, b: dict) -> bool:
    """Rows of equal :func:`~equilibria.tasks.symmetry.sudoku_class_key`: one class where the key is a canonical
    form (4x4, 6x6), else decided by :func:`~equilibria.tasks.symmetry.sudoku_equivalent` (9x9)."""
    x, y = decode_board(a["inputs"]), decode_board(b["inputs"])
    return board_size(x) in ENUMERATED_SUDOKU_SIZES or sudoku_equivalent(x, y)


def puzzle_cells(config) -> tuple[int, str]:
    """``(cells, key)``: how many cells a puzzle model's config reads, and the config key saying so
    (``max_seq_len`` for EqR, ``max_position_embeddings`` for a model with a position per cell, the Attractor)."""
    key = "max_seq_len" if hasattr(config, "max_seq_len") else "max_position_embeddings"
    return getattr(config, key), key


def _board_side(task: str, vocab: int) -> Callable[[object], int]:
    """``shape_of`` of a puzzle of square boards in a vocabulary of ``vocab`` tokens: the side of the board."""

    def side(config) -> int:
        cells, key = puzzle_cells(config)
        n = math.isqrt(cells)
        if n * n != cells or config.vocab_size != vocab:
            raise ValueError(
                f"a {task} model reads square boards with vocab_size {vocab}; this one has {key} {cells} and "
                f"vocab_size {config.vocab_size}: pass the task it was trained on"
            )
        return n

    return side


def _graph_nodes(config) -> int:
    nodes = (math.isqrt(9 + 4 * config.input_size) - 3) // 2  # input_size = n^2 + 3n
    if reachability_input_size(nodes) != config.input_size:
        raise ValueError(f"input_size {config.input_size} is not a reachability encoding (n^2 + 3n for n nodes)")
    return nodes


def _two_embeddings(config) -> None:
    if config.input_size != 2 * EMBEDDING_SIZE:
        raise ValueError(
            f"an entailment model reads two MiniLM embeddings (input_size {2 * EMBEDDING_SIZE}); this one has "
            f"input_size {config.input_size}: pass the task it was trained on"
        )


@functools.lru_cache(maxsize=1)
def _embedder() -> SentenceEmbedder:
    return SentenceEmbedder()


def _embed(rows: Dataset) -> Dataset:
    return embed_entailment(rows, _embedder())


def _generate_addition(digits: int, train: int, test: int, seed: int, reverse_answer: bool = False) -> DatasetDict:
    """Addition problems; ``reverse_answer``: in the STARS reference code's format."""
    style = STARS_ADDITION_FORMAT if reverse_answer else {}
    return build_addition_dataset(digits, train, test, seed=seed, **style)


def _describe_addition(digits: int, reverse_answer: bool = False) -> str:
    return f"{digits}-digit addition" + (
        " (STARS reference format: exact digits, answer reversed)" if reverse_answer else ""
    )


def _generate_sudoku(
    size: int,
    train: int,
    test: int,
    seed: int,
    split_by: str = "class",
    min_clues: int | None = None,
    augmentations: int = 0,
) -> DatasetDict:
    """Sudoku puzzles; ``min_clues``: clues kept at the least, ``augmentations``: symmetry transforms added per
    training puzzle."""
    if min_clues is not None and not 0 <= min_clues <= size * size:
        raise ValueError(f"--min_clues must be between 0 and {size * size} for {size}x{size} Sudoku, got {min_clues}")
    return build_sudoku_dataset(
        size, train, test, seed=seed, min_clues=min_clues, augmentations=augmentations, split_by=split_by
    )


def _describe_sudoku(size: int, min_clues: int | None = None, augmentations: int = 0) -> str:
    notes = [f"at least {min_clues} clues"] if min_clues is not None else []
    notes += [f"{counted(augmentations, 'symmetric variant')} added per training puzzle"] if augmentations else []
    return f"{size}x{size} sudoku" + (f" ({'; '.join(notes)})" if notes else "")


TASK_RECORDS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            name="reachability",
            summary="is node t reachable from s within k hops (graph features; PH-DEQ)",
            shape_option="nodes",
            describe=lambda nodes: f"{nodes}-node reachability",
            generate=lambda nodes, train, test, seed: build_reachability_dataset(
                train, test, num_nodes=nodes, seed=seed
            ),
            question=_inputs_key,
            shape_of=_graph_nodes,
            metric="accuracy of the predicted class",
        ),
        Task(
            name="entailment",
            summary="does a theory of facts and rules entail a statement (sentence embeddings; PH-DEQ)",
            shape_option=None,
            describe=lambda _: "entailment",
            generate=lambda _, train, test, seed: build_entailment_dataset(train, test, seed=seed),
            question=lambda row: json.dumps([row["theory"], row["question"]]),
            shape_of=_two_embeddings,
            metric="accuracy of the predicted class",
            prepare=_embed,
        ),
        Task(
            name="sudoku",
            summary="fill a Sudoku board (the published Sudoku-Extreme encoding; EqR)",
            shape_option="size",
            describe=_describe_sudoku,
            generate=_generate_sudoku,
            question=_inputs_key,
            shape_of=_board_side("sudoku", SUDOKU_VOCAB_SIZE),
            metric="share of boards solved exactly",
            vocab_size=SUDOKU_VOCAB_SIZE,
            load_published=load_sudoku_csv,
            published_format="Sudoku-Extreme CSV (source,question,answer,rating)",
            class_key=lambda row: sudoku_class_key(decode_board(row["inputs"])),
            same_class=_same_sudoku,
            options=("min_clues", "augmentations"),
        ),
        Task(
            name="maze",
            summary="mark the shortest path through a maze (the published Maze-Hard encoding; EqR)",
            shape_option="size",
            describe=lambda size: f"{size}x{size} maze",
            generate=lambda size, train, test, seed, split_by="class": build_maze_dataset(
                size, train, test, seed=seed, min_path=size, split_by=split_by
            ),
            question=_inputs_key,
            shape_of=_board_side("maze", MAZE_VOCAB_SIZE),
            metric="share of mazes solved exactly",
            vocab_size=MAZE_VOCAB_SIZE,
            load_published=load_maze_csv,
            published_format="Maze-Hard CSV (source,question,answer,rating)",
            class_key=lambda row: maze_canonical(decode_maze(row["inputs"])),
        ),
        Task(
            name="addition",
            summary="a+b= with operands of up to --digits digits (character-level; Ouro, Attractor LM; "
            "--reverse_answer: the STARS reference format, operands of exactly --digits digits and the answer a space "
            "and the sum least-significant digit first)",
            shape_option="digits",
            describe=_describe_addition,
            generate=_generate_addition,
            question=lambda row: row["prompt"],
            question_kind="prompt",
            shape_of=lambda config: None,
            metric="exact match of the greedy answer",
            tokenizer=lambda reverse_answer=False: addition_tokenizer(with_space=bool(reverse_answer)),
            prompt_format="12+34=",
            options=("reverse_answer",),
        ),
    )
}
TASKS = tuple(TASK_RECORDS)


def tasks_help() -> str:
    """One line per task for ``--task``'s help: what it is and how loop scaling scores it."""
    return "; ".join(f"{task.name}: {task.summary}, scored by {task.metric}" for task in TASK_RECORDS.values())


def task_record(name: str) -> Task:
    """The record of the task ``name``; ``ValueError`` naming the tasks there are."""
    if name not in TASK_RECORDS:
        raise ValueError(f"task must be one of {TASKS}, got {name!r}")
    return TASK_RECORDS[name]


__all__ = ["SHAPE_OPTIONS", "TASKS", "TASK_RECORDS", "Task", "puzzle_cells", "task_record", "tasks_help"]
