"""The Attractor model's record (Fein-Ashley and Rashidinejad, 2026): a language-model head and a puzzle head."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from ..loops import AttractorLoop
from ..modeling import AttractorConfig, AttractorForCausalLM, AttractorForPuzzleSolving, AttractorModel
from .record import Family, Head
from .vocabulary import small_lm_fields


def small_attractor_config(
    tokenizer: PreTrainedTokenizerBase | int,
    hidden_size: int = 128,
    num_backbone_layers: int = 2,
    num_attractor_layers: int = 2,
    num_attention_heads: int | None = None,
    **overrides,
) -> AttractorConfig:
    """A small Attractor LM config: vocabulary and special tokens from ``tokenizer`` (or just a vocabulary size),
    SwiGLU width ``2 * hidden_size``, heads of width 32 unless given, positions up to 64 with a tokenizer (512
    without); ``overrides`` set any other field (``num_loops``, ``solver``, ``gradient_mode`` ...)."""
    fields = small_lm_fields(tokenizer)
    return AttractorConfig(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_backbone_layers=num_backbone_layers,
        num_attractor_layers=num_attractor_layers,
        num_attention_heads=num_attention_heads or max(1, hidden_size // 32),
        **{**fields, **overrides},
    )


def _attractor_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    if "max_seq_len" in fields:  # a puzzle's cells: every cell a position, an answer head of its own
        fields = dict(fields, tie_word_embeddings=False, max_position_embeddings=fields.pop("max_seq_len"))
    fields = {"max_position_embeddings": 64, **fields}
    return small_attractor_config(
        fields.pop("vocab_size"),
        hidden_size,
        num_layers,
        num_layers,
        num_attention_heads,
        num_loops=num_loops,
        **fields,
    )


ATTRACTOR = Family(
    model_type="attractor_lm",
    loop_meaning="the fixed-point solver's iteration budget (0 = backbone only)",
    loop=AttractorLoop(),
    config_class=AttractorConfig,
    base_class=AttractorModel,
    heads=(
        Head(AttractorForCausalLM, "AutoModelForCausalLM", "causal_lm", ("addition",), "text-generation"),
        Head(
            AttractorForPuzzleSolving,
            "AutoModelForTokenClassification",
            "puzzle_cells",
            ("sudoku", "maze"),
            "token-classification",
        ),
    ),
    make_config=_attractor_config,
)
