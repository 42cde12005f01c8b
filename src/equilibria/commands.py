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


def evaluation_data(model, args, digits: int = 2):
    """``(rows, record)``: what ``equilibria eval`` / ``audit`` evaluate ``model`` on, and a record of it for the
    results (``name``, ``dataset``: the ``--dataset`` given or ``None`` for generated rows, ``held_out``,
    ``note``). Generated rows are fresh rows of ``--task`` (default: the one the model was trained on) that
    exclude every question of the folder's ``training_data.json``; rows of a ``--dataset`` that repeat a
    training question are dropped."""
    from .families import family_of, model_task
    from .tasks import TRAINING_RECORD, eval_split, fingerprints, load_training_record

    if args.num_examples < 1:
        raise ValueError(f"--num-examples must be >= 1, got {args.num_examples}")
    if args.dataset is not None and args.task is not None:
        raise ValueError("pass either --task or --dataset, not both")
    training = load_training_record(args.model_path)
    task = args.task or model_task(model)
    exclude = set(training["fingerprints"]) if training and training["task"] == task else set()
    if args.dataset is None:
        family_of(model).head_for(task)  # the task must fit the family
        rows = eval_split(model.config, task, args.num_examples, args.seed, digits=digits, exclude=exclude)
        record = {"name": f"{len(rows)} generated {task} problems (seed {args.seed})", "dataset": None}
    else:
        rows = _load_dataset(args.dataset, args.split)
        record = {"name": f"{args.dataset} ({args.split} split)", "dataset": args.dataset}
        if exclude:
            try:
                keep = [i for i, key in enumerate(fingerprints(task, rows)) if key not in exclude]
            except KeyError:  # the rows lack the task's question columns: cannot compare
                exclude = set()
            else:
                record["dropped_training_rows"] = len(rows) - len(keep)
                rows = rows.select(keep)
    record["held_out"] = bool(exclude)
    record["note"] = (
        f"no question of the model's training data ({training['description']}; {len(exclude)} questions, from "
        f"{TRAINING_RECORD}) is among them"
        if exclude
        else f"not checked against the training data (the folder has no usable {TRAINING_RECORD})"
    )
    return rows, record


def _tokenizer(model_path: str):
    from .tasks.tokenization import load_tokenizer

    return load_tokenizer(model_path, "prompts")


def run_audit(args) -> None:
    """``equilibria audit``: load the model, build or load the data, audit, print (and save)."""
    from .diagnostics import audit

    model = load_saved_model(args.model_path, args.trust_remote_code)
    data, record = evaluation_data(model, args)
    if args.dataset is None and model.can_generate():
        from .tasks import tokenize_for_training

        data = tokenize_for_training(data, _tokenizer(args.model_path))
    report = audit(
        model, data, num_loops=args.num_loops, batch_size=args.batch_size, max_units=args.num_examples, seed=args.seed
    )
    report.data = {**record, "units": report.num_units}
    print(report)
    if args.output_dir:
        out = report.save(args.output_dir)
        print(f"wrote {out / 'audit.json'}" + (f" and {out / 'audit.png'}" if (out / "audit.png").exists() else ""))


def _load_dataset(path: str, split: str):
    from datasets import DatasetDict, load_from_disk

    data = load_from_disk(path)
    if isinstance(data, DatasetDict):
        if split not in data:
            raise ValueError(f"--split {split!r} is not in {path} (splits: {sorted(data)})")
        data = data[split]
    return data


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
    model, data, loops: list[int], batch_size: int = 64, halt_threshold: float | None = None
) -> tuple[dict[int, float], dict[int, float]]:
    """A puzzle solver (EqR) at each depth of ``loops``: the share of puzzles solved exactly (every labelled cell
    right) and the mean function evaluations per puzzle (applications of the weight-tied block). With
    ``halt_threshold`` each puzzle stops once its halting head reaches that probability, so ``loops`` are the
    maximum depths and the evaluations can be fewer (see :meth:`EqRForPuzzleSolving.solve`)."""
    import torch

    rows = data.with_format("torch")
    accuracy, nfe = {}, {}
    for n in loops:
        right = evaluations = 0
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            generator = torch.Generator().manual_seed(0)
            with torch.no_grad():
                out = model.solve(batch["inputs"], depth=n, generator=generator, halt_threshold=halt_threshold)
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
) -> bool:
    """Print the loop-scaling table; with ``output_dir`` also write ``loop_scaling.json`` (``{"data": what it was
    computed on, "accuracy": {loops: accuracy}}``) and ``.png`` there. ``halting``: (threshold, {max depth: mean
    evaluations per puzzle}) of an adaptive-computation run, printed as a column and saved as ``halt_threshold``
    and ``mean_nfe``. Returns whether the plot was written."""
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
    payload = {"data": data, "accuracy": {str(k): v for k, v in result.items()}}
    if halting:
        payload.update(halt_threshold=halting[0], mean_nfe={str(k): v for k, v in halting[1].items()})
    (out / "loop_scaling.json").write_text(json.dumps(payload, indent=2) + "\n")
    plotted = plot_loop_scaling({model_type: result}, out / "loop_scaling.png", f"{model_type}: accuracy vs loops")
    print(f"wrote {out / 'loop_scaling.json'}" + (f" and {out / 'loop_scaling.png'}" if plotted else " (no plot)"))
    return plotted


