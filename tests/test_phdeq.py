"""The port-Hamiltonian DEQ: its equilibria, gradients, overrides for the audit, training, save/load, remote code."""

import pytest
import torch
from conftest import X, remote_code_run, tiny_phdeq, training_args
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, Trainer

from equilibria import PHDEQConfig, PHDEQForSequenceClassification, PHDEQModel

Y = torch.tensor([0, 1, 2, 1, 0])


@pytest.mark.parametrize("anchor_target", ["origin", "initializer"])
def test_the_solution_is_an_equilibrium_of_the_dynamics(anchor_target):
    """p* = 0 and the force balances: anchor * (q* - q_a) + grad Phi(q*) = B c, i.e. f(z*) = z*, with the anchor's
    centre q_a the origin or the initialiser's q; a displaced start ends at the same equilibrium (the centre
    stays the initialiser's)."""
    model = tiny_phdeq(anchor_target=anchor_target)
    with torch.no_grad():
        out = model(X)
        displaced = model(X, initial_state=out.start_state + 3 * torch.randn(5, 16))
        core = model.model
        q, p = out.solved_state.chunk(2, dim=-1)
        centre = out.start_state[:, :8] if anchor_target == "initializer" else 0.0
        grad = (
            model.config.anchor * (q - centre)
            + (core.potential_scale * torch.tanh(core.potential_q(q) + core.potential_c(out.context)))
            @ core.potential_q.weight
        )
        balance = grad - core.port(out.context)
    assert bool(out.converged.all()) and not bool(out.diverged.any())
    assert p.abs().max() < 1e-4
    assert balance.abs().max() < 1e-4
    assert (out.solved_state - out.start_state).norm(dim=1).min() > 1e-2  # the initialiser does not start there
    torch.testing.assert_close(displaced.solved_state, out.solved_state, atol=1e-4, rtol=0)


def test_the_anchor_can_pull_toward_the_initialiser_and_be_removed():
    origin, pulled = tiny_phdeq(), tiny_phdeq(anchor_target="initializer")
    with torch.no_grad():
        a, b = origin(X), pulled(X)
    assert torch.equal(a.start_state, b.start_state)  # same seed, same initialiser
    # pulled toward z0's q: closer to the start than the origin-anchored equilibrium
    assert (b.solved_state - b.start_state)[:, :8].norm() < (a.solved_state - a.start_state)[:, :8].norm()
    free = tiny_phdeq(anchor=0.0, anchor_target="initializer")
    with torch.no_grad():
        c = free(X)
    # without the anchor the bounded force of the (initial, small) potential cannot hold q against the drive:
    # there is no equilibrium, and the solves say so: none converges (a state that runs away, whose relative
    # residual shrinks only because its norm grows, is flagged diverged), and f(z) - z stays at the drive's size
    assert not bool(c.converged.any()) and c.abs_residual.min() > 0.1


def test_the_start_anchored_reading_keeps_its_start_when_the_force_vanishes():
    """``dynamics="start_anchored"``: f(s) = s exactly when V is flat (from any start, so z* = s); otherwise the
    equilibrium has p* = p_s and anchor * (q* - q_s) = -dV/dq(q*), within |dV/dq| / anchor of the start."""
    flat = tiny_phdeq(dynamics="start_anchored", potential_scale_init=0.0)
    assert flat.model.port is None  # no port drive in this reading
    with torch.no_grad():
        f, z0 = flat.model.loop_map(X)
        assert torch.equal(f(z0), z0)
        elsewhere = z0 + torch.randn(5, 16)
        out = flat(X, initial_state=elsewhere)
    assert torch.equal(out.solved_state, elsewhere) and bool(out.converged.all())
    model = tiny_phdeq(dynamics="start_anchored", potential_scale_init=0.5)
    with torch.no_grad():
        out = model(X)
        core, s = model.model, out.start_state
        q, p = out.solved_state.chunk(2, dim=-1)
        force = (core.potential_scale * torch.tanh(core.potential_q(q) + core.potential_c(out.context))) @ (
            core.potential_q.weight
        )
        bound = torch.linalg.matrix_norm(core.potential_q.weight, ord=2) * core.potential_scale.norm()
    assert bool(out.converged.all()) and not bool(out.diverged.any())
    torch.testing.assert_close(p, s[:, 8:], atol=1e-4, rtol=0)
    torch.testing.assert_close(model.config.anchor * (q - s[:, :8]), -force, atol=1e-4, rtol=0)
    displacement = (out.solved_state - s).norm(dim=1)
    assert displacement.min() > 1e-3 and bool((displacement <= force.norm(dim=1) / model.config.anchor + 1e-4).all())
    assert bool((force.norm(dim=1) <= bound + 1e-5).all())


