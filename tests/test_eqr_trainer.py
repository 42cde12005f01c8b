"""Claims about EqRTrainer: the segment logic (carry, detach, refill on halting), its switches, EMA, evaluation
and multi-process runs."""

import functools
import itertools
import json
import math
import re

import pytest
import torch
from conftest import StopAt, load_benchmark, training_args
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import TrainerCallback

from equilibria import EqRConfig, EqRForPuzzleSolving
from equilibria.tasks import build_sudoku_dataset
from equilibria.trainers import EqRTrainer, EqRTrainingArguments
from equilibria.trainers.eqr import EMA_WEIGHTS_NAME

DATA = build_sudoku_dataset(size=4, num_train=48, num_test=8, seed=0, split_by="board")


def tiny(seed=0, **overrides):
    torch.manual_seed(seed)
    kwargs = dict(max_seq_len=16, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_loops=2)
    kwargs.update(overrides)
    return EqRForPuzzleSolving(EqRConfig(**kwargs))


def eqr_args(tmp_path, **overrides):
    values = dict(
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        logging_steps=1,
        dataloader_drop_last=True,
        halt_on_head=False,
        max_segments=2,
    )
    return training_args(tmp_path / "out", EqRTrainingArguments, **{**values, **overrides})


def record_calls(model):
    """Wrap forward to record what each training segment received and returned."""
    calls = []
    original = model.forward

    @functools.wraps(original)  # keeps the signature, which the Trainer reads to choose dataset columns
    def forward(*args, **kwargs):
        out = original(*args, **kwargs)
        if torch.is_grad_enabled():
            calls.append(
                {
                    "inputs": kwargs["inputs"].clone(),
                    "state": kwargs["state"].detach().clone(),
                    "out_state": out.state.detach().clone(),
                    "halt": out.halt_logits[:, -1].detach().clone(),
                }
            )
        return out

    model.forward = forward
    return calls


def test_segments_carry_the_detached_state_and_refill_after_max_segments(tmp_path):
    model = tiny()
    calls = record_calls(model)
    trainer = EqRTrainer(model=model, args=eqr_args(tmp_path, max_steps=5, max_segments=2), train_dataset=DATA["train"])
    averaged = EqRTrainer(
        model=tiny(),
        args=eqr_args(tmp_path / "b", max_steps=4, max_segments=2, logging_steps=4),
        train_dataset=DATA["train"],
    )
    averaged.train()  # over a logging interval, the mean segments of the rows replaced, not of every step
    interval = [h for h in averaged.state.log_history if "loss" in h][0]
    assert interval["halted_rate"] == 0.5 and interval["segments_at_halt"] == 2.0
    trainer.train()
    assert len(calls) == 5
    # step 2 continues step 1's puzzles from its final state; step 3 starts new puzzles from a fresh start
    assert torch.equal(calls[1]["inputs"], calls[0]["inputs"])
    torch.testing.assert_close(calls[1]["state"], calls[0]["out_state"], rtol=0, atol=0)
    assert not torch.equal(calls[2]["inputs"], calls[1]["inputs"])
    assert not torch.allclose(calls[2]["state"], calls[1]["out_state"])
    assert torch.equal(calls[3]["inputs"], calls[2]["inputs"])
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["halted_rate"] for h in history] == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert all(h["segments_at_halt"] == 2.0 for h in history if h["halted_rate"] == 1.0)
    assert all(h["segments_at_halt"] == 0.0 for h in history if h["halted_rate"] == 0.0)
    for h in history:
        assert {"lm_loss", "halt_loss", "cell_accuracy", "exact_accuracy", "residual"} <= set(h)
        assert math.isfinite(h["loss"])


def test_rows_the_halting_head_stops_are_replaced_and_the_others_go_on(tmp_path):
    model = tiny()
    with torch.no_grad():
        model.model.halt_head.bias.fill_(-50.0)  # first the head says "never halt" ...
    calls = record_calls(model)
    trainer = EqRTrainer(
        model=model,
        args=eqr_args(tmp_path, max_steps=3, max_segments=10, halt_on_head=True, learning_rate=0.0),
        train_dataset=DATA["train"],
    )
    trainer.train()
    for before, after in zip(calls, calls[1:]):  # nothing halts: every row carries on
        assert torch.equal(after["inputs"], before["inputs"])
        torch.testing.assert_close(after["state"], before["out_state"], rtol=0, atol=0)
    with torch.no_grad():
        model.model.halt_head.bias.fill_(50.0)  # ... then "always halt": every row is replaced every step
    calls.clear()
    trainer.args.max_steps = 6
    trainer.train(resume_from_checkpoint=None)
    for before, after in zip(calls, calls[1:]):
        assert not torch.equal(after["inputs"], before["inputs"])


