"""Model cards for every family: ``build_model_card(model, ...) -> huggingface_hub.ModelCard``.

The card is built from what is known: the config, the Trainer's arguments and log history, the datasets, a
loop-scaling table (accuracy per loop count; it becomes ``model-index`` results, so the Hub shows an evaluation
widget) and an audit verdict. Metadata: ``library_name: transformers``, ``pipeline_tag``, tags (the family, and
looped-lm / deep-equilibrium / recurrent-reasoning), license, datasets, ``base_model`` when fine-tuned.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import TrainingArguments

from ..families import Family, family_record, model_task
from ..provenance import LOOP_SCALING_FILES
from ..tasks.named_splits import held_out_split, trained_on_rows
from ..tasks.registry import TASK_RECORDS, task_record
from ..wording import counted, with_article
from .family_text import FamilyText, family_text

OPTIMISER_KEYS = (
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "seed",
)


def _loop_rows(loop_scaling) -> list[tuple[int, float]]:
    """``{loops: accuracy}``, ``[(loops, accuracy), ...]`` or ``equilibria eval``'s ``{"data": ..., "accuracy":
    {loops: accuracy}}`` -> sorted rows, validated."""
    if loop_scaling is None:
        return []
    if isinstance(loop_scaling, dict) and "accuracy" in loop_scaling:
        loop_scaling = loop_scaling["accuracy"]
    items = loop_scaling.items() if isinstance(loop_scaling, dict) else loop_scaling
    rows = []
    for loops, accuracy in items:
        loops, accuracy = int(loops), float(accuracy)
        if not 0.0 <= accuracy <= 1.0:
            raise ValueError(f"loop_scaling accuracies must be fractions in [0, 1], got {accuracy} at {loops} loops")
        rows.append((loops, accuracy))
    return sorted(rows)


def evaluation_record(loop_scaling, audit: dict | None) -> dict | None:
    """What the card's results were computed on (``equilibria eval`` / ``audit`` record it), or ``None``."""
    if isinstance(loop_scaling, dict) and loop_scaling.get("data"):
        return loop_scaling["data"]
    return (audit or {}).get("data") or None


def check_card_datasets(datasets: list[str] | None, evaluated: dict | None) -> None:
    """A card may name only the dataset its results were computed on: ``ValueError`` otherwise."""
    if not datasets or evaluated is None:
        return
    if evaluated.get("dataset") not in datasets:
        raise ValueError(
            f"datasets {datasets}: the card's results were computed on {evaluated['name']}, not on "
            f"{' or '.join(datasets)}; name only the dataset the results come from"
        )


def _audit_units(audit: dict) -> str:
    unit = audit.get("family", {}).get("unit", "unit")
    data = audit.get("data") or {}
    where = f" of {data['name']} ({data['note']})" if data.get("name") else ""
    count = audit.get("num_units")
    return f"{counted(count, unit)}{where}" if count else f"its evaluation data{where}"


def _audit_evidence(audit: dict) -> list[str]:
    """The audit's key numbers with their standard errors, for the card."""
    chance, t1 = audit.get("chance") or {}, audit["substitution"]
    lines = [f"Accuracy {100 * audit['accuracy']:.2f}%"]
    if chance:
        lines[0] += (
            f" against a majority-class baseline of {100 * chance['majority']:.2f}% ({chance['margin_se']:+.1f} "
            "binomial standard errors)"
        )
    t1_se = f" +/- {t1['se_points']:.2f}" if "se_points" in t1 else ""
    lines[0] += (
        f"; substituting the loop's start state for its solved state changes it by {t1['change_points']:+.2f}"
        f"{t1_se} points; median `||h* - z0||` = {audit['displacement']['median']:.3g}."
    )
    return lines


def _audit_dict(audit) -> dict | None:
    if audit is None:
        return None
    if hasattr(audit, "to_dict"):
        return audit.to_dict()
    if isinstance(audit, (str, Path)):
        return json.loads(Path(audit).read_text())
    return dict(audit)


