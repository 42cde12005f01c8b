"""What the ``equilibria`` subcommands do (the parser is in :mod:`equilibria.cli`): load a saved model of any
family, make evaluation data for its task, and run ``audit``, ``eval`` (loop scaling), ``generate`` and ``card``."""

from __future__ import annotations

import json
import math
from pathlib import Path

TASKS = ("reachability", "entailment", "sudoku", "maze", "addition")
TASK_FAMILIES = {
    "reachability": ("phdeq",),
    "entailment": ("phdeq",),
    "sudoku": ("eqr",),
    "maze": ("eqr",),
    "addition": ("ouro", "attractor_lm"),
}


def load_saved_model(path: str, trust_remote_code: bool = False):
    """A saved model of any family with its task head (``AutoModelFor...`` chosen by the config's model type)."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    import equilibria  # noqa: F401  (registers the families)

    if not Path(path).is_dir():
        raise ValueError(f"{path} is not a folder written by save_pretrained")
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    auto = {
        "phdeq": AutoModelForSequenceClassification,
        "eqr": AutoModelForTokenClassification,
        "ouro": AutoModelForCausalLM,
        "attractor_lm": AutoModelForCausalLM,
    }.get(config.model_type)
    if auto is None:
        raise ValueError(f"{path}: model_type {config.model_type!r} is not an equilibria family")
    return auto.from_pretrained(path, trust_remote_code=trust_remote_code).eval()


def default_task(model) -> str:
    config = model.config
    if config.model_type == "eqr":
        side = math.isqrt(config.max_seq_len)
        return "sudoku" if config.vocab_size == 11 and side in (4, 6, 9) else "maze"
    if config.model_type == "phdeq":
        return "entailment" if config.input_size == 768 else "reachability"
    return "addition"


def task_data(model, task: str | None, num: int, seed: int, model_path: str, digits: int = 2):
    """Fresh evaluation data for ``task`` shaped for ``model`` (sizes from its config): the test split of the
    task's builder, ``num`` rows, seeded."""
    config = model.config
    task = task or default_task(model)
    if config.model_type not in TASK_FAMILIES[task]:
        raise ValueError(f"--task {task} does not fit a {config.model_type} model (it fits {TASK_FAMILIES[task]})")
    if task == "reachability":
        from .tasks import build_reachability_dataset

        nodes = (math.isqrt(9 + 4 * config.input_size) - 3) // 2  # input_size = n^2 + 3n
        if nodes * nodes + 3 * nodes != config.input_size:
            raise ValueError(f"input_size {config.input_size} is not a reachability encoding (n^2 + 3n)")
        return build_reachability_dataset(1, num, num_nodes=nodes, seed=seed)["test"]
    if task == "entailment":
        from .tasks import build_entailment_dataset, embed_entailment

        return embed_entailment(build_entailment_dataset(1, num, seed=seed)["test"])
    if task in ("sudoku", "maze"):
        from .tasks import build_maze_dataset, build_sudoku_dataset

        side = math.isqrt(config.max_seq_len)
        if task == "sudoku":
            return build_sudoku_dataset(side, 1, num, seed=seed)["test"]
        return build_maze_dataset(side, 1, num, seed=seed, min_path=side)["test"]
    from .tasks import build_addition_dataset

    return build_addition_dataset(digits, 1, num, seed=seed)["test"]


def _tokenizer(model_path: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as err:
        raise ValueError(f"{model_path} has no tokenizer to read prompts with ({err.__class__.__name__})") from None


def run_audit(args) -> None:
    """``equilibria audit``: load the model, build or load the data, audit, print (and save)."""
    from .diagnostics import audit

    if args.num_examples < 1:
        raise ValueError(f"--num-examples must be >= 1, got {args.num_examples}")
    model = load_saved_model(args.model_path, args.trust_remote_code)
    if args.dataset is not None:
        if args.task is not None:
            raise ValueError("pass either --task or --dataset, not both")
        data = _load_dataset(args.dataset, args.split)
    else:
        data = task_data(model, args.task, args.num_examples, args.seed, args.model_path)
        if model.config.model_type in ("ouro", "attractor_lm"):
            from .tasks import tokenize_for_training

            data = tokenize_for_training(data, _tokenizer(args.model_path))
    report = audit(
        model, data, num_loops=args.num_loops, batch_size=args.batch_size, max_units=args.num_examples, seed=args.seed
    )
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
    model, data, loops: list[int], model_path: str | None = None, batch_size: int = 64
) -> dict[int, float]:
    """Accuracy at each loop count: exact match of greedy answers (language models), exact solves at that depth
    (EqR), classification accuracy with that solver cap (PH-DEQ)."""
    import torch

    model_type = model.config.model_type
    if model_type in ("ouro", "attractor_lm"):
        from .tasks import evaluate_loop_scaling

        return evaluate_loop_scaling(model, _tokenizer(model_path), data, loops=loops, batch_size=batch_size)
    rows = data.with_format("torch")
    result = {}
    for n in loops:
        right = 0
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            with torch.no_grad():
                if model_type == "eqr":
                    out = model.solve(batch["inputs"], depth=n, generator=torch.Generator().manual_seed(0))
                    right += int(((out.answers == batch["labels"]) | (batch["labels"] == -100)).all(1).sum())
                else:
                    logits = model(batch["inputs"].float(), num_loops=n).logits
                    right += int((logits.argmax(-1) == batch["labels"]).sum())
        result[n] = right / len(rows)
    return result


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


