"""Saving, loading (three ways), remote code, PEFT and the transformers tools around generate."""

import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from functools import partial

import pytest
import torch
from conftest import remote_code_run, tiny_ouro, training_args
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    GenerationConfig,
    TextStreamer,
    pipeline,
)

from equilibria import OuroConfig, OuroForCausalLM, OuroModel

IDS = torch.tensor([[5, 9, 14, 3, 22, 7], [11, 4, 30, 17, 2, 9]])


def test_saved_equals_loaded(model, tmp_path):
    model.save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    assert "model.safetensors" in files and not any(f.endswith(".bin") for f in files)
    assert {"configuration_ouro.py", "modeling_ouro.py", "config.json", "generation_config.json"} <= files
    loaded = OuroForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    with torch.no_grad():
        for loops in (1, 3, 5):
            torch.testing.assert_close(
                loaded(IDS, num_loops=loops).logits, model(IDS, num_loops=loops).logits, rtol=0, atol=0
            )


def test_auto_classes_resolve_after_import(model, tmp_path):
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), OuroConfig)
    assert isinstance(AutoModel.from_pretrained(tmp_path), OuroModel)
    assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path), OuroForCausalLM)
    assert isinstance(
        AutoModelForCausalLM.from_config(
            OuroConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64, vocab_size=50)
        ),
        OuroForCausalLM,
    )
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_ouro.OuroConfig",
        "AutoModel": "modeling_ouro.OuroModel",
        "AutoModelForCausalLM": "modeling_ouro.OuroForCausalLM",
    }


@pytest.mark.slow
def test_remote_code_loads_without_the_package(model, tmp_path):
    """In a fresh interpreter where `import equilibria` fails, trust_remote_code gives identical logits."""
    then = f"""
        from transformers import AutoModel
        with torch.no_grad():
            out = model.generate(data["inputs"][:1], max_new_tokens=4, do_sample=False, num_loops=3, pad_token_id=0)
        base = AutoModel.from_pretrained({str(tmp_path / "ckpt")!r}, trust_remote_code=True)
        assert type(base).__name__ == "OuroModel"
        print("REMOTE_OK", out.shape[1])
    """
    load = ', attn_implementation="eager"'
    stdout = remote_code_run(model, IDS, "AutoModelForCausalLM", tmp_path, (2, 4), load, then)
    assert "REMOTE_OK 10" in stdout


def test_base_model_loads_from_a_causal_lm_checkpoint(model, tmp_path):
    model.save_pretrained(tmp_path)
    base = OuroModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(base(IDS).last_hidden_state, model.model(IDS).last_hidden_state, rtol=0, atol=0)


def test_wrongly_named_weights_are_a_clear_error(model, tmp_path):
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["model.layers.0.self_attn.query.weight"] = weights.pop("model.layers.0.self_attn.q_proj.weight")
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing weights.*q_proj.*unexpected weights.*query"):
        OuroForCausalLM.from_pretrained(tmp_path)


def test_wrongly_shaped_weights_are_a_clear_error(model, tmp_path):
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["model.layers.1.mlp.up_proj.weight"] = torch.zeros(65, 32)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"up_proj"):
        OuroForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(total_ut_steps=0), "total_ut_steps"),
        (dict(total_ut_steps=-3), "total_ut_steps"),
        (dict(hidden_size=30, num_attention_heads=4), "must divide hidden_size"),
        (dict(num_key_value_heads=3), "must divide num_attention_heads"),
        (dict(early_exit_threshold=1.5), "early_exit_threshold"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(rms_norm_eps=0.0), "rms_norm_eps"),
    ],
)
def test_nonsense_configs_raise_value_error(overrides, message):
    base = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64, vocab_size=50)
    base.update(overrides)
    with pytest.raises(ValueError, match=message):
        OuroConfig(**base)


