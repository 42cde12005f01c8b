"""Validation during training (`equilibria train --eval_strategy steps`, the looped-LM recipes' default): a
validation split held out like the test split, scored every `--eval_steps` by the test's measure, the best checkpoint
kept and named, training stopped at `--validation_target`, the test split read once at the end, and a finished run's
folder without `checkpoint-N` folders."""

import json

import pytest
import torch
from conftest import QUIET, addition_rows, tiny_trained_ouro, write_jsonl
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from equilibria.cli import main
from equilibria.scaling import LoopScores
from equilibria.tasks import build_task, fingerprints
from equilibria.tasks.named_splits import class_fingerprints
from equilibria.tasks.text_data import build_text_data

TINY = ["--hidden_size", "16", "--digits", "1", "--train_size", "40", "--test_size", "10", "--validation_size", "10"]
VALIDATED = ["--eval_strategy", "steps", "--eval_steps", "4", "--per_device_train_batch_size", "8", "--eval_loops", "2"]


def scripted(monkeypatch, values: list[float]) -> list[int]:
    """The validation's scores, in turn, whatever the weights (the mechanism under test is what is kept); returns the
    loop counts it was asked to score at."""
    asked, values = [], list(values)

    def scores(model, rows, loops, scoring):
        asked.append(loops[0])
        return LoopScores({loops[0]: values.pop(0)})

    monkeypatch.setattr("equilibria.train.validation.loop_scores", scores)
    return asked


def train(out, *extra) -> int:
    return main(["train", "--family", "ouro", "--output_dir", str(out), *TINY, *VALIDATED, *extra, *QUIET])


def last_stage(out) -> dict:
    return json.loads((out / "training_history.json").read_text())[-1]


def test_the_run_ends_with_the_best_validated_checkpoint_names_it_and_removes_the_checkpoints(
    tmp_path, monkeypatch, capsys
):
    asked = scripted(monkeypatch, [0.1, 0.6, 0.3])
    out = tmp_path / "out"
    assert train(out, "--max_steps", "12", "--keep_checkpoints", "true", "--validation_target", "0.9") == 0
    printed = capsys.readouterr().out
    assert asked == [4, 4, 4]  # the config's loop count (the recipe's 4)
    kept = last_stage(out)["kept"]
    assert kept["step"] == 8 and kept["how"] == "best" and not kept["stopped_at_target"] and kept["steps_run"] == 12
    assert kept["evaluations"] == [[4, 0.1], [8, 0.6], [12, 0.3]]
    assert "The weights are those of step 8 of 12 (60.0%) on validation" in printed
    folder, best = load_file(out / "model.safetensors"), load_file(out / "checkpoint-8" / "model.safetensors")
    assert all(torch.equal(folder[k], best[k]) for k in best)  # the folder holds step 8's weights, not step 12's
    card = ModelCard.load(out / "README.md").text
    assert "The weights are those of step 8 of 12 (60.0%) on validation" in card and "one every 4 steps" in card

    scripted(monkeypatch, [0.1, 0.6, 0.3])
    again = tmp_path / "again"
    assert train(again, "--max_steps", "12") == 0
    assert not list(again.glob("checkpoint-*"))  # a finished run's folder is the Hub-ready one
    assert "removed checkpoint-8 from" in capsys.readouterr().out
    assert load_file(again / "model.safetensors").keys() == folder.keys()


def test_of_equally_good_checkpoints_the_later_is_kept(tmp_path, monkeypatch):
    scripted(monkeypatch, [0.5, 0.5, 0.25])
    out = tmp_path / "out"
    assert train(out, "--max_steps", "12") == 0
    kept = last_stage(out)["kept"]
    assert kept["step"] == 8 and kept["accuracy"] == 0.5  # trained longer; the Trainer alone keeps the first


def test_the_run_stops_where_validation_reaches_the_target(tmp_path, monkeypatch, capsys):
    scripted(monkeypatch, [0.2, 0.95, 1.0])
    out = tmp_path / "out"
    assert train(out, "--max_steps", "40", "--validation_target", "0.9", "--validation_loops", "3") == 0
    kept = last_stage(out)["kept"]
    assert kept["steps_run"] == 8 and kept["step"] == 8 and kept["stopped_at_target"]
    assert "at 3 loops on 10 validation problems" in kept["validation"]
    printed = capsys.readouterr().out
    assert "the first to reach the target 90.0%, where training stopped" in printed
    assert json.loads((out / "loop_scaling.json").read_text())["data"]["units"] == 10  # the test split, read at the end


