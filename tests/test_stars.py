"""StarsTrainer: loop sampling, the JSRR penalty, accumulation, resume, PEFT and bad input."""

import functools
import math
import statistics

import pytest
import torch
from conftest import (
    StopAt,
    load_benchmark,
    ragged_lm_rows,
    read_benchmark_json,
    recording,
    tiny_ouro,
    training_args,
)
from datasets import Dataset
from transformers import TrainerCallback

from equilibria.trainers import StarsTrainer, StarsTrainingArguments, sample_num_loops, spectral_radius


def token_data(n=32, length=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 40, (n, length), generator=g)
    return Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})


def stars_args(tmp_path, **overrides):
    values = dict(
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        min_loops=1,
        max_loops=6,
        loop_log_mean=math.log(3),
        loop_log_std=0.6,
        jsrr_weight=0.1,
    )
    return training_args(tmp_path, StarsTrainingArguments, **{**values, **overrides})


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# ---- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(min_loops=0), "min_loops must be an integer >= 1"),
        (dict(min_loops=5, max_loops=3), r"min_loops \(5\) must be <= max_loops \(3\)"),
        (dict(jsrr_weight=1.0), r"jsrr_weight \(lambda\) must be in \[0, 1\)"),
        (dict(jsrr_weight=-0.1), r"jsrr_weight \(lambda\) must be in \[0, 1\)"),
        (dict(jsrr_penalty="cube"), "jsrr_penalty must be one of"),
        (dict(jsrr_target=0.0), "jsrr_target must be > 0"),
        (dict(jsrr_power_iters=0), "jsrr_power_iters must be an integer >= 1"),
        (dict(loop_log_std=-1.0), "loop_log_std must be >= 0"),
        (dict(jsrr_warmup_steps=-1), "jsrr_warmup_steps must be an integer >= 0"),
    ],
)
def test_bad_arguments_fail_at_construction(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        stars_args(tmp_path, **overrides)


def test_a_model_that_does_not_loop_is_refused(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(
        LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    )
    with pytest.raises(ValueError, match="StarsTrainer needs a looped model"):
        StarsTrainer(model=llama, args=stars_args(tmp_path), train_dataset=token_data())
    from transformers import TrainingArguments

    with pytest.raises(ValueError, match="needs StarsTrainingArguments"):
        StarsTrainer(model=tiny_ouro(), args=TrainingArguments(output_dir=str(tmp_path)), train_dataset=token_data())


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_gradient_checkpointing_with_the_penalty_gives_the_same_training(tmp_path, attention):
    """The penalty's double backward runs through the checkpointed layers (non-reentrant checkpoint; SDPA on its
    math kernel): the same weights after the same steps as without checkpointing; the reentrant checkpoint, which
    cannot, is refused."""
    trained = {}
    for checkpointing in (False, True):
        model = tiny_ouro(exit_loss="final", attn_implementation=attention)
        args = stars_args(tmp_path / str(checkpointing), gradient_checkpointing=checkpointing, jsrr_probe="batch")
        StarsTrainer(model=model, args=args, train_dataset=token_data()).train()
        trained[checkpointing] = params(model)
    before = params(tiny_ouro(exit_loss="final"))
    assert any(not torch.equal(before[n], p) for n, p in trained[True].items())
    for name, value in trained[False].items():
        torch.testing.assert_close(trained[True][name], value, rtol=1e-4, atol=1e-5)  # SDPA: math kernel vs another
    with pytest.raises(ValueError, match="use_reentrant"):
        StarsTrainer(
            model=tiny_ouro(),
            args=stars_args(
                tmp_path, gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True}
            ),
            train_dataset=token_data(),
        )


# ---- loop sampling ---------------------------------------------------------------------------------


def test_loop_sampling_is_log_normal_clipped_and_deterministic():
    draws = [sample_num_loops(step, 0, math.log(4), 0.5, 1, 12) for step in range(4000)]
    assert draws == [sample_num_loops(step, 0, math.log(4), 0.5, 1, 12) for step in range(4000)]
    assert min(draws) >= 1 and max(draws) <= 12
    assert statistics.median(draws) == 4
    logs = [math.log(d) for d in draws if 1 < d < 12]
    assert 0.3 < statistics.pstdev(logs) < 0.6
    assert draws != [sample_num_loops(step, 1, math.log(4), 0.5, 1, 12) for step in range(4000)]
    assert {sample_num_loops(s, 0, math.log(5), 0.0, 1, 12) for s in range(50)} == {5}


def test_every_micro_batch_of_a_step_uses_the_steps_sampled_count(tmp_path):
    seen = []
    model = recording(tiny_ouro(), seen)
    args = stars_args(tmp_path, max_steps=6, gradient_accumulation_steps=2, per_device_train_batch_size=2)
    trainer = StarsTrainer(model=model, args=args, train_dataset=token_data())
    trainer.train()
    expected = [sample_num_loops(step, 0, args.loop_log_mean, args.loop_log_std, 1, 6) for step in range(6)]
    assert seen == [loops for loops in expected for _ in range(2)]
    assert len(set(expected)) > 1
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["num_loops"] for h in logged] == expected
    assert all({"spectral_radius", "lm_loss", "jsrr_penalty"} <= set(h) for h in logged)
    for h in logged:  # the logged loss is the combination of the logged parts
        assert h["loss"] == pytest.approx(0.9 * h["lm_loss"] + 0.1 * h["jsrr_penalty"], rel=1e-4)


