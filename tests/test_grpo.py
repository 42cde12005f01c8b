"""LoopGRPOTrainer: GRPO on TRL whose rollouts, log-probs and loss share the step's loop count, and RLTT."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from conftest import QUIET, char_tokenizer, load_benchmark, tiny_native, tiny_ouro, tiny_trained_ouro
from datasets import Dataset

from equilibria.trainers import LoopGRPOConfig, LoopGRPOTrainer
from equilibria.trainers.grpo import exit_weights

PROMPTS = Dataset.from_dict(
    {
        "prompt": [f"{a}+{b}=" for a in range(4) for b in range(4)],
        "answer": [str(a + b) for a in range(4) for b in range(4)],
    }
)


def first_digit_right(completions, answer, **kwargs):
    return [float(c.strip()[:1] == a[:1]) for c, a in zip(completions, answer)]


def digit_share(completions, **kwargs):
    """A reward that differs within most groups, even for an untrained model: the share of digits written."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def grpo_args(tmp_path, **overrides) -> LoopGRPOConfig:
    values = dict(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=3,
        max_steps=2,
        learning_rate=1e-3,
        beta=0.0,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    return LoopGRPOConfig(**{**values, **overrides})


def trainer_for(model, tmp_path, ref_model=None, reward=first_digit_right, **overrides) -> LoopGRPOTrainer:
    return LoopGRPOTrainer(
        model=model, reward_funcs=reward, args=grpo_args(tmp_path, **overrides), train_dataset=PROMPTS,
        processing_class=char_tokenizer(), ref_model=ref_model,
    )  # fmt: skip


def count_loop_steps(model, step_of) -> list[list[int]]:
    """``[[step, decoder-layer calls], ...]``, one entry per call of ``model`` (its forward pre-hook opens it)."""
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append([step_of(), 0]))
    for layer in model.model.layers:
        layer.register_forward_hook(lambda module, args, output: calls[-1].__setitem__(1, calls[-1][1] + 1))
    return calls


def test_every_forward_of_a_step_runs_that_steps_sampled_count(tmp_path):
    """Rollouts (every decoding forward), the reference model's log-probs and the loss's forward of a step all run
    the step's sampled count: counted as decoder-layer calls per forward, not read from an argument."""
    reference = tiny_ouro(seed=0)
    reference.save_pretrained(tmp_path / "start")
    args = dict(min_loops=1, max_loops=6, loop_log_std=0.8, max_steps=5, beta=0.04)
    trainer = trainer_for(tiny_ouro(seed=0), tmp_path, ref_model=tmp_path / "start", **args)
    layers = trainer.model.config.num_hidden_layers
    policy = count_loop_steps(trainer.model, lambda: trainer.state.global_step)
    ref = count_loop_steps(trainer.ref_model, lambda: trainer.state.global_step)
    trainer.train()
    expected = {step: trainer.args.step_loops(step) for step in range(5)}
    assert len(set(expected.values())) > 1, expected  # the count changes from step to step
    for calls in (policy, ref):
        assert calls and {step for step, _ in calls} == set(expected)
        assert all(n == expected[step] * layers for step, n in calls), (expected, calls)
    assert len(policy) > 5 * 3 and len(ref) == 5  # decoding forwards and the loss's; one reference forward a step
    logged = [h["num_loops"] for h in trainer.state.log_history if "loss" in h]
    assert logged == [float(expected[step]) for step in range(5)]
    assert all(h["kl"] >= 0 for h in trainer.state.log_history if "loss" in h)


