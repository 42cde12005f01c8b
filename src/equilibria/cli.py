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
    return parser


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
        return 0
    except (ValueError, OSError) as err:
        if args.debug:
            raise
        print(f"equilibria {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
