"""The loop protocols of the package's own families, with what their models already have: ``num_loops`` in
``forward`` and ``generate``, a base model's ``loop_map`` and, per family, the read-out its head applies to a state
(Ouro's ``readout`` and exit gate, the Attractor's final norm, EqR's ``answer_state``, PH-DEQ's ``decode``)."""

from __future__ import annotations

import torch

from ..modeling.configuration_attractor import AttractorConfig
from ..modeling.configuration_eqr import EqRConfig
from ..modeling.configuration_ouro import OuroConfig
from ..modeling.configuration_phdeq import PHDEQConfig
from ..modeling.loop_map import LoopMap
from ..modeling.modeling_ouro import exit_distribution
from ..modeling.solvers import fixed_point, solver_options
from .protocol import LoopProtocol, LoopSolve, LoopStates, base_model_of, head_model


class OuroLoop(LoopProtocol):
    """Ouro: the shared decoder stack looped ``total_ut_steps`` times; a state is read by the final norm (unless
    the steps already norm it) and the LM head, and the exit gate reads every step's state but the last."""

    model_types = (OuroConfig.model_type,)
    loops_key = "total_ut_steps"

    def decode(self, model, batch, state):
        return head_model(model).lm_head(base_model_of(model).readout(state))

    def states(self, model, batch, num_loops):
        """The steps ``h_{t+1} = f(h_t)`` of the loop map from ``h_1``, every token through every step (the config's
        early-exit threshold is not applied), with the expected exit step under the exit gate."""
        base = base_model_of(model)
        loop = self.loop_map(model, batch)
        first = loop(loop.start)
        previous, last, gate_logits = first, first, []
        for _ in range(1, num_loops):
            gate_logits.append(base.exit_logit(last))  # the gate reads every step's state but the last
            previous, last = last, loop(last)
        exit_probs = exit_distribution(gate_logits, last)
        steps = torch.arange(1, exit_probs.shape[-1] + 1, dtype=torch.float64, device=exit_probs.device)
        return LoopStates(first, previous, last, exit_step=(exit_probs.double() * steps).sum(-1))


class AttractorLoop(LoopProtocol):
    """The Attractor: a backbone's proposal refined by a weight-tied module solved to a fixed point; a state is read
    by the final norm and the head (the LM head, or the puzzle head's per-cell answers)."""

    model_types = (AttractorConfig.model_type,)
    min_loops = 0

    def decode(self, model, batch, state):
        return head_model(model).lm_head(base_model_of(model).norm(state))

    def solve(self, model, batch, num_loops, start=None, generator=None):
        """The fixed point of the loop map from the backbone's proposal ``y0`` (or ``start``) by the config's solver,
        at its tolerance, with at most ``num_loops`` iterations (a fresh solve, whatever gradient mode the model
        trains with)."""
        config = head_model(model).config
        f, y0 = self.loop_map(model, batch)
        begin = y0 if start is None else start.view_as(y0)
        solved, stats = fixed_point(
            f, begin, max_iter=num_loops, tol=float(config.solver_tol), **solver_options(config)
        )
        return LoopSolve(y0, solved, stats.steps.double(), stats.converged, stats.diverged)


class EqRLoop(LoopProtocol):
    """EqR: a weight-tied block iterated from a random or learned start; a state (per cell) is read by the answer
    head (``answer_state``: the two-level recurrence's high-level part)."""

    model_types = (EqRConfig.model_type,)

    def loop_map(self, model, batch, generator=None) -> LoopMap:
        return base_model_of(model).loop_map(batch["inputs"], generator=generator)

    def decode(self, model, batch, state):
        return head_model(model).lm_head(base_model_of(model).answer_state(state))

    def solve(self, model, batch, num_loops, start=None, generator=None):
        """``num_loops`` iterations without noise from the model's own start (random, drawn with ``generator``, or
        learned) or from ``start`` (``(puzzles, cells, width)``, or flattened per puzzle), with each step's residual."""
        inputs = batch["inputs"]
        num, cells = inputs.shape
        if start is None:
            begin = base_model_of(model).initial_state(num, cells, generator=generator).detach()
        else:
            begin = start.view(num, cells, -1)
        out = model(inputs, state=begin, num_loops=num_loops, noise=0.0)
        return LoopSolve(begin, out.state, residuals=out.residuals, logits=out.logits)


class PHDEQLoop(LoopProtocol):
    """The port-Hamiltonian DEQ: damped Hamiltonian dynamics solved to an equilibrium; a state (one per example,
    ``(batch, 2 * hidden_size)``) is read by the classifier, with the encoded context where the model has a
    direct path."""

    model_types = (PHDEQConfig.model_type,)
    min_loops = 0

    def loop_map(self, model, batch, generator=None) -> LoopMap:
        return base_model_of(model).loop_map(batch["inputs"].float(), attention_mask=batch.get("attention_mask"))

    def state_width(self, config) -> int:
        return 2 * int(config.hidden_size)

    def decode(self, model, batch, state):
        context = base_model_of(model).encode(batch["inputs"].float(), batch.get("attention_mask"))
        return head_model(model).decode(state, context)

    def solve(self, model, batch, num_loops, start=None, generator=None):
        """The model's own forward: its solver from the initialiser's proposal (or ``start``), at most ``num_loops``
        iterations."""
        inputs, mask = batch["inputs"].float(), batch.get("attention_mask")
        out = model(inputs, attention_mask=mask, num_loops=num_loops, initial_state=start)
        steps = out.solver_steps.double()
        return LoopSolve(out.start_state, out.solved_state, steps, out.converged, out.diverged, logits=out.logits)


__all__ = ["AttractorLoop", "EqRLoop", "OuroLoop", "PHDEQLoop"]
