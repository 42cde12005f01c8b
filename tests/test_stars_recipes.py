"""STARS recipes: the presets, per-micro-batch loop draws, the reference code's penalty (one VJP of a probe normalised
over the whole batch), the penalty on a sample of the sequences, the warm-up-stable-decay schedule, the record."""

import functools
import json
import logging
import math

import pytest
import torch
from conftest import StopAt, ragged_lm_rows, recording, tiny_ouro, training_args
from datasets import Dataset

from equilibria.trainers import StarsTrainer, StarsTrainingArguments, sample_num_loops, spectral_radius
from equilibria.trainers.stars import penalty_rows, row_probes
from equilibria.trainers.stars_presets import DEFAULTS, PRESETS, STARS_OPTIONS


def args_for(tmp_path, **values):
    base = dict(max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1)
    return training_args(tmp_path, StarsTrainingArguments, **{**base, **values})


def data(n=16):
    return Dataset.from_dict(ragged_lm_rows(n=n))


# ---- presets --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_sets_every_stars_option_and_explicit_arguments_override_it(tmp_path, name):
    preset = PRESETS[name]["stars"]
    assert set(preset) == set(STARS_OPTIONS)
    args = args_for(tmp_path, stars_preset=name)
    assert {k: getattr(args, k) for k in STARS_OPTIONS} == preset
    assert args.recipe()["preset"] == name
    # an explicit value wins, the package default's value too (4 power iterations where the preset has 1)
    other = 4 if preset["jsrr_power_iters"] != 4 else 2
    changed = args_for(tmp_path, stars_preset=name, jsrr_power_iters=other, max_loops=preset["max_loops"] + 1)
    assert changed.jsrr_power_iters == other and changed.max_loops == preset["max_loops"] + 1
    assert (
        changed.recipe()["overrides"].items()
        >= {"jsrr_power_iters": other, "max_loops": preset["max_loops"] + 1}.items()
    )


def test_without_a_preset_the_options_are_the_listed_defaults(tmp_path):
    args = args_for(tmp_path)
    assert {k: getattr(args, k) for k in STARS_OPTIONS} == DEFAULTS
    assert args.recipe() == {"preset": None, "overrides": {}}
    assert args_for(tmp_path, jsrr_weight=0.2).recipe() == {"preset": None, "overrides": {"jsrr_weight": 0.2}}


