"""Ouro as a vLLM model: the package's own decoder layers, with vLLM's paged attention in place of the kernel.

vLLM (0.26 and earlier) had a native Ouro; 0.27 removed it. This is the model the plugin
(:mod:`equilibria.serving.vllm_plugin`) registers under the architecture name ``OuroForCausalLM``. It is written
against vLLM's model interface (``__init__(vllm_config=, prefix=)``, ``embed_input_ids``, ``forward(input_ids,
positions)``, ``compute_logits``, ``load_weights``) and its attention layer
(``vllm.model_executor.layers.attention.Attention``), and it computes with the package's own modules
(:class:`~equilibria.modeling.modeling_ouro.OuroModel`: its embeddings, its loop step, its exit gate and early-exit
bookkeeping), so that a served folder gives the tokens of the package's ``generate``. Only the attention kernel is
vLLM's: the package's attention calls it through transformers' attention interface (:func:`paged_attention`,
registered as ``"equilibria_vllm"``), given the vLLM layer that owns the cache entry of its (loop step, layer).

The KV cache. vLLM keeps one cache per attention layer, named by its prefix, and a layer called twice in one forward
overwrites the keys/values its first call wrote. So the ``per_loop`` layout (``config.recurrent_kv_cache_mode``, the
published one) has one vLLM attention layer per (loop step, layer), ``T x L`` in all, named
``model.layers.{t * L + l}.self_attn.attn`` as vLLM's own looped models name theirs. The ``last_loop`` layout has
``L``: every step of a forward writes its keys/values for the forward's tokens and attends, and the last step's
write is what later forwards read, which is that layout's definition (earlier steps see past tokens' last-step
keys/values and the current tokens' own).

The loop count is ``config.total_ut_steps`` (per server: ``hf_overrides={"total_ut_steps": k}``), the exit threshold
``config.early_exit_threshold`` and the readout ``config.exit_readout``, with the semantics of
:class:`~equilibria.modeling.modeling_ouro.OuroEarlyExit`. vLLM flattens a batch into one sequence of tokens; the
loop runs on it as a batch of one row, and the early exit skips the remaining steps once every token of the forward
has exited (their cache entries then get the exited tokens' frozen keys/values, as the package's cache does).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Sequence

import torch
from torch import nn
from transformers import AttentionInterface
from vllm.config import VllmConfig
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.config import VerifyAndUpdateConfig
from vllm.platforms import current_platform

from ..modeling.configuration_ouro import OuroConfig
from ..modeling.modeling_ouro import OuroEarlyExit, OuroModel, exit_distribution, read_at_exit, warn_if_gate_untrained
from .vllm_loop_counts import SERVED, LoopCounts, LoopCountsRefusedV2, token_counts

ATTENTION_NAME = "equilibria_vllm"
#: head sizes vLLM's CPU attention kernel runs (``vllm/v1/attention/backends/cpu_attn.py``)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def paged_attention(module: nn.Module, query, key, value, attention_mask, **kwargs):
    """The attention kernel of the package's :class:`~equilibria.modeling.layers.Attention` when vLLM serves it:
    vLLM's attention layer for this (loop step, layer), ``kwargs["vllm_layers"][module.layer_idx]``, writes the
    tokens' keys/values into its paged cache and attends over the cache with vLLM's metadata (causal, request by
    request; ``attention_mask`` is not used). Shapes: query ``(1, heads, tokens, head_dim)``, keys/values
    ``(1, kv_heads, tokens, head_dim)``; returns ``((1, tokens, heads, head_dim), None)``."""
    layer = kwargs["vllm_layers"][module.layer_idx]
    return layer(*map(flat_heads, (query, key, value))).view(1, query.shape[2], -1, module.head_dim), None


def flat_heads(x: torch.Tensor) -> torch.Tensor:
    """``(1, heads, tokens, head_dim)`` -> ``(tokens, heads * head_dim)``, the layout of vLLM's attention layer."""
    return x[0].transpose(0, 1).reshape(x.shape[2], -1)


