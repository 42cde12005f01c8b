"""Publishing a model folder with its card, whatever the push path.

:func:`write_model_card` is the one place a card is written into a folder: from the model, the results in the
folder (``loop_scaling.json`` / ``.png`` from ``equilibria train``, ``eval_loop_scaling.json`` / ``.png`` from
``equilibria eval``, which the card shows when both are there, ``audit.json`` from ``equilibria audit``,
``training_data.json``, ``training_history.json``), which are first copied from the folder the model was loaded
from when the target folder lacks them (``push_to_hub`` saves into a fresh folder), so the plot and the JSON travel
with the card. Used by ``equilibria card``, the trainers (``create_model_card``, hence ``trainer.push_to_hub`` and
the intermediate pushes of ``push_to_hub=True``) and ``model.push_to_hub``: the Hub-portable modeling files find it
through the ``equilibria.model_card`` entry point, so they import nothing of this package.

:func:`record_training_stage` keeps the whole training history: every Trainer run appends a stage (trainer, steps,
data, the arguments that shaped it, its losses) to ``training_history.json``, carried over from the folder a
model was loaded from, and the card lists every stage.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from .card import build_model_card, card_metadata_round_trips, training_arguments_that_matter

HISTORY_FILE = "training_history.json"


def model_source(model) -> Path | None:
    """The local folder ``model`` was loaded from (``config._name_or_path``), or ``None``."""
    name = getattr(model.config, "_name_or_path", "") or ""
    return Path(name) if name and Path(name).is_dir() else None


def _read_json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def write_model_card(
    model,
    folder,
    *,
    source=None,
    repo_id: str | None = None,
    tags: list[str] | None = None,
    keep_previous: bool = False,
    **card_options,
) -> Path:
    """Write the equilibria card (``README.md``) into ``folder`` and return its path.

    Results in ``folder`` computed on other weights than the ones it holds (:mod:`equilibria.provenance`) are left
    out of the card, which says so; ``source``'s results are copied in only when computed on these weights.
    With ``keep_previous``, options not given keep the values of the card already in ``folder`` (title, task name,
    datasets, base model, license), so rewriting a card keeps what it said.

    Args:
        source: where the model's results live when ``folder`` lacks them (default: the folder it was loaded from).
        repo_id: the Hub repository (loading snippets, title).
        tags: extra tags (``push_to_hub(tags=...)``).
        card_options: passed to :func:`~equilibria.hub_cards.build_model_card` (``base_model``, ``datasets``,
            ``task_name``, ``license``, ``trainer_state``, ``training_args`` ...).
    """
    from ..provenance import RESULTS, folder_results, other_weights_note, shown_loop_scaling

    folder = Path(folder)
    source = Path(source) if source is not None else model_source(model)
    if source is not None and source.resolve() != folder.resolve():
        _copy_results(source, folder)
    card_options["base_model"] = card_options.get("base_model") or _hub_origin(model)
    current, other = folder_results(folder)
    scaling = shown_loop_scaling(current)  # eval's when there is one, else train's
    found = {  # what the folder holds, unless given
        "loop_scaling": current.get(scaling),
        "loop_scaling_plot": _plot(folder, RESULTS[scaling][0], True) if scaling else None,
        "audit": current.get("audit.json"),
        "training_record": current.get("training_data.json"),
        "training_history": _read_json(folder / HISTORY_FILE),
        "adapter": _read_json(folder / "adapter_config.json"),
        "lm_eval": current.get("lm_eval.json"),
        "lm_eval_plot": _plot(folder, "lm_eval.png", "lm_eval.json" in current),
        "omitted": [other_weights_note(name, result) for name, result in other.items()],
        "license": "apache-2.0",
        **(previous_card_options(folder, current) if keep_previous else {}),
    }
    options = {**found, **{k: v for k, v in card_options.items() if v is not None or k not in found}}
    card = build_model_card(model, repo_id=repo_id, extra_tags=tags, **options)
    if not card_metadata_round_trips(card):
        raise ValueError("the card's metadata does not parse back to itself")
    card.save(folder / "README.md")
    return folder / "README.md"


def _plot(folder: Path, name: str, shown: bool) -> str | None:
    """``name`` when its result is shown and the file is there (matplotlib is optional), else ``None``."""
    return name if shown and (folder / name).is_file() else None


def _copy_results(source: Path, folder: Path) -> None:
    """Copy into ``folder`` the results of ``source`` it lacks (with their plots) that were computed on the weights
    ``folder`` holds: those that record them, and those that do not say when ``source`` holds the same weights; and
    the training history."""
    from ..provenance import RESULTS, describe_weights, read_result, weights_fingerprint

    weights = weights_fingerprint(folder)
    same = weights is not None and weights_fingerprint(source) == weights
    for name, plots in RESULTS.items():
        result = read_result(source / name)
        if result is None or (folder / name).exists():
            continue
        status = describe_weights(result, weights)
        if status == "current" or (status == "unrecorded" and same):
            for file in (name, *plots):
                if (source / file).is_file():
                    shutil.copy(source / file, folder / file)
    if (source / HISTORY_FILE).is_file() and not (folder / HISTORY_FILE).exists():
        shutil.copy(source / HISTORY_FILE, folder / HISTORY_FILE)


def previous_card_options(folder: Path, results: dict) -> dict:
    """What the equilibria card already in ``folder`` says that the folder's files do not: its title, task name,
    datasets (those the folder's ``results`` were computed on), base model, license and language (``{}`` without
    a card)."""
    from huggingface_hub import ModelCard

    from ..provenance import shown_loop_scaling
    from .card import evaluation_record

    path = folder / "README.md"
    if not path.is_file():
        return {}
    data = ModelCard.load(path).data
    if "equilibria" not in (data.tags or []):
        return {}
    evaluated = evaluation_record(results.get(shown_loop_scaling(results)), results.get("audit.json")) or {}
    entries = data.eval_results or []
    options = {
        "model_name": data.model_name,
        "task_name": entries[0].task_name if entries else None,
        "datasets": data.datasets if evaluated.get("dataset") in (data.datasets or []) else None,
        "base_model": data.base_model,
        "license": data.license,
        "language": data.language,
    }
    return {k: v for k, v in options.items() if v}


def _hub_origin(model) -> str | None:
    """The Hub id the model was loaded from (its ``base_model`` when it is published again), if it was one."""
    name = getattr(model.config, "_name_or_path", "") or ""
    if not name or Path(name).exists() or name.count("/") != 1:
        return None
    return name


# the terms of a family trainer's loss, logged beside it (their names in the trainers' logs)
LOSS_PARTS = ("lm_loss", "exit_entropy", "jsrr_penalty", "halt_loss", "jacobian_penalty", "correction_loss")


def _rounded(value):
    return None if value is None else round(float(value), 4)


def _thin(points: list, keep: int = 8) -> list:
    """About ``keep`` evenly spaced points, the last always among them."""
    shown = points[:: max(1, len(points) // keep)]
    return shown + [points[-1]] if points and shown[-1] != points[-1] else shown


def _run_id(trainer) -> str:
    """One id per Trainer run (an intermediate push and the final card update the same stage)."""
    if not getattr(trainer, "_equilibria_run_id", None):
        trainer._equilibria_run_id = f"{type(trainer).__name__}@{datetime.now(UTC).isoformat()}"
    return trainer._equilibria_run_id


def record_training_stage(folder, trainer, source=None) -> list[dict]:
    """Append the stage ``trainer`` just ran to ``folder``'s ``training_history.json`` (starting from the history
    of ``source``, the folder the model was loaded from, when ``folder`` has none) and return the history."""
    folder = Path(folder)
    history = _read_json(folder / HISTORY_FILE)
    if history is None and source is not None:
        history = _read_json(Path(source) / HISTORY_FILE)
    history = list(history or [])
    state, args = trainer.state, trainer.args
    logged = [h for h in state.log_history if "loss" in h and "step" in h]
    parts = [key for key in LOSS_PARTS if any(key in h for h in logged)]  # the loss's terms, logged beside it
    parts = [] if parts == ["lm_loss"] else parts  # the loss is the LM loss: no column repeats it
    losses = [(h["step"], round(h["loss"], 4), *(_rounded(h.get(key)) for key in parts)) for h in logged]
    record = _read_json(folder / "training_data.json") or {}
    stage = {
        "trainer": type(trainer).__name__,
        "steps": int(state.global_step),
        "data": record.get("description"),
        "arguments": training_arguments_that_matter(args),
        "losses": _thin(losses),
        "run": _run_id(trainer),
    }
    if parts:  # each row of "losses": step, loss, then these terms of it
        stage["loss_parts"] = parts
    objective = getattr(trainer, "objective", None)
    if callable(objective):
        stage["objective"] = objective()
    recipe = getattr(args, "recipe", None)
    if callable(recipe):  # a trainer with recipe presets (StarsTrainingArguments): the preset and its overrides
        stage["recipe"] = json.loads(json.dumps(recipe(), default=lambda v: getattr(v, "value", str(v))))
    task_recipe = getattr(trainer, "task_recipe", None)
    if task_recipe:  # equilibria train's recipe of the family and task (or of fine-tuning) and what the run changed
        stage["task_recipe"] = json.loads(json.dumps(task_recipe, default=lambda v: getattr(v, "value", str(v))))
    card_stage = getattr(trainer, "card_stage", None)
    if callable(card_stage):  # what a trainer adds of its own (LoopGRPOTrainer: the objective, rewards, loop count)
        stage.update(card_stage())
    kept = getattr(trainer, "kept_checkpoint", None)
    kept = kept() if callable(kept) else None
    if kept:  # a validated run: which step's weights it ended with, and why
        stage["kept"] = {**kept, "evaluations": _thin(kept["evaluations"], keep=12)}
    lora = getattr(trainer, "lora", None) or lora_settings(trainer.model)
    if lora:
        stage["lora"] = lora
    history = [h for h in history if h.get("run") != stage["run"]] + [stage]  # a run's later record replaces it
    (folder / HISTORY_FILE).write_text(json.dumps(history, indent=1) + "\n")
    return history


def lora_settings(model) -> dict | None:
    """The LoRA settings of a peft-wrapped ``model`` (``None`` for any other model)."""
    config = (getattr(model, "peft_config", None) or {}).get("default")
    if config is None or not hasattr(config, "r"):
        return None
    targets = config.target_modules
    return {
        "r": config.r,
        "alpha": config.lora_alpha,
        "dropout": config.lora_dropout,
        "target_modules": sorted(targets) if isinstance(targets, (set, list, tuple)) else targets,
    }


__all__ = ["lora_settings", "model_source", "record_training_stage", "write_model_card"]
