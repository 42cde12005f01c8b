"""Claims about the shared core: one loop-map protocol, one fixed-point entry with its gradients and telemetry,
one residual, one family registry, configs validated by their hooks, renamed keys still loading."""

import warnings

import pytest
import torch
import transformers
from conftest import X as PHDEQ_X
from conftest import tiny_attractor, tiny_eqr, tiny_ouro, tiny_phdeq

from equilibria import AttractorConfig, EqRConfig, OuroConfig, PHDEQConfig
from equilibria.families import FAMILIES, family_record, model_task
from equilibria.modeling.solvers import SolverStats, fixed_point, residual

IDS = torch.tensor([[5, 9, 13, 7, 22, 30, 11, 4]])
PUZZLES = torch.randint(1, 11, (3, 16), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("family", ["ouro", "attractor_lm", "eqr", "phdeq"])
def test_every_family_exposes_its_loop_as_a_loop_map_from_its_start(family):
    """``f, z0 = model.loop_map(...)``: z0 is the state the forward starts from, and one application of f is one step
    of the forward's loop."""
    with torch.no_grad():
        if family == "ouro":
            model = tiny_ouro()
            f, z0 = model.model.loop_map(IDS)
            out = model.model(IDS, num_loops=1, output_hidden_states=True)
            torch.testing.assert_close(z0, out.hidden_states[0])
            torch.testing.assert_close(f(z0), out.last_hidden_state, rtol=1e-5, atol=1e-5)
        elif family == "attractor_lm":
            model = tiny_attractor()
            f, z0 = model.model.loop_map(IDS)
            out = model.model(IDS, use_cache=False, output_hidden_states=True)
            torch.testing.assert_close(z0, out.proposal)
            torch.testing.assert_close(
                model.model.norm(f(out.hidden_states[-1])), out.last_hidden_state, atol=1e-4, rtol=0
            )
        elif family == "eqr":
            model = tiny_eqr(inertia=0.3)  # the damped update is one step
            f, z0 = model.model.loop_map(PUZZLES, generator=torch.Generator().manual_seed(3))
            out = model.model(PUZZLES, num_loops=1, noise=0.0, generator=torch.Generator().manual_seed(3))
            torch.testing.assert_close(f(z0), out.last_hidden_state)
        else:
            model = tiny_phdeq()
            f, z0 = model.model.loop_map(PHDEQ_X)
            out = model.model(PHDEQ_X)
            torch.testing.assert_close(z0, out.start_state)
            torch.testing.assert_close(f(out.last_hidden_state), out.last_hidden_state, atol=1e-4, rtol=0)


def test_fixed_point_reports_the_implicit_backward_solve_once_backward_has_run():
    w = torch.nn.Parameter(0.5 * torch.eye(4, dtype=torch.float64))
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def f(z):
        return torch.tanh(z @ w.T + x)

    z, stats = fixed_point(f, torch.zeros_like(x), max_iter=100, tol=1e-10, mode="implicit")
    assert (stats.backward.steps == -1).all() and stats.backward.rel_residual.isnan().all()
    telemetry = stats.telemetry()
    z.sum().backward()
    assert (stats.backward.steps > 0).all() and (stats.backward.rel_residual <= 1e-10).all()
    assert telemetry["backward_steps"] is stats.backward.steps  # the output's tensors were filled in place
    with torch.no_grad():
        _, plain = fixed_point(f, torch.zeros_like(x), max_iter=100, tol=1e-10, mode="implicit")
    assert plain.backward is None  # no graph, no backward solve


def test_a_diverging_solve_returns_its_lowest_residual_iterate_in_every_mode():
    scale = torch.nn.Parameter(torch.tensor(3.0, dtype=torch.float64))

    def f(z):
        return scale * z + 1.0

    z0 = torch.zeros(2, 3, dtype=torch.float64)
    for mode in ("one_step", "implicit"):
        z, stats = fixed_point(f, z0, max_iter=30, tol=1e-8, mode=mode, solver="picard")
        assert stats.diverged.all() and torch.isfinite(z).all()
        assert torch.all(residual(z, f(z))[0] <= residual(z0, f(z0))[0])


def test_one_residual_definition_for_the_solvers_eqr_and_ouro():
    model = tiny_ouro()
    with torch.no_grad():
        out = model.model(IDS, num_loops=3, output_hidden_states=True)
    before, after = out.hidden_states[2], out.hidden_states[3]
    torch.testing.assert_close(out.loop_residual, residual(before, after, keep_dims=2)[1])
    eqr = tiny_eqr(inertia=0.4)
    z0 = torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        f, _ = eqr.model.loop_map(PUZZLES)
        step = eqr.model(PUZZLES, state=z0, num_loops=1, noise=0.0)
        torch.testing.assert_close(step.residuals[:, 0], residual(z0, f(z0))[1])
    stats = SolverStats.measure(z0, f(z0), steps=1, tol=1e-3)
    torch.testing.assert_close(stats.rel_residual, step.residuals[:, 0])


def test_outputs_lead_with_the_fields_transformers_puts_first():
    """Tuple outputs (``return_dict=False``) index like transformers': loss, logits / last_hidden_state first."""
    with torch.no_grad():
        lm = tiny_attractor()(IDS, labels=IDS, return_dict=False)
        eqr = tiny_eqr()(PUZZLES, labels=PUZZLES, return_dict=False)
        phdeq = tiny_phdeq()(PHDEQ_X, labels=torch.tensor([0, 1, 2, 1, 0]), return_dict=False)
        base = tiny_phdeq().model(PHDEQ_X, return_dict=False)
    for loss, logits in (lm[:2], eqr[:2], phdeq[:2]):
        assert loss.dim() == 0 and logits.dim() >= 2
    assert base[0].shape == (5, 16)  # last_hidden_state: (batch, 2 * hidden_size)


@pytest.mark.parametrize(
    "config_class, old, new, value",
    [
        (AttractorConfig, "damping", "solver_mixing", 0.5),
        (EqRConfig, "damping", "inertia", 0.3),
        (PHDEQConfig, "damping", "friction", 0.7),
    ],
)
def test_configs_saved_with_the_old_damping_key_still_load(tmp_path, config_class, old, new, value):
    import json

    saved = config_class().to_dict()
    saved.pop(new)
    saved[old] = value
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.warns(FutureWarning, match=f"'{old}' was renamed to '{new}'"):
        config = config_class.from_pretrained(tmp_path)
    assert getattr(config, new) == value and not hasattr(config, old)
    config.save_pretrained(tmp_path / "again")
    written = json.loads((tmp_path / "again" / "config.json").read_text())
    assert written[new] == value and old not in written


@pytest.mark.parametrize(
    "config_class, key, value, message",
    [
        (OuroConfig, "total_ut_steps", 0, "OuroConfig: total_ut_steps must be greater or equal to 1, got 0"),
        (
            OuroConfig,
            "exit_loss",
            "mean",
            r"OuroConfig: exit_loss must be one of \('expected_logits', 'final', 'expected'\), got 'mean'",
        ),
        (OuroConfig, "num_key_value_heads", 0, "OuroConfig: num_key_value_heads must be greater or equal to 1"),
        (
            AttractorConfig,
            "solver_mixing",
            1.5,
            "AttractorConfig: solver_mixing must be greater than 0.0 and smaller or equal to 1.0, got 1.5",
        ),
        (AttractorConfig, "solver", "newton", r"AttractorConfig: solver must be one of \('anderson', 'picard'\)"),
        (EqRConfig, "init_std", -1.0, "EqRConfig: init_std must be greater than 0.0 and smaller than inf, got -1.0"),
        (EqRConfig, "num_loops", "8", "EqRConfig: num_loops must be of type int, got '8'"),
        (PHDEQConfig, "step_size", 2.0, "PHDEQConfig: step_size must be greater than 0.0 and smaller than 2.0"),
        (
            PHDEQConfig,
            "hidden_act",
            "swish",
            r"PHDEQConfig: hidden_act must be one of \('gelu', 'silu', 'relu', 'tanh'\)",
        ),
    ],
)
def test_a_value_out_of_its_keys_range_is_a_value_error_naming_the_key(tmp_path, config_class, key, value, message):
    """A key's own range, choices and type are its field's (transformers' ``interval``, ``Literal``): checked at
    construction, when loading and on assignment, each time as a ``ValueError`` naming the key and what it allows."""
    import json

    with pytest.raises(ValueError, match=message):
        config_class(**{key: value})
    saved = config_class().to_dict()
    saved[key] = value
    with pytest.raises(ValueError, match=message):
        config_class.from_dict(saved)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=message):
        config_class.from_pretrained(tmp_path)
    config = config_class()
    with pytest.raises(ValueError, match=message):
        setattr(config, key, value)  # an edit by hand is refused, and the config keeps its value
    assert getattr(config, key) == getattr(config_class(), key)


