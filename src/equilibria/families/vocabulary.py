"""What a small language-model config takes from a task's tokenizer: shared by the small-config factories."""

from __future__ import annotations

from ..tasks.tokenization import tokenizer_fields


def small_lm_fields(tokenizer) -> dict:
    """What a small LM config takes from ``tokenizer`` (vocabulary, special tokens, 64 positions) or from a vocabulary
    size (512 positions); ``ValueError`` for a size below 1, ``TypeError`` for anything else."""
    if isinstance(tokenizer, int) and not isinstance(tokenizer, bool):
        if tokenizer < 1:
            raise ValueError(f"the vocabulary size must be >= 1, got {tokenizer}")
        return dict(vocab_size=tokenizer, max_position_embeddings=512)
    if not hasattr(tokenizer, "pad_token_id"):
        raise TypeError(f"pass a tokenizer or a vocabulary size (an int), got {type(tokenizer).__name__} {tokenizer!r}")
    return dict(tokenizer_fields(tokenizer), max_position_embeddings=64)
