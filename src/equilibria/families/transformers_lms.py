"""The records of the looped LMs transformers ships (Dory, HRM-text, Inkling2-loop): their class names and model types
are their loop protocols' (:mod:`equilibria.loops`); a record exists where the installed release has the classes."""

from __future__ import annotations

import transformers

from ..loops import DoryLoop, HrmTextLoop, Inkling2Loop
from ..tasks.recipes import UNTIL_TARGET, looped_lm_recipe
from .card_text import transformers_lm_text
from .record import Family, Head


def _dory_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    """A small Dory: one input layer, ``num_layers`` recurrent layers looped ``num_loops`` times, one output layer,
    full attention (a sliding window as long as the positions)."""
    fields = {"max_position_embeddings": 64, **fields}
    return transformers.DoryConfig(
        **fields,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers + 2,
        n_input_layers=1,
        n_recurrent_layers=num_layers,
        n_output_layers=1,
        n_recurrent_loops=num_loops,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        head_dim=hidden_size // num_attention_heads,
        sliding_window=fields["max_position_embeddings"],
    )


def _hrm_text_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    """A small HRM-text: stacks of ``num_layers`` layers, ``num_loops`` H-cycles of 2 L-cycles, causal attention
    everywhere (``prefix_lm`` off)."""
    return transformers.HrmTextConfig(
        **{"max_position_embeddings": 64, **fields},
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        head_dim=hidden_size // num_attention_heads,
        H_cycles=num_loops,
        L_cycles=2,
        prefix_lm=False,
    )


def _inkling2_loop_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    """A small Inkling2-loop: one layer before ``num_layers`` looped layers passed ``num_loops`` times and none after
    them (the model needs a layer before its loop; with none after, the passes do the rest of the work), 4 experts
    (2 per token), a residual block per layer."""
    fields = {"max_position_embeddings": 64, **fields}
    heads = dict(num_attention_heads=num_attention_heads, head_dim=hidden_size // num_attention_heads)
    return transformers.Inkling2LoopTextConfig(
        **fields,
        unpadded_vocab_size=fields["vocab_size"],
        hidden_size=hidden_size,
        num_hidden_layers=num_layers + 1,
        **heads,
        num_key_value_heads=num_attention_heads,
        swa_num_attention_heads=num_attention_heads,
        swa_num_key_value_heads=num_attention_heads,
        swa_head_dim=heads["head_dim"],
        sliding_window_size=fields["max_position_embeddings"],
        rel_extent=fields["max_position_embeddings"],
        d_rel=8,
        moe_intermediate_size=hidden_size,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_layers_per_attn_res_block=1,
        loop_layer_index_start=1,
        loop_layer_index_end=1 + num_layers,
        loop_num_passes=num_loops,
        loop_gate_rank=8,
    )


def transformers_families() -> list[Family]:
    """The records of the looped LMs transformers ships, where the installed release has their classes (Dory and
    Inkling2-loop from 5.24, HRM-text from 5.9): the class names and model type are their protocols'."""
    lm = lambda cls: (Head(cls, kind="causal_lm", tasks=("addition",)),)  # noqa: E731
    untuned = "(the looped-LM addition settings, 2000 steps, no validation; what they give: docs/cli.md#recipes)"
    known = [  # protocol, loop meaning, small config, the card's name and source, the addition recipe
        (DoryLoop, "passes of the recurrent section", _dory_config, "Dory looped language model",
         "NVIDIA Nemotron-Labs' Dory: input layers, a recurrent section looped `n_recurrent_loops` times, output "
         "layers",
         looped_lm_recipe("addition", "a small DoryForCausalLM (width 128, 2 recurrent layers) at 4 passes on 8000 "
                          "generated 2-digit sums", max_steps=5000, **UNTIL_TARGET)),
        (HrmTextLoop, "H-cycles (each: L_cycles of the L-stack, then the H-stack)", _hrm_text_config,
         "HRM-text language model", "the Hierarchical Reasoning Model's text variant (Sapient): an L-stack and an "
         "H-stack, `H_cycles` x `L_cycles`",
         looped_lm_recipe("addition", "a small HrmTextForCausalLM (width 128) at 4 H-cycles on 8000 generated "
                          f"2-digit sums {untuned}")),
        (Inkling2Loop, "passes of the looped layers", _inkling2_loop_config, "Inkling2-loop language model",
         "Thinking Machines' Inkling-2 with looped layers passed `loop_num_passes` times through a gated message "
         "path",
         looped_lm_recipe("addition", "a small Inkling2LoopForCausalLM (width 128) at 4 passes on 8000 generated "
                          f"2-digit sums {untuned}")),
    ]  # fmt: skip
    records = []
    for protocol, meaning, make, name, source, recipe in known:
        names = (protocol.config_class, protocol.base_class, protocol.head_class)
        if protocol.model_types and all(hasattr(transformers, name) for name in names):
            records.append(  # the model type the protocol names must be the config's (Family checks)
                Family(loop_meaning=meaning, protocol=protocol(), base_class=getattr(transformers, names[1]),
                       heads=lm(getattr(transformers, names[2])), make_config=make, model_type=protocol.model_types[0],
                       capabilities=frozenset({"sampled_loops", "stars_penalty"}),  # the penalty: through looped()
                       card=transformers_lm_text(name, protocol.head_class, source), recipes=(recipe,))
            )  # fmt: skip
    return records