def build_model_card(
    model,
    *,
    model_name: str | None = None,
    repo_id: str | None = None,
    license: str = "apache-2.0",
    base_model: str | None = None,
    datasets: str | list[str] | None = None,
    dataset_name: str | None = None,
    task_name: str | None = None,
    loop_scaling: dict | list | None = None,
    loop_scaling_plot: str | None = None,
    audit=None,
    trainer_state=None,
    training_args=None,
    training_record: dict | None = None,
    training_history: list[dict] | None = None,
    language: str | list[str] | None = None,
    extra_tags: list[str] | None = None,
    limitations: str | None = None,
    adapter: dict | None = None,
    lm_eval: dict | None = None,
    lm_eval_plot: str | None = None,
    omitted: list[str] | None = None,
) -> ModelCard:
    """A [`huggingface_hub.ModelCard`] for ``model`` (any family of equilibria).

    Args:
        model_name: Shown as the title and in ``model-index``; default: ``repo_id`` or the family's name.
        repo_id: Where it will live on the Hub (used in the loading snippets).
        base_model: The model it was fine-tuned from (Hub id), if any.
        datasets: Hub dataset ids for the metadata.
        dataset_name: A readable name of the evaluation data (default: what the results record, else the first
            of ``datasets``, else "held-out evaluation data").
        task_name: A readable name of the task (e.g. "2-digit addition").
        loop_scaling: Accuracy per loop count, ``{loops: fraction}`` or ``equilibria eval``'s JSON (with
            ``compared`` curves, as the demo writes, shown beside it); becomes the table and ``model-index``.
        loop_scaling_plot: File name of the loop-scaling PNG saved beside the card (linked from the body).
        audit: An ``AuditReport`` (or its dict, or the path of its JSON): the verdict goes into the card.
        trainer_state, training_args: ``trainer.state`` and ``trainer.args`` of a run not in ``training_history``.
        training_record: ``training_data.json`` (what the model was trained on).
        training_history: ``training_history.json``: every training stage (see ``record_training_stage``).
        adapter: ``adapter_config.json`` of a folder that holds a LoRA adapter rather than weights.
        lm_eval, lm_eval_plot: ``lm_eval.json`` (``equilibria eval --lm_eval_tasks``) and its plot's file name: a
            table per loop count and ``model-index`` entries, one per task, metric and loop count.
        omitted: Notes on results left out of the card (computed on other weights), listed under "Results not
            shown".
    """
    text = family_text(model)
    family = family_record(model)
    head = family.head_of_model(model)
    usage = text.usage[head.kind]
    config = model.config
    audit_data = _audit_dict(audit)
    if isinstance(datasets, str):
        datasets = [datasets]
    evaluated = evaluation_record(loop_scaling, audit_data)
    check_card_datasets(datasets, evaluated)
    title = model_name or repo_id or f"{text.name} ({config.model_type})"
    dataset_label, dataset_type = _dataset_names(evaluated, dataset_name, datasets)
    rows = _loop_rows(loop_scaling)
    metric = _metric(loop_scaling)
    halting = _halting(loop_scaling)
    split = _split(evaluated, training_record)
    eval_results = _eval_results(head, task_name, rows, dataset_type, dataset_label, metric, halting, split)
    eval_results += _lm_eval_results(head, lm_eval)
    base_model = base_model or _adapter_base(adapter)
    tags = ["equilibria", config.model_type, *text.tags, *(extra_tags or [])]
    data = _card_data(head, license, tags, datasets, base_model, language, title, eval_results, adapter)
    note = f" ({evaluated['note']})" if evaluated and evaluated.get("note") else ""
    example = _example_prompt(model, training_record)
    sections = [
        _intro(model, family, text, title, base_model, adapter),
        _loading(head, usage, repo_id or "path/to/this/folder", adapter, example, family, config, rows),
        _loop_scaling_section(loop_scaling, rows, loop_scaling_plot, dataset_label + note, task_name, metric, halting),
        _lm_eval_section(lm_eval, lm_eval_plot),
        _audit_section(audit_data),
        _omitted_section(omitted),
        _training_section(training_record, training_history, trainer_state, training_args),
        _limitations(limitations),
        _citation(text),
    ]
    body = "\n".join(line for section in sections for line in section)
    return ModelCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body)


def _dataset_names(evaluated: dict | None, dataset_name: str | None, datasets: list[str] | None) -> tuple[str, str]:
    """``(label, type)`` of the evaluation data: the readable name (given, else what the results record, else the
    first Hub dataset) and the ``model-index`` dataset type (the recorded Hub dataset, else the first given)."""
    named = evaluated["name"] if evaluated else None
    label = dataset_name or named or (datasets[0] if datasets else "held-out evaluation data")
    return label, (evaluated or {}).get("dataset") or (datasets[0] if datasets else "custom")


