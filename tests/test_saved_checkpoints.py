"""Checkpoints saved by earlier code keep loading: ``tests/data/saved-0.1`` holds small Attractor LM and EqR (attention
and MLP blocks) checkpoints written when their bodies were built from ``transformers.models.llama``, with the logits
they gave then. They must load strictly (no missing, unexpected or reshaped weights) and give the same logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

import equilibria  # noqa: F401  (registers the Auto classes)

SAVED = Path(__file__).resolve().parent / "data" / "saved-0.1"
REFERENCE = json.loads((SAVED / "logits.json").read_text())


@pytest.mark.parametrize("name", ["attractor_lm", "eqr_attention", "eqr_mlp"])
def test_a_checkpoint_saved_before_loads_with_the_same_logits(name):
    auto = AutoModelForCausalLM if name == "attractor_lm" else AutoModelForTokenClassification
    model, info = auto.from_pretrained(SAVED / name, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    ids = torch.tensor(REFERENCE[name]["input_ids"])
    torch.manual_seed(0)  # EqR starts its loop from noise
    with torch.no_grad():
        logits = model.eval()(ids, use_cache=False).logits if name == "attractor_lm" else model.eval()(ids).logits
    torch.testing.assert_close(logits, torch.tensor(REFERENCE[name]["logits"]), rtol=0, atol=1e-5)
