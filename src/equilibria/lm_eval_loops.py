"""lm-evaluation-harness at several loop counts (``equilibria eval MODEL --lm_eval_tasks TASKS --loops 1,2,4,8``).

lm-eval's ``HFLM`` wraps the loaded model once per loop count. The count is set as the config's default loop count,
which both paths the harness takes read (``forward`` for loglikelihood requests, ``generate`` for generation
requests), and put back afterwards. lm-eval is an optional extra: ``pip install "equilibria[eval]"``.
"""

from __future__ import annotations

import json
from pathlib import Path

from .families import running_loops
from .plots import plot_loop_scaling
from .provenance import replacement_note

RESULTS_FILE = "lm_eval.json"


def require_lm_eval():
    """The ``lm_eval`` module, or an ``ImportError`` saying how to install it."""
    try:
        import lm_eval
    except ImportError:
        raise ImportError(
            'lm-evaluation-harness is not installed: pip install "equilibria[eval]" (or lm-eval)'
        ) from None
    return lm_eval


def lm_eval_at_loops(
    model,
    tokenizer,
    tasks: list[str],
    loops: list[int],
    *,
    include_path: str | None = None,
    limit: int | float | None = None,
    num_fewshot: int | None = None,
    batch_size: int = 8,
    seed: int = 1234,
) -> dict:
    """Run lm-eval's ``tasks`` on ``model`` at each loop count: ``{"tasks": {task: {metric: {loops: value}}},
    "stderr": (the same shape), "limit", "num_fewshot", "lm_eval_version"}``. ``include_path`` adds a folder of
    task YAMLs (your own tasks) to lm-eval's."""
    from tqdm.auto import tqdm

    lm_eval = require_lm_eval()
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    if not model.can_generate():
        raise ValueError(f"--lm_eval_tasks evaluates language models; {model.config.model_type} is not one")
    manager = _task_manager(TaskManager, tasks, include_path)
    unknown = [task for task in tasks if task not in manager.all_tasks]
    if unknown:
        where = f" or in {include_path}" if include_path else " (--lm_eval_include adds a folder of task YAMLs)"
        raise ValueError(f"--lm_eval_tasks {unknown}: no such lm-eval task{where}")
    values, errors = {}, {}
    for n in tqdm(loops, desc="lm-eval at each loop count"):
        with running_loops(model, n):
            lm = HFLM(
                pretrained=model, backend="causal", tokenizer=tokenizer, batch_size=batch_size, device=str(model.device)
            )
            out = lm_eval.simple_evaluate(
                model=lm,
                tasks=tasks,
                task_manager=manager,
                limit=limit,
                num_fewshot=num_fewshot,
                log_samples=False,
                random_seed=seed,
                numpy_random_seed=seed,
                torch_random_seed=seed,
                fewshot_random_seed=seed,
            )
        for task, metrics in out["results"].items():
            for key, value in metrics.items():
                metric, filtered, _ = key.partition(",")  # "acc,none": a metric under a filter; others are bookkeeping
                if not filtered or not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                target = errors if metric.endswith("_stderr") else values
                name = metric.removesuffix("_stderr")
                target.setdefault(task, {}).setdefault(name, {})[str(n)] = float(value)
    return {
        "tasks": values,
        "stderr": errors,
        "limit": limit,
        "num_fewshot": num_fewshot,
        "lm_eval_version": lm_eval.__version__,
    }


def _task_manager(task_manager_class, tasks: list[str], include_path: str | None):
    """lm-eval's task index: of ``include_path`` alone when it holds every task asked for (indexing lm-eval's
    thousands of own tasks takes seconds), else of both."""
    if include_path is not None:
        own = task_manager_class(include_path=include_path, include_defaults=False)
        if all(task in own.all_tasks for task in tasks):
            return own
    return task_manager_class(include_path=include_path)


def lm_eval_table(result: dict, plus: str = "±") -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of ``lm_eval.json``'s results: ``num_loops`` and a column per task metric, one row per
    loop count, each cell ``value plus stderr`` (``-`` where a loop count has no value)."""
    columns = [(task, metric) for task, metrics in result["tasks"].items() for metric in metrics]
    loops = sorted({int(n) for task, metric in columns for n in result["tasks"][task][metric]})

    def cell(task: str, metric: str, n: int) -> str:
        value = result["tasks"][task][metric].get(str(n))
        err = result.get("stderr", {}).get(task, {}).get(metric, {}).get(str(n))
        return "-" if value is None else f"{value:.4f}" + (f" {plus} {err:.4f}" if err is not None else "")

    header = ["num_loops", *[f"{task} {metric}" for task, metric in columns]]
    return header, [[str(n), *[cell(task, metric, n) for task, metric in columns]] for n in loops]


def save_lm_eval(result: dict, model_type: str, output_dir: str | Path) -> list[str]:
    """Write ``lm_eval.json`` and ``lm_eval.png`` into ``output_dir`` (the card reads them). Returns what to tell the
    user: that a result of other tasks or weights was replaced (``result["weights"]``, ``result["data"]``:
    :mod:`equilibria.provenance`), and what was written."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    note = replacement_note(out / RESULTS_FILE, result)
    (out / RESULTS_FILE).write_text(json.dumps(result, indent=2) + "\n")
    curves = {
        f"{task} {metric}": {int(n): v for n, v in curve.items()}
        for task, metrics in result["tasks"].items()
        for metric, curve in metrics.items()
        if all(0 <= v <= 1 for v in curve.values())
    }
    plotted = curves and plot_loop_scaling(curves, out / "lm_eval.png", f"{model_type}: lm-eval vs loops")
    wrote = f"wrote {out / RESULTS_FILE}" + (f" and {out / 'lm_eval.png'}" if plotted else "")
    return [note, wrote] if note else [wrote]


__all__ = ["RESULTS_FILE", "lm_eval_at_loops", "lm_eval_table", "save_lm_eval"]
