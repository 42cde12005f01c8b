"""Claims about AttractorTrainer: what it logs, its two stabilisers, loss scaling, and multi-process runs."""

import functools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import (
    load_benchmark,
    ragged_lm_rows,
    read_benchmark_json,
    tiny_attractor,
    tiny_ouro,
    training_args,
)
from datasets import Dataset

from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments


def token_data(n: int = 16, length: int = 10) -> Dataset:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (n, length), generator=g)
    return Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})


def attractor_args(tmp_path, **overrides) -> AttractorTrainingArguments:
    values = dict(max_steps=3, per_device_train_batch_size=4, learning_rate=3e-3, logging_steps=1)
    return training_args(tmp_path / "out", AttractorTrainingArguments, **{**values, **overrides})


def small_model(**overrides):
    return tiny_attractor(seed=0, strength=3.0, **{"solver_tol": 1e-4, "num_loops": 20, **overrides})


def logged(trainer):
    return [h for h in trainer.state.log_history if "loss" in h]


def test_training_logs_the_solver_and_lowers_the_loss(tmp_path):
    trainer = AttractorTrainer(
        model=small_model(), args=attractor_args(tmp_path, max_steps=12, learning_rate=1e-2), train_dataset=token_data()
    )
    trainer.train()
    history = logged(trainer)
    assert len(history) == 12
    for h in history:
        assert {"lm_loss", "solver_steps", "rel_residual", "converged_rate", "diverged_rate"} <= set(h)
        assert "jacobian_penalty" not in h and "correction_loss" not in h
        assert h["solver_steps"] >= 1 and h["diverged_rate"] == 0
        assert h["lm_loss"] == pytest.approx(h["loss"], rel=1e-4)  # no regulariser: the loss is the LM loss
    assert history[-1]["lm_loss"] < history[0]["lm_loss"]


@pytest.mark.parametrize("mode", ["one_step", "implicit", "unrolled"])
def test_every_gradient_mode_trains(tmp_path, mode):
    model = small_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = AttractorTrainer(
        model=model, args=attractor_args(tmp_path, gradient_mode=mode), train_dataset=token_data()
    )
    trainer.train()
    assert all(math.isfinite(h["loss"]) for h in logged(trainer))
    weight = "model.attractor.layers.0.mlp.down_proj.weight"
    assert not torch.equal(before[weight], model.model.attractor.layers[0].mlp.down_proj.weight.detach())
    assert not torch.equal(before["model.backbone.0.mlp.up_proj.weight"], model.model.backbone[0].mlp.up_proj.weight)


def test_the_jacobian_penalty_is_logged_and_lowers_the_jacobian_norm(tmp_path):
    model = small_model(attractor_gate_init=3.0)

    ids = torch.tensor(token_data(4)["input_ids"])

    def jacobian_norm():
        model.train()
        torch.manual_seed(1)
        value = model(ids, jacobian_samples=64).jacobian_penalty.item()
        model.eval()
        return value

    before = jacobian_norm()
    args = attractor_args(tmp_path, max_steps=8, jacobian_weight=50.0, jacobian_samples=2, learning_rate=1e-2)
    trainer = AttractorTrainer(model=model, args=args, train_dataset=token_data())
    trainer.train()
    history = logged(trainer)
    assert all(h["jacobian_penalty"] > 0 for h in history)
    assert jacobian_norm() < 0.7 * before


def test_the_correction_loss_is_logged(tmp_path):
    args = attractor_args(tmp_path, correction_weight=0.5, correction_states=2, gradient_mode="one_step")
    trainer = AttractorTrainer(model=small_model(solver="picard"), args=args, train_dataset=token_data())
    trainer.train()
    for h in logged(trainer):
        assert h["correction_loss"] > 0
        assert h["loss"] == pytest.approx(h["lm_loss"] + 0.5 * h["correction_loss"], rel=1e-4)


