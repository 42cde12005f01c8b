"""Task builders (``datasets.Dataset``), loaders for the published formats, tokenizers and the scoring of text
answers."""

from . import named_splits
from .addition import STARS_ADDITION_FORMAT, addition_tokenizer, build_addition_dataset, tokenize_for_training
from .embedding import SentenceEmbedder, embed_entailment
from .entailment import build_entailment_dataset, load_proofwriter_jsonl
from .maze import build_maze_dataset, generate_maze, load_maze_csv, solve_maze
from .named_splits import *  # noqa: F403  (the tasks by name, evaluation splits, training records)
from .reachability import (
    bfs_distances,
    build_reachability_dataset,
    encode_reachability,
    generate_graph,
    reachability_input_size,
)
from .sudoku import augment_sudoku, generate_sudoku, load_sudoku_csv, solve_sudoku
from .sudoku_splits import build_sudoku_dataset
from .symmetry import (
    SymmetryClasses,
    maze_canonical,
    sudoku_canonical,
    sudoku_class_key,
    sudoku_classes,
    sudoku_equivalent,
)
from .text_scoring import evaluate_loop_scaling, exact_match, greedy_answers, token_accuracy
from .tokenization import char_tokenizer, tokenizer_fields

__all__ = [
    *named_splits.__all__,
    "tokenizer_fields",
    "SentenceEmbedder",
    "STARS_ADDITION_FORMAT",
    "addition_tokenizer",
    "bfs_distances",
    "build_reachability_dataset",
    "encode_reachability",
    "generate_graph",
    "reachability_input_size",
    "augment_sudoku",
    "build_addition_dataset",
    "build_entailment_dataset",
    "build_maze_dataset",
    "build_sudoku_dataset",
    "char_tokenizer",
    "embed_entailment",
    "evaluate_loop_scaling",
    "exact_match",
    "greedy_answers",
    "generate_maze",
    "generate_sudoku",
    "load_maze_csv",
    "load_proofwriter_jsonl",
    "load_sudoku_csv",
    "solve_maze",
    "SymmetryClasses",
    "maze_canonical",
    "sudoku_class_key",
    "sudoku_classes",
    "sudoku_equivalent",
    "solve_sudoku",
    "sudoku_canonical",
    "token_accuracy",
    "tokenize_for_training",
]
