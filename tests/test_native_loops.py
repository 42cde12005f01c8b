"""The looped LMs transformers ships (Dory, HRM-text, Inkling2-loop) driven through ``equilibria.looped``: a loop
count per call, cache included, equal to setting the config key and reloading; the loop map and the audit."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import tiny_native
from transformers import AutoModelForCausalLM

from equilibria import looped
from equilibria.diagnostics import audit
from equilibria.families import FAMILIES, family_record, running_loops
from equilibria.loops import TransformersLoop, base_model_of, transformers_model_types

NATIVE = [t for t in ("dory", "hrm_text", "inkling2_loop_text") if t in FAMILIES]
IDS = torch.randint(3, 20, (2, 7), generator=torch.Generator().manual_seed(0))


def protocol_of(model_or_type):
    """The loop protocol of a model's (or model type's) family."""
    return family_record(model_or_type).protocol


def reloaded_at(model, folder, num_loops: int):
    """The saved model loaded with its loop count set in the config (HRM-text: with the cache slots it needs)."""
    protocol = protocol_of(model)
    values = protocol.loop_config(model.config, num_loops)
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", **values).eval()


def test_every_native_architecture_of_the_installed_transformers_has_a_record_and_a_protocol():
    import transformers

    assert set(transformers_model_types()) == {"dory", "hrm_text", "inkling2_loop_text"}
    for model_type in NATIVE:
        assert isinstance(FAMILIES[model_type].protocol, TransformersLoop)
        assert protocol_of(model_type).model_types == (model_type,)
    assert ("dory" in FAMILIES) == hasattr(transformers, "DoryForCausalLM")


@pytest.mark.parametrize("model_type", NATIVE)
def test_num_loops_per_call_equals_setting_the_config_and_reloading(model_type, tmp_path):
    """forward and generate (with its cache) at 1 and 5 passes equal the saved model reloaded with that count; the
    config is untouched afterwards, and the folder saved after ``looped`` is the plain transformers model."""
    model = tiny_native(model_type, num_loops=3)
    model.save_pretrained(tmp_path / "plain")
    before = json.loads((tmp_path / "plain" / "config.json").read_text())
    looped(model)
    for loops in (1, 5):
        other = reloaded_at(model, tmp_path / "plain", loops)
        with torch.no_grad():
            ours = model(IDS, num_loops=loops)
            assert ours.num_loops == loops and torch.equal(ours.logits, other(IDS).logits)
            cached = model.generate(IDS, num_loops=loops, max_new_tokens=5, do_sample=False)
            uncached = other.generate(IDS, max_new_tokens=5, do_sample=False, use_cache=False)
        assert torch.equal(cached, uncached)
    assert model.config.to_diff_dict() == AutoModelForCausalLM.from_pretrained(tmp_path / "plain").config.to_diff_dict()
    model.save_pretrained(tmp_path / "after")
    assert json.loads((tmp_path / "after" / "config.json").read_text()) == before
    assert not list((tmp_path / "after").glob("*.py"))  # no remote code: the architecture is in transformers


@pytest.mark.parametrize("model_type", NATIVE)
def test_a_cache_filled_at_another_loop_count_is_refused_and_a_fitting_one_continues(model_type):
    model = looped(tiny_native(model_type, num_loops=2))
    with torch.no_grad():
        whole = model(torch.cat([IDS, IDS[:, :1]], 1), num_loops=3).logits[:, -1]
        prefix = model(IDS, num_loops=3, use_cache=True)
        with pytest.raises(ValueError, match="does not fit num_loops=5"):
            model(IDS[:, :1], num_loops=5, cache=prefix.cache)
        step = model(IDS[:, :1], num_loops=3, cache=prefix.cache).logits[:, -1]
    torch.testing.assert_close(step, whole, rtol=1e-4, atol=1e-4)  # cache equals no cache


def test_dory_last_loop_cache_takes_any_count_as_its_reloaded_model_does(tmp_path):
    """In ``last_loop`` mode one cache serves every count: continuing at 4 passes from a past written at 2 equals
    the model reloaded at 4 continuing from the same past."""
    model = tiny_native("dory", num_loops=2, recurrent_kv_cache_mode="last_loop")
    model.save_pretrained(tmp_path)
    looped(model)
    with torch.no_grad():
        prefix = model(IDS, num_loops=2, use_cache=True).cache
        same_past = copy.deepcopy(prefix)
        ours = model(IDS[:, :1], num_loops=4, cache=prefix).logits
        theirs = reloaded_at(model, tmp_path, 4)(IDS[:, :1], cache=same_past).logits
    assert torch.equal(ours, theirs)


def test_looped_refuses_a_model_that_is_not_a_transformers_looped_lm():
    from conftest import tiny_ouro
    from transformers import LlamaConfig, LlamaForCausalLM

    for model in (tiny_ouro(), LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                              num_attention_heads=2, vocab_size=32))):  # fmt: skip
        with pytest.raises(ValueError, match=r"supported ones are \['dory', 'hrm_text', 'inkling2_loop_text'\]"):
            looped(model)
    with pytest.raises(TypeError, match="looped\\(\\) takes a model .*got str 'dory'; load one first"):
        looped("dory")
    model = looped(tiny_native("dory"))
    with pytest.raises(ValueError, match="num_loops must be an integer >= 1"):
        model(IDS, num_loops=0)


@pytest.mark.parametrize("model_type", NATIVE)
def test_the_loop_map_iterated_from_its_start_gives_the_forwards_states(model_type):
    """``f^t(h_0)`` is the state the model's own forward reaches after ``t`` more passes (Inkling2-loop's map
    starts after the first pass, which reads no messages), and decoding the last gives the forward's logits."""
    model = looped(tiny_native(model_type, num_loops=4))
    protocol, base = protocol_of(model), base_model_of(model)
    with torch.no_grad(), protocol.recorder(base) as recorded:
        logits = model(IDS).logits
    with torch.no_grad():
        f, state = protocol.loop_map(model, {"input_ids": IDS})
        for passes in range(protocol.start_after_passes + 1, 5):
            state = f(state)
            torch.testing.assert_close(state, protocol.state_after(base, recorded, passes), rtol=0, atol=1e-6)
        with running_loops(model, 1), protocol.substitute(base, state):
            torch.testing.assert_close(model(IDS).logits, logits, rtol=0, atol=1e-5)
    assert state.shape[-1] == protocol.state_width(model.config)


