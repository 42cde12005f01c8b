"""The arguments of every ``equilibria`` subcommand, and the one way they are read.

Each subcommand's options are dataclass fields parsed by ``HfArgumentParser`` (:func:`command_parser`); a field's
``metadata`` holds its help (and ``choices``), a dataclass's ``_argument_group_name`` its group in ``--help``. A
flag has one spelling, the field's name (``--num_examples``; ``HfArgumentParser`` takes ``--num-examples`` too);
a dataclass's ``_renamed_flags`` maps the names flags had in 0.2 to the new ones, which still work for one
release with a deprecation warning. ``--config FILE.yaml`` (or a YAML/JSON file given first) sets any flags,
keys being the flags' names, and flags on the command line override it (:func:`parse_command`).

:class:`DataArguments` are the data flags ``train``, ``eval`` and ``audit`` share; ``train`` adds its splits and
sizes (:class:`equilibria.train.train_arguments.TrainDataArguments`), ``eval`` and ``audit`` a row count
(:class:`EvaluationDataArguments`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .tasks.registry import TASKS, tasks_help
from .tasks.row_files import parse_columns

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_FLAG = re.compile(r"^--?[A-Za-z]")


# ---- the mechanism -----------------------------------------------------------------------------------------------


@functools.cache
def _hf_argument_parser() -> type:
    """``HfArgumentParser`` with positional fields: a field whose metadata has ``"positional": True`` is an
    argument without a flag (``equilibria eval MODEL_PATH``), optional to argparse so that a config file may set it
    (:func:`parse_dataclasses` refuses it missing)."""
    from transformers import HfArgumentParser

    class CommandParser(HfArgumentParser):
        @staticmethod
        def _parse_dataclass_field(parser, dataclass_field):
            if not dataclass_field.metadata.get("positional"):
                return HfArgumentParser._parse_dataclass_field(parser, dataclass_field)
            parser.add_argument(dataclass_field.name, nargs="?", default=None, help=dataclass_field.metadata["help"])

    return CommandParser


def command_parser(dataclass_types: tuple[type, ...], prog: str, **kwargs):
    """The ``HfArgumentParser`` of ``dataclass_types`` for the command ``prog``, with ``--config``."""
    parser = _hf_argument_parser()(dataclass_types, prog=prog, **kwargs)
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="a YAML or JSON file setting any of these flags (keys are the flags' names); flags given here override it",
    )
    return parser


def split_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """``(config file, the other arguments)``: the file ``--config FILE`` (or ``--config=FILE``) names, or a file
    ending in .yaml, .yml or .json given first (``equilibria train run.yaml``); ``None`` without one."""
    argv, found = list(argv), []
    if argv and argv[0].endswith(CONFIG_SUFFIXES) and not argv[0].startswith("-"):
        found.append(argv.pop(0))
    rest = []
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            found.append(arg.split("=", 1)[1])
        elif arg == "--config" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif not (i and argv[i - 1] == "--config"):
            rest.append(arg)
    if len(found) > 1:
        raise ValueError(f"one config file at most, got {found}")
    return (found[0] if found else None), rest


def read_config(path: str | None) -> dict:
    """The keys of the YAML/JSON config file ``path`` (``{}`` for ``None``)."""
    if path is None:
        return {}
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such config file: {file}")
    text = file.read_text()
    if file.suffix == ".json":
        values = json.loads(text)
    else:
        import yaml

        values = yaml.safe_load(text)
    if not isinstance(values, dict):
        raise ValueError(
            f"{file}: a config file holds `key: value` lines (the flags' names), got {type(values).__name__}"
        )
    return values


def renamed_flags(argv: list[str], renamed: dict[str, str], command: str) -> list[str]:
    """``argv`` with the flags renamed since 0.2 (``renamed``: old name -> new) spelt the new way, each old one warned
    about (a ``DeprecationWarning`` and a line on stderr naming the new flag)."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        old = name[2:] if name.startswith("--") else None
        if old in renamed:
            message = f"--{old} is deprecated (it goes in the next release): use --{renamed[old]}"
            warnings.warn(message, DeprecationWarning, stacklevel=3)
            print(f"equilibria {command}: warning: {message}", file=sys.stderr)
            arg = f"--{renamed[old]}{eq}{value}"
        out.append(arg)
    return out


