"""``equilibria train``'s arguments: the model (:class:`ModelArguments`), the data (:class:`TrainDataArguments`:
the data flags ``eval`` and ``audit`` share, and the training splits and sizes) and the family's
``TrainingArguments`` subclass, parsed the way every subcommand's are (:mod:`equilibria.command_arguments`), with
the family read first (``--family`` or the checkpoint's); the checks that refuse, before anything is built, values
that would train something other than what was asked."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from ..command_arguments import (
    DataArguments,
    UnknownFlags,
    apply_config,
    command_parser,
    parse_dataclasses,
    read_config,
    split_config,
)
from ..families import FAMILIES
from ..scaling import parse_loops
from ..wording import listed, with_article

DTYPES = ("float32", "bfloat16", "float16", "auto")  # what from_pretrained(dtype=...) takes by name
TRAINER_CHOICES = ("family", "grpo")


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
    config_preset: str | None = field(
        default=None,
        metadata={
            "help": "a new model's architecture preset (EqR: published, the locuslab/EqR code's Sudoku model); "
            "--hidden_size, --num_layers, --num_attention_heads and --num_loops given override it"
        },
    )
    exit_loss: str | None = field(
        default=None,
        metadata={
            "help": "Ouro: the loss with labels: expected_logits (the published code's, the default), expected (the "
            "paper's) or final (the last step's; what fixed loop counts read)"
        },
    )
    show_recipe: bool = field(
        default=False,
        metadata={
            "help": "print the recipe this family and task train with (the settings used wherever no flag or config "
            "key is given; the flags given shown beside them) and exit"
        },
    )
    recipe: dict | None = field(default=None, init=False)  # the recipe applied: its name and the values overridden
    recipe_lines: list[str] = field(default_factory=list, init=False)  # what --show_recipe prints
    dtype: str = field(
        default="float32",
        metadata={"choices": DTYPES, "help": "the dtype a checkpoint's weights are loaded in (auto: the checkpoint's)"},
    )
    trainer: str = field(
        default="family",
        metadata={
            "choices": TRAINER_CHOICES,
            "help": "family: the family's own trainer (supervised); grpo: reinforcement learning of a trained "
            "checkpoint on a task's prompts with LoopGRPOTrainer (pip install 'equilibria[rl]') and --reward",
        },
    )
    reward: str | None = field(
        default=None,
        metadata={
            "help": "--trainer grpo's reward: exact_match (1 where the completion is the row's answer: the package's "
            "text tasks) or module:function / path/to/file.py:function (yours, called as TRL calls a reward: "
            "completions and the rows' columns as keywords, a float per completion)"
        },
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
    torch_threads: int | None = field(
        default=None,
        metadata={
            "help": "CPU threads torch computes with (default: torch's, one per core). On a CPU that other work keeps "
            "busy, 1 can run several times faster than more: the training bar shows the threads beside its rate"
        },
    )
    keep_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "keep the checkpoint-N folders the Trainer saved in --output_dir once the run has finished (by "
            "default they are removed, and the folder holds the trained model alone, ready to publish)"
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
            ("torch_threads", "the CPU threads torch computes with"),
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
class TrainDataArguments(DataArguments):
    """The data flags of ``train``: those ``eval`` and ``audit`` share (:class:`DataArguments`), the training split,
    packing, the sizes of generated data and the loop counts of the loop-scaling evaluation."""

    _argument_group_name = "the data: your own (--dataset_name) or a task's generated problems, and the evaluation"

    dataset_train_split: str = field(default="train", metadata={"help": "the split trained on"})
    packing: bool = field(default=False, metadata={"help": "concatenate rows into blocks of --max_length tokens"})
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
    size: int = field(
        default=4,
        metadata={
            "help": "sudoku / maze: board side (a new model: the recipe's, 6 for Sudoku and 9 for mazes; a "
            "checkpoint: its own when given)"
        },
    )
    nodes: int = field(default=16, metadata={"help": "reachability: graph nodes (a checkpoint's own when given)"})
    split_by: str = field(
        default="class",
        metadata={
            "help": "sudoku / maze: test puzzles outside every training puzzle's class up to the task's symmetries "
            "(class), or only different boards (board: a memorisation check, for sizes with few classes like 4x4)",
            "choices": ["class", "board"],
        },
    )
    augmentations: int | None = field(
        default=None,
        metadata={
            "help": "sudoku: random symmetry transforms added per training puzzle, in its class (default 0; the test "
            "split is never augmented)"
        },
    )
    eval_loops: str = field(default="1,2,4,8", metadata={"help": "loop counts of the loop-scaling evaluation"})
    validation_size: int | None = field(
        default=None,
        metadata={
            "help": "examples of the validation split that --eval_strategy steps scores every --eval_steps (generated: "
            "200 fresh problems held out like the test split; --dataset_name: a tenth of the training split, 5 to "
            "200, held out before training); the test split is read once, after training"
        },
    )
    validation_loops: int | None = field(
        default=None,
        metadata={"help": "the loop count the validation split is scored at (default: the model's config's)"},
    )
    validation_target: float | None = field(
        default=None,
        metadata={
            "help": "stop training once the validation accuracy reaches this share (0 to 1); the run ends with the best "
            "checkpoint (--load_best_model_at_end) or the weights that reached it"
        },
    )
    data_seed_offset: int = field(
        default=0,
        metadata={
            "help": "added to --seed for the data: the generated problems (training, test and validation) or the "
            "shuffle of your rows; the same --seed with another offset trains the same initial weights on other data"
        },
    )

    def split_options(self) -> dict:
        """How ``--dataset_name``'s rows are split (the keywords of the row loaders: its config, splits and sizes)."""
        return dict(
            config_name=self.dataset_config,
            train_split=self.dataset_train_split,
            test_split=self.dataset_test_split,
            test_size=self.test_size,
            train_size=self.train_size,
        )

    def task_options(self) -> dict:
        """:meth:`DataArguments.task_options` and how the training split is augmented."""
        return {**super().task_options(), "augmentations": self.augmentations}

    def __post_init__(self):
        # train's defaults of the shared flags (eval and audit default to what training used)
        self.dataset_test_split = self.dataset_test_split or "test"
        self.dataset_text_field = self.dataset_text_field or "text"
        self.eval_metric = self.eval_metric or "token_accuracy"
        for name, value in (("max_length", self.max_length), ("train_size", self.train_size)):
            if value is not None and value < 1:
                raise ValueError(f"--{name} must be >= 1, got {value}")
        if self.augmentations is not None and self.augmentations < 0:  # --min_clues: the task checks it, by size
            raise ValueError(f"--augmentations must be >= 0, got {self.augmentations}")
        if self.test_size is not None and self.test_size < 0:
            raise ValueError(f"--test_size must be >= 0 (0: no held-out evaluation), got {self.test_size}")
        if self.validation_size is not None and self.validation_size < 0:
            raise ValueError(f"--validation_size must be >= 0 (0: no validation), got {self.validation_size}")
        target = self.validation_target
        if target is not None and not 0 < target <= 1:
            raise ValueError(f"--validation_target must be a share of the validation rows in (0, 1], got {target}")


