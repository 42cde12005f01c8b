"""The Ouro STARS recipe as files (`examples/stars_ouro_math.*`): the training file runs on CPU with a tiny random
Ouro and a few local NuminaMath-like rows in its place, its column mapping is a flag, the accelerate config is
what the reference ran (8 processes, bf16), and the lm-eval commands' loop override reaches the model."""

import json
import shlex
import string
from pathlib import Path

import pytest
import torch
from conftest import launch_environment, tiny_ouro
from transformers import AutoModelForCausalLM

from equilibria.cli import main
from equilibria.tasks import char_tokenizer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
COMMON = ["--report_to", "none", "--use_cpu", "--disable_tqdm", "true"]


@pytest.fixture(scope="module")
def ouro_folder(tmp_path_factory):
    """A tiny random Ouro with a character tokenizer (no chat template: ChatML is used), standing in for Ouro-1.4B."""
    folder = tmp_path_factory.mktemp("ouro")
    tokenizer = char_tokenizer(string.printable)
    model = tiny_ouro(vocab_size=len(tokenizer), max_position_embeddings=256)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def numina_rows(path: Path, n: int = 24) -> str:
    """Rows with NuminaMath-1.5's columns (``problem``, ``solution`` and others)."""
    rows = [
        {"problem": f"What is {a} + {b}?", "solution": f"{a} + {b} = {a + b}.", "answer": str(a + b), "source": "toy"}
        for a, b in zip(range(n), range(3, 3 + n))
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_the_recipe_file_trains_on_cpu_with_the_column_mapping(ouro_folder, tmp_path, capsys):
    out = tmp_path / "tuned"
    argv = ["train", str(EXAMPLES / "stars_ouro_math.yaml"), "--model_name_or_path", str(ouro_folder)]
    argv += ["--dataset_name", numina_rows(tmp_path / "numina.jsonl"), "--train_size", "16", "--test_size", "4"]
    argv += ["--max_length", "96", "--max_steps", "2", "--gradient_accumulation_steps", "2", "--bf16", "false"]
    argv += ["--eval_loops", "1,2", "--output_dir", str(out), *COMMON]
    assert main(argv) == 0, capsys.readouterr().err
    stage = json.loads((out / "training_history.json").read_text())[-1]
    # the file and the command line set only what the preset does not: the recipe is the preset, unchanged
    assert stage["recipe"] == {"preset": "reference_ouro", "overrides": {}}
    source = json.loads((out / "training_data.json").read_text())["source"]
    assert source["columns"] == {"problem": "user", "solution": "assistant"} and source["format"] == "messages"
    # eval reads the held-out rows again, through the recorded mapping
    assert main(["eval", str(out), "--loops", "1,2"]) == 0
    assert "loop scaling of" in capsys.readouterr().out


def test_a_column_mapping_flag_is_checked(ouro_folder, tmp_path, capsys):
    argv = ["train", "--model_name_or_path", str(ouro_folder), "--dataset_name", numina_rows(tmp_path / "n.jsonl")]
    argv += ["--output_dir", str(tmp_path / "out"), "--max_steps", "1", *COMMON]
    assert main([*argv, "--dataset_columns", "problem=question"]) == 2
    assert "--dataset_columns must be COLUMN=TARGET pairs" in capsys.readouterr().err
    assert main([*argv, "--dataset_columns", "problem=prompt,solution=assistant"]) == 2
    assert "either all targets chat roles or none" in capsys.readouterr().err
    assert main([*argv, "--dataset_columns", "question=user,solution=assistant"]) == 2
    assert "--dataset_columns names ['question']" in capsys.readouterr().err


def test_the_accelerate_config_is_eight_bf16_processes():
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    config = EXAMPLES / "stars_ouro_math_accelerate.yaml"
    launch = launch_command_parser().parse_args(["--config_file", str(config), "script.py"])
    args = _validate_launch_command(launch)[0]  # what `accelerate launch` reads from the file: the processes it starts
    assert (args.num_processes, args.multi_gpu, args.num_machines) == (8, True, 1)
    assert launch_environment(config)["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_the_lm_eval_commands_set_the_loop_count_the_model_runs(ouro_folder):
    """Each lm-eval command passes ``total_ut_steps`` through ``--model_args`` to ``from_pretrained`` of the saved
    folder's remote code: the model then runs that many loops."""
    script = (EXAMPLES / "stars_ouro_math.sh").read_text()
    commands = [line for line in script.splitlines() if "--model_args" in line]
    assert len(commands) == 1 and "for LOOPS in 4 8" in script
    model_args = shlex.split(commands[0].rstrip(" \\"))[1].replace("$OUT", str(ouro_folder)).replace("$LOOPS", "8")
    kwargs = dict(item.split("=", 1) for item in model_args.split(","))
    assert kwargs.pop("pretrained") == str(ouro_folder) and kwargs.pop("trust_remote_code") == "True"
    kwargs.pop("dtype")
    model = AutoModelForCausalLM.from_pretrained(
        ouro_folder, trust_remote_code=True, **{k: int(v) for k, v in kwargs.items()}
    )
    assert model.config.total_ut_steps == 8
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(model(ids).logits, model(ids, num_loops=8).logits)
    assert "--tasks gsm8k,minerva_math500" in script and "--apply_chat_template" in script
