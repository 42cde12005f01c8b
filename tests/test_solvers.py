"""Fixed-point solvers and their gradients, on problems with known answers."""

import logging

import pytest
import torch
from conftest import load_benchmark, read_benchmark_json

from equilibria.modeling import solvers
from equilibria.modeling.solvers import implicit_gradient, one_step_gradient, solve


def linear_problem(batch=3, dim=6, scale=0.7, seed=0):
    """z = A z + b with ||A|| = scale < 1: fixed point (I - A)^-1 b."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    a = scale * q  # orthogonal times scale: spectral norm = scale
    b = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    exact = torch.linalg.solve(torch.eye(dim, dtype=torch.float64) - a, b.T).T
    return (lambda z: z @ a.T + b), b, exact


@pytest.mark.parametrize("solver", ["anderson", "picard"])
def test_linear_contraction_reaches_the_known_fixed_point(solver):
    f, b, exact = linear_problem()
    z, stats = solve(f, torch.zeros_like(b), solver=solver, max_iter=200, tol=1e-10)
    torch.testing.assert_close(z, exact, rtol=1e-8, atol=1e-8)
    assert stats.converged.all() and not stats.diverged.any()
    assert torch.all(stats.rel_residual <= 1e-10)


def test_anderson_needs_fewer_iterations_than_picard():
    f, b, _ = linear_problem(scale=0.95)
    _, s_anderson = solve(f, torch.zeros_like(b), solver="anderson", max_iter=500, tol=1e-8)
    _, s_picard = solve(f, torch.zeros_like(b), solver="picard", max_iter=500, tol=1e-8)
    assert s_anderson.converged.all() and s_picard.converged.all()
    assert s_anderson.max_steps < s_picard.max_steps / 3


def test_nonlinear_map_and_per_sample_stopping():
    torch.manual_seed(0)
    w = torch.randn(8, 8, dtype=torch.float64)
    w = 0.5 * w / torch.linalg.matrix_norm(w, ord=2)
    x = torch.randn(4, 8, dtype=torch.float64)
    x[0] = 0.0  # sample 0's fixed point is 0 = tanh(0): reached at once from z0 = 0

    def f(z):
        return torch.tanh(z @ w.T + x)

    z, stats = solve(f, torch.zeros_like(x), solver="anderson", max_iter=100, tol=1e-10)
    torch.testing.assert_close(f(z), z, rtol=0, atol=1e-9)
    assert stats.steps[0] == 0 and torch.all(stats.steps[1:] > 0)


def test_divergence_is_flagged_warned_and_the_lowest_residual_iterate_returned(caplog):
    logging.Logger.warning_once.cache_clear()  # transformers' once-per-message cache
    f = lambda z: 3.0 * z + 1.0  # noqa: E731  expansive: iteration blows up
    z0 = torch.zeros(2, 3, dtype=torch.float64)
    with caplog.at_level(logging.WARNING, logger=solvers.__name__):
        z, stats = solve(f, z0, solver="picard", max_iter=100, tol=1e-8)
        assert [r.getMessage() for r in caplog.records] == [solvers.DIVERGED]
        solve(f, z0, solver="anderson", max_iter=20, tol=1e-8)  # said once per process
        assert len(caplog.records) == 1
    assert stats.diverged.all() and not stats.converged.any()
    assert torch.isfinite(z).all()
    torch.testing.assert_close(stats.abs_residual, (f(z) - z).flatten(1).norm(dim=1))
    assert torch.all(stats.abs_residual <= (f(z0) - z0).flatten(1).norm(dim=1))  # never worse than the start


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(solver="newton"), "solver must be one of"),
        (dict(tol=0.0), "tol must be > 0"),
        (dict(max_iter=-1), "max_iter must be an integer >= 0"),
        (dict(solver="anderson", memory=0), "memory must be an integer >= 1"),
        (dict(solver="picard", mixing=1.5), r"mixing must be in \(0, 1\]"),
    ],
)
def test_bad_solver_arguments(kwargs, message):
    f, b, _ = linear_problem()
    with pytest.raises(ValueError, match=message):
        solve(f, torch.zeros_like(b), **kwargs)


def test_implicit_gradient_matches_finite_differences():
    torch.manual_seed(1)
    dim = 5
    w = torch.randn(dim, dim, dtype=torch.float64)
    w = (0.6 * w / torch.linalg.matrix_norm(w, ord=2)).requires_grad_(True)
    x = torch.randn(2, dim, dtype=torch.float64)
    target = torch.randn(2, dim, dtype=torch.float64)

    def fixed_point_loss(weight, grad_mode):
        def f(z):
            return torch.tanh(z @ weight.T + x)

        z_star, _ = solve(f, torch.zeros_like(x), max_iter=200, tol=1e-13)
        z = implicit_gradient(f, z_star, tol=1e-13, max_iter=200) if grad_mode else f(z_star)
        return ((z - target) ** 2).sum()

    loss = fixed_point_loss(w, True)
    (grad,) = torch.autograd.grad(loss, w)
    eps = 1e-6
    numeric = torch.zeros_like(w)
    with torch.no_grad():
        for i in range(dim):
            for j in range(dim):
                up, down = w.detach().clone(), w.detach().clone()
                up[i, j] += eps
                down[i, j] -= eps
                numeric[i, j] = (fixed_point_loss(up, False) - fixed_point_loss(down, False)) / (2 * eps)
    torch.testing.assert_close(grad, numeric, rtol=1e-5, atol=1e-7)

    # the one-step gradient is a different (cheaper) approximation: same sign structure, not equal
    def f(z):
        return torch.tanh(z @ w.T + x)

    z_star, _ = solve(f, torch.zeros_like(x), max_iter=200, tol=1e-13)
    (one_step,) = torch.autograd.grad(((one_step_gradient(f, z_star) - target) ** 2).sum(), w)
    cosine = torch.nn.functional.cosine_similarity(one_step.flatten(), grad.flatten(), dim=0)
    assert 0.3 < cosine < 1 - 1e-6


@pytest.mark.slow
def test_solver_benchmark_quick_mode_runs(tmp_path):
    bench_solvers = load_benchmark("bench_solvers")
    payload = bench_solvers.main(["--quick", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "solvers.json", payload)
    assert saved["args"]["quick"] == "True" and (saved["args"]["dim"], saved["args"]["max_iter"]) == ("32", "500")
    fields = {"map", "solver", "iterations", "rel_residual", "seconds"}
    for key, row in saved["results"].items():  # every row complete, named by its map and solver
        assert key == f"{row['map']} | {row['solver']}" and set(row) == fields
        assert isinstance(row["iterations"], int) and 1 <= row["iterations"] <= 500
        assert row["rel_residual"] >= 0 and row["seconds"] > 0
    solvers_per_map = {}
    for row in saved["results"].values():
        solvers_per_map.setdefault(row["map"], set()).add(row["solver"])
    (solvers,) = {frozenset(names) for names in solvers_per_map.values()}  # every solver ran on every map
    assert {"equilibria anderson (m=5)", "equilibria picard"} <= solvers
    torchdeq = {name for name in solvers if name.startswith("torchdeq")}
    assert not torchdeq or len(torchdeq) == 5  # its default lam and the 4 of --torchdeq-lams
    for label, best in saved["best_torchdeq"].items():  # the best setting is one of the rows, within 10 x tol
        assert saved["results"][f"{label} | {best['solver']}"] == best and best["rel_residual"] <= 1e-4
    results = {(row["map"], row["solver"]): row for row in payload["results"].values()}
    ours = {k: v for k, v in results.items() if k[1].startswith("equilibria")}
    assert all(v["rel_residual"] <= 1e-5 for v in ours.values())
    labels = {k[0] for k in results}
    assert labels == {"tanh, L=0.9", "tanh, L=0.99", "attractor LM x10"}
    # the slower the contraction, the more Anderson saves: at L = 0.99 it needs well under half Picard's steps
    slow = {
        name: results[("tanh, L=0.99", f"equilibria {name}")]["iterations"] for name in ("anderson (m=5)", "picard")
    }
    assert slow["anderson (m=5)"] < 0.5 * slow["picard"], slow
    for label in ("tanh, L=0.9", "tanh, L=0.99"):
        assert (
            results[(label, "equilibria anderson (m=5)")]["iterations"]
            < results[(label, "equilibria picard")]["iterations"]
        )
    if any(k[1].startswith("torchdeq") for k in results):  # the bench extra installs it
        assert set(payload["best_torchdeq"]) == labels


def test_solvers_handle_sequence_shaped_states():
    f, b, exact = linear_problem(batch=6, dim=4)
    z, stats = solve(
        lambda z: f(z.reshape(6, 4)).reshape(2, 3, 4),
        torch.zeros(2, 3, 4, dtype=torch.float64),
        max_iter=200,
        tol=1e-10,
    )
    # the batch is the first dimension: here 2 samples of 3 x 4
    assert stats.steps.shape == (2,)
    torch.testing.assert_close(z.reshape(6, 4), exact, rtol=1e-8, atol=1e-8)