def test_the_exit_gates_entropy_is_logged_where_the_loss_rewards_it(tmp_path):
    rows = token_data(n=1).select([0, 0, 0, 0])  # one batch, every step: the logged entropy can be recomputed
    model = tiny_ouro(exit_loss="expected")
    args = stars_args(tmp_path, max_steps=4, learning_rate=0.0, jsrr_weight=0.0)
    trainer = StarsTrainer(model=model, args=args, train_dataset=rows)
    trainer.train()
    weight = model.config.exit_entropy_weight
    assert trainer.objective() == f"lm_loss (the gate-weighted cross-entropy - {weight:g} x exit_entropy)"
    ids = torch.tensor(rows["input_ids"])
    for h in (h for h in trainer.state.log_history if "loss" in h):
        with torch.no_grad():
            probs = model(input_ids=ids, num_loops=int(h["num_loops"])).exit_probs[:, :-1].float()
        expected = -(probs * probs.clamp_min(1e-12).log()).sum(-1).mean().item()
        assert h["exit_entropy"] == pytest.approx(expected, rel=1e-4)
        assert 0 < h["exit_entropy"] <= math.log(h["num_loops"]) + 1e-6
    plain = StarsTrainer(model=tiny_ouro(), args=stars_args(tmp_path, max_steps=2), train_dataset=token_data())
    plain.train()  # exit_loss "expected_logits": no entropy term, none logged
    assert not any("exit_entropy" in h for h in plain.state.log_history)


def test_the_progress_bars_eta_leaves_out_the_first_step(tmp_path, monkeypatch):
    """A first step of 100 s (one-off costs), then steps of 1 s on tqdm's clock: the bar's rate is the steady one,
    1 step/s, from the second step on, and its elapsed time is still the run's."""
    import tqdm.std

    from equilibria.trainers.callbacks import SteadyProgressCallback

    clock = [0.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: clock[0])
    seen = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock[0] += 100.0 if state.global_step == 0 else 1.0

        def on_step_end(self, args, state, control, **kwargs):
            bars = [c for c in trainer.callback_handler.callbacks if isinstance(c, SteadyProgressCallback)]
            seen.append(dict(bars[0].training_bar.format_dict))

    args = stars_args(tmp_path, max_steps=8, jsrr_weight=0.0, disable_tqdm=False)
    trainer = StarsTrainer(model=tiny_ouro(), args=args, train_dataset=token_data())
    trainer.add_callback(Clock())  # after the bar: it reads the bar each step has updated
    trainer.train()
    assert [bar["n"] for bar in seen] == list(range(1, 9))
    for bar in seen[2:]:
        assert bar["rate"] == pytest.approx(1.0)  # with the first step left in: 0.04 at the third
        assert bar["elapsed"] == pytest.approx(100 + bar["n"] - 1)


