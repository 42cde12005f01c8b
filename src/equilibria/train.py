"""``equilibria train``: train any family on its task with its Trainer, then evaluate loop scaling and write a
Hub-ready folder (weights, remote code, tokenizer, card, plot) into ``--output_dir``.

Options are dataclass fields parsed with ``HfArgumentParser``: [`ModelArguments`], [`DataArguments`] and the
family's ``TrainingArguments`` subclass (every ``TrainingArguments`` field is a flag). A YAML or JSON file with the
same keys can stand in for the flags (``equilibria train config.yaml``). For several processes put the same command
behind ``torchrun`` or ``accelerate launch`` (``torchrun --nproc_per_node 2 -m equilibria.cli train ...``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .families import FAMILIES
from .scaling import loop_scaling, loop_scaling_report, parse_loops
from .tasks.registry import TASKS, puzzle_cells, tasks_help
from .wording import counted, with_article

DTYPES = ("float32", "bfloat16", "float16", "auto")  # what from_pretrained(dtype=...) takes by name


@dataclass
class ModelArguments:
    _argument_group_name = "the model: a checkpoint to fine-tune, or a new small one of a family"

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "a saved folder or Hub id to fine-tune (any family; a published Ouro checkpoint loads as is); the "
            "family comes from its config. Without it a new model is built from the sizes below"
        },
    )
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={"help": "the tokenizer for --dataset_name (default: the checkpoint's own)"},
    )
    family: str | None = field(
        default=None, metadata={"help": f"a new model's family: one of {tuple(FAMILIES)} (default ouro)"}
    )
    hidden_size: int | None = field(default=None, metadata={"help": "a new model's width (128; PH-DEQ: of q and p)"})
    num_layers: int | None = field(
        default=None, metadata={"help": "a new model's layers in the looped stack / backbone / block (2)"}
    )
    num_attention_heads: int | None = field(
        default=None, metadata={"help": "a new model's attention heads (4; Ouro, Attractor, EqR)"}
    )
    num_loops: int | None = field(
        default=None,
        metadata={
            "help": "the loop count saved in the config, also of a checkpoint (default 4 / the checkpoint's; Ouro: "
            "recurrence steps; Attractor, PH-DEQ: solver budget; EqR: iterations per segment)"
        },
    )
    exit_loss: str | None = field(
        default=None,
        metadata={
            "help": "Ouro: the loss with labels: expected_logits (the published code's, the default), expected (the "
            "paper's) or final (the last step's; what fixed loop counts read)"
        },
    )
    dtype: str = field(
        default="float32",
        metadata={"choices": DTYPES, "help": "the dtype a checkpoint's weights are loaded in (auto: the checkpoint's)"},
    )
    use_peft: bool = field(default=False, metadata={"help": "fine-tune the checkpoint with LoRA (peft)"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (the update is scaled alpha / r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on LoRA's input"})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={
            "help": "the module names LoRA adapts (default: the family's attention projections q_proj k_proj v_proj "
            "o_proj; PH-DEQ: potential_q potential_c port)"
        },
    )
    lora_save: str = field(
        default="merged",
        metadata={
            "help": "merged: the folder holds the LoRA-merged weights (loads like any checkpoint); adapter: the "
            "adapter alone (loads onto the checkpoint with peft)"
        },
    )

    def __post_init__(self):
        for name, meaning in (
            ("hidden_size", "a new model's width"),
            ("num_layers", "a new model's layers"),
            ("num_attention_heads", "a new model's attention heads"),
            ("lora_r", "the LoRA rank"),
        ):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"--{name} must be an integer >= 1 ({meaning}), got {value!r}")
        check_num_loops(self.num_loops, self.family)


def check_num_loops(value, family: str | None) -> None:
    """``--num_loops`` must be an integer no smaller than the family's fewest loops (``family`` ``None``: not known
    yet, the fewest of any family); the error names the flag and what each family takes."""
    if value is None:
        return
    records = [FAMILIES[family]] if family in FAMILIES else list(FAMILIES.values())
    if not (isinstance(value, bool) or not isinstance(value, int) or value < min(r.min_loops for r in records)):
        return
    takes = "; ".join(
        f">= {r.min_loops} for {r.model_type} ({r.loop_meaning}, saved as the config's {r.loops_key})" for r in records
    )
    raise ValueError(f"--num_loops must be an integer {takes}, got {value!r}")


NEW_MODEL_SIZES = {"hidden_size": 128, "num_layers": 2, "num_attention_heads": 4, "num_loops": 4}


@dataclass
class DataArguments:
    _argument_group_name = "the data: your own (--dataset_name) or a task's generated problems, and the evaluation"

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "your rows: a Hub dataset id, a local .json/.jsonl/.csv/.parquet file or a save_to_disk folder; "
            "language models: prompt/completion, messages or text rows (see equilibria.tasks.text_data); EqR / "
            "PH-DEQ: inputs/labels rows of --task, or a published puzzle CSV (Sudoku-Extreme, Maze-Hard)"
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "the Hub dataset's configuration"})
    dataset_train_split: str = field(default="train", metadata={"help": "the split trained on"})
    dataset_test_split: str = field(
        default="test", metadata={"help": "the split evaluated on; without it --test_size rows are held out"}
    )
    dataset_text_field: str = field(default="text", metadata={"help": "the column of plain-text rows"})
    max_length: int | None = field(
        default=None,
        metadata={"help": "tokens per row (longer rows are cut; default min(1024, max_position_embeddings))"},
    )
    packing: bool = field(default=False, metadata={"help": "concatenate rows into blocks of --max_length tokens"})
    eval_metric: str = field(
        default="token_accuracy",
        metadata={"help": "--dataset_name's loop-scaling measure: token_accuracy or exact_match (prompt/completion)"},
    )
    task: str | None = field(
        default=None,
        metadata={
            "choices": TASKS,
            "help": "generated problems of this task, or (EqR, PH-DEQ) what the rows of --dataset_name are "
            "(default: the checkpoint's task, else the family's first): " + tasks_help(),
        },
    )
    train_size: int | None = field(
        default=None, metadata={"help": "training examples (generated: 2000; --dataset_name: all rows)"}
    )
    test_size: int | None = field(
        default=None,
        metadata={
            "help": "held-out examples of the loop-scaling evaluation (generated: 200; --dataset_name: at most 200 of "
            "its test split, else a tenth of its rows, 5 to 200, held out before training)"
        },
    )
    digits: int = field(default=2, metadata={"help": "addition: operand digits"})
    size: int = field(default=4, metadata={"help": "sudoku / maze: board side (a checkpoint's own when given)"})
    nodes: int = field(default=16, metadata={"help": "reachability: graph nodes (a checkpoint's own when given)"})
    split_by: str = field(
        default="class",
        metadata={
            "help": "sudoku / maze: test puzzles outside every training puzzle's class up to the task's symmetries "
            "(class), or only different boards (board: a memorisation check, for sizes with few classes like 4x4)",
            "choices": ["class", "board"],
        },
    )
    eval_loops: str = field(default="1,2,4,8", metadata={"help": "loop counts of the loop-scaling evaluation"})
    data_seed_offset: int = field(default=0, metadata={"help": "added to --seed for the data"})

    def __post_init__(self):
        for name, value in (("max_length", self.max_length), ("train_size", self.train_size)):
            if value is not None and value < 1:
                raise ValueError(f"--{name} must be >= 1, got {value}")
        if self.test_size is not None and self.test_size < 0:
            raise ValueError(f"--test_size must be >= 0 (0: no held-out evaluation), got {self.test_size}")


TRAIN_HELP = (
    "Train a family on its task with its Trainer, evaluate loop scaling on held-out data, and write a Hub-ready "
    "folder into --output_dir. A YAML/JSON file given first sets any flags (keys are the flag names); flags after it "
    "override it. The training flags are transformers' TrainingArguments plus the family's own (shown for --family; "
    "`equilibria train --family eqr --help` shows EqR's). Run several processes with torchrun or accelerate launch."
)


def _config_file(argv: list[str]) -> dict:
    """The keys of the YAML/JSON config file given as the first argument (``{}`` without one)."""
    if not (argv and argv[0].endswith((".yaml", ".yml", ".json"))):
        return {}
    path = Path(argv[0])
    if not path.is_file():
        raise ValueError(f"no such config file: {path}")
    text = path.read_text()
    if path.suffix == ".json":
        values = json.loads(text)
    else:
        import yaml

        values = yaml.safe_load(text)
    if not isinstance(values, dict):
        raise ValueError(
            f"{path}: a config file holds `key: value` lines (the flags' names), got {type(values).__name__}"
        )
    return values


def _flag(argv: list[str], file_values: dict, name: str):
    """The value of ``--name`` (or ``--na-me``, which ``HfArgumentParser`` takes too) on the command line, else in
    the config file, else ``None``."""
    value = file_values.get(name)
    spellings = (f"--{name}", f"--{name.replace('_', '-')}")
    for i, arg in enumerate(argv):
        if arg in spellings and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(tuple(f"{flag}=" for flag in spellings)):
            value = arg.split("=", 1)[1]
    return value


def _family_of(argv: list[str], file_values: dict) -> str:
    """``--family``, or the family of ``--model_name_or_path``'s config (they must agree), else the first family (Ouro)."""
    family = _flag(argv, file_values, "family")
    checkpoint = _flag(argv, file_values, "model_name_or_path")
    if checkpoint:
        found = checkpoint_config(checkpoint).model_type
        if family not in (None, found):
            raise ValueError(f"--family {family}, but {checkpoint} is {with_article(found)} model: drop --family")
        family = found
    family = family or next(iter(FAMILIES))  # the first record: Ouro
    if family not in FAMILIES:
        raise ValueError(f"--family must be one of {tuple(FAMILIES)}, got {family!r}")
    return family


