"""The lazy-identity study's regime: a PH-DEQ whose equilibrium can be its start (``dynamics="start_anchored"``),
trained on the study's design, audited, and measured against each of the study's findings.

The study (19 runs of a port-Hamiltonian DEQ with a learned, goal-conditioned initialiser) reports
``||h* - z0||`` about 1e-7, T1 = 0.00 points in 18 of 19 runs, 99.9% of solves at the 300-iteration cap,
iterations uncorrelated with BFS distance (r = 0.009), no change without the anchor, a noisy-start retraining that
converges to the noisy start while the decoder stops reading that channel, and one ProofWriter seed that explodes
(``||h* - z0||`` about 171) where zeroing ``h*`` helps. Its explanation: gradient starvation, because a direct path
solves the task.

Every model here uses the start-anchored reading (no port drive; the anchor and the friction centred at the
solver's start ``s``; a learned potential ``V`` whose scale starts at ``--potential-scale-init``), Anderson m=5 up
to ``--num-loops`` iterations, implicit gradients and an initialiser isolated from every gradient:

* ``lazy``: the study's design: the decoder reads ``h*`` and the context (the direct path);
* ``lazy_no_anchor``: the same with ``anchor=0``, retrained (the anchor-removal ablation);
* ``lazy_noisy``: the same trained from ``z0 + noise`` (``--start-noise`` x ``|z0|``; the retraining ablation);
* ``lazy_no_direct``: the decoder reads ``h*`` only; the isolated initialiser's ``z0`` still carries the context;
* ``lazy_control``: the decoder reads ``h*`` only and the start is 0, so only the loop can carry the answer: the
  control that must compute.

On top of `bench_audit_reachability`'s measurements (the audit, the gradient norms per path over training, the
anchor set to 0 at test time) each run records: the share of solves stopped at the cap per solver tolerance
(``1e-2`` to ``1e-8``) and the tightest tolerance that at least 99% of solves reach; where the solves end from
noisy starts (``z0 + noise``, the training noise's law) and the accuracy there; how strongly the decoder's first
layer reads ``h*`` against the context; the learned potential's scale. Each run's record is saved as it ends
(``<model>-seed<k>/run.json`` beside its ``audit.json``); ``--summarize`` then gathers them, applies Holm's
correction over these runs and the `studied` runs of ``docs/results/audit_reachability/`` and plots the gradient
reaching the dynamics over training.

    python benchmarks/bench_lazy_identity.py                          # reachability, 5 models x 3 seeds
    python benchmarks/bench_lazy_identity.py --task entailment        # the MiniLM-embedded entailment task
    python benchmarks/bench_lazy_identity.py --summarize              # tables, Holm, plot (no training)
    python benchmarks/bench_lazy_identity.py --quick                  # seconds; a test runs this
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import bench_audit_reachability as reach
import results_json
import torch

from equilibria.diagnostics.statistics import holm, two_sided_p

LAZY = dict(
    dynamics="start_anchored",
    initializer="learned",
    initializer_loss_weight=0.0,
    stop_initializer_gradient=True,
    direct_path=True,
    potential_scale_init=None,  # None: the argument of that name
)
KINDS = {
    "lazy": LAZY,
    "lazy_no_anchor": {**LAZY, "anchor": 0.0},
    "lazy_noisy": {**LAZY, "start_noise": None},
    "lazy_no_direct": {**LAZY, "direct_path": False},
    "lazy_control": {**LAZY, "initializer": "zero", "direct_path": False},
}
TOLERANCES = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
RESULTS = results_json.RESULTS / "lazy_identity"
STUDIED_RUNS = {  # today's `studied` design per task, for Holm beside these runs
    "reachability": results_json.RESULTS / "audit_reachability",
    "entailment": results_json.RESULTS / "audit_entailment",
}


def parse(argv):
    argv = list(argv)
    summarize = "--summarize" in argv
    if summarize:
        argv.remove("--summarize")
    task = argv[argv.index("--task") + 1] if "--task" in argv else "reachability"
    defaults = ["--models", ",".join(KINDS), "--output-dir", str(RESULTS / task)]
    args = reach.parse(defaults + argv, kinds=KINDS, extra=_extra_arguments, description=__doc__)
    args.summarize = summarize
    return args


def _extra_arguments(parser) -> None:
    parser.add_argument(
        "--potential-scale-init", type=float, default=0.01, help="the learned potential's initial scale (near 0)"
    )


@torch.no_grad()
def tolerance_sweep(model, test) -> dict:
    """Solves of the held-out questions at each tolerance: the share that converged, the share stopped at the cap,
    the mean iterations; and the tightest tolerance that at least 99% of solves reach."""
    model.eval()
    inputs = test.with_format("torch")[:]["inputs"].float()
    rows = []
    for tol in TOLERANCES:
        out = model(inputs, solver_tol=tol)
        rows.append(
            {
                "tol": tol,
                "converged": out.converged.float().mean().item(),
                "at_cap": (~out.converged).float().mean().item(),
                "steps": out.solver_steps.double().mean().item(),
            }
        )
    reached = [r["tol"] for r in rows if r["converged"] >= 0.99]
    return {"rows": rows, "tightest_99": min(reached) if reached else None}


@torch.no_grad()
def noisy_starts(model, test, scale: float, seed: int) -> dict | None:
    """Start each held-out solve at ``z0 + noise`` (expected norm ``scale * |z0|``, as in training): where the solve
    ends, relative to the noise, and the accuracy there against the clean solve's."""
    model.eval()
    test = test.with_format("torch")[:]
    inputs, labels = test["inputs"].float(), test["labels"]
    clean = model(inputs)
    z0 = clean.start_state.float()
    if z0.abs().max() == 0:
        return None  # a zero start: no noise of that law
    noise = torch.randn(z0.shape, generator=torch.Generator().manual_seed(seed))
    noise = noise * (scale * z0.norm(dim=1, keepdim=True) / z0.shape[1] ** 0.5)
    moved = model(inputs, initial_state=z0 + noise)
    h, size = moved.solved_state.float(), noise.norm(dim=1).clamp_min(1e-30)
    return {
        "scale": scale,
        "to_noisy_start": ((h - (z0 + noise)).norm(dim=1) / size).median().item(),
        "to_z0": ((h - z0).norm(dim=1) / size).median().item(),
        "accuracy_clean": (clean.logits.argmax(-1) == labels).float().mean().item(),
        "accuracy_noisy": (moved.logits.argmax(-1) == labels).float().mean().item(),
    }