# ---- the spectral radius --------------------------------------------------------------------------


def explicit_power_iteration(jac: torch.Tensor, v: torch.Tensor, num_iters: int) -> torch.Tensor:
    """The estimate ||A v_{K-1}|| with v_{k+1} = A v_k / ||A v_k||, from a formed matrix ``A``."""
    for _ in range(num_iters):
        v = v / v.norm()
        v = jac @ v
    return v.norm()


@pytest.mark.parametrize("estimator", ["vjp", "jvp"])
def test_estimate_equals_power_iteration_on_the_formed_jacobian_of_an_ouro_loop_step(estimator):
    model = tiny_ouro()
    ids = torch.randint(3, 40, (1, 5), generator=torch.Generator().manual_seed(0))
    f = model.model.loop_map(ids)
    with torch.no_grad():
        h = model.model(ids, num_loops=3).last_hidden_state
    jac = torch.autograd.functional.jacobian(lambda x: f(x.view_as(h)).flatten(), h.flatten())
    operator = jac.T if estimator == "vjp" else jac  # vjp iterates J^T, jvp iterates J
    start = torch.randn(h.shape, generator=torch.Generator().manual_seed(1))
    for k in (1, 2, 4):
        estimate = spectral_radius(f, h, num_iters=k, create_graph=False, estimator=estimator, start=start)
        expected = explicit_power_iteration(operator, start.flatten(), k)
        torch.testing.assert_close(estimate, expected.reshape(1), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("estimator", ["vjp", "jvp"])
def test_estimate_and_its_gradient_match_the_closed_form_on_a_linear_map(estimator):
    torch.manual_seed(0)
    w = torch.randn(5, 5, requires_grad=True)
    start = torch.randn(3, 5)
    estimate = spectral_radius(lambda x: x @ w, torch.zeros(3, 5), num_iters=2, estimator=estimator, start=start)
    estimate.sum().backward()
    got = w.grad.clone()
    w.grad = None
    # a row x maps to x W: J = W^T acting on column vectors, so J v is v W (jvp) and J^T v is v W^T (vjp)
    a = w if estimator == "jvp" else w.T
    v = start / start.norm(dim=1, keepdim=True)
    v = v @ a.detach()
    v = v / v.norm(dim=1, keepdim=True)
    expected = (v @ a).norm(dim=1)
    expected.sum().backward()
    torch.testing.assert_close(estimate, expected)
    torch.testing.assert_close(got, w.grad)


@pytest.mark.parametrize("estimator", ["vjp", "jvp"])
def test_few_iterations_overestimate_a_non_normal_jacobian(estimator):
    jac = torch.tensor([[0.5, 10.0], [0.0, 0.5]])  # radius 0.5, largest singular value 10.02
    h = torch.zeros(500, 2)
    means = []
    for k in (1, 2, 4, 8):
        generator = torch.Generator().manual_seed(0)
        estimate = spectral_radius(
            lambda x: x @ jac.T, h, num_iters=k, create_graph=False, generator=generator, estimator=estimator
        )
        means.append(estimate.mean().item())
    assert means[0] > 5.0  # one iteration: ten times the radius on average
    assert means[1] > 0.9 and means[2] > 0.6  # the iterations used in training (1-4) all overestimate
    assert means == sorted(means, reverse=True) and 0.5 < means[3] < 0.6


def test_few_iterations_underestimate_a_symmetric_jacobian_and_rise_to_its_radius():
    torch.manual_seed(0)
    a = torch.randn(6, 6)
    sym = (a + a.T) / 4
    exact = torch.linalg.eigvalsh(sym).abs().max()
    h = torch.randn(3, 6)
    estimates = [
        spectral_radius(
            lambda x: x @ sym, h, num_iters=k, create_graph=False, generator=torch.Generator().manual_seed(0)
        )
        for k in (1, 2, 4, 8, 200)
    ]
    for fewer, more in zip(estimates, estimates[1:]):
        assert torch.all(fewer <= more + 1e-6)
    assert torch.all(estimates[0] < exact)
    torch.testing.assert_close(estimates[-1], exact.expand(3), rtol=1e-4, atol=1e-5)


def test_bad_estimator_arguments_are_refused():
    f, h = (lambda x: x * 0.5), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="estimator must be one of"):
        spectral_radius(f, h, estimator="fd")
    with pytest.raises(ValueError, match="num_iters must be an integer >= 1"):
        spectral_radius(f, h, num_iters=0)
    with pytest.raises(ValueError, match="start must have the state's shape"):
        spectral_radius(f, h, start=torch.zeros(3, 2))