TRAIN_HELP = (
    "Train a family on its task with its Trainer, evaluate loop scaling on held-out data, and write a Hub-ready "
    "folder into --output_dir. A YAML/JSON file given first (or after --config) sets any flags (keys are the flag "
    "names); flags on the command line override it. The training flags are transformers' TrainingArguments plus the "
    "family's own (shown for --family; `equilibria train --family eqr --help` shows EqR's). Run several processes "
    "with torchrun or accelerate launch."
)


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

    from ..families import family_record

    local = Path(path).expanduser()
    if local.is_dir() and not (local / "config.json").is_file():
        raise ValueError(
            f"--model_name_or_path {path}: a folder without config.json, not one written by save_pretrained (give "
            "the folder equilibria train or save_pretrained wrote)"
        )
    if not local.exists() and (local.is_absolute() or path.startswith((".", "~")) or path.count("/") > 1):
        raise ValueError(f"--model_name_or_path {path}: no such folder (and not a Hub id, which reads owner/name)")
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        where = "cannot read a config.json there" if local.exists() else "no folder of that name here, nor on the Hub"
        raise ValueError(
            f"--model_name_or_path {path}: {where} ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
        ) from None
    try:
        family_record(config)
    except ValueError as err:
        raise ValueError(f"--model_name_or_path {path}: {err}") from None
    return config


def _arguments_class(model_type: str, trainer: str | None = None) -> type:
    """The ``TrainingArguments`` class of the family's trainer (:func:`~equilibria.trainers.trainer_for`), or of
    ``--trainer grpo``'s (``LoopGRPOConfig``)."""
    from ..trainers import trainer_for

    if trainer in (None, "family"):
        return trainer_for(model_type).arguments_class
    if trainer not in TRAINER_CHOICES:
        raise ValueError(f"--trainer must be one of {TRAINER_CHOICES}, got {trainer!r}")
    return grpo_classes()[0]