def test_unknown_or_foreign_model_type_is_a_clear_error(model, tmp_path):
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("auto_map")
    config["model_type"] = "ouro-unknown"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="ouro-unknown"):
        AutoConfig.from_pretrained(tmp_path)
    config["model_type"] = "llama"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="model_type 'llama'"):
        OuroConfig.from_pretrained(tmp_path)


def test_lora_trains_and_merges_to_the_same_logits(model):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    )
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    peft_model.train()
    losses = []
    for _ in range(8):
        loss = peft_model(input_ids=IDS, labels=IDS, num_loops=2).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    peft_model.eval()
    with torch.no_grad():
        adapted = peft_model(input_ids=IDS, num_loops=3).logits
        merged_model = peft_model.merge_and_unload()
        merged = merged_model(input_ids=IDS, num_loops=3).logits
    assert isinstance(merged_model, OuroForCausalLM)
    torch.testing.assert_close(merged, adapted, rtol=0, atol=1e-4)


def test_text_generation_pipeline_and_streamer(model, tokenizer, capsys):
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    result = generator("ab+cd=", max_new_tokens=6, do_sample=False, num_loops=2)
    text = result[0]["generated_text"]
    assert text.startswith("ab+cd=") and len(text) > len("ab+cd=")
    ids = tokenizer("ab+cd=", return_tensors="pt").input_ids
    direct = model.generate(ids, max_new_tokens=6, do_sample=False, num_loops=2, pad_token_id=0)
    assert text == tokenizer.decode(direct[0], skip_special_tokens=True)
    streamer = TextStreamer(tokenizer, skip_special_tokens=True)
    model.generate(ids, max_new_tokens=6, do_sample=False, num_loops=2, streamer=streamer, pad_token_id=0)
    assert capsys.readouterr().out.strip() == text


def write_old_generation_default(folder, **loop_defaults) -> None:
    """Make ``folder`` what equilibria 0.1 saved for ``model.generation_config.num_loops = N``: the loop default
    in ``generation_config.json`` (kept there by marking the file as not derived from the model config)."""
    path = folder / "generation_config.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, **loop_defaults, "_from_model_config": False}))


def test_a_loop_default_in_an_old_generation_config_moves_to_the_model_config(model, tmp_path):
    """``generate(num_loops=...)`` reaches forward (a generation config holding ``num_loops`` would swallow it);
    a folder whose ``generation_config.json`` sets it loads with the default moved to ``config.total_ut_steps``,
    with a warning, through the package and as remote code; saving again writes it there."""
    ids = IDS[:1]
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)

    def logits(m, **extra):
        return torch.stack(m.generate(ids, **kwargs, **extra).logits, dim=1)

    two, five, default = logits(model, num_loops=2), logits(model, num_loops=5), logits(model)  # default: 3
    assert not torch.allclose(two, five) and not torch.allclose(five, default)
    model.save_pretrained(tmp_path)
    write_old_generation_default(tmp_path, num_loops=5)
    for load in (
        OuroForCausalLM.from_pretrained,
        partial(AutoModelForCausalLM.from_pretrained, trust_remote_code=True),
    ):
        with pytest.warns(UserWarning, match=r"num_loops=5 -> config\.total_ut_steps"):
            loaded = load(tmp_path, attn_implementation="eager").eval()
        assert loaded.config.total_ut_steps == 5 and getattr(loaded.generation_config, "num_loops", None) is None
        torch.testing.assert_close(logits(loaded), five, rtol=0, atol=1e-5)
        torch.testing.assert_close(logits(loaded, num_loops=2), two, rtol=0, atol=1e-5)  # an explicit argument wins
    loaded.save_pretrained(tmp_path / "again")
    assert "num_loops" not in json.loads((tmp_path / "again" / "generation_config.json").read_text())
    assert json.loads((tmp_path / "again" / "config.json").read_text())["total_ut_steps"] == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        OuroForCausalLM.from_pretrained(tmp_path / "again")