def apply_config(parser, values: dict, source: str | None, unknown) -> None:
    """Make the config file's ``values`` the parser's defaults (argparse then reads a string value as the flag
    would: YAML's ``1e-4`` is a number); a key that is no flag raises ``unknown(names, known, source)``."""
    known = {action.dest for action in parser._actions} - {"help", "config"}
    strays = sorted(set(values) - known)
    if strays:
        raise unknown(strays, known, source)
    for action in parser._actions:  # the file stands in for the flags it sets, required ones included
        if action.dest in values:
            action.required = False
    parser.set_defaults(**values)


def parse_dataclasses(parser, argv: list[str], unknown) -> tuple:
    """The parser's dataclasses filled from ``argv``: flags no dataclass has raise ``unknown(names, known)`` (before
    any value is checked: a misspelt flag comes first), a missing positional argument is argparse's error."""
    namespace, remaining = parser.parse_known_args(args=argv)
    if remaining:
        flags = [arg.split("=", 1)[0].lstrip("-").replace("-", "_") for arg in remaining if _FLAG.match(arg)]
        if not flags:
            raise ValueError(
                f"unexpected argument(s) {remaining}: `{parser.prog}` takes --flag value pairs (and a config file, "
                "ending in .yaml, .yml or .json, first or after --config)"
            )
        raise unknown(flags, {action.dest for action in parser._actions} - {"help", "config"}, None)
    positional = [action.dest for action in parser._actions if not action.option_strings]
    missing = [name for name in positional if getattr(namespace, name) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    return tuple(
        cls(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls) if f.init})
        for cls in parser.dataclass_types
    )


def parse_command(name: str, argv: list[str]) -> tuple:
    """The dataclasses of the subcommand ``name`` (not ``train``: :func:`equilibria.train.parse_train_args`) from
    ``argv``: a config file first, then the flags, old names warned about."""
    command = COMMANDS[name]
    parser = command_parser(command.arguments, prog=f"equilibria {name}", description=command.description)
    path, argv = split_config(argv)
    renamed = {old: new for cls in command.arguments for old, new in getattr(cls, "_renamed_flags", {}).items()}
    argv = renamed_flags(argv, renamed, name)

    def unknown(names, known, source):
        return UnknownFlags(name, names, known, source)

    apply_config(parser, read_config(path), path, unknown)
    return parse_dataclasses(parser, argv, unknown)


class UnknownFlags(ValueError):
    """Flags (or keys of the config file ``source``) that ``equilibria COMMAND`` does not take, each with the
    nearest name it takes. :meth:`describe` says so; its ``others`` adds which other commands take a flag (the CLI
    knows its commands)."""

    def __init__(self, command: str, names: list[str], known: set[str], source: str | None = None):
        self.command, self.known, self.source = command, known, source
        self.stray = list(dict.fromkeys(names))
        super().__init__(self.describe())

    def label(self, name: str) -> str:
        return f"key `{name}`" if self.source else f"--{name}"

    def parts(self, others: dict[str, str] | None) -> list[str]:
        """What is wrong with each name, in order; ``others``: the other commands that take a stray flag."""
        import difflib

        parts = []
        for name in self.stray:
            if others and name in others:
                parts.append(
                    f"{self.label(name)} is not a flag of `equilibria {self.command}`: it is one of {others[name]}"
                )
                continue
            close = difflib.get_close_matches(name, sorted(self.known), n=1, cutoff=0.7)
            guess = (f"`{close[0]}`" if self.source else f"--{close[0]}") if close else None
            kind = "" if self.source else "flag "
            parts.append(f"unknown {kind}{self.label(name)}" + (f" (did you mean {guess}?)" if guess else ""))
        return parts

    def help_command(self) -> str:
        return f"equilibria {self.command} --help"

    def describe(self, others: dict[str, str] | None = None) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{'; '.join(self.parts(others))}; `{self.help_command()}` lists the flags"


# ---- the data flags of train, eval and audit ------------------------------------------------------------------------


