"""Loop scaling: a saved model's accuracy at each loop count on evaluation data
(:func:`~equilibria.evaluation.evaluation_data`), the table and the files that ``equilibria train``
(``loop_scaling.json`` / ``.png``) and ``equilibria eval`` (``eval_loop_scaling.json`` / ``.png``) write, which the
model card reads.

One evaluator per kind of head (:data:`EVALUATORS`, keyed by :data:`~equilibria.families.HEAD_KINDS`); the
family record's head of the model (:meth:`~equilibria.families.Family.head_of_model`) chooses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .families import family_record
from .modeling.puzzles import puzzle_solved
from .plots import plot_loop_scaling
from .provenance import LOOP_SCALING_FILES, replacement_note
from .tasks.registry import task_record
from .tasks.text_scoring import evaluate_loop_scaling, token_accuracy
from .tasks.tokenization import load_tokenizer


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


@dataclass(frozen=True)
class Scoring:
    """How an evaluator scores: ``model_path`` is the folder whose tokenizer a language model reads (or
    ``tokenizer``, the tokenizer itself, for a model not saved yet), ``metric``
    what a language model is scored by on rows of text (``"task"``: exact match of greedy answers,
    ``"token_accuracy"``, ``"exact_match"``); ``halt_threshold``, ``breadth`` and ``select`` are a puzzle solver's
    search (:func:`solver_scaling`)."""

    model_path: str | None = None
    batch_size: int = 64
    metric: str = "task"
    halt_threshold: float | None = None
    breadth: int = 1
    select: str = "residual"
    tokenizer: object = None

    @property
    def searches(self) -> bool:
        """Whether a puzzle solver's search differs from one restart without halting."""
        return self.halt_threshold is not None or self.breadth != 1


@dataclass
class LoopScores:
    """An evaluator's result: the accuracy at each loop count and, where the head reports them, the mean loop steps
    per unit at each (a puzzle solver's function evaluations over all its restarts; the puzzle head's solver
    steps)."""

    accuracy: dict[int, float]
    mean_steps: dict[int, float] | None = None


def _causal_lm(model, data, loops: list[int], scoring: Scoring) -> LoopScores:
    """A language model: next-token accuracy on the labelled tokens of tokenised rows (``token_accuracy``), else
    exact match of its greedy answers to the rows' prompts."""
    tokenizer = scoring.tokenizer or load_tokenizer(scoring.model_path, "prompts")
    if scoring.metric == "token_accuracy":
        return LoopScores({n: token_accuracy(model, data, n, tokenizer, batch_size=scoring.batch_size) for n in loops})
    return LoopScores(evaluate_loop_scaling(model, tokenizer, data, loops=loops, batch_size=scoring.batch_size))


def _puzzle_cells(model, data, loops: list[int], scoring: Scoring) -> LoopScores:
    return LoopScores(*puzzle_scaling(model, data, loops, scoring.batch_size))


def _puzzle_solver(model, data, loops: list[int], scoring: Scoring) -> LoopScores:
    found = solver_scaling(
        model, data, loops, scoring.batch_size, scoring.halt_threshold, scoring.breadth, scoring.select
    )
    return LoopScores(*found)


def _classifier(model, data, loops: list[int], scoring: Scoring) -> LoopScores:
    return LoopScores(classifier_scaling(model, data, loops, scoring.batch_size))


#: the evaluator of each kind of head: ``(model, data, loops, scoring) -> LoopScores``
EVALUATORS: dict[str, Callable[..., LoopScores]] = {
    "causal_lm": _causal_lm,
    "puzzle_cells": _puzzle_cells,
    "puzzle_solver": _puzzle_solver,
    "classifier": _classifier,
}


