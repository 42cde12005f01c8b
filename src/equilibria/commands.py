"""What the ``equilibria`` subcommands do (the parser is in :mod:`equilibria.cli`): load a saved model of any
family, make evaluation data for its task, and run ``audit``, ``eval`` (loop scaling), ``generate`` and ``card``.
Each runner takes its command's argument dataclasses (:mod:`equilibria.command_arguments`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from transformers import TextStreamer
from transformers.generation import BaseStreamer

from .command_arguments import (
    AuditArguments,
    CardArguments,
    DiagnoseArguments,
    EvalArguments,
    EvaluationDataArguments,
    GenerateArguments,
    LmEvalArguments,
    SearchArguments,
)
from .diagnostics import audit, loop_trajectory
from .evaluation import evaluation_data
from .families import FAMILIES, family_record, model_task
from .hub_cards.card import evaluation_record
from .hub_cards.publish import write_model_card
from .lm_eval_loops import lm_eval_at_loops, lm_eval_table, save_lm_eval
from .loading import load_saved_model
from .modeling.looped_lm import FAR_BEYOND
from .provenance import (
    LOOP_SCALING_FILES,
    describe_weights,
    folder_results,
    read_result,
    shown_loop_scaling,
    weights_fingerprint,
)
from .scaling import (
    Scoring,
    loop_scaling_report,
    loop_scores,
    metric_label,
    parse_loops,
    plot_labels,
    trained_loops,
)
from .tasks import tokenize_for_training
from .tasks.tokenization import describe_characters, load_tokenizer, unknown_characters
from .wording import with_article


def _tokenizer(model_path: str):
    return load_tokenizer(model_path, "prompts")


def _model_rows(args, data_args: EvaluationDataArguments, default_count: int):
    """The saved model and its evaluation data (:func:`~equilibria.evaluation.evaluation_data`), with a language
    model's prompt / answer rows tokenized as in training."""
    model = load_saved_model(args.model_path, args.trust_remote_code)
    data = evaluation_data(
        model, args.model_path, **data_args.evaluation_options(args.seed), default_count=default_count
    )
    rows = data.rows
    language_model = family_record(model).head_of_model(model).reads_text
    if language_model and "input_ids" not in rows.column_names:  # prompt / answer rows
        rows = tokenize_for_training(rows, _tokenizer(args.model_path))
    return model, data, rows


def run_audit(args: AuditArguments, data_args: EvaluationDataArguments) -> None:
    """``equilibria audit``: load the model, build or load the data, audit, print (and save)."""
    model, data, rows = _model_rows(args, data_args, default_count=500)
    report = audit(model, rows, num_loops=args.num_loops, batch_size=args.batch_size, seed=args.seed)
    report.data = {**data.record, "units": report.num_units}
    report.weights = weights_fingerprint(args.model_path)
    print(report)
    if args.output_dir:
        out = report.save(args.output_dir)
        print(f"wrote {out / 'audit.json'}" + (f" and {out / 'audit.png'}" if (out / "audit.png").exists() else ""))


def run_diagnose(args: DiagnoseArguments, data_args: EvaluationDataArguments):
    """``equilibria diagnose``: the loop's trajectory on the model's data, printed (and saved)."""
    loops = parse_loops(args.loops, "--loops", 1)
    model, data, rows = _model_rows(args, data_args, default_count=64)
    trajectory = loop_trajectory(
        model, rows, loops, num_examples=None, batch_size=args.batch_size, power_iters=args.power_iters, seed=args.seed
    )
    trajectory.data = {**data.record, "units": trajectory.units}
    trajectory.model["weights"] = weights_fingerprint(args.model_path)
    print(trajectory)
    if args.output_dir:
        out = trajectory.save(args.output_dir)
        print(
            f"wrote {out / 'trajectory.json'}"
            + (f" and {out / 'trajectory.png'}" if (out / "trajectory.png").exists() else "")
        )
    return trajectory


