"""Claims about the Equilibrium Reasoner: the update rule, its start and noise, continuing from a state,
depth x breadth solving with each selection rule, saving/loading and bad input."""

import pytest
import torch
from conftest import remote_code_run, tiny_eqr
from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification

from equilibria import EqRConfig, EqRForPuzzleSolving, EqRModel

PUZZLES = torch.randint(1, 11, (3, 16), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("block_type", ["attention", "mlp"])
def test_one_step_is_the_damped_update_of_the_block(block_type):
    model = tiny_eqr(block_type=block_type, inertia=0.3)
    z0 = torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(1))
    f, _ = model.model.loop_map(PUZZLES)
    with torch.no_grad():
        out = model.model(PUZZLES, state=z0, num_loops=1, noise=0.0)
        fz = f(z0)
    block = model.model._block(z0 + model.model.embed(PUZZLES), None, None) if block_type == "mlp" else None
    if block is not None:  # the map is the damped update of the block (the attention block needs its context)
        torch.testing.assert_close(fz, z0 + 0.7 * (block - z0))
    torch.testing.assert_close(out.last_hidden_state, fz)  # one iteration of the model is one application of f
    expected_residual = (fz - z0).flatten(1).norm(dim=1) / fz.flatten(1).norm(dim=1)
    torch.testing.assert_close(out.residuals[:, 0], expected_residual)
    assert out.halt_logits.shape == (3, 1)


def test_noise_is_beta_times_a_standard_gaussian():
    model = tiny_eqr(inertia=0.0)
    z0 = torch.zeros(3, 16, 32)
    with torch.no_grad():
        clean = model.model(PUZZLES, state=z0, num_loops=1, noise=0.0).last_hidden_state
        noisy = model.model(PUZZLES, state=z0, num_loops=1, noise=0.5, generator=torch.Generator().manual_seed(5))
    eps = torch.randn(clean.shape, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(noisy.last_hidden_state, clean + 0.5 * eps)


def test_training_and_inference_use_their_own_noise_levels():
    model = tiny_eqr(train_noise=0.2, test_noise=0.0)
    z0 = torch.zeros(3, 16, 32)
    with torch.no_grad():
        a = model(PUZZLES, state=z0).logits
        b = model(PUZZLES, state=z0).logits
        model.train()
        c = model(PUZZLES, state=z0).logits
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # no test noise: deterministic from a given state
    assert not torch.allclose(a, c)


def test_random_and_learned_starts():
    random_start = tiny_eqr(random_init=True)
    one = random_start.model.initial_state(2, 16, torch.Generator().manual_seed(0))
    two = random_start.model.initial_state(2, 16, torch.Generator().manual_seed(1))
    assert not torch.allclose(one, two) and one.std().item() == pytest.approx(1.0, rel=0.1)
    learned = tiny_eqr(random_init=False)
    assert torch.equal(learned.model.initial_state(2, 16), learned.model.initial_state(2, 16))
    assert torch.equal(learned.model.initial_state(1, 16)[0, 3], learned.model.init_state.detach())
    # either start on demand (the trainer's switch), whatever the config says
    assert torch.equal(random_start.model.initial_state(1, 16, random_init=False)[0, 0], random_start.model.init_state)
    assert not torch.equal(learned.model.initial_state(1, 16, random_init=True)[0, 0], learned.model.init_state)


def test_continuing_from_the_state_equals_running_longer():
    model = tiny_eqr(inertia=0.2)
    z0 = torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole = model(PUZZLES, state=z0, num_loops=5, noise=0.0)
        first = model(PUZZLES, state=z0, num_loops=3, noise=0.0)
        rest = model(PUZZLES, state=first.state, num_loops=2, noise=0.0)
    torch.testing.assert_close(rest.logits, whole.logits)
    torch.testing.assert_close(torch.cat([first.residuals, rest.residuals], 1), whole.residuals)


def test_padding_is_masked_in_the_attention_block():
    model = tiny_eqr()
    alone_inputs = PUZZLES[:1, :10]
    z_alone = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(3))
    padded = torch.cat([alone_inputs, torch.zeros(1, 6, dtype=torch.long)], 1)
    z_padded = torch.cat([z_alone, torch.randn(1, 6, 32)], 1)
    mask = torch.tensor([[1] * 10 + [0] * 6])
    with torch.no_grad():
        alone = model(alone_inputs, state=z_alone, noise=0.0).logits
        both = model(padded, attention_mask=mask, state=z_padded, noise=0.0).logits
    torch.testing.assert_close(both[:, :10], alone, rtol=1e-5, atol=1e-5)


