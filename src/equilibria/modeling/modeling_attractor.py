"""The Attractor language model (Fein-Ashley and Rashidinejad, 2026, "Solve the Loop: Attractor Models for
Language and Reasoning").

A backbone of ordinary causal decoder layers maps the tokens to a proposal ``y0``; a weight-tied attractor
module ``T`` refines it to the fixed point

    y* = T(y*, y0),    T(y, y0) = y0 + gate * rms(y0) * norm(layers(inject(y, y0))),

found by a solver (Anderson acceleration or Picard iteration) within an iteration budget ``num_loops``. The
proposal is injected at every step (``inject`` adds it, or concatenates and projects), so the fixed point
depends on the input. ``norm`` is a parameter-free RMS normalisation and ``gate`` a per-channel step size
relative to the proposal's scale: with a small gate ``T`` is a contraction and the solver converges, whatever
the scale of the residual stream. The LM head reads ``final_norm(y*)``; with ``num_loops=0`` it reads
``final_norm(y0)`` (the backbone alone).

Training differentiates through the equilibrium without storing the solver's iterations (``gradient_mode``):
the one-step gradient of ``T`` at the detached fixed point, or the exact implicit gradient (a backward
fixed-point solve); ``"unrolled"`` backpropagates through every iteration, as the baseline.

Generation with a KV cache: past positions keep the keys/values of their converged states; the new position
is solved while attending to them (without appending), and its keys/values are appended once, at the solution.
With causal attention a prefix's fixed point does not depend on later tokens, so cached and uncached
generation agree once the solver has converged.

This module travels to the Hub as remote code: it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel, slice_logits_to_keep
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding
from transformers.utils import can_return_tuple, logging
from transformers.utils.deprecation import deprecate_kwarg

from .configuration_attractor import GRADIENT_MODES, AttractorConfig, check_solver_tol
from .loop_utils import LoopGenerationMixin, StrictLoadingMixin, TelemetryCache, as_int
from .solvers import implicit_gradient, residual_stats, solve

logger = logging.get_logger(__name__)


def check_budget(num_loops) -> int:
    """Return the solver budget as an int, or raise ``ValueError`` unless it is an integer >= 0."""
    return as_int(num_loops, "num_loops", 0, "the solver's iteration budget; 0 runs the backbone alone")


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Root mean square over the last dimension (computed in at least float32), keeping that dimension."""
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    return (wide.pow(2).mean(-1, keepdim=True) + eps).sqrt().to(x.dtype)


# --------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------


class AttractorCache(TelemetryCache):
    """A dynamic KV cache for [`AttractorForCausalLM`] (one entry per backbone and attractor layer) that also
    records, per cached position, the solver's telemetry of the forward that computed it:

    * ``solver_steps`` (``(batch, seq_len)`` LongTensor): iterations the solver ran;
    * ``converged`` (``(batch, seq_len)`` BoolTensor): whether it reached the tolerance.

    A prefill solves all its positions together, so they share one value. After
    ``generate(..., return_dict_in_generate=True)`` these are ``outputs.cache.solver_steps`` and
    ``outputs.cache.converged``.
    """

    telemetry_names = ("solver_steps", "converged")


class _ReadOnlyCache:
    """Lets the attractor layers attend to a cache's past keys/values during the solver's iterations without
    appending the iterates' keys/values to it (they are appended once, at the solution)."""

    def __init__(self, cache: Cache):
        self.cache = cache

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        layers = self.cache.layers
        if layer_idx < len(layers) and getattr(layers[layer_idx], "is_initialized", False):
            past_keys, past_values = layers[layer_idx].keys, layers[layer_idx].values
            if past_keys is not None and past_keys.shape[-2] > 0:
                return torch.cat([past_keys, key_states], dim=-2), torch.cat([past_values, value_states], dim=-2)
        return key_states, value_states


# --------------------------------------------------------------------------------------------------
# The attractor module
# --------------------------------------------------------------------------------------------------