def run_eval(
    args: EvalArguments, data_args: EvaluationDataArguments, search: SearchArguments, lm_eval: LmEvalArguments
) -> dict:
    """``equilibria eval``: the loop-scaling curve of a saved model on its task, as a table (and JSON + PNG); with
    ``--lm_eval_tasks``, lm-evaluation-harness tasks at each loop count instead (:mod:`equilibria.lm_eval_loops`)."""
    model = load_saved_model(args.model_path, args.trust_remote_code)
    loops = parse_loops(args.loops, "--loops", family_record(model).min_loops)
    threshold, breadth = search.halt_threshold, search.breadth
    scoring = Scoring(args.model_path, args.batch_size, "task", threshold, breadth, search.select)
    if scoring.searches and not family_record(model).head_of_model(model).searches:
        raise ValueError(
            f"--halt_threshold and --breadth need an EqR model (a puzzle solver); this is {with_article(model.config.model_type)}"
        )
    if lm_eval.lm_eval_tasks:
        return _run_lm_eval(model, loops, args, lm_eval)
    data = evaluation_data(model, args.model_path, **data_args.evaluation_options(args.seed))
    scores = loop_scores(model, data.rows, loops, dataclasses.replace(scoring, metric=data.metric))
    result = scores.accuracy
    halting = (threshold, scores.mean_steps) if threshold is not None else None
    if breadth > 1:
        data.record.update(breadth=breadth, select=scoring.select)
    scored = metric_label(data.metric, data_args.task or model_task(model))
    print(f"loop scaling of {args.model_path} ({model.config.model_type}) on {len(data.rows)} examples, {scored}")
    stages = read_result(Path(args.model_path) / "training_history.json") if Path(args.model_path).is_dir() else None
    trained = trained_loops(stages[-1].get("arguments")) if isinstance(stages, list) and stages else None
    plot = plot_labels(model, scored, trained)
    saved = dict(weights=weights_fingerprint(args.model_path), plot=plot, by="equilibria eval")
    print(
        "\n".join(loop_scaling_report(result, model.config.model_type, args.output_dir, data.record, halting, **saved))
    )
    if args.output_dir:
        print(_card_after_eval(model, args.model_path, args.output_dir))
    return result


def _card_after_eval(model, model_path: str, output_dir: str) -> str:
    """After ``equilibria eval --output_dir``: the model's card rewritten with the new results when they were
    written into its own folder, else what to run to show them."""
    folder, out = Path(model_path), Path(output_dir)
    if folder.is_dir() and out.resolve() == folder.resolve():
        path = write_model_card(model, folder, keep_previous=True)
        return f"updated the model card {path} with these results"
    written = out / LOOP_SCALING_FILES["equilibria eval"]
    return f"the model card of {model_path} is unchanged: `equilibria card {model_path} --loop_scaling {written}` shows these"


def _run_lm_eval(model, loops: list[int], args: EvalArguments, lm_eval: LmEvalArguments) -> dict:
    tasks = [task.strip() for task in lm_eval.lm_eval_tasks.split(",") if task.strip()]
    limit = lm_eval.lm_eval_limit
    if limit is not None and limit >= 1:
        limit = int(limit)
    result = lm_eval_at_loops(
        model,
        _tokenizer(args.model_path),
        tasks,
        loops,
        include_path=lm_eval.lm_eval_include,
        limit=limit,
        num_fewshot=lm_eval.lm_eval_fewshot,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    print(f"lm-eval {', '.join(tasks)} on {args.model_path} ({model.config.model_type}) at loops {loops}")
    result["weights"] = weights_fingerprint(args.model_path)
    result["data"] = {
        "name": f"lm-eval tasks {', '.join(tasks)}",
        "dataset": None,
        "held_out": False,
        "note": "the tasks' own documents, not checked against the training data",
    }
    header, rows = lm_eval_table(result, plus="+/-")
    for n, *cells in [header, *rows]:
        print(f"  {n:>9} | " + " | ".join(cells))
    if args.output_dir:
        for line in save_lm_eval(result, model.config.model_type, args.output_dir):
            print(line)
    return result


def encode_prompt(tokenizer, prompt: str, max_new_tokens: int, max_positions: int):
    """``tokenizer(prompt)`` as tensors, or ``ValueError`` for a prompt with no tokens, with characters the
    tokenizer does not know (they would silently become its unknown token), or too long for the model."""
    if max_new_tokens < 1:
        raise ValueError(f"--max_new_tokens must be >= 1, got {max_new_tokens}")
    enc = tokenizer(prompt, return_tensors="pt", return_offsets_mapping=True)
    ids, offsets = enc.pop("input_ids"), enc.pop("offset_mapping")
    if not prompt or ids.shape[1] == 0:
        raise ValueError(f"--prompt {prompt!r} has no tokens: give the text to continue")
    unknown = unknown_characters(tokenizer, prompt, ids[0].tolist(), offsets[0].tolist())
    if unknown:
        known = "".join(sorted(t for t in tokenizer.get_vocab() if len(t) == 1))
        raise ValueError(
            f"--prompt contains {describe_characters(unknown)}, which the tokenizer does not know"
            + (f" (it knows {known!r})" if known else "")
        )
    if ids.shape[1] + max_new_tokens > max_positions:
        import warnings

        warnings.warn(
            f"--prompt has {ids.shape[1]} tokens and --max_new_tokens is {max_new_tokens}: together more than the "
            f"{max_positions} positions the model was configured for (max_position_embeddings); rotary positions "
            "continue past them, but it was not trained there",
            stacklevel=2,
        )
    return {"input_ids": ids, **enc}


def run_generate(args: GenerateArguments) -> str:
    """``equilibria generate``: greedy (or sampled) text from a saved looped LM at ``--num_loops``."""
    model = load_saved_model(args.model_path, args.trust_remote_code)
    if not model.can_generate():
        lms = [f.model_type for f in FAMILIES.values() if f.heads[0].reads_text]
        raise ValueError(
            f"generate needs a language model (the causal-LM head of {', '.join(lms)}), got "
            f"{type(model).__name__} ({model.config.model_type})"
        )
    tokenizer = _tokenizer(args.model_path)
    enc = encode_prompt(tokenizer, args.prompt, args.max_new_tokens, model.config.max_position_embeddings)
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0)
    if not args.temperature >= 0:
        raise ValueError(f"--temperature must be >= 0 (0: greedy), got {args.temperature}")
    if args.temperature > 0:
        kwargs["temperature"] = args.temperature
    if args.num_loops is not None:
        kwargs["num_loops"] = args.num_loops
    if args.exit_threshold is not None:
        family_record(model).require("early_exit", "--exit_threshold")
        if not 0 < args.exit_threshold <= 1:
            raise ValueError(f"--exit_threshold must be in (0, 1] (1: no early exit), got {args.exit_threshold}")
        kwargs["exit_threshold"] = args.exit_threshold
    streamer = TextStreamer(tokenizer, skip_prompt=False, skip_special_tokens=True) if args.stream else None
    configured = getattr(model.config, family_record(model).loops_key)
    if streamer is None and args.num_loops is not None and args.num_loops > FAR_BEYOND * configured:
        streamer = TokenProgress(args.max_new_tokens, f"generating at {args.num_loops} loops")  # minutes: say so
    with torch.no_grad():
        out = model.generate(**enc, streamer=streamer, **kwargs)
    if isinstance(streamer, TokenProgress):
        streamer.end()
    text = tokenizer.decode(out[0], skip_special_tokens=True)
    if not args.stream:
        print(text)
    return text


