"""The standard transformer pieces the families are built from: RMSNorm, rotary embeddings, the SwiGLU MLP,
multi-head attention with grouped key/value heads (Ouro's included: its attention reads the cache entry of a (loop
step, layer) and takes the early exit's frozen keys/values) and a pre-norm decoder layer. Their parameter names are those
of transformers' Llama classes (``self_attn.q_proj``, ``mlp.gate_proj``, ``input_layernorm`` ...), which these
families used before, so checkpoints saved then load unchanged (``tests/test_saved_checkpoints.py``).

Hub-portable: travels as remote code beside the modeling files. It imports only transformers' public building
blocks (activations, the attention-kernel registry, the RoPE initialisers, the gradient-checkpointing layer), not
another model's modeling file, so a change inside Llama's cannot break a pushed folder.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


class RMSNorm(nn.Module):
    """``weight * x / rms(x)``, computed in float32."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class RotaryEmbedding(nn.Module):
    """``(cos, sin)`` of the rotary embedding at the given positions (``config.rope_parameters``: the default RoPE
    or one of transformers' scaled variants)."""

    def __init__(self, config):
        super().__init__()
        self.max_seq_len_cached = config.max_position_embeddings
        self.original_max_seq_len = config.max_position_embeddings
        self.config = config
        self.rope_type = config.rope_parameters["rope_type"]
        rope_init_fn: Callable = self.compute_default_rope_parameters
        if self.rope_type != "default":
            rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = rope_init_fn(config)
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config, **kwargs) -> tuple[torch.Tensor, float]:
        base = config.rope_parameters["rope_theta"]
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0

    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim: int = 1):
    """``(q, k)`` rotated by the rotary embedding ``(cos, sin)``: each half-pair ``(x1, x2)`` of the head dimension
    turns into ``(x1 cos - x2 sin, x2 cos + x1 sin)``."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q1, q2 = q.chunk(2, dim=-1)
    k1, k2 = k.chunk(2, dim=-1)
    return (q * cos) + (torch.cat((-q2, q1), dim=-1) * sin), (k * cos) + (torch.cat((-k2, k1), dim=-1) * sin)


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(batch, kv_heads, seq, dim) -> (batch, kv_heads * n_rep, seq, dim)."""
    if n_rep == 1:
        return hidden_states
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Attention in plain torch (``attn_implementation="eager"``; the only one that returns the weights)."""
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
        else:
            attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


class MLP(nn.Module):
    """SwiGLU: ``down(act(gate(x)) * up(x))``."""

    def __init__(self, config):
        super().__init__()
        bias = getattr(config, "mlp_bias", False)
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    """Multi-head attention with rotary positions and grouped key/value heads; causal unless ``is_causal`` is set
    to False, over a sliding window on a config's ``"sliding_attention"`` layers. With a cache, the new keys/values
    are appended to it (``cache.update(keys, values, cache_index)``, ``cache_index`` the layer's index unless a
    looped model passes its (loop step, layer) entry) and attention reads all of them.

    ``early_exit``: a looped model's early-exit state (Ouro's), which holds the keys/values of tokens that stopped
    looping: ``early_exit.merge(layer_idx, key, value)`` puts those in place of the new ones before the cache sees
    them, and ``early_exit.keys_for_attention(key, value)`` keeps the rows still looping."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = True
        layer_types = getattr(config, "layer_types", None)
        sliding = layer_types is not None and layer_types[layer_idx] == "sliding_attention"
        self.sliding_window = config.sliding_window if sliding else None
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        bias = getattr(config, "attention_bias", False)
        self.q_proj = nn.Linear(config.hidden_size, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, config.hidden_size, bias=bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        cache_index: int | None = None,
        early_exit=None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(output, weights or None)``: the attention with the configured kernel, then the output projection."""
        hidden_shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        if early_exit is not None:
            key, value = early_exit.merge(self.layer_idx, key, value)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx if cache_index is None else cache_index)
        if early_exit is not None:
            key, value = early_exit.keys_for_attention(key, value)
        attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        if self.sliding_window is not None:
            kwargs["sliding_window"] = self.sliding_window
        dropout = 0.0 if not self.training else self.attention_dropout
        output, weights = attention(
            self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )
        return self.o_proj(output.reshape(*output.shape[:2], -1).contiguous()), weights


class LayerScale(nn.Module):
    """A per-channel gate ``maximum * sigmoid(logit)`` on a residual branch (LayerScale with a bounded gate), starting
    at ``initial`` (``initial / maximum`` is clamped to ``[1e-6, 1 - 1e-6]`` before the logit is taken)."""

    def __init__(self, hidden_size: int, initial: float, maximum: float = 1.0) -> None:
        super().__init__()
        share = min(max(initial / maximum, 1e-6), 1.0 - 1e-6)
        self.maximum = float(maximum)
        self.initial_logit = math.log(share / (1.0 - share))
        self.logit = nn.Parameter(torch.full((hidden_size,), self.initial_logit))

    def forward(self, branch: torch.Tensor) -> torch.Tensor:
        return branch * (self.maximum * torch.sigmoid(self.logit)).to(branch.dtype)


class DecoderLayer(GradientCheckpointingLayer):
    """A pre-norm transformer layer: ``h = h + attn(norm(h))``, then ``h = h + mlp(norm(h))``; with
    ``layer_scale=(initial, maximum)`` each branch is multiplied by its own [`LayerScale`] gate first."""

    def __init__(self, config, layer_idx: int, layer_scale: tuple[float, float] | None = None):
        super().__init__()
        self.self_attn = Attention(config, layer_idx)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        gates = (LayerScale(config.hidden_size, *layer_scale) for _ in range(2)) if layer_scale else (None, None)
        self.attn_scale, self.mlp_scale = gates

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        attended, _ = self.self_attn(
            self.input_layernorm(hidden_states),
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            cache=cache,
            **kwargs,
        )
        if self.attn_scale is not None:
            attended = self.attn_scale(attended)
        hidden_states = hidden_states + attended
        update = self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states + (update if self.mlp_scale is None else self.mlp_scale(update))


__all__ = [
    "MLP",
    "Attention",
    "DecoderLayer",
    "LayerScale",
    "RMSNorm",
    "RotaryEmbedding",
    "apply_rotary_pos_emb",
    "eager_attention_forward",
    "repeat_kv",
]