def run_eval(args) -> dict:
    """``equilibria eval``: the loop-scaling curve of a saved model on its task, as a table (and JSON + PNG); with
    ``--lm-eval-tasks``, lm-evaluation-harness tasks at each loop count instead (:mod:`equilibria.harness`)."""
    loops = parse_loops(args.loops)
    model = load_saved_model(args.model_path, args.trust_remote_code)
    threshold = getattr(args, "halt_threshold", None)
    if threshold is not None and not hasattr(model, "solve"):
        raise ValueError(f"--halt-threshold needs an EqR model (a halting head); this is a {model.config.model_type}")
    if getattr(args, "lm_eval_tasks", None):
        return _run_lm_eval(model, loops, args)
    data, record = evaluation_data(model, args, digits=args.digits)
    data = data.select(range(min(args.num_examples, len(data))))
    halting = None
    if threshold is None:
        result = loop_scaling(model, data, loops, args.model_path, args.batch_size)
    else:
        result, nfe = solver_scaling(model, data, loops, args.batch_size, threshold)
        halting = (threshold, nfe)
    print(f"loop scaling of {args.model_path} ({model.config.model_type}) on {len(data)} examples")
    report_loop_scaling(result, model.config.model_type, args.output_dir, {**record, "units": len(data)}, halting)
    return result


def _run_lm_eval(model, loops: list[int], args) -> dict:
    from .harness import lm_eval_at_loops, report_lm_eval

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
    report_lm_eval(result, model.config.model_type, args.output_dir)
    return result


def parse_loops(text: str) -> list[int]:
    try:
        loops = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--loops must be comma-separated integers such as 1,2,4,8, got {text!r}") from None
    if not loops or any(n < 0 for n in loops):
        raise ValueError(f"--loops must be comma-separated integers >= 0, got {text!r}")
    return loops


def encode_prompt(tokenizer, prompt: str, max_new_tokens: int, max_positions: int):
    """``tokenizer(prompt)`` as tensors, or ``ValueError`` for a prompt with no tokens, with characters the
    tokenizer does not know (they would silently become its unknown token), or too long for the model."""
    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    from .tasks.tokenization import unknown_characters

    enc = tokenizer(prompt, return_tensors="pt", return_offsets_mapping=True)
    ids, offsets = enc.pop("input_ids"), enc.pop("offset_mapping")
    if not prompt or ids.shape[1] == 0:
        raise ValueError(f"--prompt {prompt!r} has no tokens: give the text to continue")
    unknown = unknown_characters(tokenizer, prompt, ids[0].tolist(), offsets[0].tolist())
    if unknown:
        known = "".join(sorted(t for t in tokenizer.get_vocab() if len(t) == 1))
        raise ValueError(
            f"--prompt contains {unknown}, which the tokenizer does not know"
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
    if args.temperature > 0:
        kwargs["temperature"] = args.temperature
    if args.num_loops is not None:
        kwargs["num_loops"] = args.num_loops
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
    ``equilibria audit --output-dir``), ``training_data.json`` and ``training_history.json``, or the files given."""
    from .hub_cards.card import evaluation_record
    from .hub_cards.publish import write_model_card

    folder = Path(args.model_path)
    model = load_saved_model(args.model_path, args.trust_remote_code)
    scaling_file = Path(args.loop_scaling) if args.loop_scaling else folder / "loop_scaling.json"
    audit_file = Path(args.audit) if args.audit else folder / "audit.json"
    scaling = json.loads(scaling_file.read_text()) if scaling_file.is_file() else None
    audit_data = json.loads(audit_file.read_text()) if audit_file.is_file() else None
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
        loop_scaling=scaling,
        audit=audit_data,
    )
    found = [name for name, ok in (("loop scaling", scaling), ("audit", audit_data)) if ok]
    print(f"wrote {path}" + (f" (with {', '.join(found)})" if found else ""))
    return path
