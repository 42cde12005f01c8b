"""The Ouro looped language model (Zhu et al., 2025, "Scaling Latent Reasoning via Looped Language Models").

A stack of ``L`` decoder layers with shared weights is applied ``T`` times ("loop steps", the published
config calls ``T`` ``total_ut_steps``). Each layer uses sandwich normalisation (an RMSNorm before *and*
after attention and after the MLP), the final RMSNorm is applied at the end of every loop step (so the
next step starts from a normalised state; ``config.norm_placement`` offers the pre- and post-norm layouts of the
STARS paper's norm study instead), and an exit gate ``sigmoid(w . h_t + b)`` read at every step
gives each token a distribution over exit steps:

    p_t = lambda_t * prod_{j<t} (1 - lambda_j)   for t < T,   p_T = prod_{j<T} (1 - lambda_j).

Weights, config keys and numbers match the published Ouro-1.4B / 2.6B checkpoints and their reference
code; on top of that this implementation gives

* ``num_loops`` in ``forward`` and ``generate`` (any value >= 1, deeper than trained included);
* a KV cache with one entry per (loop step, layer) that works with ``generate`` of transformers 5.x, including
  left-padded batches (``generate``'s own cache grows a copy of its layers per loop step; [`OuroCache`] also
  records each position's exit step);
* early exit that saves compute during decoding (see [`OuroModel.forward`] for the exact semantics).

The file reads in call order: the outputs, the cache, the decoder layer, the early-exit state, the model (its
``forward`` runs the loop), the readouts, the causal-LM head. From ``input_ids`` to logits a forward uses this file,
``layers`` (norm, rotary embedding, attention, MLP), ``looped_lm`` (the input preamble and argument checks the
looped LMs share) and ``solvers`` (the residual).

This module travels to the Hub as remote code: it imports only torch, transformers and its siblings in
``equilibria/modeling`` (``configuration_ouro``, the shared pieces ``compat``, ``layers``, ``looped_lm``,
``loop_map``, ``checkpoints``, ``regularization`` and ``solvers``), which travel with it.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import can_return_tuple

from .checkpoints import StrictLoadingMixin
from .compat import MASK_CACHE_KEYWORD, OUTPUT_CACHE_FIELD
from .configuration_ouro import OuroConfig, check_exit_readout, check_exit_threshold, check_recurrent_kv_cache_mode
from .layers import MLP, Attention, RMSNorm, RotaryEmbedding
from .loop_map import LoopMap
from .looped_lm import (
    LOSS_KWARGS,
    LMInputs,
    LoopedLMBase,
    LoopedLMHead,
    ReadOnlyCache,
    TelemetryCache,
    as_int,
    head_loss,
    keep_positions,
    recording_attentions,
    warn_far_beyond,
)
from .regularization import JSRROptions, check_estimator_fits, jsrr_estimate
from .solvers import residual

# --------------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------------


@dataclass
class OuroModelOutput(BaseModelOutputWithPast):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`):
        Each token's state at its exit step (the last step when no token exits early), after the final norm.
    hidden_states (`tuple(torch.FloatTensor)`, returned with `output_hidden_states=True`):
        The loop states: the input embeddings, then the state after each loop step (``num_loops + 1`` tensors).
    attentions (`tuple(torch.FloatTensor)`, returned with `output_attentions=True` and the eager attention):
        The attention weights ``(batch, heads, seq_len, key_len)`` per (loop step, layer), in that order
        (``num_loops * num_hidden_layers`` tensors; entry ``step * num_hidden_layers + layer``, as the cache).
        Once every row has exited early, the skipped steps add none.
    exit_steps (`torch.LongTensor` of shape `(batch, seq_len)`):
        Number of loop steps each token ran (``num_loops`` unless it exited early).
    exit_probs (`torch.FloatTensor` of shape `(batch, seq_len, num_loops)`):
        The exit gate's distribution over exit steps, per token.
    loop_residual (`torch.FloatTensor` of shape `(batch, seq_len)`):
        Relative residual of each token's last loop step, ``||h_t - h_{t-1}|| / ||h_t||`` (the solvers' residual
        ``||f(h) - h|| / ||f(h)||`` at ``h = h_{t-1}``).
    spectral_radius (`torch.FloatTensor` of shape `(batch,)`, returned with `spectral_radius_iters > 0`):
        The power-iteration estimate of the spectral radius of the loop step's Jacobian at the final state, per
        sequence, differentiable in the parameters (STARS' JSRR penalty is a function of it).
    """

    exit_steps: torch.LongTensor | None = None
    exit_probs: torch.FloatTensor | None = None
    loop_residual: torch.FloatTensor | None = None
    spectral_radius: torch.FloatTensor | None = None


@dataclass
class OuroCausalLMOutput(CausalLMOutputWithPast):
    r"""Causal-LM output with the loop telemetry of [`OuroModelOutput`] (`exit_steps`, `exit_probs`,
    `loop_residual`, and `spectral_radius` when asked for)."""

    exit_steps: torch.LongTensor | None = None
    exit_probs: torch.FloatTensor | None = None
    loop_residual: torch.FloatTensor | None = None
    spectral_radius: torch.FloatTensor | None = None


# --------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------


