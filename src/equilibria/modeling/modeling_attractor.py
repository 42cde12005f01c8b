"""The Attractor model (Fein-Ashley and Rashidinejad, 2026, "Solve the Loop: Attractor Models for Language and
Reasoning"): a language model and a puzzle solver.

A backbone of ordinary decoder layers maps the tokens to a proposal ``y0``; a weight-tied attractor module ``T``
refines it to the fixed point ``y* = T(y*, y0)``, found by a solver (Anderson acceleration or Picard iteration)
within an iteration budget ``num_loops``. The proposal is injected at every step, ``x = inject(y, y0)`` (added,
or concatenated and projected), so the fixed point depends on the input. ``config.residual_form`` chooses ``T``:

    "paper":  T(y, y0) = y0 + U(x),                               U(x) = layers(x) - x
    "gated":  T(y, y0) = y0 + gate * rms(y0) * norm(layers(x))
    "deq":    T(y, y0) = U(x), solved from y = 0                  (a control: a plain DEQ)

The paper's map adds the attractor layers' residual update to the proposal (its code writes it
``FPHead(y + y0) - y``): where the update vanishes the proposal is the fixed point, so training can move the
proposal onto it. The gated form is this package's earlier one: ``norm`` is a parameter-free RMS normalisation and
``gate`` a per-channel step size relative to the proposal's scale, which keeps ``T`` contractive but holds the
fixed point at a relative distance of about ``|gate|`` from the proposal. ``"deq"`` is the control the paper
compares with: the backbone's output only injected, the solve started from zero. The heads read ``final_norm(y*)``; with
``num_loops=0`` they read ``final_norm(y0)`` (the backbone alone; the zero start for ``"deq"``). [`AttractorForCausalLM`] attends causally,
[`AttractorForPuzzleSolving`] bidirectionally over a puzzle's cells (``config.is_causal``).

Training differentiates through the equilibrium without storing the solver's iterations (``gradient_mode``):
the one-step gradient of ``T`` at the detached fixed point, or the exact implicit gradient (a backward
fixed-point solve); ``"unrolled"`` backpropagates through every iteration, as the baseline.

Generation with a KV cache: past positions keep the keys/values of their converged states; the new position
is solved while attending to them (without appending), and its keys/values are appended once, at the solution.
With causal attention a prefix's fixed point does not depend on later tokens, so cached and uncached
generation agree once the solver has converged.

This module travels to the Hub as remote code: it imports only torch, transformers and its siblings.

The file reads in call order: the outputs, the cache, the attractor module, the model (its ``forward`` runs the
backbone and the solve), then the two heads. From ``input_ids`` to logits a forward uses this file, ``layers`` (norm,
rotary embedding, attention, MLP, decoder layer), ``looped_lm`` (the input preamble and argument checks the looped
LMs share) and ``solvers`` (the fixed-point entry and Anderson's method).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast, TokenClassifierOutput
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import can_return_tuple

from .checkpoints import StrictLoadingMixin
from .compat import MASK_CACHE_KEYWORD, OUTPUT_CACHE_FIELD
from .configuration_attractor import AttractorConfig
from .layers import DecoderLayer, LayerScale, RMSNorm, RotaryEmbedding
from .loop_map import LoopMap
from .looped_lm import (
    LOSS_KWARGS,
    LoopedLMBase,
    LoopedLMHead,
    ReadOnlyCache,
    TelemetryCache,
    as_int,
    head_loss,
    keep_positions,
    recorded_calls,
    recording_attentions,
    shared_fields,
)
from .puzzles import check_puzzle_labels, puzzle_inputs
from .regularization import IterateSampler, hutchinson_frobenius
from .solvers import GRADIENT_MODES, SolverTelemetry, check_tol, fixed_point, solver_options


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Root mean square over the last dimension (computed in at least float32), keeping that dimension."""
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    return (wide.pow(2).mean(-1, keepdim=True) + eps).sqrt().to(x.dtype)


# --------------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------------


