"""``equilibria train``: train any family on its task with its Trainer, then evaluate loop scaling and write a
Hub-ready folder (weights, remote code, tokenizer, card, plot) into ``--output_dir``.

Options are dataclass fields parsed with ``HfArgumentParser`` (:mod:`.arguments`): [`ModelArguments`],
[`TrainDataArguments`] (the data flags ``eval`` and ``audit`` share, and the training splits and sizes) and the
family's ``TrainingArguments`` subclass (every ``TrainingArguments`` field is a flag). A YAML or JSON file with the
same keys can stand in for the flags (``equilibria train config.yaml``, or ``--config config.yaml``). What is
trained is built in :mod:`.building`, the results written in :mod:`.results`. For several processes put the same
command behind ``torchrun`` or ``accelerate launch`` (``torchrun --nproc_per_node 2 -m equilibria.cli train ...``).
"""

from __future__ import annotations

from ..scaling import parse_loops
from .arguments import (
    ModelArguments,
    TrainDataArguments,
    UnusedFlags,
    check_num_loops,
    checkpoint_config,
    interrupted_hint,
    parse_train_args,
    resume_checkpoint,
)
from .building import LORA_SAVES, build, save_lora, with_lora
from .results import held_out_line, write_results


def run_train(argv: list[str]) -> dict:
    """Train, evaluate loop scaling, save the Hub-ready folder (weights, remote code, tokenizer, card, plot);
    returns ``{num_loops: accuracy}`` (on the main process; ``{}`` on the others)."""
    from ..trainers import finish_distributed

    result = train_and_evaluate(argv)[1]
    finish_distributed()  # under torchrun / accelerate launch: every rank leaves the process group together
    return result


def train_and_evaluate(argv: list[str]):
    """:func:`run_train`, returning ``(trainer, loop_scaling)``."""
    from transformers import set_seed

    model_args, data_args, args = parse_train_args(argv)
    if model_args.show_recipe:
        none = f"no recipe for a new {model_args.family} model on rows of your own: the flags decide"
        print("\n".join(model_args.recipe_lines or [none]))
        return None, {}
    if args.process_index == 0 and model_args.recipe_lines:
        print(model_args.recipe_lines[0] + _recipe_note(model_args.recipe))
    loops = parse_loops(data_args.eval_loops)
    set_seed(args.seed)
    model, data, collator = build(model_args, data_args, args.seed)
    if args.process_index == 0:
        print(f"training on {data.description}; {held_out_line(data)}")
    from ..trainers import callbacks_for, trainer_for

    trainer = trainer_for(model_args.family)(
        model=model,
        args=args,
        train_dataset=data.train,
        data_collator=collator,
        processing_class=data.tokenizer,
        callbacks=callbacks_for(model_args.family),
    )
    trainer.task_recipe = model_args.recipe  # the training history and the card name it
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model()
    result = {}
    if trainer.is_world_process_zero():
        result = write_results(trainer, model_args, data_args, data, loops)
    if args.push_to_hub:
        trainer.push_to_hub()
    return trainer, result


def _recipe_note(recipe: dict) -> str:
    """What the start of a run says after its recipe's name: the settings this run overrides, if any
    (``; overridden: --max_steps 2 (--show_recipe lists it)``)."""
    changed = " ".join(f"--{k} {getattr(v, 'value', v)}" for k, v in recipe["overrides"].items())
    return f"; overridden: {changed} (--show_recipe lists it)" if changed else " (--show_recipe lists it)"


__all__ = [
    "LORA_SAVES",
    "ModelArguments",
    "TrainDataArguments",
    "UnusedFlags",
    "build",
    "check_num_loops",
    "checkpoint_config",
    "interrupted_hint",
    "parse_train_args",
    "resume_checkpoint",
    "run_train",
    "save_lora",
    "train_and_evaluate",
    "with_lora",
    "write_results",
]