def test_gradient_accumulation_updates_like_one_big_batch(tmp_path):
    """LM plus correction loss, 2 micro-batches of 4 accumulated == 1 batch of 8, on ragged rows (padded, part of
    each row's labels -100) whose two micro-batches per step hold different numbers of labelled tokens: both losses
    are averaged over the labelled tokens of the whole accumulated batch (the Trainer's ``num_items_in_batch``),
    not per micro-batch. The logged losses are the big batch's too."""
    data = Dataset.from_dict(ragged_lm_rows(n=16))
    finals, logs, counts = [], [], []
    for batch, accumulation in ((8, 1), (4, 2)):
        model = small_model(solver="picard")
        original = model.forward

        @functools.wraps(original)
        def counting_forward(*args, _original=original, **kwargs):
            counts.append(int((kwargs["labels"][:, 1:] != -100).sum()))
            return _original(*args, **kwargs)

        model.forward = counting_forward
        args = attractor_args(  # SGD without clipping: Adam's normalisation and gradient-norm clipping (to 1 by
            # default; these gradients are larger) would hide a wrongly scaled accumulated gradient
            tmp_path / str(batch),
            max_steps=2,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            correction_weight=0.5,
            optim="sgd",
            learning_rate=1e-2,
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
        )
        trainer = AttractorTrainer(model=model, args=args, train_dataset=data)
        trainer.train()
        finals.append({n: p.detach().clone() for n, p in model.named_parameters()})
        logs.append(logged(trainer))
    big, accumulated = counts[:2], counts[2:]
    assert len(accumulated) == 4 and accumulated[0] != accumulated[1] and accumulated[2] != accumulated[3], counts
    assert big == [accumulated[0] + accumulated[1], accumulated[2] + accumulated[3]]  # the same rows per step
    start = small_model().state_dict()
    moved = [n for n, value in finals[0].items() if not torch.equal(value, start[n])]
    assert "model.attractor.layers.0.mlp.down_proj.weight" in moved and "model.embed_tokens.weight" in moved, moved
    for name, value in finals[0].items():
        torch.testing.assert_close(finals[1][name], value, rtol=1e-4, atol=1e-6, msg=name)
    assert len(logs[0]) == len(logs[1]) == 2
    for one, two in zip(*logs):  # rounded to 4 (loss) and 6 digits
        assert two["loss"] == pytest.approx(one["loss"], abs=1.5e-4)
        assert two["lm_loss"] == pytest.approx(one["lm_loss"], abs=1e-5)
        assert two["correction_loss"] == pytest.approx(one["correction_loss"], abs=1e-5)


def test_evaluation_uses_the_evaluation_budget(tmp_path):
    model = small_model()
    args = attractor_args(tmp_path, eval_num_loops=0, per_device_eval_batch_size=4)
    trainer = AttractorTrainer(model=model, args=args, eval_dataset=token_data(4))
    metrics = trainer.evaluate()
    ids = torch.tensor(token_data(4)["input_ids"])
    with torch.no_grad():
        expected = model(input_ids=ids, labels=ids, num_loops=0).loss.item()
    assert metrics["eval_loss"] == pytest.approx(expected, rel=1e-5)


def test_lora_model_trains(tmp_path):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(small_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    trainer = AttractorTrainer(
        model=model, args=attractor_args(tmp_path, jacobian_weight=0.1), train_dataset=token_data()
    )
    trainer.train()
    assert all(math.isfinite(h["loss"]) for h in logged(trainer))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(train_num_loops=0), "train_num_loops"),
        (dict(eval_num_loops=-1), "eval_num_loops"),
        (dict(gradient_mode="bptt"), "gradient_mode"),
        (dict(jacobian_weight=-1.0), "jacobian_weight"),
        (dict(jacobian_samples=0), "jacobian_samples"),
        (dict(correction_states=0), "correction_states"),
    ],
)
def test_bad_arguments_fail_at_construction(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        attractor_args(tmp_path, **overrides)


def test_a_model_without_an_attractor_is_refused(tmp_path):
    with pytest.raises(ValueError, match="needs an Attractor model"):
        AttractorTrainer(model=tiny_ouro(), args=attractor_args(tmp_path), train_dataset=token_data())
    from transformers import TrainingArguments

    with pytest.raises(ValueError, match="AttractorTrainingArguments"):
        AttractorTrainer(
            model=small_model(),
            args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True),
            train_dataset=token_data(),
        )


@pytest.mark.slow
@pytest.mark.two_process("attractor_ddp")
def test_two_process_run_keeps_replicas_identical(two_process_run):
    """torchrun --nproc_per_node 2 (gloo, CPU) with the implicit gradient, the Jacobian penalty and the
    correction loss: both replicas hold identical parameters after the steps, and they moved (the language model
    and the puzzle model)."""
    r0, r1, _ = two_process_run
    assert r0["world"] == r1["world"] == 2
    for key in ("params", "puzzle_params"):
        for name, p0 in r0[key].items():
            assert torch.equal(p0, r1[key][name]), (key, name)
    sys.path.insert(0, str(Path(__file__).parent / "scripts"))
    try:
        import attractor_ddp
    finally:
        sys.path.pop(0)
    start = attractor_ddp.model().state_dict()
    assert any(not torch.equal(p, start[n]) for n, p in r0["params"].items())
    start = attractor_ddp.puzzle_model().state_dict()
    assert any(not torch.equal(p, start[n]) for n, p in r0["puzzle_params"].items())
    history = [h for h in r0["log"] if "loss" in h]
    assert history and all(h["jacobian_penalty"] > 0 and h["correction_loss"] > 0 for h in history)