def test_per_prompt_draws_run_each_group_at_its_prompts_count(tmp_path):
    """``loop_draws="per_prompt"``: every forward that reads whole sequences (the rollouts' first step, the
    reference's and the loss's log-probs) runs each row at the count drawn for its prompt and step, and a step mixes
    counts."""
    from equilibria.trainers.grpo import prompt_key

    reference = tiny_ouro(seed=0)
    reference.save_pretrained(tmp_path / "start")
    args = dict(min_loops=1, max_loops=6, loop_log_std=0.8, max_steps=4, beta=0.04, loop_draws="per_prompt")
    trainer = trainer_for(tiny_ouro(seed=0), tmp_path, ref_model=tmp_path / "start", **args)
    tokenizer, layers, seen = char_tokenizer(), trainer.model.config.num_hidden_layers, []
    for model in (trainer.model, trainer.ref_model):
        calls = count_loop_steps(model, lambda: trainer.state.global_step)
        model.register_forward_pre_hook(
            lambda module, args, kwargs, calls=calls: seen.append((calls, len(calls), kwargs["input_ids"])),
            with_kwargs=True,
        )
    trainer.train()
    mixed = set()
    for calls, index, ids in seen:
        step, layer_calls = calls[index - 1] if index else calls[0]
        if ids.size(1) < 4:
            continue  # a decoding step after the first: it reads no prompt
        prompts = [tokenizer.decode(row[row != 0][:4]) for row in ids]
        wanted = {trainer.args.step_loops(step, prompt_key(p)) for p in prompts}
        assert wanted == {layer_calls // layers}, (step, prompts, wanted, layer_calls)
        mixed.add((step, layer_calls // layers))
    assert len({count for _, count in mixed}) > 1 and len(mixed) > len({step for step, _ in mixed})


@pytest.mark.parametrize("family", ["ouro", "dory", "hrm_text", "inkling2_loop_text"])
def test_log_probs_are_those_of_the_models_own_forward(tmp_path, family):
    model = tiny_ouro(seed=0) if family == "ouro" else tiny_native(family, num_loops=2)
    trainer = trainer_for(model, tmp_path, min_loops=3, max_loops=3, temperature=0.7)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = torch.ones_like(ids)
    with torch.no_grad(), trainer.rows_at(torch.full((2,), 3)):
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 3, compute_entropy=True)
        logits = model(input_ids=ids, attention_mask=mask, num_loops=3).logits
        other = model(input_ids=ids, attention_mask=mask, num_loops=1).logits
    expected = (logits[:, 2:5] / 0.7).log_softmax(-1).gather(-1, ids[:, 3:, None]).squeeze(-1)
    torch.testing.assert_close(logps, expected, rtol=1e-5, atol=1e-6)
    assert entropies.shape == (2, 3) and (entropies > 0).all()
    assert not torch.allclose(logits, other)  # the count matters: 3 loops are not 1


def test_rows_outside_a_batch_of_known_counts_are_refused(tmp_path):
    """The loop counts travel with the batch and reach TRL's calls only inside a window (``rows_at``): a call
    outside one, or with another number of rows (what a TRL release calling its methods in another order would do),
    stops with a clear error instead of running at some other count."""
    model = tiny_ouro(seed=0)
    trainer = trainer_for(model, tmp_path, min_loops=2, max_loops=2)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="TRL computed 2 rows while no batch has loop counts"):
            trainer._get_per_token_logps_and_entropies(model, ids, torch.ones_like(ids), 3)
        with trainer.rows_at(torch.full((3,), 2)), pytest.raises(RuntimeError, match="a batch of 3 rows"):
            trainer._get_per_token_logps_and_entropies(model, ids, torch.ones_like(ids), 3)
    assert trainer._batch_counts is None  # the window closed


def test_the_router_loss_passes_through_when_trl_asks_for_it(tmp_path):
    """TRL asks Mixture-of-Experts models for their load-balancing loss (``compute_aux_loss``): every forward is run
    with ``output_router_logits=True`` and the mean of their ``aux_loss`` returned, as TRL's own method does."""
    model = tiny_ouro(seed=0)
    trainer = trainer_for(model, tmp_path, min_loops=2, max_loops=2)
    asked = []

    class WithRouter(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, output_router_logits=False, **kwargs):
            asked.append(output_router_logits)
            out = self.inner(**kwargs)
            out.aux_loss = torch.tensor(0.25 * len(asked))
            return out

    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    with torch.no_grad(), trainer.rows_at(torch.full((2,), 2)):
        logps, _, aux = trainer._get_per_token_logps_and_entropies(
            WithRouter(model), ids, torch.ones_like(ids), 3, batch_size=1, compute_aux_loss=True
        )
        plain = trainer._get_per_token_logps_and_entropies(model, ids, torch.ones_like(ids), 3)
    assert asked == [True, True] and aux.item() == pytest.approx(0.375)  # the mean of the two forwards' 0.25, 0.5
    torch.testing.assert_close(logps, plain[0])
    assert plain[2] is None


def test_rltt_weights_are_uniform_progressive_or_the_exit_gates():
    assert torch.allclose(exit_weights("uniform", 4, None), torch.full((4,), 0.25))
    progressive = exit_weights("progressive", 4, None, alpha=2.0)
    assert torch.allclose(progressive, torch.tensor([1.0, 4.0, 9.0, 16.0]) / 30)
    probs = torch.rand(2, 3, 4, requires_grad=True)
    assert exit_weights("exit_pdf", 4, probs) is probs  # kept in the graph
    with pytest.raises(ValueError, match="exit gate"):
        exit_weights("exit_pdf", 4, None)


def rltt_batch(trainer, advantages) -> dict:
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    return {
        "prompt_ids": ids[:, :3],
        "prompt_mask": torch.ones(2, 3, dtype=torch.long),
        "completion_ids": ids[:, 3:],
        "completion_mask": torch.ones(2, 3, dtype=torch.long),
        "advantages": torch.tensor(advantages),
        "num_loops": torch.tensor([3, 3]),
    }


def test_rltt_reads_every_exit_and_the_exit_gate_learns_from_it(tmp_path):
    """The last exit's log-probs are the model's own (the KL's final loop); with ``exit_pdf`` the exit gate gets a
    gradient from the objective, with uniform weights it does not."""
    model = tiny_ouro(seed=0)
    trainer = trainer_for(model, tmp_path, objective="rltt", rltt_weights="uniform", min_loops=3, max_loops=3)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    with torch.no_grad(), trainer.rows_at(torch.full((ids.size(0),), 3)):
        weighted, last = trainer.exit_logps(model, ids, torch.ones_like(ids), 3)
        final, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, torch.ones_like(ids), 3)
        out = model(ids, output_hidden_states=True)
    per_exit = torch.stack([(model.lm_head(h)[:, 2:5]).log_softmax(-1) for h in out.hidden_states[1:]], -1)
    per_exit = per_exit.gather(2, ids[:, 3:, None, None].expand(-1, -1, 1, 3)).squeeze(2)
    torch.testing.assert_close(last, final, rtol=1e-5, atol=1e-6)  # the last exit is the model's own output
    torch.testing.assert_close(weighted, per_exit.mean(-1), rtol=1e-5, atol=1e-6)  # uniform weights: the mean
    gate = model.model.early_exit_gate.weight
    for kind, reaches_gate in (("uniform", False), ("exit_pdf", True)):
        trainer.args.rltt_weights = kind
        model.zero_grad()
        trainer._compute_loss(model, rltt_batch(trainer, [1.0, -1.0])).backward()
        assert (gate.grad is not None and gate.grad.abs().sum() > 0) == reaches_gate, kind


