"""The STARS ablation on multi-digit addition: four kinds of training of a small Ouro model, evaluated across loop
counts, beyond the sampled range too.

All kinds start from the same random weights and see the same data in the same order for the same number of
steps with the same optimiser:

* ``plain``: transformers' ``Trainer`` at a fixed loop count (``--train-loops``);
* ``sampling``: ``StarsTrainer`` with its log-normal loop sampling only (``jsrr_weight=0``);
* ``jsrr``: ``StarsTrainer`` at the fixed loop count with the Jacobian spectral-radius penalty only;
* ``stars``: both (the paper's method).

Printed, per kind: exact-match accuracy on held-out problems at each test loop count (default 1 to 64), and the
latent dynamics at every loop step: the mean relative change ||h_{t+1} - h_t|| / ||h_t|| (does the state settle?)
and the spectral-radius estimate of the loop map's Jacobian at h_t (20 power iterations, t in powers of two). The
plot (accuracy against loops; relative step against t) is saved as a PNG, the numbers as JSON.

    python benchmarks/bench_stars_addition.py             # the full ablation (about 70 minutes on 2 CPU cores)
    python benchmarks/bench_stars_addition.py --kinds plain,stars --digits 3 --train-size 30000
    python benchmarks/bench_stars_addition.py --digits 4 --reverse-answer --pad-operands --train-size 100000
                                                          # the paper's 4-digit task (needs more steps than here)
    python benchmarks/bench_stars_addition.py --quick     # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from pathlib import Path

import doc_tables
import torch
from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments, set_seed

from equilibria import OuroForCausalLM
from equilibria.families import small_ouro_config
from equilibria.tasks import (
    addition_tokenizer,
    build_addition_dataset,
    evaluate_loop_scaling,
    tokenize_for_training,
)
from equilibria.trainers import StarsTrainer, StarsTrainingArguments, spectral_radius

KINDS = ("plain", "sampling", "jsrr", "stars")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny run for a smoke test")
    p.add_argument("--digits", type=int, default=2)
    p.add_argument(
        "--reverse-answer",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="write sums least-significant digit first (the STARS reference code's format)",
    )
    p.add_argument(
        "--pad-operands",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="fixed-width operands and sums (0034+5678=05712)",
    )
    p.add_argument("--train-size", type=int, default=8000)
    p.add_argument("--test-size", type=int, default=300)
    p.add_argument("--steps", type=int, default=4500)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--train-loops", type=int, default=4, help="the fixed loop count of plain and jsrr")
    p.add_argument("--min-loops", type=int, default=2)
    p.add_argument("--max-loops", type=int, default=16)
    p.add_argument("--loop-log-mean", type=float, default=math.log(5))
    p.add_argument("--loop-log-std", type=float, default=0.5)
    p.add_argument("--jsrr-weight", type=float, default=0.1)
    p.add_argument("--jsrr-power-iters", type=int, default=4)
    p.add_argument("--jsrr-penalty", default="hinge", choices=["square", "hinge"])
    p.add_argument("--jsrr-target", type=float, default=0.9)
    p.add_argument("--jsrr-warmup-steps", type=int, default=1000)
    p.add_argument("--eval-loops", default="1,2,4,8,16,32,64")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default=",".join(KINDS), help=f"which of {KINDS} to train (comma-separated)")
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/stars_addition"))
    args = p.parse_args(argv)
    if args.quick:
        args.digits, args.train_size, args.test_size, args.steps, args.jsrr_warmup_steps = 2, 512, 16, 4, 1
        args.width, args.batch_size, args.max_loops, args.eval_loops = 32, 16, 4, "1,2,4"
        args.train_loops = 2
    args.eval_loops = [int(x) for x in args.eval_loops.split(",")]
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        p.error(f"--kinds {unknown}: the kinds are {KINDS}")
    return args


def build_model(args, tokenizer) -> OuroForCausalLM:
    set_seed(args.seed)
    config = small_ouro_config(
        tokenizer,
        hidden_size=args.width,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        total_ut_steps=args.train_loops,
    )
    config.exit_loss = "final"  # STARS trains the state after the sampled number of steps (as recorded)
    return OuroForCausalLM(config)


def common_training_args(args, name: str) -> dict:
    return dict(
        output_dir=str(args.output_dir / name),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=max(1, args.steps // 20),
        lr_scheduler_type="cosine",
        weight_decay=0.01,
        max_grad_norm=1.0,
        logging_steps=max(1, args.steps // 20),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=args.seed,
        data_seed=args.seed,
        disable_tqdm=True,
    )


@torch.no_grad()
def latent_dynamics(model, tokenizer, dataset, max_loops: int, power_iters: int = 20) -> dict:
    """Mean relative step ||h_{t+1} - h_t|| / ||h_t|| for t = 1..max_loops-1, and the spectral radius estimate of
    the loop map at h_t for t in powers of two, on a batch of test prompts."""
    model.eval()
    enc = tokenizer(list(dataset["prompt"][:64]), return_tensors="pt", padding=True, add_special_tokens=False)
    core = model.model
    out = core(**enc, num_loops=max_loops, output_hidden_states=True, use_cache=False)
    states = out.hidden_states  # embeddings, then h_1 .. h_T
    valid = enc["attention_mask"].bool()
    steps = []
    for t in range(1, max_loops):
        change = (states[t + 1] - states[t]).norm(dim=-1) / states[t].norm(dim=-1).clamp_min(1e-12)
        steps.append(change[valid].mean().item())
    f = core.loop_map(**enc)
    radius = {}
    t = 1
    while t <= max_loops:
        with torch.enable_grad():
            rho = spectral_radius(
                f,
                states[t],
                num_iters=power_iters,
                valid=enc["attention_mask"],
                create_graph=False,
                generator=torch.Generator().manual_seed(0),
            )
        radius[t] = rho.mean().item()
        t *= 2
    return {"relative_step": steps, "spectral_radius": radius}


def train_one(kind: str, args, data, tokenizer) -> dict:
    model = build_model(args, tokenizer)
    train_tokenizer = copy.deepcopy(tokenizer)
    train_tokenizer.padding_side = "right"
    train_set = tokenize_for_training(data["train"], tokenizer)
    collator = DataCollatorForSeq2Seq(train_tokenizer, label_pad_token_id=-100)
    if kind == "plain":
        trainer = Trainer(
            model=model,
            args=TrainingArguments(**common_training_args(args, kind)),
            train_dataset=train_set,
            data_collator=collator,
        )
    else:
        fixed = kind == "jsrr"  # the penalty at the fixed loop count, no sampling
        trainer = StarsTrainer(
            model=model,
            args=StarsTrainingArguments(
                **common_training_args(args, kind),
                min_loops=args.train_loops if fixed else args.min_loops,
                max_loops=args.train_loops if fixed else args.max_loops,
                loop_log_mean=math.log(args.train_loops) if fixed else args.loop_log_mean,
                loop_log_std=0.0 if fixed else args.loop_log_std,
                jsrr_weight=0.0 if kind == "sampling" else args.jsrr_weight,
                jsrr_power_iters=args.jsrr_power_iters,
                jsrr_penalty=args.jsrr_penalty,
                jsrr_target=args.jsrr_target,
                jsrr_warmup_steps=args.jsrr_warmup_steps,
            ),
            train_dataset=train_set,
            data_collator=collator,
        )
    started = time.time()
    trainer.train()
    train_seconds = time.time() - started
    accuracy = evaluate_loop_scaling(model, tokenizer, data["test"], loops=args.eval_loops)
    dynamics = latent_dynamics(model, tokenizer, data["test"], max(args.eval_loops))
    history = [h for h in trainer.state.log_history if "loss" in h]
    print(
        f"  {kind}: trained {args.steps} steps in {train_seconds:.0f} s; final logged loss "
        f"{history[-1]['loss'] if history else float('nan'):.4f}",
        flush=True,
    )
    return {"accuracy": accuracy, "dynamics": dynamics, "train_seconds": train_seconds, "log": history}


def plot(results: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for kind, res in results.items():
        loops = sorted(res["accuracy"])
        left.plot(loops, [100 * res["accuracy"][n] for n in loops], marker="o", label=kind)
        steps = res["dynamics"]["relative_step"]
        right.plot(range(1, len(steps) + 1), steps, label=kind)
    left.set_xscale("log", base=2)
    left.axvline(args.train_loops, color="grey", linestyle=":", label=f"plain / jsrr train at {args.train_loops}")
    left.axvspan(args.min_loops, args.max_loops, color="grey", alpha=0.1, label="sampling / stars range")
    left.set_xlabel("loops at test time")
    left.set_ylabel("exact match (%)")
    left.set_title(f"{args.digits}-digit addition")
    left.legend()
    right.set_yscale("log")
    right.set_xlabel("loop step t")
    right.set_ylabel("||h(t+1) - h(t)|| / ||h(t)||")
    right.set_title("does the latent state settle?")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> dict:
    args = parse(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(
        f"{args.digits}-digit addition{' (answers reversed)' if args.reverse_answer else ''}: "
        f"{args.train_size} train / {args.test_size} test problems, {args.steps} steps of {args.batch_size}; "
        f"Ouro width {args.width}, {args.layers} layers; plain / jsrr at {args.train_loops} loops; sampled loops in "
        f"[{args.min_loops}, {args.max_loops}] (log-normal {args.loop_log_mean:.2f} +- {args.loop_log_std}), "
        f"JSRR {args.jsrr_penalty} weight {args.jsrr_weight}",
        flush=True,
    )
    data = build_addition_dataset(
        args.digits,
        args.train_size,
        args.test_size,
        seed=args.seed,
        reverse_answer=args.reverse_answer,
        pad_operands=args.pad_operands,
    )
    tokenizer = addition_tokenizer()
    results = {kind: train_one(kind, args, data, tokenizer) for kind in args.kinds}

    print("\nexact match by loops at test time")
    print("loops     " + "".join(f"{n:>8}" for n in args.eval_loops))
    for kind, res in results.items():
        print(f"{kind:<10}" + "".join(f"{100 * res['accuracy'][n]:>7.1f}%" for n in args.eval_loops))
    print("\nlatent dynamics: spectral radius estimate of the loop map at h_t (20 power iterations)")
    ts = sorted(next(iter(results.values()))["dynamics"]["spectral_radius"])
    print("t         " + "".join(f"{t:>8}" for t in ts))
    for kind, res in results.items():
        print(f"{kind:<10}" + "".join(f"{res['dynamics']['spectral_radius'][t]:>8.3f}" for t in ts))
    print("\nmean relative step ||h_{t+1} - h_t|| / ||h_t||")
    shown = [t for t in range(1, max(args.eval_loops)) if t & (t - 1) == 0 or t == max(args.eval_loops) - 1]
    print("t         " + "".join(f"{t:>9}" for t in shown))
    for kind, res in results.items():
        print(f"{kind:<10}" + "".join(f"{res['dynamics']['relative_step'][t - 1]:>9.2e}" for t in shown))

    png = args.output_dir / "stars_addition.png"
    plot(results, args, png)
    command = "python benchmarks/bench_stars_addition.py " + " ".join(argv if argv is not None else sys.argv[1:])
    doc_tables.save_results(
        args.output_dir / "results.json",
        {"command": command.strip(), "args": {k: str(v) for k, v in vars(args).items()}, "results": results},
        indent=1,
        default=str,
    )
    print(f"\nplot: {png}\nresults: {args.output_dir / 'results.json'}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