def test_from_preset_applies_the_recipes_optimiser_and_names_the_cut(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="equilibria.trainers.stars"):
        args = StarsTrainingArguments.from_preset(
            "reference_addition", output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=300
        )
    assert not caplog.records
    assert (args.learning_rate, args.adam_beta2, args.weight_decay, args.max_grad_norm) == (1e-4, 0.999, 0.01, 0.0)
    assert args.lr_scheduler_type.value == "cosine" and args.warmup_steps == 2000
    assert args.per_device_train_batch_size == 512
    assert args.recipe() == {"preset": "reference_addition", "overrides": {"max_steps": 300}}
    # the preset given as a field only: its optimiser is not applied, and the warning says how to apply it
    with caplog.at_level(logging.WARNING, logger="equilibria.trainers.stars"):
        args = args_for(tmp_path, stars_preset="reference_ouro")
    assert "adam_beta2=0.999 (the preset's 0.95)" in caplog.text and "from_preset" in caplog.text
    assert "lr_scheduler_type='linear'" in caplog.text
    assert "learning_rate" not in caplog.text  # given explicitly (1e-3): an override, not a default kept
    assert args.recipe()["overrides"]["learning_rate"] == 1e-3 and args.recipe()["overrides"]["adam_beta2"] == 0.999


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(stars_preset="paper"), r"stars_preset must be None or one of \(.reference_addition., .reference_ouro."),
        (dict(loop_draws="per_token"), "loop_draws must be one of"),
        (dict(jsrr_probe="row"), "jsrr_probe must be one of"),
        (dict(jsrr_sample_fraction=0.0), r"jsrr_sample_fraction must be in \(0, 1\]"),
        (dict(jsrr_sample_fraction=1.5), r"jsrr_sample_fraction must be in \(0, 1\]"),
        (dict(lr_decay_fraction=0.1), "lr_decay_fraction applies to lr_scheduler_type='warmup_stable_decay'"),
    ],
)
def test_bad_recipe_arguments_fail_at_construction(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        args_for(tmp_path, **overrides)


# ---- loop draws -----------------------------------------------------------------------------------------------------


def test_per_micro_batch_draws_give_each_micro_batch_its_own_keyed_count(tmp_path):
    seen = []
    values = dict(max_steps=5, gradient_accumulation_steps=3, per_device_train_batch_size=2, jsrr_weight=0.0)
    values.update(loop_draws="per_micro_batch", min_loops=1, max_loops=8, loop_log_mean=math.log(3), loop_log_std=0.7)
    args = args_for(tmp_path, **values)
    StarsTrainer(model=recording(tiny_ouro(), seen), args=args, train_dataset=data(32)).train()
    expected = [sample_num_loops(s, 0, math.log(3), 0.7, 1, 8, micro) for s in range(5) for micro in range(3)]
    assert seen == expected
    assert any(len(set(expected[3 * s : 3 * s + 3])) > 1 for s in range(5))  # counts differ within a step


def test_per_micro_batch_draws_survive_a_resume(tmp_path):
    values = dict(
        max_steps=4, gradient_accumulation_steps=2, per_device_train_batch_size=2, save_strategy="steps", save_steps=2,
        loop_draws="per_micro_batch", min_loops=1, max_loops=6, loop_log_std=0.8, jsrr_probe="batch",
        jsrr_power_iters=1,
    )  # fmt: skip
    full, seen_full = tiny_ouro(seed=3), []
    StarsTrainer(
        model=recording(full, seen_full), args=args_for(tmp_path / "full", **values), train_dataset=data()
    ).train()
    first = tiny_ouro(seed=3)
    StarsTrainer(
        model=first, args=args_for(tmp_path / "run", **values), train_dataset=data(), callbacks=[StopAt(2)]
    ).train()
    resumed, seen_resumed = tiny_ouro(seed=7), []
    StarsTrainer(
        model=recording(resumed, seen_resumed), args=args_for(tmp_path / "run", **values), train_dataset=data()
    ).train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    assert seen_resumed == seen_full[4:]
    for (name, a), (_, b) in zip(full.named_parameters(), resumed.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)


# ---- the penalty's forms --------------------------------------------------------------------------------------------


def final_state_and_map(model, batch, num_loops):
    core = model.model
    with torch.no_grad():
        h = core(**batch, num_loops=num_loops, use_cache=False).last_hidden_state
    return h, core.loop_map(**batch)


def test_the_batch_probe_is_one_vjp_of_a_vector_normalised_over_the_whole_batch():
    """The reference code's penalty: ||J^T v||^2 at the detached final state, v Gaussian normalised over the whole
    (batch, seq, width) tensor (zero at padding); the forward's estimate equals it computed by hand."""
    model = tiny_ouro(seed=1).train()
    rows = ragged_lm_rows(n=4)
    batch = {k: torch.tensor(rows[k]) for k in ("input_ids", "attention_mask")}
    start = row_probes(batch, model.config.hidden_size, seed=0, step=3)
    with torch.no_grad():
        out = model(
            **batch, num_loops=3, spectral_radius_iters=1, spectral_radius_start=start, spectral_radius_probe="batch"
        )
    h, f = final_state_and_map(model, batch, 3)
    h = h.detach().requires_grad_(True)
    with torch.enable_grad():
        v = start * batch["attention_mask"][..., None]
        (vjp,) = torch.autograd.grad(f(h), h, v / v.norm())
    vjp = vjp * batch["attention_mask"][..., None]
    torch.testing.assert_close(out.spectral_radius.norm(), vjp.norm(), rtol=1e-5, atol=1e-6)
    per_row = model(**batch, num_loops=3, spectral_radius_iters=1, spectral_radius_start=start).spectral_radius
    assert not torch.allclose(per_row.norm(), out.spectral_radius.norm())  # each row normalised alone differs


def test_the_estimate_at_a_loop_step_inside_the_loop_linearises_at_that_steps_state():
    """``spectral_radius_step=k`` (the paper's "an iteration inside the loop"): the estimate at ``h_k``, as a hand
    power iteration of the loop map at the state after ``k`` steps gives it; beyond ``num_loops`` is refused."""
    model = tiny_ouro(seed=1).eval()
    rows = ragged_lm_rows(n=3)
    batch = {k: torch.tensor(rows[k]) for k in ("input_ids", "attention_mask")}
    start = row_probes(batch, model.config.hidden_size, seed=0, step=1)
    common = dict(num_loops=4, spectral_radius_iters=3, spectral_radius_start=start)
    at_two = model(**batch, **common, spectral_radius_step=2).spectral_radius
    h2, f = final_state_and_map(model, batch, 2)
    expected = spectral_radius(f, h2, num_iters=3, valid=batch["attention_mask"], start=start, create_graph=False)
    torch.testing.assert_close(at_two, expected, rtol=1e-5, atol=1e-6)
    last = model(**batch, **common).spectral_radius
    torch.testing.assert_close(model(**batch, **common, spectral_radius_step=4).spectral_radius, last)
    assert not torch.allclose(at_two, last)
    with pytest.raises(ValueError, match="spectral_radius_step must be at most num_loops=4"):
        model(**batch, **common, spectral_radius_step=5)


def test_random_step_state_draws_the_linearised_step_per_micro_batch(tmp_path):
    steps = []
    model = tiny_ouro()
    original = model.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        steps.append((kwargs["num_loops"], kwargs["jsrr"].step))  # the options StarsTrainer passes
        return original(*args, **kwargs)

    model.forward = forward
    values = dict(max_steps=4, gradient_accumulation_steps=2, per_device_train_batch_size=2, jsrr_state="random_step")
    StarsTrainer(model=model, args=args_for(tmp_path, min_loops=3, max_loops=8, **values), train_dataset=data()).train()
    assert len(steps) == 8 and all(1 <= k <= n for n, k in steps)
    assert any(k < n for n, k in steps)
    assert args_for(tmp_path).jsrr_state == "final"


def test_the_penalty_on_a_sample_of_rows_is_their_share_of_the_full_form(tmp_path):
    """With jsrr_sample_fraction f the penalty is the sum of the sampled rows' squared radii over f * B, each
    sampled row's estimate the same as in the full form (the loop step runs on the sampled rows alone)."""
    model = tiny_ouro(seed=2).train()
    rows = ragged_lm_rows(n=8)
    batch = {k: torch.tensor(v) for k, v in rows.items()}
    start = row_probes(batch, model.config.hidden_size, seed=0, step=0)
    picked = penalty_rows(batch, 0.5, seed=0, step=0)
    assert 0 < picked.numel() < 8
    common = dict(num_loops=2, spectral_radius_iters=2, spectral_radius_start=start)
    full = model(**batch, **common).spectral_radius
    sampled = model(**batch, **common, spectral_radius_rows=picked).spectral_radius
    torch.testing.assert_close(sampled, full[picked], rtol=1e-5, atol=1e-6)
    trainer = StarsTrainer(model=model, args=args_for(tmp_path, jsrr_sample_fraction=0.5), train_dataset=data())
    penalty, _ = trainer.penalty(sampled, 8)
    torch.testing.assert_close(penalty, (full[picked] ** 2).sum() / 4)
    # decided by each sequence's tokens: the same rows whatever the batch they are in
    halves = [penalty_rows({k: v[i : i + 4] for k, v in batch.items()}, 0.5, 0, 0) for i in (0, 4)]
    assert torch.equal(torch.cat([halves[0], halves[1] + 4]), picked)


def test_a_sampled_penalty_accumulates_like_one_big_batch(tmp_path):
    """Per micro-batch the sampled rows' sum is divided by the expected count of the micro-batch, so two
    micro-batches of 4 update like one batch of 8 although they sample different numbers of rows."""
    a, b = tiny_ouro(seed=4), tiny_ouro(seed=4)
    common = dict(
        max_steps=2, jsrr_weight=0.3, jsrr_sample_fraction=0.5, learning_rate=1e-2, lr_scheduler_type="constant",
        optim="sgd", max_grad_norm=0.0, min_loops=2, max_loops=4,
    )  # fmt: skip
    for model, size, accumulation in ((a, 8, 1), (b, 4, 2)):
        args = args_for(
            tmp_path / str(size), per_device_train_batch_size=size, gradient_accumulation_steps=accumulation, **common
        )
        StarsTrainer(model=model, args=args, train_dataset=data()).train()
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-5, msg=name)