def grpo_classes() -> tuple[type, type]:
    """``(LoopGRPOConfig, LoopGRPOTrainer)``; a one-line error when TRL (the ``rl`` extra) is not installed."""
    try:
        from ..trainers.grpo import LoopGRPOConfig, LoopGRPOTrainer
    except ImportError as err:
        raise ValueError(f"--trainer grpo needs TRL ({err}): pip install 'equilibria[rl]'") from None
    return LoopGRPOConfig, LoopGRPOTrainer


def parse_train_args(argv: list[str]):
    """``(model_args, data_args, training_args)`` from flags, or from a YAML/JSON file given first or after
    ``--config`` (its keys are the flags' names) with any flags overriding the file (``equilibria train run.yaml
    --max_steps 2``)."""
    path, argv = split_config(argv)
    file_values = read_config(path)
    family = _family_of(argv, file_values)
    trainer = _flag(argv, file_values, "trainer")
    arguments_class = _arguments_class(family, trainer)
    parser = command_parser(
        (ModelArguments, TrainDataArguments, arguments_class),
        prog="equilibria train",
        usage=f"equilibria train [CONFIG.yaml] [--model_name_or_path CHECKPOINT | --family {{{','.join(FAMILIES)}}}] "
        "[--dataset_name DATA | --task TASK] [--output_dir DIR] [--FLAG VALUE ...]",
        description=TRAIN_HELP,
    )
    # --help: the model and data groups first, then the (long) training flags, titled
    parser._optionals.title = (
        "training: TRL's GRPOConfig (transformers' TrainingArguments, then TRL's), then LoopGRPOConfig's own (at the end)"
        if trainer == "grpo"
        else f"training: transformers' TrainingArguments, then {family}'s own (at the end)"
    )
    parser._action_groups.append(parser._action_groups.pop(parser._action_groups.index(parser._optionals)))
    parser.set_defaults(family=family)  # the arguments' own checks know the family (the checkpoint's, or the default)

    def unknown(names, known, source):
        return UnusedFlags(family, names, known, source)

    option = getattr(arguments_class, "preset_option", None)
    preset = _flag(argv, file_values, option) if option else None
    # the defaults, lowest first: ten log points per run, the family and task's recipe, a trainer preset's training
    # part (--stars_preset), then the config file; the flags given override them all
    parser.set_defaults(logging_steps=LOG_POINTS)
    preset_defaults = arguments_class.preset_training_defaults(preset) if preset is not None else {}
    parser.set_defaults(**preset_defaults)  # a recipe (--stars_preset): its optimiser and schedule
    apply_config(parser, file_values, path, unknown)
    recipe = None if trainer == "grpo" else _recipe(parser, argv, family, _flag(argv, file_values, "size") is not None)
    if recipe is not None:  # a trainer preset also decides its own options (STARS': filled in where unset)
        own = getattr(arguments_class, "preset_options", ()) if preset is not None else ()
        below = {**file_values, **preset_defaults, **dict.fromkeys(own)}
        # checkpoints: a run that sets any of them (--save_steps, --save_strategy, ...) or does not evaluate
        # (--eval_strategy no) saves as the flags and the Trainer say, without the recipe's best-checkpoint keeping
        if _flag(argv, file_values, "eval_strategy") == "no" or any(_flag(argv, file_values, k) for k in SAVING):
            below.update(dict.fromkeys(SAVING))
        parser.set_defaults(**{k: v for k, v in recipe.settings.items() if k not in below})
    if _flag(argv, file_values, "output_dir") is None and not {"-h", "--help"} & set(argv):
        raise ValueError("--output_dir is required: the folder the trained model, its results and card are written to")
    model_args, data_args, args = parse_dataclasses(parser, argv, unknown)
    model_args.family = family
    check_validation(model_args, data_args, args, given=lambda name: _flag(argv, file_values, name) is not None)
    if recipe is not None:  # what the run takes from it, for the start of the run, the record and the card
        used = {
            **vars(model_args),
            **vars(data_args),
            **{k: getattr(args, k) for k in recipe.settings if hasattr(args, k)},
        }
        model_args.recipe = {
            "name": recipe.name,
            "settings": dict(recipe.settings),
            "overrides": recipe.overrides(used),
        }
        model_args.recipe_lines = recipe.describe(used)
    check_train_args(model_args, data_args, args)
    return model_args, data_args, args