def test_padding_positions_are_left_out_of_the_estimate():
    torch.manual_seed(0)
    a = torch.randn(4, 4)
    w = (a + a.T) / 4
    exact = torch.linalg.eigvalsh(w).abs().max()

    def f(x):  # positions independent, except that padding positions are garbage
        return x @ w + 100.0 * (x[:, 2:3] * 0 + x[:, 2:3].pow(2))

    h = torch.randn(2, 3, 4)
    valid = torch.tensor([[1, 1, 0], [1, 1, 0]])
    masked = spectral_radius(
        f, h, num_iters=100, valid=valid, create_graph=False, generator=torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(masked, exact.expand(2), rtol=1e-4, atol=1e-5)
    unmasked = spectral_radius(f, h, num_iters=100, create_graph=False, generator=torch.Generator().manual_seed(0))
    assert torch.all(unmasked > 10 * exact)


def test_jsrr_gradient_is_nonzero_and_lowers_the_radius(tmp_path):
    model = tiny_ouro(seed=2)
    data = token_data()
    ids = torch.tensor(data["input_ids"][:4])

    def radius():
        with torch.no_grad():
            h = model.model(ids, num_loops=4).last_hidden_state
        return (
            spectral_radius(
                model.model.loop_map(ids),
                h,
                num_iters=30,
                create_graph=False,
                generator=torch.Generator().manual_seed(0),
            )
            .mean()
            .item()
        )

    before = radius()
    # the penalty alone has a non-zero gradient on the loop's parameters
    h = model.model(ids, num_loops=4).last_hidden_state
    rho = spectral_radius(model.model.loop_map(ids), h, num_iters=3)
    (rho**2).mean().backward()
    grad = model.model.layers[0].mlp.down_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    model.zero_grad()
    args = stars_args(tmp_path, max_steps=15, jsrr_weight=0.9, learning_rate=3e-3, min_loops=4, max_loops=4)
    StarsTrainer(model=model, args=args, train_dataset=data).train()
    after = radius()
    assert after < 0.8 * before, (before, after)


# ---- training mechanics -----------------------------------------------------------------------------


@pytest.mark.parametrize("jsrr_weight,estimator", [(0.0, "vjp"), (0.3, "vjp"), (0.3, "jvp")])
def test_gradient_accumulation_updates_like_one_big_batch(tmp_path, jsrr_weight, estimator):
    """2 micro-batches of 4 update like 1 batch of 8, with the penalty on too. The rows are ragged (padded, and
    part of each row's labels -100), so the two micro-batches of a step hold different numbers of labelled tokens:
    the LM loss must be averaged over the labelled tokens of the whole accumulated batch (the Trainer's
    ``num_items_in_batch``), as in the big batch, not per micro-batch; and each sequence's power-iteration probe
    comes from its own tokens, not from its place in the batch. The logged losses are the big batch's too."""
    a, b = tiny_ouro(seed=4), tiny_ouro(seed=4)
    data = Dataset.from_dict(ragged_lm_rows(n=16))
    counts = []  # the labelled (predicted) tokens of each training micro-batch of the accumulating run
    original = b.forward

    @functools.wraps(original)
    def counting_forward(*args, **kwargs):
        counts.append(int((kwargs["labels"][:, 1:] != -100).sum()))
        return original(*args, **kwargs)

    b.forward = counting_forward
    common = dict(  # SGD: Adam's first step is about sign(grad), which turns float noise in near-zero entries
        # into lr-sized differences, and its normalisation would hide a wrongly scaled accumulated gradient; so
        # would clipping the gradient norm (to 1 by default; these gradients are larger), hence max_grad_norm=0
        max_steps=2,
        jsrr_weight=jsrr_weight,
        jsrr_estimator=estimator,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        optim="sgd",
        max_grad_norm=0.0,
    )
    logs = []
    for model, batch, accumulation in ((a, 8, 1), (b, 4, 2)):
        args = stars_args(
            tmp_path / str(batch), per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation, **common
        )
        trainer = StarsTrainer(model=model, args=args, train_dataset=data)
        trainer.train()
        logs.append([h for h in trainer.state.log_history if "loss" in h])
    assert len(counts) == 4 and counts[0] != counts[1] and counts[2] != counts[3], counts
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-5, msg=name)  # float summation order: ~1e-6
    assert len(logs[0]) == len(logs[1]) == 2
    for big, accumulated in zip(*logs):  # the per-token mean over the whole batch (rounded to 4 and 6 digits)
        assert accumulated["loss"] == pytest.approx(big["loss"], abs=1.5e-4)
        assert accumulated["lm_loss"] == pytest.approx(big["lm_loss"], abs=3e-6)


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    data = token_data(n=48)
    common = dict(max_steps=6, per_device_train_batch_size=4, save_strategy="steps", save_steps=3, jsrr_weight=0.2)
    full = tiny_ouro(seed=5)
    StarsTrainer(model=full, args=stars_args(tmp_path / "full", **common), train_dataset=data).train()

    interrupted = tiny_ouro(seed=5)
    StarsTrainer(
        model=interrupted, args=stars_args(tmp_path / "run", **common), train_dataset=data, callbacks=[StopAt(3)]
    ).train()
    assert (tmp_path / "run" / "checkpoint-3").is_dir() and not (tmp_path / "run" / "checkpoint-6").exists()
    resumed = tiny_ouro(seed=99)  # different weights: everything must come from the checkpoint
    StarsTrainer(model=resumed, args=stars_args(tmp_path / "run", **common), train_dataset=data).train(
        resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-3")
    )
    moved = [n for n, p in full.named_parameters() if not torch.equal(p, tiny_ouro(seed=5).state_dict()[n])]
    assert moved
    for (name, pa), (_, pb) in zip(full.named_parameters(), resumed.named_parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-5, msg=name)  # float summation order: ~1e-6