@pytest.mark.parametrize(
    "config_class, edits, message",
    [
        (OuroConfig, dict(num_key_value_heads=3), r"num_key_value_heads \(3\) must divide num_attention_heads \(16\)"),
        (AttractorConfig, dict(hidden_size=500), r"num_attention_heads \(8\) must divide hidden_size \(500\)"),
        (EqRConfig, dict(pad_token_id=11), r"EqRConfig: pad_token_id must be in \[0, vocab_size\), got 11"),
        (PHDEQConfig, dict(initializer="zero"), "initializer_loss_weight must be 0 with initializer='zero'"),
    ],
)
def test_keys_that_do_not_fit_together_are_a_value_error_from_validate_and_save_pretrained(
    tmp_path, config_class, edits, message
):
    """Checks relating several keys are the class's ``validate_*`` hooks: a ``ValueError`` (not huggingface_hub's
    ``StrictDataclassClassValidationError``) at construction, on ``config.validate()`` and from ``save_pretrained``
    after an edit by hand (each key alone is allowed)."""
    with pytest.raises(ValueError, match=message):
        config_class(**edits)
    config = config_class()
    for key, value in edits.items():
        setattr(config, key, value)
    with pytest.raises(ValueError, match=message):
        config.validate()
    with pytest.raises(ValueError, match=message):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_a_renamed_key_is_checked_under_its_new_name():
    with pytest.warns(FutureWarning, match="'damping' was renamed to 'solver_mixing'"):
        with pytest.raises(ValueError, match="AttractorConfig: solver_mixing must be greater than 0.0"):
            AttractorConfig(damping=0.0)


