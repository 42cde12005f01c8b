"""The Ouro family matches the published checkpoints and reference code (a checkpoint and logits written by the
published modeling code, shipped in tests/data/ouro-reference-tiny), to the 1e-5 the README claims."""

import json

import pytest
import torch
from conftest import OURO_REFERENCE
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from equilibria import OuroConfig, OuroForCausalLM


@pytest.fixture(scope="module")
def reference():
    return json.loads((OURO_REFERENCE / "reference.json").read_text())


@pytest.fixture(scope="module")
def ref_model():
    model, info = OuroForCausalLM.from_pretrained(OURO_REFERENCE, output_loading_info=True)
    return model.eval(), info


def test_published_config_loads_as_is():
    raw = json.loads((OURO_REFERENCE / "config.json").read_text())
    config = AutoConfig.from_pretrained(OURO_REFERENCE)
    assert isinstance(config, OuroConfig)
    for key in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "tie_word_embeddings",
        "total_ut_steps",
        "early_exit_threshold",
    ):
        assert getattr(config, key) == raw[key], key
    assert config.rope_parameters["rope_theta"] == raw["rope_theta"]


def test_checkpoint_loads_with_no_missing_or_unexpected_keys(ref_model, reference):
    model, info = ref_model
    assert info["missing_keys"] == set() or not info["missing_keys"]
    assert not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    assert sorted(model.state_dict()) == sorted(reference["keys"])
    saved = load_file(OURO_REFERENCE / "model.safetensors")
    for name, tensor in saved.items():
        assert model.state_dict()[name].shape == tensor.shape
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=0, atol=0)


@pytest.mark.parametrize("loops", [1, 2, 3, 4])
def test_logits_equal_reference_at_every_loop_count(ref_model, reference, loops):
    model, _ = ref_model
    with torch.no_grad():
        logits = model(torch.tensor(reference["input_ids"]), num_loops=loops, use_cache=False).logits
    torch.testing.assert_close(logits, torch.tensor(reference[f"logits_T{loops}"]), rtol=0, atol=1e-5)


def test_default_loop_count_is_total_ut_steps(ref_model, reference):
    model, _ = ref_model
    assert model.config.total_ut_steps == 3
    with torch.no_grad():
        logits = model(torch.tensor(reference["input_ids"])).logits
    torch.testing.assert_close(logits, torch.tensor(reference["logits_T3"]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_continuation_equals_reference(ref_model, reference, use_cache):
    model, _ = ref_model
    prompt = torch.tensor(reference["greedy_prompt"])
    out = model.generate(prompt, max_new_tokens=12, do_sample=False, num_loops=3, use_cache=use_cache)
    assert out.tolist() == reference["greedy_T3"]


def test_auto_model_for_causal_lm_loads_the_checkpoint(reference):
    model = AutoModelForCausalLM.from_pretrained(OURO_REFERENCE).eval()
    assert isinstance(model, OuroForCausalLM)
    with torch.no_grad():
        logits = model(torch.tensor(reference["input_ids"]), num_loops=2).logits
    torch.testing.assert_close(logits, torch.tensor(reference["logits_T2"]), rtol=0, atol=1e-5)


def test_sdpa_and_eager_agree(reference):
    eager = OuroForCausalLM.from_pretrained(OURO_REFERENCE, attn_implementation="eager").eval()
    sdpa = OuroForCausalLM.from_pretrained(OURO_REFERENCE, attn_implementation="sdpa").eval()
    ids = torch.tensor(reference["input_ids"])
    with torch.no_grad():
        torch.testing.assert_close(eager(ids).logits, sdpa(ids).logits, rtol=0, atol=1e-5)