def _card_data(head, license, tags, datasets, base_model, language, title, eval_results, adapter) -> ModelCardData:
    """The card's metadata (its YAML header): library, pipeline, license, tags, datasets, base model, language and
    ``model-index`` results (titled ``title``, only when there are results)."""
    return ModelCardData(
        library_name="peft" if adapter else "transformers",
        pipeline_tag=head.pipeline_tag,
        license=license,
        tags=list(dict.fromkeys(tags)),
        datasets=datasets,
        base_model=base_model,
        language=language,
        model_name=title if eval_results else None,
        eval_results=eval_results or None,
    )


def _adapter_base(adapter: dict | None) -> str | None:
    """The Hub id a LoRA adapter applies to (``None`` for a local base or no adapter)."""
    named = (adapter or {}).get("base_model_name_or_path") or ""
    return named if named.count("/") == 1 and not Path(named).exists() else None


METRICS = {  # what loop_scaling.json's "metric" names: (model-index metric type, how the card says it)
    "accuracy": ("accuracy", "Accuracy"),
    "token_accuracy": ("accuracy", "Next-token accuracy (teacher forcing, on the tokens the loss is on)"),
    "exact_match": ("exact_match", "Exact-match accuracy of the greedy completion"),
}


def _metric(loop_scaling) -> str:
    data = loop_scaling.get("data") if isinstance(loop_scaling, dict) else None
    metric = (data or {}).get("metric", "accuracy")
    if metric not in METRICS:
        raise ValueError(f"loop_scaling metric must be one of {tuple(METRICS)}, got {metric!r}")
    return metric


def _halting(loop_scaling) -> tuple[float, dict[int, float]] | None:
    """(threshold, {maximum depth: mean evaluations per puzzle}) of an ``equilibria eval --halt_threshold`` run."""
    if not isinstance(loop_scaling, dict) or loop_scaling.get("halt_threshold") is None:
        return None
    return float(loop_scaling["halt_threshold"]), {int(k): float(v) for k, v in loop_scaling["mean_nfe"].items()}


def _split(evaluated: dict | None, training_record: dict | None) -> str:
    """The ``model-index`` split of the results: what their record says (``split``), else, for the held-out rows a
    training record names (results written before they recorded it), their split, else ``test``."""
    if evaluated and evaluated.get("split"):
        return evaluated["split"]
    held = (training_record or {}).get("held_out") or {}
    if evaluated and held and evaluated.get("fingerprint") == held.get("fingerprint"):
        return held_out_split(training_record)
    return "test"


def _example_prompt(model, training_record: dict | None) -> str:
    """The prompt of the card's usage snippet: one in the format of the model's task (its record's), or, for a model
    last trained on prompt/completion rows of your own, the prompt of one held-out row (its training record's
    ``example_prompt``; the record keeps fingerprints of the other rows, never the rows), else a placeholder naming
    them."""
    task = model_task(model)
    if task in TASK_RECORDS and not trained_on_rows(model.config, training_record):
        return task_record(task).prompt_format or ""
    example = (training_record or {}).get("example_prompt")
    if example:  # a held-out row's prompt, as a Python string's contents
        return json.dumps(example)[1:-1]
    label = ((training_record or {}).get("source") or {}).get("label")
    return f"<a prompt like those of {label}>" if label else "<a prompt like those it was trained on>"


def _eval_results(
    head, task_name, rows, dataset_type: str, dataset_label: str, metric: str, halting=None, split: str = "test"
) -> list[EvalResult]:
    """One ``model-index`` result per loop count (per maximum depth, naming the threshold, when halting)."""
    halt = f", halting at p={halting[0]}" if halting else ""
    return [
        EvalResult(
            task_type=head.pipeline_tag,
            task_name=task_name,
            dataset_type=dataset_type,
            dataset_name=dataset_label,
            dataset_split=split,
            metric_type=METRICS[metric][0],
            metric_name=f"{metric.replace('_', ' ')} @ {'up to ' if halting else ''}{loops} loops{halt}",
            metric_value=round(accuracy, 4),
            metric_config=f"num_loops={loops}" + (f",halt_threshold={halting[0]}" if halting else ""),
        )
        for loops, accuracy in rows
    ]