def test_validation_problems_are_held_out_like_the_test_and_kept_out_of_later_evaluations(tmp_path):
    data = build_task("addition", 300, 50, seed=3, validation_size=50)
    train, test, validation = (set(rows["prompt"]) for rows in (data.prompts, data.test, data.validation))
    assert len(validation) == 50 and not validation & train and not validation & test
    assert data.record["validation_fingerprints"] == sorted(set(fingerprints("addition", data.validation)))
    sudoku = build_task("sudoku", 12, 4, seed=0, size=4, validation_size=4)  # 4x4 Sudoku: 36 classes in all
    seen = set(class_fingerprints("sudoku", sudoku.test)) | set(sudoku.record["class_fingerprints"])
    assert len(sudoku.validation) == 4 and not set(class_fingerprints("sudoku", sudoku.validation)) & seen

    out = tiny_trained_ouro(tmp_path / "model")  # 32 training problems, 4 held out for the test, 4 for validation
    record = json.loads((out / "training_data.json").read_text())
    assert len(record["validation_fingerprints"]) == 4
    from equilibria.evaluation import _exclusion

    excluded, _, held = _exclusion(record, "prompt")
    assert set(record["validation_fingerprints"]) <= excluded and "validation questions" in held["note"]


def test_rows_of_yours_hold_out_a_validation_split_and_the_card_shows_one_of_their_prompts(tmp_path):
    from equilibria.tasks import addition_tokenizer

    rows = write_jsonl(tmp_path / "rows.jsonl", addition_rows())
    data = build_text_data(rows, addition_tokenizer(), 16, metric="exact_match", seed=0, validation_size=None)
    assert len(data.validation) == 5 and len(data.test) == 5 and len(data.train) == 35  # a tenth each, at least 5
    prompts = [set(rows["prompt"]) for rows in (data.test, data.validation)]
    assert not prompts[0] & prompts[1] and data.record["example_prompt"] in prompts[0]
    assert set(data.record["validation_fingerprints"]).isdisjoint(data.train_fingerprints)
    with pytest.raises(ValueError, match="--test_size 20 and --validation_size 25 hold out every one of the 45"):
        build_text_data(rows, addition_tokenizer(), 16, test_size=20, validation_size=25)


def test_a_fine_tune_on_rows_validates_at_the_loops_asked_and_its_card_shows_a_real_prompt(tmp_path, monkeypatch):
    base = tiny_trained_ouro(tmp_path / "base")
    rows = write_jsonl(tmp_path / "rows.jsonl", addition_rows())
    asked = scripted(monkeypatch, [0.5, 0.4])
    out = tmp_path / "tuned"
    argv = ["train", "--model_name_or_path", str(base), "--dataset_name", rows, "--output_dir", str(out)]
    argv += ["--eval_metric", "exact_match", "--max_steps", "8", "--eval_strategy", "steps", "--eval_steps", "4"]
    argv += ["--load_best_model_at_end", "true", "--save_strategy", "best", "--validation_loops", "3", *QUIET]
    assert main(argv) == 0
    assert asked == [3, 3] and last_stage(out)["kept"]["step"] == 4
    card = ModelCard.load(out / "README.md").text
    record = json.loads((out / "training_data.json").read_text())
    assert f'tokenizer("{record["example_prompt"]}"' in card and "<a prompt like" not in card


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--eval_strategy", "no", "--validation_target", "0.9"], "--validation_target set the validation that runs"),
        (["--validation_size", "0"], "--validation_size 0 leaves none"),
        (["--metric_for_best_model", "loss"], "--metric_for_best_model must be accuracy"),
        (["--validation_target", "1.5"], "--validation_target must be a share of the validation rows in (0, 1]"),
        (["--eval_strategy", "no", "--load_best_model_at_end", "true"], "requires the save and eval strategy to match"),
    ],
)
def test_validation_flags_the_run_would_ignore_are_refused_in_one_line(tmp_path, capsys, flags, message):
    assert main(["train", "--family", "ouro", "--output_dir", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_run_told_not_to_save_or_evaluate_trains_without_a_best_checkpoint(tmp_path, monkeypatch, capsys):
    scripted(monkeypatch, [0.5])
    assert train(tmp_path / "a", "--max_steps", "4", "--save_strategy", "no") == 0  # validated, the last weights kept
    assert last_stage(tmp_path / "a")["kept"]["how"] == "last"
    argv = ["train", "--output_dir", str(tmp_path / "b"), "--max_steps", "2", "--eval_strategy", "no", *TINY[:-2]]
    assert main([*argv, *QUIET]) == 0
    assert "kept" not in last_stage(tmp_path / "b")
    assert "held out for validation" not in capsys.readouterr().out.split("training on")[-1]