def decoder_reading(model) -> dict:
    """The RMS weight of the decoder's first layer on the ``h*`` columns and on the context columns, and their
    ratio: how strongly the decoder reads the solved state against the direct path."""
    weight = model.classifier[0].weight.detach().float()
    state = 2 * model.config.hidden_size
    on_state = weight[:, :state].pow(2).mean().sqrt().item()
    if not model.config.direct_path:
        return {"state_rms": on_state}
    on_context = weight[:, state:].pow(2).mean().sqrt().item()
    return {"state_rms": on_state, "context_rms": on_context, "state_over_context": on_state / on_context}


def measure(args, test):
    """The regime's measurements beyond the audit, added to each run's record, and the record saved."""

    def extras(model, run: dict) -> None:
        run["tolerances"] = tolerance_sweep(model, test)
        run["noisy_starts"] = noisy_starts(model, test, args.start_noise, run["seed"])
        run["decoder"] = decoder_reading(model)
        run["potential_scale"] = model.model.potential_scale.detach().abs().mean().item()
        folder = args.output_dir / f"{run['model']}-seed{run['seed']}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.json").write_text(json.dumps(run, indent=1, default=str))

    return extras


def load_runs(folder: Path) -> list[dict]:
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*-seed*/run.json"))]
    order = list(KINDS)
    return sorted(runs, key=lambda r: (order.index(r["model"]) if r["model"] in order else 99, r["seed"]))


def holm_beside_studied(runs: list[dict], task: str, alpha: float = 0.05) -> dict:
    """Holm over the T1 tests of these runs and of today's `studied` runs on the same task (``STUDIED_RUNS``)."""
    studied = [json.loads(p.read_text()) for p in sorted(STUDIED_RUNS[task].glob("studied-seed*/audit.json"))]
    named = [(f"{r['model']}-seed{r['seed']}", r["t1_z"], r["verdict"]) for r in runs]
    named += [(f"studied-seed{i}", s["substitution"]["z"], s["verdict"]) for i, s in enumerate(studied)]
    kept = holm([two_sided_p(z) for _, z, _ in named], alpha)
    return {
        "alpha": alpha,
        "runs": [{"run": n, "t1_z": z, "verdict": v, "t1_significant": k} for (n, z, v), k in zip(named, kept)],
        "computing": sum(v == "computing" for _, _, v in named),
        "computing_surviving": sum(k and v == "computing" for (_, _, v), k in zip(named, kept)),
    }