def test_both_objectives_train_and_move_the_weights(tmp_path):
    for objective in ("grpo", "rltt"):
        model = tiny_ouro(seed=0)
        start = {n: p.detach().clone() for n, p in model.named_parameters()}
        trainer = trainer_for(
            model, tmp_path, reward=digit_share, objective=objective, min_loops=2, max_loops=2, max_steps=3
        )
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
        assert any(not torch.equal(p, start[n]) for n, p in model.named_parameters()), objective


@pytest.mark.parametrize(
    "loops, init", [({}, "uniform"), ({"min_loops": 2, "max_loops": 3}, "progressive")], ids=["config-count", "sampled"]
)
def test_learned_rltt_weights_move_in_a_group_of_their_own(tmp_path, loops, init):
    """``rltt_weights="learned"``: logits per loop step (the config's count, or ``max_loops``), started as published
    (zeros, or the log of the normalised ``t^alpha``), trained at 10x the learning rate without weight decay, logged,
    and saved beside the model."""
    trainer = trainer_for(
        tiny_ouro(seed=0), tmp_path, reward=digit_share, objective="rltt", rltt_weights="learned",
        rltt_learned_init=init, max_steps=3, **loops,
    )  # fmt: skip
    steps = loops.get("max_loops", tiny_ouro(seed=0).config.total_ut_steps)
    start = trainer.rltt_logits.detach().clone()
    if init == "uniform":
        assert torch.equal(start, torch.zeros(steps))
    else:
        expected = torch.arange(1, steps + 1.0) / torch.arange(1, steps + 1.0).sum()
        assert torch.allclose(torch.softmax(start, 0), expected, atol=1e-6)
    trainer.train()
    groups = [g for g in trainer.optimizer.param_groups if any(p is trainer.rltt_logits for p in g["params"])]
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.0 and groups[0]["initial_lr"] == pytest.approx(1e-2)
    assert not torch.equal(start, trainer.rltt_logits.detach())
    assert any("rltt_weight_1" in h for h in trainer.state.log_history)
    trainer.save_model()
    saved = json.loads((tmp_path / "grpo" / "rltt_learned_weights.json").read_text())
    assert saved["weights"] == pytest.approx(trainer.learned_weights()) and len(saved["logits"]) == steps


