"""The Attractor model's record (Fein-Ashley and Rashidinejad, 2026): a language-model head and a puzzle head."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from ..loops import AttractorLoop
from ..modeling import AttractorConfig, AttractorForCausalLM, AttractorForPuzzleSolving, AttractorModel
from ..tasks.recipes import SUDOKU_DATA, SUDOKU_SIZED, scratch_recipe
from .card_text import LM_USAGE, FamilyText
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


ATTRACTOR_FORMS = {
    "paper": "`T(y, y0) = y0 + U(x)`, the attractor layers' residual update `U(x) = layers(x) - x` added to the "
    "proposal: the map of the paper (its Sec. 3.1; with addition, its code's `FPHead(y + y0) - y`)",
    "gated": "`T(y, y0) = y0 + gate * rms(y0) * norm(layers(x))`: this package's earlier gated form, not the "
    "paper's; its per-channel gate bounds each step, and holds the fixed point at a relative distance of about "
    "`|gate|` from the proposal",
    "deq": "`T(y, y0) = U(x)` solved from `y = 0`: a plain deep-equilibrium control, not the paper's Attractor (the "
    "backbone's output is only injected)",
}
ATTRACTOR_GRADIENTS = {
    "one_step": "the one-step gradient (one application of `T` at the detached fixed point; constant memory)",
    "implicit": "the implicit-function-theorem gradient (a backward fixed-point solve; constant memory)",
    "unrolled": "backpropagation through every solver iteration (memory grows with the budget)",
    "one_step_neumann": "the published code's one-step backward (the incoming gradient `v` becomes `v + J^T v` at "
    "the fixed point, `J^T v` clipped; constant memory)",
}


def _attractor_card_notes(config) -> list[str]:
    """The Attractor card's lines on the map, the injection, the gradient and the attention a config chose."""
    inject = "`x = y + y0`" if config.injection == "add" else "`x = W [y; y0]` (concatenation, projected)"
    attention = (
        "causal (a language model)" if config.is_causal is not False else "bidirectional over the puzzle's cells"
    )
    return [
        f"**The map.** `residual_form={config.residual_form!r}`: {ATTRACTOR_FORMS[config.residual_form]}; the "
        f"proposal is injected at every step as {inject}. Solver: {config.solver}, tolerance {config.solver_tol:g}"
        + (", the batch stops on its worst sequence" if getattr(config, "solver_stop", "per_sample") == "batch" else "")
        + "."
        + (
            f" LayerScale gates on the attractor's branches (the published code's), starting at "
            f"{config.layer_scale_init:g}."
            if getattr(config, "layer_scale_init", None) is not None
            else ""
        ),
        "",
        f"**Training gradient.** `gradient_mode={config.gradient_mode!r}`: {ATTRACTOR_GRADIENTS[config.gradient_mode]}.",
        "",
        f"**Attention.** {attention}.",
        "",
    ]


ATTRACTOR_BIBTEX = """@misc{feinashley2026attractor,
  title = {Solve the Loop: Attractor Models for Language and Reasoning},
  author = {Fein-Ashley, Jacob and Rashidinejad, Paria},
  year = {2026},
  eprint = {2605.12466},
  archivePrefix = {arXiv}
}"""


ATTRACTOR_TEXT = FamilyText(
    name="Attractor model",
    paper="Fein-Ashley and Rashidinejad, 2026, *Solve the Loop: Attractor Models for Language and Reasoning*",
    tags=("deep-equilibrium", "looped-lm"),
    usage={
        "causal_lm": LM_USAGE,
        "puzzle_cells": (
            "out = model(puzzles, num_loops={loops})  # {loops_note}; out.logits.argmax(-1): one answer per cell",
        ),
    },
    citation=ATTRACTOR_BIBTEX,
    notes=_attractor_card_notes,
)

ATTRACTOR = Family(
    loop_meaning="the fixed-point solver's iteration budget (0 = backbone only)",
    protocol=AttractorLoop(),
    base_class=AttractorModel,
    heads=(
        Head(AttractorForCausalLM, kind="causal_lm", tasks=("addition",)),
        Head(AttractorForPuzzleSolving, kind="puzzle_cells", tasks=("sudoku", "maze")),
    ),
    make_config=_attractor_config,
    card=ATTRACTOR_TEXT,
    recipes=(
        scratch_recipe(
            "addition", "a small Attractor LM on 8000 generated 2-digit sums", max_steps=1500, train_size=8000
        ),
        scratch_recipe(
            "sudoku",
            "a small Attractor puzzle model on the EqR recipe's 6x6 Sudoku puzzles",
            max_steps=2400,
            sized=SUDOKU_SIZED,
            **SUDOKU_DATA,
        ),
        scratch_recipe("maze", "a small Attractor puzzle model on generated 9x9 mazes", max_steps=1500, size=9),
    ),  # fmt: skip
)
