"""Claims about the Attractor's puzzle head and the two forms of its map: the paper's ``T(y, y0) = y0 + U(x)``
and the earlier gated one."""

import json

import pytest
import torch
from conftest import (
    remote_code_run,
    saved_bytes_of_step,
    tiny_attractor_puzzle,
    tiny_attractor_puzzle_config,
    training_args,
)
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForTokenClassification

from equilibria import AttractorForCausalLM, AttractorForPuzzleSolving, AttractorModel
from equilibria.tasks import build_sudoku_dataset
from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments

FORMS = ["paper", "gated", "deq"]
PUZZLES = torch.tensor(
    [[0, 2, 3, 0, 4, 0, 0, 1, 1, 0, 0, 3, 0, 3, 2, 0], [4, 0, 0, 2, 0, 1, 0, 0, 0, 0, 4, 0, 2, 0, 0, 3]]
)
LABELS = torch.tensor(
    [[2, 1, 3, 4, 4, 3, 2, 1, 1, 2, 4, 3, 3, 4, 1, 2], [4, 3, 1, 2, 3, 1, 2, 4, 1, 2, 4, 3, 2, 4, 3, 1]]
)


puzzle_config = tiny_attractor_puzzle_config
tiny_puzzle = tiny_attractor_puzzle


@pytest.mark.parametrize("form", FORMS)
def test_every_cell_sees_every_other_in_the_puzzle_head_and_not_in_the_language_model(form):
    model = tiny_puzzle(form)
    changed = PUZZLES.clone()
    changed[:, -1] = 9
    for loops in (0, 60) if form != "deq" else (60,):  # the backbone alone (deq: a zero start), and the solve
        with torch.no_grad():
            before, after = model(PUZZLES, num_loops=loops).logits, model(changed, num_loops=loops).logits
        assert (before[:, 0] - after[:, 0]).abs().max() > 1e-4, loops  # the first cell reads the last
    lm = AttractorForCausalLM(puzzle_config(residual_form=form)).eval()
    with torch.no_grad():  # the solver mixes whole sequences (its path, not its fixed point, sees later tokens)
        if form != "deq":
            torch.testing.assert_close(lm(PUZZLES, num_loops=0).logits[:, :-1], lm(changed, num_loops=0).logits[:, :-1])
        torch.testing.assert_close(lm(PUZZLES).logits[:, :-1], lm(changed).logits[:, :-1], rtol=0, atol=1e-6)
    assert model.config.is_causal is False and lm.config.is_causal is True


@pytest.mark.parametrize("form", FORMS)
def test_the_puzzle_output_is_a_fixed_point_and_the_loss_is_the_cross_entropy_of_the_cells(form):
    model = tiny_puzzle(form, strength=2.0 if form == "deq" else None)  # the DEQ control is harder to solve
    labels = LABELS.clone()
    labels[0, :4] = -100  # skipped cells
    with torch.no_grad():
        out = model(PUZZLES, labels=labels, output_hidden_states=True)
        f, y0 = model.model.loop_map(PUZZLES)
        y_star = out.hidden_states[-1]
    assert out.converged.all() and (out.solver_steps > 3).all()  # the attractor really iterates
    assert ((f(y_star) - y_star).flatten(1).norm(dim=1) / y_star.flatten(1).norm(dim=1) < 1e-5).all()
    torch.testing.assert_close(y0, out.proposal if form != "deq" else torch.zeros_like(y0), rtol=0, atol=0)
    expected = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)


def test_where_the_update_vanishes_the_paper_fixed_point_is_the_proposal_and_the_gated_one_is_gate_away():
    """The paper's map lets the fixed point sit on the proposal; the gated map holds every state at relative distance
    about ``gate`` from it (``T(y) - y0 = gate * rms(y0) * norm(.)``), whatever the layers do."""
    paper = tiny_puzzle("paper")
    with torch.no_grad():
        for layer in paper.model.attractor.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        out = paper(PUZZLES, output_hidden_states=True)
    torch.testing.assert_close(out.hidden_states[-1], out.proposal, rtol=0, atol=0)
    assert (out.solver_steps <= 1).all() and out.converged.all()
    gated = tiny_puzzle("gated", attractor_gate_init=0.5)
    with torch.no_grad():
        out = gated(PUZZLES, output_hidden_states=True)
    distance = (out.hidden_states[-1] - out.proposal).norm(dim=-1) / out.proposal.norm(dim=-1)
    torch.testing.assert_close(distance, torch.full_like(distance, 0.5), rtol=5e-3, atol=0)  # rms's eps: "about"