class OuroCache(TelemetryCache):
    """A dynamic KV cache for Ouro. With ``recurrent_kv_cache_mode="per_loop"`` it holds one entry per (loop step,
    layer), entry ``step * num_hidden_layers + layer``; with ``"last_loop"`` one per layer, written by the last loop
    step (see [`OuroConfig`]).

    Entries are created on first use, so the same class serves any number of loops. A cache is bound to the mode
    of the forward that first filled it, and a ``per_loop`` cache also to its loop count: continuing it otherwise
    raises ``ValueError`` (its deeper entries would be missing for the past tokens). A ``last_loop`` cache can be
    continued with another ``num_loops``.

    Besides keys and values it records telemetry for every cached position: ``exit_steps`` (a
    ``(batch, seq_len)`` LongTensor, the number of loop steps each position ran). Pass one to ``generate``
    (``generate(..., cache=OuroCache(), return_dict_in_generate=True)``) and it is ``outputs.cache.exit_steps``.
    """

    telemetry_names = ("exit_steps",)
    exit_steps: torch.Tensor | None = None
    num_loops: int | None = None  # the loop count of the forward that last extended it
    recurrent_kv_cache_mode: str | None = None  # the mode its entries are laid out for, once filled


def check_cache(cache: Cache, num_loops: int, num_layers: int, mode: str = "per_loop") -> None:
    """``ValueError`` unless ``cache`` can hold (or holds) the entries of this loop count in this
    ``recurrent_kv_cache_mode``; it only checks (:func:`grow_cache` lays out a fresh fixed-layout cache, and the
    forward binds an :class:`OuroCache` to the mode and count that filled it)."""
    if isinstance(cache, OuroCache):
        if cache.get_seq_length() == 0:  # not filled yet: any mode and count
            return
        if (cache.recurrent_kv_cache_mode or "per_loop") != mode:
            raise ValueError(
                f"This OuroCache holds keys/values laid out for recurrent_kv_cache_mode="
                f"{cache.recurrent_kv_cache_mode!r}; it cannot be continued with recurrent_kv_cache_mode={mode!r}. "
                "Use one mode for the whole generation."
            )
        if mode == "per_loop" and cache.num_loops != num_loops:
            raise ValueError(
                f"This OuroCache holds keys/values for num_loops={cache.num_loops}; it cannot be continued with "
                f"num_loops={num_loops}. Use the same num_loops for the whole generation, or start a new cache (a "
                "recurrent_kv_cache_mode='last_loop' cache can change num_loops)."
            )
        return
    needed, layers = (num_loops * num_layers if mode == "per_loop" else num_layers), len(cache.layers)
    if torch.compiler.is_compiling():  # a compiled decoding step: the eager prefill laid the cache out
        if layers != needed:
            raise ValueError(
                f"The cache holds {layers} entries; num_loops={num_loops} in mode {mode!r} needs {needed}."
            )
        return
    kinds = {type(layer).__name__ for layer in cache.layers}
    if mode == "last_loop" and not kinds <= ReadOnlyCache.READABLE:
        raise ValueError(
            f"recurrent_kv_cache_mode='last_loop' reads the cache's plain dynamic layers, but got a "
            f"{type(cache).__name__} with {sorted(kinds - ReadOnlyCache.READABLE)} (cache_implementation='static', "
            "quantized and offloaded caches). Use the default dynamic cache, or recurrent_kv_cache_mode='per_loop'."
        )
    if _fixed_layout(cache) and layers < needed:
        raise ValueError(
            f"Ouro needs a cache with one entry per (loop step, layer) = {needed} entries for num_loops={num_loops}, "
            f"but got a {type(cache).__name__} with {layers} layers. Pass an empty cache with one layer per decoder "
            "layer (it grows the rest), the default dynamic cache, or an OuroCache()."
        )
    if cache.get_seq_length() > 0 and layers != needed:
        raise ValueError(
            f"The cache holds {layers} entries, but num_loops={num_loops} with recurrent_kv_cache_mode="
            f"{mode!r} needs {needed}. Use the same num_loops and mode for the whole generation."
        )


def _fixed_layout(cache: Cache) -> bool:
    return getattr(cache, "layer_class_to_replicate", None) is None


def grow_cache(cache: Cache, num_loops: int, num_layers: int, mode: str) -> None:
    """An empty fixed-layout cache with one layer per decoder layer (what ``generate`` builds from the config: a
    ``DynamicCache``, or a ``StaticCache`` with ``cache_implementation="static"``) gets a copy of its layers for
    each further loop step in ``per_loop``, as transformers' Dory does; any other cache is left as it is."""
    if torch.compiler.is_compiling() or mode != "per_loop":
        return
    if _fixed_layout(cache) and len(cache.layers) == num_layers and cache.get_seq_length() == 0:
        cache.layers += [copy.deepcopy(layer) for layer in cache.layers * (num_loops - 1)]


# --------------------------------------------------------------------------------------------------
# Decoder layer
# --------------------------------------------------------------------------------------------------


