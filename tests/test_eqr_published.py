"""Claims about the Equilibrium Reasoner's published-code options: each computes what it names (the two-level
recurrence's order, its damping and noise, the post-norm gainless mixer, the SwiGLU token mixer's width, the
truncated start, the published initialisation, the halting readout and weight, stablemax), the presets give the
published values and record their overrides, and the training options (gradient through the last iterations only,
halting exploration, AdamATan2) do what they say through the Trainer."""

import math

import pytest
import torch
from conftest import training_args

from equilibria import EqRConfig, EqRForPuzzleSolving
from equilibria.hub_cards.family_text import family_text
from equilibria.modeling.modeling_eqr import gainless_rms_norm, stablemax_cross_entropy
from equilibria.tasks import build_sudoku_dataset
from equilibria.trainers import EqRTrainer, EqRTrainingArguments
from equilibria.trainers.optimizers import AdamAtan2

DATA = build_sudoku_dataset(size=4, num_train=32, num_test=8, seed=0, split_by="board")
PUZZLES = torch.tensor(DATA["train"][:3]["inputs"])


def published(seed: int = 0, **overrides) -> EqRForPuzzleSolving:
    """A tiny model of the published preset (4x4 boards)."""
    torch.manual_seed(seed)
    sizes = dict(max_seq_len=16, hidden_size=32, intermediate_size=64, l_cycles=2, num_loops=2)
    return EqRForPuzzleSolving(EqRConfig.from_preset("published", **{**sizes, **overrides})).eval()


def test_the_preset_is_the_published_architecture_and_records_overrides(tmp_path):
    config = EqRConfig.from_preset("published", max_seq_len=81)
    assert (config.hidden_size, config.intermediate_size, config.num_layers) == (512, 1536, 2)
    assert (config.block_type, config.token_mixer, config.norm_style) == ("mlp", "swiglu", "post")
    assert (config.inertia, config.train_noise, config.test_noise, config.l_cycles) == (0.05, 0.01, 0.01, 6)
    assert (config.init_truncation, config.init_scheme, config.scale_embeddings) == (2.0, "published", True)
    assert (config.halt_readout, config.halt_loss_weight, config.answer_loss) == ("first", 0.5, "stablemax")
    assert config.token_mixing_size == 256 and config.rms_norm_eps == 1e-5  # the code's SwiGLU width for 81 cells
    assert config.preset == "published" and config.preset_overrides() == {}
    small = EqRConfig.from_preset("published", max_seq_len=16, hidden_size=32)
    assert small.preset_overrides() == {"hidden_size": 32}
    small.save_pretrained(tmp_path)
    assert EqRConfig.from_pretrained(tmp_path).preset_overrides() == {"hidden_size": 32}
    notes = " ".join(family_text(small).notes(small))
    assert "preset `published`, with `hidden_size=32`" in notes and "`z <- 0.05 z + 0.95 f(z; x) + noise`" in notes
    with pytest.raises(ValueError, match="preset must be one of"):
        EqRConfig.from_preset("paper")
    with pytest.raises(ValueError, match="norm_style='post'"):
        EqRConfig(norm_style="post", block_type="attention")


@pytest.mark.parametrize("cells, width", [(81, 256), (36, 256), (300, 1024)])
def test_the_swiglu_token_mixer_width_is_the_published_rule(cells, width):
    assert EqRConfig(max_seq_len=cells, token_mixer="swiglu", block_type="mlp").token_mixing_size == width
    assert EqRConfig(max_seq_len=cells, token_mixer="swiglu", token_mixing_size=40).token_mixing_size == 40


def test_the_post_norm_mixer_layer_is_the_published_block():
    model = published()
    layer = model.model.layers[0]
    assert not [n for n, _ in layer.named_parameters() if "norm" in n]  # no gains
    h = torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(1))
    t = h.transpose(1, 2)
    gate, value = layer.token_in(t).chunk(2, dim=-1)
    t = t + layer.token_out(torch.nn.functional.silu(gate) * value)
    t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5)  # normed over the cells
    mixed = t.transpose(1, 2)
    expected = mixed + layer.channel_mlp(mixed)
    expected = expected * torch.rsqrt(expected.pow(2).mean(-1, keepdim=True) + 1e-5)
    with torch.no_grad():
        torch.testing.assert_close(layer(h), expected)
    assert model.model.norm is None  # and no final norm after the block
    torch.testing.assert_close(gainless_rms_norm(expected, 1e-5), expected, rtol=1e-5, atol=1e-5)