SAVING = ("save_strategy", "save_steps", "save_total_limit", "load_best_model_at_end")  # how checkpoints are kept
LOG_POINTS = 0.1  # logging_steps' default: a log line every tenth of the run (TrainingArguments reads < 1 as a share)


def _recipe(parser, argv: list[str], family: str, size_given: bool = False):
    """The :class:`~equilibria.tasks.recipes.Recipe` of this run, from what the flags and the config file say:
    fine-tuning (``--model_name_or_path``, with ``--use_peft`` or not), else the family's for ``--task`` (default:
    the family's first task), at the board size a flag or the file gives (``size_given``); ``None`` for a new
    model on rows of your own (``--dataset_name`` without ``--task``)."""
    from ..tasks.recipes import recipe_for

    given, _ = parser.parse_known_args([arg for arg in argv if arg not in ("-h", "--help")])
    if given.model_name_or_path:
        return recipe_for(family, given.task, fine_tune=True, lora=bool(given.use_peft))
    if given.task is None and given.dataset_name:
        return None
    if given.task is not None:  # a task the family's heads do not take: the one-line refusal, before any recipe
        FAMILIES[family].head_for_task(given.task, f"--family {family}")
    recipe = recipe_for(family, given.task or FAMILIES[family].default_task)
    return recipe.at_size(given.size if size_given else None) if recipe is not None else None


class UnusedFlags(UnknownFlags):
    """Flags (or keys of the config file ``source``) that ``equilibria train`` of ``family`` does not take: those of
    another family's training arguments, named with their families, and the others (``stray``), with the nearest
    name it takes (:class:`~equilibria.command_arguments.UnknownFlags`)."""

    def __init__(self, family: str, names: list[str], known: set[str], source: str | None = None):
        from dataclasses import fields

        self.family = family
        self.owners = {}  # name -> the other families whose training arguments have it
        for other in FAMILIES:
            if other != family:
                for f in fields(_arguments_class(other)):
                    if f.name in names:
                        self.owners.setdefault(f.name, []).append(other)
        super().__init__("train", [name for name in names if name not in self.owners], known, source)

    def help_command(self) -> str:
        return f"equilibria train --family {self.family} --help"

    def parts(self, others: dict[str, str] | None) -> list[str]:
        parts = []
        for name, families in self.owners.items():
            classes = ", ".join(dict.fromkeys(_arguments_class(f).__name__ for f in families))
            parts.append(
                f"{self.label(name)} is a flag of the {listed(families)} "
                f"{'families' if len(families) > 1 else 'family'} ({classes}), not of {self.family}, the family "
                "trained here"
            )
        return parts + super().parts(others)


VALIDATION_FLAGS = ("validation_size", "validation_loops", "validation_target")


def check_validation(model_args: ModelArguments, data_args: TrainDataArguments, args, given) -> None:
    """The validation during training: ``--eval_strategy`` (``steps``, ``epoch``) scores the validation split with
    the task's accuracy (``Trainer``'s evaluation loss replaced by it), which ``--load_best_model_at_end`` and
    ``--validation_target`` read. Refuses validation flags the run would ignore (``given(name)``: the flag is on the
    command line or in the config file, not a recipe's default) and a best-checkpoint metric validation does not
    report; with ``--eval_strategy no`` the recipe's validation settings are dropped."""
    asked = [f"--{name}" for name in VALIDATION_FLAGS if given(name)]
    if model_args.trainer == "grpo":
        if asked:
            raise ValueError(f"{', '.join(asked)}: the validation of the family trainers, not of --trainer grpo")
        data_args.validation_size = 0
        return
    if str(getattr(args.eval_strategy, "value", args.eval_strategy)) == "no":
        if asked:
            raise ValueError(
                f"{', '.join(asked)} set the validation that runs during training: add --eval_strategy steps "
                "--eval_steps N"
            )
        data_args.validation_size, data_args.validation_target = 0, None
        return
    if data_args.validation_size == 0:
        raise ValueError(
            f"--eval_strategy {getattr(args.eval_strategy, 'value', args.eval_strategy)} scores the validation split, "
            "and --validation_size 0 leaves none: give a size, or --eval_strategy no"
        )
    metric = args.metric_for_best_model
    if metric in ("loss", "eval_loss") and not given("metric_for_best_model"):  # TrainingArguments' default
        args.metric_for_best_model, args.greater_is_better = "accuracy", True
    elif metric is not None and metric.removeprefix("eval_") != "accuracy":
        raise ValueError(
            f"--metric_for_best_model must be accuracy (what the validation reports: the task's measure at "
            f"--validation_loops), got {metric!r}"
        )
    if data_args.validation_loops is not None:
        check_num_loops(data_args.validation_loops, model_args.family)