AttentionInterface.register(ATTENTION_NAME, paged_attention)


class NotServable(ValueError):
    """What of a folder (or of the engine's settings) this model cannot serve, in one line."""


def refusals(error: BaseException) -> list[NotServable]:
    """The :class:`NotServable` errors ``error`` is, or carries: vLLM's config is a pydantic dataclass, whose
    validation wraps the error of a config hook in a ``ValidationError`` (``errors()[i]["ctx"]["error"]``)."""
    if isinstance(error, NotServable):
        return [error]
    details = error.errors() if callable(getattr(error, "errors", None)) else []
    return [e["ctx"]["error"] for e in details if isinstance((e.get("ctx") or {}).get("error"), NotServable)]


def print_refusals(kind, error, trace, previous=sys.excepthook) -> None:
    """``sys.excepthook`` of vLLM's processes (installed by the plugin): a folder this model cannot serve ends the
    process (``vllm serve``, a script) with one line per refusal instead of vLLM's traceback; any other error goes
    to the hook that was there."""
    found = refusals(error)
    if not found:
        return previous(kind, error, trace)
    for refusal in found:
        print(f"error: {refusal}", file=sys.stderr)


def check_servable(config, vllm_config: VllmConfig) -> None:
    """Raise :class:`NotServable` in one line naming what of ``config`` (or of the engine's settings) this model cannot
    serve."""
    if not isinstance(config, OuroConfig):
        architecture = (getattr(config, "architectures", None) or ["?"])[0]
        raise NotServable(
            f"equilibria's vLLM plugin serves Ouro folders only (model_type {OuroConfig.model_type!r}); this folder is "
            f"{getattr(config, 'model_type', '?')!r} ({architecture}), which vLLM cannot serve: run it with the "
            "package (AutoModelForCausalLM.from_pretrained, generate)."
        )
    parallel = vllm_config.parallel_config
    if parallel.tensor_parallel_size > 1 or parallel.pipeline_parallel_size > 1:
        raise NotServable(
            "equilibria's Ouro for vLLM runs on one device: tensor_parallel_size and pipeline_parallel_size must be "
            f"1, got {parallel.tensor_parallel_size} and {parallel.pipeline_parallel_size}."
        )
    if config.use_sliding_window or "sliding_attention" in (config.layer_types or ()):
        raise NotServable(
            "equilibria's Ouro for vLLM does not serve sliding-window attention (config use_sliding_window / "
            "layer_types 'sliding_attention'); the published Ouro checkpoints use full attention."
        )
    if current_platform.is_cpu() and config.head_dim not in CPU_HEAD_SIZES:
        raise NotServable(
            f"vLLM's CPU attention runs head sizes {list(CPU_HEAD_SIZES)} only; this Ouro's head_dim is "
            f"{config.head_dim} (hidden_size {config.hidden_size} / num_attention_heads {config.num_attention_heads})."
        )


class ConfigCheck(VerifyAndUpdateConfig):
    """vLLM's per-architecture config hook (``MODELS_CONFIG_MAP``), run where vLLM builds its config, before any worker
    starts: :func:`check_servable`, so that a folder this model cannot serve is refused in one line; and the loop
    count per request (:mod:`~equilibria.serving.vllm_loop_counts`): what the server allows, recorded for the check of
    each request, and the logits processor that carries the counts to the model."""

    @staticmethod
    def verify_and_update_config(vllm_config: VllmConfig) -> None:
        config = vllm_config.model_config.hf_config
        check_servable(config, vllm_config)
        SERVED["max"], SERVED["refused"] = max_num_loops(config), per_request_refusal(config)
        if vllm_config.speculative_config is not None:
            raise NotServable("equilibria's Ouro for vLLM does not run speculative decoding (speculative_config).")
        processor = LoopCountsRefusedV2 if vllm_config.use_v2_model_runner else LoopCounts
        model_config = vllm_config.model_config
        model_config.logits_processors = [*(model_config.logits_processors or []), processor]