def test_the_registry_is_what_transformers_knows():
    import equilibria  # noqa: F401
    from equilibria.diagnostics import adapter_class_for
    from equilibria.trainers import trainer_for

    for model_type, family in FAMILIES.items():
        config = transformers.AutoConfig.for_model(model_type)
        assert type(config) is family.config_class
        assert transformers.AutoModel._model_mapping[family.config_class] is family.base_class
        for head in family.heads:
            assert getattr(transformers, head.auto_class)._model_mapping[family.config_class] is head.model_class
        assert family_record(config) is family and model_task(config) == family.default_task
        assert trainer_for(model_type).__name__.endswith("Trainer")
        for head in family.heads:
            assert adapter_class_for(model_type, head.kind).__name__.endswith("Adapter")
    with pytest.raises(ValueError, match="it is not an equilibria family"):
        family_record(transformers.LlamaConfig())


def test_tasks_import_nothing_from_the_models():
    import ast
    from pathlib import Path

    import equilibria.tasks

    for path in Path(equilibria.tasks.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = "." * node.level + (node.module or "")
                assert "modeling" not in target and "families" not in target, (path.name, target)


def test_eqr_takes_its_puzzles_as_inputs_or_as_input_ids():
    model = tiny_eqr()
    assert model.main_input_name == "inputs"
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        by_inputs = model(PUZZLES, generator=torch.Generator().manual_seed(0)).logits
        by_ids = model(input_ids=PUZZLES, generator=generator).logits
    torch.testing.assert_close(by_inputs, by_ids)
    with pytest.raises(ValueError, match="exactly one of inputs or input_ids"):
        model(PUZZLES, input_ids=PUZZLES)


def test_a_saved_model_is_evaluated_on_the_task_it_was_trained_on(tmp_path, capsys):
    from equilibria.cli import main

    torch.manual_seed(0)
    # 7x7 mazes: at 5x5 the generator has too few mazes distinct up to symmetry to draw even a few
    config = EqRConfig(vocab_size=6, max_seq_len=49, hidden_size=16, intermediate_size=32, num_attention_heads=2)
    model = FAMILIES["eqr"].heads[0].model_class(config)
    model.save_pretrained(tmp_path / "unnamed")
    assert main(["eval", str(tmp_path / "unnamed"), "--loops", "1", "--num-examples", "2"]) == 2
    assert "pass the task it was trained on" in capsys.readouterr().err  # sudoku by default: does not fit
    model.config.equilibria_task = "maze"
    model.save_pretrained(tmp_path / "maze")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["eval", str(tmp_path / "maze"), "--loops", "1", "--num-examples", "2"]) == 0
    assert "loop scaling of" in capsys.readouterr().out


def test_ouro_takes_num_loops_as_its_total_ut_steps():
    """``num_loops``, the loop count's name everywhere else, sets Ouro's ``total_ut_steps`` and is checked the same."""
    config = OuroConfig(num_loops=6)
    assert config.total_ut_steps == 6 and "num_loops" not in config.to_dict()
    with pytest.raises(ValueError, match=r"total_ut_steps must be greater or equal to 1, got 0\. \(num_loops sets"):
        OuroConfig(num_loops=0)


def test_a_config_subclass_can_be_strict_again():
    """``raise_value_errors`` replaces ``@strict``'s ``validate`` and leaves huggingface_hub's mark of its own on it,
    so a subclass of a family's config can be decorated with ``@strict`` again (as transformers' configs are); its
    hooks still run (raised through huggingface_hub's wrapper, the subclass not being wrapped by us)."""
    from huggingface_hub.dataclasses import strict
    from huggingface_hub.errors import StrictDataclassClassValidationError

    from equilibria import PHDEQConfig

    @strict(accept_kwargs=True)
    class Mine(PHDEQConfig):
        pass

    assert Mine(input_size=4).friction == PHDEQConfig(input_size=4).friction
    with pytest.raises(StrictDataclassClassValidationError, match="friction \\* step_size must be < 2"):
        Mine(input_size=4, friction=4.0, step_size=1.0)
