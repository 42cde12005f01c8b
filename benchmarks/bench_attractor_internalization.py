"""Equilibrium internalization: does fixed-point training pull the backbone's proposal y0 onto the equilibrium?

A small Attractor LM is trained with `AttractorTrainer` on multi-digit addition ("12+34=46", loss on the answer).
Every `--eval-every` steps, on held-out problems (teacher forcing, answer tokens only), it prints:

* the answer loss of the backbone alone (`num_loops=0`) and of the solved model;
* the solver iterations needed to reach the tolerance, and the share of sequences that converged;
* how far the proposal is from the equilibrium: ||y* - y0|| / ||y*|| and the residual ||T(y0) - y0|| / ||T(y0)||.

At the end: greedy exact-match accuracy with the backbone alone and with the solver, and the plot (losses and
iterations over training) as a PNG. The paper (Fein-Ashley and Rashidinejad, 2026) reports that iterations fall
and the backbone alone comes close to the solved model.

    python benchmarks/bench_attractor_internalization.py            # about 18 minutes on 2 CPU cores
    python benchmarks/bench_attractor_internalization.py --quick    # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import doc_tables
import torch
from bench_stars_addition import common_training_args
from transformers import DataCollatorForSeq2Seq, TrainerCallback, set_seed

from equilibria import AttractorForCausalLM
from equilibria.families import small_attractor_config
from equilibria.tasks import (
    addition_tokenizer,
    build_addition_dataset,
    exact_match,
    tokenize_for_training,
)
from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny run for a smoke test")
    p.add_argument("--digits", type=int, default=2)
    p.add_argument("--train-size", type=int, default=6000)
    p.add_argument("--test-size", type=int, default=300)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--backbone-layers", type=int, default=2)
    p.add_argument("--attractor-layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--budget", type=int, default=30, help="solver iterations allowed in training and evaluation")
    p.add_argument("--tol", type=float, default=1e-4, help="the solver's relative-residual tolerance")
    p.add_argument("--gradient-mode", default="implicit", choices=["one_step", "implicit"])
    p.add_argument("--jacobian-weight", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/attractor_internalization"))
    args = p.parse_args(argv)
    if args.quick:
        args.train_size, args.test_size, args.steps, args.eval_every = 256, 16, 6, 3
        args.width, args.batch_size, args.budget = 32, 16, 10
    return args


def build_model(args, tokenizer) -> AttractorForCausalLM:
    set_seed(args.seed)
    config = small_attractor_config(
        tokenizer,
        hidden_size=args.width,
        num_backbone_layers=args.backbone_layers,
        num_attractor_layers=args.attractor_layers,
        num_attention_heads=args.heads,
        num_loops=args.budget,
        solver_tol=args.tol,
        gradient_mode=args.gradient_mode,
    )
    return AttractorForCausalLM(config)


@torch.no_grad()
def equilibrium_report(model, batch: dict) -> dict:
    """Answer losses without and with the solver, solver iterations, and the proposal's distance from the
    equilibrium, on one teacher-forced batch."""
    was_training = model.training
    model.eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    backbone = model(**inputs, labels=batch["labels"], num_loops=0, use_cache=False)
    solved = model(**inputs, labels=batch["labels"], use_cache=False, output_hidden_states=True)
    y_star, y0 = solved.hidden_states[-1], solved.proposal
    f, _ = model.model.loop_map(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"))
    f_y0 = f(y0)
    valid = inputs["attention_mask"].bool() if "attention_mask" in inputs else torch.ones_like(inputs["input_ids"])
    valid = valid.bool()

    def relative(a, b):  # per-sequence ||a - b|| / ||a|| over the real tokens
        diff = ((a - b).pow(2).sum(-1) * valid).sum(1).sqrt()
        return (diff / ((a.pow(2).sum(-1) * valid).sum(1).sqrt().clamp_min(1e-12))).mean().item()

    report = {
        "loss_backbone": backbone.loss.item(),
        "loss_solved": solved.loss.item(),
        "iterations": solved.solver_steps.float().mean().item(),
        "converged": solved.converged.float().mean().item(),
        "displacement": relative(y_star, y0),
        "proposal_residual": relative(f_y0, y0),
    }
    model.train(was_training)
    return report


class EquilibriumProbe(TrainerCallback):
    """Records :func:`equilibrium_report` on a fixed held-out batch every ``every`` steps (and at step 0)."""

    def __init__(self, model, batch: dict, every: int):
        self.model, self.batch, self.every = model, batch, every
        self.rows: list[dict] = []

    def record(self, step: int) -> None:
        row = {"step": step, **equilibrium_report(self.model, self.batch)}
        self.rows.append(row)
        print(
            f"{row['step']:>6} {row['loss_backbone']:>14.4f} {row['loss_solved']:>12.4f} "
            f"{row['loss_backbone'] - row['loss_solved']:>8.4f} {row['iterations']:>11.1f} {row['converged']:>10.2f} "
            f"{row['displacement']:>13.4f} {row['proposal_residual']:>18.4f}",
            flush=True,
        )

    def on_train_begin(self, args, state, control, **kwargs):
        self.record(0)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.record(state.global_step)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(steps, [r["loss_backbone"] for r in rows], marker="o", label="backbone alone (num_loops=0)")
    ax1.plot(steps, [r["loss_solved"] for r in rows], marker="s", label="solved (fixed point)")
    ax1.set_yscale("log")
    ax1.set_xlabel("training step")
    ax1.set_ylabel("held-out answer loss")
    ax1.legend()
    ax2.plot(steps, [r["iterations"] for r in rows], marker="o", color="tab:green", label="solver iterations")
    ax2.set_xlabel("training step")
    ax2.set_ylabel("iterations to tolerance")
    twin = ax2.twinx()
    twin.plot(steps, [r["displacement"] for r in rows], marker="x", color="tab:red", label="||y* - y0|| / ||y*||")
    twin.set_ylabel("||y* - y0|| / ||y*||")
    handles = ax2.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax2.legend(handles, [h.get_label() for h in handles], loc="lower right")
    fig.suptitle("Attractor LM on addition: equilibrium internalization")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> dict:
    args = parse(argv)
    tokenizer = addition_tokenizer()
    data = build_addition_dataset(args.digits, args.train_size, args.test_size, seed=args.seed)
    model = build_model(args, tokenizer)
    train_tokenizer = copy.deepcopy(tokenizer)
    train_tokenizer.padding_side = "right"
    collator = DataCollatorForSeq2Seq(train_tokenizer, label_pad_token_id=-100)
    held_out = collator(list(tokenize_for_training(data["test"], tokenizer)))
    probe = EquilibriumProbe(model, held_out, args.eval_every)
    training_args = AttractorTrainingArguments(
        **{**common_training_args(args, "run"), "logging_steps": max(1, args.steps // 10)},
        jacobian_weight=args.jacobian_weight,
    )
    trainer = AttractorTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenize_for_training(data["train"], tokenizer),
        data_collator=collator,
        callbacks=[probe],
    )
    print(
        f"Attractor LM: width {args.width}, {args.backbone_layers} backbone + {args.attractor_layers} attractor "
        f"layers, {args.gradient_mode} gradient, budget {args.budget}, tol {args.tol}; {args.digits}-digit addition, "
        f"{args.steps} steps of batch {args.batch_size}"
    )
    print(
        f"{'step':>6} {'loss backbone':>14} {'loss solved':>12} {'gap':>8} {'iterations':>11} {'converged':>10} "
        f"{'||y*-y0||/||y*||':>13} {'||T(y0)-y0||/||T||':>18}"
    )
    started = time.time()
    trainer.train()
    seconds = time.time() - started
    accuracy = {
        "backbone (num_loops=0)": exact_match(model, tokenizer, data["test"], num_loops=0),
        f"solved (num_loops={args.budget})": exact_match(model, tokenizer, data["test"], num_loops=args.budget),
    }
    print(f"trained in {seconds:.0f} s; greedy exact match on {len(data['test'])} held-out problems:")
    for name, value in accuracy.items():
        print(f"  {name:<24} {100 * value:6.1f}%")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    result = {"rows": probe.rows, "exact_match": accuracy, "train_seconds": seconds, "args": vars(args)}
    doc_tables.save_results((args.output_dir / "internalization.json"), result, indent=2, default=str)
    try:
        plot(probe.rows, args.output_dir / "internalization.png")
        print(f"wrote {args.output_dir / 'internalization.png'} and internalization.json")
    except ImportError:
        print("matplotlib is not installed: no plot")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