def max_num_loops(config) -> int:
    """The most loops a request may ask for: ``config.max_num_loops`` (set with ``hf_overrides``), else the folder's
    count; :class:`NotServable` for one below it."""
    most = getattr(config, "max_num_loops", None) or config.total_ut_steps
    if isinstance(most, bool) or not isinstance(most, int) or most < config.total_ut_steps:
        raise NotServable(
            f"max_num_loops must be an integer >= total_ut_steps ({config.total_ut_steps}), got {most!r}."
        )
    return most


def per_request_refusal(config) -> str | None:
    """Why this server takes no loop count per request (None: it does)."""
    threshold = config.early_exit_threshold
    if threshold is not None and threshold < 1.0:
        return f"not taken with the exit gate on (early_exit_threshold={threshold}); its count is total_ut_steps"
    if config.recurrent_kv_cache_mode != "per_loop":
        return "not taken with the last_loop cache layout, whose one entry per layer is written by the last step"
    return None


class OuroForCausalLM(nn.Module):
    """Ouro for vLLM (see the module's docstring). Parameter names are those of the package's
    ``OuroForCausalLM`` and of the published checkpoints (``model.layers.0.self_attn.q_proj.weight`` ...), so a
    folder's weights load by name."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config = copy.deepcopy(vllm_config.model_config.hf_config)
        check_servable(config, vllm_config)
        self.config = config
        self.num_loops = config.total_ut_steps
        self.threshold = config.early_exit_threshold
        if self.threshold is not None and self.threshold >= 1.0:
            self.threshold = None
        self.max_loops = max_num_loops(config)
        refusal = per_request_refusal(config)
        if self.max_loops > self.num_loops and refusal:
            raise NotServable(f"max_num_loops is for loop counts per request, which are {refusal}")
        self.per_request = refusal is None
        #: with prefix caching a block's cache entries may serve a later request of any count: every forward then
        #: runs max_num_loops steps, so that every entry holds what that many steps compute
        self.prefix_caching = bool(vllm_config.cache_config.enable_prefix_caching)
        self.model = OuroModel(config)
        config._attn_implementation = ATTENTION_NAME  # the package's attention calls vLLM's (paged_attention)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        entries = config.num_hidden_layers * (self.max_loops if config.recurrent_kv_cache_mode == "per_loop" else 1)
        self.attn = nn.ModuleList(self._attention_layer(vllm_config, prefix, entry) for entry in range(entries))
        if self.threshold is not None:
            warn_if_gate_untrained(self.model, f"vLLM's early exit (early_exit_threshold={self.threshold})")
        #: forwards run and loop steps run in them (read with ``LLM.apply_model``: what the exit gate saves)
        self.forwards_run, self.loop_steps_run = 0, 0

    def _attention_layer(self, vllm_config: VllmConfig, prefix: str, entry: int) -> Attention:
        config = self.config
        name = f"{prefix}.model" if prefix else "model"
        return Attention(
            config.num_attention_heads,
            config.head_dim,
            config.head_dim**-0.5,
            num_kv_heads=config.num_key_value_heads,
            cache_config=vllm_config.cache_config,
            quant_config=vllm_config.quant_config,
            prefix=f"{name}.layers.{entry}.self_attn.attn",
        )

    def _layers(self, step: int) -> Sequence[Attention]:
        """The vLLM attention layers of loop step ``step``, by layer."""
        num_layers = self.config.num_hidden_layers
        first = step * num_layers if len(self.attn) > num_layers else 0
        return self.attn[first : first + num_layers]

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors=None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """The readout state of each token (``(tokens, hidden_size)``) after the loop."""
        self.forwards_run += 1
        hidden = (self.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds)[None]
        position_embeddings = self.model.rotary_emb(hidden, positions[None])
        return self._loop(hidden, position_embeddings)[0]

    def _loop(self, hidden: torch.Tensor, position_embeddings) -> torch.Tensor:
        """Run the loop steps on ``hidden`` (``(1, tokens, hidden)``) and read each token out: at its request's loop
        count (:meth:`_plan`), or with an exit threshold at its exit step (:meth:`_loop_with_exit`)."""
        if self.threshold is not None:
            return self._loop_with_exit(hidden, position_embeddings)
        steps, counts = self._plan(hidden.shape[1])
        picked = None if counts is None else torch.zeros_like(hidden)
        for step in range(steps):
            hidden = self._step(hidden, step, position_embeddings)
            if counts is not None:
                picked = torch.where((counts == step + 1)[None, :, None], self.model.readout(hidden), picked)
        return self.model.readout(hidden) if counts is None else picked

    def _plan(self, tokens: int) -> tuple[int, torch.Tensor | None]:
        """``(steps to run, each token's count or None)``: the folder's count for every token, unless requests ask
        for their own (:func:`~equilibria.serving.vllm_loop_counts.token_counts`); the most of those, or with prefix
        caching always ``max_num_loops`` (see ``prefix_caching``); ``counts`` is None when every token is read at
        the last step."""
        counts = token_counts(self.attn[0].layer_name, tokens, self.num_loops) if self.per_request else None
        if self.prefix_caching:
            steps = self.max_loops
        else:
            steps = self.num_loops if counts is None else int(counts.max())
        if counts is None and steps != self.num_loops:
            counts = torch.full((tokens,), self.num_loops)
        device = self.model.embed_tokens.weight.device
        return steps, None if counts is None else counts.to(device)

    def _step(self, hidden: torch.Tensor, step: int, position_embeddings, early: OuroEarlyExit | None = None):
        """One loop step (the package's :meth:`~equilibria.modeling.modeling_ouro.OuroModel.loop_step`) with the
        vLLM attention layers of ``step``."""
        masks = {"full_attention": None}
        self.loop_steps_run += 1
        new = self.model.loop_step(
            hidden, step, position_embeddings, masks, early_exit=early, vllm_layers=self._layers(step)
        )
        return new if early is None else early.end_step(hidden, new)

    def _loop_with_exit(self, hidden: torch.Tensor, position_embeddings) -> torch.Tensor:
        """The loop with the exit gate: each token read out at its exit step (``config.exit_readout``: ``"frozen"``
        stops computing exited tokens and skips the remaining steps once all have exited, ``"reference"`` computes
        every step)."""
        model, num_loops, threshold = self.model, self.num_loops, self.threshold
        reference = self.config.exit_readout == "reference"
        early = None if reference else OuroEarlyExit(threshold, 1, hidden.shape[1], num_loops, hidden.device, False)
        states, gate_logits = [], []
        for step in range(num_loops):
            if early is not None and not early.start_step():  # every token has exited
                self._backfill(early, step)
                break
            hidden = self._step(hidden, step, position_embeddings, early)
            if reference:
                states.append(model.readout(hidden))
            if step < num_loops - 1:
                gate_logits.append(model.exit_logit(hidden))
                if early is not None:
                    early.observe_gate(step, gate_logits[-1])
        if reference:
            return read_at_exit(states, exit_distribution(gate_logits, hidden), threshold)[0]
        return model.readout(hidden)

    def _backfill(self, early: OuroEarlyExit, step: int) -> None:
        """Every token has exited before ``step``: write their frozen keys/values into the cache entries of the
        remaining steps (``per_loop``; under ``last_loop`` the one entry per layer holds them already). vLLM's
        attention layer writes as it attends; the attention output is not used."""
        if len(self.attn) == self.config.num_hidden_layers:
            return
        for later in range(step, self.num_loops):
            for layer_idx, layer in enumerate(self._layers(later)):
                key, value = map(flat_heads, early.kv[layer_idx])
                query = key.new_zeros(key.shape[0], self.config.num_attention_heads * self.config.head_dim)
                layer(query, key, value)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy the folder's tensors into the parameters of the same name; returns the names loaded (vLLM then
        checks that every parameter was). ``lm_head.weight`` is skipped when it is tied to the embeddings."""
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            if name not in params:
                raise ValueError(f"the folder's weight {name!r} is not a parameter of Ouro ({len(params)} are)")
            params[name].data.copy_(tensor)
            loaded.add(name)
        return loaded