@pytest.mark.parametrize("model_type", NATIVE)
def test_the_audit_reads_the_first_and_last_pass_and_decodes_through_the_models_own_layers(model_type):
    """On a random model labelled with its own answers: the audit reproduces them (accuracy 1), ``z0`` decodes to
    the one-pass model's answers (T1's accuracy is theirs), and every sequence used all the passes."""
    from conftest import lm_data

    model = tiny_native(model_type, num_loops=4)
    data = lm_data(model, n=16)
    report = audit(model, data, progress=False, batch_size=8, probe=False)
    assert report.accuracy == 1.0 and report.max_iter == 4 and report.iterations["mean_steps"] == 4
    ids, labels = torch.tensor(data["input_ids"]), torch.tensor(data["labels"])[:, 1:]
    with torch.no_grad():
        one_pass = looped(model)(ids, num_loops=1).logits.argmax(-1)[:, :-1]
    right = ((one_pass == labels) | (labels == -100)).all(1).double().mean().item()
    assert report.substitution["accuracy"] == pytest.approx(right)
    assert not report.family["t4_applies"] and report.family["family"] == model_type


def stars_arguments(out, **overrides):
    from equilibria.trainers import StarsTrainingArguments

    kwargs = dict(output_dir=str(out), max_steps=3, per_device_train_batch_size=4, learning_rate=3e-3, report_to=[],
                  use_cpu=True, save_strategy="no", logging_steps=1, min_loops=1, max_loops=5, jsrr_weight=0.3, seed=0,
                  disable_tqdm=True)  # fmt: skip
    return StarsTrainingArguments(**{**kwargs, **overrides})


@pytest.mark.parametrize("model_type", NATIVE)
def test_stars_trains_a_transformers_looped_lm_at_the_sampled_counts_with_the_penalty(model_type, tmp_path):
    """``StarsTrainer`` takes the transformers model as it is (it applies ``looped``): each step runs the sampled
    count, the spectral radius of the loop map is logged, and the penalty's gradient reaches the loop's weights."""
    from conftest import ragged_lm_rows
    from datasets import Dataset

    from equilibria.trainers import StarsTrainer, sample_num_loops

    model = tiny_native(model_type, num_loops=2)
    trainer = StarsTrainer(
        model=model, args=stars_arguments(tmp_path), train_dataset=Dataset.from_dict(ragged_lm_rows())
    )
    seen = []
    model.register_forward_hook(lambda _m, _a, out: seen.append(out.num_loops) if model.training else None)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    a = trainer.args
    expected = [
        sample_num_loops(s, a.seed, a.loop_log_mean, a.loop_log_std, a.min_loops, a.max_loops) for s in range(3)
    ]
    assert seen == expected and len(set(seen)) > 1, seen
    assert len(logged) == 3 and all(h["spectral_radius"] > 0 and math.isfinite(h["loss"]) for h in logged)
    assert model.config.to_diff_dict()[protocol_of(model).loops_key] == 2  # the config keeps its own count