def checkpoint_config(path: str):
    """The config of the checkpoint at ``path`` (a folder or Hub id); ``ValueError`` when it cannot be read or is
    not of an equilibria family."""
    from transformers import AutoConfig

    from .families import family_record

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"--model_name_or_path {path}: cannot read a config.json there ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]})"
        ) from None
    try:
        family_record(config)
    except ValueError as err:
        raise ValueError(f"--model_name_or_path {path}: {err}") from None
    return config


def _arguments_class(model_type: str) -> type:
    """The ``TrainingArguments`` class of the family's trainer (:func:`~equilibria.trainers.trainer_for`)."""
    from .trainers import trainer_for

    return trainer_for(model_type).arguments_class


def parse_train_args(argv: list[str]):
    """``(model_args, data_args, training_args)`` from flags, or from a YAML/JSON file given first (its keys are
    the flags' names) with any flags after it overriding the file (``equilibria train run.yaml --max_steps 2``)."""
    from transformers import HfArgumentParser

    file_values = _config_file(argv)
    family = _family_of(argv, file_values)
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, _arguments_class(family)),
        prog="equilibria train",
        usage=f"equilibria train [CONFIG.yaml] [--model_name_or_path CHECKPOINT | --family {{{','.join(FAMILIES)}}}] "
        "[--dataset_name DATA | --task TASK] [--output_dir DIR] [--FLAG VALUE ...]",
        description=TRAIN_HELP,
    )
    # --help: the model and data groups first, then the (long) training flags, titled
    parser._optionals.title = f"training: transformers' TrainingArguments, then {family}'s own (at the end)"
    parser._action_groups.append(parser._action_groups.pop(parser._action_groups.index(parser._optionals)))
    parser.set_defaults(family=family)  # the arguments' own checks know the family (the checkpoint's, or the default)
    known = {action.dest for action in parser._actions}
    if file_values:
        unknown = sorted(set(file_values) - known)
        if unknown:
            raise UnusedFlags(family, unknown, known, source=argv[0])
        for action in parser._actions:  # the file stands in for the flags it sets, required ones included
            if action.dest in file_values:
                action.required = False
        parser.set_defaults(**file_values)
        argv = argv[1:]
    if _flag(argv, file_values, "output_dir") is None and not {"-h", "--help"} & set(argv):
        raise ValueError("--output_dir is required: the folder the trained model, its results and card are written to")
    _, remaining = parser.parse_known_args(args=argv)  # before any argument is checked: a misspelt flag comes first
    if remaining:
        flags = [arg.split("=", 1)[0].lstrip("-").replace("-", "_") for arg in remaining if _FLAG.match(arg)]
        if not flags:
            raise ValueError(
                f"unexpected argument(s) {remaining}: `equilibria train` takes --flag value pairs (and a config file, "
                "ending in .yaml, .yml or .json, first)"
            )
        raise UnusedFlags(family, flags, known)
    model_args, data_args, args = parser.parse_args_into_dataclasses(args=argv)
    model_args.family = family
    check_train_args(model_args, data_args, args)
    return model_args, data_args, args


