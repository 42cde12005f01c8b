"""Early exit on addition, with the exit gate trained each way: accuracy against the mean number of loop steps.

The README's earlier (before issue #59) `equilibria train` model (2-digit addition, 4 loops, 1500 steps) is trained once per
``OuroConfig.exit_loss`` ("expected_logits", the published code's loss and the default; "expected", the Ouro
paper's objective; "final", the last step only, which leaves the gate untrained and frozen). Each is evaluated on
the same 200 held-out problems by greedy generation: at fixed loop counts 1-4, and with early exit for a sweep of
exit thresholds (both readouts: "frozen", the compute-saving one, and "reference", the published one). For each
point: exact-match accuracy and the mean number of loop steps run per answer token (``cache.exit_steps``).

    python benchmarks/bench_exit_gate.py           # full run, about ten minutes on 2 CPU cores
    python benchmarks/bench_exit_gate.py --quick   # seconds; a test runs this

Results: ``docs/results/exit_gate.json`` and ``exit_gate.png`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import results_json
import torch

from equilibria import OuroCache
from equilibria.tasks import addition_tokenizer, build_task
from equilibria.train import train_and_evaluate

EXIT_LOSSES = ("expected_logits", "expected", "final")
README_FLAGS = (
    "--family ouro --task addition --use_cpu --learning_rate 1e-3 --per_device_train_batch_size 64 "
    "--lr_scheduler_type cosine --warmup_steps 75 --weight_decay 0.01 --min_loops 4 --max_loops 4 --jsrr_weight 0 "
    "--report_to none --save_strategy no --disable_tqdm true"
)


def generate_points(model, tokenizer, problems, **generate_kwargs) -> tuple[float, float]:
    """``(exact-match accuracy, mean loop steps per answer token)`` of greedy generation with these options."""
    tokenizer.padding_side = "left"
    enc = tokenizer(list(problems["prompt"]), return_tensors="pt", padding=True, add_special_tokens=False)
    width = max(len(a) for a in problems["answer"]) + 1
    with torch.no_grad():
        out = model.generate(
            **enc, max_new_tokens=width, do_sample=False, return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, cache=OuroCache(), **generate_kwargs,
        )  # fmt: skip
    prompt = enc["input_ids"].shape[1]
    texts = tokenizer.batch_decode(out.sequences[:, prompt:], skip_special_tokens=True)
    accuracy = sum(t.strip() == a for t, a in zip(texts, list(problems["answer"]))) / len(texts)
    answer_steps = out.cache.exit_steps[:, prompt - 1 :].float()  # the positions that produced the answer
    return accuracy, float(answer_steps.mean())


def evaluate(model, tokenizer, problems, thresholds) -> dict:
    points = {"fixed": {}, "frozen": {}, "reference": {}}
    for loops in range(1, 5):
        points["fixed"][str(loops)] = generate_points(model, tokenizer, problems, num_loops=loops, exit_threshold=1.0)
    for threshold in thresholds:
        for readout in ("frozen", "reference"):
            points[readout][str(threshold)] = generate_points(
                model, tokenizer, problems, num_loops=4, exit_threshold=threshold, exit_readout=readout
            )
    return {kind: {k: {"accuracy": a, "mean_steps": s} for k, (a, s) in p.items()} for kind, p in points.items()}


def run(args) -> dict:
    results = {"command": "python benchmarks/bench_exit_gate.py" + (" --quick" if args.quick else ""), "losses": {}}
    problems = build_task("addition", args.train_size, args.test_size, seed=42).test  # the split training holds out
    tokenizer = addition_tokenizer()
    for exit_loss in EXIT_LOSSES:
        started = time.time()
        with tempfile.TemporaryDirectory() as out:
            argv = README_FLAGS.split() + [
                "--output_dir", out, "--max_steps", str(args.steps), "--exit_loss", exit_loss,
                "--train_size", str(args.train_size), "--test_size", str(args.test_size), "--eval_loops", "4",
            ]  # fmt: skip
            trainer, _ = train_and_evaluate(argv)
        model = trainer.accelerator.unwrap_model(trainer.model).eval()
        results["losses"][exit_loss] = evaluate(model, tokenizer, problems, args.thresholds)
        results["losses"][exit_loss]["train_seconds"] = round(time.time() - started, 1)
    return results


def print_table(results: dict) -> None:
    print("exit loss        | point            | accuracy | mean steps")
    for loss, kinds in results["losses"].items():
        for kind in ("fixed", "frozen", "reference"):
            for key, point in kinds[kind].items():
                label = f"{key} loops" if kind == "fixed" else f"{kind} @ {key}"
                print(f"{loss:<16} | {label:<16} | {100 * point['accuracy']:7.1f}% | {point['mean_steps']:.2f}")


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results["losses"]), figsize=(4 * len(results["losses"]), 3.4), sharey=True)
    for ax, (loss, kinds) in zip(axes, results["losses"].items()):
        for kind, style in (("fixed", "o-"), ("frozen", "s--"), ("reference", "x:")):
            points = sorted(kinds[kind].values(), key=lambda p: p["mean_steps"])
            ax.plot([p["mean_steps"] for p in points], [100 * p["accuracy"] for p in points], style, label=kind)
        ax.set_title(f"exit_loss={loss}")
        ax.set_xlabel("mean loop steps per answer token")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact match (%)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output-dir", default=str(Path(__file__).resolve().parent.parent / "docs" / "results"))
    args = parser.parse_args(argv)
    args.steps, args.train_size, args.test_size = (20, 64, 16) if args.quick else (1500, 2000, 200)
    args.thresholds = (0.5, 0.9) if args.quick else (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
    results = run(args)
    print_table(results)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_json.save_results((out / "exit_gate.json"), results, indent=1)
    plotted = plot(results, out / "exit_gate.png")
    print(f"wrote {out / 'exit_gate.json'}" + (f" and {out / 'exit_gate.png'}" if plotted else ""))
    return results


if __name__ == "__main__":
    main()
