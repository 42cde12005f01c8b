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
from transformers.modeling_outputs import ModelOutput
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import can_return_tuple

from .configuration_phdeq import PHDEQ_GRADIENT_MODES, PHDEQConfig
from .loop_utils import StrictLoadingMixin, as_int
from .solvers import implicit_gradient, residual_stats, solve


def check_budget(value, name: str = "num_loops") -> int:
    return as_int(value, name, 0, "the solver's iteration budget; 0 decodes the initialiser's z0")


@dataclass
class PHDEQModelOutput(ModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, 2 * hidden_size)`): the solved state ``h* = (q*, p*)``.
    start_state (`torch.FloatTensor` of shape `(batch, 2 * hidden_size)`): the solver's start ``z_0``.
    context (`torch.FloatTensor` of shape `(batch, hidden_size)`): the encoded input ``c``.
    solver_steps (`torch.LongTensor` of shape `(batch,)`): iterations the solver ran per example.
    abs_residual, rel_residual (`torch.FloatTensor` of shape `(batch,)`): ``||f(z) - z||`` and that over
        ``||f(z)||`` at the returned state.
    converged (`torch.BoolTensor` of shape `(batch,)`): ``rel_residual <= solver_tol``.
    diverged (`torch.BoolTensor` of shape `(batch,)`): the residual became NaN/inf or grew without bound; the
        state returned is then the lowest-residual iterate the solver saw.
    """

    last_hidden_state: torch.FloatTensor | None = None
    start_state: torch.FloatTensor | None = None
    context: torch.FloatTensor | None = None
    solver_steps: torch.LongTensor | None = None
    abs_residual: torch.FloatTensor | None = None
    rel_residual: torch.FloatTensor | None = None
    converged: torch.BoolTensor | None = None
    diverged: torch.BoolTensor | None = None


@dataclass
class PHDEQClassifierOutput(ModelOutput):
    r"""
    loss (`torch.FloatTensor`): ``task_loss + initializer_loss_weight * initializer_loss`` when ``labels`` are
        given.
    task_loss (`torch.FloatTensor`): cross-entropy of the logits.
    initializer_loss (`torch.FloatTensor`): ``mean((z_0 - sg(h*))^2)``, the amortisation loss of the learned
        initialiser (``None`` when it is not trained).
    logits (`torch.FloatTensor` of shape `(batch, num_labels)`).
    solved_state, start_state, context, solver_steps, abs_residual, rel_residual, converged, diverged: as in
        [`PHDEQModelOutput`] (``solved_state`` is its ``last_hidden_state``).
    """

    loss: torch.FloatTensor | None = None
    task_loss: torch.FloatTensor | None = None
    initializer_loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    solved_state: torch.FloatTensor | None = None
    start_state: torch.FloatTensor | None = None
    context: torch.FloatTensor | None = None
    solver_steps: torch.LongTensor | None = None
    abs_residual: torch.FloatTensor | None = None
    rel_residual: torch.FloatTensor | None = None
    converged: torch.BoolTensor | None = None
    diverged: torch.BoolTensor | None = None


class PHDEQPreTrainedModel(StrictLoadingMixin, PreTrainedModel):
    config_class = PHDEQConfig
    config: PHDEQConfig
    base_model_prefix = "model"
    main_input_name = "inputs"
    supports_gradient_checkpointing = False
    _auto_class = "AutoModel"
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
        self.port = nn.Linear(d, d)  # the input port: a constant force B c + b on p
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

    def dynamics(self, context: torch.Tensor):
        """``f(., c)``: one damped symplectic-Euler step of the dynamics for these contexts, as a function of the
        state alone (for the solver, Jacobian analysis and the audit)."""
        h, gamma, kappa = float(self.config.step_size), float(self.config.damping), float(self.config.anchor)
        drive = self.port(context)
        bias = self.potential_c(context)
        weight, scale = self.potential_q.weight, self.potential_scale

        def f(z: torch.Tensor) -> torch.Tensor:
            q, p = z.chunk(2, dim=-1)
            grad_q = kappa * q + (scale * torch.tanh(self.potential_q(q) + bias)) @ weight
            p_next = p + h * (drive - grad_q - gamma * p)
            return torch.cat([q + h * p_next, p_next], dim=-1)

        return f

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
                ``config.gradient_mode`` (used only in training mode with gradients enabled).
            initial_state (`torch.Tensor` of shape `(batch, 2 * hidden_size)`, *optional*): start the solver here
                instead of at the initialiser's ``z_0`` (the output's ``start_state`` stays the initialiser's).
        """
        config = self.config
        budget = check_budget(config.num_loops if num_loops is None else num_loops)
        tol = float(config.solver_tol if solver_tol is None else solver_tol)
        if not tol > 0:
            raise ValueError(f"solver_tol must be > 0, got {solver_tol!r}")
        mode = config.gradient_mode if gradient_mode is None else gradient_mode
        if mode not in PHDEQ_GRADIENT_MODES:
            raise ValueError(f"gradient_mode must be one of {PHDEQ_GRADIENT_MODES}, got {mode!r}")
        context = self.encode(inputs, attention_mask)
        z0 = self.start(context)
        if initial_state is not None:
            if initial_state.shape != z0.shape:
                raise ValueError(f"initial_state must have shape {tuple(z0.shape)}, got {tuple(initial_state.shape)}")
            start = initial_state.to(z0.dtype)
        else:
            start = z0.detach() if config.stop_initializer_gradient else z0
        f = self.dynamics(context)
        if not (self.training and torch.is_grad_enabled()):
            mode = None  # inference: the solver's state as it is
        if mode == "unrolled" and budget > 0:
            z = start
            for _ in range(budget - 1):
                z = f(z)
            h_star = f(z)
            stats = residual_stats(z, h_star, budget, tol)
        else:
            kwargs = dict(solver=config.solver, max_iter=budget, tol=tol)
            if config.solver == "anderson":
                kwargs["memory"] = config.anderson_memory
            z_star, stats = solve(f, start.detach(), **kwargs)
            if budget == 0:
                h_star = start
            elif mode is None:
                h_star = z_star
            elif mode == "implicit":
                h_star = implicit_gradient(f, z_star, **kwargs)
            else:
                h_star = f(z_star.detach())
            if mode is not None and budget > 0 and bool(stats.diverged.any()):  # never decode f of a blown-up state
                h_star = torch.where(stats.diverged[:, None], z_star.to(h_star.dtype), h_star)
        return PHDEQModelOutput(
            last_hidden_state=h_star,
            start_state=z0,
            context=context,
            solver_steps=stats.steps,
            abs_residual=stats.abs_residual,
            rel_residual=stats.rel_residual,
            converged=stats.converged,
            diverged=stats.diverged,
        )


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
        if solved_state is not None:
            context = self.model.encode(inputs, attention_mask)
            z0 = self.model.start(context)
            if solved_state.shape != z0.shape:
                raise ValueError(f"solved_state must have shape {tuple(z0.shape)}, got {tuple(solved_state.shape)}")
            zeros = torch.zeros(z0.shape[0], dtype=torch.long, device=z0.device)
            nan = torch.full((z0.shape[0],), float("nan"), device=z0.device)
            outputs = PHDEQModelOutput(
                last_hidden_state=solved_state.to(z0.dtype),
                start_state=z0,
                context=context,
                solver_steps=zeros,
                abs_residual=nan,
                rel_residual=nan,
                converged=zeros.bool(),
                diverged=zeros.bool(),
            )
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
            task_loss = nn.functional.cross_entropy(logits.float(), labels.long())
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
            start_state=outputs.start_state,
            context=outputs.context,
            solver_steps=outputs.solver_steps,
            abs_residual=outputs.abs_residual,
            rel_residual=outputs.rel_residual,
            converged=outputs.converged,
            diverged=outputs.diverged,
        )


__all__ = [
    "PHDEQClassifierOutput",
    "PHDEQForSequenceClassification",
    "PHDEQModel",
    "PHDEQModelOutput",
    "PHDEQPreTrainedModel",
]
