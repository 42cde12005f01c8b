"""AdamAtan2: the update rule of adam-atan2 0.0.3 in plain PyTorch (equilibria.trainers.optimizers)."""

from __future__ import annotations

import io
import math

import pytest
import torch

from equilibria.trainers.optimizers import AdamAtan2


def _reference(
    p0: torch.Tensor, grads: list[torch.Tensor], lr: float, betas: tuple[float, float], wd: float
) -> torch.Tensor:
    """The three lines of the rule, written out plainly in float64, over the gradients ``grads`` in turn."""
    beta1, beta2 = betas
    p = p0.double().clone()
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        p = p * (1 - lr * wd)
        m = m + (1 - beta1) * (g - m)
        v = beta2 * v + (1 - beta2) * g * g
        p = p - (lr / (1 - beta1**t)) * torch.atan2(m, torch.sqrt(v) / math.sqrt(1 - beta2**t))
    return p


def _grads(n: int, shape: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    # mixed scales and a few exact zeros, so that atan2 is exercised away from its linear regime
    out = []
    for _ in range(n):
        g = torch.randn(shape, generator=gen, dtype=torch.float64) * torch.logspace(-3, 1, shape[-1]).double()
        g[..., 0] = 0.0
        out.append(g)
    return out


@pytest.mark.parametrize("steps", [1, 7])
def test_matches_the_rule_written_out_float64(steps: int) -> None:
    torch.manual_seed(0)
    a0, b0 = torch.randn(3, 5, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    betas = (0.8, 0.95)
    opt = AdamAtan2(
        [{"params": [a]}, {"params": [b], "lr": 3e-2, "weight_decay": 0.0}], lr=1e-2, betas=betas, weight_decay=0.1
    )
    ga, gb = _grads(steps, (3, 5), seed=1), _grads(steps, (4,), seed=2)
    for t in range(steps):
        a.grad, b.grad = ga[t].clone(), gb[t].clone()
        opt.step()
    torch.testing.assert_close(a.detach(), _reference(a0, ga, 1e-2, betas, 0.1), rtol=0, atol=1e-14)
    torch.testing.assert_close(b.detach(), _reference(b0, gb, 3e-2, betas, 0.0), rtol=0, atol=1e-14)
    # the two groups really used their own lr / weight decay: the other group's settings give another answer
    assert not torch.allclose(b.detach(), _reference(b0, gb, 1e-2, betas, 0.1), rtol=0, atol=1e-6)
    assert int(opt.state[a]["step"]) == steps


def test_float32_and_bf16_params_follow_the_rule_in_float32() -> None:
    torch.manual_seed(0)
    p0 = torch.randn(64, dtype=torch.float64)
    grads = _grads(5, (64,), seed=3)
    expected = _reference(p0, grads, 1e-2, (0.9, 0.999), 0.05)
    p32 = p0.float().requires_grad_()
    p16 = p0.bfloat16().requires_grad_()
    opt = AdamAtan2([p32, p16], lr=1e-2, weight_decay=0.05)
    for g in grads:
        p32.grad, p16.grad = g.float(), g.bfloat16()
        opt.step()
    torch.testing.assert_close(p32.detach().double(), expected, rtol=0, atol=1e-6)
    assert p16.dtype == torch.bfloat16 and opt.state[p16]["exp_avg"].dtype == torch.float32
    assert opt.state[p16]["exp_avg_sq"].dtype == torch.float32
    torch.testing.assert_close(p16.detach().double(), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("beta1", [0.9, 0.5])
def test_first_step_has_the_bias_correction_outside_atan2(beta1: float) -> None:
    # t = 1: m = (1-b1) g, v = (1-b2) g^2, so the step is lr/(1-b1) * atan2((1-b1) g, |g|) = lr atan(1-b1)/(1-b1)
    # per entry, whatever |g|; with the correction inside atan2 (adam-atan2 0.0.2, lucidrains) it is lr * pi/4.
    lr = 1e-2
    p0 = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    g = torch.tensor([1e-4, -3.0, 20.0, -0.2], dtype=torch.float64)
    p = p0.clone().requires_grad_()
    opt = AdamAtan2([p], lr=lr, betas=(beta1, 0.999), weight_decay=0.0)
    p.grad = g.clone()
    opt.step()
    expected = p0 - lr * math.atan(1 - beta1) / (1 - beta1) * torch.sign(g)
    torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-15)
    assert not torch.allclose(p.detach(), p0 - lr * math.pi / 4 * torch.sign(g), rtol=0, atol=1e-5)


def test_zero_gradient_only_decays() -> None:
    lr, wd = 0.1, 0.3
    p0 = torch.tensor([1.0, -2.0, 0.25], dtype=torch.float64)
    p = p0.clone().requires_grad_()
    opt = AdamAtan2([p], lr=lr, weight_decay=wd)
    for k in range(1, 4):
        p.grad = torch.zeros_like(p)
        opt.step()
        assert torch.isfinite(p).all()
        torch.testing.assert_close(p.detach(), p0 * (1 - lr * wd) ** k, rtol=0, atol=1e-15)


def test_params_without_grad_are_skipped_and_closure_is_called() -> None:
    p, q = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    opt = AdamAtan2([p, q], lr=0.1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (p * torch.tensor([1.0, -1.0, 2.0])).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == pytest.approx(2.0)
    assert torch.equal(q.detach(), torch.ones(3)) and q not in opt.state
    assert not torch.equal(p.detach(), torch.ones(3))


def _run(opt: AdamAtan2, params: list[torch.Tensor], grads: list[list[torch.Tensor]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.to(p.dtype).clone()
        opt.step()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip_resumes_exactly(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    params_a = [torch.randn(4, 3).to(dtype).requires_grad_(), torch.randn(5).to(dtype).requires_grad_()]
    gen = torch.Generator().manual_seed(4)
    grads = [[torch.randn(p.shape, generator=gen) for p in params_a] for _ in range(5)]
    opt_a = AdamAtan2([{"params": params_a[:1]}, {"params": params_a[1:], "lr": 5e-2}], lr=1e-2, weight_decay=0.1)
    _run(opt_a, params_a, grads[:3])

    buffer = io.BytesIO()  # through serialization, as a checkpoint is
    torch.save(opt_a.state_dict(), buffer)
    buffer.seek(0)
    params_b = [p.detach().clone().requires_grad_() for p in params_a]
    opt_b = AdamAtan2([{"params": params_b[:1]}, {"params": params_b[1:]}], lr=1.0, weight_decay=0.0)
    opt_b.load_state_dict(torch.load(buffer, weights_only=True))
    assert opt_b.param_groups[1]["lr"] == 5e-2 and opt_b.param_groups[0]["weight_decay"] == 0.1
    for p in params_b:
        assert opt_b.state[p]["exp_avg"].dtype == torch.float32  # bf16 params keep float32 moments on load
        assert int(opt_b.state[p]["step"]) == 3

    _run(opt_a, params_a, grads[3:])
    _run(opt_b, params_b, grads[3:])
    for pa, pb in zip(params_a, params_b, strict=True):
        assert torch.equal(pa, pb)
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt_a.state[pa][key], opt_b.state[pb][key])
    # and resuming from scratch instead would not have matched
    params_c = [p.detach().clone().requires_grad_() for p in params_b]
    _run(
        AdamAtan2([{"params": params_c[:1]}, {"params": params_c[1:], "lr": 5e-2}], lr=1e-2, weight_decay=0.1),
        params_c,
        grads[3:],
    )
    assert not torch.equal(params_c[0], params_a[0])


def test_it_trains_a_linear_regression() -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1) + 0.5
    model = torch.nn.Linear(8, 1)
    opt = AdamAtan2(model.parameters(), lr=3e-2, weight_decay=0.0)

    def loss_fn() -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(x), y)

    first = loss_fn().item()
    for _ in range(200):
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    assert loss_fn().item() < first / 10


def test_sparse_gradient_is_refused() -> None:
    emb = torch.nn.Embedding(10, 3, sparse=True)
    opt = AdamAtan2(emb.parameters())
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"lr": -1e-3}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"betas": (1.0, 0.999)}, "beta1"),
        ({"betas": (-0.1, 0.999)}, "beta1"),
        ({"betas": (0.9, 1.0)}, "beta2"),
        ({"betas": (0.9,)}, "betas"),
        ({"weight_decay": -0.01}, "weight_decay"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        AdamAtan2([torch.zeros(2, requires_grad=True)], **kwargs)


def test_defaults_are_the_packages() -> None:
    opt = AdamAtan2([torch.zeros(2, requires_grad=True)])
    assert opt.defaults == {"lr": 1e-3, "betas": (0.9, 0.999), "weight_decay": 1e-2}