def _lm_eval_results(head, lm_eval: dict | None) -> list[EvalResult]:
    """One ``model-index`` result per lm-eval task, metric and loop count."""
    return [
        EvalResult(
            task_type=head.pipeline_tag,
            dataset_type=task,
            dataset_name=task,
            metric_type=metric,
            metric_name=f"{metric} @ {loops} loops",
            metric_value=round(value, 4),
            metric_config=f"num_loops={loops}",
            source_name="lm-evaluation-harness",
            source_url="https://github.com/EleutherAI/lm-evaluation-harness",
        )
        for task, metrics in (lm_eval or {}).get("tasks", {}).items()
        for metric, curve in metrics.items()
        for loops, value in sorted(curve.items(), key=lambda item: int(item[0]))
    ]


def _lm_eval_section(lm_eval: dict | None, plot: str | None) -> list[str]:
    if not lm_eval or not lm_eval.get("tasks"):
        return []
    from ..lm_eval_loops import lm_eval_table

    header, rows = lm_eval_table(lm_eval)
    limit = f", at most {lm_eval['limit']} documents per task" if lm_eval.get("limit") else ""
    shots = f", {lm_eval['num_fewshot']}-shot" if lm_eval.get("num_fewshot") is not None else ""
    lines = [
        "## lm-evaluation-harness",
        "",
        f"lm-eval {lm_eval.get('lm_eval_version', '')} at each loop count (`equilibria eval --lm_eval_tasks`{shots}"
        f"{limit}), on the tasks' own documents, which were not checked against the training data:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
        *["| " + " | ".join(row) + " |" for row in rows],
        "",
    ]
    return lines + ([f"![lm-eval at each loop count]({plot})", ""] if plot else [])


def _intro(
    model, family: Family, text: FamilyText, title: str, base_model: str | None, adapter: dict | None
) -> list[str]:
    config = model.config
    params = sum(p.numel() for p in model.parameters())
    what = with_article(text.name)
    tuned = f", fine-tuned from [{base_model}](https://huggingface.co/{base_model})" if base_model else ""
    lines = [
        f"# {title}",
        "",
        f"{what[0].upper() + what[1:]} (`model_type={config.model_type!r}`, {params:,} parameters){tuned}, built "
        "with equilibria on top of transformers.",
        "",
    ]
    if adapter:
        lines += [
            f"**A LoRA adapter, not a checkpoint.** This folder holds LoRA weights (r={adapter.get('r')}, alpha="
            f"{adapter.get('lora_alpha')}, on {', '.join(sorted(adapter.get('target_modules') or []))}) for the base "
            f"model `{adapter.get('base_model_name_or_path')}`; with `peft` installed the code below loads the base "
            "model and applies them.",
            "",
        ]
    if getattr(config, "exit_gate_trained", None) is False:
        lines += [
            "**Early exit: the exit gate was not trained with these weights** (they were trained with "
            "`exit_loss='final'`, whose loss does not reach the gate): run fixed loop counts; with `exit_threshold "
            "< 1` the exit steps are arbitrary and the answers can be wrong (the model warns).",
            "",
        ]
    return lines + [
        f"**Source.** {text.paper}.",
        "",
        f"**The loop.** `num_loops` is {family.loop_meaning}; the default saved with the model is "
        f"{getattr(config, family.loops_key)}.",
        "",
        *(text.notes(config) if text.notes else []),
    ]


def _loading_without_code(head, family, where: str, config) -> list[str]:
    """A looped LM transformers ships: it loads without the package (no remote code), at another loop count with
    the config keys that count needs (HRM-text: its cache slots too); the package gives it a loop count per call."""
    load = f'model = {head.auto_class}.from_pretrained("{where}")'
    other = ", ".join(f"{key}={value}" for key, value in family.protocol.loop_config(config, 8).items())
    return [
        "## How to load it",
        "",
        f"The architecture ships in transformers (`{head.model_class.__name__}`): no remote code is needed.",
        "",
        "```python",
        f"from transformers import {head.auto_class}",
        "",
        f"{load}  # runs the config's {family.loops_key} passes",
        f'model = {head.auto_class}.from_pretrained("{where}", {other})  # 8 passes, in the config',
        "```",
        "",
        "With the package (`pip install equilibria`), `equilibria.looped(model)` takes `num_loops` per call in "
        "`forward` and `generate` (see below).",
        "",
    ]


