"""What the ``equilibria`` subcommands do (the parser is in :mod:`equilibria.cli`): load a saved model of any
family, make evaluation data for its task, and run ``audit``, ``eval`` (loop scaling), ``generate`` and ``card``."""

from __future__ import annotations

import json
from pathlib import Path

from .families import FAMILIES


def load_saved_model(path: str, trust_remote_code: bool = False):
    """A saved model of any family with its task head (the head's Auto class from the family's record); a folder
    holding a LoRA adapter loads its base model with the adapter applied (transformers' peft integration)."""
    import transformers
    from transformers import AutoConfig

    from .families import family_of

    if not Path(path).is_dir():
        raise ValueError(f"{path} is not a folder written by save_pretrained")
    adapter = Path(path) / "adapter_config.json"
    if adapter.is_file() and not (Path(path) / "config.json").is_file():  # a LoRA adapter: the base's config
        base = json.loads(adapter.read_text()).get("base_model_name_or_path")
        config = AutoConfig.from_pretrained(base, trust_remote_code=trust_remote_code)
    else:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    try:
        auto = getattr(transformers, family_of(config).heads[0].auto_class)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return auto.from_pretrained(path, trust_remote_code=trust_remote_code).eval()


def data_options(args) -> dict:
    """The keyword arguments of :func:`~equilibria.evaluation.evaluation_data` that ``eval`` / ``audit`` flags set."""
    return dict(
        task=args.task,
        dataset_name=args.dataset_name,
        dataset_config=args.dataset_config,
        split=args.split,
        text_field=args.dataset_text_field,
        metric=args.eval_metric,
        max_length=args.max_length,
        num_examples=args.num_examples,
        seed=args.seed,
    )


def _tokenizer(model_path: str):
    from .tasks.tokenization import load_tokenizer

    return load_tokenizer(model_path, "prompts")


def run_audit(args) -> None:
    """``equilibria audit``: load the model, build or load the data, audit, print (and save)."""
    from .diagnostics import audit
    from .evaluation import evaluation_data
    from .provenance import weights_fingerprint

    model = load_saved_model(args.model_path, args.trust_remote_code)
    data = evaluation_data(model, args.model_path, **data_options(args), default_count=500)
    rows = data.rows
    if model.can_generate() and "input_ids" not in rows.column_names:  # prompt / answer rows
        from .tasks import tokenize_for_training

        rows = tokenize_for_training(rows, _tokenizer(args.model_path))
    report = audit(model, rows, num_loops=args.num_loops, batch_size=args.batch_size, seed=args.seed)
    report.data = {**data.record, "units": report.num_units}
    report.weights = weights_fingerprint(args.model_path)
    print(report)
    if args.output_dir:
        out = report.save(args.output_dir)
        print(f"wrote {out / 'audit.json'}" + (f" and {out / 'audit.png'}" if (out / "audit.png").exists() else ""))


def loop_scaling(
    model, data, loops: list[int], model_path: str | None = None, batch_size: int = 64, metric: str = "task"
) -> dict[int, float]:
    """Accuracy at each loop count: exact match of greedy answers (language models), exact solves at that depth
    (EqR), classification accuracy with that solver cap (PH-DEQ); ``metric="token_accuracy"``: next-token accuracy
    on the labelled tokens of tokenised rows (:func:`~equilibria.tasks.text_data.token_accuracy`)."""
    import torch

    if metric == "token_accuracy":
        from .tasks.text_data import token_accuracy

        tokenizer = _tokenizer(model_path)
        return {n: token_accuracy(model, data, n, tokenizer, batch_size=batch_size) for n in loops}
    if model.can_generate():  # a language model: exact match of greedy answers
        from .tasks import evaluate_loop_scaling

        return evaluate_loop_scaling(model, _tokenizer(model_path), data, loops=loops, batch_size=batch_size)
    if hasattr(model, "solve"):  # a puzzle solver: the whole board must be right
        return solver_scaling(model, data, loops, batch_size)[0]
    rows = data.with_format("torch")
    result = {}
    for n in loops:
        right = 0
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            with torch.no_grad():
                logits = model(batch["inputs"].float(), num_loops=n).logits
            right += int((logits.argmax(-1) == batch["labels"]).sum())
        result[n] = right / len(rows)
    return result


def solver_scaling(
    model,
    data,
    loops: list[int],
    batch_size: int = 64,
    halt_threshold: float | None = None,
    breadth: int = 1,
    select: str = "residual",
) -> tuple[dict[int, float], dict[int, float]]:
    """A puzzle solver (EqR) at each depth of ``loops``: the share of puzzles solved exactly (every labelled cell
    right) and the mean function evaluations per puzzle (applications of the weight-tied block, over all its
    restarts). ``breadth`` restarts per puzzle, one answer picked by ``select`` (``"residual"``, ``"vote"``,
    ``"halt"``). With ``halt_threshold`` each restart stops once its halting head reaches that probability, so
    ``loops`` are the maximum depths and the evaluations can be fewer (see :meth:`EqRForPuzzleSolving.solve`)."""
    import torch

    rows = data.with_format("torch")
    accuracy, nfe = {}, {}
    for n in loops:
        right = evaluations = 0
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            generator = torch.Generator().manual_seed(0)
            with torch.no_grad():
                out = model.solve(
                    batch["inputs"],
                    depth=n,
                    breadth=breadth,
                    select=select,
                    generator=generator,
                    halt_threshold=halt_threshold,
                )
            right += int(((out.answers == batch["labels"]) | (batch["labels"] == -100)).all(1).sum())
            evaluations += int(out.nfe.sum())
        accuracy[n], nfe[n] = right / len(rows), evaluations / len(rows)
    return accuracy, nfe