def test_a_config_saved_before_residual_form_existed_loads_as_gated(tmp_path):
    config = puzzle_config()
    assert config.residual_form == "paper" and AttractorModel(config).attractor.gate is None
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["residual_form"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    old = AutoConfig.from_pretrained(tmp_path)
    assert old.residual_form == "gated" and AttractorModel(old).attractor.gate is not None
    assert AutoConfig.from_pretrained("tests/data/saved-0.1/attractor_lm").residual_form == "gated"  # 0.1's folder
    with pytest.raises(ValueError, match="residual_form"):
        puzzle_config(residual_form="gate")


@pytest.mark.parametrize("form", FORMS)
def test_saved_equals_loaded_and_the_language_model_class_refuses_the_folder(form, tmp_path):
    model = tiny_puzzle(form)
    model.save_pretrained(tmp_path)
    # the fixture runs eager attention; attn_implementation is not saved, and from_pretrained picks
    # transformers' default (SDPA): compare like with like by asking for eager here too
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert isinstance(loaded, AttractorForPuzzleSolving) and loaded.config.residual_form == form
    for loops in (0, 60) if form != "deq" else (60,):
        with torch.no_grad():
            torch.testing.assert_close(loaded(PUZZLES, num_loops=loops).logits, model(PUZZLES, num_loops=loops).logits)
    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, AttractorModel) and not base.is_causal
    with pytest.raises(ValueError, match="AttractorForPuzzleSolving"):
        AutoModelForCausalLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no KV cache"):
        model.model(PUZZLES, use_cache=True)


@pytest.mark.slow
def test_remote_code_loads_the_puzzle_head_without_the_package(tmp_path):
    then = 'print("REMOTE_OK", model.config.residual_form)'
    load = ', attn_implementation="eager"'
    stdout = remote_code_run(tiny_puzzle(), PUZZLES, "AutoModelForTokenClassification", tmp_path, load=load, then=then)
    assert "REMOTE_OK paper" in stdout


def _saved_bytes(model, mode: str, num_loops: int) -> int:
    return saved_bytes_of_step(model, PUZZLES, LABELS, mode, num_loops)


@pytest.mark.parametrize("form", FORMS)
def test_puzzle_training_memory_is_constant_in_the_budget_except_when_unrolled(form):
    model = tiny_puzzle(form, solver="picard")
    for mode in ("one_step", "implicit"):
        assert _saved_bytes(model, mode, 32) == _saved_bytes(model, mode, 2), mode
    unrolled = [_saved_bytes(model, "unrolled", budget) for budget in (2, 8, 32)]
    assert unrolled[0] < unrolled[1] < unrolled[2] and unrolled[2] > 6 * unrolled[0]


def _grads(model, mode: str, num_loops: int) -> torch.Tensor:
    model.zero_grad()
    model.train()
    model(PUZZLES, labels=LABELS, gradient_mode=mode, num_loops=num_loops).loss.backward()
    model.eval()
    return torch.cat([p.grad.flatten() for _, p in sorted(model.named_parameters()) if p.grad is not None])


@pytest.mark.parametrize("form", FORMS)
def test_the_implicit_gradient_of_the_puzzle_head_is_backprop_through_the_converged_solve(form):
    model = tiny_puzzle(form, strength=2.0, solver="picard", solver_tol=1e-7)
    implicit, unrolled = _grads(model, "implicit", 200), _grads(model, "unrolled", 80)
    assert ((implicit - unrolled).norm() / unrolled.norm()) < 1e-4


def _sudoku_rows(n: int):
    rows = build_sudoku_dataset(size=4, num_train=n, num_test=1, seed=0, split_by="board")["train"]
    return rows.select_columns(["inputs", "labels"])


@pytest.mark.parametrize("form", FORMS)
def test_the_trainer_trains_the_puzzle_head_with_the_regularisers(form, tmp_path):
    torch.manual_seed(0)
    model = AttractorForPuzzleSolving(puzzle_config(residual_form=form, num_loops=8, solver_tol=1e-3))
    args = training_args(
        tmp_path,
        AttractorTrainingArguments,
        max_steps=30,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        logging_steps=10,
        jacobian_weight=0.1,
        correction_weight=0.5,
        seed=42,  # transformers' default, the seed this test has always trained with
    )
    trainer = AttractorTrainer(model=model, args=args, train_dataset=_sudoku_rows(96))
    trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert len(history) == 3 and history[-1]["lm_loss"] < history[0]["lm_loss"] - 0.1, history
    for h in history:
        assert h["solver_steps"] >= 1 and h["diverged_rate"] == 0
        assert h["jacobian_penalty"] > 0 and h["correction_loss"] > 0


