"""What the computation audit needs to know about each model family: its start state ``z0``, its solved state
``h*``, how to run the loop from a start of our choosing, and how the decoder reads a state.

An adapter works on batches of a ``datasets.Dataset`` and on *units*: one example for the PH-DEQ, one puzzle for
EqR, one sequence for the language models. States are handed to the audit flattened per unit (``(units,
features)``, padding positions zeroed), so norms and displacements are per unit whatever the family.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch.nn.utils.rnn import pad_sequence

from ..families import family_record
from ..loops import LoopProtocol
from ..modeling.loop_map import LoopMap
from ..modeling.puzzles import puzzle_solved
from ..modeling.solvers import residual
from ..wording import with_article


@dataclass
class LoopRun:
    """One batch through the loop. All tensors have the units as their first dimension."""

    start: torch.Tensor  # (units, features): z0, flattened
    solved: torch.Tensor  # (units, features): h*, flattened
    steps: torch.Tensor  # (units,) float: iterations the loop used
    converged: torch.Tensor  # (units,) bool
    diverged: torch.Tensor  # (units,) bool
    correct: torch.Tensor  # (units,) bool: the decoder's answer from h* is right
    extra: dict = field(default_factory=dict)  # whatever decode() needs besides the state
    valid: torch.Tensor | None = None  # (units, features) bool: real entries (False at padding); None = all


class LoopAdapter:
    """Base class: one per kind of head and form of loop, named after the family it was written for. Subclasses
    declare the head kinds they audit (``head_kinds``, of :data:`~equilibria.families.HEAD_KINDS`) and, where it
    matters, whether the loop runs a fixed number of steps (``fixed_steps``: the protocol's ``states``) or is solved
    (``solve``); :func:`adapter_for` picks by them among :data:`ADAPTERS` unless the family's record names its own
    (``Family.audit_adapter``). They implement :meth:`run`, :meth:`decode` and :meth:`probe_examples`; ``max_iter``
    is the loop's cap (for the share of solves that hit it). The loop map and the decoder's logits of a state come
    from the family's loop protocol (:attr:`protocol`)."""

    head_kinds: tuple[str, ...] = ()
    #: True: a loop of a fixed number of steps (its protocol's ``states``); False: a solved loop (``solve``); None:
    #: either
    fixed_steps: bool | None = None

    start_name = "z0"
    solved_name = "h*"
    #: whether T4 (restart the loop from a displaced start) means anything: a loop with an attractor returns to
    #: it; a fixed number of steps has no fixed point to return to
    displacement_applies = True
    #: what one unit is, for the report ("example", "puzzle", "sequence")
    unit_name = "example"
    #: the dataset columns the loop map reads
    loop_columns: tuple[str, ...] = ("inputs",)

    def __init__(self, model, num_loops: int | None = None, seed: int = 0):
        self.model = model
        self.num_loops = num_loops
        self.generator = torch.Generator().manual_seed(seed)  # for families whose start state is random

    @property
    def protocol(self) -> LoopProtocol:
        """The loop protocol of the model's family (:mod:`equilibria.loops`)."""
        return family_record(self.model).protocol

    @property
    def max_iter(self) -> int:
        """The loop's budget: ``num_loops`` when given, else the config's default."""
        return self.num_loops if self.num_loops is not None else self.protocol.default_loops(self.model.config)

    @property
    def family(self) -> str:
        """The audited model's ``model_type`` (its class name when its config has none)."""
        return getattr(self.model.config, "model_type", None) or type(self.model).__name__

    def describe(self) -> dict:
        """What the start state, solved state and decoder are for this family (goes into the report)."""
        return {"family": self.family, "start": self.start_name, "solved": self.solved_name}

    def batches(self, dataset, batch_size: int) -> Iterator[dict]:
        data = dataset.with_format("torch")
        for begin in range(0, len(data), batch_size):
            yield data[begin : begin + batch_size]

    def on_model_device(self, batches: Iterable[dict]) -> Iterator[dict]:
        """``batches`` (of :meth:`batches`) with their tensors on the device of the model's weights (a GPU)."""
        weight = next(self.model.parameters(), None)  # a test's loop may have none
        for batch in batches:
            if weight is None:
                yield batch
                continue
            yield {k: v.to(weight.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def difficulty(self, batch: dict) -> torch.Tensor | None:
        value = batch.get("difficulty")
        return None if value is None else value.double()

    def untestable(self) -> str | None:
        """Why this loop has nothing the audit could test (``None`` when it has): a loop of one step (or one
        solver iteration) has no recurrence, whatever its accuracy."""
        if self.max_iter < 2:
            return (
                f"the loop runs {self.max_iter} step: no recurrence to test (there are no extra steps whose "
                "computation could be tested)"
            )
        return None

    def answers(self, batch: dict) -> list[tuple]:
        """Each unit's whole target (its labels, -100 skipped) as a tuple: the audit's majority-class baseline is
        the share of units whose target is the most common one."""
        labels = batch["labels"]
        labels = labels[:, None] if labels.dim() == 1 else labels.flatten(1)
        return [tuple(row[row != -100].tolist()) for row in labels]

    def run(self, batch: dict, start: torch.Tensor | None = None) -> LoopRun:
        raise NotImplementedError

    def loop(self, batch: dict) -> tuple[LoopMap, torch.Tensor | None]:
        """The model's loop on this batch as a function of its state (one call = one step of the loop as the model
        runs it) with the state it starts from (its protocol's ``loop_map``), and which positions of the state are
        real (``(units, positions)`` bool, False at padding; ``None``: all): what
        :func:`~equilibria.diagnostics.loop_trajectory` iterates."""
        _require_columns(batch, *self.loop_columns, family=self.family)
        return self.protocol.loop_map(self.model, batch, generator=self.generator), self.real_positions(batch)

    def real_positions(self, batch: dict) -> torch.Tensor | None:
        """Which positions of a state are real (``(units, positions)`` bool); ``None``: all."""
        return None

    def decode(self, batch: dict, run: LoopRun, state: torch.Tensor) -> torch.Tensor:
        """Per unit: is the decoder's answer right when it reads ``state`` (flattened like ``run.solved``)?"""
        raise NotImplementedError

    def probe_examples(self, batch: dict, run: LoopRun, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features, targets)`` for the linear probe on ``state``: rows of features and their class labels."""
        raise NotImplementedError


def _require_columns(batch: dict, *names: str, family: str) -> None:
    missing = [n for n in names if n not in batch]
    if missing:
        raise ValueError(
            f"the audit of {with_article(family)} model needs dataset columns {list(names)}; missing {missing} "
            f"(columns present: {sorted(batch)})"
        )


class PHDEQAdapter(LoopAdapter):
    """A classifier whose loop is solved (the PH-DEQ): ``z0`` is the initialiser's proposal, ``h*`` the solver's
    solution, the decoder the classifier (with the direct context path when the model has one). Dataset columns:
    ``inputs``, ``labels`` (and optionally ``attention_mask``, ``difficulty``)."""

    head_kinds, fixed_steps = ("classifier",), False
    start_name = "z0 = initialiser(context)"
    solved_name = "h* = z* (the solver's equilibrium)"

    def run(self, batch, start=None):
        _require_columns(batch, "inputs", "labels", family=self.family)
        out = self.protocol.solve(self.model, batch, self.max_iter, start=start)
        # the solve's start, solved state, steps, converged and diverged are the run's, in the same order
        return LoopRun(*out[:5], correct=out.logits.argmax(-1) == batch["labels"])

    def decode(self, batch, run, state):
        return self.protocol.decode(self.model, batch, state).argmax(-1) == batch["labels"]

    def probe_examples(self, batch, run, state):
        return state, batch["labels"].long()


class _PuzzleCells:
    """Mixed into the adapters of puzzle models (one answer per cell): a unit is a puzzle, its difficulty its
    ``difficulty`` column (else the published files' ``rating``), and the probe reads each labelled cell's state
    for its answer."""

    unit_name = "puzzle"

    def difficulty(self, batch):
        value = batch.get("difficulty", batch.get("rating"))
        return None if value is None else value.double()

    def probe_examples(self, batch, run, state):
        labels = batch["labels"]
        num, cells = labels.shape
        flat = labels.flatten()
        keep = flat != -100
        return state.reshape(num * cells, -1)[keep], flat[keep].long()


class EqRAdapter(_PuzzleCells, LoopAdapter):
    """A puzzle solver that restarts its loop (EqR): ``z0`` is the state after the first step from the model's own
    start (random, drawn with a fixed seed, or learned), as Ouro's audit does: a random start, or a learned one that
    decodes to nothing, is off the decoder's input distribution, and T1 on it would be confounded exactly as zeroing
    is. ``h*`` is the state after ``depth`` iterations without noise (the first step included), the decoder the
    per-cell answer head; a unit is a puzzle, right when every cell is. "Iterations" are the steps until the residual
    first falls below ``tol`` (the depth when it never does). T4 restarts the remaining ``depth - 1`` steps from a
    displaced ``z0``. Dataset columns: ``inputs``, ``labels`` (and optionally ``difficulty``, else ``rating``)."""

    head_kinds, fixed_steps = ("puzzle_solver",), False
    start_name = "z1 (the state after the first step from the model's own start: in the decoder's distribution)"
    solved_name = "h* = z_depth (state after the iterations)"

    def __init__(self, model, num_loops=None, tol: float = 1e-3, seed: int = 0):
        super().__init__(model, num_loops, seed)
        self.tol = tol

    def untestable(self):
        untied = getattr(self.model.config, "untied_depth", None)
        if untied:
            return (
                f"the model applies {untied} blocks with weights of their own (untied_depth={untied}), not one block "
                "again and again: no recurrence to test"
            )
        return super().untestable()

    def run(self, batch, start=None):
        _require_columns(batch, "inputs", "labels", family=self.family)
        num, cells = batch["inputs"].shape
        if getattr(self.model.config, "untied_depth", None):  # no step to repeat: `inconclusive` (untestable)
            return self._run_untied_blocks(batch, start)
        if start is None:  # the first step from the model's own start; its residual is step 1's
            step = self.protocol.solve(self.model, batch, 1, generator=self.generator)
            begin, first_residual = step.solved.detach(), step.residuals
        else:  # T4: the remaining steps from a displaced start (step 1 is not run: no residual of its own)
            begin = start.view(num, cells, -1)
            first_residual = torch.full((num, 1), math.inf, dtype=begin.dtype)
        out = self.protocol.solve(self.model, batch, max(self.max_iter - 1, 1), start=begin)
        residuals = torch.cat([first_residual, out.residuals], 1)[:, : self.max_iter]  # one step: no recurrence
        solved = out.solved if self.max_iter > 1 else begin  # (a one-step model is `inconclusive` whatever it gives)
        below = residuals <= self.tol
        first = torch.where(
            below.any(1), below.float().argmax(1) + 1, torch.full_like(below[:, 0], self.max_iter, dtype=torch.long)
        )
        return LoopRun(
            start=begin.flatten(1),
            solved=solved.flatten(1),
            steps=first.double(),
            converged=below[:, -1],
            diverged=~torch.isfinite(residuals[:, -1]),
            correct=puzzle_solved(out.logits, batch["labels"])
            if self.max_iter > 1
            else self.decode(batch, None, begin),
        )

    def _run_untied_blocks(self, batch, start=None):
        """An untied model runs its ``untied_depth`` blocks once, from its own start (or a displaced one): no
        first step of a repeated block to call ``z0``, so ``z0`` is the start itself. The audit reports its accuracy
        and calls it `inconclusive` (see :meth:`untestable`) instead of failing in the model's forward."""
        num = len(batch["inputs"])
        depth = int(self.model.config.untied_depth)
        out = self.protocol.solve(self.model, batch, depth, start=start, generator=self.generator)
        below = out.residuals <= self.tol
        return LoopRun(
            start=out.start.flatten(1),
            solved=out.solved.flatten(1),
            steps=torch.full((num,), float(depth), dtype=torch.float64),
            converged=below[:, -1],
            diverged=~torch.isfinite(out.residuals[:, -1]),
            correct=puzzle_solved(out.logits, batch["labels"]),
        )

    def decode(self, batch, run, state):
        num, cells = batch["inputs"].shape
        return puzzle_solved(self.protocol.decode(self.model, batch, state.view(num, cells, -1)), batch["labels"])


class _CausalLMAdapter(LoopAdapter):
    """Shared by the language models: a unit is a sequence, right when every labelled next token is (labels
    follow the causal-LM convention: ``labels[t]`` is the token after position ``t - 1``, -100 skipped).
    Dataset columns: ``input_ids``, ``labels`` (and optionally ``attention_mask``, ``difficulty``)."""

    unit_name = "sequence"
    loop_columns = ("input_ids",)

    def answers(self, batch):
        return super().answers({"labels": batch["labels"][:, 1:]})

    def batches(self, dataset, batch_size):
        data = dataset.with_format("torch")
        pad = self.model.config.pad_token_id or 0
        for begin in range(0, len(data), batch_size):
            rows = data[begin : begin + batch_size]
            _require_columns(rows, "input_ids", "labels", family=self.family)
            ids, labels = rows["input_ids"], rows["labels"]
            if isinstance(ids, list):  # ragged: right-pad
                rows["attention_mask"] = pad_sequence([torch.ones_like(x) for x in ids], batch_first=True)
                ids = pad_sequence(ids, batch_first=True, padding_value=pad)
                labels = pad_sequence(labels, batch_first=True, padding_value=-100)
            rows["input_ids"], rows["labels"] = ids, labels
            rows.setdefault("attention_mask", torch.ones_like(ids))
            yield rows

    def real_positions(self, batch) -> torch.Tensor:
        return batch["attention_mask"].bool()

    def _flatten_real(self, batch, states: torch.Tensor) -> torch.Tensor:
        return (states * self.real_positions(batch)[..., None].to(states.dtype)).flatten(1)

    def _real_entries(self, batch, states: torch.Tensor) -> torch.Tensor:
        return self.real_positions(batch)[..., None].expand(states.shape).flatten(1)

    def _decoder_logits(self, batch, state_flat: torch.Tensor) -> torch.Tensor:
        num, width = batch["input_ids"].shape
        return self.protocol.decode(self.model, batch, state_flat.view(num, width, -1))

    def _units_right(self, batch, logits: torch.Tensor) -> torch.Tensor:
        targets = batch["labels"][:, 1:]
        predicted = logits[:, :-1].argmax(-1)
        return ((predicted == targets) | (targets == -100)).all(dim=1)

    def decode(self, batch, run, state):
        return self._units_right(batch, self._decoder_logits(batch, state))

    def probe_examples(self, batch, run, state):
        num, width = batch["input_ids"].shape
        states = state.view(num, width, -1)[:, :-1]
        targets = batch["labels"][:, 1:]
        keep = targets != -100
        return states[keep], targets[keep].long()


class AttractorAdapter(_CausalLMAdapter):
    """A language model whose loop is solved from a proposal (the Attractor LM): ``z0`` is the backbone's proposal
    ``y0``, ``h*`` the attractor's fixed point (before the final norm), the decoder ``lm_head(norm(.))``."""

    head_kinds, fixed_steps = ("causal_lm",), False
    start_name = "y0 (the backbone's proposal)"
    solved_name = "y* (the attractor's fixed point)"

    def describe(self) -> dict:
        described = super().describe()
        if self.model.config.residual_form == "deq":
            described["start"] = "0 (the zero start of the DEQ control, residual_form='deq')"
        return described

    def run(self, batch, start=None):
        out = self.protocol.solve(self.model, batch, self.max_iter, start=start)
        run = LoopRun(
            valid=self._real_entries(batch, out.start),
            start=self._flatten_real(batch, out.start),
            solved=self._flatten_real(batch, out.solved),
            steps=out.steps,
            converged=out.converged,
            diverged=out.diverged,
            correct=torch.zeros(0, dtype=torch.bool),
        )
        run.correct = self.decode(batch, run, run.solved)
        return run


class AttractorPuzzleAdapter(_PuzzleCells, AttractorAdapter):
    """Attractor puzzle model ([`AttractorForPuzzleSolving`]): as [`AttractorAdapter`], but a unit is a puzzle,
    right when every labelled cell is, and the probe reads each cell's state for its answer. Dataset columns:
    ``inputs``, ``labels`` (and optionally ``difficulty``, else ``rating``)."""

    head_kinds = ("puzzle_cells",)

    def answers(self, batch):
        return LoopAdapter.answers(self, batch)

    def batches(self, dataset, batch_size):
        for rows in LoopAdapter.batches(self, dataset, batch_size):
            _require_columns(rows, "inputs", "labels", family=self.family)
            rows["input_ids"] = rows["inputs"]
            rows.setdefault("attention_mask", torch.ones_like(rows["inputs"]))
            yield rows

    def _units_right(self, batch, logits):
        return puzzle_solved(logits, batch["labels"])


class LoopedLMAdapter(_CausalLMAdapter):
    """A looped LM that runs a fixed number of loop steps without an attractor: Ouro, and the looped LMs transformers
    ships (Dory, HRM-text, Inkling2-loop). The audit asks whether the steps after the first compute. ``z0`` is the
    state after the first step (Ouro's normalised, as every step's output is, so the decoder reads it as it reads
    the last), ``h*`` the state after all ``num_loops`` steps, both from the protocol's ``states`` (Ouro: its loop
    map unrolled; transformers' models: read by hooks from one forward); the decoder is the protocol's ``decode``
    (Ouro: ``lm_head`` of its readout; transformers': the model's own layers after the loop and its head). Every
    token runs every step (Ouro's early-exit threshold is not applied). "Iterations" are the expected exit step
    under the exit gate (Ouro), averaged over the labelled tokens, else the steps. A sequence has converged when the
    last step's relative change ``||h_T - h_{T-1}|| / ||h_T||`` (over its real tokens) is below ``tol``. T4 does not
    apply (there is no fixed point to return to), and a one-step loop has no extra steps to test."""

    head_kinds, fixed_steps = ("causal_lm",), True
    displacement_applies = False

    def __init__(self, model, num_loops=None, tol: float = 1e-3, seed: int = 0):
        super().__init__(model, num_loops, seed)
        self.tol = tol

    def describe(self) -> dict:
        step = self.protocol.step_name
        return {
            **super().describe(),
            "start": f"h_1 (the state after the first {step})",
            "solved": f"h_T (the state after the last {step})",
        }

    def run(self, batch, start=None):
        if start is not None:
            raise ValueError(f"{self.family}: T4 does not apply (a fixed number of loop steps)")
        states = self.protocol.states(self.model, batch, self.max_iter)
        first, previous, last = states.first, states.previous, states.last
        change = residual(self._flatten_real(batch, previous), self._flatten_real(batch, last), keep_dims=1)[1]
        run = LoopRun(
            valid=self._real_entries(batch, first),
            start=self._flatten_real(batch, first),
            solved=self._flatten_real(batch, last),
            steps=self._steps(batch, states.exit_step),
            converged=change < self.tol if self.max_iter > 1 else torch.ones(len(last), dtype=torch.bool),
            diverged=~torch.isfinite(last.flatten(1)).all(1),
            correct=torch.zeros(0, dtype=torch.bool),
            extra={"last_change": change},
        )
        logits = states.logits if states.logits is not None else self._decoder_logits(batch, run.solved)
        run.correct = self._units_right(batch, logits)
        return run

    def _steps(self, batch, exit_step: torch.Tensor | None) -> torch.Tensor:
        """Per sequence: the expected exit step, averaged over its labelled tokens (over its real tokens when none
        is labelled); every step when the model has no exit gate."""
        if exit_step is None:
            return torch.full((len(batch["input_ids"]),), float(self.max_iter), dtype=torch.float64)
        weight = (batch["labels"] != -100).double()
        weight = torch.where(weight.sum(1, keepdim=True) > 0, weight, batch["attention_mask"].double())
        return (exit_step * weight).sum(1) / weight.sum(1).clamp_min(1.0)


ADAPTERS = (PHDEQAdapter, EqRAdapter, AttractorAdapter, AttractorPuzzleAdapter, LoopedLMAdapter)

#: the names this adapter had while Ouro and transformers' looped LMs had one each
OuroAdapter = NativeLoopAdapter = LoopedLMAdapter


def adapter_class_for(model_type: str, head_kind: str) -> type[LoopAdapter]:
    """The adapter of the family ``model_type``'s head of ``head_kind``: the one its record names
    (``Family.audit_adapter``, where it declares that head kind or none), else the one of :data:`ADAPTERS` that
    declares the head kind and the form of the family's loop (fixed steps or solved); ``ValueError`` when none
    fits."""
    family = family_record(model_type, "audit adapter")
    own = family.audit_adapter
    if own is not None and (not own.head_kinds or head_kind in own.head_kinds):
        return own
    found = family.fitting(ADAPTERS, head_kind)
    if not found:
        form = "a fixed number of steps" if family.protocol.runs_fixed_steps else "a solved loop"
        raise ValueError(
            f"no audit adapter fits the {model_type} family's {head_kind} head with {form}: name one in its record "
            "(Family(audit_adapter=YourAdapter), a LoopAdapter subclass) or pass adapter=YourAdapter(model)"
        )
    return found[0]


def adapter_for(model, **options) -> LoopAdapter:
    """The audit adapter of ``model``'s family and head (:func:`adapter_class_for`); ``options`` go to its
    constructor."""
    try:
        family = family_record(model, "audit adapter")
    except ValueError as err:
        raise ValueError(f"{err} (or pass adapter=YourAdapter(model), a LoopAdapter subclass)") from None
    if not hasattr(model, "lm_head") and not hasattr(model, "classifier"):
        raise ValueError(
            f"the audit needs the model with its decoder head ({type(model).__name__} has none): load it with "
            f"{family.head_of_config(model.config).auto_class}"
        )
    return adapter_class_for(family.model_type, family.head_of_model(model).kind)(model, **options)


__all__ = [
    "ADAPTERS",
    "AttractorAdapter",
    "AttractorPuzzleAdapter",
    "EqRAdapter",
    "LoopAdapter",
    "LoopRun",
    "LoopedLMAdapter",
    "NativeLoopAdapter",
    "OuroAdapter",
    "PHDEQAdapter",
    "adapter_class_for",
    "adapter_for",
]