class OuroDecoderLayer(GradientCheckpointingLayer):
    """One layer of the shared stack. Its norms follow ``config.norm_placement``: ``"sandwich"`` (Ouro's)
    ``h = h + norm2(attn(norm1(h)))``, then ``h = h + norm4(mlp(norm3(h)))``; ``"pre"`` ``h = h + attn(norm1(h))``,
    ``h = h + mlp(norm3(h))``; ``"post"`` ``h = norm2(h + attn(h))``, ``h = norm4(h + mlp(h))`` (``norm1`` ..
    ``norm4`` are ``input_layernorm``, ``input_layernorm_2``, ``post_attention_layernorm``,
    ``post_attention_layernorm_2``; those a placement does not use are ``nn.Identity``, without parameters). Its
    attention reads and writes the cache entry of this (loop step, layer), ``cache_index``, and takes the early
    exit's frozen keys/values (``early_exit``; see [`Attention`])."""

    #: the norms each placement has, in the order norm1 .. norm4 (None: an identity)
    NORMS = {
        "sandwich": ("input_layernorm", "input_layernorm_2", "post_attention_layernorm", "post_attention_layernorm_2"),
        "pre": ("input_layernorm", None, "post_attention_layernorm", None),
        "post": (None, "input_layernorm_2", None, "post_attention_layernorm_2"),
    }

    def __init__(self, config: OuroConfig, layer_idx: int):
        super().__init__()
        self.self_attn = Attention(config=config, layer_idx=layer_idx)
        self.mlp = MLP(config)
        self.norm_placement = config.norm_placement
        used = self.NORMS[config.norm_placement]
        for name in self.NORMS["sandwich"]:  # a norm this placement lacks is a parameter-free identity
            setattr(self, name, RMSNorm(config.hidden_size, eps=config.rms_norm_eps) if name in used else nn.Identity())
        self.attention_type = config.layer_types[layer_idx]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        cache_index: int | None = None,
        early_exit: OuroEarlyExit | None = None,
        **kwargs,
    ) -> torch.Tensor:
        post = self.norm_placement == "post"
        attended, _ = self.self_attn(
            self.input_layernorm(hidden_states),
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            cache=cache,
            cache_index=cache_index,
            early_exit=early_exit,
            **kwargs,
        )
        norm2, norm4 = self.input_layernorm_2, self.post_attention_layernorm_2
        hidden_states = norm2(hidden_states + attended) if post else hidden_states + norm2(attended)
        transformed = self.mlp(self.post_attention_layernorm(hidden_states))
        return norm4(hidden_states + transformed) if post else hidden_states + norm4(transformed)


# --------------------------------------------------------------------------------------------------
# Early exit
# --------------------------------------------------------------------------------------------------