class AttractorModule(nn.Module):
    """The weight-tied map ``T(y, y0) = y0 + gate * rms(y0) * norm(layers(inject(y, y0)))``."""

    def __init__(self, config: AttractorConfig):
        super().__init__()
        self.injection = config.injection
        self.eps = config.rms_norm_eps
        hidden = config.hidden_size
        self.in_proj = nn.Linear(2 * hidden, hidden, bias=False) if config.injection == "concat" else None
        first = config.num_backbone_layers
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, first + i) for i in range(config.num_attractor_layers)])
        self.gate = nn.Parameter(torch.full((hidden,), float(config.attractor_gate_init)))

    def forward(
        self,
        y: torch.Tensor,
        y0: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        cache: Cache | _ReadOnlyCache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        x = y + y0 if self.in_proj is None else self.in_proj(torch.cat([y, y0], dim=-1))
        for layer in self.layers:
            x = layer(x, attention_mask=attention_mask, position_embeddings=position_embeddings, cache=cache, **kwargs)
        return y0 + self.gate * _rms(y0, self.eps) * (x / _rms(x, self.eps))


# --------------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------------


@dataclass
class AttractorModelOutput(BaseModelOutputWithPast):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`):
        ``final_norm(y*)``: the normalised fixed point (the proposal when ``num_loops=0``).
    hidden_states (`tuple(torch.FloatTensor)`, returned with `output_hidden_states=True`):
        The embeddings, the output of every backbone layer (the last is the proposal ``y0``), then the fixed
        point ``y*`` (before the final norm).
    proposal (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`):
        The backbone's proposal ``y0`` (the solver's start), before the final norm.
    solver_steps (`torch.LongTensor` of shape `(batch,)`):
        Iterations the solver ran per sequence (``None`` when ``num_loops=0``).
    abs_residual, rel_residual (`torch.FloatTensor` of shape `(batch,)`):
        ``||T(y) - y||`` and ``||T(y) - y|| / ||T(y)||`` over the sequence at the returned iterate.
    converged (`torch.BoolTensor` of shape `(batch,)`): ``rel_residual <= solver_tol``.
    diverged (`torch.BoolTensor` of shape `(batch,)`): the residual became NaN/inf or grew without bound; the
        lowest-residual iterate was returned (and a warning issued).
    jacobian_penalty (`torch.FloatTensor`, scalar): with ``jacobian_samples > 0``, the Hutchinson estimate of
        ``||dT/dy||_F^2`` at the fixed point, per state entry (differentiable).
    correction_states (`tuple(torch.FloatTensor)`): with ``correction_states > 0``, ``T`` applied to
        intermediate iterates of the solve (one-step graph), for the fixed-point correction loss.
    """

    proposal: torch.FloatTensor | None = None
    solver_steps: torch.LongTensor | None = None
    abs_residual: torch.FloatTensor | None = None
    rel_residual: torch.FloatTensor | None = None
    converged: torch.BoolTensor | None = None
    diverged: torch.BoolTensor | None = None
    jacobian_penalty: torch.FloatTensor | None = None
    correction_states: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class AttractorCausalLMOutput(CausalLMOutputWithPast):
    r"""Causal-LM output with the solver telemetry of [`AttractorModelOutput`] (`proposal`, `solver_steps`,
    `abs_residual`, `rel_residual`, `converged`, `diverged`, `jacobian_penalty`), and `correction_loss`: the mean
    LM loss of the logits read from the correction states (with ``labels`` and ``correction_states > 0``)."""

    proposal: torch.FloatTensor | None = None
    solver_steps: torch.LongTensor | None = None
    abs_residual: torch.FloatTensor | None = None
    rel_residual: torch.FloatTensor | None = None
    converged: torch.BoolTensor | None = None
    diverged: torch.BoolTensor | None = None
    jacobian_penalty: torch.FloatTensor | None = None
    correction_loss: torch.FloatTensor | None = None


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------


class AttractorPreTrainedModel(StrictLoadingMixin, PreTrainedModel):
    config_class = AttractorConfig
    config: AttractorConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LlamaDecoderLayer"]
    _skip_keys_device_placement = ["cache"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = False
    _supports_attention_backend = True
    _can_compile_fullgraph = False
    _auto_class = "AutoModel"
    _remote_auto_map = {
        "AutoConfig": "configuration_attractor.AttractorConfig",
        "AutoModel": "modeling_attractor.AttractorModel",
        "AutoModelForCausalLM": "modeling_attractor.AttractorForCausalLM",
    }

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, AttractorModule):
            init.constant_(module.gate, float(self.config.attractor_gate_init))
            if module.in_proj is not None:  # [I I]: concatenation starts out as addition
                hidden = self.config.hidden_size
                eye = torch.eye(hidden, dtype=module.in_proj.weight.dtype, device=module.in_proj.weight.device)
                init.copy_(module.in_proj.weight, torch.cat([eye, eye], dim=1))


class AttractorModel(AttractorPreTrainedModel):
    """Embeddings, the backbone, the attractor solved to its fixed point, and the final norm. Returns
    [`AttractorModelOutput`]."""

    def __init__(self, config: AttractorConfig):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.backbone = nn.ModuleList([LlamaDecoderLayer(config, i) for i in range(config.num_backbone_layers)])
        self.attractor = AttractorModule(config)
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
        self.gradient_checkpointing = False
        self.post_init()

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
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
                (used only in training mode with gradients enabled); defaults to ``config.gradient_mode``.
            jacobian_samples (`int`): Random probes for the Hutchinson estimate of the attractor's Jacobian
                norm at the fixed point (0: not computed). The estimate is differentiable (a regulariser).
            correction_states (`int`): Iterates of the solve (the proposal and the intermediate ones, evenly spread
                over the iterations actually run; kept in constant memory), at which ``T`` is re-applied with a
                one-step graph (for the fixed-point correction loss).
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if kwargs.pop("output_attentions", False):
            raise ValueError("AttractorModel does not return attention weights (output_attentions=True).")
        config = self.config
        budget = check_budget(config.num_loops if num_loops is None else num_loops)
        tol = check_solver_tol(config.solver_tol if solver_tol is None else solver_tol)
        gradient_mode = config.gradient_mode if gradient_mode is None else gradient_mode
        if gradient_mode not in GRADIENT_MODES:
            raise ValueError(f"gradient_mode must be one of {GRADIENT_MODES}, got {gradient_mode!r}.")
        jacobian_samples = as_int(jacobian_samples, "jacobian_samples", 0, "probes of the Jacobian penalty")
        correction_states = as_int(correction_states, "correction_states", 0, "iterates for the correction loss")
        training_with_grad = self.training and torch.is_grad_enabled()
        if output_hidden_states is None:
            output_hidden_states = config.output_hidden_states
        if use_cache is None:  # a cache passed in is always used; otherwise none is built for training
            use_cache = cache is not None or (config.use_cache and not training_with_grad)
        if use_cache and self.gradient_checkpointing and training_with_grad:
            logger.warning_once("Attractor: the KV cache is incompatible with gradient checkpointing; running without.")
            use_cache = False

        if inputs_embeds is None:
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}.")
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and cache is None:
            cache = AttractorCache()
        if not use_cache:
            cache = None
        if cache is not None:
            self._check_cache(cache, budget)

        batch_size, seq_len = inputs_embeds.shape[:2]
        if position_ids is None:
            past_seen = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(past_seen, past_seen + seq_len, device=inputs_embeds.device).unsqueeze(0)
        y0, mask, position_embeddings, backbone_states = self._propose(
            inputs_embeds, attention_mask, position_ids, cache, **kwargs
        )
        all_states = backbone_states if output_hidden_states else None

        stats = None
        penalty = None
        corrections = None
        if budget == 0:
            y_star = y0
        else:
            step = partial(
                self.attractor, y0=y0, attention_mask=mask, position_embeddings=position_embeddings, **kwargs
            )
            peek = partial(step, cache=_ReadOnlyCache(cache) if cache is not None else None)
            append = partial(step, cache=cache)
            sampler = _IterateSampler(correction_states) if correction_states else None
            mode = gradient_mode if training_with_grad else "one_step"
            if mode == "unrolled":
                z = y0
                for _ in range(budget - 1):
                    if sampler is not None:
                        sampler.offer(z)
                    z = peek(z)
                y_star = append(z)
                stats = residual_stats(z, y_star, budget, tol)
            else:
                solver_kwargs = dict(solver=config.solver, max_iter=budget, tol=tol, damping=float(config.damping))
                if config.solver == "anderson":
                    solver_kwargs["memory"] = config.anderson_memory
                z_star, stats = solve(peek if sampler is None else sampler.wrap(peek), y0, **solver_kwargs)
                if mode == "implicit":  # the backward fixed point is solved with the same solver and budget
                    y_star = implicit_gradient(append, z_star, **solver_kwargs)
                else:
                    y_star = append(z_star.detach())
                if bool(stats.diverged.any()):  # never pass T of a blown-up state on: keep the best iterate
                    y_star = torch.where(stats.diverged[:, None, None], z_star.to(y_star.dtype), y_star)
            if jacobian_samples:
                penalty = _hutchinson_penalty(peek, y_star.detach(), jacobian_samples, attention_mask, seq_len)
            if sampler is not None:
                corrections = tuple(peek(z) for z in sampler.select(int(stats.steps.max())))

        if output_hidden_states:
            all_states += (y_star,)
        if isinstance(cache, AttractorCache):
            steps = stats.steps if stats is not None else torch.zeros(batch_size, dtype=torch.long, device=y0.device)
            done = stats.converged if stats is not None else torch.ones(batch_size, dtype=torch.bool, device=y0.device)
            cache.record("solver_steps", steps[:, None].expand(batch_size, seq_len))
            cache.record("converged", done[:, None].expand(batch_size, seq_len))
        telemetry = {}
        if stats is not None:
            telemetry = dict(
                solver_steps=stats.steps,
                abs_residual=stats.abs_residual,
                rel_residual=stats.rel_residual,
                converged=stats.converged,
                diverged=stats.diverged,
            )
        return AttractorModelOutput(
            last_hidden_state=self.norm(y_star),
            cache=cache,
            hidden_states=all_states,
            proposal=y0,
            jacobian_penalty=penalty,
            correction_states=corrections,
            **telemetry,
        )

    def _propose(self, inputs_embeds, attention_mask, position_ids, cache, **kwargs):
        """The backbone pass: ``(y0, mask, position_embeddings, states)`` with ``states`` the embeddings and every
        backbone layer's output. The mask is built before the backbone appends to ``cache``."""
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            cache=cache,
            position_ids=position_ids,
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
                "attends to the past keys/values while iterating and appends once at the solution."
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

    def attractor_map(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
    ) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
        """The attractor for these inputs as a function of the state alone, and the proposal: ``(f, y0)`` with
        ``f(y) = T(y, y0)`` (no cache). For Jacobian analysis and diagnostics: ``solve(f, y0)`` finds the model's
        fixed point, ``autograd.grad(f(y), y, v)`` gives vector-Jacobian products."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device).unsqueeze(0)
        y0, mask, position_embeddings, _ = self._propose(inputs_embeds, attention_mask, position_ids, None)
        return partial(self.attractor, y0=y0, attention_mask=mask, position_embeddings=position_embeddings), y0


class _IterateSampler:
    """Keeps about ``count`` iterates of a solve spread evenly over however many iterations it runs, in
    constant memory: it stores every ``stride``-th iterate and, when more than ``2 * count`` are stored, doubles
    the stride and drops every other one."""

    def __init__(self, count: int):
        self.count = count
        self.stride = 1
        self.calls = 0
        self.kept: list[tuple[int, torch.Tensor]] = []

    def wrap(self, f: Callable) -> Callable:
        def recorded(z: torch.Tensor) -> torch.Tensor:
            self.offer(z)
            return f(z)

        return recorded

    def offer(self, z: torch.Tensor) -> None:
        index, self.calls = self.calls, self.calls + 1
        if index % self.stride == 0:
            self.kept.append((index, z.detach().clone()))
            if len(self.kept) > 2 * self.count:
                self.stride *= 2
                self.kept = [(i, t) for i, t in self.kept if i % self.stride == 0]

    def select(self, last: int) -> list[torch.Tensor]:
        """Up to ``count`` of the kept iterates before iteration ``last`` (the solution), evenly spread."""
        candidates = [t for i, t in self.kept if i < last]
        if len(candidates) <= self.count:
            return candidates
        picks = {round((len(candidates) - 1) * (j + 1) / self.count) for j in range(self.count)}
        return [candidates[j] for j in sorted(picks)]


def _hutchinson_penalty(
    f: Callable, y_star: torch.Tensor, samples: int, attention_mask: torch.Tensor | None, seq_len: int
) -> torch.Tensor:
    """Hutchinson estimate of ``||J||_F^2 / n`` for ``J = dT/dy`` at ``y_star``: the mean of ``||e^T J||^2 / n``
    over Gaussian probes ``e`` restricted to the ``n`` real (non-padding) state entries of each sequence;
    averaged over the batch. Differentiable in the parameters (``create_graph``); the attention runs on the
    math kernel, the only one on every device with double backward."""
    z = y_star.detach().requires_grad_(True)
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):
        fz = f(z)
    valid = torch.ones(z.shape[:2], dtype=z.dtype, device=z.device)
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 and attention_mask.shape[1] >= seq_len:
        valid = attention_mask[:, -seq_len:].to(z.dtype)
    entries = valid.sum(1).clamp_min(1) * z.shape[-1]
    total = 0.0
    for _ in range(samples):
        probe = torch.randn_like(z) * valid[..., None]
        (vjp,) = torch.autograd.grad(fz, z, probe, create_graph=True, retain_graph=True)
        total = total + vjp.float().pow(2).flatten(1).sum(1) / entries
    return (total / samples).mean()


class AttractorForCausalLM(LoopGenerationMixin, AttractorPreTrainedModel, GenerationMixin):
    """[`AttractorModel`] with a language-modelling head. ``forward`` and ``generate`` accept ``num_loops`` (the
    solver budget, 0 = backbone only) and ``solver_tol``; ``generate`` falls back to
    ``generation_config.num_loops`` (when set, e.g. saved in ``generation_config.json``) and then to
    ``config.num_loops``."""

    _auto_class = "AutoModelForCausalLM"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}
    _generation_cache_class = AttractorCache
    _loop_generate_kwargs = {"num_loops": check_budget, "solver_tol": check_solver_tol}

    def __init__(self, config: AttractorConfig):
        super().__init__(config)
        self.model = AttractorModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
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
        num_loops: int | None = None,
        solver_tol: float | None = None,
        gradient_mode: str | None = None,
        jacobian_samples: int = 0,
        correction_states: int = 0,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> AttractorCausalLMOutput:
        r"""Language-model forward on the fixed point. ``labels`` gives the usual shifted cross-entropy; with
        ``correction_states > 0`` also ``correction_loss``, the mean of the same loss on the logits read from
        ``T`` at intermediate iterates. See [`AttractorModel.forward`] for the other arguments."""
        loss_kwargs = {k: kwargs.pop(k) for k in ("num_items_in_batch", "ignore_index", "shift_labels") if k in kwargs}
        outputs: AttractorModelOutput = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            num_loops=num_loops,
            solver_tol=solver_tol,
            gradient_mode=gradient_mode,
            jacobian_samples=jacobian_samples,
            correction_states=correction_states,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        logits = self.lm_head(slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep))
        loss = correction_loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **loss_kwargs)
            if outputs.correction_states:
                losses = [
                    self.loss_function(
                        logits=self.lm_head(self.model.norm(state)),
                        labels=labels,
                        vocab_size=self.config.vocab_size,
                        **loss_kwargs,
                    )
                    for state in outputs.correction_states
                ]
                correction_loss = torch.stack(losses).mean()
        return AttractorCausalLMOutput(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            proposal=outputs.proposal,
            solver_steps=outputs.solver_steps,
            abs_residual=outputs.abs_residual,
            rel_residual=outputs.rel_residual,
            converged=outputs.converged,
            diverged=outputs.diverged,
            jacobian_penalty=outputs.jacobian_penalty,
            correction_loss=correction_loss,
        )


__all__ = [
    "AttractorCache",
    "AttractorCausalLMOutput",
    "AttractorForCausalLM",
    "AttractorModel",
    "AttractorModelOutput",
    "AttractorPreTrainedModel",
]