@pytest.mark.parametrize("task, form", [("addition", "paper"), ("sudoku", "deq")])
def test_internalization_benchmark_quick_mode_runs(tmp_path, task, form):
    argv = ["--quick", "--task", task, "--form", form, "--output-dir", str(tmp_path)]
    result = load_benchmark("bench_attractor_internalization").main(argv)
    saved = read_benchmark_json(tmp_path / "internalization.json", result)
    args = saved["args"]
    assert args["quick"] == "True" and (args["steps"], args["budget"], args["form"]) == ("6", "10", form)
    assert args["output_dir"] == str(tmp_path)
    assert [r["step"] for r in saved["rows"]] == [0, 3, 6]  # step 0, then every --eval-every 3
    for row in saved["rows"]:
        assert set(row) == {"step", "accuracy", "iterations", "converged", "displacement"}
        assert set(row["accuracy"]) == ({"1", "10"} if form == "deq" else {"0", "1", "10"})  # T=0 (not deq), T=1, T*
        assert all(0 <= a <= 1 and 8 * a == round(8 * a) for a in row["accuracy"].values())  # shares of 8 rows
        assert 0 <= row["iterations"] <= 10 and 0 <= row["converged"] <= 1 and row["displacement"] > 0
    if form == "deq":  # the zero start is far from the proposal: its distance from y* is about |y*| + |y0|
        assert all(row["displacement"] > 1 for row in saved["rows"])
    assert "none a training question" in saved["held_out"] and saved["train_seconds"] > 0
    assert (tmp_path / "internalization.png").stat().st_size > 1000


