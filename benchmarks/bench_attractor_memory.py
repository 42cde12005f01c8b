"""Peak training memory of the Attractor LM against its iteration budget: one-step and implicit gradients
(constant memory) against backpropagation through every iteration ("unrolled"), same weights, same batch, for each
form of the map (``--forms``: the paper's and the gated one).

Every (gradient mode, budget) runs one forward + backward in its own fresh process, with Picard iteration at a
tolerance it never reaches, so each mode runs exactly ``budget`` iterations. Measured per run:

* saved for backward: bytes of the distinct tensors autograd keeps for the backward pass (exact, from
  ``torch.autograd.graph.saved_tensors_hooks``);
* peak memory increase of the step: on CUDA ``torch.cuda.max_memory_allocated`` over the step; on CPU the
  process's peak resident set size (``ru_maxrss``) minus its resident size just before the step.

    python benchmarks/bench_attractor_memory.py            # hidden 256, batch 8 x 256 tokens, budgets 2 8 32, ~10 min
    python benchmarks/bench_attractor_memory.py --quick    # tiny, seconds; a test runs this
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import results_json

MODES = ("one_step", "implicit", "unrolled")
FORMS = ("paper", "gated")


def rss_bytes() -> int:
    """The resident set size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(form: str, mode: str, budget: int, hidden: int, seq_len: int, batch: int) -> dict:
    """One measured training step (run in a fresh process)."""
    import torch

    from equilibria import AttractorForCausalLM
    from equilibria.diagnostics import saved_for_backward
    from equilibria.families import small_attractor_config

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = small_attractor_config(
        512,
        hidden_size=hidden,
        num_attention_heads=max(1, hidden // 64),
        solver="picard",
        solver_tol=1e-30,  # never reached: every mode runs the whole budget
        num_loops=budget,
        gradient_mode=mode,
        residual_form=form,
        attn_implementation="sdpa",
    )
    model = AttractorForCausalLM(config).to(device).train()
    ids = torch.randint(0, 512, (batch, seq_len), device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = max(rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    saved = saved_for_backward(lambda: model(ids, labels=ids).loss.backward())
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return {"saved_bytes": saved, "peak_increase_bytes": max(peak, 0), "device": device}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--budgets", default="2,8,32")
    p.add_argument("--modes", default=",".join(MODES), help="gradient modes to measure, comma-separated")
    p.add_argument("--forms", default=",".join(FORMS), help="forms of the map (residual_form), comma-separated")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--output-dir", default="docs/results/attractor_memory")
    p.add_argument("--child", nargs=3, metavar=("FORM", "MODE", "BUDGET"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.hidden, args.seq_len, args.batch = 32, 32, 2
    if args.child:
        result = child(args.child[0], args.child[1], int(args.child[2]), args.hidden, args.seq_len, args.batch)
        print("RESULT " + json.dumps(result))
        return result

    budgets = [int(b) for b in args.budgets.split(",")]
    modes, forms = (
        _choices(args.modes, MODES, "--modes", "gradient modes"),
        _choices(args.forms, FORMS, "--forms", "forms"),
    )
    results: dict[tuple[str, str, int], dict] = {}
    script = Path(__file__).resolve()
    common = ["--hidden", str(args.hidden), "--seq-len", str(args.seq_len), "--batch", str(args.batch)]
    for budget in budgets:  # interleaved: each budget for every form and mode before the next budget
        for form in forms:
            for mode in modes:
                cmd = [sys.executable, str(script), "--child", form, mode, str(budget), *common]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
                results[(form, mode, budget)] = json.loads(line[len("RESULT ") :])
    device = next(iter(results.values()))["device"]
    peak_name = "peak allocated increase" if device == "cuda" else "peak RSS increase"
    print(
        f"Attractor LM training step: hidden {args.hidden}, 2 backbone + 2 attractor layers, batch {args.batch} x "
        f"{args.seq_len} tokens, Picard, exactly `budget` iterations, device {device}"
    )
    print(
        f"{'map':<6} {'gradient':<10} {'budget':>6} {'saved for backward':>19} {'ratio':>6} {peak_name:>24} {'ratio':>6}"
    )
    first = budgets[0]
    for form, mode, budget in sorted(results, key=lambda key: (forms.index(key[0]), modes.index(key[1]), key[2])):
        r, base = results[(form, mode, budget)], results[(form, mode, first)]
        r["saved_ratio"] = r["saved_bytes"] / base["saved_bytes"]
        r["peak_ratio"] = r["peak_increase_bytes"] / max(base["peak_increase_bytes"], 1)
        print(
            f"{form:<6} {mode:<10} {budget:>6} {r['saved_bytes'] / 2**20:>16.1f} MB {r['saved_ratio']:>6.2f} "
            f"{r['peak_increase_bytes'] / 2**20:>21.1f} MB {r['peak_ratio']:>6.2f}"
        )
    print(f"(ratios: to the same map and gradient mode at budget {first})")
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    saved = {"args": vars(args), "runs": {f"{f}/{m}@{b}": v for (f, m, b), v in results.items()}}
    try:  # the plot first, then the JSON (python -m tools.docs rewrites the docs' tables from it)
        plot(results, forms, modes, budgets, out_dir / "memory.png")
        print(f"wrote {out_dir / 'memory.png'}")
    except ImportError:
        print("matplotlib is not installed: no plot")
    results_json.save_results((out_dir / "memory.json"), saved, indent=2, default=str)
    return results


def plot(results: dict, forms: list[str], modes: list[str], budgets: list[int], path: Path) -> None:
    """Saved-for-backward MiB against the budget, a line per map and gradient mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for form, style in zip(forms, ("-", "--")):
        for mode, marker in zip(modes, "osx"):
            mib = [results[(form, mode, b)]["saved_bytes"] / 2**20 for b in budgets]
            ax.plot(budgets, mib, style, marker=marker, label=f"{form}, {mode}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.set_xlabel("solver iterations (budget)")
    ax.set_ylabel("saved for backward (MiB)")
    ax.set_title("Attractor LM: training memory vs iterations")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _choices(text: str, allowed: tuple[str, ...], flag: str, what: str) -> list[str]:
    chosen = [x for x in text.split(",") if x]
    unknown = sorted(set(chosen) - set(allowed))
    if unknown:
        raise SystemExit(f"{flag}: unknown {what} {unknown}; allowed: {', '.join(allowed)}")
    return chosen


if __name__ == "__main__":
    main(sys.argv[1:])