def report_loop_scaling(result: dict[int, float], model_type: str, output_dir: str | Path | None) -> bool:
    """Print the loop-scaling table; with ``output_dir`` also write ``loop_scaling.json`` and ``.png`` there.
    Returns whether the plot was written."""
    print("  num_loops | accuracy")
    for n, acc in result.items():
        print(f"  {n:>9} | {100 * acc:6.1f}%")
    if not output_dir:
        return False
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "loop_scaling.json").write_text(json.dumps({str(k): v for k, v in result.items()}, indent=2) + "\n")
    plotted = plot_loop_scaling({model_type: result}, out / "loop_scaling.png", f"{model_type}: accuracy vs loops")
    print(f"wrote {out / 'loop_scaling.json'}" + (f" and {out / 'loop_scaling.png'}" if plotted else " (no plot)"))
    return plotted


def run_eval(args) -> dict[int, float]:
    """``equilibria eval``: the loop-scaling curve of a saved model on its task, as a table (and JSON + PNG)."""
    loops = parse_loops(args.loops)
    model = load_saved_model(args.model_path, args.trust_remote_code)
    if args.dataset is not None:
        data = _load_dataset(args.dataset, args.split)
    else:
        data = task_data(model, args.task, args.num_examples, args.seed, args.model_path, digits=args.digits)
    data = data.select(range(min(args.num_examples, len(data))))
    result = loop_scaling(model, data, loops, args.model_path, args.batch_size)
    print(f"loop scaling of {args.model_path} ({model.config.model_type}) on {len(data)} examples")
    report_loop_scaling(result, model.config.model_type, args.output_dir)
    return result


def parse_loops(text: str) -> list[int]:
    try:
        loops = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--loops must be comma-separated integers such as 1,2,4,8, got {text!r}") from None
    if not loops or any(n < 0 for n in loops):
        raise ValueError(f"--loops must be comma-separated integers >= 0, got {text!r}")
    return loops


def run_generate(args) -> str:
    """``equilibria generate``: greedy (or sampled) text from a saved looped LM at ``--num-loops``."""
    import torch
    from transformers import TextStreamer

    model = load_saved_model(args.model_path, args.trust_remote_code)
    if model.config.model_type not in ("ouro", "attractor_lm"):
        raise ValueError(f"generate needs a language model (ouro, attractor_lm), got {model.config.model_type}")
    tokenizer = _tokenizer(args.model_path)
    enc = tokenizer(args.prompt, return_tensors="pt", add_special_tokens=False)
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
    ``loop_scaling.json`` / ``loop_scaling.png`` (from ``equilibria eval --output-dir``) and ``audit.json`` (from
    ``equilibria audit --output-dir``), or the files given."""
    from .hub_cards import build_model_card, card_metadata_round_trips

    folder = Path(args.model_path)
    model = load_saved_model(args.model_path, args.trust_remote_code)
    scaling_file = Path(args.loop_scaling) if args.loop_scaling else folder / "loop_scaling.json"
    audit_file = Path(args.audit) if args.audit else folder / "audit.json"
    scaling = json.loads(scaling_file.read_text()) if scaling_file.is_file() else None
    plot = "loop_scaling.png" if (folder / "loop_scaling.png").is_file() else None
    card = build_model_card(
        model,
        repo_id=args.repo_id,
        license=args.license,
        base_model=args.base_model,
        datasets=args.dataset or None,
        task_name=args.task_name,
        loop_scaling=scaling,
        loop_scaling_plot=plot,
        audit=audit_file if audit_file.is_file() else None,
    )
    if not card_metadata_round_trips(card):
        raise ValueError("the card's metadata does not parse back to itself")
    card.save(folder / "README.md")
    found = [name for name, ok in (("loop scaling", scaling), ("audit", audit_file.is_file())) if ok]
    print(f"wrote {folder / 'README.md'}" + (f" (with {', '.join(found)})" if found else ""))
    return folder / "README.md"