@dataclass
class DataArguments:
    """Where the rows come from and how they are read: the data flags ``train``, ``eval`` and ``audit`` share."""

    _argument_group_name = "the data"

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "your rows: a Hub dataset id, a local .json/.jsonl/.csv/.parquet file or a save_to_disk folder; "
            "language models: prompt/completion (or prompt/answer), messages or text rows (see "
            "equilibria.tasks.text_data); EqR / PH-DEQ: inputs/labels rows of --task, or a published puzzle CSV "
            "(Sudoku-Extreme, Maze-Hard)"
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "the Hub dataset's configuration"})
    dataset_test_split: str | None = field(
        default=None,
        metadata={
            "help": "the split evaluated on (train: test, and without it --test_size rows are held out; eval, audit: "
            "test when the data has one, else train)"
        },
    )
    dataset_columns: str | None = field(
        default=None,
        metadata={
            "help": "map the rows' own columns onto a format: COLUMN=TARGET pairs, TARGET prompt, completion, text or "
            "messages (renamed), or chat roles system, user, assistant (a conversation of those columns, in this "
            "order; the loss on the assistant turn), e.g. problem=user,solution=assistant (NuminaMath); eval, audit: "
            "default the training record's"
        },
    )
    dataset_text_field: str | None = field(
        default=None, metadata={"help": "the column of plain-text rows (default: what training used, else text)"}
    )
    eval_metric: str | None = field(
        default=None,
        metadata={
            "help": "language models on rows of text: token_accuracy or exact_match (prompt/completion rows); train's "
            "default token_accuracy; eval's and audit's what training used, for a new file exact_match on "
            "prompt/completion rows, else token_accuracy"
        },
    )
    max_length: int | None = field(
        default=None,
        metadata={"help": "tokens per row (longer rows are cut; train's default min(1024, max_position_embeddings))"},
    )
    task: str | None = field(
        default=None,
        metadata={
            "choices": TASKS,
            "help": "generated problems of this task (eval, audit: fresh ones, sizes read from the model's config), or "
            "(EqR, PH-DEQ) what the rows of --dataset_name are (default: the checkpoint's task, else the family's "
            "first): " + tasks_help(),
        },
    )
    digits: int | None = field(
        default=None,
        metadata={"help": "addition: operand digits (train: default 2; eval, audit: default the training record's)"},
    )
    reverse_answer: bool | None = field(
        default=None,
        metadata={
            "nargs": "?",  # `--reverse_answer` alone means true (HfArgumentParser asks a value of a bool defaulting None)
            "const": True,
            "help": "addition: the STARS reference code's format (operands of exactly --digits digits, the answer a "
            "space and the sum least-significant digit first); eval, audit: default the training record's",
        },
    )

    min_clues: int | None = field(
        default=None,
        metadata={
            "help": "sudoku: clues a generated puzzle keeps at the least (default: removed while the solution stays "
            "unique, the fewest; more clues make easier puzzles); eval, audit: default the training record's"
        },
    )

    def task_options(self) -> dict:
        """The generated task's format options these flags set (unset ones left to the task's default)."""
        return {"reverse_answer": self.reverse_answer, "min_clues": self.min_clues}


@dataclass
class EvaluationDataArguments(DataArguments):
    """``eval``'s and ``audit``'s data: :class:`DataArguments` and how many rows."""

    _argument_group_name = (
        "the data (default: the held-out rows the folder's training_data.json names, for a model trained on rows of "
        "its own; else fresh generated problems of the task it was trained on); rows asking a training question are "
        "always left out"
    )
    _renamed_flags = {"dataset": "dataset_name", "split": "dataset_test_split"}

    num_examples: int | None = field(
        default=None, metadata={"help": "at most this many rows (generated problems: eval 200, audit 500)"}
    )

    def evaluation_options(self, seed: int) -> dict:
        """The keyword arguments of :func:`~equilibria.evaluation.evaluation_data` these flags set."""
        return dict(
            task=self.task,
            dataset_name=self.dataset_name,
            dataset_config=self.dataset_config,
            split=self.dataset_test_split,
            text_field=self.dataset_text_field,
            metric=self.eval_metric,
            max_length=self.max_length,
            num_examples=self.num_examples,
            seed=seed,
            digits=self.digits,
            task_options=self.task_options(),
            columns=parse_columns(self.dataset_columns),
        )


# ---- eval, audit, generate, card, demo ------------------------------------------------------------------------------