class OuroEarlyExit:
    """The early-exit state of one forward of [`OuroModel`].

    The semantics. A token exits at the first step ``t < num_loops`` where the cumulative probability of its exit
    distribution reaches the threshold; its output is its state at that step. From then on it is frozen: at every
    later loop step ``s`` and layer ``l``, later (and concurrent) tokens attend to the keys/values the exited token
    had at its exit step for layer ``l``. In ``per_loop`` the cache entries for steps after the exit are filled with
    those copies, so the cache always holds all ``num_loops x L`` entries, and a cached run equals an uncached one;
    in ``last_loop`` the one entry per layer holds them. During single-token decoding the layers run only on the
    batch rows still looping, and once every row has exited the remaining steps are skipped altogether (only the
    copies are written). During a multi-token forward (prefill) all tokens are computed and exited ones are masked,
    which gives the same numbers with less of the saving: only once every token of the forward has exited are the
    remaining steps skipped.

    It owns all of that state:

    * the exit distribution's running state (``survive``, ``cdf``) and each token's exit step (``exit_steps``);
    * the frozen tokens: ``exited[b, s]``, and per layer the keys/values the current tokens used at the last step
      computed, which :meth:`merge` (called by the attention) substitutes for exited tokens;
    * row dropping during single-token decoding: ``rows``, the batch rows still looping, on which the layers run;
    * the cache back-fill once every row has exited, and each token's residual at its last computed step.
    """

    def __init__(self, threshold: float, batch_size: int, seq_len: int, num_loops: int, device, drop_rows: bool):
        self.threshold = threshold
        self.drop_rows = drop_rows
        self.exited = torch.zeros(batch_size, seq_len, dtype=torch.bool, device=device)
        self.any_exited = False
        self.exit_steps = torch.full((batch_size, seq_len), num_loops, dtype=torch.long, device=device)
        self.survive = torch.ones(batch_size, seq_len, device=device, dtype=torch.float32)
        self.cdf = torch.zeros_like(self.survive)
        self.rows: torch.Tensor | None = None
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.residual: torch.Tensor | None = None

    def start_step(self) -> bool:
        """Before a step: False once every token has exited, when the remaining steps are skipped; else pick the rows
        still looping (single-token decoding)."""
        if not self.any_exited:
            return True
        if bool(self.exited.all()):
            return False
        if self.drop_rows:
            self.rows = (~self.exited[:, 0]).nonzero().squeeze(1)
        return True

    def gather_rows(self, hidden: torch.Tensor, position_embeddings: tuple, masks: dict):
        """The step's inputs restricted to the rows still looping (all of them when no row is dropped)."""
        rows = self.rows
        if rows is None:
            return hidden, position_embeddings, masks
        position_embeddings = tuple(t.index_select(0, rows) if t.shape[0] > 1 else t for t in position_embeddings)
        masks = {
            k: m.index_select(0, rows) if isinstance(m, torch.Tensor) and m.shape[0] > 1 else m
            for k, m in masks.items()
        }
        return hidden.index_select(0, rows), position_embeddings, masks

    def merge(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys/values of the whole batch at this layer: the computed rows' new ones, the exited tokens'
        frozen ones."""
        if self.rows is not None:
            prev_key, prev_value = self.kv[layer_idx]
            key = prev_key.index_copy(0, self.rows, key)
            value = prev_value.index_copy(0, self.rows, value)
        elif self.any_exited:
            prev_key, prev_value = self.kv[layer_idx]
            frozen = self.exited[:, None, :, None]
            key = torch.where(frozen, prev_key, key)
            value = torch.where(frozen, prev_value, value)
        self.kv[layer_idx] = (key, value)
        return key, value

    def keys_for_attention(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The (cached) keys/values of the rows being computed."""
        if self.rows is None:
            return key, value
        return key.index_select(0, self.rows), value.index_select(0, self.rows)

    def end_step(self, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """After a step: scatter the computed rows back, keep exited tokens' states, and track each token's
        residual at its last computed step."""
        if self.rows is not None:
            new = old.index_copy(0, self.rows, new)
            self.rows = None
        if self.any_exited:
            new = torch.where(self.exited[..., None], old, new)
        step_residual = residual(old, new, keep_dims=2)[1]
        self.residual = (
            step_residual if self.residual is None else torch.where(self.exited, self.residual, step_residual)
        )
        return new

    def observe_gate(self, step: int, gate_logit: torch.Tensor) -> None:
        """Read the exit gate after ``step``: tokens whose cumulative exit probability reaches the threshold exit."""
        lam = torch.sigmoid(gate_logit.float())
        self.cdf = self.cdf + lam * self.survive
        self.survive = self.survive * (1.0 - lam)
        newly = (~self.exited) & (self.cdf >= self.threshold)
        if bool(newly.any()):
            self.exit_steps = torch.where(newly, step + 1, self.exit_steps)
            self.exited |= newly
            self.any_exited = True

    def backfill(self, cache: Cache | None, first_entries: list[int], num_layers: int) -> None:
        """Every row has exited: write the frozen keys/values into the cache entries the remaining steps would have
        written (``first_entries``: the entry of layer 0 of each)."""
        if cache is None:
            return
        for first in first_entries:
            for layer_idx in range(num_layers):
                key, value = self.kv[layer_idx]
                cache.update(key, value, first + layer_idx)


def exit_distribution(gate_logits: list[torch.Tensor], hidden: torch.Tensor) -> torch.Tensor:
    """Exit probabilities over ``len(gate_logits) + 1`` steps from the gate logits read after each step but
    the last: ``p_t = lambda_t * prod_{j<t} (1 - lambda_j)``, the last step taking what remains (float32)."""
    if not gate_logits:  # a single step: everything exits there
        return torch.ones(*hidden.shape[:-1], 1, device=hidden.device, dtype=torch.float32)
    lam = torch.sigmoid(torch.stack(gate_logits, dim=-1).float())
    survive = torch.cumprod(1.0 - lam, dim=-1)
    before = torch.cat([torch.ones_like(survive[..., :1]), survive[..., :-1]], dim=-1)
    return torch.cat([lam * before, survive[..., -1:]], dim=-1)


def read_at_exit(states, exit_probs: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The published readout: each token's state at the first step where its cumulative exit probability reaches
    ``threshold`` (the last step if none does), and that step (1-based), from the states after every step."""
    reached = exit_probs.cumsum(-1) >= threshold
    reached[..., -1] = True
    step = reached.float().argmax(-1)  # the first step reaching it
    stacked = torch.stack(states, dim=2)  # (batch, seq, steps, hidden)
    index = step[..., None, None].expand(*step.shape, 1, stacked.shape[-1])
    return stacked.gather(2, index).squeeze(2), step + 1


def warn_if_gate_untrained(module: nn.Module, what: str) -> None:
    """Warn (once per model) that ``what`` reads an exit gate that was not trained with these weights."""
    if module.config.exit_gate_trained is False and not getattr(module, "_gate_warning_given", False):
        module._gate_warning_given = True
        warnings.warn(
            f"{what} reads the exit gate, which was not trained with these weights (config.exit_gate_trained=False: "
            "they were trained with exit_loss='final', whose loss does not reach the gate), so the exit steps it "
            "picks are arbitrary and the answers can be wrong; run a fixed num_loops instead, or train the gate "
            "(exit_loss='expected_logits').",
            UserWarning,
            stacklevel=3,
        )


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------


class OuroPreTrainedModel(StrictLoadingMixin, PreTrainedModel):
    config_class = OuroConfig
    config: OuroConfig
    supports_gradient_checkpointing = True
    _no_split_modules = ["OuroDecoderLayer"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_attention_backend = True
    # a decoding step with a static cache traces into one graph (tests/test_ouro_kv_modes.py); the compute-saving
    # early exit does not (it refuses a compiled forward), the reference readout does
    _can_compile_fullgraph = True

    _weight_shaping_keys = ("norm_placement",)
    _remote_auto_map = {
        "AutoConfig": "configuration_ouro.OuroConfig",
        "AutoModel": "modeling_ouro.OuroModel",
        "AutoModelForCausalLM": "modeling_ouro.OuroForCausalLM",
    }


class LoopCall(NamedTuple):
    """What the loop steps of one forward share."""

    num_loops: int
    position_embeddings: tuple[torch.Tensor, torch.Tensor]
    masks: dict
    cache: Cache | None
    mode: str  # recurrent_kv_cache_mode
    early: OuroEarlyExit | None
    keep_states: bool  # keep (embeddings, each step's readout)
    jsrr_step: int | None  # keep the state after this step (when it is not the last)
    kwargs: dict


class LoopTrace(NamedTuple):
    """What the loop steps of one forward leave: the final state, the one before it, the kept states (or None),
    the exit gate's logits after every step but the last, and the state after ``jsrr_step`` (or None)."""

    final: torch.Tensor
    previous: torch.Tensor
    states: tuple[torch.Tensor, ...] | None
    gate_logits: list[torch.Tensor]
    linearised: torch.Tensor | None


class OuroModel(LoopedLMBase, OuroPreTrainedModel):
    """The looped decoder: embeddings, ``L`` shared layers applied ``num_loops`` times, the final norm (after every
    step, or only on what is read out: ``config.norm_placement``) and the exit gate. Returns [`OuroModelOutput`]."""

    _cache_class = OuroCache
    #: whether single-token decoding with the compute-saving early exit runs only the batch rows still looping
    #: (else every row runs each step, exited ones frozen); chosen by ``bench_ouro_decode.py --sections exit_rows``
    drop_exited_rows: bool = True

    def __init__(self, config: OuroConfig):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList([OuroDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config=config)
        self.early_exit_gate = nn.Linear(config.hidden_size, 1)
        # With exit_loss="final" no loss reaches the gate: it is then frozen (loaded, never trained), so that every
        # trainable parameter gets a gradient (plain DDP, gradient checkpointing)
        self.early_exit_gate.requires_grad_(config.exit_loss != "final")
        self.gradient_checkpointing = False
        self.post_init()

    def _masks(self, inputs_embeds, attention_mask, cache, position_ids) -> dict:
        if isinstance(attention_mask, dict):  # already prepared by the caller
            return attention_mask
        kwargs = dict(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **{MASK_CACHE_KEYWORD: cache},
        )
        masks = {"full_attention": create_causal_mask(**kwargs)}
        if "sliding_attention" in self.config.layer_types:
            masks["sliding_attention"] = create_sliding_window_causal_mask(**kwargs)
        return masks

    def _early_exit(
        self, threshold, exit_readout, hidden: torch.Tensor, num_loops: int, masks: dict, inputs: LMInputs
    ) -> tuple[OuroEarlyExit | None, float | None]:
        """``(bookkeeping, None)`` for the compute-saving early exit of this forward, ``(None, threshold)`` for the
        reference readout, ``(None, None)`` when no token can exit (threshold ``None`` or 1, or training with
        gradients). Rows are dropped only in single-token decoding with tensor masks, and not while attention
        weights are recorded (for the whole batch). ``threshold``: this call's, else the config's."""
        check_exit_threshold(threshold)
        readout = check_exit_readout(self.config.exit_readout if exit_readout is None else exit_readout)
        if threshold is None or threshold >= 1.0 or (self.training and torch.is_grad_enabled()):
            return None, None
        warn_if_gate_untrained(self, f"early exit (exit_threshold={threshold})")
        if readout == "reference":
            return None, float(threshold)
        if torch.compiler.is_compiling():
            raise ValueError(
                "The compute-saving early exit (exit_readout='frozen') cannot run in a compiled forward: which rows "
                "and steps it skips depends on the data. Decode eagerly (no compile_config, a dynamic cache), or use "
                "exit_readout='reference', which compiles (it computes every step)."
            )
        batch_size, seq_len = hidden.shape[:2]
        drop_rows = (
            self.drop_exited_rows
            and not inputs.output_attentions
            and seq_len == 1
            and all(m is None or isinstance(m, torch.Tensor) for m in masks.values())
        )
        return OuroEarlyExit(threshold, batch_size, seq_len, num_loops, hidden.device, drop_rows), None

    def loop_step(
        self,
        hidden_states: torch.Tensor,
        step: int,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_masks: dict,
        cache: Cache | None = None,
        early_exit: OuroEarlyExit | None = None,
        cache_entry: int | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """One application of the loop body at loop step ``step`` (0-based; the step only selects the cache
        entries: layer ``l`` uses entry ``cache_entry + l``, by default ``step * L + l``): ``h -> norm(stack(h))``
        with ``norm_placement="sandwich"``, ``h -> stack(h)`` otherwise (the final norm then only reads out:
        :meth:`readout`). This is the map whose Jacobian STARS regularises. With early exit (``early_exit``) it runs
        on the rows still looping only; ``early_exit.end_step`` puts them back."""
        hidden, position_embeddings, attention_masks = (
            (hidden_states, position_embeddings, attention_masks)
            if early_exit is None
            else early_exit.gather_rows(hidden_states, position_embeddings, attention_masks)
        )
        first = step * self.config.num_hidden_layers if cache_entry is None else cache_entry
        for layer_idx, layer in enumerate(self.layers):
            hidden = layer(
                hidden,
                attention_mask=attention_masks[layer.attention_type],
                position_embeddings=position_embeddings,
                cache=cache,
                cache_index=first + layer_idx,
                early_exit=early_exit,
                **kwargs,
            )
        return self.norm(hidden) if self.config.norm_placement == "sandwich" else hidden

    def readout(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """What the head and the exit gate read of a loop state: the state itself with ``norm_placement=
        "sandwich"`` (already normed by the step), the final norm of it otherwise."""
        return hidden_states if self.config.norm_placement == "sandwich" else self.norm(hidden_states)

    def exit_logit(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The exit gate's logit ``w . readout(h) + b`` of each token's loop state (``(batch, seq_len)``)."""
        return self.early_exit_gate(self.readout(hidden_states)).squeeze(-1)

    def _step_map(self, position_embeddings, masks: dict) -> Callable[[torch.Tensor], torch.Tensor]:
        """The loop body (:meth:`loop_step`) at these positions and masks, without a cache."""

        def step(hidden_states: torch.Tensor) -> torch.Tensor:
            return self.loop_step(hidden_states, 0, position_embeddings=position_embeddings, attention_masks=masks)

        return step

    def _jsrr(self, trace: LoopTrace, position_embeddings, masks: dict, attention_mask, jsrr: JSRROptions):
        """The JSRR estimate (:func:`jsrr_estimate`) at the loop's final state, or after ``jsrr.step``."""
        check_estimator_fits(self.layers, jsrr.estimator)
        at = trace.final if trace.linearised is None else trace.linearised
        make_step = lambda pick: self._step_map(pick(position_embeddings), pick(masks))  # noqa: E731
        return jsrr_estimate(make_step, at, attention_mask, jsrr)

    def _run_loop(self, hidden: torch.Tensor, call: LoopCall) -> LoopTrace:
        """Run the loop steps of ``call`` from ``hidden``."""
        num_loops, position_embeddings, masks, cache, mode, early, keep_states, jsrr_step, kwargs = call
        num_layers = self.config.num_hidden_layers
        states = (hidden,) if keep_states else None
        gate_logits: list[torch.Tensor] = []
        previous, linearised = hidden, None
        past = ReadOnlyCache(cache) if mode == "last_loop" and cache is not None else None
        for step in range(num_loops):
            if early is not None and not early.start_step():  # every row has exited: copies for the rest
                later = [0] if mode == "last_loop" else [t * num_layers for t in range(step, num_loops)]
                early.backfill(cache, later, num_layers)
                gate_logits += [self.exit_logit(hidden)] * (num_loops - 1 - step)
                states = states + (self.readout(hidden),) * (num_loops - step) if keep_states else None
                break
            attend, entry = (  # last_loop: the steps before the last read the cache, the last one writes it
                (cache, step * num_layers) if mode == "per_loop" else (past if step < num_loops - 1 else cache, 0)
            )
            new = self.loop_step(
                hidden, step, position_embeddings, masks, cache=attend, early_exit=early, cache_entry=entry, **kwargs
            )
            previous, hidden = hidden, (new if early is None else early.end_step(hidden, new))
            if jsrr_step is not None and step + 1 == jsrr_step < num_loops:
                linearised = hidden
            states = states + (self.readout(hidden),) if keep_states else None
            if step < num_loops - 1:
                gate_logits.append(self.exit_logit(hidden))
                if early is not None:
                    early.observe_gate(step, gate_logits[-1])
        return LoopTrace(hidden, previous, states, gate_logits, linearised)

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
        exit_threshold: float | None = None,
        exit_readout: str | None = None,
        recurrent_kv_cache_mode: str | None = None,
        output_hidden_states: bool | None = None,
        jsrr: JSRROptions | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> OuroModelOutput:
        r"""Run the loop.

        Args:
            num_loops (`int`, *optional*): Loop steps for this call (>= 1); defaults to ``config.total_ut_steps``.
            exit_threshold (`float`, *optional*): Early-exit threshold in ``(0, 1]`` for this call (see
                [`OuroEarlyExit`]), else ``config.early_exit_threshold``; ``1.0`` or ``None`` disables it, and so does
                training with gradients.
            exit_readout (`str`, *optional*): ``"frozen"`` or ``"reference"`` (the published code's: every step is
                computed, each token read out at its exit step); defaults to ``config.exit_readout``.
            recurrent_kv_cache_mode (`str`, *optional*): ``"per_loop"`` or ``"last_loop"`` for this call (see
                [`OuroConfig`]); a cache is continued in the mode that filled it.
            jsrr (`JSRROptions`, *optional*): Also estimate the spectral radius of the loop step's Jacobian
                (``spectral_radius``, differentiable: the JSRR penalty), inside ``forward`` so that any wrapper (DDP,
                FSDP, DeepSpeed) sees it as it sees the loss.
            past_key_values (`Cache`, *optional*): The cache's name before transformers 5.24 (for exporters).
        """
        config = self.config
        num_loops = config.total_ut_steps if num_loops is None else as_int(num_loops, "num_loops", 1, "loop steps")
        if jsrr is not None:
            jsrr.check_step(num_loops)
        if past_key_values is not None:  # the cache's name before transformers 5.24, named for exporters
            kwargs["past_key_values"] = past_key_values
        inputs = self.prepare_inputs(
            input_ids, inputs_embeds, cache, use_cache, position_ids, output_hidden_states, kwargs
        )
        cache, hidden = inputs.cache, inputs.inputs_embeds
        given_mode = recurrent_kv_cache_mode  # the config's was checked when it was set
        mode = config.recurrent_kv_cache_mode if given_mode is None else check_recurrent_kv_cache_mode(given_mode)
        if cache is not None and not isinstance(cache, OuroCache):  # OuroCache grows as it goes
            grow_cache(cache, num_loops, config.num_hidden_layers, mode)
        if cache is not None:
            check_cache(cache, num_loops, config.num_hidden_layers, mode)
        masks = self._masks(hidden, attention_mask, cache, inputs.position_ids)
        position_embeddings = self.rotary_emb(hidden, inputs.position_ids)
        early, reference = None, None  # the compute-saving early exit's state, or the reference readout's threshold
        threshold = config.early_exit_threshold if exit_threshold is None else exit_threshold
        if exit_threshold is not None or exit_readout is not None or (threshold is not None and threshold < 1.0):
            early, reference = self._early_exit(threshold, exit_readout, hidden, num_loops, masks, inputs)
        keep_states = inputs.output_hidden_states or reference is not None
        call = LoopCall(
            num_loops, position_embeddings, masks, cache, mode, early, keep_states, jsrr and jsrr.step, kwargs
        )
        layers_attention = [layer.self_attn for layer in self.layers]
        with recording_attentions(layers_attention) if inputs.output_attentions else nullcontext() as attentions:
            trace = self._run_loop(hidden, call)
        final, states = trace.final, trace.states
        loop_residual = early.residual if early is not None else residual(trace.previous, final, keep_dims=2)[1]
        exit_probs = exit_distribution(trace.gate_logits, final)
        gate = self.early_exit_gate
        if not trace.gate_logits and gate.weight.requires_grad and self.training and torch.is_grad_enabled():
            # one step: the gate has no say, but joins the graph with weight 0 so that every trainable parameter gets
            # a gradient at every sampled count (plain DDP); by its own forward on one token (ZeRO-3 gathers for it)
            exit_probs = exit_probs + 0.0 * gate(final[:, :1].detach()).sum()
        hidden = self.readout(final)
        if reference is None:
            exit_steps = early.exit_steps if early else torch.full_like(loop_residual, num_loops, dtype=torch.long)
        else:  # every step was computed: read each token out at its exit step
            hidden, exit_steps = read_at_exit(states[1:], exit_probs, reference)
            states = states if inputs.output_hidden_states else None
        if isinstance(cache, OuroCache):  # bound to the mode (and in per_loop the count) of the forward that filled it
            cache.record(exit_steps=exit_steps)
            cache.recurrent_kv_cache_mode, cache.num_loops = mode, num_loops
        rho = None if jsrr is None else self._jsrr(trace, position_embeddings, masks, attention_mask, jsrr)
        return OuroModelOutput(
            last_hidden_state=hidden,
            **{OUTPUT_CACHE_FIELD: cache},
            hidden_states=states,
            attentions=tuple(attentions) if attentions is not None else None,
            exit_steps=exit_steps,
            exit_probs=exit_probs,
            loop_residual=loop_residual,
            spectral_radius=rho,
        )

    def loop_map(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
    ) -> LoopMap:
        """``(f, h_0)``: the loop body for these inputs as a function of the state alone (:meth:`loop_step`:
        ``f(h) = norm(stack(h))`` for the sandwich placement; :meth:`readout` is what the head reads of it; no cache), ``h_{t+1} = f(h_t)`` for every step ``t``, and the start ``h_0`` (the input embeddings). Use
        it for Jacobian analysis (STARS' spectral-radius penalty, fixed-point diagnostics):
        ``torch.func.jvp(f, (h,), (v,))`` or ``autograd.grad(f(h), h, v)``. The exit gate ``forward`` reads after every step but
        the last is :meth:`exit_logit`."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device).unsqueeze(0)
        masks = self._masks(inputs_embeds, attention_mask, None, position_ids)
        position_embeddings = self.rotary_emb(inputs_embeds, position_ids)
        return LoopMap(self._step_map(position_embeddings, masks), inputs_embeds)


# --------------------------------------------------------------------------------------------------
# Causal-LM head
# --------------------------------------------------------------------------------------------------


def expected_exit_loss(step_logits: list, probs: torch.Tensor, labels, loss_kwargs: dict, entropy_weight: float):
    """The Ouro paper's objective: per token, ``sum_t p_t CE_t - entropy_weight * H(p)`` over the loop steps ``t``
    (``CE_t`` the next-token cross-entropy of step ``t``'s logits, ``p`` the exit distribution), summed over the
    labelled tokens and divided by their number (or by ``num_items_in_batch``, as the Trainer passes it)."""
    ignore = loss_kwargs.get("ignore_index", -100)
    targets = loss_kwargs.get("shift_labels")
    if targets is None:  # the usual shift: the logits at i predict the token at i + 1
        step_logits, probs = [logits[:, :-1] for logits in step_logits], probs[:, :-1]
        targets = labels[:, 1:]
    targets = targets.to(step_logits[0].device)
    per_step = torch.stack(
        [
            nn.functional.cross_entropy(
                logits.flatten(0, 1).float(), targets.flatten(), ignore_index=ignore, reduction="none"
            ).view(targets.shape)
            for logits in step_logits
        ],
        dim=-1,
    )
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
    per_token = (probs * per_step).sum(-1) - entropy_weight * entropy
    valid = targets != ignore
    count = loss_kwargs.get("num_items_in_batch")
    count = valid.sum() if count is None else count
    return (per_token * valid).sum() / torch.as_tensor(count, device=per_token.device).clamp_min(1)


def read_step(states: tuple[torch.Tensor, ...], exit_at_step) -> torch.Tensor:
    """``states[exit_at_step]``, or ``ValueError`` unless ``exit_at_step`` is an integer in ``[0, len(states) - 1]``."""
    last = len(states) - 1
    try:
        step = as_int(exit_at_step, "exit_at_step", 0, "")
    except ValueError:
        step = -1
    if not 0 <= step <= last:
        raise ValueError(
            f"exit_at_step must be in [0, {last}] for num_loops={last + 1} (the 0-based loop step read out), "
            f"got {exit_at_step!r}."
        )
    return states[step]


class OuroForCausalLM(LoopedLMHead, OuroPreTrainedModel, GenerationMixin):
    """[`OuroModel`] with a language-modelling head: logits and, with ``labels``, the shifted cross-entropy of
    ``config.exit_loss``: of the gate-weighted mixture of every step's logits (``"expected_logits"``, the default),
    the gate-weighted mean of every step's loss (``"expected"``), or the last step's logits (``"final"``); see
    :meth:`read_steps`. Without ``labels`` the logits are each token's exit-step readout (the last step without
    early exit). ``forward`` and ``generate`` take the loop arguments (``num_loops``, ``exit_threshold`` ...; see
    [`OuroModel.forward`] for the early-exit semantics); their defaults are in the config (``total_ut_steps``,
    ``early_exit_threshold``, ``exit_readout``). Returns [`OuroCausalLMOutput`]."""

    output_cache_field = OUTPUT_CACHE_FIELD

    _loop_defaults = {
        "num_loops": "total_ut_steps",
        "exit_threshold": "early_exit_threshold",
        "exit_readout": "exit_readout",
        "recurrent_kv_cache_mode": "recurrent_kv_cache_mode",
        "exit_at_step": None,
        "use_weighted_exit": None,
    }

    def __init__(self, config: OuroConfig):
        super().__init__(config)
        self.model = OuroModel(config)
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
        exit_threshold: float | None = None,
        exit_readout: str | None = None,
        recurrent_kv_cache_mode: str | None = None,
        exit_at_step: int | None = None,
        use_weighted_exit: bool = False,
        jsrr: JSRROptions | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> OuroCausalLMOutput:
        r"""The loop ([`OuroModel.forward`]: ``num_loops``, ``exit_threshold``, ``exit_readout``,
        ``recurrent_kv_cache_mode`` and ``jsrr`` or the ``spectral_radius_*`` keywords are its), then the readout and the loss
        (the last step's, or :meth:`read_steps`).

        Args:
            exit_at_step (`int`, *optional*): Without ``labels``, read the logits out of this loop step (0-based).
            use_weighted_exit (`bool`): Without ``labels``, return the exit-gate-weighted mixture of every step's
                logits.
        """
        loss_kwargs = {key: kwargs.pop(key) for key in LOSS_KWARGS if key in kwargs}
        if jsrr is not None or any(key.startswith("spectral_radius_") for key in kwargs):
            jsrr = JSRROptions.pop_from(kwargs, jsrr)  # the one place the estimate's options are read
        weighted = bool(use_weighted_exit)
        if labels is not None and (exit_at_step is not None or weighted):
            raise ValueError(
                "exit_at_step / use_weighted_exit choose the readout without labels; with labels the loss and its "
                f"logits are config.exit_loss's ({self.config.exit_loss!r})"
            )
        # whether the readout needs the state of every loop step (outputs.hidden_states)
        every_step = self.config.exit_loss != "final" if labels is not None else exit_at_step is not None or weighted
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            num_loops=num_loops,
            exit_threshold=exit_threshold,
            exit_readout=exit_readout,
            recurrent_kv_cache_mode=recurrent_kv_cache_mode,
            output_hidden_states=True if every_step else output_hidden_states,
            jsrr=jsrr,
            past_key_values=past_key_values,
            **kwargs,
        )
        if every_step:
            logits, loss = self.read_steps(outputs, labels, loss_kwargs, logits_to_keep, exit_at_step, weighted)
        else:  # each token's exit-step state (the last step without early exit)
            logits = self.lm_head(keep_positions(outputs.last_hidden_state, logits_to_keep))
            loss = None if labels is None else head_loss(self, logits, labels, loss_kwargs)
        wanted = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return OuroCausalLMOutput(
            loss=loss,
            logits=logits,
            **{OUTPUT_CACHE_FIELD: getattr(outputs, OUTPUT_CACHE_FIELD)},
            hidden_states=outputs.hidden_states if wanted or not every_step else None,
            attentions=outputs.attentions,
            exit_steps=outputs.exit_steps,
            exit_probs=outputs.exit_probs,
            loop_residual=outputs.loop_residual,
            spectral_radius=outputs.spectral_radius,
        )

    def _check_generate_call(self, kwargs: dict, generation_config) -> None:
        """Refuse assisted and prompt-lookup decoding under ``recurrent_kv_cache_mode="last_loop"``: verifying several
        proposed tokens in one forward lets the earlier loop steps see those tokens' own keys/values where token by
        token decoding shows them the last step's, so the output would depend on how many proposals were accepted.
        Warn once when ``num_loops`` is far beyond the config's count (:func:`warn_far_beyond`)."""
        if kwargs.get("num_loops") is not None:
            warn_far_beyond(self, kwargs["num_loops"], self.config.total_ut_steps, "total_ut_steps")
        mode = kwargs.get("recurrent_kv_cache_mode") or self.config.recurrent_kv_cache_mode
        option = self.speculative_option(kwargs, generation_config)
        if check_recurrent_kv_cache_mode(mode) == "last_loop" and option is not None:
            raise ValueError(
                f"generate({option}=...) (assisted / prompt-lookup decoding) is not supported with "
                "recurrent_kv_cache_mode='last_loop': the verified chunks would change what the earlier loop steps "
                "attend to, so the output would differ from plain decoding. Pass recurrent_kv_cache_mode='per_loop'."
            )

    def read_steps(self, outputs, labels, loss_kwargs: dict, logits_to_keep, exit_at_step, weighted: bool):
        """``(logits, loss)`` read from the state of every loop step (``outputs.hidden_states``). Without ``labels``:
        the state of step ``exit_at_step`` (0-based, as in the published code), else the expected logits
        (``use_weighted_exit=True``). With ``labels``, ``config.exit_loss``'s: the cross-entropy of the expected
        logits (``"expected_logits"``) or the expected cross-entropy over the steps (``"expected"``)."""
        states = outputs.hidden_states[1:]
        if exit_at_step is not None:
            return self.lm_head(keep_positions(read_step(states, exit_at_step), logits_to_keep)), None
        if labels is None:
            warn_if_gate_untrained(self, "use_weighted_exit")
        probs = keep_positions(outputs.exit_probs, logits_to_keep)
        step_logits = [self.lm_head(keep_positions(h, logits_to_keep)) for h in states]
        logits = sum(p[..., None].to(x.dtype) * x for p, x in zip(probs.unbind(-1), step_logits))
        if labels is None:
            return logits, None
        if self.config.exit_loss == "expected_logits":
            return logits, head_loss(self, logits, labels, loss_kwargs)
        return logits, expected_exit_loss(step_logits, probs, labels, loss_kwargs, self.config.exit_entropy_weight)

    def train(self, mode: bool = True):
        """[`nn.Module.train`]; entering training records ``config.exit_gate_trained`` (not ``forward``, which leaves
        the config alone): ``True`` when the loss trains the gate, ``False`` when the weights are trained without it
        (``exit_loss="final"``: a gate trained before no longer matches them); unchanged when the gate is frozen by
        other means (LoRA trains adapters only)."""
        if mode and self.config.exit_loss == "final":
            self.config.exit_gate_trained = False
        elif mode and self.model.early_exit_gate.weight.requires_grad:
            self.config.exit_gate_trained = True
        return super().train(mode)


__all__ = [
    "OuroCache",
    "OuroCausalLMOutput",
    "OuroForCausalLM",
    "OuroModel",
    "OuroModelOutput",
    "OuroPreTrainedModel",
]