_FLAG = re.compile(r"^--?[A-Za-z]")


class UnusedFlags(ValueError):
    """Flags (or keys of the config file ``source``) that ``equilibria train`` of ``family`` does not take: those of
    another family's training arguments, named with their families, and the others (``stray``), with the nearest
    name it takes. :meth:`describe` says so; its ``others`` adds which other commands take a stray flag (the CLI
    knows its commands)."""

    def __init__(self, family: str, names: list[str], known: set[str], source: str | None = None):
        from dataclasses import fields

        self.family, self.known, self.source = family, known, source
        self.owners = {}  # name -> the other families whose training arguments have it
        for other in FAMILIES:
            if other != family:
                for f in fields(_arguments_class(other)):
                    if f.name in names:
                        self.owners.setdefault(f.name, []).append(other)
        self.stray = [name for name in dict.fromkeys(names) if name not in self.owners]
        super().__init__(self.describe())

    def describe(self, others: dict[str, str] | None = None) -> str:
        import difflib

        def label(name: str) -> str:
            return f"key `{name}`" if self.source else f"--{name}"

        parts = []
        for name, families in self.owners.items():
            classes = ", ".join(_arguments_class(f).__name__ for f in families)
            parts.append(
                f"{label(name)} is a flag of the {' and '.join(families)} "
                f"{'families' if len(families) > 1 else 'family'} ({classes}), not of {self.family}, the family "
                "trained here"
            )
        for name in self.stray:
            if others and name in others:
                parts.append(f"{label(name)} is not a flag of `equilibria train`: it is one of {others[name]}")
                continue
            close = difflib.get_close_matches(name, sorted(self.known), n=1, cutoff=0.7)
            guess = (f"`{close[0]}`" if self.source else f"--{close[0]}") if close else None
            kind = "" if self.source else "flag "
            parts.append(f"unknown {kind}{label(name)}" + (f" (did you mean {guess}?)" if guess else ""))
        where = f"{self.source}: " if self.source else ""
        return f"{where}{'; '.join(parts)}; `equilibria train --family {self.family} --help` lists the flags"