def _loading_registered(head, where: str) -> list[str]:
    """A family its author registered with ``register_family``, whose classes are neither transformers' nor saved
    as remote code: the folder loads in a process that has run that registration."""
    module = head.model_class.__module__
    place = "the script that defines them" if module == "__main__" else f"`{module}`"
    return [
        "## How to load it",
        "",
        f"`{head.model_class.__name__}` is its author's own class, not saved with the folder: run the code that defines "
        f"and registers it ({place}, which calls `equilibria.families.register_family`), then:",
        "",
        "```python",
        f"from transformers import {head.auto_class}",
        "",
        f'model = {head.auto_class}.from_pretrained("{where}")',
        "```",
        "",
    ]


def _loading(
    head,
    usage: tuple[str, ...],
    where: str,
    adapter: dict | None = None,
    prompt: str | None = None,
    family=None,
    config=None,
    rows: list[tuple[int, float]] | None = None,
) -> list[str]:
    """How to load the model, with and without the package, and the head's ``usage`` snippet (``{where}``: the repo
    id or folder; ``{prompt}``: an input in the format of the model's task, from its record; ``{loops}``: the loop
    count it scores best at in ``rows``, its loop scaling, else its config's)."""
    loops, note = _usage_loops(rows or [], family, config)
    usage_lines = [
        "## How to use it",
        "",
        "```python",
        *[line.format(where=where, prompt=prompt or "", loops=loops, loops_note=note) for line in usage],
        "```",
        "",
    ]
    if family is not None and not head.remote_code and not adapter:
        if not head.model_class.__module__.startswith("transformers."):
            return _loading_registered(head, where) + usage_lines
        return _loading_without_code(head, family, where, config) + usage_lines
    remote = (
        ["Without it, load the base model with `trust_remote_code=True` and apply the adapter with `peft`."]
        if adapter
        else [
            "Without it (the folder carries its own modeling code):",
            "",
            "```python",
            f"from transformers import {head.auto_class}",
            "",
            f'model = {head.auto_class}.from_pretrained("{where}", trust_remote_code=True)',
            "```",
        ]
    )
    return [
        "## How to load it",
        "",
        "With the package (`pip install equilibria`):",
        "",
        "```python",
        "import equilibria  # registers the model families with the Auto classes",
        f"from transformers import {head.auto_class}",
        "",
        f'model = {head.auto_class}.from_pretrained("{where}")',
        "```",
        "",
        *remote,
        "",
        *usage_lines,
    ]


def _usage_loops(rows: list[tuple[int, float]], family, config) -> tuple[int, str]:
    """``(count, where it comes from)`` for the usage snippet: the loop count of the highest accuracy in the loop
    scaling (the fewest loops among equals), else the config's count."""
    if rows:
        loops, accuracy = max(rows, key=lambda row: (row[1], -row[0]))
        return loops, f"{accuracy:.1%} at {loops} loops in the loop scaling below, its best"
    configured = getattr(config, family.loops_key, None) if family is not None and config is not None else None
    return (configured or 4), "the count saved in its config; measure others with equilibria eval"


def _curves(loop_scaling, rows) -> dict[str, dict[int, float]]:
    """The curves the table shows: the ``compared`` ones when the results hold them (the plot draws them all),
    else the model's own."""
    compared = loop_scaling.get("compared") if isinstance(loop_scaling, dict) else None
    if compared:
        return {name: dict(_loop_rows(curve)) for name, curve in compared.items()}
    return {"accuracy": dict(rows)}