def test_the_penalty_on_a_transformers_looped_lm_is_the_radius_of_its_loop_maps_jacobian():
    """``forward(spectral_radius_iters=K)`` estimates the radius at the last state by the same power iteration as
    :func:`~equilibria.trainers.spectral_radius` on the loop map: the two agree."""
    from equilibria.trainers import spectral_radius

    model = looped(tiny_native("dory", num_loops=3))
    start = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1))
    out = model(IDS, spectral_radius_iters=6, spectral_radius_start=start)
    f, state = protocol_of(model).loop_map(model, {"input_ids": IDS})
    for _ in range(3):
        state = f(state)
    direct = spectral_radius(f, state.detach(), num_iters=6, start=start)
    torch.testing.assert_close(out.spectral_radius, direct, rtol=1e-5, atol=1e-6)
    assert out.spectral_radius.requires_grad  # a penalty: differentiable in the weights
    rows = torch.tensor([1])  # jsrr_sample_fraction < 1: the estimate on some rows alone, as on the whole batch
    picked = model(IDS, spectral_radius_iters=6, spectral_radius_start=start, spectral_radius_rows=rows)
    torch.testing.assert_close(picked.spectral_radius, direct[1:], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.two_process("native_stars_ddp")
def test_stars_under_torchrun_keeps_the_replicas_of_transformers_looped_lms_identical(two_process_run, tmp_path):
    """torchrun --nproc_per_node 2 (gloo, CPU), Dory and HRM-text: the penalty computed in the looped forward is
    all-reduced with the LM loss, so both replicas hold the same parameters, moved from the start, and they equal
    one process accumulating the two halves."""
    from equilibria.trainers import StarsTrainer

    r0, r1, _ = two_process_run
    assert r0["world"] == r1["world"] == 2
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "scripts"))
    try:
        import stars_ddp
    finally:
        sys.path.pop(0)
    for model_type in ("dory", "hrm_text"):
        start = tiny_native(model_type, num_loops=2).state_dict()
        params = r0[model_type]["params"]
        for name, p0 in params.items():
            assert torch.equal(p0, r1[model_type]["params"][name]), (model_type, name)
        assert any(not torch.equal(p, start[n]) for n, p in params.items())
        assert all(h["spectral_radius"] > 0 for h in r0[model_type]["log"] if "loss" in h)
        single = tiny_native(model_type, num_loops=2)
        args = stars_ddp.arguments(tmp_path / f"single_{model_type}", max_loops=4, gradient_accumulation_steps=2,
                                   ddp_backend=None)  # fmt: skip
        StarsTrainer(model=single, args=args, train_dataset=stars_ddp.data()).train()
        for name, p in single.named_parameters():
            torch.testing.assert_close(params[name], p.detach(), rtol=1e-5, atol=1e-5, msg=(model_type, name))


@pytest.mark.slow
@pytest.mark.parametrize("model_type", NATIVE)
def test_the_cli_trains_evaluates_audits_and_cards_a_transformers_looped_lm(model_type, tmp_path, capsys):
    """``equilibria train --family`` builds transformers' class and trains it with STARS; the folder holds no code of
    ours and its card loads it without remote code; ``eval`` and ``audit`` read it at other counts; ``train
    --model_name_or_path`` fine-tunes it at another saved count (HRM-text: with its cache slots)."""
    from huggingface_hub import ModelCard

    from equilibria.cli import main

    out, tuned = tmp_path / "out", tmp_path / "tuned"
    common = ["--task", "addition", "--digits", "1", "--train_size", "60", "--test_size", "20", "--max_steps", "2",
              "--use_cpu", "--report_to", "none",
              "--disable_tqdm", "true", "--eval_loops", "1,3", "--per_device_train_batch_size", "8"]  # fmt: skip
    assert main(["train", "--family", model_type, "--num_loops", "2", *common, "--output_dir", str(out)]) == 0
    assert not list(out.glob("*.py")) and "remote code" not in capsys.readouterr().out
    card = ModelCard.load(out / "README.md").text
    assert "trust_remote_code" not in card and "equilibria.looped(model)" in card
    assert main(["eval", str(out), "--loops", "1,5", "--num-examples", "8", "--output-dir", str(tmp_path)]) == 0
    assert set(json.loads((tmp_path / "eval_loop_scaling.json").read_text())["accuracy"]) == {"1", "5"}
    assert main(["audit", str(out), "--num-examples", "8", "--output-dir", str(out)]) == 0
    assert json.loads((out / "audit.json").read_text())["family"]["family"] == model_type
    assert main(["card", str(out)]) == 0  # the card of the folder: its loop scaling, audit and training history
    card = ModelCard.load(out / "README.md").text
    assert "## Computation audit" in card and "| num_loops | accuracy |" in card and "StarsTrainer" in card
    assert "trust_remote_code" not in card
    argv = ["train", "--model_name_or_path", str(out), "--num_loops", "4", *common, "--output_dir", str(tuned)]
    assert main(argv) == 0
    reloaded = AutoModelForCausalLM.from_pretrained(tuned)
    assert getattr(reloaded.config, protocol_of(model_type).loops_key) == 4
    with torch.no_grad():  # the saved count runs as saved, cache included
        generated = reloaded.generate(IDS[:, :3], max_new_tokens=3, do_sample=False)
        assert torch.equal(generated, reloaded.generate(IDS[:, :3], max_new_tokens=3, do_sample=False, use_cache=False))