class TokenProgress(BaseStreamer):
    """A progress bar (on stderr) over the tokens ``generate`` produces, for a generation far beyond the model's
    loop count, which can run for minutes: each new token moves it, with its rate and time left."""

    def __init__(self, total: int, what: str):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=what, unit="token")
        self.prompt_seen = False

    def put(self, value) -> None:
        if not self.prompt_seen:  # generate's first put is the prompt
            self.prompt_seen = True
            return
        self.bar.update(1)

    def end(self) -> None:
        self.bar.close()


def run_card(args: CardArguments) -> Path:
    """``equilibria card``: write the model card (README.md) into a saved model's folder from what is there:
    ``eval_loop_scaling.json`` / ``.png`` (from ``equilibria eval --output_dir``; else train's ``loop_scaling.json``
    / ``.png``), ``audit.json`` (from ``equilibria audit --output_dir``), ``training_data.json`` and
    ``training_history.json``, or the files given (refused when missing or computed on other weights); what the card
    there said and no flag changes (title, task name, datasets, base model, license) is kept."""
    folder = Path(args.model_path)
    model = load_saved_model(args.model_path, args.trust_remote_code)
    given = {
        key: _given_result(path, flag, folder)
        for key, path, flag in (("loop_scaling", args.loop_scaling, "--loop_scaling"), ("audit", args.audit, "--audit"))
        if path is not None
    }
    current, other = folder_results(folder)
    scaling = given.get("loop_scaling") or current.get(shown_loop_scaling(current))
    audit_data = given.get("audit") or current.get("audit.json")
    if args.dataset and (scaling or audit_data) and evaluation_record(scaling, audit_data) is None:
        raise ValueError(
            f"--dataset {' '.join(args.dataset)}: the loop-scaling / audit results here do not record which data they "
            "were computed on; rerun `equilibria eval` / `equilibria audit` with --output_dir, then name the dataset "
            "they used"
        )
    path = write_model_card(
        model,
        folder,
        repo_id=args.repo_id,
        license=args.license,
        base_model=args.base_model,
        datasets=args.dataset or None,
        task_name=args.task_name,
        keep_previous=True,
        **given,
    )
    for name in other:
        print(f"left out {name}: computed on other weights than the ones in {folder}")
    shown = (("loop scaling", scaling), ("audit", audit_data), ("lm-eval", current.get("lm_eval.json")))
    found = [name for name, ok in shown if ok]
    print(f"wrote {path}" + (f" (with {', '.join(found)})" if found else ""))
    return path


def _given_result(path: str, flag: str, folder: Path) -> dict:
    """The result file ``flag`` names, checked: it exists and was computed on the weights in ``folder``."""
    result = read_result(path)
    if result is None:
        raise ValueError(f"{flag} {path}: no such file")
    if describe_weights(result, weights_fingerprint(folder)) == "other":
        raise ValueError(f"{flag} {path}: computed on other weights than the ones in {folder}; evaluate this model")
    return result