def test_an_isolated_initialiser_gets_no_gradient_even_through_the_anchor():
    reached = tiny_phdeq(anchor_target="initializer", initializer_loss_weight=0.0).train()
    reached(X, labels=Y).loss.backward()  # the anchor's centre carries the task loss to the initialiser ...
    assert reached.model.initializer[0].weight.grad.abs().sum() > 0
    isolated = tiny_phdeq(anchor_target="initializer", initializer_loss_weight=0.0, stop_initializer_gradient=True)
    for mode in ("implicit", "unrolled"):
        isolated.train().zero_grad(set_to_none=True)
        out = isolated(X, labels=Y, gradient_mode=mode, num_loops=20 if mode == "unrolled" else None)
        out.loss.backward()
        assert out.initializer_loss is None
        assert all(p.grad is None for p in isolated.model.initializer.parameters())  # ... unless isolated
        assert isolated.model.port.weight.grad.abs().sum() > 0


def test_training_can_start_from_a_noisy_start():
    model = tiny_phdeq(start_noise=0.5, num_loops=0)
    x = torch.randn(4000, 6, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        clean = model(x)  # evaluation mode: no noise
        torch.manual_seed(0)
        noisy = model.train()(x)
    assert torch.equal(clean.solved_state, clean.start_state)
    ratio = (noisy.solved_state - noisy.start_state).norm(dim=1) / noisy.start_state.norm(dim=1)
    assert abs(float(ratio.mean()) - 0.5) < 0.02  # expected norm start_noise * |z0|
    assert torch.equal(noisy.start_state, clean.start_state)  # the reported z0 stays the initialiser's


def test_anderson_and_picard_find_the_same_equilibrium_from_any_start():
    model = tiny_phdeq()
    with torch.no_grad():
        anderson = model(X)
        far = model(X, initial_state=torch.randn(5, 16) * 10).solved_state
        model.config.solver = "picard"
        picard = model(X, num_loops=2000)
    assert torch.allclose(anderson.solved_state, far, atol=1e-4)
    assert torch.allclose(anderson.solved_state, picard.solved_state, atol=1e-4)
    assert picard.solver_steps.float().mean() > anderson.solver_steps.float().mean()


def test_implicit_gradient_matches_backprop_through_a_long_unrolled_solve():
    """Every parameter's gradient (a parameter the implicit gradient leaves without one counts as 0), against
    backprop through an unrolled solve that has converged, so that it no longer depends on its start."""
    model = tiny_phdeq().train()
    grads = {}
    for mode, loops in (("implicit", None), ("unrolled", 300), ("one_step", None)):
        model.zero_grad(set_to_none=True)
        out = model(X, labels=Y, gradient_mode=mode, num_loops=loops)
        out.task_loss.backward()
        if mode == "unrolled":
            assert out.rel_residual.max() < 1e-6  # the reference is a converged solve
        grads[mode] = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()]
        )
    rel = (grads["implicit"] - grads["unrolled"]).norm() / grads["unrolled"].norm()
    assert rel < 1e-3, rel
    cosine = torch.nn.functional.cosine_similarity(grads["one_step"], grads["unrolled"], dim=0)
    assert 0.5 < cosine < 1.0


def test_the_initialiser_learns_only_from_what_reaches_it():
    model = tiny_phdeq().train()
    first = model.model.initializer[0].weight
    out = model(X, labels=Y)  # implicit gradient: only the amortisation loss reaches z0
    out.loss.backward()
    assert out.initializer_loss is not None and first.grad.abs().sum() > 0
    model.zero_grad()
    model(X, labels=Y).task_loss.backward()
    assert first.grad is None or first.grad.abs().sum() == 0
    model.zero_grad()
    model(X, labels=Y, gradient_mode="unrolled", num_loops=20).task_loss.backward()
    assert first.grad.abs().sum() > 0  # the unrolled solve carries the task loss back to z0 ...
    detached = tiny_phdeq(stop_initializer_gradient=True).train()
    detached(X, labels=Y, gradient_mode="unrolled", num_loops=20).task_loss.backward()
    grad = detached.model.initializer[0].weight.grad
    assert grad is None or grad.abs().sum() == 0  # ... unless it is stopped