def test_a_loop_argument_in_a_generation_config_is_not_swallowed(model):
    """``num_loops`` set on ``model.generation_config`` (the 0.1 way) moves to the config with a warning; in a
    ``GenerationConfig`` passed to ``generate`` it is that call's argument, and an explicit keyword wins."""
    ids = IDS[:1]
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)

    def logits(**extra):
        return torch.stack(model.generate(ids, **kwargs, **extra).logits, dim=1)

    two, five = logits(num_loops=2), logits(num_loops=5)
    assert not torch.allclose(two, five)
    config = GenerationConfig(**kwargs, num_loops=2)
    out = model.generate(ids, generation_config=config)
    torch.testing.assert_close(torch.stack(out.logits, dim=1), two, rtol=0, atol=1e-5)
    assert config.num_loops == 2  # the caller's object is left alone
    out = model.generate(ids, generation_config=config, num_loops=5)
    torch.testing.assert_close(torch.stack(out.logits, dim=1), five, rtol=0, atol=1e-5)
    model.generation_config.num_loops = 5
    with pytest.warns(UserWarning, match=r"num_loops=5 -> config\.total_ut_steps"):
        torch.testing.assert_close(logits(), five, rtol=0, atol=1e-5)
    assert model.config.total_ut_steps == 5 and getattr(model.generation_config, "num_loops", None) is None


def test_trainer_runs_a_training_step(model, tmp_path):
    from datasets import Dataset
    from transformers import Trainer

    data = Dataset.from_dict({"input_ids": IDS.tolist() * 4, "labels": IDS.tolist() * 4})
    args = training_args(
        tmp_path,
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        logging_steps=1,
        seed=42,  # transformers' default, the seed this test has always trained with
    )
    before = model.lm_head.weight.detach().clone()
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    assert not torch.equal(before, model.lm_head.weight.detach())
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))


