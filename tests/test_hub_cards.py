"""Model cards: metadata that parses back, model-index results per loop count, the sections, for every family."""

import pytest
import torch
from huggingface_hub import ModelCard

from equilibria import EqRConfig, EqRForPuzzleSolving, PHDEQConfig, PHDEQForSequenceClassification
from equilibria.hub_cards import build_model_card, card_metadata_round_trips


def tiny_models():
    from conftest import tiny_attractor, tiny_ouro

    torch.manual_seed(0)
    return {
        "ouro": tiny_ouro(),
        "attractor_lm": tiny_attractor(),
        "eqr": EqRForPuzzleSolving(
            EqRConfig(max_seq_len=16, hidden_size=32, intermediate_size=64, num_attention_heads=2)
        ),
        "phdeq": PHDEQForSequenceClassification(PHDEQConfig(input_size=6, hidden_size=8, intermediate_size=16)),
    }


@pytest.mark.parametrize("family", ["ouro", "attractor_lm", "eqr", "phdeq"])
def test_cards_for_every_family_validate_and_carry_results(family):
    model = tiny_models()[family]
    audit = {
        "verdict": "computing",
        "reasons": ["substituting z0 for h* costs 40.00 points"],
        "accuracy": 0.9,
        "substitution": {"change_points": -40.0},
        "displacement": {"median": 3.2},
    }
    card = build_model_card(
        model,
        repo_id="someone/tiny",
        datasets=["someone/data"],
        task_name="a task",
        loop_scaling={1: 0.25, 4: 0.5, 8: 0.75},
        loop_scaling_plot="loop_scaling.png",
        audit=audit,
        base_model="someone/base",
    )
    assert card_metadata_round_trips(card)
    data = ModelCard(str(card)).data
    assert data.library_name == "transformers" and family in data.tags and "equilibria" in data.tags
    assert data.base_model == "someone/base" and data.datasets == ["someone/data"]
    assert [r.metric_value for r in data.eval_results] == [0.25, 0.5, 0.75]
    assert [r.metric_config for r in data.eval_results] == ["num_loops=1", "num_loops=4", "num_loops=8"]
    text = card.text
    for section in (
        "## How to load it",
        "trust_remote_code=True",
        "## Loop scaling",
        "| 8 | 75.0% |",
        "![loop scaling](loop_scaling.png)",
        "## Computation audit",
        "**computing**",
        "## Limitations",
    ):
        assert section in text, section


def test_bad_card_inputs_are_clear_errors():
    model = tiny_models()["phdeq"]
    with pytest.raises(ValueError, match="fractions in \\[0, 1\\]"):
        build_model_card(model, loop_scaling={4: 75.0})
    with pytest.raises(ValueError, match="no model card template for model_type"):
        build_model_card(torch.nn.Linear(2, 2))