def test_the_published_rltt_preset_sets_the_launchers_values(tmp_path):
    """``LoopGRPOConfig.from_preset("rltt_published")``: the published launcher's defaults (run_rltt.slurm), each
    overridable; ``recipe()`` (the training record's) names the preset and what a run changed of it."""
    from equilibria.trainers.grpo import GRPO_PRESETS

    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    args = LoopGRPOConfig.from_preset("rltt_published", **common)
    assert (args.objective, args.rltt_weights, args.min_loops, args.max_loops) == ("rltt", "exit_pdf", 4, 4)
    assert (args.beta, args.num_generations, args.temperature) == (0.001, 8, 1.0)
    assert (args.learning_rate, args.weight_decay, args.max_grad_norm, args.warmup_steps) == (1e-6, 0.1, 0.1, 0.1)
    assert getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type) == "constant_with_warmup"
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (
        256,
        2,
    )  # 32 prompts x 8, 2 per update
    assert args.recipe() == {"preset": "rltt_published", "overrides": {}}
    assert set(GRPO_PRESETS["rltt_published"]) <= set(vars(args))
    changed = LoopGRPOConfig.from_preset("rltt_published", learning_rate=1e-5, rltt_weights="learned", **common)
    assert changed.recipe()["overrides"] == {"learning_rate": 1e-5, "rltt_weights": "learned"}
    assert LoopGRPOConfig(**common).recipe() == {"preset": None, "overrides": {}}
    with pytest.raises(ValueError, match=r"--grpo_preset must be one of \('rltt_published',\), got 'rltt'"):
        LoopGRPOConfig.from_preset("rltt", **common)


def test_what_cannot_work_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="pass ref_model='a saved folder'"):
        trainer_for(tiny_ouro(seed=0), tmp_path, beta=0.04)
    with pytest.raises(ValueError, match="never reaches the model's forward"):
        grpo_args(tmp_path, generation_kwargs={"num_loops": 4})
    with pytest.raises(ValueError, match="min_loops <= max_loops"):
        grpo_args(tmp_path, min_loops=4, max_loops=2)
    with pytest.raises(ValueError, match="objective must be one of"):
        grpo_args(tmp_path, objective="ppo")
    with pytest.raises(ValueError, match=r"use_vllm=True takes vllm_mode='colocate' \(got 'server'\)"):
        grpo_args(tmp_path, use_vllm=True, vllm_mode="server")
    with pytest.raises(ValueError, match=r"objective='rltt' takes num_iterations=1.*got num_iterations=2"):
        grpo_args(tmp_path, objective="rltt", num_iterations=2)
    assert grpo_args(tmp_path, num_iterations=2).num_iterations == 2  # GRPO's clipped ratio reuses generations
    with pytest.raises(ValueError, match="objective='rltt' reads the state of every loop step"):
        trainer_for(tiny_native("dory", num_loops=2), tmp_path, objective="rltt")
    assert grpo_args(tmp_path).ddp_broadcast_buffers is False  # per-row counts: forwards per process differ
    with pytest.raises(ValueError, match="ddp_broadcast_buffers=True with counts per row"):
        trainer_for(tiny_ouro(seed=0), tmp_path, loop_draws="per_prompt", ddp_broadcast_buffers=True)


def test_lora_trains_the_adapters_and_the_adapter_free_base_is_the_reference(tmp_path):
    from peft import LoraConfig

    model = tiny_ouro(seed=0)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = LoopGRPOTrainer(
        model=model, reward_funcs=digit_share, args=grpo_args(tmp_path, beta=0.04, min_loops=3, max_loops=3, max_steps=3),
        train_dataset=PROMPTS, processing_class=char_tokenizer(), peft_config=lora,
    )  # fmt: skip
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["num_loops"] for h in logged] == [3.0, 3.0, 3.0] and all(h["kl"] >= 0 for h in logged)
    assert any(h["kl"] > 0 for h in logged[1:])  # the adapters moved away from the base
    moved = {n for n, p in trainer.model.named_parameters() if "lora_" in n and p.requires_grad}
    assert moved and all(torch.equal(p, start[n]) for n, p in model.named_parameters() if n in start)