def test_overrides_for_the_audit():
    model = tiny_phdeq()
    with torch.no_grad():
        out = model(X)
        again = model(X, solved_state=out.solved_state)
        zero_budget = model(X, num_loops=0)
        decoded = model.decode(out.start_state, out.context)
    assert torch.equal(again.logits, out.logits)
    assert torch.equal(zero_budget.solved_state, out.start_state)
    assert torch.allclose(zero_budget.logits, decoded)
    assert int(zero_budget.solver_steps.max()) == 0


def test_sequences_of_vectors_are_mean_pooled_over_the_mask():
    model = tiny_phdeq()
    seq = torch.randn(2, 4, 6)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    with torch.no_grad():
        padded = model(seq, attention_mask=mask).logits
        first = model(seq[:1, :2]).logits
    assert torch.allclose(padded[:1], first, atol=1e-5)


def test_a_diverging_solve_is_flagged_not_returned_as_fine():
    model = tiny_phdeq(solver="picard", num_loops=300)
    model.config.anchor = 100.0  # step^2 * anchor = 25 > 4 - 2 * step * friction: past the bound the config refuses
    with torch.no_grad():
        out = model(X)
    assert bool(out.diverged.all()) and not bool(out.converged.any())
    assert torch.isfinite(out.solved_state).all()  # the lowest-residual iterate, not the blown-up one


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(solver="newton"), "solver must be one of"),
        (dict(gradient_mode="adjoint"), "gradient_mode must be one of"),
        (dict(initializer="random"), "initializer must be one of"),
        (dict(step_size=2.5), "step_size must be greater than 0.0 and smaller than 2.0, got 2.5"),
        (dict(friction=5.0, step_size=0.5), "friction \\* step_size must be < 2"),
        (dict(anchor=-1.0), "anchor must be greater or equal to 0.0 and smaller than inf"),
        (dict(anchor=13.0), r"linearised step is unstable: .* anchor < 12 for step_size=0.5 and friction=1.0"),
        (dict(step_size=1.0, friction=1.5, anchor=1.0), r"anchor < 1 for step_size=1.0 and friction=1.5"),
        (dict(anchor_target="z0"), r"anchor_target must be one of \('origin', 'initializer'\)"),
        (dict(dynamics="start_anchored", anchor_target="initializer"), "anchor_target must be 'origin'"),
        (dict(dynamics="start_anchored", anchor=13.0), r"linearised step is unstable"),
        (dict(dynamics="free"), r"dynamics must be one of \('port_driven', 'start_anchored'\)"),
        (dict(start_noise=-0.1), "start_noise must be greater or equal to 0.0 and smaller than inf"),
        (dict(num_loops=-1), "num_loops must be greater or equal to 0"),
        (dict(initializer="zero", initializer_loss_weight=1.0), "initializer_loss_weight must be 0"),
        (dict(hidden_size=0), "hidden_size must be greater or equal to 1"),
    ],
)
def test_bad_configs_are_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        PHDEQConfig(**overrides)


def test_bad_inputs_are_clear_errors():
    model = tiny_phdeq()
    with pytest.raises(ValueError, match="7 features, the config says input_size=6"):
        model(torch.randn(2, 7))
    with pytest.raises(ValueError, match="must be a float tensor"):
        model(torch.ones(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="num_loops must be an integer >= 0"):
        model(X, num_loops=-2)
    with pytest.raises(ValueError, match="initial_state must have shape"):
        model(X, initial_state=torch.zeros(5, 3))
    with pytest.raises(ValueError, match="labels must have shape"):
        model(X, labels=torch.zeros(5, 2, dtype=torch.long))


def test_saved_equals_loaded_and_auto_classes(tmp_path):
    model = tiny_phdeq(seed=3)
    model.save_pretrained(tmp_path / "ckpt")
    assert AutoConfig.from_pretrained(tmp_path / "ckpt").model_type == "phdeq"
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "ckpt").eval()
    assert isinstance(loaded, PHDEQForSequenceClassification)
    with torch.no_grad():
        assert torch.equal(model(X).logits, loaded(X).logits)
    assert isinstance(AutoModel.from_pretrained(tmp_path / "ckpt"), PHDEQModel)


def test_trains_with_the_hf_trainer(tmp_path):
    """The plain Trainer fits a small problem (label = which of three input coordinates is largest)."""
    from datasets import Dataset

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 6, generator=g)
    data = Dataset.from_dict({"inputs": x.tolist(), "labels": x[:, :3].argmax(1).tolist()})
    model = tiny_phdeq(num_loops=50, solver_tol=1e-4).train()
    args = training_args(tmp_path, max_steps=60, per_device_train_batch_size=32, learning_rate=1e-2, logging_steps=10)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x).logits.argmax(-1) == x[:, :3].argmax(1)).float().mean()
    assert accuracy > 0.8, accuracy


