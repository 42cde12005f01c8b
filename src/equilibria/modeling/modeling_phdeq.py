"""The port-Hamiltonian deep equilibrium model (PH-DEQ): a DEQ whose state is a point ``z = (q, p)`` in phase
space, solved for the equilibrium of damped, anchored, context-driven Hamiltonian dynamics (one symplectic-Euler
step is the map ``f``), from a start ``z_0`` proposed by a learned feed-forward initialiser; a decoder reads the
equilibrium ``h* = z*`` and, optionally, the context directly.

It is the model in which a published study found "lazy identity collapse": with a learned initialiser and a
decoder that can read the context around the solver, training can settle where ``h* = z_0`` and the loop computes
nothing. ``equilibria.diagnostics.audit`` tests for that; this model exposes what the audit needs: the start and
solved states in every output, ``initial_state=`` to start the solver elsewhere and ``solved_state=`` to decode
a state of your choice.

This module travels to the Hub as remote code: it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutput, SequenceClassifierOutput
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import can_return_tuple

from .checkpoints import StrictLoadingMixin
from .configuration_phdeq import PHDEQConfig
from .loop_map import LoopMap
from .looped_lm import as_int, check_keywords, shared_fields
from .solvers import GRADIENT_MODES, SolverTelemetry, check_tol, fixed_point, solver_options


def check_budget(value, name: str = "num_loops") -> int:
    return as_int(value, name, 0, "the solver's iteration budget; 0 decodes the initialiser's z0")


@dataclass
class PHDEQModelOutput(SolverTelemetry, BaseModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, 2 * hidden_size)`): the solved state ``h* = (q*, p*)``.
    start_state (`torch.FloatTensor` of shape `(batch, 2 * hidden_size)`): the solver's start ``z_0``.
    context (`torch.FloatTensor` of shape `(batch, hidden_size)`): the encoded input ``c``.
    solver_steps, abs_residual, rel_residual, converged, diverged, backward_steps, backward_rel_residual: the
        solver's telemetry per example ([`~solvers.SolverTelemetry`]).
    """

    start_state: torch.FloatTensor | None = None
    context: torch.FloatTensor | None = None


@dataclass
class PHDEQClassifierOutput(SolverTelemetry, SequenceClassifierOutput):
    r"""
    loss (`torch.FloatTensor`): ``task_loss + initializer_loss_weight * initializer_loss`` when ``labels`` are
        given.
    task_loss (`torch.FloatTensor`): cross-entropy of the logits.
    initializer_loss (`torch.FloatTensor`): ``mean((z_0 - sg(h*))^2)``, the amortisation loss of the learned
        initialiser (``None`` when it is not trained).
    logits (`torch.FloatTensor` of shape `(batch, num_labels)`).
    solved_state, start_state, context and the solver telemetry: as in [`PHDEQModelOutput`] (``solved_state`` is
        its ``last_hidden_state``; with ``solved_state=`` given, no solve runs and the telemetry is ``None``).
    """

    task_loss: torch.FloatTensor | None = None
    initializer_loss: torch.FloatTensor | None = None
    solved_state: torch.FloatTensor | None = None
    start_state: torch.FloatTensor | None = None
    context: torch.FloatTensor | None = None


class PHDEQPreTrainedModel(StrictLoadingMixin, PreTrainedModel):
    config_class = PHDEQConfig
    config: PHDEQConfig
    main_input_name = "inputs"
    _head_weight_prefixes = ("classifier.",)
    _remote_auto_map = {
        "AutoConfig": "configuration_phdeq.PHDEQConfig",
        "AutoModel": "modeling_phdeq.PHDEQModel",
        "AutoModelForSequenceClassification": "modeling_phdeq.PHDEQForSequenceClassification",
    }

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):  # fan-in scaled: these are small MLPs, not a deep residual stream
            init.normal_(module.weight, std=module.in_features**-0.5)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, PHDEQModel):
            init.constant_(module.potential_scale, float(self.config.potential_scale_init))


def _mlp(config: PHDEQConfig, n_in: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n_in, config.intermediate_size), ACT2FN[config.hidden_act], nn.Linear(config.intermediate_size, n_out)
    )


