"""The loop protocol: how the package drives the loop of one looped architecture, whoever wrote its classes.

Every family record (:class:`equilibria.families.Family`) holds one :class:`LoopProtocol`. The trainers, the
evaluators, lm-eval, the card and the computation audit reach a model's loop only through it:

========================  ==========================================================  ==============================
method                    what it gives                                               called by
========================  ==========================================================  ==============================
``prepare(model)``        the model ready for ``num_loops`` per call                  loading, ``train``, eval,
                                                                                      ``StarsTrainer``
``count(model, n)``       a block in which the model runs ``n`` loops by default      lm-eval, the audit
``loop_config(cfg, n)``   the config values that make a saved model run ``n`` loops   ``train``, the card
``state_width(cfg)``      the width of the loop state per position                    ``StarsTrainer``
``loop_map(model, b)``    the loop as a map ``h -> h'`` with its start                the audit, the trajectory
``decode(model, b, h)``   logits read from a loop state of our choosing               the audit
``states(model, b, n)``   the states after the first, next-to-last and last steps     the audit (fixed-step LMs)
``solve(model, b, n, z)`` a solve of the loop from its own start or from ``z``        the audit (solved loops)
========================  ==========================================================  ==============================

``model`` is a model with its head (a PEFT model's base model is reached through it); ``b`` a batch of the audit
(``input_ids`` / ``inputs``, ``attention_mask``); states are ``(batch, positions, width)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import nn

from ..modeling.loop_map import LoopMap
from ..modeling.looped_lm import as_int


class LoopStates(NamedTuple):
    """A forward of a fixed number of loop steps, as the audit reads it: the states after the first, the
    next-to-last and the last step, and what the model reports of its steps."""

    first: torch.Tensor
    previous: torch.Tensor
    last: torch.Tensor
    #: per position, the expected step at which the model exits (its exit gate), or None: every position runs every step
    exit_step: torch.Tensor | None = None
    #: the model's own logits of that forward, or None: decode ``last``
    logits: torch.Tensor | None = None


class LoopSolve(NamedTuple):
    """A forward of a solved loop (a fixed-point solve, or iterations from a start), as the audit reads it: the
    model's own start, the solved state, and what the model reports of its solve (per unit; ``None`` where it does
    not report it)."""

    start: torch.Tensor
    solved: torch.Tensor
    steps: torch.Tensor | None = None  # the solver's iterations
    converged: torch.Tensor | None = None
    diverged: torch.Tensor | None = None
    residuals: torch.Tensor | None = None  # (units, steps): each step's residual
    logits: torch.Tensor | None = None  # the model's own logits of that forward, or None: decode ``solved``


def head_model(model: nn.Module) -> nn.Module:
    """The model with its head inside ``model`` (a PEFT model's base model; otherwise ``model``)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def base_model_of(model: nn.Module) -> nn.Module:
    """The base model (the loop's owner: ``OuroModel``, ``DoryModel`` ...) of a model, with or without its head."""
    head = head_model(model)
    return getattr(head, getattr(head, "base_model_prefix", ""), head)


class LoopProtocol:
    """How the package drives one looped architecture (one subclass per architecture, declaring the ``model_type``
    values it serves). The defaults fit a model whose ``forward`` and ``generate`` take ``num_loops`` and whose
    config holds the default count under :attr:`loops_key`."""

    model_types: tuple[str, ...] = ()
    #: the config key of the default loop count
    loops_key = "num_loops"
    #: the smallest count ``forward`` accepts (0: the backbone / initialiser alone)
    min_loops = 1
    #: what one step of the loop is called (the audit's report)
    step_name = "loop step"

    # -- the loop count -----------------------------------------------------------------------------------------

    def default_loops(self, config) -> int:
        return int(getattr(config, self.loops_key))

    def loop_config(self, config, num_loops: int) -> dict:
        """The config values that make a forward run ``num_loops`` loops."""
        return {self.loops_key: num_loops}

    def check_count(self, num_loops) -> int:
        """``num_loops`` as an int, or a ``ValueError`` unless it is an integer >= :attr:`min_loops` (the modeling
        files' one rule, :func:`~equilibria.modeling.looped_lm.as_int`: a one-element integer tensor passes)."""
        return as_int(num_loops, "num_loops", self.min_loops, "loops for this call")

    @contextlib.contextmanager
    def extra_settings(self, base: nn.Module, num_loops: int) -> Iterator[None]:
        """Anything besides the config that a forward with ``num_loops`` loops needs (default: nothing)."""
        yield

    @contextlib.contextmanager
    def running(self, model: nn.Module, num_loops: int | None) -> Iterator[int]:
        """Within the block, ``model`` (head or base model: they share the config) runs ``num_loops`` loops by
        default, in ``forward`` and ``generate`` (``None``: the config's count); the config is restored on leaving.
        Yields the count."""
        config = model.config
        if num_loops is None:
            yield self.default_loops(config)
            return
        values = self.loop_config(config, self.check_count(num_loops))
        kept = {key: getattr(config, key) for key in values}
        try:
            for key, value in values.items():
                setattr(config, key, value)
            with self.extra_settings(base_model_of(model), num_loops):
                yield num_loops
        finally:
            for key, value in kept.items():
                setattr(config, key, value)

    def prepare(self, model: nn.Module) -> nn.Module:
        """``model``, ready to take ``num_loops`` per call in ``forward`` and ``generate`` (default: it is)."""
        return model

    # -- the loop's state ---------------------------------------------------------------------------------------

    def state_width(self, config) -> int:
        """The width of the loop state per position."""
        return int(config.hidden_size)

    def loop_map(self, model: nn.Module, batch: dict, generator: torch.Generator | None = None) -> LoopMap:
        """``(f, h_0)``: one step of the loop for this batch's inputs as a function of the state alone (as the model
        runs it), and the state the loop starts from (``generator``: for a random start)."""
        ids = batch.get("input_ids", batch.get("inputs"))
        return base_model_of(model).loop_map(ids, attention_mask=batch.get("attention_mask"))

    def decode(self, model: nn.Module, batch: dict, state: torch.Tensor) -> torch.Tensor:
        """The logits the model's head reads from ``state`` in place of its loop's last state."""
        raise NotImplementedError(f"{type(self).__name__} does not decode a state")

    def states(self, model: nn.Module, batch: dict, num_loops: int) -> LoopStates:
        """A forward of ``num_loops`` loop steps without an early exit, as the audit reads it."""
        raise NotImplementedError(f"{type(self).__name__} runs no fixed number of steps")

    def solve(
        self,
        model: nn.Module,
        batch: dict,
        num_loops: int,
        start: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> LoopSolve:
        """The loop solved with a budget of ``num_loops`` from the model's own start (``generator``: for a random
        one) or from ``start``, as the audit reads it."""
        raise NotImplementedError(f"{type(self).__name__} solves no loop")

    @property
    def runs_fixed_steps(self) -> bool:
        """Whether the protocol gives :meth:`states` (a loop of a fixed number of steps, audited as one)."""
        return type(self).states is not LoopProtocol.states


__all__ = ["LoopProtocol", "LoopSolve", "LoopStates", "base_model_of", "head_model"]