@pytest.mark.slow
@pytest.mark.two_process("grpo_ddp")
def test_two_process_rltt_with_per_prompt_draws_keeps_replicas_identical(two_process_run):
    """torchrun --nproc_per_node 2 (gloo): both replicas hold the same parameters, moved from the start, and the same
    learned exit weights' logits, moved too; a prompt draws the same count on both processes (its group may span
    them)."""
    r0, r1, _ = two_process_run
    assert r0["world"] == r1["world"] == 2
    start = tiny_ouro(seed=0).state_dict()
    for name, p0 in r0["params"].items():
        assert torch.equal(p0, r1["params"][name]), name
    assert any(not torch.equal(p, start[n]) for n, p in r0["params"].items())
    assert len(r0["counts"]) == len(r1["counts"]) == 3
    assert len({c for step in r0["counts"] + r1["counts"] for c in step}) > 1
    assert torch.equal(r0["logits"], r1["logits"]) and not torch.equal(r0["logits"], torch.zeros(6))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return tiny_trained_ouro(tmp_path_factory.mktemp("base") / "ouro")


def rl_argv(base, out, *extra) -> list[str]:
    argv = ["train", "--trainer", "grpo", "--model_name_or_path", str(base), "--output_dir", str(out)]
    argv += ["--train_size", "32", "--test_size", "8", "--max_steps", "2", "--per_device_train_batch_size", "8"]
    argv += ["--num_generations", "4", "--max_completion_length", "3", "--eval_loops", "1,2", "--logging_steps", "1"]
    return [*argv, "--save_strategy", "no", *extra, *QUIET]


def test_the_cli_runs_grpo_on_a_checkpoint_and_its_card_names_the_stage_and_reward(trained, tmp_path):
    import json

    from equilibria.cli import main

    out = tmp_path / "rl"
    assert main(rl_argv(trained, out, "--reward", "exact_match", "--min_loops", "1", "--max_loops", "3")) == 0
    history = json.loads((out / "training_history.json").read_text())
    assert [stage["trainer"] for stage in history] == ["StarsTrainer", "LoopGRPOTrainer"]
    assert history[1]["reinforcement"] == {
        "objective": "GRPO (TRL's dapo loss)",
        "rewards": ["exact_match_reward"],
        "loops": "loop count drawn per step from 1-3 (STARS' log-normal sampler)",
    }
    card = (out / "README.md").read_text()
    assert "Reinforcement learning: GRPO (TRL's dapo loss), reward `exact_match_reward`" in card
    # no evaluation repeats a question the checkpoint trained on: the new record keeps them
    base_prints = set(json.loads((trained / "training_data.json").read_text())["fingerprints"])
    assert base_prints <= set(json.loads((out / "training_data.json").read_text())["fingerprints"])
    assert (out / "loop_scaling.json").is_file()


def test_the_cli_takes_a_reward_of_your_own_from_a_file_with_rltt(trained, tmp_path):
    import json

    from equilibria.cli import main

    (tmp_path / "my_reward.py").write_text(
        "def short(completions, **columns):\n    return [1.0 / (1 + len(c)) for c in completions]\n"
    )
    out = tmp_path / "rl"
    extra = ["--reward", f"{tmp_path / 'my_reward.py'}:short", "--objective", "rltt", "--rltt_weights", "uniform"]
    assert main(rl_argv(trained, out, *extra)) == 0
    stage = json.loads((out / "training_history.json").read_text())[-1]["reinforcement"]
    assert stage["rewards"] == ["short"] and stage["objective"].startswith("RLTT (REINFORCE on the uniform-weighted")


