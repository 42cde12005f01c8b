"""The Ouro looped LM's record (Zhu et al., 2025) and its small configs."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from ..loops import OuroLoop
from ..modeling import OuroConfig, OuroForCausalLM, OuroModel
from .record import Family, Head
from .vocabulary import small_lm_fields


def small_ouro_config(
    tokenizer: PreTrainedTokenizerBase | int,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    total_ut_steps: int = 4,
) -> OuroConfig:
    """A small Ouro config for a character-level task: vocabulary and special tokens from ``tokenizer`` (or just a
    vocabulary size), SwiGLU width ``2 * hidden_size``, positions up to 64 with a tokenizer (512 without)."""
    return _ouro_config(small_lm_fields(tokenizer), hidden_size, num_hidden_layers, num_attention_heads, total_ut_steps)


def _ouro_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return OuroConfig(
        **{"max_position_embeddings": 64, **fields},
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        total_ut_steps=num_loops,
    )


OURO = Family(
    model_type="ouro",
    loop_meaning="recurrence steps of the shared decoder stack",
    loop=OuroLoop(),
    config_class=OuroConfig,
    base_class=OuroModel,
    heads=(Head(OuroForCausalLM, "AutoModelForCausalLM", "causal_lm", ("addition",), "text-generation"),),
    make_config=_ouro_config,
    capabilities=frozenset({"sampled_loops", "stars_penalty", "per_loop_readout", "vllm"}),
)