def _loop_scaling_section(
    loop_scaling, rows, plot, dataset_label: str, task_name, metric: str, halting=None
) -> list[str]:
    if not rows:
        return []
    curves = _curves(loop_scaling, rows)
    if halting:  # one more column: the block applications the halting run spent per puzzle
        curves = {**curves, "mean NFE": halting[1]}
    loops = sorted({n for curve in curves.values() for n in curve})

    def cell(name, n):
        value = curves[name].get(n)
        return "-" if value is None else f"{value:.2f}" if name == "mean NFE" else f"{100 * value:.1f}%"

    per = (
        f" per maximum loop count, each puzzle stopping once its halting head reaches p={halting[0]} (mean NFE: "
        "applications of the weight-tied block per puzzle)"
        if halting
        else " per loop count"
    )
    lines = [
        "## Loop scaling",
        "",
        f"{METRICS[metric][1]} on {dataset_label}"
        + (f" ({task_name})" if task_name else "")
        + per
        + (" (the model-index entries are this model's curve)" if len(curves) > 1 + bool(halting) else "")
        + ":",
        "",
        "| num_loops | " + " | ".join(curves) + " |",
        "| --- |" + " --- |" * len(curves),
        *[f"| {n} | " + " | ".join(cell(name, n) for name in curves) + " |" for n in loops],
        "",
    ]
    return (
        lines
        + _written_by(loop_scaling)
        + _fingerprints(loop_scaling)
        + ([f"![loop scaling]({plot})", ""] if plot else [])
    )


def _written_by(result) -> list[str]:
    """A line naming the command that computed a loop-scaling result and its file, when the result records it."""
    by = result.get("by") if isinstance(result, dict) else None
    if by not in LOOP_SCALING_FILES:
        return []
    when = " after training, on the saved folder" if by == "equilibria eval" else " at the end of training"
    return [f"From `{LOOP_SCALING_FILES[by]}`, written by `{by}`{when}.", ""]


def _fingerprints(result) -> list[str]:
    """A line naming the weights and rows a result was computed on (their fingerprints, when it records them)."""
    if not isinstance(result, dict):
        return []
    weights, rows = result.get("weights"), (result.get("data") or {}).get("fingerprint")
    parts = [f"{what} `{value[:16]}`" for what, value in (("weights", weights), ("rows", rows)) if value]
    return [f"Computed on {' and '.join(parts)} (fingerprints, `equilibria.provenance`).", ""] if parts else []


def _audit_section(audit: dict | None) -> list[str]:
    if not audit:
        return []
    return [
        "## Computation audit",
        "",
        f"`equilibria.diagnostics.audit` verdict: **{audit['verdict']}**, on {_audit_units(audit)}. It rests on:",
        "",
        *[f"- {reason}" for reason in audit.get("reasons", [])],
        "",
        *_audit_evidence(audit),
        "",
        *_fingerprints(audit),
    ]


def _omitted_section(omitted: list[str] | None) -> list[str]:
    if not omitted:
        return []
    return ["## Results not shown", "", *[f"- {note}." for note in omitted], ""]


def training_arguments_that_matter(args) -> dict:
    """The arguments that shaped a run: the optimiser's and the family trainer's own (those plain
    ``TrainingArguments`` does not have), without the ones left unset."""
    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    own = [f.name for f in dataclasses.fields(args) if f.name not in base] if dataclasses.is_dataclass(args) else []
    own = list(getattr(args, "card_keys", None) or own)  # arguments classes with many fields name the ones to list
    keys = (*OPTIMISER_KEYS, "max_steps", *own)
    return {k: _plain(getattr(args, k)) for k in keys if getattr(args, k, None) is not None}


def _plain(value):
    return value if isinstance(value, (int, float, str, bool)) else str(value)


def _training_section(record: dict | None, history: list[dict] | None, state, args) -> list[str]:
    stages = list(history or [])
    if not stages and (state is not None or args is not None):  # a run that recorded no history
        losses = [(h.get("step", "?"), h["loss"]) for h in getattr(state, "log_history", []) if "loss" in h]
        steps = getattr(state, "global_step", None)
        arguments = training_arguments_that_matter(args) if args is not None else {}
        stages = [{"trainer": "Trainer", "steps": steps, "arguments": arguments, "losses": losses[-8:]}]
    if not stages and not record:
        return []
    lines = ["## Training", ""]
    if record:
        lines += [f"**Data.** {record.get('description') or record.get('task')}.", ""]
    for number, stage in enumerate(stages, start=1):
        lines += _stage_lines(number, len(stages), stage)
    return lines


