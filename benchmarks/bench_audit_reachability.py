"""The computation audit at small scale: does a port-Hamiltonian DEQ with a learned initialiser compute anything on
graph reachability (or ProofWriter-style entailment, ``--task entailment``), or does its loop collapse onto its
start?

For each seed, these models are trained with the Hugging Face `Trainer` on the same questions ("is t reachable
from s within k hops?" on random 16-node directed graphs, one 304-float vector per question):

* ``studied``: the lazy-identity study's design: the anchor pulls ``q`` toward the initialiser's proposal
  (``anchor_target="initializer"``), the initialiser is isolated from every gradient (no amortisation loss,
  ``z0`` detached), an Anderson solver (m=5, up to ``--num-loops`` iterations), implicit gradients, and a decoder
  that reads ``h*`` *and* the context directly;
* ``no_anchor``: the same with ``anchor=0`` (the paper's anchor-removal ablation);
* ``noisy_start``: the same trained from ``z0 + noise`` (``--start-noise`` x ``|z0|``; the retraining ablation);
* ``amortised``: this package's default PH-DEQ: anchored at the origin, the initialiser trained onto ``h*`` by the
  amortisation loss, with the direct path;
* ``control``: meant to compute: no direct path (the decoder sees only ``h*``) and a learned, amortised start,
  so that the audit has to find its computing (a zero start would make T1 the zeroing test);
* ``mlp``: a 2-layer MLP on the same input vectors.

A `GradientNormCallback` records, over training, the gradient norm reaching the dynamics (the port-Hamiltonian
map) and the direct path (the decoder's weights that read the context). Then `equilibria.diagnostics.audit` runs
on the held-out questions for every PH-DEQ and the table prints, per seed: accuracy, ``||h* - z0||``, T1
(substitute ``z0`` for ``h*``), the zeroing contrast, T2 (linear probes on ``h*`` and ``z0``), T3 (iterations vs
BFS distance, share at the cap), T4 (where starts displaced by ``|d| = |z0|`` end) and the verdict, then how each
of the published study's findings fares per model (19 runs there: ``||h* - z0||`` about 1e-7, T1 costing 0.00
points in 18 of 19, r = 0.009, 99.9% of solves at the cap, zeroing from -44 points to 0 between seeds).

    python benchmarks/bench_audit_reachability.py                     # 3 seeds
    python benchmarks/bench_audit_reachability.py --task entailment --output-dir docs/results/audit_entailment
    python benchmarks/bench_audit_reachability.py --quick             # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import results_json
import torch
from torch import nn
from transformers import PrinterCallback, Trainer, TrainingArguments, set_seed

from equilibria import PHDEQConfig, PHDEQForSequenceClassification
from equilibria.diagnostics import audit
from equilibria.diagnostics.statistics import holm, two_sided_p
from equilibria.tasks import build_reachability_dataset, reachability_input_size
from equilibria.trainers import GradientNormCallback


def parse(argv, kinds: dict | None = None, extra=None, description: str | None = None):
    """The arguments; ``kinds`` replaces ``KINDS`` (another benchmark's models), ``extra(parser)`` adds arguments."""
    kinds = KINDS if kinds is None else kinds
    p = argparse.ArgumentParser(
        description=description or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="tiny run for a smoke test")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument(
        "--task",
        default="reachability",
        choices=["reachability", "entailment"],
        help="entailment: ProofWriter-style theories embedded by the frozen all-MiniLM-L6-v2 (depth = difficulty)",
    )
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--max-hops", type=int, default=6)
    p.add_argument("--train-size", type=int, default=6000)
    p.add_argument("--test-size", type=int, default=1000)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--hidden", type=int, default=64, help="size of q and p (the state has twice this)")
    p.add_argument("--width", type=int, default=256, help="width of the feed-forward parts and of the MLP")
    p.add_argument("--num-loops", type=int, default=300, help="the solver's cap in training and in the audit")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--models", default=",".join(kinds), help=f"comma-separated, from {', '.join(kinds)}")
    p.add_argument("--summary-name", default="audit_reachability.json", help="file name of the summary JSON")
    p.add_argument("--start-noise", type=float, default=0.5, help="noisy_start: noise norm relative to |z0|")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/audit_reachability"))
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.train_size, args.test_size, args.steps = "0", 256, 64, 8
        args.hidden, args.width, args.num_loops = 8, 32, 50
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.models = args.models.split(",")
    unknown = sorted(set(args.models) - set(kinds))
    if unknown:
        p.error(f"--models: unknown {unknown}; choose from {', '.join(kinds)}")
    return args


STUDIED = dict(
    anchor_target="initializer",
    initializer="learned",
    initializer_loss_weight=0.0,
    stop_initializer_gradient=True,
    direct_path=True,
)
KINDS = {
    "studied": STUDIED,
    "no_anchor": {**STUDIED, "anchor": 0.0},
    "noisy_start": {**STUDIED, "start_noise": None},  # None: --start-noise
    "amortised": dict(anchor_target="origin", initializer="learned", initializer_loss_weight=1.0, direct_path=True),
    "control": dict(anchor_target="origin", initializer="learned", initializer_loss_weight=1.0, direct_path=False),
    "mlp": None,
}


class MLPBaseline(nn.Module):
    """Two hidden layers on the question vector."""

    def __init__(self, input_size: int, width: int, num_labels: int = 2):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_size, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, num_labels)
        )

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None):
        logits = self.net(inputs.float())
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def load_task(args):
    if args.task == "reachability":
        data = build_reachability_dataset(
            args.train_size, args.test_size, num_nodes=args.nodes, max_hops=args.max_hops, seed=12345
        )
        args.input_size = reachability_input_size(args.nodes)
        print(
            f"graph reachability: {args.nodes} nodes, k <= {args.max_hops} hops; {len(data['train'])} training and "
            f"{len(data['test'])} held-out questions (half reachable)"
        )
        return data
    from equilibria.tasks import SentenceEmbedder, build_entailment_dataset, embed_entailment

    raw = build_entailment_dataset(args.train_size, args.test_size, seed=12345)
    embedder = SentenceEmbedder(cache_path=args.output_dir / "minilm_cache.pt", progress=False)
    data = {split: embed_entailment(raw[split], embedder) for split in ("train", "test")}
    args.input_size = 2 * embedder.dim
    print(
        f"entailment: {len(data['train'])} training and {len(data['test'])} held-out questions (proof depth 0-5, "
        "half true), embedded by all-MiniLM-L6-v2"
    )
    return data