@pytest.mark.slow
def test_the_stars_benchmark_quick_mode_trains_a_dory(tmp_path):
    """``bench_stars_addition.py --family dory``: transformers' class through the same runs, JSON and summary."""
    from conftest import load_benchmark, read_benchmark_json

    bench = load_benchmark("bench_stars_addition")
    results = bench.main(["--quick", "--family", "dory", "--kinds", "plain,stars", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "results.json", results)
    assert set(saved["runs"]) == {"plain", "stars"}
    for seeds in saved["runs"].values():
        for run in seeds.values():
            assert run["family"] == "dory" and set(run["accuracy"]) == {"1", "2", "4"}
            assert run["dynamics"]["spectral_radius"]  # the trajectory diagnostic read the loop map


CONTROLS = Path(__file__).resolve().parent / "data"


def control_audit_flags() -> list[str]:
    """The audit every control gets (``build_audit_control.py``'s ``AUDIT``: 1000 fresh problems, data seed 7, fixed
    for every family before any control was audited on them)."""
    from conftest import load_benchmark

    return list(load_benchmark("build_audit_control").AUDIT)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", NATIVE)
def test_the_trained_controls_of_transformers_looped_lms_get_their_verdicts(model_type, tmp_path):
    """The trained controls (``benchmarks/build_audit_control.py --family F``), trained at 4 passes on 2-digit
    addition, each better at four passes than at one on problems it never trained on, audited as the builder
    audits every control. Dory and HRM-text fail at one pass, and ``equilibria audit`` calls their loops
    `computing`: substituting the one-pass state costs accuracy, and the probe agrees. Inkling2-loop's layers do
    most of the work in their first pass: T1 costs a few points, no second sign agrees, and the audit does not
    decide (`inconclusive`)."""
    from equilibria.cli import main

    folder = CONTROLS / f"{model_type}-audit-control"
    assert sum(f.stat().st_size for f in folder.iterdir()) < 1_100_000 and not list(folder.glob("*.py"))
    argv = [*control_audit_flags(), "--output-dir", str(tmp_path)]
    assert main(["eval", str(folder), "--loops", "1,4", *argv]) == 0
    accuracy = json.loads((tmp_path / "eval_loop_scaling.json").read_text())["accuracy"]
    strong = model_type != "inkling2_loop_text"
    assert accuracy["4"] > accuracy["1"] + (0.3 if strong else 0.0) and (accuracy["1"] < 0.1 or not strong), accuracy
    assert main(["audit", str(folder), *argv]) == 0
    report = json.loads((tmp_path / "audit.json").read_text())
    assert report["verdict"] == ("computing" if strong else "inconclusive"), report["reasons"]
    assert report["substitution"]["change_points"] < (-30 if strong else 0)
    assert any("independently" in r for r in report["reasons"]) == strong


@pytest.mark.slow
def test_a_trained_dory_whose_loop_returns_its_start_is_a_lazy_identity_collapse(tmp_path):
    """The negative control (``build_audit_control.py --family dory --lazy``): a Dory trained with its recurrent
    layers' update rates at zero, so that every pass returns its start and only the input and output layers learn.
    It beats chance at every count alike, and the audit calls its loop a lazy identity collapse, not computing."""
    from equilibria.cli import main

    folder = CONTROLS / "dory-lazy-audit-control"
    model = AutoModelForCausalLM.from_pretrained(folder)
    config = model.config
    for layer in model.model.layers[config.n_input_layers : config.n_input_layers + config.n_recurrent_layers]:
        assert not layer.lambda_1.any() and not layer.lambda_2.any()  # training left the rates at zero
    argv = [*control_audit_flags(), "--output-dir", str(tmp_path)]
    assert main(["eval", str(folder), "--loops", "1,4", *argv]) == 0
    accuracy = json.loads((tmp_path / "eval_loop_scaling.json").read_text())["accuracy"]
    assert accuracy["1"] == accuracy["4"] > 0.3, accuracy
    assert main(["audit", str(folder), *argv]) == 0
    report = json.loads((tmp_path / "audit.json").read_text())
    assert report["verdict"] == "lazy identity collapse", report["reasons"]
