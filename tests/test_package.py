"""The package surface: CLI, tasks, tokenizer, benchmark and demo smoke runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

import equilibria
import equilibria.demo
from equilibria.cli import main as cli_main
from equilibria.tasks import addition_tokenizer, build_addition_dataset, char_tokenizer, tokenize_for_training

ROOT = Path(__file__).resolve().parents[1]


def test_cli_help_and_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"equilibria {equilibria.__version__}"
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    out = capsys.readouterr().out
    assert "demo" in out and "usage: equilibria" in out


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "equilibria"
    result = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("equilibria ")


def test_cli_errors_are_one_line(capsys):
    assert cli_main(["demo", "--steps", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "equilibria demo: error: steps must be >= 1, got 0"


def test_char_tokenizer_round_trips_and_saves(tmp_path):
    tok = char_tokenizer("abc+=")
    ids = tok("ab+c=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tok.decode(ids) == "ab+c="
    assert tok.pad_token_id == 0 and tok.bos_token_id == 1 and tok.eos_token_id == 2
    assert tok("z", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("ab+c=", add_special_tokens=False)["input_ids"] == ids
    with pytest.raises(ValueError, match="single characters"):
        char_tokenizer(["ab"])


def test_addition_splits_share_no_problem_and_are_correct():
    data = build_addition_dataset(num_digits=2, num_train=300, num_test=100, seed=3)
    assert set(data["train"]["prompt"]).isdisjoint(data["test"]["prompt"])
    for row in data["test"]:
        a, b = row["prompt"][:-1].split("+")
        assert int(row["answer"]) == int(a) + int(b) and row["text"] == row["prompt"] + row["answer"]
    again = build_addition_dataset(num_digits=2, num_train=300, num_test=100, seed=3)
    assert again["train"]["prompt"] == data["train"]["prompt"]
    with pytest.raises(ValueError, match="distinct problems"):
        build_addition_dataset(num_digits=1, num_train=90, num_test=20)


def test_training_labels_mask_the_prompt():
    tok = addition_tokenizer()
    data = build_addition_dataset(num_digits=1, num_train=5, num_test=0)
    row = tokenize_for_training(data["train"], tok)[0]
    prompt_len = len(data["train"][0]["prompt"])
    assert row["labels"][:prompt_len] == [-100] * prompt_len
    assert row["labels"][prompt_len:] == row["input_ids"][prompt_len:]
    assert row["input_ids"][-1] == tok.eos_token_id


def test_decode_benchmark_quick_mode_runs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_ouro_decode
    finally:
        sys.path.pop(0)
    results = bench_ouro_decode.main(["--quick"])
    assert results["loop_overhead"]["ratio"] > 0
    assert 1 <= results["early_exit"]["mean_exit_steps"] <= results["early_exit"]["loops"]
    assert results["cache"]["speedup"] > 0


def test_demo_quick_mode_writes_and_reloads_a_hub_folder(tmp_path):
    results = equilibria.demo.run_demo(output_dir=tmp_path, quick=True)
    folder = Path(results["model_dir"])
    names = {p.name for p in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "configuration_ouro.py",
        "modeling_ouro.py",
    } <= names
    assert set(results["accuracy_by_loops"]) == {"1", "2", "4", "8"}
    assert len(results["samples"]) == 4 and any(k.startswith("remote code") for k in results["samples"])
    assert json.loads((tmp_path / "demo_results.json").read_text())["steps"] == results["steps"]
    assert torch.isfinite(torch.tensor(results["final_train_loss"]))
