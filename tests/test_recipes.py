"""``equilibria train``'s recipes: a family and task with no flags trains with its recipe (not Trainer's fine-tuning
defaults), explicit flags, a config file and a trainer preset override it, ``--show_recipe`` prints it, the run
records it, and a run logs about ten points whatever its length."""

from __future__ import annotations

import json
import re

import pytest

from equilibria.cli import main
from equilibria.families import FAMILIES
from equilibria.tasks.recipes import FINE_TUNE_RECIPES, RECIPES, recipe_for
from equilibria.train import parse_train_args


def _values(model_args, data_args, args) -> dict:
    return {**vars(args), **vars(data_args), **vars(model_args)}


@pytest.mark.parametrize("family, task", sorted(RECIPES))
def test_a_family_and_task_without_flags_trains_with_its_recipe(tmp_path, family, task):
    model_args, data_args, args = parse_train_args(["--family", family, "--task", task, "--output_dir", str(tmp_path)])
    values = _values(model_args, data_args, args)
    for key, value in RECIPES[family, task].settings.items():
        assert getattr(values[key], "value", values[key]) == value, key
    assert model_args.recipe == {
        "name": f"{family}/{task}",
        "settings": dict(RECIPES[family, task].settings),
        "overrides": {},
    }
    assert args.learning_rate != 5e-5 and args.max_steps > 0  # not Trainer's fine-tuning defaults


def test_every_family_and_task_has_a_recipe():
    pairs = {(name, task) for name, family in FAMILIES.items() for head in family.heads for task in head.tasks}
    assert pairs == set(RECIPES)


def test_flags_a_config_file_and_a_preset_override_the_recipe(tmp_path):
    out = ["--output_dir", str(tmp_path)]
    model_args, _, args = parse_train_args(["--family", "ouro", *out, "--learning_rate", "3e-3", "--max_steps", "7"])
    assert (args.learning_rate, args.max_steps, args.per_device_train_batch_size) == (3e-3, 7, 64)
    assert model_args.recipe["overrides"] == {"learning_rate": 3e-3, "max_steps": 7}
    config = tmp_path / "run.yaml"
    config.write_text(f"family: dory\noutput_dir: {tmp_path}\nlearning_rate: 0.003\ntrain_size: 100\n")
    model_args, data_args, args = parse_train_args([str(config)])
    assert (args.learning_rate, data_args.train_size, args.max_steps) == (
        3e-3,
        100,
        RECIPES["dory", "addition"].settings["max_steps"],
    )
    assert model_args.recipe["overrides"] == {"learning_rate": 3e-3, "train_size": 100}
    # a STARS preset's training part wins over the recipe; what it does not set stays the recipe's
    _, data_args, args = parse_train_args(["--family", "ouro", *out, "--stars_preset", "reference_addition"])
    assert (args.learning_rate, args.per_device_train_batch_size, args.max_steps) == (1e-4, 512, 10000)
    assert data_args.train_size == RECIPES["ouro", "addition"].settings["train_size"]
    assert (args.min_loops, args.max_loops, args.jsrr_weight) == (1, 100, 0.1)  # the preset's STARS options


def test_another_board_size_leaves_out_the_recipes_puzzle_data_for_its_own(tmp_path):
    eqr = ["--family", "eqr", "--task", "sudoku", "--output_dir", str(tmp_path)]
    model_args, data_args, args = parse_train_args(eqr)
    assert (data_args.size, data_args.min_clues, data_args.augmentations, data_args.train_size) == (6, 18, 2, 3000)
    for given in (["--size", "4"], ["--size=4"]):  # 18 clues do not fit a 4x4 board: the defaults hold
        model_args, data_args, args = parse_train_args([*eqr, *given])
        assert (data_args.size, data_args.min_clues, data_args.augmentations, data_args.train_size) == (
            4,
            None,
            None,
            None,
        )
        assert args.weight_decay == 0.1 and "min_clues" not in model_args.recipe["settings"]
        assert model_args.recipe["overrides"] == {"size": 4}
        assert "at --size 4 without its settings for size 6" in model_args.recipe_lines[0]
    config = tmp_path / "run.yaml"
    config.write_text(f"family: eqr\ntask: sudoku\noutput_dir: {tmp_path}\nsize: 4\n")
    assert parse_train_args([str(config)])[1].min_clues is None
    assert parse_train_args([*eqr, "--size", "6"])[1].min_clues == 18