def test_an_iteration_of_the_two_level_recurrence_is_the_published_order_with_damping_and_noise():
    model = published(l_cycles=2)
    core, d = model.model, 32
    z0 = torch.randn(3, 16, 2 * d, generator=torch.Generator().manual_seed(2))
    x = core.embed(PUZZLES)
    torch.testing.assert_close(x, core.embed_tokens(PUZZLES) * math.sqrt(d))  # scaled embeddings
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        out = model(PUZZLES, state=z0, num_loops=1, noise=0.3, generator=torch.Generator().manual_seed(7))
        high, low = z0[..., :d], z0[..., d:]
        for _ in range(2):  # z_L from z_H + x, twice; then z_H from z_L; each 0.05 z + 0.95 block + 0.3 eps
            low = (
                0.05 * low
                + 0.95 * core._block(low + high + x, None, None)
                + 0.3 * torch.randn(low.shape, generator=gen)
            )
        high = 0.05 * high + 0.95 * core._block(high + low, None, None) + 0.3 * torch.randn(high.shape, generator=gen)
        torch.testing.assert_close(out.state, torch.cat([high, low], -1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.logits, model.lm_head(high), rtol=1e-5, atol=1e-5)  # the heads read z_H
        torch.testing.assert_close(out.halt_logits[:, -1], core.halt_head(high[:, 0]).squeeze(-1))  # its 1st cell
        f, start = core.loop_map(PUZZLES)
        assert start.shape == (3, 16, 2 * d)
        clean = model(PUZZLES, state=z0, num_loops=1, noise=0.0)
        torch.testing.assert_close(f(z0), clean.state)  # the loop map is one noiseless iteration


def test_the_published_initialisation_and_the_truncated_start():
    model = published(hidden_size=64, intermediate_size=192)
    core = model.model
    weight = core.layers[0].channel_mlp.gate_proj.weight
    fan_in = weight.shape[1]
    assert abs(weight.std().item() * math.sqrt(fan_in) - 1.0) < 0.05  # std 1 / sqrt(fan_in) after the truncation
    assert weight.abs().max().item() <= 2.0 / 0.8796 / math.sqrt(fan_in) + 1e-6  # cut at 2 of its sigmas
    assert torch.equal(core.halt_head.weight, torch.zeros_like(core.halt_head.weight))
    assert torch.equal(core.halt_head.bias, torch.full_like(core.halt_head.bias, -5.0))
    start = core.initial_state(64, 16, generator=torch.Generator().manual_seed(3))
    again = core.initial_state(64, 16, generator=torch.Generator().manual_seed(3))
    assert torch.equal(start, again) and start.shape == (64, 16, 128)
    assert abs(start.std().item() - 1.0) < 0.02 and start.abs().max().item() <= 2.0 / 0.8796 + 1e-4
    plain = EqRForPuzzleSolving(EqRConfig(max_seq_len=16, hidden_size=64, intermediate_size=128))
    assert plain.model.initial_state(64, 16, generator=torch.Generator().manual_seed(3)).abs().max() > 2.3


def test_stablemax_is_the_published_loss_and_the_halting_loss_is_weighted():
    logits = torch.tensor([[[2.0, -1.0, 0.0]], [[-3.0, 0.5, 4.0]]])
    labels = torch.tensor([[0], [1]])
    s = torch.tensor([[3.0, 0.5, 1.0], [0.25, 1.5, 5.0]], dtype=torch.float64)  # x + 1 above 0, 1 / (1 - x) below
    expected = -(torch.log(s[0, 0] / s[0].sum()) + torch.log(s[1, 1] / s[1].sum())) / 2
    torch.testing.assert_close(stablemax_cross_entropy(logits, labels), expected.float())
    skipped = stablemax_cross_entropy(logits, torch.tensor([[0], [-100]]))
    torch.testing.assert_close(skipped, (-torch.log(s[0, 0] / s[0].sum())).float())
    model = published()
    labels = torch.tensor(DATA["train"][:3]["labels"])
    with torch.no_grad():
        out = model(PUZZLES, labels=labels, num_loops=1, noise=0.0, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(out.lm_loss, stablemax_cross_entropy(out.logits, labels))
    torch.testing.assert_close(out.loss, out.lm_loss + 0.5 * out.halt_loss)


def test_the_training_preset_is_the_published_recipe_and_names_its_overrides(tmp_path):
    args = EqRTrainingArguments.from_preset("published", output_dir=str(tmp_path), use_cpu=True, max_steps=10)
    assert (args.learning_rate, args.warmup_steps, args.weight_decay, args.max_grad_norm) == (1e-4, 2000, 1.0, 0.0)
    assert (args.adam_beta1, args.adam_beta2, args.ema_decay, args.eqr_optimizer) == (0.9, 0.95, 0.999, "adam_atan2")
    assert (args.segment_loops, args.grad_loops, args.max_segments, args.halt_exploration) == (3, 1, 16, 0.1)
    assert args.recipe() == {"preset": "published", "overrides": {"max_steps": 10}}
    linear = EqRTrainingArguments.from_preset("published", output_dir=str(tmp_path), lr_scheduler_type="linear")
    assert linear.recipe()["overrides"] == {"lr_scheduler_type": "linear"}  # the value, not SchedulerType.LINEAR
    with pytest.raises(ValueError, match="grad_loops \\(4\\) must be <= segment_loops \\(3\\)"):
        EqRTrainingArguments.from_preset("published", output_dir=str(tmp_path), grad_loops=4)
    with pytest.raises(ValueError, match="halt_exploration applies to supervision='online'"):
        training_args(tmp_path, EqRTrainingArguments, halt_exploration=0.1, supervision="offline")
    with pytest.raises(ValueError, match="eqr_preset must be one of"):
        EqRTrainingArguments.from_preset("paper", output_dir=str(tmp_path))


def _trainer(tmp_path, model=None, **overrides) -> EqRTrainer:
    values = dict(max_steps=1, per_device_train_batch_size=4, dataloader_drop_last=True, logging_steps=1)
    args = training_args(tmp_path / "out", EqRTrainingArguments, **{**values, **overrides})
    return EqRTrainer(model=model or published(), args=args, train_dataset=DATA["train"])


def test_only_the_last_iterations_of_a_segment_are_trained_through(tmp_path):
    model = published(train_noise=0.0, random_init=False).train()
    trainer = _trainer(tmp_path, model, segment_loops=3, grad_loops=1)
    inputs = {k: torch.tensor(v) for k, v in DATA["train"][:4].items() if k in ("inputs", "labels")}
    batch = trainer.model_inputs(model, inputs, training=True)
    assert batch["num_loops"] == 1 and not batch["state"].requires_grad
    with torch.no_grad():
        warm = model(inputs["inputs"], num_loops=2, noise=0.0, random_init=False).state
    torch.testing.assert_close(batch["state"], warm)  # the first two iterations ran before, without gradient
    full = _trainer(tmp_path / "b", model, segment_loops=3)
    assert full.model_inputs(model, inputs, training=True)["num_loops"] == 3


@pytest.mark.parametrize("exploration, halted", [(0.0, True), (1.0, False)])
def test_halting_exploration_holds_rows_for_a_drawn_least_number_of_segments(tmp_path, exploration, halted):
    model = published()
    torch.nn.init.constant_(model.model.halt_head.bias, 30.0)  # the head says "halt" for every row
    trainer = _trainer(tmp_path, model, halt_exploration=exploration, max_segments=4, segment_loops=1)
    trainer.train()  # one segment: without exploration every row halts; with it none may before its 2nd
    assert bool(trainer._carry.done.all()) is halted and bool(trainer._carry.done.any()) is halted


def test_the_adam_atan2_option_builds_the_published_optimizer_over_every_parameter(tmp_path):
    trainer = _trainer(tmp_path, eqr_optimizer="adam_atan2", learning_rate=1e-4, weight_decay=1.0, adam_beta2=0.95)
    optimizer = trainer.create_optimizer()
    assert isinstance(optimizer, AdamAtan2) and len(optimizer.param_groups) == 1
    group = optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"]) == (1e-4, 1.0, (0.9, 0.95))
    assert len(group["params"]) == len(list(trainer.model.parameters()))  # norms, biases and embeddings decay too
    clash = _trainer(tmp_path / "b", eqr_optimizer="adam_atan2", optim="sgd")
    with pytest.raises(ValueError, match="eqr_optimizer='adam_atan2' builds the optimizer itself"):
        clash.create_optimizer()


def test_the_published_recipe_trains_saves_and_loads(tmp_path):
    overrides = dict(max_steps=3, per_device_train_batch_size=4, warmup_steps=1, learning_rate=1e-3, max_segments=2)
    args = EqRTrainingArguments.from_preset(
        "published", output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], save_strategy="no", **overrides
    )
    model = published()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = EqRTrainer(model=model, args=args, train_dataset=DATA["train"])
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    trainer.save_model(str(tmp_path / "saved"))
    loaded = EqRForPuzzleSolving.from_pretrained(tmp_path / "saved").eval()
    model.eval()
    z0 = model.model.initial_state(2, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = model(PUZZLES[:2], state=z0, noise=0.0).logits
        b = loaded(PUZZLES[:2], state=z0, noise=0.0).logits
    torch.testing.assert_close(a, b)
    assert loaded.config.preset == "published"


def test_the_cli_trains_the_published_presets_and_the_card_names_them(tmp_path):
    import json

    from equilibria.cli import main

    out = tmp_path / "eqr"
    argv = ["train", "--family", "eqr", "--task", "sudoku", "--size", "4", "--train_size", "16", "--test_size", "4"]
    argv += ["--config_preset", "published", "--eqr_preset", "published", "--hidden_size", "32", "--num_loops", "3"]
    argv += ["--max_steps", "2", "--per_device_train_batch_size", "4", "--max_segments", "2", "--warmup_steps", "1"]
    argv += ["--eval_loops", "3", "--use_cpu", "true", "--report_to", "none", "--save_strategy", "no"]
    argv += ["--output_dir", str(out)]
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["preset"], config["hidden_size"], config["l_cycles"], config["answer_loss"]) == (
        "published",
        32,
        6,
        "stablemax",
    )
    history = json.loads((out / "training_history.json").read_text())[-1]
    assert history["recipe"]["preset"] == "published"
    assert history["recipe"]["overrides"]["max_steps"] == 2 and "learning_rate" not in history["recipe"]["overrides"]
    card = (out / "README.md").read_text()
    assert "preset `published`, with `hidden_size=32`" in card and "Trainer preset: `published`" in card


@pytest.mark.slow
def test_the_halting_benchmark_runs_the_published_preset_and_counts_block_applications(tmp_path):
    from conftest import load_benchmark

    bench = load_benchmark("bench_eqr_halting")
    results = bench.main(["--quick", "--preset", "published", "--output-dir", str(tmp_path)])
    fixed = results["test"]["all"]["fixed"]
    assert [s["mean_nfe"] for s in fixed.values()] == [7.0, 14.0, 28.0]  # depths 1, 2, 4: 6 z_L + 1 z_H updates each
    assert results["recipe"]["preset"] == "published"
    assert results["recipe"]["overrides"]["max_steps"] == 4  # the cut to the CPU, named
    config = EqRConfig.from_pretrained(tmp_path / "model")
    assert (config.preset, config.l_cycles, config.norm_style) == ("published", 6, "post")
    model = EqRForPuzzleSolving(config).eval()
    out = model.solve(torch.tensor(DATA["test"][:2]["inputs"]), depth=2, breadth=3)
    assert out.nfe.tolist() == [2 * 3 * 7, 2 * 3 * 7]
