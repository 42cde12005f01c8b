"""The path a user takes with data of their own, from the README: fine-tune on a jsonl, resume, evaluate on the
held-out rows, audit, write the card; every result records the weights and the data it was computed on, and a
result of other weights is never shown as this model's."""

import json
import shutil

import pytest
import torch
from conftest import QUIET, fine_tune, write_jsonl
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from equilibria.cli import main
from equilibria.provenance import weights_fingerprint


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny Ouro trained 2 steps on generated addition, with its own loop scaling and audit."""
    out = tmp_path_factory.mktemp("base") / "ouro"
    argv = ["train", "--output_dir", str(out), "--max_steps", "2", "--train_size", "32", "--test_size", "4"]
    assert main([*argv, "--hidden_size", "16", "--eval_loops", "2", "--save_strategy", "no", *QUIET]) == 0
    assert main(["audit", str(out), "--output-dir", str(out), "--num-examples", "16"]) == 0
    return out


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    sums = [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(12) for b in range(10)]  # 120 rows
    return write_jsonl(tmp_path_factory.mktemp("data") / "rows.jsonl", sums)


def logged_losses(folder):
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return {h["step"]: h["loss"] for h in history if "loss" in h}


@pytest.fixture(scope="module")
def tuned(base, rows, tmp_path_factory):
    out = tmp_path_factory.mktemp("tuned") / "run"
    assert fine_tune(base, rows, out) == 0
    return out


def test_resume_continues_the_run_exactly(base, rows, tuned, tmp_path, capsys, monkeypatch):
    from equilibria.trainers import StarsTrainer

    steps = []
    step = StarsTrainer.training_step
    monkeypatch.setattr(StarsTrainer, "training_step", lambda self, *a, **k: steps.append(1) or step(self, *a, **k))
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(tuned / "checkpoint-3", resumed / "checkpoint-3")
    assert fine_tune(base, rows, resumed, "--resume_from_checkpoint", "last") == 0
    assert len(steps) == 3  # only steps 4-6 ran: the run was resumed, not restarted (which ends the same way)
    full, again = logged_losses(tuned / "checkpoint-6"), logged_losses(resumed / "checkpoint-6")
    assert set(full) == {1, 2, 3, 4, 5, 6} and again == full  # steps 4-6 computed again, the same losses
    first, second = load_file(tuned / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert all(torch.equal(first[k], second[k]) for k in first)
    capsys.readouterr()
    assert fine_tune(base, rows, tmp_path / "none", "--resume_from_checkpoint", "last") == 2
    assert "holds no checkpoint-N folder to resume" in capsys.readouterr().err
    assert fine_tune(base, rows, tmp_path / "x", "--resume_from_checkpoint", str(tmp_path)) == 2
    assert "not a checkpoint written by the Trainer" in capsys.readouterr().err


def test_the_whole_path_eval_audit_and_card_report_these_weights_on_the_held_out_rows(base, rows, tuned, capsys):
    from equilibria import OuroForCausalLM
    from equilibria.tasks import load_training_record
    from equilibria.tasks.held_out import numbered
    from equilibria.tasks.text_data import RowEncoder, encode_rows, load_rows, row_key
    from equilibria.tasks.text_scoring import token_accuracy

    weights = weights_fingerprint(tuned)
    record = load_training_record(tuned)
    assert record["weights"] == weights != weights_fingerprint(base)
    assert not (tuned / "audit.json").exists()  # the base model's audit is not this model's
    trained = json.loads((tuned / "loop_scaling.json").read_text())
    assert trained["weights"] == weights and trained["data"]["fingerprint"] == record["held_out"]["fingerprint"]
    assert trained["data"]["units"] == 12 and len(record["held_out"]["positions"]) == 12  # a tenth of 120 rows

    capsys.readouterr()
    assert main(["eval", str(tuned), "--loops", "1,2", "--output-dir", str(tuned)]) == 0
    out = capsys.readouterr().out
    assert "12 held-out rows of rows.jsonl" in out and "replaced" not in out
    evaluated = json.loads((tuned / "eval_loop_scaling.json").read_text())
    assert evaluated["accuracy"] == trained["accuracy"] and evaluated["weights"] == weights
    assert json.loads((tuned / "loop_scaling.json").read_text()) == trained  # train's own result stays
    assert (evaluated["by"], trained["by"]) == ("equilibria eval", "equilibria train")
    # the same numbers, computed here from the recorded rows and the saved weights
    held = numbered(load_rows(rows)["train"]).select(record["held_out"]["positions"])
    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(tuned)
    encoded = encode_rows(held, RowEncoder(tokenizer, "prompt_completion", "rows.jsonl", max_length=64))
    model = OuroForCausalLM.from_pretrained(tuned)
    assert {str(n): token_accuracy(model, encoded, n, tokenizer) for n in (1, 2)} == evaluated["accuracy"]
    trained_questions = set(record["fingerprints"])
    assert len(trained_questions) == 96 and not {row_key("prompt_completion", row) for row in held} & trained_questions

    assert main(["audit", str(tuned), "--output-dir", str(tuned)]) == 0
    audited = json.loads((tuned / "audit.json").read_text())
    assert audited["weights"] == weights and audited["num_units"] == 12
    assert audited["data"]["fingerprint"] == record["held_out"]["fingerprint"]

    assert main(["card", str(tuned)]) == 0
    card = ModelCard.load(tuned / "README.md")
    scores = {r.metric_config: r.metric_value for r in card.data.eval_results}
    assert scores == {f"num_loops={n}": round(evaluated["accuracy"][str(n)], 4) for n in (1, 2)}
    assert {r.dataset_name for r in card.data.eval_results} == {"12 held-out rows of rows.jsonl"}
    assert f"verdict: **{audited['verdict']}**, on 12 sequences of 12 held-out rows of rows.jsonl" in card.text
    assert "**Data.** 96 prompt/completion rows of rows.jsonl (train split)." in card.text
    assert "Results not shown" not in card.text
    # the card shows eval's result over train's, and says so
    assert "From `eval_loop_scaling.json`, written by `equilibria eval` after training" in card.text
    assert "![loop scaling](eval_loop_scaling.png)" in card.text


def test_results_that_do_not_record_their_weights_are_not_inherited(base, rows, tmp_path, capsys):
    """Results written before they recorded their weights: the base checkpoint's are not copied into a fine-tuned
    folder, and a folder trained into keeps none."""
    old = tmp_path / "old"
    shutil.copytree(base, old)
    for name in ("audit.json", "loop_scaling.json"):
        result = json.loads((old / name).read_text())
        (old / name).write_text(json.dumps({k: v for k, v in result.items() if k != "weights"}))
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(old / "audit.json", out / "audit.json")  # an earlier run's, in the folder trained into
    assert fine_tune(old, rows, out, "--max_steps", "1", "--save_strategy", "no", "--test_size", "0") == 0
    assert not (out / "audit.json").exists() and not (out / "loop_scaling.json").exists()
    card = ModelCard.load(out / "README.md")
    assert not card.data.eval_results and "## Computation audit" not in card.text
    capsys.readouterr()
    assert main(["eval", str(out), "--dataset_name", rows, "--loops", "1"]) == 2  # every row was trained on
    assert "nothing to evaluate: 0 rows of rows.jsonl" in capsys.readouterr().err


def test_results_of_other_weights_are_left_out_of_the_card_and_removed_by_train(base, rows, tuned, tmp_path, capsys):
    stale = tmp_path / "stale"
    shutil.copytree(tuned, stale)
    shutil.copy(base / "model.safetensors", stale / "model.safetensors")  # the folder now holds other weights
    capsys.readouterr()
    assert main(["card", str(stale)]) == 0
    assert "left out loop_scaling.json: computed on other weights" in capsys.readouterr().out
    card = ModelCard.load(stale / "README.md")
    assert not card.data.eval_results and "## Results not shown" in card.text and "## Loop scaling" not in card.text
    assert main(["card", str(stale), "--loop-scaling", str(tuned / "loop_scaling.json")]) == 2
    assert "computed on other weights than the ones in" in capsys.readouterr().err
    # training into a folder that holds results of other weights removes them
    again = tmp_path / "again"
    again.mkdir()
    shutil.copy(base / "audit.json", again / "audit.json")
    assert fine_tune(base, rows, again, "--max_steps", "1", "--save_strategy", "no") == 0
    assert "removed audit.json" in capsys.readouterr().out and not (again / "audit.json").exists()


def test_eval_on_other_data_says_it_replaces_the_result_and_leaves_out_training_rows(
    base, rows, tuned, tmp_path, capsys
):
    folder = tmp_path / "tuned"
    shutil.copytree(tuned, folder)
    mixed = [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(10, 14) for b in range(10)]  # 20 new
    other = write_jsonl(tmp_path / "other.jsonl", mixed)
    trained = (folder / "loop_scaling.json").read_text()
    assert main(["eval", str(folder), "--loops", "1", "--output-dir", str(folder)]) == 0  # on the held-out rows
    capsys.readouterr()
    assert main(["eval", str(folder), "--dataset_name", other, "--loops", "1", "--output-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "replaced" in out and "computed on other data (12 held-out rows of rows.jsonl)" in out
    assert (folder / "loop_scaling.json").read_text() == trained  # eval never touches train's result
    result = json.loads((folder / "eval_loop_scaling.json").read_text())["data"]
    held = set(json.loads((folder / "training_data.json").read_text())["held_out"]["positions"])
    trained = {row["prompt"] for i, row in enumerate(map(json.loads, open(rows))) if i not in held}
    dropped = sum(row["prompt"] in trained for row in mixed)  # the 10+b and 11+b rows trained on
    assert 8 <= dropped == result["dropped_training_rows"] and result["held_out"] is True
    assert result["units"] == 40 - dropped and result["metric"] == "token_accuracy"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max_steps", "-5"], "--max_steps must be a number of optimizer steps >= 1 (or -1"),
        (["--max_steps", "0"], "--max_steps must be a number of optimizer steps >= 1"),
        (["--max_length", "0"], "--max_length must be >= 1, got 0"),
        (["--eval_loops", "0,4"], "--eval_loops must be comma-separated integers >= 1, got '0,4'"),
        (["--test_size", "-1"], "--test_size must be >= 0"),
        (["--output_dir", "{base}"], "is the checkpoint being fine-tuned (--model_name_or_path)"),
        (["--output_dir"], "--output_dir is required"),
        (["--num_loops", "0"], "--num_loops must be an integer >= 1 for ouro"),  # the checkpoint's family
        (["--output_dir", "{rows}"], "is an existing file, not a folder"),
    ],
)
def test_train_refuses_bad_flags_before_training(base, rows, tmp_path, capsys, flags, message):
    argv = ["train", "--model_name_or_path", str(base), "--dataset_name", rows]
    if flags != ["--output_dir"]:
        argv += ["--output_dir", str(tmp_path / "out")]
    argv += [f.format(base=base, rows=rows) for f in flags if f != "--output_dir" or len(flags) > 1]
    assert main([*argv, *QUIET]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and (base / "model.safetensors").exists()


def test_a_small_file_holds_out_a_tenth_and_says_so_first(base, rows, tmp_path, capsys):
    assert fine_tune(base, rows, tmp_path / "out", "--max_steps", "1", "--save_strategy", "no") == 0
    first = capsys.readouterr().out.splitlines()
    line = next(line for line in first if line.startswith("training on"))
    assert line.startswith(
        "training on 96 prompt/completion rows of rows.jsonl (train split); held out 12, dropped 0 as repeats of "
        "training questions, kept 12 for the loop-scaling evaluation"
    )
    assert line.endswith("; 12 held out for validation during training")  # a tenth more: the recipe validates


def test_train_says_how_many_held_out_rows_it_dropped_as_repeats_of_training_questions(base, tmp_path, capsys):
    """A file asking each question twice: of the 30 rows held out (a tenth), those whose twin is trained on are
    dropped; train says how many were held out, dropped and kept, and the training record keeps the counts."""
    sums = [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(15) for b in range(10)]
    path = write_jsonl(tmp_path / "twice.jsonl", sums + sums)  # 300 rows, 150 questions
    out = tmp_path / "out"
    assert fine_tune(base, path, out, "--max_steps", "1", "--save_strategy", "no") == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("training on"))
    counts = json.loads((out / "training_data.json").read_text())["held_out_counts"]
    assert counts["held_out"] == 30 and counts["dropped"] > 0 and counts["dropped"] + counts["kept"] == 30
    assert (
        f"; held out 30, dropped {counts['dropped']} as repeats of training questions, kept {counts['kept']} for the "
        "loop-scaling evaluation" in line
    )
    assert json.loads((out / "loop_scaling.json").read_text())["data"]["units"] == counts["kept"]


def test_ctrl_c_says_how_to_resume(monkeypatch, tmp_path, capsys):
    import equilibria.train

    (tmp_path / "checkpoint-40").mkdir()
    (tmp_path / "checkpoint-40" / "trainer_state.json").write_text("{}")

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(equilibria.train, "run_train", interrupted)
    assert main(["train", "--output_dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume_from_checkpoint last" in err and "checkpoint-40" in err
    assert "Traceback" not in err


def test_debug_shows_the_traceback_wherever_it_is_written(base, capsys):
    assert main(["eval", str(base), "--loops", "x"]) == 2
    for argv in (["--debug", "eval", str(base), "--loops", "x"], ["eval", str(base), "--loops", "x", "--debug"]):
        with pytest.raises(ValueError, match="--loops must be comma-separated integers"):
            main(argv)


def test_eqr_trains_on_a_published_format_csv_and_eval_reads_its_held_out_puzzles(tmp_path, capsys):
    from equilibria.tasks import build_sudoku_dataset

    puzzles = build_sudoku_dataset(size=6, num_train=60, num_test=1, seed=3, min_clues=18)["train"]  # 60 classes
    path = tmp_path / "puzzles.csv"
    puzzles.select_columns(["source", "question", "answer", "rating"]).to_csv(path, index=False)
    out = tmp_path / "eqr"
    argv = ["train", "--family", "eqr", "--task", "sudoku", "--dataset_name", str(path), "--output_dir", str(out)]
    argv += ["--max_steps", "2", "--hidden_size", "32", "--num_attention_heads", "2", "--eval_loops", "1,2"]
    assert main([*argv, "--save_strategy", "no", *QUIET]) == 0
    trained = json.loads((out / "loop_scaling.json").read_text())
    assert trained["data"]["name"] == "6 held-out rows of puzzles.csv"
    assert main(["eval", str(out), "--loops", "1,2", "--output-dir", str(out)]) == 0
    evaluated = json.loads((out / "eval_loop_scaling.json").read_text())
    assert evaluated["accuracy"] == trained["accuracy"]
    assert evaluated["data"]["fingerprint"] == trained["data"]["fingerprint"]
    argv = ["eval", str(out), "--loops", "2", "--breadth", "3", "--select", "vote", "--output-dir", str(out)]
    assert main(argv) == 0
    wide = json.loads((out / "eval_loop_scaling.json").read_text())["data"]
    assert wide["breadth"] == 3 and wide["select"] == "vote" and wide["fingerprint"] == trained["data"]["fingerprint"]
    assert main(["eval", str(out), "--dataset_name", str(path), "--loops", "2"]) == 0
    assert "54 rows asking a training question (or of its class) were dropped" in capsys.readouterr().out


def test_held_out_rows_of_a_file_share_no_class_with_its_training_rows(tmp_path, capsys):
    """4x4 puzzles fall in 36 classes: of a file's held-out rows, those in a training puzzle's class are dropped
    (so the loop-scaling evaluation is held out), and ``--split_by`` is refused with a file."""
    from equilibria.tasks import build_sudoku_dataset, build_task_rows
    from equilibria.tasks.named_splits import class_fingerprints

    puzzles = build_sudoku_dataset(size=4, num_train=60, num_test=1, seed=3, split_by="board")["train"]
    path = tmp_path / "puzzles.csv"
    puzzles.select_columns(["source", "question", "answer", "rating"]).to_csv(path, index=False)
    data = build_task_rows(str(path), "sudoku", test_size=12, seed=0)
    assert len(data.test) < 12 and data.record["split_census"]["held_out"]
    assert not set(class_fingerprints("sudoku", data.test)) & set(data.record["class_fingerprints"])
    assert "nor in a training puzzle's class" in data.test_description
    counts = data.record["held_out_counts"]
    assert counts["held_out"] == 12 and counts["dropped"] == 12 - len(data.test) == counts["dropped_same_class"]
    argv = ["train", "--family", "eqr", "--task", "sudoku", "--dataset_name", str(path), "--split_by", "board"]
    assert main([*argv, "--output_dir", str(tmp_path / "out")]) == 2
    # train says how many it held out and dropped, also when none is left to evaluate on
    argv = ["train", "--family", "eqr", "--task", "sudoku", "--dataset_name", str(path), "--test_size", "12"]
    argv += ["--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--hidden_size", "32"]
    capsys.readouterr()
    assert main([*argv, "--num_attention_heads", "2", "--eval_loops", "1", "--save_strategy", "no", *QUIET]) == 0
    out = capsys.readouterr().out
    counts = json.loads((tmp_path / "out" / "training_data.json").read_text())["held_out_counts"]
    kept = counts["kept"] or "none"
    assert (
        f"training on 48 sudoku rows of puzzles.csv; held out 12, dropped {counts['dropped']} as repeats of training "
        f"questions ({counts['dropped_same_class']} of them up to the task's symmetries: in a training puzzle's "
        f"class), kept {kept}" in out
    )
    if not counts["kept"]:
        assert "no held-out rows left (each of the 12 held out repeats a training question)" in out


def test_early_exit_on_a_gate_never_trained_warns_once_and_the_card_says_so(tmp_path):
    from conftest import tiny_ouro

    from equilibria.hub_cards import build_model_card

    model = tiny_ouro(exit_loss="final").train()
    ids = torch.randint(3, 40, (2, 6))
    model(ids, labels=ids).loss.backward()
    assert model.config.exit_gate_trained is False
    model.eval()
    with pytest.warns(UserWarning, match="was not trained with these weights") as caught:
        model.generate(ids, max_new_tokens=2, exit_threshold=0.5)
        model.generate(ids, max_new_tokens=2, exit_threshold=0.5)
    assert len([w for w in caught if "exit gate" in str(w.message)]) == 1
    assert "the exit gate was not trained with these weights" in build_model_card(model).text
    trained = tiny_ouro(exit_loss="expected_logits").train()
    trained(ids, labels=ids).loss.backward()
    assert trained.config.exit_gate_trained is True
    assert "exit gate was not trained" not in build_model_card(trained).text


def test_the_python_api_refuses_what_the_cli_refuses():
    import numpy as np
    from conftest import tiny_ouro

    from equilibria import EqRConfig, EqRForPuzzleSolving

    model = tiny_ouro()  # 128 positions
    ids = torch.randint(3, 40, (1, 120))
    packed = torch.arange(100).remainder(50)[None]  # two rows of 50 packed into one: positions restart
    assert model(torch.randint(3, 40, (1, 100)), position_ids=packed).logits.shape == (1, 100, model.config.vocab_size)
    assert torch.equal(model(ids[:, :8], num_loops=np.int64(2)).logits, model(ids[:, :8], num_loops=2).logits)
    with pytest.raises(ValueError, match=r"exit_at_step must be in \[0, 2\]"):
        model(ids[:, :8], exit_at_step=-1)
    eqr = EqRForPuzzleSolving(EqRConfig(max_seq_len=16, hidden_size=32, num_attention_heads=2, num_loops=2))
    with pytest.raises(ValueError, match="integer token ids"):
        eqr.solve(torch.rand(2, 16))
    with pytest.raises(ValueError, match=r"token ids in \[0, 10\] \(vocab_size=11\), got values from 0 to 12"):
        eqr.solve(torch.tensor([[0] * 15 + [12]]))


def test_rewriting_a_card_keeps_its_title_task_and_datasets(tmp_path):
    from conftest import tiny_ouro

    from equilibria.hub_cards.publish import write_model_card

    tiny_ouro().save_pretrained(tmp_path)
    scaling = {"data": {"name": "8 problems", "dataset": "someone/sums"}, "accuracy": {"1": 0.5, "4": 0.75}}
    (tmp_path / "loop_scaling.json").write_text(json.dumps(scaling))
    write_model_card(
        tiny_ouro(), tmp_path, model_name="my adder", task_name="2-digit addition", datasets=["someone/sums"]
    )
    assert main(["card", str(tmp_path)]) == 0
    card = ModelCard.load(tmp_path / "README.md")
    assert card.text.lstrip().startswith("# my adder") and card.data.datasets == ["someone/sums"]
    assert {r.task_name for r in card.data.eval_results} == {"2-digit addition"}
    assert {r.dataset_name for r in card.data.eval_results} == {"8 problems"}


def test_eval_refuses_held_out_rows_whose_file_has_changed_since_training(base, tmp_path, capsys):
    sums = [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(6) for b in range(10)]
    path = tmp_path / "mine.jsonl"
    write_jsonl(path, sums)
    out = tmp_path / "out"
    assert fine_tune(base, str(path), out, "--max_steps", "1", "--save_strategy", "no") == 0
    capsys.readouterr()
    for changed in (
        [{**row, "prompt": row["prompt"].replace("+", "+1")} for row in sums],  # other questions
        [{**row, "completion": row["completion"] + "0"} for row in sums],  # the same questions, other answers
    ):
        write_jsonl(path, changed)
        assert main(["eval", str(out), "--loops", "1"]) == 2
        assert "has changed since training: the rows at the held-out positions differ" in capsys.readouterr().err
    write_jsonl(path, sums[:3])
    assert main(["eval", str(out), "--loops", "1"]) == 2
    assert "has changed since training: its 'train' split lacks the held-out rows" in capsys.readouterr().err


def test_eval_claims_held_out_only_where_the_training_questions_can_be_compared(base, tmp_path, capsys):
    """A model trained on plain-text rows: its record's fingerprints are of whole texts, which addition prompts can
    never match, so generated addition problems are not called held out; a file of text rows is checked."""
    texts = [{"text": f"{a}+{b}={a + b}"} for a in range(10) for b in range(6)]
    path = write_jsonl(tmp_path / "texts.jsonl", texts)
    out = tmp_path / "out"
    assert fine_tune(base, path, out, "--max_steps", "1", "--save_strategy", "no") == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--task", "addition", "--loops", "1", "--num-examples", "8", "--digits", "1"]) == 0
    assert (
        "not checked against the training data (48 text rows of texts.jsonl (train split): rows of another kind)"
        in (capsys.readouterr().out)
    )
    assert main(["eval", str(out), "--dataset_name", path, "--loops", "1"]) == 0
    assert "no question of the model's training data" in capsys.readouterr().out