def test_losses_and_halting_target():
    model = tiny_eqr()
    labels = PUZZLES.clone()
    labels[:, :4] = -100
    model.train()
    out = model(PUZZLES, labels=labels)
    assert out.loss is not None and out.lm_loss is not None and out.halt_loss is not None
    torch.testing.assert_close(out.loss, out.lm_loss + out.halt_loss)
    out.loss.backward()
    assert model.model.halt_head.weight.grad.abs().sum() > 0
    no_halt = tiny_eqr(halting=False)
    out = no_halt(PUZZLES, labels=labels)
    assert out.halt_loss is None and out.halt_logits is None
    torch.testing.assert_close(out.loss, out.lm_loss)


def test_solve_selects_by_residual_vote_or_halting_head():
    model = tiny_eqr(test_noise=0.05)
    g = torch.Generator().manual_seed(0)
    out = model.solve(PUZZLES, depth=3, breadth=5, select="residual", generator=g)
    assert out.predictions.shape == (3, 5, 16) and out.residuals.shape == (3, 5) and out.votes.shape == (3, 5)
    assert torch.equal(out.chosen, out.residuals.argmin(1))
    assert torch.equal(out.answers, out.predictions[torch.arange(3), out.chosen])
    halt = model.solve(PUZZLES, depth=3, breadth=5, select="halt", generator=torch.Generator().manual_seed(0))
    assert torch.equal(halt.chosen, halt.halt_probs.argmax(1))
    vote = model.solve(PUZZLES, depth=3, breadth=5, select="vote", generator=torch.Generator().manual_seed(0))
    assert torch.equal(vote.votes.max(1).values, vote.votes[torch.arange(3), vote.chosen])
    # the same generator seed gives the same restarts whatever the selection rule
    assert torch.equal(vote.predictions, out.predictions) and torch.equal(halt.residuals, out.residuals)


def test_vote_picks_the_majority_answer():
    model = tiny_eqr()

    class Fixed:  # stand-in outputs: restarts 0, 2, 3 agree; restart 1 has the lowest residual
        pass

    predictions = torch.zeros(1, 4, 16, dtype=torch.long)
    predictions[0, 1] = 7
    logits = torch.nn.functional.one_hot(predictions.view(4, 16), 11).float()
    fixed = Fixed()
    fixed.logits, fixed.residuals = logits, torch.tensor([[0.5], [0.1], [0.4], [0.3]])
    fixed.halt_logits = torch.tensor([[0.0], [0.0], [0.0], [0.0]])
    fixed.steps = torch.ones(4, dtype=torch.long)
    model.forward = lambda *args, **kwargs: fixed
    vote = model.solve(PUZZLES[:1], depth=1, breadth=4, select="vote")
    residual = model.solve(PUZZLES[:1], depth=1, breadth=4, select="residual")
    assert vote.chosen.item() == 3 and vote.votes.tolist() == [[3, 1, 3, 3]]  # majority, then lowest residual
    assert residual.chosen.item() == 1


def test_an_untied_model_applies_its_own_block_at_each_step():
    model = tiny_eqr(untied_depth=3, num_loops=3, block_type="mlp")
    core = model.model
    assert len(core.layers) == 3 * 2  # depth-matched feed-forward baseline: 3 blocks of 2 layers
    z = torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = core(PUZZLES, state=z, noise=0.0)
        embeds = core.embed_tokens(PUZZLES)
        for k in range(3):
            hidden = z + embeds
            for layer in core.layers[2 * k : 2 * k + 2]:
                hidden = layer(hidden)
            z = core.norm(hidden)  # inertia 0: z_{k+1} = f_k(z_k)
    torch.testing.assert_close(out.last_hidden_state, z)
    with pytest.raises(ValueError, match="untied_depth=3"):
        core(PUZZLES, num_loops=4)
    with pytest.raises(ValueError, match="no loop map"):
        core.loop_map(PUZZLES)
    with pytest.raises(ValueError, match="untied_depth must be greater or equal to 1, got 0"):
        EqRConfig(max_seq_len=16, hidden_size=32, num_attention_heads=4, untied_depth=0)