def plot_loop_scaling(curves: dict[str, dict[int, float]], path: Path, title: str, mark: int | None = None) -> bool:
    """Accuracy (%) against ``num_loops`` (log scale), one line per curve, a dotted line at ``mark`` (e.g. the
    trained loop count). Returns False (no file) when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for (label, result), marker in zip(curves.items(), "osx^v"):
        ax.plot(list(result), [100 * v for v in result.values()], marker=marker, label=label)
    if mark is not None:
        ax.axvline(mark, color="gray", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("num_loops")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(curves) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def report_loop_scaling(
    result: dict[int, float],
    model_type: str,
    output_dir: str | Path | None,
    data: dict | None = None,
    halting: tuple[float, dict[int, float]] | None = None,
    weights: str | None = None,
) -> bool:
    """Print the loop-scaling table; with ``output_dir`` also write ``loop_scaling.json`` (``{"weights": the
    fingerprint of the weights evaluated, "data": what it was computed on, "accuracy": {loops: accuracy}}``) and
    ``.png`` there, saying so when that replaces a result of other data or weights. ``halting``: (threshold, {max
    depth: mean evaluations per puzzle}) of an adaptive-computation run, printed as a column and saved as
    ``halt_threshold`` and ``mean_nfe``. Returns whether the plot was written."""
    from .provenance import replacement_note

    if data:
        print(f"  on {data['name']}: {data['note']}")
    if halting:
        print(f"  halting at probability {halting[0]}: num_loops is the maximum depth")
    print("  num_loops | accuracy" + (" | mean NFE" if halting else ""))
    for n, acc in result.items():
        print(f"  {n:>9} | {100 * acc:6.1f}%" + (f" | {halting[1][n]:8.2f}" if halting else ""))
    if not output_dir:
        return False
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"weights": weights, "data": data, "accuracy": {str(k): v for k, v in result.items()}}
    if halting:
        payload.update(halt_threshold=halting[0], mean_nfe={str(k): v for k, v in halting[1].items()})
    note = replacement_note(out / "loop_scaling.json", payload)
    if note:
        print(note)
    (out / "loop_scaling.json").write_text(json.dumps(payload, indent=2) + "\n")
    plotted = plot_loop_scaling({model_type: result}, out / "loop_scaling.png", f"{model_type}: accuracy vs loops")
    print(f"wrote {out / 'loop_scaling.json'}" + (f" and {out / 'loop_scaling.png'}" if plotted else " (no plot)"))
    return plotted


def run_eval(args) -> dict:
    """``equilibria eval``: the loop-scaling curve of a saved model on its task, as a table (and JSON + PNG); with
    ``--lm-eval-tasks``, lm-evaluation-harness tasks at each loop count instead (:mod:`equilibria.harness`)."""
    from .evaluation import evaluation_data
    from .families import family_of
    from .provenance import weights_fingerprint

    model = load_saved_model(args.model_path, args.trust_remote_code)
    loops = parse_loops(args.loops, "--loops", family_of(model).min_loops)
    threshold, breadth = getattr(args, "halt_threshold", None), getattr(args, "breadth", 1)
    if (threshold is not None or breadth != 1) and not hasattr(model, "solve"):
        raise ValueError(
            f"--halt-threshold and --breadth need an EqR model (a puzzle solver); this is a {model.config.model_type}"
        )
    if getattr(args, "lm_eval_tasks", None):
        return _run_lm_eval(model, loops, args)
    data = evaluation_data(model, args.model_path, **data_options(args), digits=args.digits)
    halting = None
    if hasattr(model, "solve"):
        result, nfe = solver_scaling(model, data.rows, loops, args.batch_size, threshold, breadth, args.select)
        halting = (threshold, nfe) if threshold is not None else None
        if breadth > 1:
            data.record.update(breadth=breadth, select=args.select)
    else:
        result = loop_scaling(model, data.rows, loops, args.model_path, args.batch_size, metric=data.metric)
    print(f"loop scaling of {args.model_path} ({model.config.model_type}) on {len(data.rows)} examples")
    weights = weights_fingerprint(args.model_path)
    report_loop_scaling(result, model.config.model_type, args.output_dir, data.record, halting, weights=weights)
    return result


def _run_lm_eval(model, loops: list[int], args) -> dict:
    from .harness import lm_eval_at_loops, report_lm_eval
    from .provenance import weights_fingerprint

    tasks = [task.strip() for task in args.lm_eval_tasks.split(",") if task.strip()]
    limit = args.lm_eval_limit
    if limit is not None and limit >= 1:
        limit = int(limit)
    result = lm_eval_at_loops(
        model,
        _tokenizer(args.model_path),
        tasks,
        loops,
        include_path=args.lm_eval_include,
        limit=limit,
        num_fewshot=args.lm_eval_fewshot,
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
    report_lm_eval(result, model.config.model_type, args.output_dir)
    return result


def parse_loops(text: str, flag: str = "--loops", minimum: int = 0) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; ``ValueError`` naming ``flag`` unless every entry is an integer >= ``minimum``
    (a model's :attr:`~equilibria.families.Family.min_loops`)."""
    try:
        loops = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers such as 1,2,4,8, got {text!r}") from None
    if not loops or any(n < minimum for n in loops):
        raise ValueError(f"{flag} must be comma-separated integers >= {minimum}, got {text!r}")
    return loops