@dataclass
class AttractorModelOutput(SolverTelemetry, BaseModelOutputWithPast):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`):
        ``final_norm(y*)``: the normalised fixed point (the solver's start when ``num_loops=0``: the proposal, zero for
        ``residual_form="deq"``).
    hidden_states (`tuple(torch.FloatTensor)`, returned with `output_hidden_states=True`):
        The embeddings, the output of every backbone layer (the last is the proposal ``y0``), then the fixed
        point ``y*`` (before the final norm).
    attentions (`tuple(torch.FloatTensor)`, returned with `output_attentions=True` and the eager attention):
        The attention weights ``(batch, heads, seq_len, key_len)`` of every backbone layer, then of every attractor
        layer in the application of ``T`` at the solution (the solver's iterations are not kept; none when
        ``num_loops=0``).
    proposal (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`):
        The backbone's proposal ``y0`` (the solver's start), before the final norm.
    solver_steps, abs_residual, rel_residual, converged, diverged, backward_steps, backward_rel_residual:
        the solver's telemetry per sequence ([`~solvers.SolverTelemetry`]); ``None`` when ``num_loops=0``.
    jacobian_penalty (`torch.FloatTensor`, scalar): with ``jacobian_samples > 0``, the Hutchinson estimate of
        ``||dT/dy||_F^2`` at the fixed point, per state entry (differentiable).
    correction_states (`tuple(torch.FloatTensor)`): with ``correction_states > 0``, ``T`` applied to
        intermediate iterates of the solve (one-step graph), for the fixed-point correction loss.
    """

    proposal: torch.FloatTensor | None = None
    jacobian_penalty: torch.FloatTensor | None = None
    correction_states: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class AttractorCausalLMOutput(SolverTelemetry, CausalLMOutputWithPast):
    r"""Causal-LM output with the solver telemetry of [`AttractorModelOutput`] (`proposal`, `solver_steps`,
    `abs_residual`, `rel_residual`, `converged`, `diverged`, `backward_steps`, `backward_rel_residual`,
    `jacobian_penalty`), and `correction_loss`: the mean LM loss of the logits read from the correction states
    (with ``labels`` and ``correction_states > 0``)."""

    proposal: torch.FloatTensor | None = None
    jacobian_penalty: torch.FloatTensor | None = None
    correction_loss: torch.FloatTensor | None = None


@dataclass
class AttractorPuzzleOutput(SolverTelemetry, TokenClassifierOutput):
    r"""Per-cell answers of [`AttractorForPuzzleSolving`]: ``logits`` ``(batch, cells, vocab_size)`` read from the
    fixed point, with ``labels`` the per-cell cross-entropy ``loss`` (cells labelled -100 skipped), the solver
    telemetry and regularisers of [`AttractorModelOutput`] (`proposal`, `solver_steps`, `abs_residual`,
    `rel_residual`, `converged`, `diverged`, `backward_steps`, `backward_rel_residual`, `jacobian_penalty`) and
    `correction_loss` (as in [`AttractorCausalLMOutput`], per cell)."""

    proposal: torch.FloatTensor | None = None
    jacobian_penalty: torch.FloatTensor | None = None
    correction_loss: torch.FloatTensor | None = None


# --------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------


class AttractorCache(TelemetryCache):
    """A dynamic KV cache for [`AttractorForCausalLM`] (one entry per backbone and attractor layer) that also
    records, per cached position, the solver's telemetry of the forward that computed it:

    * ``solver_steps`` (``(batch, seq_len)`` LongTensor): iterations the solver ran;
    * ``converged`` (``(batch, seq_len)`` BoolTensor): whether it reached the tolerance.

    A prefill solves all its positions together, so they share one value. After
    ``generate(..., cache=AttractorCache(), return_dict_in_generate=True)`` these are ``outputs.cache.solver_steps``
    and ``outputs.cache.converged`` (``generate``'s own ``DynamicCache`` works too, without them).
    """

    telemetry_names = ("solver_steps", "converged")
    solver_steps: torch.Tensor | None = None
    converged: torch.Tensor | None = None


# --------------------------------------------------------------------------------------------------
# The attractor module
# --------------------------------------------------------------------------------------------------


class AttractorModule(nn.Module):
    """The weight-tied map ``T(y, y0)`` with ``x = inject(y, y0)``: ``y0 + layers(x) - x`` (``residual_form="paper"``:
    the proposal plus the layers' residual update), ``y0 + gate * rms(y0) * norm(layers(x))`` (``"gated"``) or
    ``layers(x) - x`` from a zero start (``"deq"``: the proposal is only an input injection)."""

    def __init__(self, config: AttractorConfig):
        super().__init__()
        self.injection = config.injection
        self.eps = config.rms_norm_eps
        hidden = config.hidden_size
        self.in_proj = nn.Linear(2 * hidden, hidden, bias=False) if config.injection == "concat" else None
        first = config.num_backbone_layers
        scale = None if config.layer_scale_init is None else (config.layer_scale_init, config.layer_scale_max)
        self.layers = nn.ModuleList(
            [DecoderLayer(config, first + i, layer_scale=scale) for i in range(config.num_attractor_layers)]
        )
        self.form = config.residual_form
        if config.residual_form == "gated":
            self.gate = nn.Parameter(torch.full((hidden,), float(config.attractor_gate_init)))
        else:
            self.register_parameter("gate", None)

    def forward(
        self,
        y: torch.Tensor,
        y0: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        cache: Cache | ReadOnlyCache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        x = y + y0 if self.in_proj is None else self.in_proj(torch.cat([y, y0], dim=-1))
        h = x
        for layer in self.layers:
            h = layer(h, attention_mask=attention_mask, position_embeddings=position_embeddings, cache=cache, **kwargs)
        if self.form == "gated":
            return y0 + self.gate * _rms(y0, self.eps) * (h / _rms(h, self.eps))
        return h - x if self.form == "deq" else y0 + (h - x)


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------


class AttractorPreTrainedModel(StrictLoadingMixin, PreTrainedModel):
    config_class = AttractorConfig
    _weight_shaping_keys = ("residual_form", "injection", "layer_scale_init")
    config: AttractorConfig
    supports_gradient_checkpointing = True
    _no_split_modules = ["DecoderLayer"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_attention_backend = True
    _remote_auto_map = {
        "AutoConfig": "configuration_attractor.AttractorConfig",
        "AutoModel": "modeling_attractor.AttractorModel",
        "AutoModelForCausalLM": "modeling_attractor.AttractorForCausalLM",
        "AutoModelForTokenClassification": "modeling_attractor.AttractorForPuzzleSolving",
    }

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LayerScale):
            init.constant_(module.logit, module.initial_logit)
        if isinstance(module, AttractorModule):
            if module.gate is not None:
                init.constant_(module.gate, float(self.config.attractor_gate_init))
            if module.in_proj is not None:  # [I I]: concatenation starts out as addition
                hidden = self.config.hidden_size
                eye = torch.eye(hidden, dtype=module.in_proj.weight.dtype, device=module.in_proj.weight.device)
                init.copy_(module.in_proj.weight, torch.cat([eye, eye], dim=1))


class _SolveOptions(NamedTuple):
    budget: int
    tol: float
    gradient_mode: str
    jacobian_samples: int
    correction_states: int


def config_for_head(config: AttractorConfig, causal: bool, head: str) -> AttractorConfig:
    """``config`` with its attention settled: itself when ``is_causal`` is already ``causal``, a copy with
    ``is_causal=causal`` when it is unset (the caller's object is left as it was: another head may read it), else
    ``ValueError`` (a folder saved by the other head). transformers' mask functions read an unset ``is_causal`` as
    bidirectional, so no model runs with it unset."""
    if config.is_causal is None:
        config = copy.deepcopy(config)
        config.is_causal = causal
        return config
    if bool(config.is_causal) != causal:
        other = "AttractorForPuzzleSolving (AutoModelForTokenClassification)"
        if not causal:
            other = "AttractorForCausalLM (AutoModelForCausalLM)"
        raise ValueError(
            f"{head} attends {'causally' if causal else 'bidirectionally'}, but this config has "
            f"is_causal={config.is_causal!r}: it belongs to {other}; load it with that class, or leave is_causal "
            "unset in a new config."
        )
    return config


def _valid_positions(attention_mask, seq_len: int) -> torch.Tensor | None:
    """The current positions' column of a 2-D padding mask (which may also cover cached positions), else None."""
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 and attention_mask.shape[1] >= seq_len:
        return attention_mask[:, -seq_len:]
    return None


class AttractorModel(LoopedLMBase, AttractorPreTrainedModel):
    """Embeddings, the backbone, the attractor solved to its fixed point, and the final norm. Returns
    [`AttractorModelOutput`]."""

    _cache_class = AttractorCache

    def __init__(self, config: AttractorConfig):
        config = config_for_head(
            config, config.is_causal is not False, type(self).__name__
        )  # unset: causal (old configs)
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.backbone = nn.ModuleList([DecoderLayer(config, i) for i in range(config.num_backbone_layers)])
        self.attractor = AttractorModule(config)
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config=config)
        self.is_causal = config.is_causal
        for layer in [*self.backbone, *self.attractor.layers]:
            layer.self_attn.is_causal = self.is_causal
        self.gradient_checkpointing = False
        self.post_init()

    def _solve_options(
        self, num_loops, solver_tol, gradient_mode, jacobian_samples, correction_states
    ) -> _SolveOptions:
        config = self.config
        gradient_mode = config.gradient_mode if gradient_mode is None else gradient_mode
        if gradient_mode not in GRADIENT_MODES:
            raise ValueError(f"gradient_mode must be one of {GRADIENT_MODES}, got {gradient_mode!r}.")
        budget = config.num_loops if num_loops is None else num_loops
        budget = as_int(budget, "num_loops", 0, "the solver's iteration budget; 0 runs the backbone alone")
        if budget == 0 and config.residual_form == "deq":
            raise ValueError(
                "num_loops=0 reads the solver's start, and the DEQ control (residual_form='deq') starts from zero: "
                "there is no proposal to read; use num_loops >= 1."
            )
        return _SolveOptions(
            budget=budget,
            tol=check_tol(config.solver_tol if solver_tol is None else solver_tol, "solver_tol"),
            gradient_mode=gradient_mode,
            jacobian_samples=as_int(jacobian_samples, "jacobian_samples", 0, "probes of the Jacobian penalty"),
            correction_states=as_int(correction_states, "correction_states", 0, "iterates for the correction loss"),
        )

    def _solve(
        self,
        step: Callable,
        readout: Callable,
        y0: torch.Tensor,
        cache: Cache | None,
        attention_mask,
        options: _SolveOptions,
    ):
        """``(y*, stats, extras)``: the fixed point with its gradient, the solver's stats (``None`` with budget 0)
        and the regularisers asked for. The iterations attend to the cache without appending; the one
        application at the solution (``readout``) appends its keys/values."""
        start = torch.zeros_like(y0) if self.config.residual_form == "deq" else y0  # the DEQ control starts at zero
        if options.budget == 0:
            return start, None, {}
        # the map the iterations apply: it attends to the cache's past without appending to it
        iteration = partial(step, cache=ReadOnlyCache(cache) if cache is not None else None)
        sampler = IterateSampler(options.correction_states) if options.correction_states else None
        y_star, stats = fixed_point(
            iteration if sampler is None else sampler.wrap(iteration),
            start,
            readout=readout,
            max_iter=options.budget,
            tol=options.tol,
            mode=options.gradient_mode,
            neumann_clip=self.config.neumann_clip,
            **solver_options(self.config),
        )
        extras = {}
        if options.jacobian_samples:
            valid = _valid_positions(attention_mask, y0.shape[1])
            extras["jacobian_penalty"] = hutchinson_frobenius(
                iteration, y_star.detach(), options.jacobian_samples, valid
            )
        if sampler is not None:
            extras["correction_states"] = tuple(iteration(z) for z in sampler.select(stats.max_steps))
        return y_star, stats, extras

    def _propose(self, inputs_embeds, attention_mask, position_ids, cache, **kwargs):
        """The backbone pass: ``(y0, mask, position_embeddings, states)`` with ``states`` the embeddings and every
        backbone layer's output. The mask is built before the backbone appends to ``cache``."""
        if self.is_causal:
            mask = create_causal_mask(
                config=self.config,
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                position_ids=position_ids,
                **{MASK_CACHE_KEYWORD: cache},
            )
        else:
            mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
            )
        position_embeddings = self.rotary_emb(inputs_embeds, position_ids)
        hidden = inputs_embeds
        states = (hidden,)
        for layer in self.backbone:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings, cache=cache, **kwargs)
            states += (hidden,)
        return hidden, mask, position_embeddings, states

    def _check_cache(self, cache: Cache, budget: int) -> None:
        if not isinstance(cache, DynamicCache):
            raise ValueError(
                f"AttractorModel needs a DynamicCache (or AttractorCache), got {type(cache).__name__}: the solver "
                "attends to the past keys/values while iterating and appends once at the solution (leave "
                "generate's cache_implementation unset)."
            )
        past = cache.get_seq_length(0)
        first_attractor = self.config.num_backbone_layers
        attractor_past = cache.get_seq_length(first_attractor)
        if budget == 0 and attractor_past > 0 and first_attractor > 0:
            raise ValueError(
                "This cache holds attractor keys/values from calls with num_loops > 0; it cannot be continued with "
                "num_loops=0 (backbone only). Use one kind of num_loops for the whole generation."
            )
        if budget > 0 and past > 0 and attractor_past != past:
            raise ValueError(
                f"This cache holds attractor keys/values for {attractor_past} of its {past} positions (it was filled "
                "with num_loops=0, backbone only); it cannot be continued with num_loops > 0. Start a new cache."
            )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        num_loops: int | None = None,
        solver_tol: float | None = None,
        gradient_mode: str | None = None,
        jacobian_samples: int = 0,
        correction_states: int = 0,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> AttractorModelOutput:
        r"""Run the backbone and solve the attractor.

        Args:
            num_loops (`int`, *optional*): The solver's iteration budget for this call (>= 0; 0 runs the
                backbone alone); defaults to ``config.num_loops``.
            solver_tol (`float`, *optional*): Relative-residual tolerance for this call (> 0); defaults to
                ``config.solver_tol``.
            gradient_mode (`str`, *optional*): ``"one_step"``, ``"implicit"`` or ``"unrolled"`` for this call
                (it matters only with gradients enabled); defaults to ``config.gradient_mode``.
            jacobian_samples (`int`): Random probes for the Hutchinson estimate of the attractor's Jacobian
                norm at the fixed point (0: not computed). The estimate is differentiable (a regulariser).
            correction_states (`int`): Iterates of the solve (the proposal and the intermediate ones, evenly spread
                over the iterations actually run; kept in constant memory), at which ``T`` is re-applied with a
                one-step graph (for the fixed-point correction loss).
        """
        options = self._solve_options(num_loops, solver_tol, gradient_mode, jacobian_samples, correction_states)
        if not self.is_causal:
            if cache is not None or use_cache:
                raise ValueError(
                    "this Attractor model attends bidirectionally (config.is_causal=False, a puzzle model): it has no "
                    "KV cache; call it without cache and with use_cache unset or False."
                )
            use_cache = False
        inputs = self.prepare_inputs(
            input_ids, inputs_embeds, cache, use_cache, position_ids, output_hidden_states, kwargs
        )
        cache = inputs.cache
        if cache is not None:
            self._check_cache(cache, options.budget)
        record = inputs.output_attentions
        backbone_attention = [layer.self_attn for layer in self.backbone]
        with recording_attentions(backbone_attention) if record else nullcontext() as attentions:
            y0, mask, position_embeddings, states = self._propose(
                inputs.inputs_embeds, attention_mask, inputs.position_ids, cache, **kwargs
            )
        step = partial(self.attractor, y0=y0, attention_mask=mask, position_embeddings=position_embeddings, **kwargs)
        readout = partial(step, cache=cache)  # the application at the solution appends to the cache
        final_attentions = [] if record else None  # of the application at the solution only
        if record:
            readout = recorded_calls(readout, [layer.self_attn for layer in self.attractor.layers], final_attentions)
        y_star, stats, extras = self._solve(step, readout, y0, cache, attention_mask, options)
        if isinstance(cache, AttractorCache):  # no solve: 0 steps, converged
            batch, seq_len = y0.shape[:2]
            steps = stats.steps if stats is not None else torch.zeros(batch, dtype=torch.long, device=y0.device)
            done = stats.converged if stats is not None else torch.ones(batch, dtype=torch.bool, device=y0.device)
            cache.record(
                solver_steps=steps[:, None].expand(batch, seq_len), converged=done[:, None].expand(batch, seq_len)
            )
        return AttractorModelOutput(
            last_hidden_state=self.norm(y_star),
            **{OUTPUT_CACHE_FIELD: cache},
            hidden_states=states + (y_star,) if inputs.output_hidden_states else None,
            attentions=tuple(attentions + final_attentions) if record else None,
            proposal=y0,
            **extras,
            **(stats.telemetry() if stats is not None else {}),
        )

    def loop_map(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
    ) -> LoopMap:
        """The attractor for these inputs as a function of the state alone, and the proposal: ``(f, y0)`` with
        ``f(y) = T(y, y0)`` (no cache). ``fixed_point(f, y0, ...)`` finds the model's fixed point,
        ``autograd.grad(f(y), y, v)`` gives vector-Jacobian products."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device).unsqueeze(0)
        y0, mask, position_embeddings, _ = self._propose(inputs_embeds, attention_mask, position_ids, None)
        f = partial(self.attractor, y0=y0, attention_mask=mask, position_embeddings=position_embeddings)
        return LoopMap(f, torch.zeros_like(y0) if self.config.residual_form == "deq" else y0)


# --------------------------------------------------------------------------------------------------
# Heads
# --------------------------------------------------------------------------------------------------


def _correction_loss(model: AttractorModel, outputs: AttractorModelOutput, loss_at: Callable) -> dict:
    """``{"correction_loss": ...}``: the mean of the head's loss (``loss_at(hidden)[1]``) on the logits read from
    ``T`` at the correction states (``forward`` with ``labels`` and ``correction_states > 0``)."""
    losses = [loss_at(model.norm(z))[1] for z in outputs.correction_states]
    return {"correction_loss": torch.stack(losses).mean()}


class AttractorForCausalLM(LoopedLMHead, AttractorPreTrainedModel, GenerationMixin):
    """[`AttractorModel`] with a language-modelling head on the fixed point. ``forward`` and ``generate`` take
    ``num_loops`` (the solver budget, 0 = backbone only) and ``solver_tol``, ``forward`` also ``gradient_mode``,
    ``jacobian_samples`` and ``correction_states`` (see [`AttractorModel.forward`]); their defaults are in the
    config. With ``labels`` and ``correction_states > 0`` the output has ``correction_loss``, the mean of the LM loss
    on the logits read from ``T`` at intermediate iterates. Returns [`AttractorCausalLMOutput`]."""

    output_cache_field = OUTPUT_CACHE_FIELD

    _loop_defaults = {"num_loops": "num_loops", "solver_tol": "solver_tol", "gradient_mode": "gradient_mode"}

    def __init__(self, config: AttractorConfig):
        config = config_for_head(config, True, type(self).__name__)
        super().__init__(config)
        self.model = AttractorModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        output_hidden_states: bool | None = None,
        num_loops: int | None = None,
        solver_tol: float | None = None,
        gradient_mode: str | None = None,
        jacobian_samples: int = 0,
        correction_states: int = 0,
        **kwargs,
    ) -> AttractorCausalLMOutput:
        r"""The backbone and the solve ([`AttractorModel.forward`], whose are the loop arguments), then ``lm_head`` on
        the kept positions and, with ``labels``, the shifted cross-entropy (and ``correction_loss``)."""
        loss_kwargs = {key: kwargs.pop(key) for key in LOSS_KWARGS if key in kwargs}
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            num_loops=num_loops,
            solver_tol=solver_tol,
            gradient_mode=gradient_mode,
            jacobian_samples=jacobian_samples,
            correction_states=correction_states,
            **kwargs,
        )
        logits = self.lm_head(keep_positions(outputs.last_hidden_state, logits_to_keep))
        loss = None if labels is None else head_loss(self, logits, labels, loss_kwargs)
        correction = {}
        if labels is not None and outputs.correction_states:
            loss_at = partial(self.lm_logits_and_loss, labels=labels, loss_kwargs=loss_kwargs)
            correction = _correction_loss(self.model, outputs, loss_at)
        return AttractorCausalLMOutput(
            loss=loss, logits=logits, **shared_fields(outputs, AttractorCausalLMOutput), **correction
        )


class AttractorForPuzzleSolving(AttractorPreTrainedModel):
    """[`AttractorModel`] over a puzzle's cells with bidirectional attention (every cell sees every other, in the
    backbone and in the attractor) and a per-cell answer head on the fixed point; the Attractor paper's puzzle
    model (Sudoku-Extreme, Maze-Hard). One answer token per input cell: registered for
    ``AutoModelForTokenClassification``. ``forward`` takes the solve's arguments of [`AttractorModel.forward`]
    (``num_loops``: 0 reads the backbone's proposal alone). Returns [`AttractorPuzzleOutput`]."""

    _auto_class = "AutoModelForTokenClassification"

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}  # with config.tie_word_embeddings

    def __init__(self, config: AttractorConfig):
        config = config_for_head(config, False, type(self).__name__)
        super().__init__(config)
        self.loss_type = "ForMaskedLM"  # self.loss_function: per-cell cross-entropy over the vocabulary, -100 skipped
        self.model = AttractorModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        inputs: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        input_ids: torch.LongTensor | None = None,
        num_loops: int | None = None,
        solver_tol: float | None = None,
        gradient_mode: str | None = None,
        jacobian_samples: int = 0,
        correction_states: int = 0,
        output_hidden_states: bool | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> AttractorPuzzleOutput:
        r"""Propose, solve and read one answer per cell; with ``labels`` (``(batch, cells)``, -100 to skip a cell)
        also the loss (and ``correction_loss`` with ``correction_states > 0``). The puzzles come as ``inputs`` or
        ``input_ids`` (the name token-classification pipelines and collators use); there is no cache."""
        loss_kwargs = {key: kwargs.pop(key) for key in LOSS_KWARGS if key in kwargs}
        limit = self.config.max_position_embeddings
        inputs = puzzle_inputs(inputs, input_ids, self.config.vocab_size, limit, "max_position_embeddings")
        if labels is not None:
            labels = check_puzzle_labels(labels, inputs)
        outputs = self.model(
            input_ids=inputs,
            attention_mask=attention_mask,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            num_loops=num_loops,
            solver_tol=solver_tol,
            gradient_mode=gradient_mode,
            jacobian_samples=jacobian_samples,
            correction_states=correction_states,
            **kwargs,
        )
        loss_at = partial(self._logits_and_loss, labels=labels, loss_kwargs=loss_kwargs)
        logits, loss = loss_at(outputs.last_hidden_state)
        correction = (
            _correction_loss(self.model, outputs, loss_at) if labels is not None and outputs.correction_states else {}
        )
        return AttractorPuzzleOutput(
            loss=loss, logits=logits, **shared_fields(outputs, AttractorPuzzleOutput), **correction
        )

    def _logits_and_loss(self, hidden: torch.Tensor, labels, loss_kwargs: dict):
        logits = self.lm_head(hidden)
        return logits, None if labels is None else head_loss(self, logits, labels, loss_kwargs)


__all__ = [
    "AttractorCache",
    "AttractorCausalLMOutput",
    "AttractorForCausalLM",
    "AttractorForPuzzleSolving",
    "AttractorModel",
    "AttractorModelOutput",
    "AttractorPreTrainedModel",
    "AttractorPuzzleOutput",
]