def test_gradient_checkpointing_gives_the_same_gradients():
    a, b = tiny_ouro(seed=1), tiny_ouro(seed=1)
    b.activation_checkpointing_enable()
    for m in (a, b):
        m.train()
        m(IDS, labels=IDS, num_loops=3).loss.backward()
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_the_tokenizer_loads_without_the_package_and_without_the_remote_code_question(model, tmp_path):
    """The README's workaround for transformers' question (asked for any folder with remote code): with
    trust_remote_code=False the standard tokenizer loads from its own files, and nothing is asked."""
    from equilibria.tasks.tokenization import char_tokenizer

    char_tokenizer("0123456789+=").save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["equilibria"] = None
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained({str(tmp_path)!r}, trust_remote_code=False)
        print("TOKENS", tokenizer("12+3=")["input_ids"])
        """
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "TOKENS [5, 6, 14, 7, 15]" in result.stdout
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    assert "You are using a model of type" not in result.stdout + result.stderr  # the config's standalone part


def test_a_prompt_the_tokenizer_cannot_read_warns_naming_its_characters(model, tmp_path):
    """The user's path from the card: the folder's tokenizer through AutoTokenizer, a prompt with characters it
    lacks: a warning names them (they become <unk>); a known prompt is silent. The package's own readers refuse
    such text themselves and get the tokenizer without the warning."""
    from transformers import AutoTokenizer

    from equilibria.tasks.tokenization import CharTokenizer, UnknownCharactersWarning, char_tokenizer, load_tokenizer

    char_tokenizer("0123456789+=").save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(tokenizer, CharTokenizer)
    with pytest.warns(UnknownCharactersWarning, match=r"holds \['#', 'é'\], which the tokenizer does not know") as got:
        ids = tokenizer("12+é=#", return_tensors="pt")["input_ids"]
    assert got[0].filename == __file__  # it points at the caller's line
    assert (ids == tokenizer.unk_token_id).sum() == 2
    with pytest.warns(UnknownCharactersWarning, match=r"\['x'\]"):
        tokenizer(["12+3=", "4x"], padding=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokenizer(["12+3=", "40+2="], padding=True)
        load_tokenizer(str(tmp_path), "prompts")("12+é=")


def test_a_token_id_past_the_vocabulary_is_a_clear_error(model):
    """Not the embedding's IndexError: a ValueError naming input_ids, the id and vocab_size (both language
    families share the check)."""
    from conftest import tiny_attractor

    vocab = model.config.vocab_size
    for bad, lm in ((vocab, model), (-1, model), (vocab + 7, tiny_attractor())):
        ids = torch.tensor([[3, 4, bad]])
        with pytest.raises(
            ValueError, match=rf"input_ids holds token id {bad}, outside the vocabulary \(vocab_size={vocab}"
        ):
            lm(ids)
        with pytest.raises(ValueError, match="input_ids holds token id"):
            lm.generate(ids, max_new_tokens=2)


#: the keys of the published Ouro-1.4B config.json (30), which engines' converters read
PUBLISHED_CONFIG_KEYS = {
    *("architectures", "attention_dropout", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id", "head_dim"),
    *("hidden_act", "hidden_size", "initializer_range", "intermediate_size", "layer_types", "max_position_embeddings"),
    *("max_window_layers", "model_type", "num_attention_heads", "num_hidden_layers", "num_key_value_heads"),
    *("rms_norm_eps", "rope_scaling", "rope_theta", "sliding_window", "tie_word_embeddings", "torch_dtype"),
    *("total_ut_steps", "early_exit_threshold", "transformers_version", "use_cache", "use_sliding_window"),
    "vocab_size",
}


def test_a_saved_config_carries_every_key_of_the_published_one_and_loads_back_without_warnings(tmp_path, caplog):
    assert len(PUBLISHED_CONFIG_KEYS) == 30
    rope = {"rope_type": "default", "rope_theta": 1e6}
    model = tiny_ouro(pad_token_id=0, bos_token_id=0, eos_token_id=0, rope_parameters=rope).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert PUBLISHED_CONFIG_KEYS <= set(saved), sorted(PUBLISHED_CONFIG_KEYS - set(saved))
    assert (saved["rope_theta"], saved["rope_scaling"], saved["torch_dtype"]) == (1e6, None, "bfloat16")
    assert saved["architectures"] == ["OuroForCausalLM"] and saved["model_type"] == "ouro"
    logging.Logger.warning_once.cache_clear()  # transformers warns once per process: make this load count
    with caplog.at_level("WARNING", logger="transformers"), warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert not [r for r in caplog.records if "torch_dtype" in r.getMessage()]
    assert loaded.dtype == torch.bfloat16 and loaded.config.rope_parameters == rope
    unnamed = lambda config: {k: v for k, v in config.to_dict().items() if k != "_name_or_path"}  # noqa: E731
    assert unnamed(loaded.config) == unnamed(model.config)


@pytest.mark.slow
def test_a_last_loop_folder_decodes_as_remote_code_as_the_package_does(tmp_path):
    """The `last_loop` layout travels with the folder: as remote code, without the package, greedy decoding (its
    config's default mode) gives the package's tokens, and its cache holds one entry per layer."""
    model = tiny_ouro(total_ut_steps=4, recurrent_kv_cache_mode="last_loop")
    with torch.no_grad():
        ours = model.generate(IDS[:1], max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    then = """
        with torch.no_grad():
            out = model.generate(data["inputs"][:1], max_new_tokens=6, do_sample=False, pad_token_id=0,
                                 eos_token_id=None, return_dict_in_generate=True)
        assert out.sequences.tolist() == data["ours"].tolist(), (out.sequences, data["ours"])
        assert len(out.cache.layers) == model.config.num_hidden_layers
        print("LAST_LOOP_OK")
    """
    load = ', attn_implementation="eager"'  # the package's model's kernel: exact logits
    stdout = remote_code_run(model, IDS, "AutoModelForCausalLM", tmp_path, 4, load, then, saved={"ours": ours})
    assert "LAST_LOOP_OK" in stdout