def _model_path() -> dataclasses.Field:
    return field(
        default=None,
        metadata={"positional": True, "help": "a folder written by save_pretrained (any equilibria family)"},
    )


def _trust_remote_code() -> dataclasses.Field:
    return field(default=False, metadata={"help": "load a folder's own modeling code"})


@dataclass
class SavedModelRunArguments:
    """What ``eval`` and ``audit`` share beside the data: the saved model, batches, seed, where results go."""

    model_path: str | None = _model_path()
    batch_size: int = field(default=64, metadata={"help": "examples per forward"})
    output_dir: str | None = field(
        default=None, metadata={"help": "write the results (JSON and plot) here (usually the model's folder)"}
    )
    seed: int = field(default=1234, metadata={"help": "seeds the generated data (and the audit)"})
    trust_remote_code: bool = _trust_remote_code()


@dataclass
class AuditArguments(SavedModelRunArguments):
    num_loops: int | None = field(default=None, metadata={"help": "the loop budget (default: the config's)"})


@dataclass
class EvalArguments(SavedModelRunArguments):
    loops: str = field(default="1,2,4,8,16", metadata={"help": "comma-separated loop counts"})


@dataclass
class DiagnoseArguments(SavedModelRunArguments):
    loops: str = field(
        default="1,2,4,8,16,32,64",
        metadata={
            "help": "comma-separated loop steps at which the spectral radius is estimated (the trajectory runs to the largest)"
        },
    )
    power_iters: int = field(default=20, metadata={"help": "power iterations per spectral-radius estimate"})
    batch_size: int = field(default=32, metadata={"help": "examples per forward"})


@dataclass
class SearchArguments:
    """``eval``'s test-time options of a puzzle solver (EqR): breadth, the selection rule, adaptive halting."""

    _argument_group_name = "EqR's test-time scaling"

    breadth: int = field(
        default=1, metadata={"help": "random restarts per puzzle, one answer picked by --select (test-time breadth)"}
    )
    select: str = field(
        default="residual",
        metadata={
            "choices": ("residual", "vote", "halt"),
            "help": "with --breadth: the restart with the lowest residual, the most common answer, or the one the "
            "halting head is surest of",
        },
    )
    halt_threshold: float | None = field(
        default=None,
        metadata={
            "help": "stop each puzzle once its halting head reaches this probability (adaptive computation); --loops "
            "are then maximum depths and the table adds the mean evaluations per puzzle (NFE)"
        },
    )


@dataclass
class LmEvalArguments:
    _argument_group_name = 'lm-evaluation-harness (language models; pip install "equilibria[eval]")'

    lm_eval_tasks: str | None = field(
        default=None,
        metadata={
            "help": "comma-separated lm-eval tasks run at each of --loops instead of the task's loop scaling (writes "
            "lm_eval.json/png)"
        },
    )
    lm_eval_include: str | None = field(default=None, metadata={"help": "a folder of your own lm-eval task YAMLs"})
    lm_eval_limit: float | None = field(default=None, metadata={"help": "documents per task (a fraction if < 1)"})
    lm_eval_fewshot: int | None = field(default=None, metadata={"help": "few-shot examples per prompt"})


@dataclass
class GenerateArguments:
    model_path: str | None = _model_path()
    prompt: str | None = field(default=None, metadata={"required": True, "help": "the text to continue"})
    num_loops: int | None = field(default=None, metadata={"help": "default: the saved generation config's"})
    max_new_tokens: int = field(default=32, metadata={"help": "tokens generated after the prompt"})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy; > 0 samples"})
    exit_threshold: float | None = field(
        default=None,
        metadata={
            "help": "Ouro: early exit, a token stops looping once its exit gate's cumulative probability reaches "
            "this, in (0, 1] (default: the config's; 1 = no early exit)"
        },
    )
    stream: bool = field(default=False, metadata={"help": "print tokens as they are generated"})
    trust_remote_code: bool = _trust_remote_code()


