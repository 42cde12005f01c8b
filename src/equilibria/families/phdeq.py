"""The port-Hamiltonian deep equilibrium model's record: a classifier."""

from __future__ import annotations

from ..loops import PHDEQLoop
from ..modeling import PHDEQConfig, PHDEQForSequenceClassification, PHDEQModel
from .record import Family, Head


def _phdeq_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return PHDEQConfig(**fields, hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_loops=num_loops)


PHDEQ = Family(
    model_type="phdeq",
    loop_meaning="the fixed-point solver's iteration cap (Anderson or Picard: config.solver)",
    loop=PHDEQLoop(),
    config_class=PHDEQConfig,
    base_class=PHDEQModel,
    heads=(
        Head(
            PHDEQForSequenceClassification,
            "AutoModelForSequenceClassification",
            "classifier",
            ("reachability", "entailment"),
            "text-classification",
        ),
    ),
    make_config=_phdeq_config,
    lora_targets=("potential_q", "potential_c", "port"),  # no attention: the dynamics' maps
)
