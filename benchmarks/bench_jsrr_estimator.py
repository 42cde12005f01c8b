"""How good is STARS' spectral-radius estimate? Error and cost of the two power iterations against the exact radius.

On small Ouro loop steps whose Jacobian can be formed exactly (``torch.autograd.functional.jacobian`` of one loop
step at the state after a few loops, a ``(seq_len * width)``-square matrix), the exact spectral radius ``rho`` is
the largest eigenvalue modulus. Each estimator (``spectral_radius(..., estimator="jvp" | "vjp")``) is run from
several random start vectors at 1, 2, 4 and 8 iterations; the table gives the mean relative error
``(estimate - rho) / rho``, the mean absolute relative error, the share of overestimates, and the time of one
differentiable estimate plus its backward (the penalty's cost), relative to the vjp estimator at one iteration,
timed side by side (interleaved, medians).

Two loop maps: the small model at its initialisation, and the same with its residual branches' output
projections scaled up (a less contractive, more non-normal step, as a trained loop can be).

    python benchmarks/bench_jsrr_estimator.py           # full run, about a minute on 2 CPU cores
    python benchmarks/bench_jsrr_estimator.py --quick   # seconds; a test runs this

Results: ``docs/results/jsrr_estimator.json`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import results_json
import torch

from equilibria import OuroConfig, OuroForCausalLM
from equilibria.modeling.regularization import JSRR_ESTIMATORS, spectral_radius

ITERATIONS = (1, 2, 4, 8)


def loop_step(width: int, scale: float, seed: int) -> OuroForCausalLM:
    """A small Ouro model; ``scale`` multiplies the attention and MLP output projections (1 = its init)."""
    torch.manual_seed(seed)
    config = OuroConfig(
        vocab_size=64, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
        num_attention_heads=4, total_ut_steps=4, attn_implementation="eager",
    )  # fmt: skip
    model = OuroForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)
    return model


def exact_radius(f, h: torch.Tensor) -> float:
    jac = torch.autograd.functional.jacobian(lambda x: f(x.view_as(h)).flatten(), h.flatten())
    return torch.linalg.eigvals(jac.double()).abs().max().item()


def errors(model, inputs: list[torch.Tensor], starts: int) -> dict:
    """Relative errors of every (estimator, iterations) over the inputs and start vectors."""
    rel = {(e, k): [] for e in JSRR_ESTIMATORS for k in ITERATIONS}
    radii = []
    for ids in inputs:
        f = model.model.loop_map(ids)
        with torch.no_grad():
            h = model.model(ids, num_loops=3).last_hidden_state
        rho = exact_radius(f, h)
        radii.append(rho)
        for s in range(starts):
            start = torch.randn(h.shape, generator=torch.Generator().manual_seed(s))
            for (estimator, k), out in rel.items():
                est = spectral_radius(f, h, num_iters=k, create_graph=False, estimator=estimator, start=start)
                out.append((est.item() - rho) / rho)
    table = {}
    for (estimator, k), values in rel.items():
        table[f"{estimator}@{k}"] = {
            "mean_rel_error": statistics.fmean(values),
            "mean_abs_rel_error": statistics.fmean(abs(v) for v in values),
            "overestimates": sum(v > 0 for v in values) / len(values),
        }
    return {"exact_radius": radii, "errors": table}


def costs(model, ids: torch.Tensor, repeats: int) -> dict:
    """Median seconds of one differentiable estimate + backward, per (estimator, iterations), interleaved."""
    with torch.no_grad():
        h = model.model(ids, num_loops=3).last_hidden_state

    def run(estimator: str, k: int) -> float:
        start = time.perf_counter()
        rho = spectral_radius(model.model.loop_map(ids), h, num_iters=k, estimator=estimator)
        (rho**2).mean().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    keys = [(e, k) for e in JSRR_ESTIMATORS for k in ITERATIONS]
    for key in keys:
        run(*key)  # warm-up
    times = {key: [] for key in keys}
    for _ in range(repeats):
        for key in keys:
            times[key].append(run(*key))
    base = statistics.median(times[("vjp", 1)])
    return {f"{e}@{k}": statistics.median(times[(e, k)]) / base for e, k in keys}


def print_table(name: str, result: dict) -> None:
    radii = result["exact_radius"]
    print(f"\n{name}: exact radius {min(radii):.3f}..{max(radii):.3f} over {len(radii)} inputs")
    print("| estimator | iterations | mean rel. error | mean abs rel. error | overestimates | cost (vjp@1 = 1) |")
    print("|---|---|---|---|---|---|")
    for key, row in result["errors"].items():
        estimator, k = key.split("@")
        print(
            f"| {estimator} | {k} | {row['mean_rel_error']:+.3f} | {row['mean_abs_rel_error']:.3f} | "
            f"{row['overestimates']:.0%} | {result['cost'][key]:.2f} |"
        )


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=8)
    parser.add_argument("--inputs", type=int, default=6, help="input sequences (one exact Jacobian each)")
    parser.add_argument("--starts", type=int, default=8, help="random start vectors per input")
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats per contender")
    parser.add_argument("--output-dir", type=Path, default=Path("docs/results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.seq_len, args.inputs, args.starts, args.repeats = 16, 4, 1, 2, 1
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randint(3, 64, (1, args.seq_len), generator=generator) for _ in range(args.inputs)]
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "torch": torch.__version__, "maps": {}}
    for name, scale in (("initialisation", 1.0), ("output projections x4", 4.0)):
        model = loop_step(args.width, scale, seed=0)
        result = errors(model, inputs, args.starts)
        result["cost"] = costs(model, inputs[0], args.repeats)
        results["maps"][name] = result
        print_table(name, result)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / "jsrr_estimator.json"
    results_json.save_results(path, results, indent=1)
    print(f"\nresults: {path}")
    return results


if __name__ == "__main__":
    main()
