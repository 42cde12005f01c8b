"""The published Attractor code's choices as options: LayerScale gates, the Neumann one-step backward, the
batch-worst stopping rule and the Muon + AdamW optimizer, each checked against what it names."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from equilibria import AttractorConfig, AttractorForCausalLM
from equilibria.modeling.layers import DecoderLayer
from equilibria.modeling.solvers import fixed_point
from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments
from equilibria.trainers.optimizers import MuonAdamW


def tiny(**overrides) -> AttractorConfig:
    sizes = dict(vocab_size=20, hidden_size=16, intermediate_size=32, num_attention_heads=2, num_loops=6)
    return AttractorConfig(**{**sizes, "num_backbone_layers": 1, "num_attractor_layers": 1, **overrides})


def gate_values(layer: DecoderLayer) -> list[torch.Tensor]:
    return [g.maximum * torch.sigmoid(g.logit) for g in (layer.attn_scale, layer.mlp_scale)]


def test_layer_scale_gates_start_at_their_value_on_the_attractor_only():
    torch.manual_seed(0)
    model = AttractorForCausalLM(tiny(layer_scale_init=0.25))
    for gate in gate_values(model.model.attractor.layers[0]):
        assert torch.allclose(gate, torch.full((16,), 0.25))
    assert model.model.backbone[0].attn_scale is None and model.model.backbone[0].mlp_scale is None
    saturated = AttractorForCausalLM(tiny(layer_scale_init=0.75, layer_scale_max=0.75))  # the code's 140M config
    for gate in gate_values(saturated.model.attractor.layers[0]):
        assert torch.allclose(gate, torch.full((16,), 0.75), atol=1e-6)
    assert AttractorForCausalLM(tiny()).model.attractor.layers[0].attn_scale is None  # the paper: no gates


def test_layer_scale_multiplies_each_branch():
    torch.manual_seed(0)
    config = tiny()
    plain = DecoderLayer(config, 0)
    gated = DecoderLayer(config, 0, layer_scale=(0.5, 1.0))
    gated.load_state_dict(plain.state_dict(), strict=False)
    h = torch.randn(2, 5, 16)
    cos_sin = (torch.ones(2, 5, 8), torch.zeros(2, 5, 8))  # rotation by 0
    attn = lambda layer, x: layer.self_attn(layer.input_layernorm(x), position_embeddings=cos_sin)[0]  # noqa: E731
    a_gate, m_gate = gate_values(gated)
    mid = h + a_gate * attn(plain, h)
    expected = mid + m_gate * plain.mlp(plain.post_attention_layernorm(mid))
    assert torch.allclose(gated(h, position_embeddings=cos_sin), expected, atol=1e-6)
    assert not torch.allclose(plain(h, position_embeddings=cos_sin), expected, atol=1e-3)


def test_layer_scale_config_errors_name_the_keys():
    with pytest.raises(ValueError, match="layer_scale_init .* layer_scale_max"):
        tiny(layer_scale_init=0.9, layer_scale_max=0.75)
    with pytest.raises(ValueError, match="solver_stop"):
        tiny(solver_stop="worst")


def linear_problem(seed: int = 0):
    """``f(z) = z A^T + x`` (a contraction) with ``x`` the parameter, and a loss ``sum(f(z*) * c)``."""
    g = torch.Generator().manual_seed(seed)
    a = 0.4 * torch.randn(6, 6, generator=g) / 6**0.5
    x = torch.randn(3, 6, generator=g, requires_grad=True)
    c = torch.randn(3, 6, generator=g)
    return a, x, c


@pytest.mark.parametrize("clip", [None, 0.05])
def test_neumann_backward_passes_v_plus_clipped_jacobian_transpose_v(clip):
    a, x, c = linear_problem()
    out, stats = fixed_point(
        lambda z: z @ a.T + x, torch.zeros(3, 6), max_iter=100, tol=1e-7, mode="one_step_neumann", neumann_clip=clip
    )
    assert bool(stats.converged.all())
    (out * c).sum().backward()
    jtv = c @ a  # J = A, so J^T v is v A for row vectors
    if clip is not None:
        ratio = (clip * c.norm(dim=1) / jtv.norm(dim=1)).clamp(max=1.0)
        assert bool((ratio < 1).all())  # the clip binds at 0.05
        jtv = jtv * ratio[:, None]
    assert torch.allclose(x.grad, c + jtv, atol=1e-5)
    one_step = torch.autograd.grad(
        (fixed_point(lambda z: z @ a.T + x, torch.zeros(3, 6), max_iter=100, tol=1e-7)[0] * c).sum(), x
    )[0]
    assert torch.allclose(one_step, c, atol=1e-6)  # the paper's one-step gradient: u = v


def test_batch_stop_iterates_every_sample_until_the_worst_has_converged():
    rates = torch.tensor([[0.1], [0.5], [0.9]])  # z <- rate * z + 1 converges at different speeds per sample

    def f(z):
        return rates * z + 1.0

    z0 = torch.zeros(3, 4)
    _, own = fixed_point(f, z0, max_iter=200, tol=1e-6, solver="picard")
    _, batch = fixed_point(f, z0, max_iter=200, tol=1e-6, solver="picard", stop="batch")
    assert len(set(own.steps.tolist())) == 3  # each sample stops when it has converged
    assert batch.steps.tolist() == [own.steps.max().item()] * 3  # every sample runs until the slowest has
    assert bool(own.converged.all()) and bool(batch.converged.all())
    assert bool((batch.rel_residual <= own.rel_residual + 1e-12).all())


def test_model_trains_with_the_published_backward_and_stopping_rule():
    torch.manual_seed(0)
    ids = torch.randint(0, 20, (8, 6))
    grads, steps = {}, {}
    for mode, stop in (("one_step", "per_sample"), ("one_step_neumann", "batch")):
        torch.manual_seed(0)
        config = tiny(layer_scale_init=0.25, solver_stop=stop, gradient_mode=mode, num_loops=60, solver_tol=1e-6)
        model = AttractorForCausalLM(config)
        out = model(ids, labels=ids)
        out.loss.backward()
        assert bool(out.converged.all())  # stopped by the tolerance, not by the budget
        steps[stop] = out.solver_steps.tolist()
        grads[mode] = model.model.backbone[0].mlp.down_proj.weight.grad.clone()
    assert len(set(steps["per_sample"])) > 1  # on their own, the sequences stop at different steps
    assert steps["batch"] == [max(steps["per_sample"])] * 8  # the batch stops together, on its slowest
    assert grads["one_step_neumann"].norm() > 0 and not torch.allclose(grads["one_step"], grads["one_step_neumann"])


def test_neumann_clip_is_checked():
    with pytest.raises(ValueError, match="neumann_clip"):
        fixed_point(lambda z: 0.5 * z, torch.ones(2, 3), max_iter=5, tol=1e-3, mode="one_step_neumann", neumann_clip=-1)
    with pytest.raises(ValueError, match="neumann_clip"):
        tiny(neumann_clip=0)


def training(tmp_path, steps: int, **extra):
    ids = torch.randint(0, 20, (64, 6), generator=torch.Generator().manual_seed(1))
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    args = AttractorTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=8,
        learning_rate=8e-3,
        adam_beta1=0.8,
        adam_beta2=0.95,
        attractor_optimizer="muon_adamw",
        save_steps=2,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        seed=0,
        **extra,
    )
    torch.manual_seed(0)
    return AttractorTrainer(model=AttractorForCausalLM(tiny(layer_scale_init=0.25)), args=args, train_dataset=data)


def test_muon_adamw_splits_the_parameters_as_the_published_code_does(tmp_path):
    trainer = training(tmp_path, 1)
    trainer.train()
    optimizer = trainer.optimizer.optimizer  # accelerate's wrapper
    assert isinstance(optimizer, MuonAdamW)
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    muon = [names[id(p)] for g in optimizer.muon.param_groups for p in g["params"]]
    assert muon and all(n.startswith("model.backbone.") and "norm" not in n for n in muon)
    by_group = [(g["lr"], g["weight_decay"], [names[id(p)] for p in g["params"]]) for g in optimizer.adamw.param_groups]
    (lr_m, wd_m, matrices), (lr_o, wd_o, others), (lr, wd, rest) = by_group
    assert lr_m == lr_o == 0.5 * lr and (wd_m, wd_o) == (0.1, 0.0)
    assert all(n.startswith("model.attractor.") for n in matrices + others)
    assert any(n.endswith("attn_scale.logit") for n in others)  # the gates: no weight decay
    assert "model.embed_tokens.weight" in rest and optimizer.adamw.defaults["betas"] == (0.8, 0.95)


def test_muon_adamw_follows_the_learning_rate_schedule(tmp_path):
    trainer = training(tmp_path, 4, lr_scheduler_type="linear")  # 8e-3 falling linearly to 0 over 4 steps
    trainer.train()
    optimizer = trainer.optimizer.optimizer
    now = trainer.lr_scheduler.get_last_lr()[0]
    assert now < 8e-3  # the schedule moved
    assert optimizer.muon.param_groups[0]["lr"] == pytest.approx(now)  # and the inner optimizers follow it
    assert [g["lr"] for g in optimizer.adamw.param_groups] == pytest.approx([0.5 * now, 0.5 * now, now])
    with pytest.raises(ValueError, match="not saved by a MuonAdamW"):
        optimizer.load_state_dict(torch.optim.AdamW(trainer.model.parameters()).state_dict())


def test_muon_adamw_refuses_a_second_optimizer_choice(tmp_path):
    trainer = training(tmp_path, 1, optim="sgd")
    with pytest.raises(ValueError, match="optim='sgd'|optim=<OptimizerNames.SGD"):
        trainer.create_optimizer()


def test_muon_adamw_resumes_to_the_same_weights(tmp_path):
    straight = training(tmp_path / "a", 4)  # saves checkpoint-2 on the way
    straight.train()
    resumed = training(tmp_path / "b", 4)
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))
    for (name, p), q in zip(straight.model.named_parameters(), resumed.model.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_unknown_optimizer_is_refused_by_name():
    with pytest.raises(ValueError, match="attractor_optimizer"):
        AttractorTrainingArguments(output_dir="unused", attractor_optimizer="muon")
