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

import contextlib

from ..scaling import parse_loops
from .building import LORA_SAVES, build, save_lora, with_lora
from .results import held_out_line, write_results
from .train_arguments import (
    ModelArguments,
    TrainDataArguments,
    UnusedFlags,
    check_num_loops,
    checkpoint_config,
    grpo_classes,
    interrupted_hint,
    parse_train_args,
    resume_checkpoint,
    reward_function,
)
from .validation import remove_checkpoints, validation_for


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
    if model_args.torch_threads is not None:
        import torch

        torch.set_num_threads(model_args.torch_threads)
    set_seed(args.seed)
    model, data, collator = build(model_args, data_args, args.seed)
    if args.process_index == 0:
        print(f"training on {data.description}; {held_out_line(data)}")
    with _hub_errors_named(args, "before training: nothing was trained"):  # Trainer creates the Hub repo first
        trainer = _trainer(model_args, data_args, args, model, data, collator)
    trainer.task_recipe = model_args.recipe  # the training history and the card name it
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model()
    result = {}
    if trainer.is_world_process_zero():
        _report_kept(trainer, model_args)
        result = write_results(trainer, model_args, data_args, data, loops)
    if args.push_to_hub:
        with _hub_errors_named(args, f"the trained model is in {args.output_dir}; upload that folder later"):
            trainer.push_to_hub()
    return trainer, result


def _trainer(model_args: ModelArguments, data_args: TrainDataArguments, args, model, data, collator):
    """The family's trainer on the training split, or ``--trainer grpo``'s ``LoopGRPOTrainer`` on the task's prompts
    with ``--reward``."""
    from ..trainers import callbacks_for, trainer_for

    if model_args.trainer != "grpo":
        if data.validation is None and str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "no":
            _no_validation(args)
        return trainer_for(model_args.family)(
            model=model,
            args=args,
            train_dataset=data.train,
            eval_dataset=data.validation,
            data_collator=collator,
            processing_class=data.tokenizer,
            callbacks=callbacks_for(model_args.family),
            validation=validation_for(
                model, data, data_args.validation_loops, data_args.validation_target, data_args.task
            ),
        )
    if data.prompts is None:
        raise ValueError(
            f"--trainer grpo reads prompts of a generated text task (addition); the {data.name} task has none"
        )
    trainer_class = grpo_classes()[1]
    reward = reward_function(model_args.reward)
    return trainer_class(model=model, reward_funcs=reward, args=args, train_dataset=data.prompts,
                         processing_class=data.tokenizer)  # fmt: skip


def _no_validation(args) -> None:
    """A run whose data leaves no validation split (a small file of yours) trains without validation: its settings
    are turned off, and the run says so."""
    from transformers.trainer_utils import IntervalStrategy, SaveStrategy

    args.eval_strategy = IntervalStrategy.NO
    args.load_best_model_at_end = False
    if args.save_strategy == SaveStrategy.BEST:
        args.save_strategy = SaveStrategy.NO
    if args.process_index == 0:
        print("no validation split: the data leaves no row for one (too few rows, or each repeats a training question)")


def _report_kept(trainer, model_args: ModelArguments) -> None:
    """Say which step's weights a validated run ends with, and remove the finished run's ``checkpoint-N`` folders
    (unless ``--keep_checkpoints``): the output folder is the Hub-ready one."""
    from ..hub_cards.card import kept_sentence

    kept = getattr(trainer, "kept_checkpoint", None)
    kept = kept() if callable(kept) else None
    if kept:
        print(kept_sentence(kept))
    if not model_args.keep_checkpoints:
        removed = remove_checkpoints(trainer.args.output_dir)
        if removed:
            print(f"removed {', '.join(removed)} from {trainer.args.output_dir} (--keep_checkpoints keeps them)")


@contextlib.contextmanager
def _hub_errors_named(args, state: str):
    """A network error of ``--push_to_hub`` (no connection, offline mode) as one ``ValueError`` naming the flag and
    ``state`` (what was done), not a traceback from inside the HTTP client."""
    try:
        yield
    except Exception as err:
        names = {cls.__name__ for cls in type(err).__mro__}
        if not args.push_to_hub or not (isinstance(err, OSError) or names & {"HTTPError", "RequestException"}):
            raise
        raise ValueError(
            f"--push_to_hub: cannot reach the Hub ({type(err).__name__}: {err}); {state}. Check the network and "
            "HF_TOKEN (HF_HUB_OFFLINE must be unset), or train without --push_to_hub"
        ) from None


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