def test_the_cli_applies_the_published_rltt_preset_and_the_record_names_it(trained, tmp_path):
    """``--grpo_preset rltt_published``: the launcher's values as the flags' defaults (the flags given override
    them); the training history names the preset and what the run changed."""
    from equilibria.cli import main

    out = tmp_path / "rl"
    assert main(rl_argv(trained, out, "--reward", "exact_match", "--grpo_preset", "rltt_published")) == 0
    stage = json.loads((out / "training_history.json").read_text())[-1]
    assert stage["recipe"]["preset"] == "rltt_published"
    assert {"per_device_train_batch_size": 8, "num_generations": 4}.items() <= stage["recipe"]["overrides"].items()
    assert "beta" not in stage["recipe"]["overrides"] and "learning_rate" not in stage["recipe"]["overrides"]
    assert stage["reinforcement"]["objective"].startswith("RLTT (REINFORCE on the exit_pdf-weighted")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model_name_or_path", ""], "--trainer grpo fine-tunes a trained checkpoint"),
        ([], "--trainer grpo needs --reward"),
        (["--reward", "no_such_module_x:f"], "--reward no_such_module_x:f: cannot import no_such_module_x"),
        (["--reward", "exact"], "--reward must be one of ('exact_match',) or module:function"),
        (["--reward", "json:no_function"], "--reward json:no_function: json has no function 'no_function'"),
        (["--reward", "exact_match", "--use_vllm", "true", "--vllm_mode", "server"], "takes vllm_mode='colocate'"),
        (["--reward", "exact_match", "--objective", "rltt", "--num_iterations", "2"], "takes num_iterations=1"),
    ],
)
def test_the_cli_refuses_what_grpo_cannot_do_in_one_line(trained, tmp_path, capsys, extra, message):
    from equilibria.cli import main

    assert main(rl_argv(trained, tmp_path / "rl", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    "source, message",
    [
        ("def f(completions, **columns)\n    return [0.0]\n", "does not parse (expected ':', line 1)"),
        ("def f(completions, **columns):\n    return 1.0\n", "returned a float; a reward returns a list of floats"),
        ("def f(completions, **columns):\n    return [1.0]\n", "returned 1 values; a reward returns a list of floats"),
        ("def f(completions, **columns):\n    return ['1'] * len(completions)\n", "returned str '1' among its values"),
    ],
)
def test_a_reward_file_that_does_not_parse_or_returns_no_list_of_floats_is_named_in_one_line(
    trained, tmp_path, capsys, source, message
):
    from equilibria.cli import main

    (tmp_path / "bad.py").write_text(source)
    assert main(rl_argv(trained, tmp_path / "rl", "--reward", f"{tmp_path / 'bad.py'}:f")) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and f"--reward {tmp_path / 'bad.py'}:f" in err and "Traceback" not in err, err


def test_grpo_on_the_checkpoints_own_seed_says_how_many_test_problems_it_dropped(tmp_path, capsys):
    from equilibria.cli import main

    base = tmp_path / "base"  # 30 of the 100 one-digit sums trained on: an RL run's test problems repeat some
    argv = ["train", "--output_dir", str(base), "--max_steps", "1", "--digits", "1", "--train_size", "30"]
    assert main([*argv, "--test_size", "8", "--hidden_size", "16", "--eval_loops", "2", *QUIET]) == 0
    capsys.readouterr()
    rl = ["--reward", "exact_match", "--digits", "1", "--train_size", "20", "--test_size", "30"]
    assert main(rl_argv(base, tmp_path / "rl", *rl)) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("loop scaling on"))
    assert "were dropped: the checkpoint was trained on them; --data_seed_offset N draws" in line, line


def test_reward_without_grpo_is_refused_in_one_line(trained, tmp_path, capsys):
    from equilibria.cli import main

    argv = ["train", "--model_name_or_path", str(trained), "--output_dir", str(tmp_path), "--reward", "exact_match"]
    assert main([*argv, *QUIET]) == 2
    err = capsys.readouterr().err.strip()
    assert "--reward is the reward of --trainer grpo" in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