def _stage_lines(number: int, total: int, stage: dict) -> list[str]:
    title = f"**Stage {number} of {total}**: " if total > 1 else ""
    data = f" on {stage['data']}" if stage.get("data") else ""
    lines = [f"{title}{stage.get('steps', '?')} steps with `{stage.get('trainer', 'Trainer')}`{data}.", ""]
    lora = stage.get("lora")
    if lora:
        kept = {"merged": "merged into the saved weights", "adapter": "saved as an adapter"}.get(lora.get("saved"), "")
        lines += [
            f"LoRA r={lora['r']}, alpha={lora['alpha']}, dropout {lora['dropout']} on "
            f"{', '.join(lora['target_modules'])}" + (f", {kept}" if kept else "") + ".",
            "",
        ]
    if stage.get("kept"):
        lines += [kept_sentence(stage["kept"]), ""]
    task_recipe = stage.get("task_recipe")
    if task_recipe:
        changed = ", ".join(f"`{k}={v}`" for k, v in (task_recipe.get("overrides") or {}).items())
        lines += [
            f"Settings: `equilibria train`'s recipe `{task_recipe['name']}`"
            + (f", overridden: {changed}." if changed else ", as it is.")
            + " `equilibria train ... --show_recipe` lists it.",
            "",
        ]
    reinforcement = stage.get("reinforcement")
    if reinforcement:
        rewards = ", ".join(f"`{name}`" for name in reinforcement["rewards"])
        lines += [
            f"Reinforcement learning: {reinforcement['objective']}, reward {rewards}, {reinforcement['loops']}.",
            "",
        ]
    recipe = stage.get("recipe")
    if recipe:
        preset = f"`{recipe['preset']}`" if recipe.get("preset") else "none (the trainer's defaults)"
        changed = ", ".join(f"`{k}={v}`" for k, v in (recipe.get("overrides") or {}).items())
        lines += [f"Trainer preset: {preset}" + (f", with {changed}." if changed else ", unchanged."), ""]
    arguments = stage.get("arguments") or {}
    if arguments:
        lines += ["| argument | value |", "| --- | --- |", *[f"| {k} | {v} |" for k, v in arguments.items()], ""]
    losses = stage.get("losses") or []
    if losses:
        parts = stage.get("loss_parts") or []
        if stage.get("objective") and parts:
            lines += [f"Training loss = {stage['objective']}.", ""]
        lines += [
            "| step | training loss |" + "".join(f" {p} |" for p in parts),
            "| --- | --- |" + " --- |" * len(parts),
        ]
        lines += ["| " + " | ".join(_loss_cell(v) for v in row) + " |" for row in losses]
        lines.append("")
    return lines


def kept_sentence(kept: dict) -> str:
    """Which step's weights a validated run ended with, and why (a training stage's ``kept``:
    :meth:`~equilibria.trainers.common.ValidationMixin.kept_checkpoint`)."""
    value = "" if kept.get("accuracy") is None else f" ({kept['accuracy']:.1%})"
    if kept.get("stopped_at_target"):
        why = f"the first to reach the target {kept['target']:.1%}, where training stopped"
    elif kept.get("how") == "first":  # a checkpoint copied out of a longer run
        why = f"the first checkpoint to reach {kept['target']:.1%}; the run went on, its later weights are not these"
    elif kept.get("how") == "best":
        why = f"the best of {len(kept['evaluations'])} validations, one every {kept['every']} steps"
    else:
        why = "the last step's (--load_best_model_at_end off)"
    return (
        f"The weights are those of step {kept['step']} of {kept['steps_run']}{value} on validation, "
        f"{kept['validation']}: {why}."
    )


def _loss_cell(value) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def _limitations(text: str | None) -> list[str]:
    return [
        "## Limitations",
        "",
        text
        or "A research model trained at small scale; accuracies above are on the evaluation data named here and say "
        "nothing about other tasks. More loops help only where the loop scaling above says so.",
        "",
    ]


def _citation(text: FamilyText) -> list[str]:
    if not text.citation:
        return []
    return ["## Citation", "", "```bibtex", text.citation, "```", ""]


def card_metadata_round_trips(card: ModelCard) -> bool:
    """Whether the card's YAML metadata parses back to the same ``ModelCardData`` (what the Hub will read)."""
    again = ModelCard(str(card))
    return again.data.to_dict() == card.data.to_dict()


__all__ = ["build_model_card", "card_metadata_round_trips"]