def test_halting_stops_each_row_where_its_head_says_and_stopped_rows_cost_nothing():
    model = tiny_eqr(num_loops=8)
    puzzles = torch.randint(1, 11, (8, 16), generator=torch.Generator().manual_seed(3))
    z0 = torch.randn(8, 16, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model.model(puzzles, state=z0, noise=0.0, output_states=True)
    probs = torch.sigmoid(full.halt_logits)
    threshold = float(probs.median())
    reached = probs >= threshold
    expected = torch.where(reached.any(1), reached.float().argmax(1) + 1, torch.tensor(8))
    assert len(set(expected.tolist())) > 1 and int(expected.min()) < 8  # rows stop at different steps

    applied = []  # rows entering the block's first layer, per application
    hook = model.model.layers[0].register_forward_hook(lambda module, args, out: applied.append(args[0].shape[0]))
    with torch.no_grad():
        halted = model.model(puzzles, state=z0, noise=0.0, halt_threshold=threshold)
    hook.remove()
    assert torch.equal(halted.steps, expected)
    assert sum(applied) == int(expected.sum()) < 8 * 8  # the stopped rows were not computed
    final = torch.stack([full.states[k][row] for row, k in enumerate(expected.tolist())])
    torch.testing.assert_close(halted.last_hidden_state, final)  # each row stops at its own state
    last = expected - 1
    torch.testing.assert_close(halted.residuals[:, -1], full.residuals[torch.arange(8), last])
    assert halted.residuals.shape[1] == int(expected.max())


def test_solve_reports_function_evaluations_per_puzzle():
    model = tiny_eqr(test_noise=0.05)
    plain = model.solve(PUZZLES, depth=5, breadth=3, generator=torch.Generator().manual_seed(0))
    assert plain.nfe.tolist() == [15, 15, 15] and plain.steps.shape == (3, 3)
    early = model.solve(PUZZLES, depth=5, breadth=3, halt_threshold=1e-6, generator=torch.Generator().manual_seed(0))
    assert early.nfe.tolist() == [3, 3, 3]  # every restart halts after its first step
    assert torch.equal(early.nfe, early.steps.sum(1))


@pytest.mark.parametrize("value", [0, 1.5, "0.5", True])
def test_bad_halt_thresholds_are_clear_errors(value):
    with pytest.raises(ValueError, match=r"halt_threshold must be a probability in \(0, 1\]"):
        tiny_eqr().solve(PUZZLES, halt_threshold=value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(depth=0), "depth must be an integer >= 1"),
        (dict(breadth=0), "breadth must be an integer >= 1"),
        (dict(select="best"), r"select must be one of \('residual', 'vote', 'halt'\)"),
    ],
)
def test_bad_solve_arguments_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_eqr().solve(PUZZLES, **kwargs)


def test_bad_inputs_and_configs_are_clear_errors():
    with pytest.raises(ValueError, match="select='halt' needs a halting head"):
        tiny_eqr(halting=False).solve(PUZZLES, select="halt")
    with pytest.raises(ValueError, match="halt_threshold needs a halting head"):
        tiny_eqr(halting=False).solve(PUZZLES, halt_threshold=0.5)
    with pytest.raises(ValueError, match="exactly max_seq_len=16"):
        tiny_eqr(block_type="mlp")(PUZZLES[:, :9])
    with pytest.raises(ValueError, match="at most max_seq_len=16"):
        tiny_eqr()(torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="labels must have the inputs' shape"):
        tiny_eqr()(PUZZLES, labels=PUZZLES[:, :5])
    base = dict(max_seq_len=16, hidden_size=32, num_attention_heads=4)
    for overrides, message in [
        (dict(inertia=1.0), "inertia must be greater or equal to 0.0 and smaller than 1.0, got 1.0"),
        (dict(train_noise=-0.1), "train_noise must be greater or equal to 0.0 and smaller than inf"),
        (dict(block_type="conv"), r"block_type must be one of \('attention', 'mlp'\)"),
        (dict(num_loops=0), "num_loops must be greater or equal to 1"),
        (dict(init_std=0), "init_std must be greater than 0.0 and smaller than inf"),
    ]:
        with pytest.raises(ValueError, match=message):
            EqRConfig(**base, **overrides)


def test_saved_equals_loaded_and_auto_classes(tmp_path):
    model = tiny_eqr(block_type="mlp", random_init=False)
    model.save_pretrained(tmp_path)
    loaded = EqRForPuzzleSolving.from_pretrained(tmp_path).eval()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    with torch.no_grad():
        torch.testing.assert_close(loaded(PUZZLES).logits, model(PUZZLES).logits, rtol=0, atol=0)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), EqRConfig)
    assert isinstance(AutoModel.from_pretrained(tmp_path), EqRModel)
    assert isinstance(AutoModelForTokenClassification.from_pretrained(tmp_path), EqRForPuzzleSolving)


@pytest.mark.slow
def test_remote_code_loads_without_the_package(tmp_path):
    then = """
        out = model.solve(data["inputs"], depth=3, breadth=2)
        print("REMOTE_OK", tuple(out.answers.shape))
    """
    model = tiny_eqr(random_init=False)
    stdout = remote_code_run(
        model, PUZZLES, "AutoModelForTokenClassification", tmp_path, 6, ', attn_implementation="eager"', then
    )
    assert "REMOTE_OK (3, 16)" in stdout


def test_the_answer_loss_is_the_cross_entropy_of_the_cells_for_any_vocabulary():
    """Through transformers' ``loss_function``: per-cell cross-entropy over the vocabulary, -100 skipped, also after
    the vocabulary changes (the loss reads its width from the config's vocab_size, not from num_labels)."""
    labels = PUZZLES.clone()
    labels[:, ::3] = -100
    for model in (tiny_eqr(halting=False), tiny_eqr(halting=False, vocab_size=13)):
        with torch.no_grad():
            out = model(PUZZLES, labels=labels)
        expected = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(), labels.flatten())
        torch.testing.assert_close(out.lm_loss, expected)