def loop_scores(model, data, loops: list[int], scoring: Scoring | None = None) -> LoopScores:
    """``model`` scored at each loop count of ``loops`` by the evaluator of its head's kind; ``ValueError`` for a
    puzzle solver's search on a model of another kind."""
    scoring = scoring or Scoring()
    family = family_record(model)
    head = family.head_of_model(model)
    family.protocol.prepare(model)  # num_loops per call (transformers' looped LMs: looped())
    if scoring.searches and not head.searches:
        raise ValueError(f"halt_threshold and breadth apply to a puzzle solver's head, not to a {head.kind} head")
    return EVALUATORS[head.kind](model, data, loops, scoring)


def loop_scaling(
    model, data, loops: list[int], model_path: str | None = None, batch_size: int = 64, metric: str = "task"
) -> dict[int, float]:
    """Accuracy at each loop count (:func:`loop_scores`): exact match of greedy answers (language models), exact
    solves at that depth (puzzle models), classification accuracy with that solver cap (PH-DEQ);
    ``metric="token_accuracy"``: next-token accuracy on the labelled tokens of tokenised rows
    (:func:`~equilibria.tasks.text_scoring.token_accuracy`). ``model_path``: the folder whose tokenizer a language
    model reads."""
    return loop_scores(model, data, loops, Scoring(model_path, batch_size, metric)).accuracy


def puzzle_solves(model, data, loops: int, batch_size: int = 64) -> dict[str, torch.Tensor]:
    """A puzzle model answering every cell in one forward (the Attractor's puzzle head), run at ``loops`` on every
    row of ``data``: per row, ``"solved"`` (every labelled cell right), ``"steps"`` (the loop steps the forward
    reported, ``solver_steps``; 0 where it reports none) and ``"residual"`` (its final relative residual; 0 where
    it reports none)."""
    rows = data.with_format("torch")
    parts: dict[str, list[torch.Tensor]] = {"solved": [], "steps": [], "residual": []}
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        with torch.no_grad():
            out = model(batch["inputs"], num_loops=loops)
        zeros = torch.zeros(len(batch["labels"]))
        parts["solved"].append(puzzle_solved(out.logits, batch["labels"]))
        for key, name in (("steps", "solver_steps"), ("residual", "rel_residual")):
            value = getattr(out, name, None)
            parts[key].append(zeros if value is None else value.detach().float().reshape(-1))
    return {key: torch.cat(value) for key, value in parts.items()}


def puzzle_scaling(model, data, loops: list[int], batch_size: int = 64) -> tuple[dict[int, float], dict[int, float]]:
    """:func:`puzzle_solves` at each loop count of ``loops``: the share of puzzles solved exactly and the mean loop
    steps per puzzle."""
    runs = {n: puzzle_solves(model, data, n, batch_size) for n in loops}
    accuracy = {n: run["solved"].float().mean().item() for n, run in runs.items()}
    return accuracy, {n: run["steps"].mean().item() for n, run in runs.items()}


def classifier_scaling(model, data, loops: list[int], batch_size: int = 64) -> dict[int, float]:
    """A classifier of ``inputs`` rows (PH-DEQ) at each solver cap of ``loops``: the share of rows whose arg-max
    class is the label."""
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


def loop_scaling_table(
    result: dict[int, float], data: dict | None = None, halting: tuple[float, dict[int, float]] | None = None
) -> list[str]:
    """The lines of the loop-scaling table: what it was computed on, then ``num_loops | accuracy`` (and the mean
    evaluations per puzzle with ``halting``)."""
    lines = [f"  on {data['name']}: {data['note']}"] if data else []
    if halting:
        lines.append(f"  halting at probability {halting[0]}: num_loops is the maximum depth")
    lines.append("  num_loops | accuracy" + (" | mean NFE" if halting else ""))
    for n, acc in result.items():
        lines.append(f"  {n:>9} | {100 * acc:6.1f}%" + (f" | {halting[1][n]:8.2f}" if halting else ""))
    return lines