def test_lora_model_trains_with_stars(tmp_path):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_ouro(), LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    before = params(model)
    trainer = StarsTrainer(model=model, args=stars_args(tmp_path, max_steps=3), train_dataset=token_data())
    trainer.train()
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and all("lora_" in n for n in changed)
    assert all(h["spectral_radius"] > 0 for h in trainer.state.log_history if "loss" in h)


def test_bf16_autocast_step_runs(tmp_path):
    model = tiny_ouro()
    trainer = StarsTrainer(model=model, args=stars_args(tmp_path, max_steps=2, bf16=True), train_dataset=token_data())
    trainer.train()
    assert all(math.isfinite(h["loss"]) for h in trainer.state.log_history if "loss" in h)


def test_evaluation_uses_the_evaluation_loop_count(tmp_path):
    model = tiny_ouro()
    data = token_data(n=8)
    trainer = StarsTrainer(
        model=model,
        args=stars_args(tmp_path, eval_num_loops=5, per_device_eval_batch_size=8),
        train_dataset=data,
        eval_dataset=data,
    )
    metrics = trainer.evaluate()
    ids = torch.tensor(data["input_ids"])
    with torch.no_grad():
        expected = model(input_ids=ids, labels=ids, num_loops=5).loss.item()
    assert metrics["eval_loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
@pytest.mark.two_process("stars_ddp")
def test_two_process_run_keeps_replicas_identical(two_process_run, tmp_path):
    """torchrun --nproc_per_node 2 (gloo, CPU): the JSRR term's gradients are all-reduced with the LM loss's,
    so both replicas hold identical parameters after the steps, and they differ from the start."""
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "scripts" / "stars_ddp.py"
    r0, r1, _ = two_process_run
    assert r0["world"] == r1["world"] == 2
    start = tiny_ouro(seed=0).state_dict()
    for run in ("jsrr", "lm_only"):
        for name, p0 in r0[run]["params"].items():
            assert torch.equal(p0, r1[run]["params"][name]), (run, name)
        assert any(not torch.equal(p, start[n]) for n, p in r0[run]["params"].items())
    logged = [h for h in r0["jsrr"]["log"] if "loss" in h]
    assert logged and all(h["spectral_radius"] > 0 for h in logged)
    # per-micro-batch draws: every rank runs the same count in each micro-batch, and the two micro-batches of a step
    # draw their own (the reference code's per-forward draws, without its ranks drawing apart)
    drawn = r0["per_micro_batch"]["loops"]
    assert drawn == r1["per_micro_batch"]["loops"] and len(drawn) == 8
    assert any(drawn[2 * i] != drawn[2 * i + 1] for i in range(4)), drawn
    for name, p0 in r0["per_micro_batch"]["params"].items():
        assert torch.equal(p0, r1["per_micro_batch"]["params"][name]), name

    # the loss is scaled right across processes, the penalty's too: 2 processes x batch 4 update like 1 process
    # accumulating 2 x 4 (each sequence's probe comes from its tokens, not from its process). The rows are ragged
    # and the processes' halves of a batch hold different numbers of labelled tokens, so the LM loss must be averaged
    # over the whole batch's tokens (gathered across processes), not per process; SGD without clipping, so that a
    # wrongly scaled gradient shows
    for run in ("jsrr", "lm_only"):
        counts = r0[run]["counts"], r1[run]["counts"]
        assert len(counts[0]) == 4 and all(c0 != c1 for c0, c1 in zip(*counts)), counts
    sys.path.insert(0, str(script.parent))
    try:
        import stars_ddp
    finally:
        sys.path.pop(0)
    for run, weight in (("jsrr", 0.3), ("lm_only", 0.0)):
        single = tiny_ouro(seed=0)
        args = stars_ddp.arguments(
            tmp_path / f"single_{run}", jsrr_weight=weight, gradient_accumulation_steps=2, ddp_backend=None
        )
        StarsTrainer(model=single, args=args, train_dataset=stars_ddp.data()).train()
        for name, p in single.named_parameters():
            torch.testing.assert_close(r0[run]["params"][name], p.detach(), rtol=1e-5, atol=1e-5, msg=(run, name))


def test_bf16_weights_train_with_the_penalty(tmp_path):
    model = tiny_ouro().to(torch.bfloat16)
    trainer = StarsTrainer(model=model, args=stars_args(tmp_path, max_steps=2, bf16=True), train_dataset=token_data())
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert logged and all(math.isfinite(h["loss"]) and h["spectral_radius"] > 0 for h in logged)


def test_unsupported_loss_options_are_refused(tmp_path):
    with pytest.raises(ValueError, match="label_smoothing_factor"):
        StarsTrainer(
            model=tiny_ouro(), args=stars_args(tmp_path, label_smoothing_factor=0.1), train_dataset=token_data()
        )


class ParametersWithoutGradient(TrainerCallback):
    """Before each optimizer step, the names of the trainable parameters that got no gradient in that step (the
    Trainer sets the gradients to None after each step)."""

    def __init__(self):
        self.per_step = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.per_step.append([n for n, p in model.named_parameters() if p.requires_grad and p.grad is None])


@pytest.mark.parametrize("exit_loss", ["final", "expected_logits", "expected"])
@pytest.mark.parametrize("jsrr_weight", [0.0, 0.3])
def test_every_step_gives_every_trainable_parameter_a_gradient(tmp_path, exit_loss, jsrr_weight):
    """So plain DDP (``find_unused_parameters=False``: what the two-process test sets, and what transformers picks
    under gradient checkpointing) works at every sampled loop count, 1 included, and StarsTrainingArguments leaves
    ``ddp_find_unused_parameters`` unset (transformers' default) instead of forcing the slower search."""
    sampler = dict(min_loops=1, max_loops=3, loop_log_mean=math.log(2), loop_log_std=0.4)
    args = stars_args(tmp_path, max_steps=3, jsrr_weight=jsrr_weight, **sampler)
    assert args.ddp_find_unused_parameters is None
    callback = ParametersWithoutGradient()
    trainer = StarsTrainer(
        model=tiny_ouro(exit_loss=exit_loss), args=args, train_dataset=token_data(), callbacks=[callback]
    )
    trainer.train()
    assert [h["num_loops"] for h in trainer.state.log_history if "loss" in h] == [3, 1, 2]  # one loop included
    assert callback.per_step == [[], [], []]


def test_the_penalty_starts_after_its_warmup(tmp_path):
    trainer = StarsTrainer(
        model=tiny_ouro(), args=stars_args(tmp_path, max_steps=4, jsrr_warmup_steps=2), train_dataset=token_data()
    )
    trainer.train()
    penalties = [h["jsrr_penalty"] for h in trainer.state.log_history if "loss" in h]
    assert penalties[:2] == [0.0, 0.0] and all(p > 0 for p in penalties[2:])


@pytest.mark.slow
def test_estimator_benchmark_quick_mode_writes_its_table(tmp_path):
    bench_jsrr_estimator = load_benchmark("bench_jsrr_estimator")
    results = bench_jsrr_estimator.main(["--quick", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "jsrr_estimator.json", results)
    assert saved["args"]["quick"] == "True" and saved["torch"] == torch.__version__
    assert (saved["args"]["width"], saved["args"]["inputs"], saved["args"]["starts"]) == ("16", "1", "2")
    contenders = {f"{e}@{k}" for e in ("vjp", "jvp") for k in (1, 2, 4, 8)}
    assert set(saved["maps"]) == {"initialisation", "output projections x4"}
    for result in saved["maps"].values():
        assert len(result["exact_radius"]) == 1 and all(r > 0 for r in result["exact_radius"])
        assert set(result["errors"]) == set(result["cost"]) == contenders
        for row in result["errors"].values():
            # an estimate is a norm (>= 0), so its relative error is >= -1; the mean of |x| bounds |mean x|
            assert -1 <= row["mean_rel_error"] and abs(row["mean_rel_error"]) <= row["mean_abs_rel_error"] + 1e-12
            assert row["overestimates"] in (0.0, 0.5, 1.0)  # a share of 1 input x 2 start vectors
        for estimator in ("vjp", "jvp"):  # more power iterations come closer to the exact radius
            errors = result["errors"]
            assert errors[f"{estimator}@8"]["mean_abs_rel_error"] < errors[f"{estimator}@1"]["mean_abs_rel_error"]
        assert result["cost"]["vjp@1"] == 1.0 and all(c > 0 for c in result["cost"].values())


@pytest.mark.slow
def test_cost_benchmark_quick_mode_writes_its_table(tmp_path):
    bench_stars_cost = load_benchmark("bench_stars_cost")
    results = bench_stars_cost.main(["--quick", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "stars_cost.json", results)
    assert saved["args"]["quick"] == "True" and (saved["args"]["width"], saved["args"]["loops"]) == ("32", "2")
    assert set(saved["by_loops"]) == {"2"}
    row = saved["by_loops"]["2"]
    ratios = {f"{e}@{k}" for e in ("vjp", "jvp") for k in (1, 2, 4)}  # each STARS step's time / the plain step's
    ratios |= {name for name, _, _ in bench_stars_cost.CHEAPER}
    assert set(row) == ratios | {"plain_seconds", "breakdown", "sampling_error"}
    error = row["sampling_error"]
    assert error["fraction"] == 0.25 and error["draws"] == 3
    assert error["mean_relative_error"] >= 0 and -1 <= error["gradient_cosine"] <= 1
    assert row["plain_seconds"] > 0 and all(row[name] > 0 for name in ratios)
    parts = row["breakdown"]
    assert set(parts) == {"lm_forward_backward", "penalty_total", "penalty_forward_and_product", "penalty_backward"}
    assert all(value > 0 for value in parts.values())
    assert parts["penalty_total"] == pytest.approx(parts["penalty_forward_and_product"] + parts["penalty_backward"])


def test_stars_with_a_loss_that_trains_the_gate_warns_that_deep_steps_go_untrained(tmp_path, caplog):
    StarsTrainer(model=tiny_ouro(), args=stars_args(tmp_path), train_dataset=token_data())
    assert "exit_loss is 'expected_logits'" in caplog.text and "exit_loss='final'" in caplog.text
    caplog.clear()
    StarsTrainer(model=tiny_ouro(exit_loss="final"), args=stars_args(tmp_path), train_dataset=token_data())
    fixed = stars_args(tmp_path, min_loops=4, max_loops=4)  # no loop sampling: nothing to warn about
    StarsTrainer(model=tiny_ouro(), args=fixed, train_dataset=token_data())
    assert "StarsTrainer: the model's exit_loss" not in caplog.text


@pytest.mark.slow
@pytest.mark.two_process("fsdp2_jsrr")
def test_the_penalty_computed_in_forward_trains_under_fsdp2(two_process_run):
    """FSDP2 (`fully_shard`) reshards the parameters after forward, so a penalty computed outside the wrapped
    forward cannot see them; the estimate the model's forward returns can. One STARS-objective step sharded over two
    gloo processes (each on half the batch) equals the same step unsharded on the whole batch: the model as one unit
    with the vjp estimator, per decoder layer with jvp; per layer with vjp is refused with the way out."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("fsdp2_jsrr", Path(__file__).parent / "scripts" / "fsdp2_jsrr.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    r0, r1, _ = two_process_run
    assert r0["world"] == r1["world"] == 2
    start = dict(script.build_model().named_parameters())
    for setup, estimator in (("one unit, vjp", "vjp"), ("per layer, jvp", "jvp")):
        assert r0[setup]["sharded"] == "DTensor", r0[setup]
        reference = script.reference_step(estimator)
        for name, value in reference.items():
            assert torch.allclose(r0[setup]["params"][name], value, atol=2e-6), (setup, name)
            assert torch.equal(r0[setup]["params"][name], r1[setup]["params"][name]), (setup, name)
        moved = [n for n in reference if not torch.equal(reference[n], start[n].detach())]
        assert "model.layers.0.self_attn.q_proj.weight" in moved  # the step changed the loop's weights
    assert "use the 'jvp' estimator" in r0["per layer, vjp"]["error"]