def test_the_noise_and_start_switches(tmp_path):
    model = tiny(train_noise=0.5, random_init=True)
    calls = record_calls(model)
    args = eqr_args(tmp_path, max_steps=1, train_noise=0.0, random_init=False, learning_rate=0.0)
    EqRTrainer(model=model, args=args, train_dataset=DATA["train"]).train()
    start = calls[0]["state"]
    assert torch.equal(start, model.model.init_state.detach().expand_as(start))  # the learned start
    with torch.no_grad():  # no noise: the segment's output is reproducible from its start
        again = model(inputs=calls[0]["inputs"], state=start, num_loops=2, noise=0.0).state
    torch.testing.assert_close(calls[0]["out_state"], again)


def test_offline_supervision_supervises_every_segment_of_a_fresh_trajectory_with_one_update(tmp_path):
    model = tiny(random_init=False, train_noise=0.0)
    calls = record_calls(model)
    args = eqr_args(tmp_path, max_steps=2, max_segments=3, learning_rate=0.0, supervision="offline")
    trainer = EqRTrainer(model=model, args=args, train_dataset=DATA["train"])
    trainer.train()
    assert len(calls) == 6 and trainer.state.global_step == 2  # three supervised segments per optimizer step
    start = model.model.init_state.detach().expand(4, 16, -1)
    labels = {tuple(r["inputs"]): r["labels"] for r in DATA["train"]}
    history = [h for h in trainer.state.log_history if "loss" in h]
    for step, trajectory in enumerate((calls[:3], calls[3:])):
        assert torch.equal(trajectory[0]["state"], start)  # fresh puzzles from the start ...
        for before, after in zip(trajectory, trajectory[1:]):  # ... carried on, detached, on the same puzzles
            assert torch.equal(after["state"], before["out_state"]) and torch.equal(after["inputs"], before["inputs"])
        inputs = trajectory[0]["inputs"]
        target = torch.tensor([labels[tuple(row.tolist())] for row in inputs])
        with torch.no_grad():  # the logged loss is the mean of the three segments' losses
            losses = [
                model(inputs=inputs, labels=target, state=c["state"], num_loops=2, noise=0.0).loss for c in trajectory
            ]
        assert history[step]["loss"] == pytest.approx(float(torch.stack(losses).mean()), rel=1e-4)
    assert not torch.equal(calls[0]["inputs"], calls[3]["inputs"])


def test_offline_terminal_supervision_rolls_fresh_puzzles_out_without_gradient(tmp_path):
    model = tiny(random_init=False, train_noise=0.0)
    calls = record_calls(model)
    args = eqr_args(tmp_path, max_steps=3, max_segments=3, learning_rate=0.0, supervision="offline_terminal")
    trainer = EqRTrainer(model=model, args=args, train_dataset=DATA["train"])
    trainer.train()
    assert len(calls) == 3  # one supervised segment per step ...
    start = model.model.init_state.detach().expand(4, 16, -1)
    for call, following in zip(calls, calls[1:] + [None]):
        with torch.no_grad():  # ... from the end of a 2 x 2-step rollout of fresh puzzles
            rolled = model(inputs=call["inputs"], state=start, num_loops=4, noise=0.0).state
        torch.testing.assert_close(call["state"], rolled)
        if following is not None:
            assert not torch.equal(following["inputs"], call["inputs"])
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert all(h["halted_rate"] == 1.0 and h["segments_at_halt"] == 3.0 for h in history)