def check_train_args(model_args: ModelArguments, data_args: DataArguments, args) -> None:
    """Refuse, before any data or model is built, values that would train something other than what was asked
    (``TrainingArguments`` turns a negative ``max_steps`` into epochs) or fail only after training; resolve
    ``--resume_from_checkpoint last`` (or ``true``) to the newest checkpoint in ``--output_dir``."""
    if args.max_steps == 0 or args.max_steps < -1:
        raise ValueError(
            f"--max_steps must be a number of optimizer steps >= 1 (or -1: train --num_train_epochs epochs), got "
            f"{args.max_steps}"
        )
    family = FAMILIES[model_args.family]
    check_num_loops(model_args.num_loops, family.model_type)
    check_training_arguments(args)
    parse_loops(data_args.eval_loops, "--eval_loops", family.min_loops)
    checkpoint = model_args.model_name_or_path
    if checkpoint and Path(checkpoint).exists() and Path(checkpoint).resolve() == Path(args.output_dir).resolve():
        raise ValueError(
            f"--output_dir {args.output_dir} is the checkpoint being fine-tuned (--model_name_or_path): it would be "
            "overwritten; write the fine-tuned model to another folder"
        )
    args.resume_from_checkpoint = resume_checkpoint(args.resume_from_checkpoint, args.output_dir)


