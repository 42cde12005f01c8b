"""What ``equilibria eval`` and ``equilibria audit`` evaluate a saved model on (:func:`evaluation_data`), and the
record of it that their results carry (``"data"``: a name, the Hub dataset if any, the rows' fingerprint, whether
they are held out from the training data and why).

The rows, in order of precedence:

1. ``dataset_name``: a file, ``save_to_disk`` folder or Hub dataset of yours, read as ``equilibria train`` reads
   it (language models: prompt/completion, messages or text rows; EqR / PH-DEQ: the task's ``inputs`` / ``labels``
   rows or a published puzzle CSV); rows asking a question the model was trained on are dropped (and counted);
2. ``task``: fresh generated problems of that task;
3. the held-out rows the folder's training record names, for a model trained on rows of its own: read again from
   their file (refused if it has changed since), scored with the metric training used;
4. fresh generated problems of the task the model was trained on; refused for a language model whose last training
   stage read rows of text of your own (``config.equilibria_task`` is ``"rows"``) and held none of them out
   (``--test_size 0``): its task is not a generated one, so ``--task`` or ``--dataset_name`` says what to score.

Generated problems leave out every question of the model's training record (``training_data.json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from .families import family_record, model_task
from .provenance import data_fingerprint
from .tasks import (
    TRAINING_RECORD,
    eval_split,
    fingerprints,
    held_out_split,
    kept_rows,
    load_training_record,
    task_record,
    trained_on_rows,
)
from .tasks.held_out import content_keys, numbered
from .tasks.registry import TASK_RECORDS
from .tasks.text_data import FORMATS, METRICS, evaluation_rows, held_out_rows, row_format, row_keys, text_source
from .tasks.tokenization import load_tokenizer
from .wording import counted, with_article


@dataclass
class EvalData:
    """Rows to evaluate and how: ``metric`` is ``"task"`` (the task's own measure), ``"token_accuracy"`` or
    ``"exact_match"`` (language models on rows of text); ``record`` is the results' ``"data"``."""

    rows: Dataset
    record: dict
    metric: str = "task"


def evaluation_data(
    model,
    model_path: str,
    *,
    task: str | None = None,
    dataset_name: str | None = None,
    dataset_config: str | None = None,
    split: str | None = None,
    text_field: str | None = None,
    metric: str | None = None,
    max_length: int | None = None,
    num_examples: int | None = None,
    default_count: int = 200,
    seed: int = 1234,
    digits: int | None = None,
    task_options: dict | None = None,
    columns: dict[str, str] | None = None,
) -> EvalData:
    """The rows a saved model (``model``, loaded from ``model_path``) is evaluated on (see the module's text for
    which), at most ``num_examples`` of them (generated: ``num_examples`` or ``default_count``; of ``digits`` and
    the task's format options (``task_options``) where given, else of the kind the training record names, else the
    defaults); ``columns``: ``--dataset_columns`` of a ``dataset_name`` (default: the training record's)."""
    if num_examples is not None and num_examples < 1:
        raise ValueError(f"--num_examples must be >= 1, got {num_examples}")
    if metric is not None and metric not in METRICS:
        raise ValueError(f"--eval_metric must be one of {METRICS}, got {metric!r}")
    if dataset_name is not None and task is not None:
        raise ValueError("pass either --task (generated problems) or --dataset_name (your rows), not both")
    training = load_training_record(model_path) or {}
    options = dict(metric=metric, text_field=text_field, max_length=max_length, limit=num_examples, columns=columns)
    if dataset_name is not None:
        data = _file_data(model, model_path, training, dataset_name, dataset_config, split, options)
    elif task is None and training.get("held_out"):
        data = _recorded_data(model_path, training, options)
    else:
        if task is None and _reads_text(model) and trained_on_rows(model.config, training):
            trained = f" ({training['description']})" if training.get("description") else ""
            raise ValueError(
                f"{model_path} was last trained on rows of your own{trained} and holds none of them out (--test_size "
                "0), so there is nothing of its own to score: pass --dataset_name FILE (rows like them; those asking "
                f"a training question are dropped) or --task {family_record(model).head_of_model(model).tasks[0]} (fresh "
                "generated problems of a task, scored although it was not trained on them last)"
            )
        generator = {"digits": digits, **(task_options or {})}
        data = _generated_data(model, training, task, num_examples or default_count, seed, generator)
    if not len(data.rows):
        raise ValueError(f"nothing to evaluate: {data.record['name']} ({data.record['note']})")
    data.record["units"] = len(data.rows)
    return data


def _reads_text(model) -> bool:
    """Whether ``model``'s head is a language model's (its record's head kind), which reads rows of text."""
    return family_record(model).head_of_model(model).reads_text


def question_kind(fmt: str, text_field: str | None = None) -> str:
    """What a row's question fingerprint is taken of, for rows of format ``fmt`` (a task's name, or a text format
    of :data:`~equilibria.tasks.text_data.FORMATS`): fingerprints of two kinds of rows cannot be compared. Addition
    problems and prompt/completion rows are both keyed by the prompt."""
    fmt = fmt.removeprefix("task:")
    if fmt in TASK_RECORDS:
        return TASK_RECORDS[fmt].kind
    if fmt == "prompt_completion":
        return "prompt"  # the prompt: the question kind of the addition task's record too
    return f"text:{text_field or 'text'}" if fmt == "text" else fmt


def _training_kind(training: dict) -> str | None:
    """The kind of questions (:func:`question_kind`) the training record's fingerprints are of."""
    if not training:
        return None
    source = training.get("source")
    return question_kind(source["format"], source.get("text_field")) if source else question_kind(training["task"])


def _exclusion(training: dict, kind: str) -> tuple[set[str], set[str], dict]:
    """``(training questions to leave out, training classes to leave out, the held-out part of the record)`` for
    rows whose questions are of ``kind``: the training record's, when they are comparable. Classes are the
    puzzles' classes under the task's symmetries, where the record has them (``class_fingerprints``)."""
    if not training:
        note = f"not checked against the training data (the folder has no {TRAINING_RECORD})"
        return set(), set(), {"held_out": False, "note": note}
    if _training_kind(training) != kind:
        note = f"not checked against the training data ({training['description']}: rows of another kind)"
        return set(), set(), {"held_out": False, "note": note}
    classes = set(training.get("class_fingerprints", ()))
    up_to = f" nor any of their {len(classes)} classes up to the task's symmetries" if classes else ""
    if training.get("split_by") == "board":
        up_to = " (but their symmetric variants may be: trained with --split_by board, a memorisation check)"
    validation = set(training.get("validation_fingerprints", ()))
    also = f" nor of its {len(validation)} validation questions" if validation else ""
    note = (
        f"no question of the model's training data ({training['description']}; {len(training['fingerprints'])} "
        f"questions, from {TRAINING_RECORD}){up_to}{also} is among them"
    )
    held = training.get("split_by") != "board"  # a board split is a memorisation check, not held out up to symmetry
    return set(training["fingerprints"]) | validation, classes, {"held_out": held, "note": note}


def _generator_options(training: dict, task: str, given: dict) -> tuple[int, dict]:
    """``(digits, format options)`` of the problems to draw: the flags' (``given``, ``None`` where unset), else the
    training record's for the task it trained on, else the defaults (2 digits, the task's default format)."""
    recorded = training.get("generator", {}) if training.get("task") == task else {}
    chosen = {**recorded, **{k: v for k, v in given.items() if v is not None}}
    digits = chosen.get("digits")
    options = {k: chosen[k] for k in task_record(task).options if chosen.get(k) is not None}
    return (2 if digits is None else digits), options


def _generated_data(model, training: dict, task: str | None, count: int, seed: int, generator: dict) -> EvalData:
    task = task or model_task(model)
    digits, options = _generator_options(training, task, generator)
    head = family_record(model).head_of_model(model)  # the task must fit the loaded head, not only its family
    if task not in head.tasks:
        raise ValueError(
            f"--task {task} does not fit {with_article(model.config.model_type)} model ({type(model).__name__} fits {head.tasks})"
        )
    exclude, classes, held = _exclusion(training, question_kind(task))
    # drawn distinct by class only when the training classes are known: a model without them (an older record, none
    # at all) is evaluated on distinct boards, not on the few puzzles a small size has classes for (4x4: 36)
    split_by = "class" if classes else "board"
    rows = eval_split(
        model.config, task, count, seed, digits, exclude, classes, split_by, task_record(task).check_options(options)
    )
    if task_record(task).class_key is not None and not classes and training.get("split_by") != "board":
        held = {
            "held_out": False,
            "note": held["note"] + "; the training puzzles' classes are not known, so symmetric variants "
            "of them may be among these",
        }
    record = {
        "name": f"{counted(len(rows), f'generated {task} problem')} (seed {seed})",
        "dataset": None,
        "fingerprint": data_fingerprint(fingerprints(task, rows)),
        **held,
    }
    return EvalData(rows, record)


def _recorded_data(model_path: str, training: dict, options: dict) -> EvalData:
    """The held-out rows the training record names (rows of your own), scored as training scored them."""
    from .tasks import task_held_out_rows

    source = training["source"]
    record = {
        "dataset": None if source.get("path") else source["name"],
        "split": held_out_split(training),
        "held_out": True,
        "note": training["held_out"]["description"] + f" (named by {TRAINING_RECORD})",
    }
    if source["format"] not in FORMATS:  # rows of a task (EqR, PH-DEQ)
        rows = _first(task_held_out_rows(training, model_path), options["limit"])
        return EvalData(rows, {**_named(rows, f"held-out rows of {source['label']}"), **record})
    source = _with_options(source, options)
    raw = _first(held_out_rows(training, model_path), options["limit"])
    rows = evaluation_rows(raw, source, load_tokenizer(model_path, "prompts"))
    record = {**_named(raw, f"held-out rows of {source['label']}"), **record, "metric": source["metric"]}
    return EvalData(rows, record, source["metric"])


def _named(rows: Dataset, what: str) -> dict:
    """The name (``what`` after the count, "rows" in it said "row" of a single row) and the content fingerprint of
    a record of ``rows``."""
    what = what.replace("rows", "row", 1) if len(rows) == 1 else what
    return {"name": f"{len(rows)} {what}", "fingerprint": data_fingerprint(content_keys(rows))}


def _with_options(source: dict, options: dict) -> dict:
    """``source`` with the evaluation options given (metric, text column, length) in place of its own."""
    chosen = {k: options[k] for k in ("metric", "text_field", "max_length") if options[k] is not None}
    if "text_field" in chosen and chosen["text_field"] != source["text_field"]:
        raise ValueError("--dataset_text_field applies to --dataset_name; the held-out rows are read as in training")
    source = {**source, **chosen}
    text_source(source["name"], None, source["format"], source["text_field"], source["max_length"], source["metric"])
    return source  # (text_source checks that the metric fits the rows)


def _file_data(
    model, model_path: str, training: dict, name: str, config: str | None, split: str | None, options: dict
) -> EvalData:
    """Rows of a file / folder / Hub dataset of yours, without those asking a training question."""
    if not _reads_text(model):
        from .tasks import load_task_rows

        task = model_task(model)
        rows, split = load_task_rows(name, task, split, config)
        exclude, classes, held = _exclusion(training, question_kind(task))
        keep = kept_rows(task, rows, exclude, classes)
        metric = None
    else:
        source, rows, split = _text_rows(model, training, name, config, split, options)
        exclude, _, held = _exclusion(training, question_kind(source["format"], source["text_field"]))
        keep = [i for i, key in enumerate(row_keys(rows, source)) if key not in exclude]
        metric = source["metric"]
    dropped, raw = len(rows) - len(keep), _first(rows.select(keep), options["limit"])
    if held["held_out"]:
        held = {**held, "dropped_training_rows": dropped}
        noun, were = ("row", "was") if dropped == 1 else ("rows", "were")
        held["note"] += (
            f"; {dropped} {noun} asking a training question (or of its class) {were} dropped" if dropped else ""
        )
    label = Path(name).name if Path(name).exists() else name
    record = {**_named(raw, f"rows of {label} ({split} split)"), "dataset": None if Path(name).exists() else name}
    record["split"] = split
    if metric is None:
        return EvalData(raw, {**record, **held})
    rows = evaluation_rows(raw, source, load_tokenizer(model_path, "prompts"))
    return EvalData(rows, {**record, "metric": metric, **held}, metric)


def _text_rows(model, training: dict, name: str, config: str | None, split: str | None, options: dict):
    """``(source, rows, split)`` of a file of text rows; ``answer`` stands for ``completion`` (task rows)."""
    from .tasks.row_files import load_rows

    trained = training.get("source") or {}
    columns = options.get("columns") or trained.get("columns")
    splits = load_rows(name, config, columns)
    split = split or ("test" if "test" in splits else "train")
    if split not in splits:
        raise ValueError(f"--split {split!r} is not in {name} (splits: {sorted(splits)})")
    rows = numbered(splits[split])
    if {"prompt", "answer"} <= set(rows.column_names) and "completion" not in rows.column_names:
        rows = rows.rename_column("answer", "completion")
    text_field = options["text_field"] or trained.get("text_field") or "text"
    fmt = row_format(rows.column_names, name, text_field)
    metric = (
        options["metric"]
        or trained.get("metric")
        or ("exact_match" if fmt == "prompt_completion" else "token_accuracy")
    )
    max_length = options["max_length"] or trained.get("max_length") or model.config.max_position_embeddings
    return text_source(name, config, fmt, text_field, max_length, metric, columns), rows, split


def _first(rows: Dataset, limit: int | None) -> Dataset:
    return rows if limit is None or len(rows) <= limit else rows.select(range(limit))


__all__ = ["EvalData", "evaluation_data", "question_kind"]
