"""After ``equilibria train``'s training (main process): the folder's final weights, its training record, the
loop scaling on the held-out rows and the card."""

from __future__ import annotations

from pathlib import Path

from ..families import family_record, model_task
from ..scaling import loop_scaling, loop_scaling_report, metric_label, plot_labels, trained_loops
from ..wording import counted
from .building import save_lora
from .train_arguments import ModelArguments, TrainDataArguments


def write_results(trainer, model_args: ModelArguments, data_args: TrainDataArguments, data, loops: list[int]) -> dict:
    """After training (main process): the folder's final weights (LoRA merged or the adapter), its training record,
    the loop scaling on the held-out rows and the card, all of them of these weights; results in the folder computed
    on other weights (an earlier run into it) are removed. Returns ``{num_loops: accuracy}``."""
    from ..provenance import remove_results_of_other_weights, weights_fingerprint
    from ..tasks import save_training_record

    out = Path(trainer.args.output_dir)
    line = loss_line(trainer)
    if line:
        print(line)
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    if model_args.use_peft:
        from ..hub_cards.publish import lora_settings

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
        print(f"loop scaling on {len(data.test)} held-out examples{_dropped_note(data)}")
        weights = weights_fingerprint(out)
        trained = trained_loops({k: getattr(trainer.args, k, None) for k in ("min_loops", "max_loops")})
        labels = plot_labels(model, metric_label(data.metric, data_args.task or model_task(model)), trained)
        print(
            "\n".join(loop_scaling_report(result, model.config.model_type, out, record, weights=weights, plot=labels))
        )
        accuracy = {str(k): v for k, v in result.items()}
        trainer.loop_scaling = {"by": "equilibria train", "weights": weights, "data": record, "accuracy": accuracy}
    elif data.record.get("held_out_counts"):
        held = data.record["held_out_counts"]["held_out"]
        print(f"no held-out rows left (each of the {held} held out repeats a training question): no loop scaling")
    else:
        print("no held-out rows (--test_size 0): no loop-scaling evaluation")
    trainer.create_model_card(dataset=hub_dataset)
    code = " its remote code," if family_record(model).head_of_model(model).remote_code else ""
    print(f"wrote the model,{code} card and plot to {out}")
    return result


def _dropped_note(data) -> str:
    """What the loop-scaling line says of test problems dropped because the checkpoint trained on them."""
    dropped = data.record.get("dropped_as_trained")
    if not dropped:
        return ""
    return (
        f" ({dropped['dropped']} of the {dropped['drawn']} drawn were dropped: the checkpoint was trained on them; "
        "--data_seed_offset N draws this run's problems with another seed)"
    )


def loss_line(trainer) -> str | None:
    """What the run's ``train_loss`` is (``training loss 6.437: the mean over the run of 0.9 x lm_loss + 0.1 x
    jsrr_penalty (lm_loss 6.968, jsrr_penalty 1.655)``), from the trainer's objective and the run's means of the
    logged terms; ``None`` for a trainer without an objective (the plain ``Trainer``)."""
    summary = next((h for h in reversed(trainer.state.log_history) if "train_loss" in h), None)
    objective = getattr(trainer, "objective", None)
    if summary is None or not callable(objective):
        return None
    from ..hub_cards.publish import LOSS_PARTS

    if objective() == "lm_loss":
        return f"training loss {summary['train_loss']:.4g}: the language-model loss (lm_loss), its mean over the run"
    parts = [f"{key} {summary[f'train_{key}']:.4g}" for key in LOSS_PARTS if f"train_{key}" in summary]
    return f"training loss {summary['train_loss']:.4g}: the mean over the run of {objective()}" + (
        f" ({', '.join(parts)})" if parts else ""
    )


def held_out_line(data) -> str:
    """What ``equilibria train`` says first of the held-out rows: how many, and for rows of a file how many were
    held out and how many of those dropped as repeats of training questions (``held out 30, dropped 9 ..., kept
    21``)."""
    from ..tasks.held_out import describe_held_out_counts

    validation = "" if data.validation is None else f"; {len(data.validation)} held out for validation during training"
    counts = data.record.get("held_out_counts")
    if counts:
        if not counts["kept"]:
            return f"{describe_held_out_counts(counts)}: no loop-scaling evaluation{validation}"
        return (
            f"{describe_held_out_counts(counts)} for the loop-scaling evaluation ({data.test_description}){validation}"
        )
    held = f"{len(data.test)} held out for the loop-scaling evaluation" if len(data.test) else "none held out"
    return held + (f" ({data.test_description})" if data.test_description else "") + validation


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
    from ..provenance import data_fingerprint
    from ..tasks import fingerprints

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