def check_training_arguments(args) -> None:
    """Refuse ``TrainingArguments`` values that fail only once training starts, far from the flag (a DataLoader's
    "batch_size should be a positive integer value", the optimizer's "Invalid learning rate", "[Errno 17] File
    exists"), naming the flag and the values it takes."""
    import math

    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name} must be an integer >= 1, got {value!r}")
    rate = args.learning_rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate >= 0):
        raise ValueError(
            f"--learning_rate must be a number >= 0 (the optimizer's step size, e.g. 5e-5; 0 leaves the weights as "
            f"they are), got {rate!r}"
        )
    if args.max_steps == -1 and not args.num_train_epochs > 0:
        raise ValueError(
            f"--num_train_epochs must be > 0 (with --max_steps -1 it is how long training runs), got "
            f"{args.num_train_epochs}"
        )
    out = Path(args.output_dir)
    existing = next((path for path in (out, *out.parents) if path.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "is an existing file" if existing == out else f"is inside {existing}, an existing file"
        raise ValueError(
            f"--output_dir {args.output_dir} {where}, not a folder: give a folder to write the trained model into (a "
            "new one, or an earlier run's)"
        )


def interrupted_hint(argv: list[str]) -> str:
    """What to do after Ctrl-C: resume from the newest checkpoint in ``--output_dir``, or how to get checkpoints."""
    from transformers.trainer_utils import get_last_checkpoint

    try:
        output_dir = _flag(argv, _config_file(argv), "output_dir")
    except ValueError:
        output_dir = None
    last = get_last_checkpoint(output_dir) if output_dir and Path(output_dir).is_dir() else None
    if last is None:
        return "No checkpoint was saved (--save_steps N saves one every N steps); rerun the command to start again."
    return f"Resume from {last} with the same command and --resume_from_checkpoint last (or {last})."


def resume_checkpoint(value: str | None, output_dir: str) -> str | None:
    """The checkpoint folder ``--resume_from_checkpoint`` names: a ``checkpoint-N`` folder written by the Trainer,
    or ``last`` / ``true`` for the newest one in ``output_dir``; ``None`` for no resume. ``ValueError`` when there
    is no such checkpoint."""
    from transformers.trainer_utils import get_last_checkpoint

    if value is None or str(value).lower() in ("", "none", "false"):
        return None
    if str(value).lower() in ("last", "true"):
        found = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
        if found is None:
            raise ValueError(f"--resume_from_checkpoint {value}: {output_dir} holds no checkpoint-N folder to resume")
        return found
    if not (Path(value) / "trainer_state.json").is_file():
        raise ValueError(
            f"--resume_from_checkpoint {value}: not a checkpoint written by the Trainer (a checkpoint-N folder with "
            "trainer_state.json); `last` resumes the newest one in --output_dir"
        )
    return value


def build(model_args: ModelArguments, data_args: DataArguments, seed: int):
    """``(model, data, collator)``: the data (:class:`~equilibria.tasks.TaskData`: your ``--dataset_name`` rows,
    or the task's generated splits with its tokenizer and training-question fingerprints) and the model: the
    checkpoint ``--model_name_or_path``, or a new one of the family with a small config sized by ``model_args``."""
    from .families import model_task
    from .tasks import ROWS_TASK, check_task
    from .tasks.text_data import training_collator

    family = FAMILIES[model_args.family]
    checkpoint = model_args.model_name_or_path
    config = checkpoint_config(checkpoint) if checkpoint else None
    given = [f"--{key}" for key in NEW_MODEL_SIZES if key != "num_loops" and getattr(model_args, key) is not None]
    if config is not None and given:
        raise ValueError(f"{', '.join(given)} size a new model; {checkpoint} keeps its own: drop them")
    _overrides(model_args, family)
    if model_args.use_peft and checkpoint is None:
        raise ValueError("--use_peft adapts a trained checkpoint: give --model_name_or_path")
    what = f"--family {model_args.family}"
    if data_args.task is not None:  # the head the data is for: the task's, else a checkpoint's own
        head = family.head_for_task(check_task(data_args.task), what)
    else:
        head = family.head_of_config(config) if config is not None else family.heads[0]
    puzzle = head.auto_class != "AutoModelForCausalLM"
    text = family.heads[0].auto_class == "AutoModelForCausalLM" and not puzzle  # --dataset_name holds text rows
    if data_args.dataset_name and data_args.task and text:
        raise ValueError("pass either --dataset_name (your rows) or --task (generated problems), not both")
    if data_args.dataset_name and text:
        head, task, data = family.heads[0], None, _dataset(model_args, data_args, family, config, seed)
    else:
        own = model_task(config) if config is not None else family.default_task
        task = check_task(data_args.task or (own if own in head.tasks else head.tasks[0]))
        head = family.head_for_task(task, what)
        data = _task_data(task, data_args, config, seed + data_args.data_seed_offset)
        if config is not None and data.tokenizer is not None:
            _check_task_tokenizer(checkpoint, data.tokenizer, task)
    model = _model(model_args, family, head, data, config)
    # the last stage's task: a generated task, or rows of your own (no generated task is then the model's)
    model.config.equilibria_task = task if task is not None else ROWS_TASK
    if model_args.use_peft:
        model = with_lora(model, model_args, family)
    collator = training_collator(data.tokenizer) if data.tokenizer is not None else None  # text: right padding
    return model, data, collator


def _task_data(task: str, data_args: DataArguments, config, seed: int):
    """The :class:`~equilibria.tasks.TaskData` of ``task``: rows of ``--dataset_name`` (a published puzzle CSV, or
    ``inputs`` / ``labels`` rows), or generated problems at the checkpoint's size (``config``) or the flags'."""
    from .tasks import build_task, build_task_rows, task_shape

    shape = task_shape(config, task) if config else {}
    if data_args.dataset_name:
        if data_args.split_by != "class":
            raise ValueError(
                "--split_by applies to generated puzzles; rows of --dataset_name are held out up to the task's "
                "symmetries (held-out rows in a training puzzle's class are dropped)"
            )
        data = build_task_rows(
            data_args.dataset_name,
            task,
            config_name=data_args.dataset_config,
            train_split=data_args.dataset_train_split,
            test_split=data_args.dataset_test_split,
            test_size=data_args.test_size,
            train_size=data_args.train_size,
            seed=seed,
        )
        cells = data.config_fields.get("max_seq_len")
        if config is not None and cells is not None and cells > puzzle_cells(config)[0]:
            limit, key = puzzle_cells(config)
            raise ValueError(
                f"--dataset_name {data_args.dataset_name}: its puzzles have {cells} cells, more than the checkpoint's "
                f"{key} {limit}"
            )
        return data
    return build_task(
        task,
        data_args.train_size or 2000,
        200 if data_args.test_size is None else data_args.test_size,
        seed=seed,
        digits=data_args.digits,
        size=shape.get("size", data_args.size),
        nodes=shape.get("nodes", data_args.nodes),
        split_by=data_args.split_by,
    )


def _dataset(model_args: ModelArguments, data_args: DataArguments, family, config, seed: int):
    """The :class:`~equilibria.tasks.TaskData` of ``--dataset_name``, tokenised with the checkpoint's tokenizer
    (or ``--tokenizer_name_or_path``); a new model's config fields are the tokenizer's and ``--max_length``."""
    from .tasks import tokenizer_fields
    from .tasks.text_data import build_text_data

    tokenizer = _text_tokenizer(model_args.tokenizer_name_or_path or model_args.model_name_or_path)
    positions = config.max_position_embeddings if config is not None else None
    max_length = data_args.max_length or min(1024, positions or 1024)
    if positions is not None and max_length > positions:
        import warnings

        warnings.warn(
            f"--max_length {max_length} is more than the {positions} positions the model was configured for "
            "(max_position_embeddings): rotary positions continue past them, but it was not trained there",
            stacklevel=2,
        )
    data = build_text_data(
        data_args.dataset_name,
        tokenizer,
        max_length,
        config_name=data_args.dataset_config,
        train_split=data_args.dataset_train_split,
        test_split=data_args.dataset_test_split,
        test_size=data_args.test_size,
        train_size=data_args.train_size,
        text_field=data_args.dataset_text_field,
        packing=data_args.packing,
        metric=data_args.eval_metric,
        seed=seed + data_args.data_seed_offset,
    )
    data.config_fields = {**tokenizer_fields(tokenizer), "max_position_embeddings": max_length}
    return data


def _check_task_tokenizer(checkpoint: str, task_tokenizer, task: str) -> None:
    """A checkpoint trained further on a generated text task must read it with the task's own tokenizer."""
    from transformers import AutoTokenizer

    try:
        vocab = AutoTokenizer.from_pretrained(checkpoint).get_vocab()
    except (OSError, ValueError, TypeError):
        vocab = None
    if vocab != task_tokenizer.get_vocab():
        raise ValueError(
            f"{checkpoint} does not read {task} problems with the task's tokenizer (it was not trained on them by "
            "equilibria): fine-tune it on your data with --dataset_name"
        )


def _text_tokenizer(name: str | None):
    """The tokenizer at ``name``, with a padding token (its end-of-sequence token when it has none)."""
    from .tasks.tokenization import load_tokenizer

    if name is None:
        raise ValueError(
            "--dataset_name needs a tokenizer: give --model_name_or_path (a checkpoint with one) or "
            "--tokenizer_name_or_path"
        )
    tokenizer = load_tokenizer(name, "--dataset_name", hint="; pass --tokenizer_name_or_path")
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer of {name} has no end-of-sequence token, which ends every training row")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


LORA_SAVES = ("merged", "adapter")


def with_lora(model, model_args: ModelArguments, family):
    """``model`` wrapped by peft with LoRA on ``--lora_target_modules`` (default: the family's ``lora_targets``);
    only the LoRA weights train."""
    from peft import LoraConfig, TaskType, get_peft_model

    if model_args.lora_save not in LORA_SAVES:
        raise ValueError(f"--lora_save must be one of {LORA_SAVES}, got {model_args.lora_save!r}")
    targets = list(model_args.lora_target_modules or family.lora_targets)
    linear = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if type(module).__name__ == "Linear"}
    missing = sorted(set(targets) - linear)
    if missing:
        raise ValueError(
            f"--lora_target_modules {missing} are not linear layers of this model; it has {sorted(linear)}"
        )
    lm = family.head_of_model(model).auto_class == "AutoModelForCausalLM"
    lora = LoraConfig(
        r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha,
        lora_dropout=model_args.lora_dropout,
        target_modules=targets,
        task_type=TaskType.CAUSAL_LM if lm else None,
    )
    return get_peft_model(model, lora)


def save_lora(model, folder: Path, how: str):
    """Save a LoRA-trained ``model`` (a peft model) into ``folder`` as ``how`` says (:data:`LORA_SAVES`) and return
    the model to evaluate: the merged plain model, or the peft model whose adapter ``folder`` now holds."""
    if how == "adapter":
        model.save_pretrained(folder)
        return model
    merged = model.merge_and_unload()
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
        (folder / name).unlink(missing_ok=True)  # what the Trainer saved: a folder with both loads the adapter
    merged.save_pretrained(folder)
    return merged


def _overrides(model_args: ModelArguments, family) -> dict:
    """The config values ``--num_loops`` and ``--exit_loss`` set (checked before any data is built)."""
    from .modeling.configuration_ouro import EXIT_LOSSES

    overrides = {} if model_args.num_loops is None else {family.loops_key: model_args.num_loops}
    if model_args.exit_loss is not None:
        family.require_config_key("exit_loss", "--exit_loss")
        if model_args.exit_loss not in EXIT_LOSSES:
            raise ValueError(f"--exit_loss must be one of {EXIT_LOSSES}, got {model_args.exit_loss!r}")
        overrides["exit_loss"] = model_args.exit_loss
    return overrides


def _model(model_args: ModelArguments, family, head, data, config):
    """The checkpoint (``config`` is its config) loaded into ``head``'s class, or a new model of ``family``;
    ``--num_loops`` and ``--exit_loss`` set in either config."""

    overrides = _overrides(model_args, family)
    if config is None:
        sizes = [
            NEW_MODEL_SIZES[key] if getattr(model_args, key) is None else getattr(model_args, key)
            for key in NEW_MODEL_SIZES
        ]
        config = family.make_config(dict(data.config_fields), *sizes)
    vocab = len(data.tokenizer) if data.tokenizer is not None else None
    if vocab is not None and vocab > config.vocab_size:
        raise ValueError(
            f"the tokenizer has {vocab} tokens but the model's vocab_size is {config.vocab_size}: give the tokenizer "
            "the checkpoint was trained with"
        )
    for key, value in overrides.items():
        setattr(config, key, value)
    config.validate_architecture()
    if model_args.model_name_or_path is None:
        return head.model_class(config)
    if model_args.dtype not in DTYPES:  # a config file's value is not checked against the flag's choices
        raise ValueError(f"--dtype must be one of {DTYPES}, got {model_args.dtype!r}")
    return head.model_class.from_pretrained(model_args.model_name_or_path, config=config, dtype=model_args.dtype)


def run_train(argv: list[str]) -> dict:
    """Train, evaluate loop scaling, save the Hub-ready folder (weights, remote code, tokenizer, card, plot);
    returns ``{num_loops: accuracy}`` (on the main process; ``{}`` on the others)."""
    from .trainers import finish_distributed

    result = train_and_evaluate(argv)[1]
    finish_distributed()  # under torchrun / accelerate launch: every rank leaves the process group together
    return result


def train_and_evaluate(argv: list[str]):
    """:func:`run_train`, returning ``(trainer, loop_scaling)``."""
    from transformers import set_seed

    model_args, data_args, args = parse_train_args(argv)
    loops = parse_loops(data_args.eval_loops)
    set_seed(args.seed)
    model, data, collator = build(model_args, data_args, args.seed)
    if args.process_index == 0:
        print(f"training on {data.description}; {_held_out_line(data)}")
    from .trainers import callbacks_for, trainer_for

    trainer = trainer_for(model_args.family)(
        model=model,
        args=args,
        train_dataset=data.train,
        data_collator=collator,
        processing_class=data.tokenizer,
        callbacks=callbacks_for(model_args.family),
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model()
    result = {}
    if trainer.is_world_process_zero():
        result = write_results(trainer, model_args, data_args, data, loops)
    if args.push_to_hub:
        trainer.push_to_hub()
    return trainer, result


def write_results(trainer, model_args: ModelArguments, data_args: DataArguments, data, loops: list[int]) -> dict:
    """After training (main process): the folder's final weights (LoRA merged or the adapter), its training record,
    the loop scaling on the held-out rows and the card, all of them of these weights; results in the folder computed
    on other weights (an earlier run into it) are removed. Returns ``{num_loops: accuracy}``."""
    from .provenance import remove_results_of_other_weights, weights_fingerprint
    from .tasks import save_training_record

    out = Path(trainer.args.output_dir)
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    if model_args.use_peft:
        from .hub_cards.publish import lora_settings

        trainer.lora = {**lora_settings(model), "saved": model_args.lora_save}  # for the training history
        model = save_lora(model, out, model_args.lora_save)
        trainer.model = model  # a later save (push_to_hub) saves what the folder holds
    split = {"train_split": data_args.dataset_train_split} if data_args.dataset_name else {}  # held_out_split reads it
    save_training_record(out, data.name, data.train_fingerprints, data.description, **data.record, **split)
    removed = remove_results_of_other_weights(out)
    if removed:
        print(f"removed {', '.join(removed)} from {out}: computed on other weights than the ones just trained")
    name = data_args.dataset_name
    hub_dataset = name if name and not Path(name).exists() else None  # a local file is no Hub dataset
    result = {}
    if len(data.test):
        record = _evaluation_record(data, name, hub_dataset)
        result = loop_scaling(model, data.test, loops, model_path=str(out), metric=data.metric)
        print(f"loop scaling on {len(data.test)} held-out examples")
        weights = weights_fingerprint(out)
        print("\n".join(loop_scaling_report(result, model.config.model_type, out, record, weights=weights)))
        trainer.loop_scaling = {"weights": weights, "data": record, "accuracy": {str(k): v for k, v in result.items()}}
    elif data.record.get("held_out_counts"):
        held = data.record["held_out_counts"]["held_out"]
        print(f"no held-out rows left (each of the {held} held out repeats a training question): no loop scaling")
    else:
        print("no held-out rows (--test_size 0): no loop-scaling evaluation")
    trainer.create_model_card(dataset=hub_dataset)
    print(f"wrote the model, its remote code, card and plot to {out}")
    return result


def _held_out_line(data) -> str:
    """What ``equilibria train`` says first of the held-out rows: how many, and for rows of a file how many were
    held out and how many of those dropped as repeats of training questions (``held out 30, dropped 9 ..., kept
    21``)."""
    from .tasks.held_out import describe_held_out_counts

    counts = data.record.get("held_out_counts")
    if counts:
        if not counts["kept"]:
            return f"{describe_held_out_counts(counts)}: no loop-scaling evaluation"
        return f"{describe_held_out_counts(counts)} for the loop-scaling evaluation ({data.test_description})"
    held = f"{len(data.test)} held out for the loop-scaling evaluation" if len(data.test) else "none held out"
    return held + (f" ({data.test_description})" if data.test_description else "")


def _census_note(census: dict) -> str:
    """What a generated puzzle split's census (:func:`~equilibria.tasks.named_splits.split_census`) says, in words."""
    counts = f"{census['train_classes']} training and {census['test_classes']} test classes"
    if census["held_out"]:
        return f"held out up to the task's symmetries: no test puzzle is in a training puzzle's class ({counts})"
    return (
        f"a memorisation check, not held out: {census['test_rows_in_training_classes']} of {census['test_rows']} test "
        f"puzzles are symmetric variants of training ones ({counts})"
    )


def _evaluation_record(data, dataset_name: str | None, hub_dataset: str | None) -> dict:
    """What the loop-scaling evaluation ran on, for ``loop_scaling.json`` and the card."""
    from .provenance import data_fingerprint
    from .tasks import fingerprints

    if dataset_name is None:
        census = data.record.get("split_census")
        note = "drawn without replacement together with the training split: no training question is among them"
        if census is not None:
            note = _census_note(census)
        return {
            "name": f"the {len(data.test)}-problem test split generated with the training data",
            "dataset": None,
            "fingerprint": data_fingerprint(fingerprints(data.name, data.test)),
            "held_out": census is None or census["held_out"],
            "note": note,
            "units": len(data.test),
            **({"split_census": census} if census is not None else {}),
        }
    return {
        "name": f"{counted(len(data.test), 'held-out row')} of {data.record['source']['label']}",
        "dataset": hub_dataset,
        "fingerprint": data.record["held_out"]["fingerprint"],
        "held_out": True,
        "note": data.test_description,
        "units": len(data.test),
        **({"metric": data.metric} if data.metric != "task" else {}),
    }
