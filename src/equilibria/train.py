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
    family: str = field(default="ouro", metadata={"help": f"model family: one of {tuple(FAMILIES)}"})
    hidden_size: int = field(default=128, metadata={"help": "width (PH-DEQ: size of q and of p)"})
    num_layers: int = field(default=2, metadata={"help": "layers in the looped stack / backbone / block"})
    num_attention_heads: int = field(default=4)
    num_loops: int = field(
        default=4,
        metadata={
            "help": "the loop count saved in the config (Ouro: recurrence steps; Attractor, PH-DEQ: solver "
            "budget; EqR: iterations per segment)"
        },
    )


@dataclass
class DataArguments:
    task: str | None = field(
        default=None, metadata={"help": "addition, sudoku, maze, reachability or entailment (default: the family's)"}
    )
    train_size: int = field(default=2000)
    test_size: int = field(default=200)
    digits: int = field(default=2, metadata={"help": "addition: operand digits"})
    size: int = field(default=4, metadata={"help": "sudoku / maze: board side"})
    nodes: int = field(default=16, metadata={"help": "reachability: graph nodes"})
    eval_loops: str = field(default="1,2,4,8", metadata={"help": "loop counts of the loop-scaling evaluation"})
    data_seed_offset: int = field(default=0, metadata={"help": "added to --seed for the data"})


def _family_of(argv: list[str]) -> str:
    if argv and argv[0].endswith((".yaml", ".yml", ".json")):
        path = Path(argv[0])
        if not path.is_file():
            raise ValueError(f"no such config file: {path}")
        text = path.read_text()
        if path.suffix == ".json":
            values = json.loads(text)
        else:
            import yaml

            values = yaml.safe_load(text)
        family = (values or {}).get("family", "ouro")
    else:
        family = "ouro"
        for i, arg in enumerate(argv):
            if arg == "--family" and i + 1 < len(argv):
                family = argv[i + 1]
            elif arg.startswith("--family="):
                family = arg.split("=", 1)[1]
    if family not in FAMILIES:
        raise ValueError(f"--family must be one of {tuple(FAMILIES)}, got {family!r}")
    return family


def parse_train_args(argv: list[str]):
    """``(model_args, data_args, training_args)`` from flags or a YAML/JSON file."""
    from transformers import HfArgumentParser

    family = _family_of(argv)
    parser = HfArgumentParser((ModelArguments, DataArguments, FAMILIES[family].arguments_class()))
    if argv and argv[0].endswith((".yaml", ".yml")):
        return parser.parse_yaml_file(argv[0])
    if argv and argv[0].endswith(".json"):
        return parser.parse_json_file(argv[0])
    return parser.parse_args_into_dataclasses(args=argv)


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
    collator = None
    if data.tokenizer is not None:  # text: pad the training batches on the right, labels with -100
        collate_tokenizer = copy.deepcopy(data.tokenizer)
        collate_tokenizer.padding_side = "right"
        collator = DataCollatorForSeq2Seq(collate_tokenizer, label_pad_token_id=-100)
    return head.model_class(config), data, collator


def run_train(argv: list[str]) -> dict:
    """Train, evaluate loop scaling, save the Hub-ready folder (weights, remote code, tokenizer, card, plot);
    returns ``{num_loops: accuracy}`` (on the main process; ``{}`` on the others)."""
    return train_and_evaluate(argv)[1]


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
        if report_loop_scaling(result, model.config.model_type, out, record):
            trainer.loop_scaling_plot = "loop_scaling.png"
        trainer.loop_scaling = {"data": record, "accuracy": {str(k): v for k, v in result.items()}}
        trainer.create_model_card(dataset=None)
        print(f"wrote the model, its remote code, card and plot to {out}")
    if args.push_to_hub:
        trainer.push_to_hub()
    return trainer, result