def check_train_args(model_args: ModelArguments, data_args: TrainDataArguments, args) -> None:
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
    check_rl_args(model_args, data_args)
    parse_loops(data_args.eval_loops, "--eval_loops", family.min_loops)
    checkpoint = model_args.model_name_or_path
    if checkpoint and Path(checkpoint).exists() and Path(checkpoint).resolve() == Path(args.output_dir).resolve():
        raise ValueError(
            f"--output_dir {args.output_dir} is the checkpoint being fine-tuned (--model_name_or_path): it would be "
            "overwritten; write the fine-tuned model to another folder"
        )
    args.resume_from_checkpoint = resume_checkpoint(args.resume_from_checkpoint, args.output_dir)


def check_rl_args(model_args: ModelArguments, data_args: TrainDataArguments) -> None:
    """``--trainer grpo`` fine-tunes a trained checkpoint on a generated text task's prompts with ``--reward``;
    ``--reward`` is its flag alone."""
    if model_args.trainer != "grpo":
        if model_args.reward is not None:
            raise ValueError("--reward is the reward of --trainer grpo (reinforcement learning): add --trainer grpo")
        return
    if not model_args.model_name_or_path:
        raise ValueError(
            "--trainer grpo fine-tunes a trained checkpoint with reinforcement learning: give --model_name_or_path "
            "(train one first with the family's trainer)"
        )
    if not model_args.reward:
        raise ValueError(
            "--trainer grpo needs --reward: exact_match (the completion equals the row's answer) or module:function"
        )
    reward_function(model_args.reward)  # a reward that cannot be found is refused before anything is built
    if data_args.dataset_name:
        raise ValueError(
            "--trainer grpo reads the prompts of a generated text task (--task addition); rows of --dataset_name are "
            "not served yet: use LoopGRPOTrainer in Python (examples/grpo_own_reward.py)"
        )


REWARDS = ("exact_match",)  # --reward's built-in names


@functools.cache  # checked before anything is built, used after: a file of yours runs once
def reward_function(spec: str):
    """``--reward``'s function: a built-in name (:data:`REWARDS`), ``module:function`` (an importable module) or
    ``path/to/file.py:function``; a one-line ``ValueError`` naming the flag when it cannot be found."""
    import pkgutil
    import runpy

    if spec == "exact_match":
        from ..tasks.text_scoring import exact_match_reward

        return exact_match_reward
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ValueError(f"--reward must be one of {REWARDS} or module:function (or file.py:function), got {spec!r}")
    try:
        if where.endswith(".py"):
            function = runpy.run_path(where).get(name)
        else:
            function = pkgutil.resolve_name(f"{where}:{name}")
    except (ImportError, OSError) as err:
        raise ValueError(f"--reward {spec}: cannot import {where} ({err})") from None
    except SyntaxError as err:
        raise ValueError(f"--reward {spec}: {where} does not parse ({err.msg}, line {err.lineno})") from None
    except AttributeError:
        function = None
    if not callable(function):
        raise ValueError(f"--reward {spec}: {where} has no function {name!r}")
    return _checked_reward(function, spec)


def _checked_reward(function, spec: str):
    """``function`` called as TRL calls a reward, its result refused in one line unless it is a list of numbers (or
    ``None``, TRL's "no reward for this row"), one per completion."""

    import numbers

    @functools.wraps(function)
    def reward(*args, **kwargs):
        values = function(*args, **kwargs)
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        wanted = len(completions) if completions is not None else None
        if not isinstance(values, (list, tuple)) or (wanted is not None and len(values) != wanted):
            got = f"a {type(values).__name__}" if not isinstance(values, (list, tuple)) else f"{len(values)} values"
            raise ValueError(
                f"--reward {spec}: returned {got}; a reward returns a list of floats, one per completion "
                f"({wanted} here)"
            )
        bad = next((v for v in values if v is not None and not isinstance(v, numbers.Real)), None)
        if bad is not None:
            raise ValueError(
                f"--reward {spec}: returned {type(bad).__name__} {bad!r} among its values; each is a float"
            )
        return values

    return reward


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
        path, rest = split_config(argv)
        output_dir = _flag(rest, read_config(path), "output_dir")
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