def regime_findings(runs: list[dict]) -> dict:
    """Per model, `bench_audit_reachability.findings` and the regime's own numbers: the cap share at the run's
    tolerance, the tightest tolerance 99% reach, the noisy starts and the decoder's reading."""
    found = reach.findings(runs)
    for kind, row in found.items():
        mine = [r for r in runs if r["model"] == kind]
        at_tol = [next(t for t in r["tolerances"]["rows"] if t["tol"] == 1e-4) for r in mine]
        noisy = [r["noisy_starts"] for r in mine if r.get("noisy_starts")]
        row.update(
            disp_rel=[r["disp_rel"] for r in mine],
            t1=[r["t1"] for r in mine],
            cap_share_1e4=[t["at_cap"] for t in at_tol],
            tightest_99=[r["tolerances"]["tightest_99"] for r in mine],
            to_noisy_start=[n["to_noisy_start"] for n in noisy],
            noisy_accuracy_change=[n["accuracy_noisy"] - n["accuracy_clean"] for n in noisy],
            state_over_context=[r["decoder"].get("state_over_context") for r in mine],
            potential_scale=[r["potential_scale"] for r in mine],
        )
    return found


def plot_gradients(runs: list[dict], path: Path) -> None:
    """The gradient norm reaching the dynamics over training, and its ratio to the direct path's, per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (absolute, ratio) = plt.subplots(1, 2, figsize=(11, 4))
    colours = dict(zip(KINDS, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for run in runs:
        history = run.get("gradient_history") or []
        steps = [h["step"] for h in history]
        style = dict(color=colours.get(run["model"]), alpha=0.8, label=run["model"] if run["seed"] == 0 else None)
        absolute.plot(steps, [h["dynamics"] for h in history], **style)
        if history and "direct_path" in history[0]:
            ratio.plot(steps, [h["dynamics"] / max(h["direct_path"], 1e-30) for h in history], **style)
    absolute.set(yscale="log", xlabel="step", ylabel="gradient norm reaching the dynamics")
    ratio.set(yscale="log", xlabel="step", ylabel="dynamics / direct path")
    absolute.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_regime(found: dict) -> None:
    print("\nthe study (19 runs): ||h*-z0|| ~1e-7, T1 = 0.00 in 18/19, 99.9% at the cap, r = 0.009; here, per model:")
    print("model            runs  median ||h*-z0|| rel   T1=0.00  cap% @1e-4   tightest tol 99%  verdicts")
    for kind, f in found.items():
        rel = ", ".join(f"{x:.2g}" for x in f["disp_rel"])
        caps = ", ".join(f"{100 * x:.1f}" for x in f["cap_share_1e4"])
        tight = ", ".join("none" if t is None else f"{t:g}" for t in f["tightest_99"])
        print(
            f"{kind:<16} {f['runs']:>4}  {rel:<22} {f['t1_zero_runs']:>3}/{f['runs']}  {caps:<12} {tight:<17} "
            f"{', '.join(f['verdicts'])}"
        )


def summarize(args) -> dict:
    runs = load_runs(args.output_dir)
    if not runs:
        raise SystemExit(f"no runs under {args.output_dir} (each run writes <model>-seed<k>/run.json)")
    reach.print_runs(runs)
    reach.print_anchor_removal(runs)
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "findings": regime_findings(runs)}
    results["verdict_counts"] = dict(Counter(r["verdict"] for r in runs))
    print_regime(results["findings"])
    results["holm"] = holm_beside_studied(runs, args.task)
    print(
        f"\nHolm over {len(results['holm']['runs'])} runs (these and the studied ones, family-wise 0.05): "
        f"{sum(r['t1_significant'] for r in results['holm']['runs'])} T1 still significant; "
        f"{results['holm']['computing_surviving']} of {results['holm']['computing']} 'computing' verdicts rest on one"
    )
    plot_gradients(runs, args.output_dir / "gradients.png")
    results_json.save_results(args.output_dir / "summary.json", results, indent=2, default=str)
    print(f"wrote {args.output_dir / 'summary.json'} and gradients.png")
    return results


def main(argv=None) -> dict:
    args = parse(sys.argv[1:] if argv is None else argv)
    if not args.summarize:
        data = reach.load_task(args)
        train_data = data["train"].select_columns(["inputs", "labels"])
        args.output_dir.mkdir(parents=True, exist_ok=True)
        extras = measure(args, data["test"])
        for seed in args.seeds:
            for kind in args.models:
                reach.run_one(args, kind, seed, train_data, data["test"], kinds=KINDS, extras=extras)
    return summarize(args)


if __name__ == "__main__":
    main()
