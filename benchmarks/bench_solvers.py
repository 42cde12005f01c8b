"""Fixed-point solvers side by side: iterations and wall time to reach a relative residual tolerance.

Contenders: equilibria's Anderson and Picard (`equilibria.modeling.solvers`) and, when it is importable,
torchdeq's Anderson (in the ``bench`` extra; the package does not depend on it), both with memory 5. The two
Andersons differ in their ridge term: ours adds ``ridge * mean(diag(G))`` to the Gram matrix ``G`` (scaled with
the residuals), torchdeq adds an absolute ``lam`` (default 1e-4), which swamps ``G`` once the residuals are
small. So torchdeq is run at its default and at each ``lam`` of ``--torchdeq-lams``, and the table shows the
default and the best (fewest iterations, then time). Only the solve is timed (the residual check is outside).
The maps are batched contractions z -> tanh(W z + x), W symmetric with eigenvalues spread over
[-L, L] for the given Lipschitz bounds L (the slower the contraction, the more acceleration pays), and the
attractor map T(y, y0) of a randomly initialised Attractor LM on random tokens, started from its proposal y0
(``--attractor-strength`` scales its attractor layers' output weights, so that T is far from constant). Times
are medians of interleaved repeats.

    python benchmarks/bench_solvers.py            # full run, a few minutes
    python benchmarks/bench_solvers.py --quick    # small, seconds; a test runs this

Results: ``docs/results/solvers.json`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import results_json
import torch

from equilibria.modeling.solvers import solve


def make_map(dim: int, batch: int, lipschitz: float, seed: int):
    """W symmetric with eigenvalues spread evenly over [-lipschitz, lipschitz], small inputs: near the fixed point
    the map is almost linear and plain iteration contracts by about ``lipschitz`` per step."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g))
    w = lipschitz * (q * torch.linspace(-1, 1, dim)) @ q.T
    x = 0.1 * torch.randn(batch, dim, generator=g)
    return lambda z: torch.tanh(z @ w.T + x), torch.zeros(batch, dim)


def make_attractor_map(hidden: int, seq_len: int, batch: int, strength: float, seed: int):
    """The attractor map ``y -> T(y, y0)`` of a random Attractor LM (2 backbone + 2 attractor layers) on random
    tokens, and its proposal ``y0`` as the start."""
    from equilibria import AttractorForCausalLM
    from equilibria.families import small_attractor_config

    torch.manual_seed(seed)
    config = small_attractor_config(
        256, hidden_size=hidden, num_attention_heads=max(1, hidden // 64), attractor_gate_init=1.0
    )
    model = AttractorForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.attractor.layers:
            for proj in (layer.self_attn.v_proj, layer.self_attn.o_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                proj.weight.mul_(strength)
        f, y0 = model.model.loop_map(torch.randint(0, 256, (batch, seq_len)))
    return f, y0.detach()


def contenders(tol: float, max_iter: int, lams: list[float]) -> dict:
    """Solvers by name: each ``run(f, z0) -> (z, iterations)``, timing nothing but the solve."""
    runs = {
        "equilibria anderson (m=5)": lambda f, z0: _ours(f, z0, "anderson", tol, max_iter),
        "equilibria picard": lambda f, z0: _ours(f, z0, "picard", tol, max_iter),
    }
    try:
        from torchdeq.solver import get_solver
    except ImportError:
        print("torchdeq is not installed here: its columns are skipped (pip install torchdeq to add them)")
        return runs
    anderson = get_solver("anderson")

    def torchdeq(lam: float):
        def run(f, z0):  # torchdeq's own stopping rule and iteration count (info["nstep"])
            z, _, info = anderson(f, z0, max_iter=max_iter, tol=tol, stop_mode="rel", m=5, lam=lam)
            return z, int(info["nstep"].max().item())

        return run

    for lam in dict.fromkeys([1e-4, *lams]):
        runs[f"torchdeq anderson (m=5, lam={lam:g})"] = torchdeq(lam)
    return runs


def _ours(f, z0, solver, tol, max_iter):
    z, stats = solve(f, z0, solver=solver, max_iter=max_iter, tol=tol)
    return z, stats.max_steps


def rel_residual(f, z) -> float:
    fz = f(z)
    return ((fz - z).flatten(1).norm(dim=1) / fz.flatten(1).norm(dim=1)).max().item()


def measure(maps, runs: dict, repeats: int) -> dict:
    """Iterations, final relative residual and median solve time of every solver on every map (interleaved)."""
    results = {}
    for label, f, z0 in maps:
        times = {name: [] for name in runs}
        outcome = {}
        for _ in range(repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                outcome[name] = run(f, z0)
                times[name].append(time.perf_counter() - start)
        for name, (z, steps) in outcome.items():
            median = statistics.median(times[name])
            results[f"{label} | {name}"] = {
                "map": label,
                "solver": name,
                "iterations": steps,
                "rel_residual": rel_residual(f, z),
                "seconds": median,
            }
            print(
                f"{label:<22} {name:<36} {steps:>10} {results[f'{label} | {name}']['rel_residual']:>17.2e} "
                f"{median:>11.4f}s"
            )
    return results


def best_torchdeq(results: dict, tol: float) -> dict:
    """Per map, the torchdeq setting that reached ``tol`` in the fewest iterations (then the least time)."""
    best = {}
    for row in results.values():
        if row["solver"].startswith("torchdeq") and row["rel_residual"] <= 10 * tol:
            key = (row["iterations"], row["seconds"])
            if row["map"] not in best or key < (best[row["map"]]["iterations"], best[row["map"]]["seconds"]):
                best[row["map"]] = row
    return best


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lipschitz", default="0.9,0.99")
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--max-iter", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--torchdeq-lams", default="1e-6,1e-8,1e-10,1e-12", help="torchdeq ridge values swept beside 1e-4")
    p.add_argument(
        "--attractor-strength", type=float, default=10.0, help="0 leaves the Attractor LM map out of the table"
    )
    p.add_argument("--output-dir", type=Path, default=Path("docs/results"))
    args = p.parse_args(argv)
    if args.quick:
        args.dim, args.batch, args.repeats, args.max_iter = 32, 4, 1, 500
    runs = contenders(args.tol, args.max_iter, [float(x) for x in args.torchdeq_lams.split(",") if x])
    maps = [
        (f"tanh, L={lip}", *make_map(args.dim, args.batch, float(lip), seed=0)) for lip in args.lipschitz.split(",")
    ]
    if args.attractor_strength > 0:
        hidden, seq = (32, 8) if args.quick else (256, 64)
        label = f"attractor LM x{args.attractor_strength:g}"
        maps.append((label, *make_attractor_map(hidden, seq, args.batch // 8 or 1, args.attractor_strength, 0)))
    print(f"dim {args.dim}, batch {args.batch}, relative tolerance {args.tol}, {args.repeats} repeats")
    print(f"{'map':<22} {'solver':<36} {'iterations':>10} {'max rel residual':>17} {'median time':>12}")
    with torch.no_grad():
        results = measure(maps, runs, args.repeats)
    best = best_torchdeq(results, args.tol)
    for label, row in best.items():
        print(f"best torchdeq setting on {label}: {row['solver']} ({row['iterations']} iterations)")
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results, "best_torchdeq": best}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results_json.save_results((args.output_dir / "solvers.json"), payload, indent=1)
    print(f"results: {args.output_dir / 'solvers.json'}")
    return payload


if __name__ == "__main__":
    main(sys.argv[1:])