def test_ema_weights_follow_the_recursion_and_end_up_in_the_model(tmp_path):
    """shadow_1 = w_1 and shadow_k = d shadow_{k-1} + (1 - d) w_k over the weights w_k after each optimizer step;
    the model ends with the shadow."""

    class Record(TrainerCallback):
        def __init__(self):
            self.weights = []

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self.weights.append({n: p.detach().clone() for n, p in model.named_parameters()})

    averaged, record, decay = tiny(), Record(), 0.7
    trainer = EqRTrainer(
        model=averaged, args=eqr_args(tmp_path, ema_decay=decay), train_dataset=DATA["train"], callbacks=[record]
    )
    trainer.train()
    assert len(record.weights) == 4
    expected = dict(record.weights[0])
    for weights in record.weights[1:]:
        expected = {n: decay * expected[n] + (1 - decay) * w for n, w in weights.items()}
    for name, param in averaged.named_parameters():
        torch.testing.assert_close(param.detach(), expected[name], rtol=1e-6, atol=1e-7, msg=name)
        assert torch.equal(param.detach(), trainer.ema_weights[name])
    assert any(not torch.allclose(expected[n], w) for n, w in record.weights[-1].items())  # not the last weights


def test_evaluation_runs_a_fresh_trajectory_of_the_evaluation_depth(tmp_path):
    model = tiny(random_init=False, test_noise=0.0)
    args = eqr_args(tmp_path, eval_num_loops=5, per_device_eval_batch_size=4)
    metrics = EqRTrainer(model=model, args=args, eval_dataset=DATA["test"]).evaluate()  # 2 batches of 4
    batch = DATA["test"].with_format("torch")[:8]
    with torch.no_grad():
        losses = [
            model.eval()(inputs=batch["inputs"][i : i + 4], labels=batch["labels"][i : i + 4], num_loops=5).loss
            for i in (0, 4)
        ]
    assert metrics["eval_loss"] == pytest.approx(torch.stack(losses).mean().item(), rel=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(segment_loops=0), "segment_loops"),
        (dict(max_segments=0), "max_segments"),
        (dict(train_noise=-1.0), "train_noise"),
        (dict(ema_decay=1.0), "ema_decay"),
        (dict(supervision="replay"), r"supervision must be one of \('online', 'offline', 'offline_terminal'\)"),
    ],
)
def test_bad_arguments_fail_at_construction(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        eqr_args(tmp_path, **overrides)


def test_a_model_without_an_eqr_core_is_refused(tmp_path):
    from conftest import tiny_ouro

    with pytest.raises(ValueError, match="needs an Equilibrium Reasoner"):
        EqRTrainer(model=tiny_ouro(), args=eqr_args(tmp_path), train_dataset=DATA["train"])


@pytest.mark.slow
@pytest.mark.two_process("eqr_ddp")
def test_two_process_run_keeps_replicas_identical(two_process_run):
    r0, r1, _ = two_process_run
    assert r0["world"] == r1["world"] == 2
    for name, p0 in r0["params"].items():
        assert torch.equal(p0, r1["params"][name]), name
    start = tiny().state_dict()
    assert any(not torch.equal(p, start[n]) for n, p in r0["params"].items())


@pytest.mark.slow
def test_sudoku_benchmark_quick_mode_runs(tmp_path):
    bench_eqr_sudoku = load_benchmark("bench_eqr_sudoku")
    kinds = "feedforward,untied,weight_tied,ri_only,ni_only,eqr,eqr_offline,eqr_offline_terminal"
    results = bench_eqr_sudoku.main(["--quick", "--kinds", kinds, "--output-dir", str(tmp_path / "all")])
    assert set(results) >= set(kinds.split(","))
    assert list(results["feedforward"]["accuracy_by_depth"]) == [1]
    assert list(results["untied"]["accuracy_by_depth"]) == [2]  # the quick untied depth
    assert results["weight_tied"]["selection"] is None and set(results["ni_only"]["selection"]) >= {"vote", "halt"}
    assert all(r > 0 for r in results["eqr_offline"]["residual_by_depth"].values())
    assert results["eqr_offline"]["train_steps"] == 1 and results["eqr"]["train_steps"] == 4  # 4 segments a step
    assert set(results["eqr"]["grid"]) == {"2x1", "2x2", "4x1", "4x2"}
    assert all(set(v) == {"residual", "vote", "halt"} for v in results["eqr"]["grid"].values())
    assert (tmp_path / "all" / "eqr_sudoku.png").stat().st_size > 1000
    check_ablation_summary(tmp_path, kinds.split(","))


def test_the_benchmarks_one_pass_grid_is_what_solve_gives_at_each_depth_and_breadth():
    """bench_eqr_sudoku reads every depth off one trajectory and every breadth off the widest run's first restarts:
    its cells equal solve's at the widest breadth (same seed, one batch) and its narrower cells are those restarts'
    first ones, with solve's own selection. The labels are the first restart's answers at depth 3, so cells differ."""
    bench = load_benchmark("bench_eqr_sudoku")
    model = tiny(3, halting=True, random_init=True, test_noise=0.05).eval()
    puzzles = DATA["test"].with_format("torch")[:]
    run = model.solve(puzzles["inputs"], depth=3, breadth=4, generator=torch.Generator().manual_seed(7))
    labels = run.predictions[:, 0]  # the first restart is right at depth 3 (same seed as below)
    data = {"test": DATA["test"].remove_columns("labels").add_column("labels", labels.tolist())}
    bench._EVALUATED.clear()
    bench.evaluate_grid(model, data, [1, 3, 5], [1, 2, 4], seed=7)
    accuracies = set()
    for depth in (1, 3, 5):
        out = model.solve(puzzles["inputs"], depth=depth, breadth=4, generator=torch.Generator().manual_seed(7))
        right = (out.predictions == labels[:, None, :]).all(-1)
        for breadth in (1, 2, 4):
            cell = bench.evaluate(model, data, depth, breadth, seed=7)
            assert torch.equal(cell["residuals"], out.residuals[:, :breadth].flatten()), (depth, breadth)
            assert torch.equal(cell["correct"], right[:, :breadth].flatten()), (depth, breadth)
            accuracies.add(round(cell["accuracy"]["residual"], 6))
        expected = {
            rule: right.gather(1, bench.pick_restarts(rule, out.residuals, out.votes, out.halt_probs)[:, None]).float()
            for rule in ("residual", "vote", "halt")
        }
        widest = bench.evaluate(model, data, depth, 4, seed=7)["accuracy"]
        assert widest == {rule: float(v.mean()) for rule, v in expected.items()}, depth
    assert len(accuracies) > 1  # the cells are told apart: the check cannot pass on all-wrong answers
    bench._EVALUATED.clear()


@pytest.mark.slow
def test_sudoku_benchmark_trains_the_attractor_on_the_same_data_and_steps(tmp_path):
    bench_eqr_sudoku = load_benchmark("bench_eqr_sudoku")
    argv = ["--quick", "--kinds", "weight_tied,attractor", "--attractor-budget", "6", "--output-dir", str(tmp_path)]
    results = bench_eqr_sudoku.main(argv)
    attractor, tied = results["attractor"], results["weight_tied"]
    assert list(attractor["accuracy_by_depth"]) == [0, 2, 4, 6]  # 0: the backbone alone; the training budget
    assert attractor["residual_by_depth"][0] == 0 and attractor["residual_by_depth"][6] > 0
    assert attractor["train_steps"] == tied["train_steps"] == 4 and attractor["selection"] is None
    assert {"lm_loss", "solver_steps"} <= set(attractor["log"][-1])  # trained by AttractorTrainer
    assert abs(attractor["parameters"] / tied["parameters"] - 1) < 0.05, (attractor["parameters"], tied["parameters"])
    with pytest.raises(SystemExit, match="--attractor-backbone-layers must be in"):
        bench_eqr_sudoku.main([*argv, "--attractor-backbone-layers", "2"])


@pytest.mark.slow
def test_a_saved_run_is_evaluated_again_on_a_validation_split_with_the_same_test_numbers(tmp_path):
    """--from-saved: the models a run saved give back its test numbers exactly; --validation-size adds the
    validation split's; the Attractor's layers can be split 2 + 2 with a narrower MLP at equal parameters, and the
    EqR kinds' block can be made as deep and narrow."""
    bench_eqr_sudoku = load_benchmark("bench_eqr_sudoku")
    argv = [
        "--quick",
        "--kinds",
        "eqr,attractor",
        "--layers",
        "4",
        "--attractor-backbone-layers",
        "2",
        "--block-intermediate",
        "24",
    ]
    first = bench_eqr_sudoku.main([*argv, "--attractor-intermediate", "32", "--output-dir", str(tmp_path / "a")])
    again = [*argv, "--attractor-intermediate", "32", "--validation-size", "6", "--output-dir", str(tmp_path / "b")]
    second = bench_eqr_sudoku.main([*again, "--from-saved", str(tmp_path / "a")])
    for kind in ("eqr", "attractor"):
        assert second[kind]["residual_by_depth"] == first[kind]["residual_by_depth"], kind
        assert second[kind]["log"] == first[kind]["log"] and "validation_accuracy_by_depth" in second[kind]
        assert "validation_accuracy_by_depth" not in first[kind]
    narrow = json.loads((tmp_path / "a" / "models" / "attractor" / "config.json").read_text())
    assert narrow["intermediate_size"] == 32 and narrow["num_attractor_layers"] == 2
    block = json.loads((tmp_path / "a" / "models" / "eqr" / "config.json").read_text())
    assert block["intermediate_size"] == 24 and block["num_layers"] == 4
    with pytest.raises(SystemExit, match="no saved 'eqr' model"):
        bench_eqr_sudoku.main([*again, "--from-saved", str(tmp_path / "missing")])


def check_ablation_summary(folder, kinds):
    """The merge of per-kind runs: one row per kind in the ablation's order; runs of unequal budget refused."""
    summary = load_benchmark("eqr_ablation_summary").main([str(folder)])
    assert list(summary["kinds"]) == kinds
    rows = [line.split(" |")[0].lstrip("| ") for line in summary["table"].splitlines()[2 : 2 + len(kinds)]]
    assert rows == kinds
    assert "| eqr | " in summary["table"].split("selection rule")[1]  # a stochastic kind has selection rules
    assert (folder / "ablation.png").stat().st_size > 1000
    other = json.loads((folder / "all" / "eqr_sudoku.json").read_text())
    other["args"]["steps"] = "8"
    (folder / "other").mkdir()
    (folder / "other" / "eqr_sudoku.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="differ in \\['steps'\\]"):
        load_benchmark("eqr_ablation_summary").main([str(folder)])


@pytest.mark.slow
def test_halting_benchmark_quick_mode_runs(tmp_path):
    from datasets import Dataset

    bench = load_benchmark("bench_eqr_halting")
    rated = Dataset.from_dict({"rating": [3.0, 0.0, 1.0, 0.0], "clues": [5, 4, 6, 7]})
    assert bench.easy_split(rated, 0.5) == [1, 3]  # the lowest ratings (ties to more clues)
    results = bench.main(["--quick", "--output-dir", str(tmp_path)])
    for part, split in itertools.product(("validation", "test"), ("easy", "all")):
        fixed, halting = results[part][split]["fixed"], results[part][split]["halting"]
        assert [s["mean_nfe"] for s in fixed.values()] == [1.0, 2.0, 4.0]  # no halting: NFE = depth
        assert all(1.0 <= s["mean_nfe"] <= 4.0 for s in halting.values())
    for split in ("easy", "all"):  # chosen on validation: the cheapest of equal accuracy; reported on test
        chosen = results["chosen"][split]
        val = results["validation"][split]
        assert chosen["reference_depth"] == bench.cheapest_of_equal_accuracy(val["fixed"], val["puzzles"], "mean_nfe")
        assert chosen["test_depth"] == results["test"][split]["fixed"][chosen["reference_depth"]]
    assert results["validation"]["all"]["puzzles"] == results["test"]["all"]["puzzles"] == 8  # 16, halved
    assert (tmp_path / "eqr_halting.png").stat().st_size > 1000
    assert (tmp_path / "model" / "config.json").exists()


def test_checkpoints_hold_the_ema_and_a_resumed_run_ends_with_the_ema_of_an_uninterrupted_one(tmp_path):
    # the rows in flight are not checkpointed: resume where every row has run max_segments (3) segments
    common = dict(max_steps=6, save_strategy="steps", save_steps=3, max_segments=3, ema_decay=0.7)
    full = EqRTrainer(model=tiny(seed=5), args=eqr_args(tmp_path / "full", **common), train_dataset=DATA["train"])
    full.train()
    run = EqRTrainer(
        model=tiny(seed=5),
        args=eqr_args(tmp_path / "run", **common),
        train_dataset=DATA["train"],
        callbacks=[StopAt(3)],
    )
    run.train()
    checkpoint = tmp_path / "run" / "out" / "checkpoint-3"
    assert not checkpoint.with_name("checkpoint-6").exists()
    saved = load_file(checkpoint / EMA_WEIGHTS_NAME)  # the EMA after 3 steps (the interrupted run ends with it)
    with safe_open(checkpoint / EMA_WEIGHTS_NAME, framework="pt") as handle:
        assert handle.metadata()["n_averaged"] == "3"
    assert saved.keys() == run.ema_weights.keys() == dict(run.model.named_parameters()).keys()
    raw = load_file(checkpoint / "model.safetensors")
    assert any(not torch.equal(saved[n], raw[n]) for n in saved)  # the average, not the weights
    for name, average in saved.items():
        assert torch.equal(average, run.ema_weights[name]), name

    resumed = EqRTrainer(model=tiny(seed=99), args=eqr_args(tmp_path / "run", **common), train_dataset=DATA["train"])
    resumed.train(resume_from_checkpoint=str(checkpoint))  # other weights: all must come from the checkpoint
    assert full.state.global_step == resumed.state.global_step == 6
    final = dict(resumed.model.named_parameters())
    for name, param in full.model.named_parameters():
        torch.testing.assert_close(resumed.ema_weights[name], full.ema_weights[name], rtol=1e-6, atol=1e-7, msg=name)
        torch.testing.assert_close(final[name], param, rtol=1e-6, atol=1e-7, msg=name)  # the EMA, copied in
    last = load_file(tmp_path / "full" / "out" / "checkpoint-6" / EMA_WEIGHTS_NAME)
    assert all(torch.equal(last[n], full.ema_weights[n]) for n in last)


def test_resuming_a_checkpoint_without_the_ema_file_is_refused(tmp_path):
    args = eqr_args(tmp_path, max_steps=2, save_strategy="steps", save_steps=2, ema_decay=0.7)
    trainer = EqRTrainer(model=tiny(), args=args, train_dataset=DATA["train"])
    trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    assert (checkpoint / EMA_WEIGHTS_NAME).is_file()
    (checkpoint / EMA_WEIGHTS_NAME).unlink()
    again = EqRTrainer(model=tiny(), args=eqr_args(tmp_path, max_steps=4, ema_decay=0.7), train_dataset=DATA["train"])
    for resume in (str(checkpoint), True):  # True: the newest checkpoint in output_dir
        with pytest.raises(ValueError, match=re.escape(f"checkpoint {checkpoint} has no ema.safetensors")):
            again.train(resume_from_checkpoint=resume)
    plain = EqRTrainer(model=tiny(), args=eqr_args(tmp_path, max_steps=4), train_dataset=DATA["train"])
    plain.train(resume_from_checkpoint=str(checkpoint))  # without ema_decay the checkpoint resumes
    assert plain.state.global_step == 4 and plain.ema_weights is None


@pytest.mark.slow
@pytest.mark.two_process("eqr_ddp_ema")
def test_two_process_ema_stays_identical_and_only_the_main_process_writes_it(two_process_run):
    r0, r1, folder = two_process_run
    assert r0["world"] == r1["world"] == 2
    assert len(r0["writes"]) == 1 and r1["writes"] == []
    saved = load_file(folder / "checkpoint-4" / EMA_WEIGHTS_NAME)
    for name, average in r0["ema"].items():
        assert torch.equal(average, r1["ema"][name]) and torch.equal(average, saved[name]), name
        assert torch.equal(r0["params"][name], average) and torch.equal(r1["params"][name], average), name


def test_equal_accuracy_is_within_one_standard_error_of_the_cheapest_such_setting():
    comparisons = load_benchmark("comparisons")
    assert comparisons.standard_error(1.0, 100) > 0.01  # adjusted: 100 of 100 is not certainty
    points = {4: {"accuracy": 0.90, "nfe": 4}, 8: {"accuracy": 0.97, "nfe": 8}, 16: {"accuracy": 0.98, "nfe": 16}}
    assert comparisons.cheapest_of_equal_accuracy(points, 100, "nfe") == 8  # 97% is within one SE of 98% at n = 100
    assert comparisons.cheapest_of_equal_accuracy(points, 40000, "nfe") == 16  # not at n = 40000
    assert comparisons.cheapest_of_equal_accuracy(points, 1000, "nfe", reference=0.995) is None
    assert comparisons.of_equal_accuracy(0.99, 1.0, 100) and not comparisons.of_equal_accuracy(0.95, 1.0, 100)
    diff, se = comparisons.paired_difference([True, True, False, True], [True, False, False, True])
    assert diff == 0.25 and se == pytest.approx(0.25)