def test_gradient_norm_callback_measures_each_path(tmp_path):
    """Step 1's logged norms are those of a full-batch backward on the initial model (no clipping); an isolated
    initialiser gets none, the dynamics and the direct path do."""
    import copy

    from datasets import Dataset

    from equilibria.trainers import GradientNormCallback, group_norm, phdeq_gradient_groups

    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(0))
    y = x[:, :3].argmax(1)
    data = Dataset.from_dict({"inputs": x.tolist(), "labels": y.tolist()})
    model = tiny_phdeq(
        num_loops=50,
        solver_tol=1e-4,
        anchor_target="initializer",
        initializer_loss_weight=0.0,
        stop_initializer_gradient=True,
    ).train()
    reference = copy.deepcopy(model)
    reference(x, labels=y).loss.backward()
    expected = {name: float(group_norm(get())) for name, get in phdeq_gradient_groups(reference).items()}
    args = training_args(
        tmp_path, max_steps=3, per_device_train_batch_size=32, learning_rate=1e-2, max_grad_norm=0.0, logging_steps=1
    )
    callback = GradientNormCallback()
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    assert [h["step"] for h in callback.history] == [1, 2, 3]
    assert set(expected) == {"dynamics", "state_readout", "encoder", "direct_path", "initializer"}
    for name, value in expected.items():
        assert callback.history[0][name] == pytest.approx(value, rel=1e-4, abs=1e-12), name
    assert expected["initializer"] == 0.0 and expected["dynamics"] > 0 and expected["direct_path"] > 0
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 3 and logged[0]["grad_norm/dynamics"] == pytest.approx(expected["dynamics"], rel=1e-4)


def test_the_start_anchored_reading_trains_and_reports_its_gradient_paths(tmp_path):
    """Without a port, the dynamics' gradient group is the potential's; the Trainer runs and logs every path."""
    from datasets import Dataset

    from equilibria.trainers import GradientNormCallback

    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(0))
    data = Dataset.from_dict({"inputs": x.tolist(), "labels": x[:, :3].argmax(1).tolist()})
    model = tiny_phdeq(dynamics="start_anchored", num_loops=50, solver_tol=1e-4).train()
    callback = GradientNormCallback()
    args = training_args(tmp_path, max_steps=2, per_device_train_batch_size=16, logging_steps=1)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
    assert [h["step"] for h in callback.history] == [1, 2]
    assert all(h["dynamics"] > 0 and h["initializer"] > 0 for h in callback.history)


@pytest.mark.slow
def test_remote_code_loads_without_the_package(tmp_path):
    stdout = remote_code_run(
        tiny_phdeq(seed=2), X, "AutoModelForSequenceClassification", tmp_path, then='print("REMOTE_OK")'
    )
    assert "REMOTE_OK" in stdout


@pytest.mark.slow
@pytest.mark.two_process("phdeq_ddp")
def test_two_process_training_keeps_replicas_identical(two_process_run):
    r0, r1, _ = two_process_run
    assert r0["world"] == r1["world"] == 2
    for name, p0 in r0["params"].items():
        assert torch.equal(p0, r1["params"][name]), name
    from equilibria.tasks import reachability_input_size

    torch.manual_seed(0)
    config = PHDEQConfig(input_size=reachability_input_size(6), hidden_size=8, intermediate_size=16, num_labels=2)
    start = PHDEQForSequenceClassification(config).state_dict()
    changed = [n for n, p in r0["params"].items() if not torch.equal(p, start[n])]
    assert "model.initializer.0.weight" in changed and "classifier.2.weight" in changed  # both losses trained


@pytest.mark.parametrize("num_labels", [1, 2, 3])
def test_the_task_loss_is_the_cross_entropy_of_the_classes_and_leaves_the_config_alone(num_labels):
    """The loss goes through transformers' ``loss_function`` (sequence classification) as single-label
    cross-entropy for every allowed ``num_labels`` (1 included: not the regression transformers infers for it)."""
    model = tiny_phdeq(num_labels=num_labels, initializer_loss_weight=0.0)
    labels = Y % num_labels
    before = model.config.to_dict()
    with torch.no_grad():
        out = model(X, labels=labels)
    torch.testing.assert_close(out.task_loss, torch.nn.functional.cross_entropy(out.logits.float(), labels))
    assert model.config.to_dict() == before
    with pytest.raises(ValueError, match="problem_type must be 'single_label_classification'"):
        PHDEQConfig(input_size=6, num_labels=2, problem_type="regression")