@dataclass
class CardArguments:
    model_path: str | None = _model_path()
    repo_id: str | None = field(default=None, metadata={"help": "the Hub repo it will be pushed to (for the snippets)"})
    loop_scaling: str | None = field(
        default=None,
        metadata={"help": "a loop-scaling JSON (default: the folder's eval_loop_scaling.json, else loop_scaling.json)"},
    )
    audit: str | None = field(default=None, metadata={"help": "an audit.json (default: the folder's)"})
    dataset: list[str] = field(
        default_factory=list,
        metadata={"action": "append", "help": "a Hub dataset id the results were computed on (repeatable)"},
    )
    task_name: str | None = field(default=None, metadata={"help": "the task's name on the card"})
    base_model: str | None = field(default=None, metadata={"help": "the Hub id it was fine-tuned from"})
    license: str | None = field(default=None, metadata={"help": "default: the card's, else apache-2.0"})
    trust_remote_code: bool = _trust_remote_code()

    def __post_init__(self):
        # --dataset a --dataset b appends lists ([["a"], ["b"]]); a config file's list is flat
        self.dataset = [d for item in self.dataset for d in ([item] if isinstance(item, str) else item)]


@dataclass
class DemoArguments:
    output_dir: str = field(default="equilibria-demo", metadata={"help": "where to write the Hub-ready folder"})
    steps: int = field(default=1500, metadata={"help": "training steps of the plain model"})
    stars_steps: int = field(default=600, metadata={"help": "STARS fine-tuning steps"})
    quick: bool = field(default=False, metadata={"help": "a tiny run (seconds), for smoke tests"})
    seed: int = field(default=0, metadata={"help": "seeds the data, the models and the training"})


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in ``equilibria --help``, its description, the dataclasses of its arguments (``()``
    for ``train``, whose training arguments are its family's)."""

    summary: str
    description: str | None = None
    arguments: tuple[type, ...] = ()


COMMANDS = {
    "demo": Command(
        "the main job: train a small Ouro model, STARS-fine-tune it, loop scaling, audit, Hub folder, reload",
        arguments=(DemoArguments,),
    ),
    "audit": Command(
        "the computation audit: is a saved model's loop computing, or collapsed onto its start?",
        "Run the computation audit (T1 substitution, T2 probe, T3 iteration-difficulty correlation, T4 forced "
        "displacement, the zeroing contrast) on a saved model and print the table and verdict (--output_dir: "
        "audit.json and audit.png).",
        (AuditArguments, EvaluationDataArguments),
    ),
    "eval": Command(
        "loop scaling: a saved model's accuracy at several loop counts (table, JSON and plot)",
        "Accuracy of a saved model at each loop count on its task: exact match of greedy answers (language "
        "models), exact solves at that depth (EqR), accuracy with that solver cap (PH-DEQ) (--output_dir: "
        "eval_loop_scaling.json and eval_loop_scaling.png; train's own loop_scaling.json stays).",
        (EvalArguments, EvaluationDataArguments, SearchArguments, LmEvalArguments),
    ),
    "train": Command(
        "train a family on its task (every TrainingArguments field is a flag; or a YAML/JSON file), evaluate loop "
        "scaling, write a Hub-ready folder; `equilibria train --family F --help` lists the options"
    ),
    "generate": Command(
        "generate text from a saved looped language model at --num_loops", arguments=(GenerateArguments,)
    ),
    "diagnose": Command(
        "the loop's trajectory: per loop step the state's norm, the relative step, the spectral radius",
        "Follow a saved model's loop step by step on its task's data (64 examples unless --num_examples): the mean "
        "norm of the state, the relative step |z_t - z_t-1| / |z_t-1| and a power-iteration estimate of the spectral "
        "radius of the loop map's Jacobian at each of --loops (the STARS paper's norm diagnosis: pre-norm states "
        "grow, post-norm ones stall; --output_dir: trajectory.json and trajectory.png).",
        (DiagnoseArguments, EvaluationDataArguments),
    ),
    "card": Command(
        "write a saved model's Hub model card (README.md) from its loop scaling and audit results",
        "Writes README.md into the model folder: metadata (model-index results per loop count), how to load it with "
        "and without the package, loop scaling (eval_loop_scaling.json/png from `equilibria eval --output_dir "
        "MODEL_PATH`, else train's loop_scaling.json/png; the card names the one it shows), the audit verdict (audit.json from `equilibria audit --output_dir MODEL_PATH`).",
        (CardArguments,),
    ),
}