def test_the_rl_benchmark_quick_mode_writes_a_json_per_run_and_the_paired_summary(tmp_path):
    import json

    bench = load_benchmark("bench_rl_loops")
    summary = bench.main(["--quick", "--out", str(tmp_path), "--work", str(tmp_path / "runs"), "--seeds", "0,1"])
    runs = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*_seed*.json"))]
    assert sorted((r["arm"], r["seed"]) for r in runs) == [(a, s) for a in sorted(bench.ARMS) for s in (0, 1)]
    assert {r["objective"] for r in runs} == {"sft", "grpo", "rltt"}
    assert all(set(r["accuracy"]) == set(bench.EVAL_LOOPS.split(",")) for r in runs)
    assert all(sum(r["correct_at_4"]) / len(r["correct_at_4"]) == pytest.approx(r["accuracy"]["4"]) for r in runs)
    assert {r["stage"]["loops"] for r in runs if r["arm"] == "grpo_sampled"} == {
        "loop count drawn per step from 2-8 (STARS' log-normal sampler)"
    }
    # the controls train the base recipe's loss (4 loops, no penalty) for the steps budgets.json matched to GRPO's
    budgets = json.loads((tmp_path / "budgets.json").read_text())
    for arm in bench.SFT_ARMS:
        folder = tmp_path / "runs" / f"{arm}_seed0"
        stage = json.loads((folder / "training_history.json").read_text())[-1]
        assert stage["steps"] == budgets[arm]["steps"]
        assert (stage["arguments"]["min_loops"], stage["arguments"]["max_loops"]) == (4, 4)
        assert stage["arguments"]["jsrr_weight"] == 0
    tests = summary["paired_tests"]
    assert {(t["a"], t["b"]) for t in tests["tests"].values()} == set(bench.COMPARED)
    assert tests["family_size"] == 2 * len(bench.COMPARED)
    assert set(summary["minus_grpo"]) == set(bench.ARMS) - {"grpo"}
    assert all(cell["n"] == 2 for cell in summary["arms"]["rltt"].values())


def test_the_rl_benchmarks_paired_tests_count_problems_and_correct_over_the_family():
    """Per seed, problems one side answers and the other does not; McNemar's exact p; Holm over every test."""
    bench = load_benchmark("bench_rl_loops")
    base = {"correct_at_4": [0] * 40 + [1] * 60}
    by = {arm: {s: {"correct_at_4": [0] * 40 + [1] * 60} for s in (0, 1, 2)} for arm in bench.ARMS}
    for s in (0, 1, 2):  # GRPO gains 20 problems on every seed and loses none
        by["grpo"][s]["correct_at_4"] = [0] * 20 + [1] * 80
    by["rltt"][0]["correct_at_4"] = [1] * 3 + [0] * 37 + [1] * 60  # 3 gained: p = 0.25, not significant
    tests = bench.paired_tests(by, base)
    grpo = tests["tests"]["grpo vs base"]
    assert grpo["seeds"]["0"] == {"gained": 20, "lost": 0, "difference": 0.2, "p": pytest.approx(2 / 2**20),
                                  "holm": True}  # fmt: skip
    assert grpo["verdict"] == "better on every seed (3 of 3)" and grpo["difference"]["mean"] == pytest.approx(0.2)
    assert tests["tests"]["grpo vs sft_wall"]["better"] == 3
    rltt = tests["tests"]["rltt vs base"]
    assert (
        rltt["seeds"]["0"]["p"] == pytest.approx(0.25)
        and rltt["verdict"] == "no significant difference on any of 3 seeds"
    )
    assert tests["family_size"] == 3 * len(bench.COMPARED)


