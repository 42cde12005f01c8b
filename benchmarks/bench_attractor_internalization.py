"""Equilibrium internalization: does fixed-point training pull the backbone's proposal y0 onto the equilibrium?

The paper (Fein-Ashley and Rashidinejad, 2026, Sec. 3.3 and 4.3) reports that over training the solver's iterations
fall to a minimum (where a DEQ's grow) and that decoding the proposal alone (T=0) or after one step (T=1) comes
close to the solved model. This script trains one small Attractor with `AttractorTrainer` and records, every
``--eval-every`` steps on held-out data it never trains on:

* the solver's iterations to the tolerance (mean over held-out rows; with the batch stopping rule every row runs as
  long as the slowest, so ``iterations_per_sample`` also records the rows' own stopping steps) and the share that
  converged;
* accuracy at T=0 (the heads read the backbone's proposal alone; not for the DEQ control, whose start is zero), at
  T=1 and at T* (the solve within ``--budget``);
* how far the proposal is from the equilibrium, ``||y* - y0|| / ||y*||``.

Tasks: ``addition`` (the causal LM, 2-digit sums; accuracy is the teacher-forced exact answer: every answer token
and the end token the arg-max given the right prefix, which is greedy decoding's exact match up to the solver's
tolerance) and ``sudoku`` (the puzzle head, 6x6 boards with 18+ clues, test puzzles outside every training
puzzle's class; accuracy is the share of boards solved exactly). ``--form``: the map (``paper``, ``gated``, or
the ``deq`` control: zero start, the backbone's output only injected); ``--gradient-mode``: one-step or implicit.
Each run writes ``internalization.json`` and a plot into its own folder; the docs table reads every run.

    for form in paper gated deq; do python benchmarks/bench_attractor_internalization.py --form $form; done
    python benchmarks/bench_attractor_internalization.py --form paper --gradient-mode implicit
    python benchmarks/bench_attractor_internalization.py --task sudoku --form paper     # and gated, deq
    python benchmarks/bench_attractor_internalization.py --published all --seed 0    # the published code's choices
    python benchmarks/bench_attractor_internalization.py --published neumann --seed 0  # one choice alone
    python benchmarks/bench_attractor_internalization.py --quick    # seconds; a test runs this

``--published``: the published code's choices on top of the paper's map, ``all`` of them or a comma list (each a
documented option of the package): ``gates`` (per-channel LayerScale gates on the attractor layers' branches, starting at the
code's default 0.25), ``neumann`` (the backward ``v + J^T v``, ``J^T v`` clipped to ``||v||``), ``batch_stop``
(iterate until the batch's worst residual is below the tolerance), ``optimizer`` (Muon on the backbone's matrices
and AdamW, ``lr`` 8e-3, betas (0.8, 0.95), eps 1e-10, the attractor at half the learning rate with weight decay 0.1
on its matrices, Muon's 0.2, a constant learning rate with a linear cooldown over the last half). Those runs are
written to ``published-<choices joined by +>-<task>-seed<k>`` (``all`` for the four; ``-lr<x>`` where ``--lr``
replaces the optimizer's).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import results_json
import torch
from bench_stars_addition import common_training_args
from transformers import DataCollatorForSeq2Seq, TrainerCallback, default_data_collator, set_seed

from equilibria import AttractorConfig, AttractorForCausalLM, AttractorForPuzzleSolving
from equilibria.modeling.configuration_attractor import RESIDUAL_FORMS
from equilibria.modeling.puzzles import puzzle_solved
from equilibria.tasks import addition_tokenizer, build_addition_dataset, build_sudoku_dataset, tokenize_for_training
from equilibria.tasks.sudoku import SUDOKU_VOCAB_SIZE
from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments

RESULTS = Path("docs/results/attractor_internalization")
# the published code's choices: (config keys, training-argument keys) of each
PUBLISHED = {
    "gates": ({"layer_scale_init": 0.25, "layer_scale_max": 1.0}, {}),
    "neumann": ({"gradient_mode": "one_step_neumann", "neumann_clip": 1.0}, {"gradient_mode": "one_step_neumann"}),
    "batch_stop": ({"solver_stop": "batch"}, {}),
    "optimizer": (
        {},
        {
            "attractor_optimizer": "muon_adamw",
            "learning_rate": 8e-3,
            "adam_beta1": 0.8,
            "adam_beta2": 0.95,
            "adam_epsilon": 1e-10,
            "weight_decay": 0.0,
            "warmup_steps": 0,
            "lr_scheduler_type": "warmup_stable_decay",
        },
    ),
}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny run for a smoke test")
    p.add_argument("--task", default="addition", choices=["addition", "sudoku"])
    p.add_argument("--form", default="paper", choices=RESIDUAL_FORMS, help="the attractor map (residual_form)")
    p.add_argument("--gradient-mode", default="one_step", choices=["one_step", "implicit"])
    p.add_argument("--digits", type=int, default=2, help="addition: operand digits")
    p.add_argument("--size", type=int, default=6, help="sudoku: board side")
    p.add_argument("--min-clues", type=int, default=18, help="sudoku: keep at least this many clues")
    p.add_argument("--train-size", type=int, default=None, help="default: 6000 sums or 3000 boards")
    p.add_argument("--test-size", type=int, default=300)
    p.add_argument("--steps", type=int, default=None, help="default: 2000 (addition) or 1200 (sudoku)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--lr", type=float, default=None, help="default: 1e-3, or the published code's 8e-3 with its optimizer"
    )
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--backbone-layers", type=int, default=2)
    p.add_argument("--attractor-layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--budget", type=int, default=30, help="solver iterations allowed in training and evaluation")
    p.add_argument("--tol", type=float, default=1e-3, help="the solver's relative-residual tolerance")
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to train (the JSON records it)")
    p.add_argument(
        "--published",
        default=None,
        help=f"the published code's choices on the paper's map: 'all' or one of {', '.join(PUBLISHED)}",
    )
    p.add_argument("--output-dir", type=Path, default=None, help=f"default: {RESULTS}/<task>-<form>-<gradient>")
    args = p.parse_args(argv)
    args.train_size = args.train_size or (6000 if args.task == "addition" else 3000)
    args.steps = args.steps or (2000 if args.task == "addition" else 1200)
    if args.quick:
        args.train_size, args.test_size, args.steps, args.eval_every = 128 if args.task == "addition" else 12, 8, 6, 3
        args.width, args.batch_size, args.budget, args.size, args.min_clues = 32, 16, 10, 4, None
    args.choices = []
    if args.published is not None:
        args.choices = list(PUBLISHED) if args.published == "all" else args.published.split(",")
        unknown = [c for c in args.choices if c not in PUBLISHED]
        if unknown or len(set(args.choices)) != len(args.choices):
            p.error(f"--published: 'all' or a comma list of {', '.join(PUBLISHED)} (each once), got {args.published!r}")
        args.choices = [c for c in PUBLISHED if c in args.choices]  # the canonical order names the folder
        if args.form != "paper" or args.gradient_mode != "one_step":
            p.error("--published applies to the paper's map with its one-step gradient (--form paper)")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device here; use --device cpu")
    args.lr_given = args.lr is not None
    args.lr = args.lr if args.lr_given else 1e-3
    if args.output_dir is None:
        name = f"{args.task}-{args.form}-{args.gradient_mode}".replace("_", "-")
        if args.published:
            which = "all" if len(args.choices) == len(PUBLISHED) else "+".join(args.choices)
            name = f"published-{which}-{args.task}-seed{args.seed}".replace("_", "-")
            name += f"-lr{args.lr:g}" if args.lr_given and "optimizer" in args.choices else ""
        args.output_dir = RESULTS / name
    return args


def published_settings(args) -> tuple[dict, dict]:
    """The config keys and the training arguments of the chosen published choices."""
    config, training = {}, {}
    for choice in args.choices:
        config.update(PUBLISHED[choice][0])
        training.update(PUBLISHED[choice][1])
    if args.lr_given and "learning_rate" in training:  # an explicit --lr replaces the published one
        training["learning_rate"] = args.lr
    if training.get("lr_scheduler_type") == "warmup_stable_decay":
        training["lr_scheduler_kwargs"] = {"num_decay_steps": args.steps // 2, "decay_type": "linear"}
    return config, training


def build_data(args):
    """``(train, held_out_batch, collator, vocab)``: tokenised training rows, one collated batch of the test rows."""
    if args.task == "addition":
        tokenizer = addition_tokenizer()
        data = build_addition_dataset(args.digits, args.train_size, args.test_size, seed=args.seed)
        right = copy.deepcopy(tokenizer)
        right.padding_side = "right"
        collator = DataCollatorForSeq2Seq(right, label_pad_token_id=-100)
        held_out = collator(list(tokenize_for_training(data["test"], tokenizer)))
        return tokenize_for_training(data["train"], tokenizer), held_out, collator, tokenizer
    data = build_sudoku_dataset(args.size, args.train_size, args.test_size, seed=args.seed, min_clues=args.min_clues)
    columns = ["inputs", "labels"]
    train, test = data["train"].select_columns(columns), data["test"].select_columns(columns)
    return train, default_data_collator(list(test)), default_data_collator, SUDOKU_VOCAB_SIZE


def build_model(args, vocab):
    set_seed(args.seed)
    sizes = dict(
        hidden_size=args.width,
        intermediate_size=2 * args.width,
        num_backbone_layers=args.backbone_layers,
        num_attractor_layers=args.attractor_layers,
        num_attention_heads=args.heads,
        num_loops=args.budget,
        solver_tol=args.tol,
        gradient_mode=args.gradient_mode,
        residual_form=args.form,
    )
    sizes.update(published_settings(args)[0])
    if args.task == "addition":
        special = dict(
            pad_token_id=vocab.pad_token_id, bos_token_id=vocab.bos_token_id, eos_token_id=vocab.eos_token_id
        )
        config = AttractorConfig(vocab_size=len(vocab), max_position_embeddings=64, **special, **sizes)
        return AttractorForCausalLM(config)
    config = AttractorConfig(vocab_size=vocab, max_position_embeddings=args.size**2, tie_word_embeddings=False, **sizes)
    return AttractorForPuzzleSolving(config)


def exact(outputs, batch: dict, causal: bool) -> float:
    """Share of rows whose every labelled token (causal: next token) is the arg-max."""
    if not causal:
        return puzzle_solved(outputs.logits, batch["labels"]).float().mean().item()
    targets, predicted = batch["labels"][:, 1:], outputs.logits[:, :-1].argmax(-1)
    return ((predicted == targets) | (targets == -100)).all(1).float().mean().item()


@torch.no_grad()
def equilibrium_report(model, batch: dict, budget: int) -> dict:
    """Accuracy at T=0, T=1 and T* (the solve within ``budget``), the solver's iterations, and the proposal's
    distance from the equilibrium, on one held-out batch."""
    was_training = model.training
    model.eval()
    causal = isinstance(model, AttractorForCausalLM)
    batch = {k: v.to(model.device) for k, v in batch.items()}
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    extra = {"use_cache": False} if causal else {}
    points = (1, budget) if model.config.residual_form == "deq" else (0, 1, budget)  # deq: T=0 is its zero start
    outs = {t: model(**inputs, num_loops=t, output_hidden_states=(t == budget), **extra) for t in points}
    solved = outs[budget]
    y_star, y0 = solved.hidden_states[-1], solved.proposal
    valid = inputs.get("attention_mask", torch.ones(y0.shape[:2], device=y0.device)).bool()
    distance = ((y_star - y0).pow(2).sum(-1) * valid).sum(1).sqrt() / (y_star.pow(2).sum(-1) * valid).sum(1).sqrt()
    report = {
        "accuracy": {str(t): exact(out, batch, causal) for t, out in outs.items()},
        "iterations": solved.solver_steps.float().mean().item(),
        "converged": solved.converged.float().mean().item(),
        "displacement": distance.clamp_max(1e6).mean().item(),
    }
    if model.config.solver_stop == "batch":  # the rows' own stopping steps too: comparable with per-sample runs
        model.config.solver_stop = "per_sample"
        try:
            own = model(**inputs, num_loops=budget, **extra)
        finally:
            model.config.solver_stop = "batch"
        report["iterations_per_sample"] = own.solver_steps.float().mean().item()
    model.train(was_training)
    return report


class EquilibriumProbe(TrainerCallback):
    """Records :func:`equilibrium_report` on the held-out batch every ``every`` steps (and at step 0)."""

    def __init__(self, model, batch: dict, every: int, budget: int):
        self.model, self.batch, self.every, self.budget = model, batch, every, budget
        self.rows: list[dict] = []

    def record(self, step: int) -> None:
        row = {"step": step, **equilibrium_report(self.model, self.batch, self.budget)}
        self.rows.append(row)
        accuracy = " ".join(
            f"{100 * row['accuracy'][t]:7.1f}" if t in row["accuracy"] else "    n/a"
            for t in ("0", "1", str(self.budget))
        )
        print(f"{step:>6} {row['iterations']:>11.1f} {row['converged']:>10.2f} {accuracy} {row['displacement']:>10.3f}")

    def on_train_begin(self, args, state, control, **kwargs):
        self.record(0)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.record(state.global_step)


def plot(rows: list[dict], budget: int, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for t, label in (("0", "T=0 (the proposal)"), ("1", "T=1"), (str(budget), f"T* (budget {budget})")):
        if t in rows[0]["accuracy"]:  # the DEQ control has no T=0
            ax1.plot(steps, [100 * r["accuracy"][t] for r in rows], marker="o", label=label)
    ax1.set_xlabel("training step")
    ax1.set_ylabel("held-out exact accuracy (%)")
    ax1.legend()
    ax2.plot(steps, [r["iterations"] for r in rows], marker="o", color="tab:green")
    ax2.set_xlabel("training step")
    ax2.set_ylabel("solver iterations to tolerance")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> dict:
    args = parse(argv)
    train, held_out, collator, vocab = build_data(args)
    model = build_model(args, vocab)
    probe = EquilibriumProbe(model, held_out, args.eval_every, args.budget)
    common = {**common_training_args(args, "run"), "use_cpu": args.device == "cpu"}
    training_args = AttractorTrainingArguments(**{**common, **published_settings(args)[1]})
    trainer = AttractorTrainer(
        model=model, args=training_args, train_dataset=train, data_collator=collator, callbacks=[probe]
    )
    params = sum(p.numel() for p in model.parameters())
    title = f"Attractor ({args.form} map, {args.gradient_mode} gradient) on {args.task}"
    if args.choices:
        title = f"Attractor (paper's map + the published code's {', '.join(args.choices)}) on {args.task}"
    print(
        f"{title}: {params:,} parameters, budget {args.budget}, tol {args.tol}, {args.steps} steps of {args.batch_size}"
    )
    print(f"{'step':>6} {'iterations':>11} {'converged':>10} {'T=0':>7} {'T=1':>7} {'T*':>7} {'|y*-y0|/|y*|':>10}")
    started = time.time()
    trainer.train()
    seconds = time.time() - started
    args.output_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "rows": probe.rows,
        "train_seconds": seconds,
        "parameters": params,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "held_out": f"{len(held_out['labels'])} test rows, none a training question"
        + (" nor in a training puzzle's class" if args.task == "sudoku" else ""),
        "args": {k: str(v) for k, v in vars(args).items()},
        "published": dict(zip(("config", "training"), published_settings(args)), choices=args.choices),
        "train_log": [row for row in trainer.state.log_history if "loss" in row],  # the logged training loss
    }
    try:  # the plot first, then the JSON (python -m tools.docs rewrites the docs' tables from it)
        plot(probe.rows, args.budget, title, args.output_dir / "internalization.png")
        print(f"wrote {args.output_dir / 'internalization.png'}")
    except ImportError:
        print("matplotlib is not installed: no plot")
    results_json.save_results(args.output_dir / "internalization.json", result, indent=2)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