@pytest.mark.slow
def test_the_cli_trains_evaluates_audits_and_cards_an_attractor_puzzle_model(tmp_path, capsys):
    from equilibria.cli import main

    out = tmp_path / "attractor"
    argv = ["train", "--family", "attractor_lm", "--task", "sudoku", "--size", "4", "--split_by", "board"]
    argv += ["--train_size", "64", "--test_size", "8", "--hidden_size", "32", "--num_attention_heads", "2"]
    argv += ["--max_steps", "3", "--eval_loops", "0,2", "--output_dir", str(out), "--save_strategy", "no"]
    assert main([*argv, "--report_to", "none", "--use_cpu", "--disable_tqdm", "true"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["AttractorForPuzzleSolving"] and config["is_causal"] is False
    assert config["residual_form"] == "paper" and config["max_position_embeddings"] == 16
    trained = json.loads((out / "loop_scaling.json").read_text())
    assert main(["eval", str(out), "--loops", "0,2", "--output-dir", str(out)]) == 0
    assert json.loads((out / "eval_loop_scaling.json").read_text())["accuracy"] == trained["accuracy"]
    assert main(["audit", str(out), "--num-examples", "12", "--output-dir", str(out)]) == 0
    audit = json.loads((out / "audit.json").read_text())
    assert audit["num_units"] == 12 and audit["family"]["unit"] == "puzzle" and audit["model_type"] == "attractor_lm"
    card = (out / "README.md").read_text()
    assert "`residual_form='paper'`" in card and "bidirectional over the puzzle's cells" in card
    assert "AutoModelForTokenClassification" in card and "gradient_mode='one_step'" in card
    capsys.readouterr()


@pytest.mark.slow
def test_the_smoke_benchmark_trains_on_mazes_and_a_published_format_sudoku_file(tmp_path):
    from conftest import load_benchmark

    record = load_benchmark("attractor_smoke").main(["--quick", "--output", str(tmp_path / "smoke.json")])
    assert json.loads((tmp_path / "smoke.json").read_text()) == record
    maze, sudoku = record["cases"]["9x9 maze (generated)"], record["cases"]["9x9 Sudoku (Sudoku-Extreme loader)"]
    assert maze["cells"] == sudoku["cells"] == 81 and maze["residual_form"] == "paper"
    assert maze["data"]["held_out"] and sudoku["data"]["held_out"]  # test puzzles outside the training classes
    assert sudoku["data"]["name"] == "8 held-out rows of sudoku9.csv" and "--dataset_name" in sudoku["command"]
    assert set(maze["accuracy"]) == {"0", "2"}


def test_a_model_without_a_head_is_causal_and_no_head_changes_the_callers_config():
    """transformers' mask functions read an unset ``is_causal`` as bidirectional: the base model settles it (on its
    own copy) as causal, and each head settles its own without touching the config it was given."""
    config = puzzle_config(max_position_embeddings=32)
    base = AttractorModel(config).eval()
    ids = torch.tensor([[3, 5, 7, 2, 9, 4], [3, 5, 7, 2, 9, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])
    changed = ids.clone()
    changed[:, 4] = 8
    with torch.no_grad():
        before = base(ids, attention_mask=mask, num_loops=0).last_hidden_state
        after = base(changed, attention_mask=mask, num_loops=0).last_hidden_state
    torch.testing.assert_close(before[:, :4], after[:, :4], rtol=0, atol=0)  # earlier positions never see later ones
    assert base.config.is_causal is True and config.is_causal is None
    assert AttractorForCausalLM(config).config.is_causal and not AttractorForPuzzleSolving(config).config.is_causal
    assert config.is_causal is None


def test_bad_puzzle_calls_are_clear_errors_before_any_solve():
    model = tiny_puzzle()
    with pytest.raises(TypeError, match="num_loop"):
        model(PUZZLES, num_loop=8)
    with pytest.raises(ValueError, match="labels must have the inputs' shape"):
        model(PUZZLES, labels=LABELS[:, :4])
    with pytest.raises(ValueError, match="no proposal to read"):
        tiny_puzzle("deq")(PUZZLES, num_loops=0)
    tied = AttractorForPuzzleSolving(puzzle_config(tie_word_embeddings=True))
    assert tied.lm_head.weight.data_ptr() == tied.model.embed_tokens.weight.data_ptr()  # as its config says


def test_the_cli_reads_a_puzzle_checkpoints_own_task(tmp_path, capsys):
    from equilibria.cli import main

    model = tiny_puzzle()
    model.save_pretrained(tmp_path / "ckpt")
    assert main(["eval", str(tmp_path / "ckpt"), "--task", "addition"]) == 2  # the family has it, the head has not
    assert (
        "--task addition does not fit an attractor_lm model (AttractorForPuzzleSolving fits" in capsys.readouterr().err
    )
    rows = build_sudoku_dataset(size=4, num_train=40, num_test=1, seed=3, split_by="board")["train"]
    rows.select_columns(["source", "question", "answer", "rating"]).to_csv(tmp_path / "p.csv", index=False)
    argv = ["train", "--family", "attractor_lm", "--model_name_or_path", str(tmp_path / "ckpt"), "--dataset_name"]
    argv += [str(tmp_path / "p.csv"), "--max_steps", "1", "--eval_loops", "1", "--output_dir", str(tmp_path / "more")]
    assert main([*argv, "--report_to", "none", "--use_cpu", "--save_strategy", "no"]) == 0  # no --task needed
    assert json.loads((tmp_path / "more" / "config.json").read_text())["equilibria_task"] == "sudoku"
