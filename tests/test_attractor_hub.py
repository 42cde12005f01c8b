"""Attractor LM: saving, loading (three ways), remote code, PEFT, the Trainer, and bad configs."""

import json
import os

import pytest
import torch
from conftest import remote_code_run, tiny_attractor
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from equilibria import AttractorCache, AttractorConfig, AttractorForCausalLM, AttractorModel

IDS = torch.tensor([[5, 9, 14, 3, 22, 7], [11, 4, 30, 17, 2, 9]])


@pytest.fixture
def model():
    return tiny_attractor(injection="concat")


def test_saved_equals_loaded(model, tmp_path):
    model.save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    assert "model.safetensors" in files and not any(f.endswith(".bin") for f in files)
    assert {
        "configuration_attractor.py",
        "modeling_attractor.py",
        "solvers.py",
        "checkpoints.py",
        "looped_lm.py",
        "loop_map.py",
        "config.json",
    } <= files
    loaded = AttractorForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()  # still tied
    with torch.no_grad():
        for loops in (0, 3, 60):
            torch.testing.assert_close(
                loaded(IDS, num_loops=loops).logits, model(IDS, num_loops=loops).logits, rtol=0, atol=0
            )


def test_auto_classes_resolve_after_import(model, tmp_path):
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), AttractorConfig)
    assert isinstance(AutoModel.from_pretrained(tmp_path), AttractorModel)
    assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path), AttractorForCausalLM)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_attractor.AttractorConfig",
        "AutoModel": "modeling_attractor.AttractorModel",
        "AutoModelForCausalLM": "modeling_attractor.AttractorForCausalLM",
        "AutoModelForTokenClassification": "modeling_attractor.AttractorForPuzzleSolving",
    }


@pytest.mark.slow
def test_remote_code_loads_without_the_package(model, tmp_path):
    """In a fresh interpreter where `import equilibria` fails, trust_remote_code gives identical logits and the
    same cached generation."""
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
    generated = model.generate(IDS[:1], **kwargs)
    then = f"""
        from transformers import AutoModel
        out = model.generate(data["inputs"][:1], **{kwargs!r})
        assert out.tolist() == data["generated"].tolist()
        base = AutoModel.from_pretrained({str(tmp_path / "ckpt")!r}, trust_remote_code=True)
        assert type(base).__name__ == "AttractorModel"
        print("REMOTE_OK")
    """
    load = ', attn_implementation="eager"'
    saved = {"generated": generated}
    stdout = remote_code_run(model, IDS, "AutoModelForCausalLM", tmp_path, (0, 60), load, then, saved)
    assert "REMOTE_OK" in stdout


def test_wrongly_named_or_shaped_weights_are_a_clear_error(model, tmp_path):
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["model.attractor.injection.weight"] = weights.pop("model.attractor.in_proj.weight")
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing weights.*in_proj.*unexpected weights.*injection"):
        AttractorForCausalLM.from_pretrained(tmp_path)
    weights["model.attractor.in_proj.weight"] = torch.zeros(32, 32)  # an "add" model's shape
    weights.pop("model.attractor.injection.weight")
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"wrong shape.*in_proj"):
        AttractorForCausalLM.from_pretrained(tmp_path)


BASE = dict(hidden_size=32, num_attention_heads=4, num_backbone_layers=1, intermediate_size=64, vocab_size=50)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(solver="newton"), r"solver must be one of \('anderson', 'picard'\)"),
        (
            dict(gradient_mode="bptt"),
            r"gradient_mode must be one of \('one_step', 'implicit', 'unrolled', 'one_step_neumann'\)",
        ),
        (dict(injection="multiply"), r"injection must be one of \('add', 'concat'\)"),
        (dict(solver_tol=0.0), "solver_tol must be greater than 0.0 and smaller than inf, got 0.0"),
        (dict(solver_tol=-1e-4), "solver_tol must be greater than 0.0 and smaller than inf"),
        (dict(solver_tol=float("inf")), "solver_tol must be greater than 0.0 and smaller than inf, got inf"),
        (dict(num_loops=-1), "num_loops must be greater or equal to 0, got -1"),
        (dict(num_loops=1.5), "num_loops must be of type int, got 1.5"),
        (dict(num_backbone_layers=-2), "num_backbone_layers must be greater or equal to 0"),
        (dict(num_attractor_layers=0), "num_attractor_layers must be greater or equal to 1"),
        (dict(anderson_memory=0), "anderson_memory must be greater or equal to 1"),
        (dict(solver_mixing=0.0), "solver_mixing must be greater than 0.0 and smaller or equal to 1.0"),
        (dict(solver_mixing=1.5), "solver_mixing must be greater than 0.0 and smaller or equal to 1.0"),
        (dict(attractor_gate_init=-0.1), "attractor_gate_init must be greater or equal to 0.0 and smaller than inf"),
        (dict(num_hidden_layers=7), "num_hidden_layers is derived"),
        (dict(hidden_size=30), "must divide hidden_size"),
    ],
)
def test_nonsense_configs_raise_value_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        AttractorConfig(**{**BASE, **overrides})


def test_config_round_trips_and_refuses_foreign_model_types(model, tmp_path):
    model.save_pretrained(tmp_path)
    loaded = AttractorConfig.from_pretrained(tmp_path)
    assert loaded.injection == "concat" and loaded.num_hidden_layers == 3 and loaded.solver_tol == 1e-6
    config = json.loads((tmp_path / "config.json").read_text())
    config["model_type"] = "llama"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="model_type 'llama'"):
        AttractorConfig.from_pretrained(tmp_path)


def test_lora_trains_and_merges_to_the_same_logits(model):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"]))
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any(".attractor." in n for n in trainable) and any(".backbone." in n for n in trainable)
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    peft_model.train()
    losses = []
    for _ in range(8):
        loss = peft_model(input_ids=IDS, labels=IDS).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    peft_model.eval()
    with torch.no_grad():
        adapted = peft_model(input_ids=IDS).logits
        merged_model = peft_model.merge_and_unload()
        merged = merged_model(input_ids=IDS).logits
    assert isinstance(merged_model, AttractorForCausalLM)
    torch.testing.assert_close(merged, adapted, rtol=0, atol=1e-3)


def test_a_budget_in_an_old_generation_config_moves_to_the_model_config(model, tmp_path):
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=None, return_dict_in_generate=True)
    model.save_pretrained(tmp_path)
    path = tmp_path / "generation_config.json"  # what equilibria 0.1 wrote for generation_config.num_loops = 2
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_loops": 2, "_from_model_config": False}))
    with pytest.warns(UserWarning, match=r"num_loops=2 -> config\.num_loops"):
        loaded = AttractorForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert loaded.config.num_loops == 2
    assert (loaded.generate(IDS[:1], cache=AttractorCache(), **kwargs).cache.solver_steps <= 2).all()
    assert (loaded.generate(IDS[:1], num_loops=40, cache=AttractorCache(), **kwargs).cache.solver_steps > 2).any()


def test_text_generation_pipeline_passes_the_budget(model, tokenizer):
    from transformers import pipeline

    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    for budget in (0, 30):
        text = generator("ab+cd=", max_new_tokens=5, do_sample=False, num_loops=budget)[0]["generated_text"]
        ids = tokenizer("ab+cd=", return_tensors="pt").input_ids
        direct = model.generate(ids, max_new_tokens=5, do_sample=False, num_loops=budget, pad_token_id=0)
        assert text == tokenizer.decode(direct[0], skip_special_tokens=True)