def build(args, kind: str, seed: int, kinds: dict | None = None) -> nn.Module:
    """The model of ``kind`` (a key of ``kinds``, default ``KINDS``); a None value in its spec takes the argument of
    that name (``--start-noise``, ...)."""
    kinds = KINDS if kinds is None else kinds
    set_seed(seed)
    size = args.input_size
    if kind == "mlp":
        return MLPBaseline(size, args.width)
    common = dict(
        input_size=size,
        hidden_size=args.hidden,
        intermediate_size=args.width,
        num_labels=2,
        num_loops=args.num_loops,
        solver_tol=args.tol,
        anderson_memory=5,
        gradient_mode="implicit",
    )
    spec = {k: (getattr(args, k) if v is None else v) for k, v in kinds[kind].items()}
    return PHDEQForSequenceClassification(PHDEQConfig(**spec, **common))


def train(args, model: nn.Module, data, seed: int, name: str) -> tuple[float, list[dict]]:
    """Train; returns the seconds and, for a PH-DEQ, the gradient norms per path at every step."""
    training_args = TrainingArguments(
        output_dir=str(args.output_dir / name),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=max(1, args.steps // 20),
        lr_scheduler_type="cosine",
        weight_decay=args.weight_decay,
        max_grad_norm=1.0,
        logging_steps=max(1, args.steps // 5),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
        label_names=["labels"],
    )
    started = time.time()
    gradients = GradientNormCallback() if isinstance(model, PHDEQForSequenceClassification) else None
    trainer = Trainer(model=model, args=training_args, train_dataset=data, callbacks=[gradients] if gradients else None)
    trainer.remove_callback(PrinterCallback)  # keep the output to the tables
    trainer.train()
    return time.time() - started, gradients.history if gradients else []


def starvation(history: list[dict]) -> dict:
    """Mean gradient norm per path over the first and the last tenth of training."""
    if not history:
        return {}
    tenth = max(1, len(history) // 10)
    paths = [k for k in history[0] if k != "step"]
    first, last = history[:tenth], history[-tenth:]
    return {
        k: {"first": sum(r[k] for r in first) / len(first), "last": sum(r[k] for r in last) / len(last)} for k in paths
    }


@torch.no_grad()
def accuracy(model: nn.Module, data) -> float:
    model.eval()
    test = data.with_format("torch")[:]
    logits = model(test["inputs"].float())["logits"]
    return (logits.argmax(-1) == test["labels"]).float().mean().item()


def summary(report) -> dict:
    t4 = next((row for row in report.displaced if row["scale"] == 1.0), report.displaced[0])
    return {
        "accuracy": report.accuracy,
        "disp_median": report.displacement["median"],
        "disp_rel": report.displacement["relative_median"],
        "t1": report.substitution["change_points"],
        "t1_z": report.substitution["z"],
        "zero": report.zeroing["change_points"],
        "probe_h": report.probe.get("solved"),
        "probe_z0": report.probe.get("start"),
        "pearson": report.iterations["pearson"],
        "spearman": report.iterations["spearman"],
        "steps": report.iterations["mean_steps"],
        "cap": report.iterations["cap_share"],
        "t4_returned": t4["returned"],
        "t4_stayed": t4["stayed"],
        "verdict": report.verdict,
    }


def holm_summary(runs: list[dict], alpha: float = 0.05) -> dict:
    """Many runs are audited, so some T1 changes pass 2 standard errors by chance: Holm's correction over the runs'
    T1 tests, and how many `computing` verdicts rest on a T1 that survives it."""
    audited = [r for r in runs if r.get("t1_z") is not None]
    kept = holm([two_sided_p(r["t1_z"]) for r in audited], alpha)
    computing = [k for r, k in zip(audited, kept) if r["verdict"] == "computing"]
    return {
        "alpha": alpha,
        "runs": len(audited),
        "t1_significant": sum(kept),
        "computing": len(computing),
        "computing_surviving": sum(computing),
    }


def fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def without_anchor(model, test, seed: int) -> dict:
    """The trained model audited with its anchor set to 0 at test time (the anchor-removal ablation without
    retraining): does the anchor alone hold ``h*`` at ``z0``?"""
    anchor = model.config.anchor
    model.config.anchor = 0.0
    try:
        report = audit(model, test, seed=seed, progress=False, displacement_scales=(1.0,))
    finally:
        model.config.anchor = anchor
    return {**summary(report), "diverged_share": report.iterations.get("diverged_share")}


def run_one(args, kind: str, seed: int, train_data, test, kinds: dict | None = None, extras=None) -> dict:
    """Train and audit one model; ``extras(model, run)`` adds further measurements to the run's record."""
    model = build(args, kind, seed, kinds)
    seconds, history = train(args, model, train_data, seed, f"{kind}-seed{seed}")
    run = {"seed": seed, "model": kind, "train_seconds": seconds, "accuracy": accuracy(model, test)}
    if kind != "mlp":
        report = audit(model, test, seed=seed, progress=False, displacement_scales=(0.1, 1.0, 10.0))
        run.update(summary(report))
        run["reasons"] = report.reasons
        run["gradients"] = starvation(history)
        run["gradient_history"] = history[:: max(1, len(history) // 100)]
        report.save(args.output_dir / f"{kind}-seed{seed}")
        start_held = model.config.anchor_target == "initializer" or model.config.dynamics == "start_anchored"
        if start_held and model.config.anchor > 0:
            run["anchor_removed"] = without_anchor(model, test, seed)
        if extras is not None:
            extras(model, run)
    print(f"  seed {seed} {kind:<12} trained in {seconds:5.0f} s, held-out accuracy {100 * run['accuracy']:.1f}%")
    return run


def print_runs(runs: list[dict]) -> None:
    print(
        "\nseed  model         acc%   ||h*-z0|| (rel)      T1 pts  zero pts  probe h*/z0 %   "
        "r (Spearman)     steps  cap%   T4 back/stay %  verdict"
    )
    for run in runs:
        if run["model"] == "mlp":
            print(f"{run['seed']:>4}  {run['model']:<12} {100 * run['accuracy']:5.1f}")
            continue
        print(
            f"{run['seed']:>4}  {run['model']:<12} {100 * run['accuracy']:5.1f}   "
            f"{run['disp_median']:8.2g} ({run['disp_rel']:7.2g})  {run['t1']:+7.2f}  {run['zero']:+8.2f}  "
            f"{fmt(run['probe_h'] and 100 * run['probe_h'], '5.1f')}/{fmt(run['probe_z0'] and 100 * run['probe_z0'], '5.1f')}"
            f"   {fmt(run['pearson'], '+.3f')} ({fmt(run['spearman'], '+.3f')})  {run['steps']:6.1f}  "
            f"{100 * run['cap']:5.1f}  {100 * run['t4_returned']:5.1f}/{100 * run['t4_stayed']:5.1f}     {run['verdict']}"
        )


def print_anchor_removal(runs: list[dict]) -> None:
    removed = [r for r in runs if "anchor_removed" in r]
    if not removed:
        return
    print("\nthe same models with the anchor set to 0 at test time (no retraining)")
    print("seed  model         acc%   ||h*-z0|| (rel)      T1 pts  zero pts  steps  cap%  verdict")
    for run in removed:
        a = run["anchor_removed"]
        print(
            f"{run['seed']:>4}  {run['model']:<12} {100 * a['accuracy']:5.1f}   {a['disp_median']:8.2g} "
            f"({a['disp_rel']:7.2g})  {a['t1']:+7.2f}  {a['zero']:+8.2f}  {a['steps']:5.1f} {100 * a['cap']:5.1f}  "
            f"{a['verdict']}"
        )


def findings(runs: list[dict]) -> dict:
    """Per PH-DEQ kind, the published study's findings measured over its seeds."""
    out = {}
    for kind in dict.fromkeys(r["model"] for r in runs if r["model"] != "mlp"):
        rows = [r for r in runs if r["model"] == kind]
        grads = [r["gradients"] for r in rows if "direct_path" in r["gradients"]]
        out[kind] = {
            "runs": len(rows),
            "disp_median": sorted(r["disp_median"] for r in rows)[len(rows) // 2],
            "t1_zero_runs": sum(abs(r["t1"]) < 0.005 for r in rows),
            "cap_share": sum(r["cap"] for r in rows) / len(rows),
            "pearson": [r["pearson"] for r in rows],
            "zeroing": [r["zero"] for r in rows],
            "exploded_runs": sum(r["disp_median"] > 100 for r in rows),
            "dynamics_over_direct_first": [
                g["dynamics"]["first"] / max(g["direct_path"]["first"], 1e-30) for g in grads
            ],
            "dynamics_over_direct_last": [g["dynamics"]["last"] / max(g["direct_path"]["last"], 1e-30) for g in grads],
            "verdicts": [r["verdict"] for r in rows],
        }
    return out


def print_findings(found: dict) -> None:
    print(
        "\nthe study's findings (19 runs there: ||h*-z0|| ~1e-7, T1 = 0.00 in 18/19, 99.9% at the cap, r = 0.009, "
        "zeroing -44..0 points, one exploded seed ||h*-z0|| ~171)"
    )
    print(
        "model         runs  median ||h*-z0||  T1=0.00  cap%   r range          zeroing range     "
        "grad dynamics/direct first -> last"
    )
    for kind, f in found.items():
        r = [x for x in f["pearson"] if x is not None]
        r_range = f"{min(r):+.3f}..{max(r):+.3f}" if r else "n/a"
        dyn = f["dynamics_over_direct_first"], f["dynamics_over_direct_last"]
        grad = " ".join(f"{a:.2g}->{b:.2g}" for a, b in zip(*dyn)) if dyn[0] else "no direct path"
        print(
            f"{kind:<12} {f['runs']:>5}  {f['disp_median']:16.2g}  {f['t1_zero_runs']:>4}/{f['runs']}  "
            f"{100 * f['cap_share']:5.1f}  {r_range:<15}  {min(f['zeroing']):+7.2f}..{max(f['zeroing']):+7.2f}  "
            f"{grad}"
        )


def main(argv=None) -> dict:
    args = parse(argv)
    data = load_task(args)
    train_data = data["train"].select_columns(["inputs", "labels"])
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": []}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for kind in args.models:
            results["runs"].append(run_one(args, kind, seed, train_data, data["test"]))
    print_runs(results["runs"])
    print_anchor_removal(results["runs"])
    results["findings"] = findings(results["runs"])
    print_findings(results["findings"])
    results["holm"] = holm_summary(results["runs"])
    print(
        f"\nHolm over the {results['holm']['runs']} audited runs (family-wise 0.05): {results['holm']['t1_significant']} "
        f"T1 still significant; {results['holm']['computing_surviving']} of {results['holm']['computing']} "
        "'computing' verdicts rest on one"
    )
    results_json.save_results((args.output_dir / args.summary_name), results, indent=2, default=str)
    print(f"\nwrote {args.output_dir / args.summary_name} and an audit.json/audit.png per PH-DEQ run")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
