"""Task builders (``datasets.Dataset``), tokenizers and evaluators."""

from .addition import (
    addition_tokenizer,
    build_addition_dataset,
    evaluate_loop_scaling,
    exact_match,
    small_attractor_config,
    small_ouro_config,
    tokenize_for_training,
)
from .tokenization import char_tokenizer

__all__ = [
    "addition_tokenizer",
    "build_addition_dataset",
    "char_tokenizer",
    "evaluate_loop_scaling",
    "exact_match",
    "small_attractor_config",
    "small_ouro_config",
    "tokenize_for_training",
]
