"""The ``equilibria`` command: each subcommand's arguments are dataclasses (:mod:`equilibria.command_arguments`;
``train``'s in :mod:`equilibria.train.train_arguments`), its work in :mod:`equilibria.commands`, :mod:`equilibria.train`
or :mod:`equilibria.demo`; this module parses and prints, nothing else."""

from __future__ import annotations

import argparse
import re
import sys

from .command_arguments import COMMANDS, UnknownFlags


def build_parser() -> argparse.ArgumentParser:
    """``equilibria [--version] [--debug] COMMAND``: the commands and their one-line help (each command parses its
    own arguments: ``equilibria COMMAND --help``)."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="equilibria",
        description="Looped and equilibrium language/reasoning models for the Hugging Face ecosystem.",
    )
    parser.add_argument("--version", action="version", version=f"equilibria {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub.add_parser(name, add_help=False, help=command.summary)
    return parser


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
    if argv and argv[0] in COMMANDS:
        return _run(argv[0], argv[1:], debug)
    parser = build_parser()
    parser.parse_args(argv)  # --help, --version and an unknown command end here
    parser.print_help(sys.stderr)  # no command: say what there is, and fail (a script that forgot it should notice)
    return 2


def _joined_negative_values(argv: list[str]) -> list[str]:
    """``argv`` with a value that starts with a minus and a digit joined to its flag (``--loops -1,2`` ->
    ``--loops=-1,2``), so that argparse reads it as the value (and the flag's check names what is wrong with it)
    rather than as an unknown flag."""
    out = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.match(r"-\.?\d", arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _run(name: str, argv: list[str], debug: bool) -> int:
    """Parse and run the subcommand ``name``; an error is one line (``--debug``: the traceback)."""
    argv = _joined_negative_values(argv)
    try:
        if name == "train":
            from .train import run_train

            run_train(argv)
        else:
            from .command_arguments import parse_command

            _runner(name)(*parse_command(name, argv))
        return 0
    except (ValueError, OSError) as err:
        if debug:
            raise
        message = err.describe(_other_commands(err.stray, name)) if isinstance(err, UnknownFlags) else err
        print(f"equilibria {name}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if name != "train":
            raise
        from .train import interrupted_hint

        print(f"\nequilibria train: interrupted. {interrupted_hint(argv)}", file=sys.stderr)
        return 130


def _runner(name: str):
    """What runs the subcommand ``name`` (not ``train``), called with its parsed dataclasses."""
    if name == "demo":
        import dataclasses

        from .demo import run_demo

        return lambda args: run_demo(**dataclasses.asdict(args))
    from . import commands

    return {
        "audit": commands.run_audit,
        "diagnose": commands.run_diagnose,
        "eval": commands.run_eval,
        "generate": commands.run_generate,
        "card": commands.run_card,
    }[name]


def _other_commands(names: list[str], command: str) -> dict[str, str]:
    """For each flag name (``breadth``) that another ``equilibria`` command (not ``train``) takes: which commands,
    and the group its help lists it in (``--breadth`` on ``train``: "`equilibria eval` (EqR's test-time scaling)")."""
    from .command_arguments import command_parser

    found: dict[str, list[str]] = {}
    for other, record in COMMANDS.items():
        if other in (command, "train"):
            continue
        parser = command_parser(record.arguments, prog=f"equilibria {other}")
        for name in names:
            spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
            action = next((a for a in parser._actions if spellings & set(a.option_strings)), None)
            if action is None:
                continue
            group = next((g.title for g in parser._action_groups if action in g._group_actions), None) or ""
            group = group.split(" (default")[0].split(";")[0]  # its name, not its explanation
            plain = group in ("", "options", "optional arguments", "positional arguments")
            found.setdefault(name, []).append(f"`equilibria {other}`" + ("" if plain else f" ({group})"))
    return {name: " and ".join(where) for name, where in found.items()}


if __name__ == "__main__":
    sys.exit(main())