def test_the_penalty_trains_and_is_logged_under_the_reference_form(tmp_path):
    args = args_for(tmp_path, stars_preset="reference_addition", jsrr_warmup_steps=0, max_steps=3)
    trainer = StarsTrainer(model=tiny_ouro(), args=args, train_dataset=data())
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert logged and all(h["spectral_radius"] > 0 and h["jsrr_penalty"] > 0 for h in logged)
    for h in logged:
        assert h["jsrr_penalty"] == pytest.approx(h["spectral_radius"] ** 2, rel=1e-3)  # one number per micro-batch


# ---- the schedule and the record ------------------------------------------------------------------------------------


def test_warmup_stable_decay_decays_over_the_given_fraction_of_the_run(tmp_path):
    args = args_for(
        tmp_path, max_steps=100, lr_scheduler_type="warmup_stable_decay", warmup_steps=0.1, lr_decay_fraction=0.2,
        lr_scheduler_kwargs={"min_lr_ratio": 0.001}, learning_rate=1.0,
    )  # fmt: skip
    trainer = StarsTrainer(model=tiny_ouro(), args=args, train_dataset=data())
    trainer.create_optimizer_and_scheduler(num_training_steps=100)
    rates = []
    for _ in range(100):
        rates.append(trainer.lr_scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    assert rates[5] < 1.0 and rates[10] == pytest.approx(1.0) and rates[79] == pytest.approx(1.0)
    assert rates[81] < 1.0 and rates[99] < 0.05
    assert args.lr_scheduler_kwargs == {"min_lr_ratio": 0.001}  # as given: the recorded recipe is the user's
    assert trainer.args.recipe()["overrides"].get("lr_scheduler_kwargs") is None


def test_the_training_record_and_the_card_name_the_preset_and_its_overrides(tmp_path):
    args = StarsTrainingArguments.from_preset(
        "reference_addition", output_dir=str(tmp_path), use_cpu=True, report_to="none", save_strategy="no",
        max_steps=2, per_device_train_batch_size=4, jsrr_warmup_steps=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = StarsTrainer(model=tiny_ouro(), args=args, train_dataset=data())
    trainer.train()
    trainer.save_model()
    trainer.create_model_card()
    history = json.loads((tmp_path / "training_history.json").read_text())
    assert history[-1]["recipe"] == {
        "preset": "reference_addition",
        "overrides": {"max_steps": 2, "per_device_train_batch_size": 4, "jsrr_warmup_steps": 0},
    }
    card = (tmp_path / "README.md").read_text()
    line = next(line for line in card.splitlines() if line.startswith("Trainer preset: "))
    assert line.startswith("Trainer preset: `reference_addition`, with ")
    assert {"`jsrr_warmup_steps=0`", "`max_steps=2`", "`per_device_train_batch_size=4`."} == set(
        line.split(", with ")[1].split(", ")
    )


# ---- the command line -----------------------------------------------------------------------------------------------


def test_the_reference_recipe_on_the_reference_task_from_the_command_line(tmp_path, capsys):
    """`equilibria train --task addition --digits 4 --reverse_answer --stars_preset reference_addition` trains on the
    reference format with the recipe's optimiser (flags given override it); eval reads the format from the folder."""
    from equilibria.cli import main
    from equilibria.tasks import load_training_record

    out = tmp_path / "run"
    argv = [
        "train", "--family", "ouro", "--task", "addition", "--digits", "4", "--reverse_answer", "--stars_preset",
        "reference_addition", "--max_steps", "2", "--per_device_train_batch_size", "8", "--jsrr_warmup_steps", "0",
        "--train_size", "64", "--test_size", "8", "--hidden_size", "16", "--num_loops", "2", "--eval_loops", "1,2",
        "--use_cpu", "--report_to", "none", "--save_strategy", "no", "--output_dir", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    history = json.loads((out / "training_history.json").read_text())[-1]
    assert history["arguments"]["learning_rate"] == 1e-4 and history["arguments"]["weight_decay"] == 0.01  # preset's
    assert history["recipe"] == {
        "preset": "reference_addition",
        "overrides": {"jsrr_warmup_steps": 0, "max_steps": 2, "per_device_train_batch_size": 8},
    }
    record = load_training_record(out)
    assert record["generator"] == {"digits": 4, "reverse_answer": True}
    assert "4-digit addition (STARS reference format" in record["description"]
    capsys.readouterr()
    assert main(["eval", str(out), "--loops", "1", "--num_examples", "5", "--output_dir", str(tmp_path / "eval")]) == 0
    result = json.loads((tmp_path / "eval" / "eval_loop_scaling.json").read_text())
    assert result["data"]["held_out"] and result["data"]["units"] == 5
    from equilibria.evaluation import evaluation_data
    from equilibria.loading import load_saved_model

    rows = evaluation_data(load_saved_model(str(out)), str(out), num_examples=20).rows
    for prompt, answer in zip(rows["prompt"], rows["answer"]):
        a, b = (int(x) for x in prompt[:-1].split("+"))
        assert 1000 <= a <= 9999 and 1000 <= b <= 9999 and answer == " " + str(a + b)[::-1]
