"""``equilibria train``: train any family on its task with its Trainer, then evaluate loop scaling and write a
Hub-ready folder (weights, remote code, tokenizer, card, plot) into ``--output_dir``.

Options are dataclass fields parsed with ``HfArgumentParser``: [`ModelArguments`], [`DataArguments`] and the
family's ``TrainingArguments`` subclass (every ``TrainingArguments`` field is a flag). A YAML or JSON file with the
same keys can stand in for the flags (``equilibria train config.yaml``). For several processes put the same command
behind ``torchrun`` or ``accelerate launch`` (``torchrun --nproc_per_node 2 -m equilibria.cli train ...``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

from .families import FAMILIES


@dataclass
class ModelArguments:
    _argument_group_name = "the model (a small config of the family, sized for its task)"

    family: str = field(default="ouro", metadata={"help": f"model family: one of {tuple(FAMILIES)}"})
    hidden_size: int = field(default=128, metadata={"help": "width (PH-DEQ: size of q and of p)"})
    num_layers: int = field(default=2, metadata={"help": "layers in the looped stack / backbone / block"})
    num_attention_heads: int = field(default=4, metadata={"help": "attention heads (Ouro, Attractor, EqR)"})
    num_loops: int = field(
        default=4,
        metadata={
            "help": "the loop count saved in the config (Ouro: recurrence steps; Attractor, PH-DEQ: solver "
            "budget; EqR: iterations per segment)"
        },
    )
    exit_loss: str | None = field(
        default=None,
        metadata={
            "help": "Ouro: the loss with labels: expected_logits (the published code's, the default), expected (the "
            "paper's) or final (the last step's; what fixed loop counts read)"
        },
    )


@dataclass
class DataArguments:
    _argument_group_name = "the task's generated data and the loop-scaling evaluation"

    task: str | None = field(
        default=None,
        metadata={"help": "addition, sudoku, maze, reachability or entailment (None: the family's first task)"},
    )
    train_size: int = field(default=2000, metadata={"help": "training examples"})
    test_size: int = field(default=200, metadata={"help": "held-out examples of the loop-scaling evaluation"})
    digits: int = field(default=2, metadata={"help": "addition: operand digits"})
    size: int = field(default=4, metadata={"help": "sudoku / maze: board side"})
    nodes: int = field(default=16, metadata={"help": "reachability: graph nodes"})
    eval_loops: str = field(default="1,2,4,8", metadata={"help": "loop counts of the loop-scaling evaluation"})
    data_seed_offset: int = field(default=0, metadata={"help": "added to --seed for the data"})


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


def _family_of(argv: list[str], file_values: dict) -> str:
    family = file_values.get("family", "ouro")
    for i, arg in enumerate(argv):
        if arg == "--family" and i + 1 < len(argv):
            family = argv[i + 1]
        elif arg.startswith("--family="):
            family = arg.split("=", 1)[1]
    if family not in FAMILIES:
        raise ValueError(f"--family must be one of {tuple(FAMILIES)}, got {family!r}")
    return family


def parse_train_args(argv: list[str]):
    """``(model_args, data_args, training_args)`` from flags, or from a YAML/JSON file given first (its keys are
    the flags' names) with any flags after it overriding the file (``equilibria train run.yaml --max_steps 2``)."""
    from transformers import HfArgumentParser

    file_values = _config_file(argv)
    family = _family_of(argv, file_values)
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, FAMILIES[family].arguments_class()),
        prog="equilibria train",
        usage=f"equilibria train [CONFIG.yaml] [--family {{{','.join(FAMILIES)}}}] [--task TASK] [--output_dir DIR] "
        "[--FLAG VALUE ...]",
        description=TRAIN_HELP,
    )
    # --help: the model and data groups first, then the (long) training flags, titled
    parser._optionals.title = f"training: transformers' TrainingArguments, then {family}'s own (at the end)"
    parser._action_groups.append(parser._action_groups.pop(parser._action_groups.index(parser._optionals)))
    if not file_values:
        return parser.parse_args_into_dataclasses(args=argv)
    known = {action.dest for action in parser._actions}
    unknown = sorted(set(file_values) - known)
    if unknown:
        raise ValueError(f"{argv[0]}: unknown keys {unknown}; the keys are the flags of `equilibria train --help`")
    for action in parser._actions:  # the file stands in for the flags it sets, required ones included
        if action.dest in file_values:
            action.required = False
    parser.set_defaults(**file_values)
    return parser.parse_args_into_dataclasses(args=argv[1:])


def build(model_args: ModelArguments, data_args: DataArguments, seed: int):
    """``(model, data, collator)`` for the family and task: the task's :class:`~equilibria.tasks.TaskData` (splits,
    tokenizer, training-question fingerprints), and the family's head for the task with a small config sized by
    ``model_args`` (the task's name saved in it as ``equilibria_task``)."""
    from transformers import DataCollatorForSeq2Seq

    from .tasks import build_task, check_task

    family = FAMILIES[model_args.family]
    task = check_task(data_args.task or family.default_task)
    head = family.head_for(task, f"--family {model_args.family}")
    data = build_task(
        task,
        data_args.train_size,
        data_args.test_size,
        seed=seed + data_args.data_seed_offset,
        digits=data_args.digits,
        size=data_args.size,
        nodes=data_args.nodes,
    )
    sizes = (model_args.hidden_size, model_args.num_layers, model_args.num_attention_heads, model_args.num_loops)
    config = family.make_config(data.config_fields, *sizes)
    config.equilibria_task = task
    if model_args.exit_loss is not None:
        if not hasattr(config, "exit_loss"):
            raise ValueError(f"--exit_loss applies to Ouro models, not --family {model_args.family}")
        config.exit_loss = model_args.exit_loss
        config.validate_architecture()
    collator = None
    if data.tokenizer is not None:  # text: pad the training batches on the right, labels with -100
        collate_tokenizer = copy.deepcopy(data.tokenizer)
        collate_tokenizer.padding_side = "right"
        collator = DataCollatorForSeq2Seq(collate_tokenizer, label_pad_token_id=-100)
    return head.model_class(config), data, collator


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

    from .commands import loop_scaling, parse_loops, report_loop_scaling
    from .tasks import save_training_record

    model_args, data_args, args = parse_train_args(argv)
    loops = parse_loops(data_args.eval_loops)
    set_seed(args.seed)
    model, data, collator = build(model_args, data_args, args.seed)
    trainer = FAMILIES[model_args.family].trainer_class()(
        model=model, args=args, train_dataset=data.train, data_collator=collator, processing_class=data.tokenizer
    )
    trainer.train()
    trainer.save_model()
    result = {}
    if trainer.is_world_process_zero():
        out = Path(args.output_dir)
        save_training_record(out, data.name, data.train_fingerprints, data.description)
        model = trainer.accelerator.unwrap_model(trainer.model).eval()
        result = loop_scaling(model, data.test, loops, model_path=str(out))
        record = {
            "name": f"the {len(data.test)}-problem test split generated with the training data",
            "dataset": None,
            "held_out": True,
            "note": "drawn without replacement together with the training split: no training question is among them",
            "units": len(data.test),
        }
        print(f"loop scaling on {len(data.test)} held-out examples")
        report_loop_scaling(result, model.config.model_type, out, record)  # the JSON and the plot the card links
        trainer.loop_scaling = {"data": record, "accuracy": {str(k): v for k, v in result.items()}}
        trainer.create_model_card(dataset=None)
        print(f"wrote the model, its remote code, card and plot to {out}")
    if args.push_to_hub:
        trainer.push_to_hub()
    return trainer, result