class PHDEQModel(PHDEQPreTrainedModel):
    """Context encoder, initialiser and the port-Hamiltonian equilibrium layer. Returns [`PHDEQModelOutput`]."""

    def __init__(self, config: PHDEQConfig):
        super().__init__(config)
        d, k = config.hidden_size, config.intermediate_size
        self.input_proj = nn.Linear(config.input_size, k)
        self.context_out = nn.Sequential(ACT2FN[config.hidden_act], nn.Linear(k, d), nn.LayerNorm(d))
        self.initializer = _mlp(config, d, 2 * d) if config.initializer == "learned" else None
        # potential sum_i a_i log cosh(w_i . q + u_i . c + b_i): its q-gradient is W^T (a * tanh(W q + U c + b))
        self.potential_q = nn.Linear(d, k)
        self.potential_c = nn.Linear(d, k, bias=False)
        self.potential_scale = nn.Parameter(torch.full((k,), float(config.potential_scale_init)))
        # the input port: a constant force B c + b on p (none in the start-anchored reading)
        self.port = nn.Linear(d, d) if config.dynamics == "port_driven" else None
        self.post_init()

    def encode(self, inputs: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The context ``c``: each input vector projected, mean-pooled over the unmasked ones, then an MLP."""
        if not isinstance(inputs, torch.Tensor) or not inputs.is_floating_point() or inputs.dim() not in (2, 3):
            raise ValueError(
                "inputs must be a float tensor of shape (batch, input_size) or (batch, num_vectors, input_size), "
                f"got {getattr(inputs, 'dtype', type(inputs).__name__)} {tuple(getattr(inputs, 'shape', ()))}"
            )
        if inputs.shape[-1] != self.config.input_size:
            raise ValueError(
                f"inputs have {inputs.shape[-1]} features, the config says input_size={self.config.input_size}"
            )
        x = inputs if inputs.dim() == 3 else inputs[:, None]
        hidden = self.input_proj(x.to(self.input_proj.weight.dtype))
        if attention_mask is None:
            pooled = hidden.mean(dim=1)
        else:
            if attention_mask.shape != x.shape[:2]:
                raise ValueError(
                    f"attention_mask must have shape {tuple(x.shape[:2])}, got {tuple(attention_mask.shape)}"
                )
            weights = attention_mask.to(hidden.dtype)[..., None]
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        return self.context_out(pooled)

    def start(self, context: torch.Tensor) -> torch.Tensor:
        """``z_0``: the initialiser's proposal (``initializer="learned"``) or zeros."""
        if self.initializer is None:
            return context.new_zeros(context.shape[0], 2 * self.config.hidden_size)
        return self.initializer(context)

    def anchor_centre(self, z0: torch.Tensor) -> torch.Tensor | None:
        """The anchor's centre ``q_a``: None for the origin, else the ``q`` half of the initialiser's ``z_0``
        (detached with ``config.stop_initializer_gradient``)."""
        if self.config.anchor_target == "origin":
            return None
        centre = z0[..., : self.config.hidden_size]
        return centre.detach() if self.config.stop_initializer_gradient else centre

    def _dynamics(self, context: torch.Tensor, centre: torch.Tensor | None = None, start: torch.Tensor | None = None):
        """``f(., c)``: one damped symplectic-Euler step of the dynamics for these contexts. Port-driven: anchored
        at ``centre`` (the origin when None). ``dynamics="start_anchored"``: no drive, the anchor and the friction
        centred at the solver's ``start`` (see [`PHDEQConfig`])."""
        h, gamma, kappa = float(self.config.step_size), float(self.config.friction), float(self.config.anchor)
        anchored = self.config.dynamics == "start_anchored"
        drive = 0.0 if anchored else self.port(context)
        bias = self.potential_c(context)
        weight, scale = self.potential_q.weight, self.potential_scale
        # the centres of q and p: the start's in the start-anchored reading; else the anchor's centre and 0
        q_c, p_c = start.chunk(2, dim=-1) if anchored else (centre, 0.0)

        def f(z: torch.Tensor) -> torch.Tensor:
            q, p = z.chunk(2, dim=-1)
            offset = q if q_c is None else q - q_c
            grad_q = kappa * offset + (scale * torch.tanh(self.potential_q(q) + bias)) @ weight
            p_next = p + h * (drive - grad_q - gamma * (p - p_c))
            return torch.cat([q + h * (p_next - p_c), p_next], dim=-1)

        return f

    def _noisy(self, start: torch.Tensor) -> torch.Tensor:
        """In training, ``start`` plus Gaussian noise of expected norm ``start_noise * |start|`` per example."""
        scale = float(self.config.start_noise)
        if not self.training or scale == 0.0:
            return start
        size = start.shape[-1] ** 0.5
        return start + torch.randn_like(start) * (scale * start.detach().norm(dim=-1, keepdim=True) / size)

    def loop_map(self, inputs: torch.Tensor, attention_mask: torch.Tensor | None = None) -> LoopMap:
        """``(f, z_0)``: one step of the dynamics for these inputs' contexts as a function of the state alone,
        and the initialiser's start (for the solver, Jacobian analysis and the audit)."""
        context = self.encode(inputs, attention_mask)
        z0 = self.start(context)
        return LoopMap(self._dynamics(context, self.anchor_centre(z0), start=z0), z0)

    @can_return_tuple
    def forward(
        self,
        inputs: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        num_loops: int | None = None,
        solver_tol: float | None = None,
        gradient_mode: str | None = None,
        initial_state: torch.Tensor | None = None,
        **kwargs,
    ) -> PHDEQModelOutput:
        r"""Encode, propose ``z_0`` and solve for the equilibrium.

        Args:
            inputs (`torch.FloatTensor` of shape `(batch, input_size)` or `(batch, num_vectors, input_size)`).
            attention_mask (`torch.Tensor` of shape `(batch, num_vectors)`, *optional*): which vectors to pool.
            num_loops (`int`, *optional*): The solver's iteration budget (>= 0); default ``config.num_loops``.
            solver_tol (`float`, *optional*): Relative-residual tolerance; default ``config.solver_tol``.
            gradient_mode (`str`, *optional*): ``"implicit"``, ``"one_step"`` or ``"unrolled"``; default
                ``config.gradient_mode`` (it matters only with gradients enabled).
            initial_state (`torch.Tensor` of shape `(batch, 2 * hidden_size)`, *optional*): start the solver here
                instead of at the initialiser's ``z_0`` (the output's ``start_state`` and, with
                ``anchor_target="initializer"``, the anchor's centre stay the initialiser's; no start noise).
        """
        check_keywords(self, kwargs)
        config = self.config
        budget = check_budget(config.num_loops if num_loops is None else num_loops)
        tol = check_tol(config.solver_tol if solver_tol is None else solver_tol, "solver_tol")
        mode = config.gradient_mode if gradient_mode is None else gradient_mode
        if mode not in GRADIENT_MODES:
            raise ValueError(f"gradient_mode must be one of {GRADIENT_MODES}, got {mode!r}")
        context = self.encode(inputs, attention_mask)
        z0 = self.start(context)
        if initial_state is not None:
            if initial_state.shape != z0.shape:
                raise ValueError(f"initial_state must have shape {tuple(z0.shape)}, got {tuple(initial_state.shape)}")
            start = initial_state.to(z0.dtype)
        else:
            start = self._noisy(z0.detach() if config.stop_initializer_gradient else z0)
        f = self._dynamics(context, self.anchor_centre(z0), start=start)
        h_star, stats = fixed_point(f, start, max_iter=budget, tol=tol, mode=mode, **solver_options(config))
        return PHDEQModelOutput(last_hidden_state=h_star, start_state=z0, context=context, **stats.telemetry())


class PHDEQForSequenceClassification(PHDEQPreTrainedModel):
    """[`PHDEQModel`] with a decoder that reads ``h*`` (and the context, with ``config.direct_path``) and
    classifies. Registered for ``AutoModelForSequenceClassification``."""

    _auto_class = "AutoModelForSequenceClassification"
    accepts_loss_kwargs = False  # the loss is a per-batch mean: the Trainer scales it for accumulation

    def __init__(self, config: PHDEQConfig):
        super().__init__(config)
        self.model = PHDEQModel(config)
        width = 2 * config.hidden_size + (config.hidden_size if config.direct_path else 0)
        self.classifier = _mlp(config, width, config.num_labels)
        self.post_init()

    def decode(self, solved_state: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Logits from a solved state (``(batch, 2 * hidden_size)``) and the context (read only with
        ``config.direct_path``): the decoder alone, for the audit's substitution and zeroing tests."""
        features = torch.cat([solved_state, context], dim=-1) if self.config.direct_path else solved_state
        return self.classifier(features)

    @can_return_tuple
    def forward(
        self,
        inputs: torch.Tensor,
        labels: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        num_loops: int | None = None,
        solver_tol: float | None = None,
        gradient_mode: str | None = None,
        initial_state: torch.Tensor | None = None,
        solved_state: torch.Tensor | None = None,
        **kwargs,
    ) -> PHDEQClassifierOutput:
        r"""Solve and classify; with ``labels`` (``(batch,)``) also the losses. ``solved_state`` (``(batch,
        2 * hidden_size)``) skips the solver and decodes that state instead (the audit's substitution test);
        see [`PHDEQModel.forward`] for the other arguments."""
        check_keywords(self, kwargs)
        if solved_state is not None:
            context = self.model.encode(inputs, attention_mask)
            z0 = self.model.start(context)
            if solved_state.shape != z0.shape:
                raise ValueError(f"solved_state must have shape {tuple(z0.shape)}, got {tuple(solved_state.shape)}")
            outputs = PHDEQModelOutput(last_hidden_state=solved_state.to(z0.dtype), start_state=z0, context=context)
        else:
            outputs = self.model(
                inputs,
                attention_mask=attention_mask,
                num_loops=num_loops,
                solver_tol=solver_tol,
                gradient_mode=gradient_mode,
                initial_state=initial_state,
            )
        logits = self.decode(outputs.last_hidden_state, outputs.context)
        loss = task_loss = init_loss = None
        if labels is not None:
            if labels.dim() != 1 or labels.shape[0] != logits.shape[0]:
                raise ValueError(f"labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}")
            task_loss = self.loss_function(labels=labels.long(), pooled_logits=logits.float(), config=self.config)
            loss = task_loss
            weight = float(self.config.initializer_loss_weight)
            if self.model.initializer is not None and weight > 0 and solved_state is None:
                target = outputs.last_hidden_state.detach()
                init_loss = (outputs.start_state.float() - target.float()).pow(2).mean()
                loss = loss + weight * init_loss
        return PHDEQClassifierOutput(
            loss=loss,
            task_loss=task_loss,
            initializer_loss=init_loss,
            logits=logits,
            solved_state=outputs.last_hidden_state,
            **shared_fields(outputs, PHDEQClassifierOutput),
        )


__all__ = [
    "PHDEQClassifierOutput",
    "PHDEQForSequenceClassification",
    "PHDEQModel",
    "PHDEQModelOutput",
    "PHDEQPreTrainedModel",
]