def save_loop_scaling(
    result: dict[int, float],
    model_type: str,
    output_dir: str | Path,
    data: dict | None = None,
    halting: tuple[float, dict[int, float]] | None = None,
    weights: str | None = None,
    plot: dict | None = None,
    by: str = "equilibria train",
) -> list[str]:
    """Write the loop-scaling result of the command ``by`` (``loop_scaling.json`` for ``equilibria train``,
    ``eval_loop_scaling.json`` for ``equilibria eval``: :data:`~equilibria.provenance.LOOP_SCALING_FILES`) and its
    plot into ``output_dir``: ``{"by": the command, "weights": the fingerprint of the weights evaluated, "data":
    what it was computed on, "accuracy": {loops: accuracy}}``, with ``halting`` also ``halt_threshold`` and
    ``mean_nfe``. Returns what to tell the user: that a result of other data or weights was replaced, and what was
    written."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOOP_SCALING_FILES[by]
    payload = {"by": by, "weights": weights, "data": data, "accuracy": {str(k): v for k, v in result.items()}}
    if halting:
        payload.update(halt_threshold=halting[0], mean_nfe={str(k): v for k, v in halting[1].items()})
    note = replacement_note(path, payload)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    plot = {"metric": "accuracy", **(plot or {})}
    where = f"on {data['name']}" if data and data.get("name") else None
    title = f"{model_type}: {plot['metric']} vs loops"
    image = path.with_suffix(".png")
    plotted = plot_loop_scaling({model_type: result}, image, title, data=where, **plot)
    wrote = f"wrote {path}" + (f" and {image}" if plotted else " (no plot)")
    return [note, wrote] if note else [wrote]


def loop_scaling_report(
    result: dict[int, float],
    model_type: str,
    output_dir: str | Path | None,
    data: dict | None = None,
    halting: tuple[float, dict[int, float]] | None = None,
    **saved,
) -> list[str]:
    """The table (:func:`loop_scaling_table`) and, with ``output_dir``, the files written there by
    :func:`save_loop_scaling` (``saved``: its ``weights``, ``plot`` and ``by``): the lines ``equilibria eval`` and
    ``equilibria train`` print."""
    lines = loop_scaling_table(result, data, halting)
    if output_dir:
        lines += save_loop_scaling(result, model_type, output_dir, data, halting, **saved)
    return lines


def metric_label(metric: str, task: str | None) -> str:
    """The words for what a score measures: a generated task's metric (``metric == "task"``), else the metric's
    name (``exact match``, ``token accuracy``)."""
    return task_record(task).metric if metric == "task" else metric.replace("_", " ")


def plot_labels(model, metric: str, trained: tuple[int, int] | None = None) -> dict:
    """What ``loop_scaling.png`` names: the ``metric`` scored and the loop count of the model's config, marked, and
    the loop counts of its last training stage where known (``trained``: the fewest and most; a range when they were
    sampled, as STARS samples them)."""
    count = getattr(model.config, family_record(model).loops_key, None)
    if trained is None:
        return {"metric": metric, "mark": count, "mark_label": "its config's count"}
    low, high = trained
    if low == high:
        label = "trained at (its config's count)" if low == count else f"its config's count (trained at {low})"
        return {"metric": metric, "mark": count, "mark_label": label}
    return {"metric": metric, "mark": count, "mark_label": "its config's count, a plain call's", "trained": [low, high]}


def trained_loops(arguments: dict | None) -> tuple[int, int] | None:
    """``(fewest, most)`` loop counts a training stage drew (its recorded ``arguments``' ``min_loops`` and
    ``max_loops``), or ``None`` where it records none."""
    low, high = (arguments or {}).get("min_loops"), (arguments or {}).get("max_loops")
    return (int(low), int(high)) if isinstance(low, int) and isinstance(high, int) else None


__all__ = [
    "EVALUATORS",
    "metric_label",
    "plot_labels",
    "trained_loops",
    "LoopScores",
    "Scoring",
    "loop_scaling_report",
    "classifier_scaling",
    "loop_scaling",
    "loop_scores",
    "loop_scaling_table",
    "parse_loops",
    "save_loop_scaling",
    "puzzle_scaling",
    "puzzle_solves",
    "solver_scaling",
]