def encode_prompt(tokenizer, prompt: str, max_new_tokens: int, max_positions: int):
    """``tokenizer(prompt)`` as tensors, or ``ValueError`` for a prompt with no tokens, with characters the
    tokenizer does not know (they would silently become its unknown token), or too long for the model."""
    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    from .tasks.tokenization import describe_characters, unknown_characters

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
        raise ValueError(
            f"--prompt has {ids.shape[1]} tokens and --max-new-tokens is {max_new_tokens}: together more than the "
            f"{max_positions} positions the model handles (max_position_embeddings); shorten one of them"
        )
    return {"input_ids": ids, **enc}


def run_generate(args) -> str:
    """``equilibria generate``: greedy (or sampled) text from a saved looped LM at ``--num-loops``."""
    import torch
    from transformers import TextStreamer

    model = load_saved_model(args.model_path, args.trust_remote_code)
    if not model.can_generate():
        lms = [f.model_type for f in FAMILIES.values() if f.heads[0].auto_class == "AutoModelForCausalLM"]
        raise ValueError(f"generate needs a language model ({', '.join(lms)}), got {model.config.model_type}")
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
        if model.config.model_type != "ouro":
            raise ValueError(f"--exit-threshold applies to Ouro models (an exit gate), not {model.config.model_type}")
        if not 0 < args.exit_threshold <= 1:
            raise ValueError(f"--exit-threshold must be in (0, 1] (1: no early exit), got {args.exit_threshold}")
        kwargs["exit_threshold"] = args.exit_threshold
    streamer = TextStreamer(tokenizer, skip_prompt=False, skip_special_tokens=True) if args.stream else None
    with torch.no_grad():
        out = model.generate(**enc, streamer=streamer, **kwargs)
    text = tokenizer.decode(out[0], skip_special_tokens=True)
    if not args.stream:
        print(text)
    return text


def run_card(args) -> Path:
    """``equilibria card``: write the model card (README.md) into a saved model's folder from what is there:
    ``loop_scaling.json`` / ``loop_scaling.png`` (from ``equilibria eval --output-dir``), ``audit.json`` (from
    ``equilibria audit --output-dir``), ``training_data.json`` and ``training_history.json``, or the files given
    (refused when missing or computed on other weights); what the card there said and no flag changes (title, task
    name, datasets, base model, license) is kept."""
    from .hub_cards.card import evaluation_record
    from .hub_cards.publish import write_model_card
    from .provenance import folder_results

    folder = Path(args.model_path)
    model = load_saved_model(args.model_path, args.trust_remote_code)
    given = {
        key: _given_result(path, flag, folder)
        for key, path, flag in (("loop_scaling", args.loop_scaling, "--loop-scaling"), ("audit", args.audit, "--audit"))
        if path is not None
    }
    current, other = folder_results(folder)
    scaling = given.get("loop_scaling") or current.get("loop_scaling.json")
    audit_data = given.get("audit") or current.get("audit.json")
    if args.dataset and (scaling or audit_data) and evaluation_record(scaling, audit_data) is None:
        raise ValueError(
            f"--dataset {' '.join(args.dataset)}: the loop-scaling / audit results here do not record which data they "
            "were computed on; rerun `equilibria eval` / `equilibria audit` with --output-dir, then name the dataset "
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
    found = [name for name, ok in (("loop scaling", scaling), ("audit", audit_data)) if ok]
    print(f"wrote {path}" + (f" (with {', '.join(found)})" if found else ""))
    return path


def _given_result(path: str, flag: str, folder: Path) -> dict:
    """The result file ``flag`` names, checked: it exists and was computed on the weights in ``folder``."""
    from .provenance import describe_weights, read_result, weights_fingerprint

    result = read_result(path)
    if result is None:
        raise ValueError(f"{flag} {path}: no such file")
    if describe_weights(result, weights_fingerprint(folder)) == "other":
        raise ValueError(f"{flag} {path}: computed on other weights than the ones in {folder}; evaluate this model")
    return result