@pytest.mark.slow
def test_the_example_trains_with_its_own_reward_on_unseen_sums(trained, tmp_path, monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "grpo_own_reward.py"
    argv = ["--model", str(trained), "--output_dir", str(tmp_path), "--max_steps", "2", "--prompts", "16"]
    argv += ["--test_size", "8", "--per_device_train_batch_size", "8", "--num_generations", "4"]
    argv += ["--max_completion_length", "3", "--report_to", "none", "--use_cpu", "--save_strategy", "no"]
    monkeypatch.setattr(sys, "argv", [str(example), *argv])
    runpy.run_path(str(example), run_name="__main__")
    assert "held-out sums at 4 loops:" in capsys.readouterr().out
    assert (tmp_path / "model.safetensors").is_file()


def test_the_benchmarks_paired_t_test_gives_students_two_sided_p_values():
    bench = load_benchmark("bench_rl_loops")
    # Student's t critical values at two-sided 0.05 (1 to 10 degrees of freedom), and t = 0
    for df, t in [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (10, 2.228)]:
        assert bench.t_two_sided_p(t, df) == pytest.approx(0.05, abs=2e-4), df
        assert bench.t_two_sided_p(0.0, df) == pytest.approx(1.0)
    cell = bench.paired([0.05, 0.02, 0.05])  # the RLTT - GRPO differences' shape: 3 seeds
    assert cell["n"] == 3 and cell["t"] == pytest.approx(cell["mean"] / cell["se"], rel=1e-3)
    assert bench.paired([0.0, 0.0, 0.0])["p"] == 1.0
    assert bench.paired([-0.005, -0.005, -0.005])["p"] is None  # the same difference on every seed: untestable


@pytest.mark.parametrize("objective", ["grpo", "rltt"])
def test_the_jsrr_penalty_adds_its_gradient_and_logs_the_radius(tmp_path, objective):
    """The same run with and without the penalty: its radius is logged and it moves the weights otherwise."""
    moved = {}
    for weight in (0.0, 0.5):
        torch.manual_seed(0)
        model = tiny_ouro(seed=0)
        trainer = trainer_for(model, tmp_path / str(weight), reward=digit_share, objective=objective, min_loops=3,
                              max_loops=3, max_steps=1, jsrr_weight=weight, seed=0)  # fmt: skip
        trainer.train()
        logged = [h for h in trainer.state.log_history if "loss" in h][0]
        assert ("spectral_radius" in logged) == (weight > 0) and logged.get("jsrr_penalty", 1.0) > 0
        moved[weight] = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert any(not torch.equal(moved[0.0][n], moved[0.5][n]) for n in moved[0.0])


#: the TRL methods LoopGRPOTrainer overrides, with the leading parameters it relies on and, where it returns what
#: TRL's callers unpack, the return annotation it matches (trl 1.16)
PINNED_TRL = {
    "_generate_and_score_completions": (["self", "inputs"], None),
    "_generate_single_turn": (["self", "prompt_ids", "images", "multimodal_fields", "num_generations"], None),
    "_compute_loss": (["self", "model", "inputs"], None),
    "_get_per_token_logps_and_entropies": (
        [
            "self",
            "model",
            "input_ids",
            "attention_mask",
            "logits_to_keep",
            "batch_size",
            "compute_entropy",
            "compute_aux_loss",
        ],
        "tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]",
    ),  # fmt: skip
    "training_step": (["self", "model", "inputs", "num_items_in_batch"], None),
}


def test_the_trl_methods_it_overrides_keep_the_signatures_it_was_written_for():
    """A TRL release that renames, reorders or reshapes what LoopGRPOTrainer overrides fails here, naming the method,
    not silently in a user's run."""
    import inspect

    import trl
    from trl import GRPOTrainer

    overridden = {n for n in vars(LoopGRPOTrainer) if n in vars(GRPOTrainer) and callable(vars(GRPOTrainer)[n])}
    assert overridden - {"__init__"} == set(PINNED_TRL), "pin every TRL method LoopGRPOTrainer overrides"
    for name, (parameters, returns) in PINNED_TRL.items():
        signature = inspect.signature(getattr(GRPOTrainer, name))
        found = list(signature.parameters)[: len(parameters)]
        assert found == parameters, f"trl {trl.__version__}: GRPOTrainer.{name}{signature} (written for {parameters})"
        if returns is not None:
            annotation = signature.return_annotation
            shown = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
            assert shown.replace("typing.", "") == returns, f"trl {trl.__version__}: GRPOTrainer.{name} returns {shown}"

    # use_vllm: the requests' loop count rides on VLLMGeneration.generation_kwargs, which its generate() merges into
    # every SamplingParams
    from trl.generation.vllm_generation import VLLMGeneration

    assert "generation_kwargs" in inspect.signature(VLLMGeneration.__init__).parameters
    assert "generation_kwargs.update(self.generation_kwargs)" in inspect.getsource(VLLMGeneration.generate), (
        f"trl {trl.__version__}: VLLMGeneration.generate no longer merges self.generation_kwargs into its requests"
    )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_use_vllm_without_vllm_is_refused_in_one_line(trained, tmp_path, capsys):
    from equilibria.cli import main

    assert main(rl_argv(trained, tmp_path / "rl", "--reward", "exact_match", "--use_vllm", "true")) == 2
    err = capsys.readouterr().err.strip()
    assert "use_vllm=True needs vLLM beside the package" in err and len(err.splitlines()) == 1, err
    with pytest.raises(ValueError, match="use_vllm=True needs vLLM beside the package"):
        grpo_args(tmp_path, use_vllm=True)
