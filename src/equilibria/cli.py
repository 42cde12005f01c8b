"""The ``equilibria`` command."""

from __future__ import annotations

import argparse
import sys

from .tasks.registry import TASKS, tasks_help


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="equilibria",
        description="Looped and equilibrium language/reasoning models for the Hugging Face ecosystem.",
    )
    parser.add_argument("--version", action="version", version=f"equilibria {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_demo(sub)
    _add_audit_and_eval(sub)
    sub.add_parser(
        "train",
        add_help=False,
        help="train a family on its task (every TrainingArguments field is a flag; or a YAML/JSON file), evaluate "
        "loop scaling, write a Hub-ready folder; `equilibria train --family F --help` lists the options",
    )
    _add_generate(sub)
    _add_card(sub)
    return parser


def _add_demo(sub) -> None:
    demo = sub.add_parser(
        "demo",
        help="the main job: train a small Ouro model, STARS-fine-tune it, loop scaling, audit, Hub folder, reload",
    )
    demo.add_argument("--output-dir", default="equilibria-demo", help="where to write the Hub-ready folder")
    demo.add_argument("--steps", type=int, default=1500, help="training steps of the plain model")
    demo.add_argument("--stars-steps", type=int, default=600, help="STARS fine-tuning steps")
    demo.add_argument("--quick", action="store_true", help="a tiny run (seconds), for smoke tests")
    demo.add_argument("--seed", type=int, default=0)


def _add_audit_and_eval(sub) -> None:
    """``audit`` and ``eval``: a saved model, its evaluation data, and what each measures."""
    commands = {
        "audit": (
            "the computation audit: is a saved model's loop computing, or collapsed onto its start?",
            "Run the computation audit (T1 substitution, T2 probe, T3 iteration-difficulty correlation, T4 forced "
            "displacement, the zeroing contrast) on a saved model and print the table and verdict.",
            500,
            "audit.json and audit.png",
        ),
        "eval": (
            "loop scaling: a saved model's accuracy at several loop counts (table, JSON and plot)",
            "Accuracy of a saved model at each loop count on its task: exact match of greedy answers (language "
            "models), exact solves at that depth (EqR), accuracy with that solver cap (PH-DEQ).",
            200,
            "loop_scaling.json and loop_scaling.png",
        ),
    }
    for name, (summary, description, num_examples, output) in commands.items():
        parser = sub.add_parser(name, help=summary, description=description)
        _add_model_and_data(parser, num_examples, output)
        if name == "audit":
            parser.add_argument("--num-loops", type=int, default=None, help="the loop budget (default: the config's)")
        else:
            parser.add_argument(
                "--loops", default="1,2,4,8,16", help="comma-separated loop counts (default 1,2,4,8,16)"
            )
            parser.add_argument("--digits", type=int, default=2, help="addition: operand digits")
            _add_eqr_options(parser)
            harness = parser.add_argument_group(
                'lm-evaluation-harness (language models; pip install "equilibria[eval]")'
            )
            harness.add_argument(
                "--lm-eval-tasks",
                default=None,
                help="comma-separated lm-eval tasks run at each of --loops instead of the task's loop scaling "
                "(writes lm_eval.json/png)",
            )
            harness.add_argument("--lm-eval-include", default=None, help="a folder of your own lm-eval task YAMLs")
            harness.add_argument(
                "--lm-eval-limit", type=float, default=None, help="documents per task (a fraction if < 1)"
            )
            harness.add_argument("--lm-eval-fewshot", type=int, default=None, help="few-shot examples per prompt")


def _add_eqr_options(parser) -> None:
    """``eval``'s test-time options of a puzzle solver (EqR): breadth, the selection rule, adaptive halting."""
    eqr = parser.add_argument_group("EqR's test-time scaling")
    eqr.add_argument(
        "--breadth",
        type=int,
        default=1,
        help="random restarts per puzzle, one answer picked by --select (test-time breadth)",
    )
    eqr.add_argument(
        "--select",
        choices=("residual", "vote", "halt"),
        default="residual",
        help="with --breadth: the restart with the lowest residual, the most common answer, or the one the halting "
        "head is surest of",
    )
    eqr.add_argument(
        "--halt-threshold",
        type=float,
        default=None,
        help="stop each puzzle once its halting head reaches this probability (adaptive computation); --loops are "
        "then maximum depths and the table adds the mean evaluations per puzzle (NFE)",
    )


def _add_model_and_data(parser, num_examples: int, output: str) -> None:
    """The options ``audit`` and ``eval`` share: the saved model, where its data come from (the data flags of
    ``equilibria train``), and where results go."""
    parser.add_argument("model_path", help="a folder written by save_pretrained (any equilibria family)")
    data = parser.add_argument_group(
        "the data (default: the held-out rows the folder's training_data.json names, for a model trained on rows of "
        "its own; else fresh generated problems of the task it was trained on); rows asking a training question "
        "are always left out"
    )
    data.add_argument(
        "--dataset_name",
        "--dataset-name",
        "--dataset",
        dest="dataset_name",
        default=None,
        help="your rows, read as `equilibria train --dataset_name` reads them: a .json/.jsonl/.csv/.parquet file, a "
        "save_to_disk folder or a Hub dataset id (language models: prompt/completion (or prompt/answer), messages or "
        "text rows; EqR / PH-DEQ: inputs/labels rows or a published puzzle CSV)",
    )
    data.add_argument("--dataset_config", "--dataset-config", default=None, help="the Hub dataset's configuration")
    data.add_argument(
        "--split",
        "--dataset_test_split",
        dest="split",
        default=None,
        help="the split of --dataset_name (default: test when it has one, else train)",
    )
    data.add_argument(
        "--dataset_text_field", "--dataset-text-field", default=None, help="the column of plain-text rows (text)"
    )
    data.add_argument(
        "--eval_metric",
        "--eval-metric",
        default=None,
        help="language models on rows of text: token_accuracy or exact_match (default: what training used; for a "
        "new file exact_match on prompt/completion rows, else token_accuracy)",
    )
    data.add_argument("--max_length", "--max-length", type=int, default=None, help="tokens per row (longer are cut)")
    data.add_argument(
        "--task",
        choices=TASKS,
        default=None,
        help="fresh generated problems of this task (sizes read from the model's config) instead: " + tasks_help(),
    )
    data.add_argument(
        "--num-examples",
        "--num_examples",
        dest="num_examples",
        type=int,
        default=None,
        help=f"at most this many rows (generated problems: {num_examples})",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output-dir", default=None, help=f"write {output} here (usually the model's folder)")
    parser.add_argument("--seed", type=int, default=1234, help="seeds the generated data (and the audit)")
    parser.add_argument("--trust-remote-code", action="store_true", help="load a folder's own modeling code")


def _add_generate(sub) -> None:
    gen = sub.add_parser("generate", help="generate text from a saved looped language model at --num-loops")
    gen.add_argument("model_path")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--num-loops", type=int, default=None, help="default: the saved generation config's")
    gen.add_argument("--max-new-tokens", type=int, default=32)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy; > 0 samples")
    gen.add_argument(
        "--exit-threshold",
        type=float,
        default=None,
        help="Ouro: early exit, a token stops looping once its exit gate's cumulative probability reaches this, in "
        "(0, 1] (default: the config's; 1 = no early exit)",
    )
    gen.add_argument("--stream", action="store_true", help="print tokens as they are generated")
    gen.add_argument("--trust-remote-code", action="store_true")


def _add_card(sub) -> None:
    card = sub.add_parser(
        "card",
        help="write a saved model's Hub model card (README.md) from its loop scaling and audit results",
        description="Writes README.md into the model folder: metadata (model-index results per loop count), how to "
        "load it with and without the package, loop scaling (loop_scaling.json/png from `equilibria eval "
        "--output-dir MODEL_PATH`), the audit verdict (audit.json from `equilibria audit --output-dir MODEL_PATH`).",
    )
    card.add_argument("model_path")
    card.add_argument("--repo-id", default=None, help="the Hub repo it will be pushed to (for the snippets)")
    card.add_argument("--loop-scaling", default=None, help="a loop_scaling.json (default: the folder's)")
    card.add_argument("--audit", default=None, help="an audit.json (default: the folder's)")
    card.add_argument("--dataset", action="append", default=[], help="a Hub dataset id (repeatable)")
    card.add_argument("--task-name", default=None)
    card.add_argument("--base-model", default=None, help="the Hub id it was fine-tuned from")
    card.add_argument("--license", default=None, help="default: the card's, else apache-2.0")
    card.add_argument("--trust-remote-code", action="store_true")


TRAINING_DEBUG_VALUES = ("underflow_overflow", "tpu_metrics_debug")  # TrainingArguments' own --debug takes these


def _strip_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without this command's ``--debug`` (anywhere, before or after the subcommand), and whether it was
    there; ``--debug underflow_overflow`` (a ``TrainingArguments`` option) is left alone."""
    kept, debug = [], False
    for i, arg in enumerate(argv):
        if arg == "--debug" and not (i + 1 < len(argv) and argv[i + 1] in TRAINING_DEBUG_VALUES):
            debug = True
        else:
            kept.append(arg)
    return kept, debug


def main(argv: list[str] | None = None) -> int:
    argv, debug = _strip_debug(sys.argv[1:] if argv is None else list(argv))
    if argv[:1] == ["train"]:
        return _train(argv[1:], debug)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.debug = debug
    if args.command is None:  # no command: say what there is, and fail (a script that forgot it should notice)
        parser.print_help(sys.stderr)
        return 2
    try:
        if args.command == "demo":
            from .demo import run_demo

            run_demo(
                output_dir=args.output_dir,
                steps=args.steps,
                stars_steps=args.stars_steps,
                quick=args.quick,
                seed=args.seed,
            )
        elif args.command in ("audit", "eval", "generate", "card"):
            from . import commands

            {
                "audit": commands.run_audit,
                "eval": commands.run_eval,
                "generate": commands.run_generate,
                "card": commands.run_card,
            }[args.command](args)
        return 0
    except (ValueError, OSError) as err:
        if args.debug:
            raise
        print(f"equilibria {args.command}: error: {err}", file=sys.stderr)
        return 2


def _train(argv: list[str], debug: bool) -> int:
    from .train import UnusedFlags, interrupted_hint, run_train

    try:
        run_train(argv)
        return 0
    except (ValueError, OSError) as err:
        if debug:
            raise
        message = err.describe(_other_commands(err.stray)) if isinstance(err, UnusedFlags) else err
        print(f"equilibria train: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nequilibria train: interrupted. {interrupted_hint(argv)}", file=sys.stderr)
        return 130


def _other_commands(names: list[str]) -> dict[str, str]:
    """For each flag name (``breadth``) that another ``equilibria`` command takes: which commands, and the group
    its help lists it in (``--breadth`` on ``train``: "`equilibria eval` (EqR's test-time scaling)")."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    found: dict[str, list[str]] = {}
    for name in names:
        spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
        for command, sub in commands.items():
            action = next((a for a in sub._actions if spellings & set(a.option_strings)), None)
            if action is None:
                continue
            group = next((g.title for g in sub._action_groups if action in g._group_actions), None) or ""
            group = group.split(" (default")[0].split(";")[0]  # its name, not its explanation
            plain = group in ("", "options", "optional arguments", "positional arguments")
            found.setdefault(name, []).append(f"`equilibria {command}`" + ("" if plain else f" ({group})"))
    return {name: " and ".join(where) for name, where in found.items()}


if __name__ == "__main__":
    sys.exit(main())