def test_fine_tuning_a_checkpoint_takes_the_fine_tuning_recipe(tmp_path):
    from equilibria.families import small_ouro_config
    from equilibria.modeling import OuroForCausalLM
    from equilibria.tasks import addition_tokenizer

    OuroForCausalLM(small_ouro_config(addition_tokenizer(), hidden_size=16)).save_pretrained(tmp_path / "base")
    argv = ["--model_name_or_path", str(tmp_path / "base"), "--output_dir", str(tmp_path / "tuned")]
    model_args, _, args = parse_train_args([*argv, "--use_peft"])
    assert (
        model_args.recipe["name"] == "fine-tune/lora"
        and args.learning_rate == FINE_TUNE_RECIPES["lora"].settings["learning_rate"]
    )
    model_args, _, args = parse_train_args(argv)
    assert (
        model_args.recipe["name"] == "fine-tune/full"
        and args.learning_rate == FINE_TUNE_RECIPES["full"].settings["learning_rate"]
    )
    assert recipe_for("ouro", None) is None  # a new model on rows of your own: the flags decide


def test_show_recipe_prints_the_settings_and_the_flags_given_and_trains_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["train", "--family", "dory", "--output_dir", str(out), "--max_steps", "9", "--show_recipe"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("recipe dory/addition:")
    steps = RECIPES["dory", "addition"].settings["max_steps"]
    assert "--max_steps" in printed and f"9 (given; the recipe's {steps})" in printed
    assert "--learning_rate" in printed and not out.exists()


def test_a_run_logs_ten_points_and_records_its_recipe(tmp_path, capsys):
    from equilibria.train import train_and_evaluate

    out = tmp_path / "out"
    tiny = ["--train_size", "64", "--test_size", "8", "--digits", "1", "--hidden_size", "16", "--eval_loops", "4"]
    argv = ["--family", "ouro", "--output_dir", str(out), "--max_steps", "30", *tiny, "--use_cpu"]
    trainer, _ = train_and_evaluate([*argv, "--report_to", "none", "--disable_tqdm", "true"])
    assert "recipe ouro/addition: " in capsys.readouterr().out
    assert len([entry for entry in trainer.state.log_history if "loss" in entry]) == 10  # every 3rd of 30 steps
    stage = json.loads((out / "training_history.json").read_text())[-1]
    assert stage["task_recipe"]["name"] == "ouro/addition"
    assert stage["task_recipe"]["overrides"] == {"max_steps": 30, "train_size": 64}
    card = (out / "README.md").read_text()
    assert "recipe `ouro/addition`, overridden: `max_steps=30`, `train_size=64`." in card


@pytest.mark.slow
def test_the_recipes_benchmark_runs_every_documented_command_as_its_page_shows_it(tmp_path):
    """``benchmarks/recipes.py --quick``: each documented command (as its page shows it) runs with a seed added and
    its run is recorded with the seed, threads, wall time and the held-out accuracy at each loop count."""
    from pathlib import Path

    from conftest import load_benchmark, read_benchmark_json

    bench = load_benchmark("recipes")
    root = Path(__file__).resolve().parents[1]
    for recipe in bench.DOCUMENTED:  # as the page shows it, continuation lines joined
        page = re.sub(r"[ \t]+", " ", (root / recipe.page).read_text().replace("\\\n", " "))
        assert recipe.command in page, recipe.name
    results = bench.main(["--quick", "--output", str(tmp_path / "recipes.json"), "--recipes", "readme-ouro"])
    saved = read_benchmark_json(tmp_path / "recipes.json", results)
    entry = saved["recipes"]["readme-ouro"]
    (run,) = entry["runs"]
    assert (run["seed"], run["threads"], run["trained_loops"]) == (0, 1, 4) and run["wall_s"] > 0
    assert set(run["accuracy"]) == {"1", "4"} and entry["loops"] == 4 and entry["target"] == 0.95
    again = bench.main(["--quick", "--output", str(tmp_path / "recipes.json"), "--recipes", "readme-ouro"])
    assert len(again["recipes"]["readme-ouro"]["runs"]) == 1  # a run of the same seed and threads replaces it


@pytest.mark.slow
def test_the_recipes_benchmark_trains_a_fine_tunes_base_first_and_runs_torchrun_commands(tmp_path):
    """A fine-tune's base (the README's Ouro command) is trained first with the same seed, and its folder is the
    ``--model_name_or_path`` the fine-tune starts from (both recorded); a ``torchrun ... -m equilibria.cli`` command
    runs under this interpreter's ``torch.distributed.run``; anything else is refused."""
    import sys

    from conftest import load_benchmark

    bench = load_benchmark("recipes")
    argv = ["--quick", "--output", str(tmp_path / "recipes.json"), "--recipes", "readme-ouro,readme-fine-tune"]
    results = bench.main(argv)
    (run,) = results["recipes"]["readme-fine-tune"]["runs"]
    assert "test split generated with the training data" in run["base"]["data"] and run["base"]["wall_s"] > 0
    (ouro,) = results["recipes"]["readme-ouro"]["runs"]
    assert run["base"]["wall_s"] == ouro["wall_s"]  # the README's Ouro run of this sweep is the base, not trained again
    assert "sum_rows.jsonl" in run["data"] and run["recipe"]["name"] == "fine-tune/lora"
    assert run["recipe"]["overrides"]["learning_rate"] == 3e-3
    command = next(r.command for r in bench.DOCUMENTED if r.name == "cli-eqr")
    assert bench.launcher(command)[:3] == [sys.executable, "-m", "torch.distributed.run"]
    with pytest.raises(ValueError, match="not an equilibria"):
        bench.launcher("python train.py --output_dir x")
    parser = bench.argparse.ArgumentParser()
    assert bench.parse_seeds("0-2,100-102", parser) == [0, 1, 2, 100, 101, 102]
    with pytest.raises(SystemExit):
        bench.parse_seeds("9-3", parser)


def test_runs_of_an_earlier_recipe_are_kept_apart_from_the_ranges():
    """A recipe changed since some of its runs: they move to ``superseded`` (with their command), out of ``runs``."""
    from conftest import load_benchmark

    bench = load_benchmark("recipes")
    recipe = next(r for r in bench.DOCUMENTED if r.name == "readme-ouro")

    def run(seed, steps):
        return {"seed": seed, "threads": 2, "recipe": {"settings": {"max_steps": steps}}, "accuracy": {"4": 0.9}}

    results = {}
    bench.record(results, recipe, run(0, 3000), before=False)
    bench.record(results, recipe, run(1, 3000), before=False)
    bench.record(results, recipe, run(0, 6000), before=False)
    entry = results["recipes"]["readme-ouro"]
    assert [r["seed"] for r in entry["runs"]] == [0] and entry["runs"][0]["recipe"]["settings"]["max_steps"] == 6000
    (old,) = entry["superseded"]
    assert old["command"] == recipe.command and [r["seed"] for r in old["runs"]] == [0, 1]  # seed 0's too
    bench.record(results, recipe, run(0, 6000), before=False)  # the same recipe again: it replaces its own run
    assert len(entry["runs"]) == 1 and len(entry["superseded"]) == 1
