"""The ``equilibria`` command."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="equilibria",
        description="Looped and equilibrium language/reasoning models for the Hugging Face ecosystem.",
    )
    parser.add_argument("--version", action="version", version=f"equilibria {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="train a small Ouro model, evaluate it across loop counts, save and reload it")
    demo.add_argument("--output-dir", default="equilibria-demo", help="where to write the Hub-ready folder")
    demo.add_argument("--steps", type=int, default=1500, help="training steps")
    demo.add_argument("--quick", action="store_true", help="a tiny run (seconds), for smoke tests")
    demo.add_argument("--seed", type=int, default=0)
    audit = sub.add_parser(
        "audit",
        help="the computation audit: is a saved model's loop computing, or collapsed onto its start?",
        description="Run the computation audit (T1 substitution, T2 probe, T3 iteration-difficulty correlation, "
        "T4 forced displacement, the zeroing contrast) on a saved model and print the table and verdict.",
    )
    audit.add_argument("model_path", help="a folder written by save_pretrained (any equilibria family)")
    audit.add_argument(
        "--task",
        choices=AUDIT_TASKS,
        default=None,
        help="generate fresh evaluation data for this task (sizes read from the model's config); default: the "
        "family's own (phdeq: reachability, eqr: sudoku or maze by size, language models: addition)",
    )
    audit.add_argument("--dataset", default=None, help="a dataset saved with save_to_disk, instead of --task")
    audit.add_argument("--split", default="test", help="the split of --dataset to audit (default: test)")
    audit.add_argument("--num-examples", type=int, default=500, help="units to audit (default 500)")
    audit.add_argument("--num-loops", type=int, default=None, help="the loop budget (default: the config's)")
    audit.add_argument("--batch-size", type=int, default=64)
    audit.add_argument("--output-dir", default=None, help="write audit.json and audit.png here")
    audit.add_argument("--seed", type=int, default=1234, help="seeds the generated data and the audit")
    audit.add_argument("--trust-remote-code", action="store_true", help="load a folder's own modeling code")
    return parser


AUDIT_TASKS = ("reachability", "sudoku", "maze", "addition")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "demo":
            from .demo import run_demo

            run_demo(output_dir=args.output_dir, steps=args.steps, quick=args.quick, seed=args.seed)
        elif args.command == "audit":
            run_audit(args)
        return 0
    except (ValueError, OSError) as err:
        if args.debug:
            raise
        print(f"equilibria {args.command}: error: {err}", file=sys.stderr)
        return 2


def run_audit(args) -> None:
    """``equilibria audit``: load the model, build or load the data, audit, print (and save)."""
    from pathlib import Path

    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    import equilibria  # noqa: F401  (registers the families)

    from .diagnostics import audit

    if args.num_examples < 1:
        raise ValueError(f"--num-examples must be >= 1, got {args.num_examples}")
    if not Path(args.model_path).is_dir():
        raise ValueError(f"{args.model_path} is not a folder written by save_pretrained")
    config = AutoConfig.from_pretrained(args.model_path, trust_remote_code=args.trust_remote_code)
    auto = {
        "phdeq": AutoModelForSequenceClassification,
        "eqr": AutoModelForTokenClassification,
        "ouro": AutoModelForCausalLM,
        "attractor_lm": AutoModelForCausalLM,
    }.get(config.model_type)
    if auto is None:
        raise ValueError(f"no audit for model_type {config.model_type!r}; supported: phdeq, eqr, ouro, attractor_lm")
    model = auto.from_pretrained(args.model_path, trust_remote_code=args.trust_remote_code)
    if args.dataset is not None:
        if args.task is not None:
            raise ValueError("pass either --task or --dataset, not both")
        from datasets import DatasetDict, load_from_disk

        data = load_from_disk(args.dataset)
        if isinstance(data, DatasetDict):
            if args.split not in data:
                raise ValueError(f"--split {args.split!r} is not in {args.dataset} (splits: {sorted(data)})")
            data = data[args.split]
    else:
        data = audit_task_data(model, args.task, args.num_examples, args.seed, args.model_path)
    report = audit(
        model,
        data,
        num_loops=args.num_loops,
        batch_size=args.batch_size,
        max_units=args.num_examples,
        seed=args.seed,
    )
    print(report)
    if args.output_dir:
        out = report.save(args.output_dir)
        print(f"wrote {out / 'audit.json'}" + (f" and {out / 'audit.png'}" if (out / "audit.png").exists() else ""))


def audit_task_data(model, task: str | None, num: int, seed: int, model_path: str):
    """Fresh evaluation data for ``task`` shaped for ``model`` (sizes from its config)."""
    import math

    config = model.config
    defaults = {"phdeq": "reachability", "ouro": "addition", "attractor_lm": "addition"}
    if task is None:
        if config.model_type == "eqr":
            side = math.isqrt(config.max_seq_len)
            task = "sudoku" if config.vocab_size == 11 and side in (4, 6, 9) else "maze"
        else:
            task = defaults[config.model_type]
    fits = {"reachability": ("phdeq",), "sudoku": ("eqr",), "maze": ("eqr",), "addition": ("ouro", "attractor_lm")}
    if config.model_type not in fits[task]:
        raise ValueError(f"--task {task} does not fit a {config.model_type} model (it fits {fits[task]})")
    if task == "reachability":
        from .tasks import build_reachability_dataset

        nodes = (math.isqrt(9 + 4 * config.input_size) - 3) // 2  # input_size = n^2 + 3n
        if nodes * nodes + 3 * nodes != config.input_size:
            raise ValueError(f"input_size {config.input_size} is not a reachability encoding (n^2 + 3n)")
        return build_reachability_dataset(1, num, num_nodes=nodes, seed=seed)["test"]
    if task in ("sudoku", "maze"):
        from .tasks import build_maze_dataset, build_sudoku_dataset

        side = math.isqrt(config.max_seq_len)
        if task == "sudoku":
            return build_sudoku_dataset(side, 1, num, seed=seed)["test"]
        return build_maze_dataset(side, 1, num, seed=seed, min_path=side)["test"]
    from transformers import AutoTokenizer

    from .tasks import build_addition_dataset, tokenize_for_training

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return tokenize_for_training(build_addition_dataset(2, 1, num, seed=seed)["test"], tokenizer)


if __name__ == "__main__":
    sys.exit(main())