@pytest.mark.slow
def test_internalization_benchmark_runs_the_published_choices(tmp_path):
    bench = load_benchmark("bench_attractor_internalization")
    result = bench.main(["--quick", "--published", "all", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "internalization.json", result)
    published = saved["published"]
    assert published["choices"] == list(bench.PUBLISHED)
    assert published["config"] == {
        "layer_scale_init": 0.25,
        "layer_scale_max": 1.0,
        "gradient_mode": "one_step_neumann",
        "neumann_clip": 1.0,
        "solver_stop": "batch",
    }
    training = published["training"]
    assert training["attractor_optimizer"] == "muon_adamw" and training["learning_rate"] == 8e-3
    assert training["lr_scheduler_kwargs"] == {"num_decay_steps": 3, "decay_type": "linear"}  # the last half of 6
    assert [r["step"] for r in saved["rows"]] == [0, 3, 6]
    for row in saved["rows"]:  # the batch rule: every row as long as the slowest, and the rows' own steps beside
        assert 1 <= row["iterations_per_sample"] <= row["iterations"] <= 10
    assert bench.parse(["--published", "neumann", "--seed", "2"]).output_dir.name == "published-neumann-addition-seed2"
    with pytest.raises(SystemExit):
        bench.parse(["--published", "gates", "--form", "gated"])  # the choices sit on the paper's map
    assert saved["device"] == "cpu" and [row["step"] for row in saved["train_log"]] == list(range(1, 7))


@pytest.mark.slow
def test_internalization_benchmark_takes_a_subset_of_the_choices_and_a_learning_rate(tmp_path, capsys):
    bench = load_benchmark("bench_attractor_internalization")
    argv = ["--quick", "--task", "sudoku", "--published", "optimizer,gates", "--lr", "2e-3"]
    result = bench.main([*argv, "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "internalization.json", result)
    assert saved["published"]["choices"] == ["gates", "optimizer"]  # the canonical order, whatever the order given
    assert saved["published"]["config"] == {"layer_scale_init": 0.25, "layer_scale_max": 1.0}
    assert saved["published"]["training"]["learning_rate"] == 2e-3  # --lr replaces the published 8e-3
    assert all(row["learning_rate"] <= 2e-3 for row in saved["train_log"])
    assert bench.parse(argv).output_dir.name == "published-gates+optimizer-sudoku-seed0-lr0.002"
    assert (
        bench.parse(["--published", "batch_stop,neumann"]).output_dir.name
        == "published-neumann+batch-stop-addition-seed0"
    )
    for bad in ("gates,foo", "gates,gates"):
        with pytest.raises(SystemExit):
            bench.parse(["--published", bad])
        assert "comma list of gates, neumann, batch_stop, optimizer" in capsys.readouterr().err


@pytest.mark.slow
def test_memory_benchmark_quick_mode_shows_constant_memory(tmp_path):
    bench = load_benchmark("bench_attractor_memory")
    # two child processes (each imports torch); the unrolled growth is tested in-process in test_attractor.py
    argv = ["--quick", "--budgets", "2,16", "--modes", "one_step", "--forms", "paper", "--output-dir", str(tmp_path)]
    results = bench.main(argv)
    saved = read_benchmark_json(tmp_path / "memory.json")["runs"]
    assert saved == {f"{form}/{mode}@{budget}": row for (form, mode, budget), row in results.items()}
    assert set(saved) == {"paper/one_step@2", "paper/one_step@16"}
    for row in saved.values():
        assert set(row) == {"saved_bytes", "peak_increase_bytes", "device", "saved_ratio", "peak_ratio"}
        assert row["device"] == "cpu" and row["saved_bytes"] > 0 and row["peak_increase_bytes"] >= 0
    base = saved["paper/one_step@2"]  # ratios are to the first budget of the same map and mode
    assert base["saved_ratio"] == 1.0
    # on CPU the peak increase is ru_maxrss after the step minus the larger of the RSS and ru_maxrss before it, so
    # it reads 0 when the process peaked higher earlier (then the ratios divide by 1): not checked further here
    assert base["peak_ratio"] == (1.0 if base["peak_increase_bytes"] > 0 else 0.0)
    assert saved["paper/one_step@16"]["saved_bytes"] == base["saved_bytes"]  # constant memory: what backward keeps
    assert saved["paper/one_step@16"]["saved_ratio"] == 1.0
    assert (tmp_path / "memory.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="unknown gradient modes"):
        bench.main(["--quick", "--modes", "bptt"])
    with pytest.raises(SystemExit, match="unknown forms"):
        bench.main(["--quick", "--forms", "gate"])


@pytest.mark.slow
def test_the_example_script_trains_saves_and_evaluates(tmp_path):
    script = Path(__file__).resolve().parents[1] / "examples" / "attractor_addition.py"
    cmd = [sys.executable, str(script), "--output_dir", str(tmp_path), "--max_steps", "3", "--use_cpu"]
    cmd += ["--hidden_size", "32", "--train_size", "64", "--test_size", "8", "--num_loops", "8", "--report_to", "none"]
    cmd += ["--save_strategy", "no", "--jacobian_weight", "0.1", "--per_device_train_batch_size", "8"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "budget   0: exact match" in result.stdout and "budget   8: exact match" in result.stdout
    names = {p.name for p in tmp_path.iterdir()}
    assert {"model.safetensors", "config.json", "modeling_attractor.py", "tokenizer.json"} <= names


def test_bf16_weights_train_with_the_penalty(tmp_path):
    """In bfloat16 a 1e-4 tolerance is out of reach: the solver runs its budget, says it did not converge, and
    training still proceeds with finite losses."""
    model = small_model(num_loops=6).to(torch.bfloat16)
    args = attractor_args(tmp_path, max_steps=2, bf16=True, jacobian_weight=0.1)
    trainer = AttractorTrainer(model=model, args=args, train_dataset=token_data())
    trainer.train()
    history = logged(trainer)
    assert history and all(math.isfinite(h["loss"]) and h["jacobian_penalty"] > 0 for h in history)
    assert all(h["diverged_rate"] == 0 for h in history)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["attractor-gated", "looped"])
def test_language_model_benchmark_quick_mode_runs(tmp_path, kind):
    bench = load_benchmark("bench_attractor_lm")
    result = bench.main(["--quick", "--kind", kind, "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / kind / "seed0.json", result)
    llama = bench.main(["--quick", "--kind", "llama", "--output-dir", str(tmp_path)])  # the cached data
    assert saved["parameters"] - llama["parameters"] == (32 if kind == "attractor-gated" else 0)  # the gate: width
    assert saved["training_tokens"] == llama["training_tokens"] == 4 * 4 * 32
    assert saved["data"]["files"]["val"] >= 1 and saved["val_tokens"] > 0 and saved["val_perplexity"] > 1
    assert saved["train_flops"] > llama["train_flops"] > 0  # the loop costs FLOPs at equal parameters
    if kind == "looped":  # the looped baseline always runs its loops (quick: 2)
        assert saved["solver_steps"] and all(steps == 2 for steps in saved["solver_steps"])
    else:  # the solver stops at its tolerance or the budget (quick: 4)
        assert saved["solver_steps"] and all(1 <= steps <= 4 for steps in saved["solver_steps"])
    assert (tmp_path / "cache").is_dir()
    bench.main(["--plot", "--output-dir", str(tmp_path)])
    assert (tmp_path / "lm.png").stat().st_size > 1000
