"""The Equilibrium Reasoner (Huang, Geng and Kolter, 2026, "Equilibrium Reasoners: Learning Attractors Enables
Scalable Reasoning").

A weight-tied block ``f(z; x) = norm(block(z + embed(x)))`` is iterated on a latent state ``z`` (one vector per
puzzle cell), from a random start, with damping ``lambda`` (``config.inertia``) and Gaussian noise ``beta``:

    z_{k+1} = z_k + (1 - lambda) * (f(z_k; x) - z_k) + beta * eps_k.

Trained so that correct answers are stable, reachable fixed points, it scales at test time in depth (more
iterations) and breadth (more random restarts), picking per puzzle the restart whose trajectory converged best
(lowest final residual ``||f(z) - z||``), the most common answer, or the one the halting head trusts most:
[`EqRForPuzzleSolving.solve`].

This module travels to the Hub as remote code: it imports only torch, transformers and its siblings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from transformers import initialization as init
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput, ModelOutput, TokenClassifierOutput
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import can_return_tuple

from .checkpoints import StrictLoadingMixin
from .configuration_eqr import SELECTIONS, EqRConfig, check_noise
from .layers import MLP, DecoderLayer, RMSNorm, RotaryEmbedding
from .loop_map import LoopMap
from .looped_lm import as_int, check_keywords, head_loss, shared_fields
from .puzzles import check_puzzle_labels, puzzle_inputs, puzzle_solved
from .solvers import residual


def check_depth(value, name: str = "depth") -> int:
    return as_int(value, name, 1, "iterations of the weight-tied block")


def gainless_rms_norm(hidden: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS normalisation over the last axis without a learned gain, computed in float32 (the published code's)."""
    x = hidden.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(hidden.dtype)


class EqRMixerLayer(nn.Module):
    """An MLP-Mixer layer: a token-mixing MLP across the cells, then a channel MLP. ``norm_style="pre"``: each
    branch pre-normed (RMSNorm with gains over the width) and residual. ``"post"`` (the published code's): ``h =
    rms(h + branch(h))`` without gains, the token branch's norm taken over the cells. ``token_mixer``: a SiLU MLP
    (``"mlp"``) or a SwiGLU (``"swiglu"``: ``token_in`` gives the gate and the value)."""

    def __init__(self, config: EqRConfig):
        super().__init__()
        self.seq_len, self.eps = config.max_seq_len, config.rms_norm_eps
        self.post = config.norm_style == "post"
        self.swiglu = config.token_mixer == "swiglu"
        width = config.token_mixing_size * (2 if self.swiglu else 1)
        self.token_in = nn.Linear(config.max_seq_len, width, bias=config.mlp_bias)
        self.token_out = nn.Linear(config.token_mixing_size, config.max_seq_len, bias=config.mlp_bias)
        self.channel_mlp = MLP(config)
        if not self.post:
            self.token_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.channel_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def _mix_tokens(self, cells_last: torch.Tensor) -> torch.Tensor:
        """The token-mixing MLP on ``(batch, width, cells)``."""
        inner = self.token_in(cells_last)
        if self.swiglu:
            gate, value = inner.chunk(2, dim=-1)
            return self.token_out(nn.functional.silu(gate) * value)
        return self.token_out(nn.functional.silu(inner))

    def forward(self, hidden: torch.Tensor, **kwargs) -> torch.Tensor:
        if hidden.shape[1] != self.seq_len:
            raise ValueError(
                f"the token-mixing block needs puzzles of exactly max_seq_len={self.seq_len} cells, got "
                f"{hidden.shape[1]}; use block_type='attention' for variable sizes."
            )
        if self.post:
            cells_last = hidden.transpose(1, 2)
            hidden = gainless_rms_norm(cells_last + self._mix_tokens(cells_last), self.eps).transpose(1, 2)
            return gainless_rms_norm(hidden + self.channel_mlp(hidden), self.eps)
        hidden = hidden + self._mix_tokens(self.token_norm(hidden).transpose(1, 2)).transpose(1, 2)
        return hidden + self.channel_mlp(self.channel_norm(hidden))


@dataclass
class EqRLoopTelemetry:
    r"""The loop's telemetry in EqR's outputs.

    residuals (`torch.FloatTensor` of shape `(batch, depth)`): per step ``k``, the relative residual
        ``||f(z_k) - z_k|| / ||f(z_k)||`` of each puzzle (the last column is the final one).
    halt_logits (`torch.FloatTensor` of shape `(batch, depth)`): the halting head's logit after each step
        ("the current answer is right"); ``None`` without a halting head.
    states (`tuple(torch.FloatTensor)`): with ``output_states=True``, ``z_0 .. z_D``.
    state (`torch.FloatTensor` of shape `(batch, seq_len, config.state_size)`): the final state ``z_D``, to continue
        from (pass it back as ``state``); with the two-level recurrence ``[z_H, z_L]``.
    steps (`torch.LongTensor` of shape `(batch,)`): applications of the weight-tied block per row: ``depth``, or
        fewer for a row that halted (``halt_threshold``). With halting the telemetry has one column per step the
        longest row ran, and a halted row's state, residual and halting logit stay at their values when it stopped.
    """

    residuals: torch.FloatTensor | None = None
    halt_logits: torch.FloatTensor | None = None
    states: tuple[torch.FloatTensor, ...] | None = None
    steps: torch.LongTensor | None = None
    state: torch.FloatTensor | None = None


@dataclass
class EqRModelOutput(EqRLoopTelemetry, BaseModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`): the final answer state (``z_D``;
        with the two-level recurrence its ``z_H``).
    residuals, halt_logits, states, state: the loop's telemetry ([`EqRLoopTelemetry`]).
    """


@dataclass
class EqRPuzzleOutput(EqRLoopTelemetry, TokenClassifierOutput):
    r"""
    loss (`torch.FloatTensor`): ``lm_loss + halt_loss_weight * halt_loss`` when ``labels`` are given.
    logits (`torch.FloatTensor` of shape `(batch, seq_len, vocab_size)`): per-cell answer logits from ``z_D``.
    residuals, halt_logits, states: the loop's telemetry ([`EqRLoopTelemetry`]).
    lm_loss (`torch.FloatTensor`): cross-entropy of every cell's answer (cells labelled -100 are skipped; with
        ``config.answer_loss="stablemax"`` the stablemax cross-entropy).
    halt_loss (`torch.FloatTensor`): binary cross-entropy of the final halting logit against "every cell is
        right"; ``None`` without a halting head. ``loss`` adds it times ``config.halt_loss_weight``.
    """

    lm_loss: torch.FloatTensor | None = None
    halt_loss: torch.FloatTensor | None = None


@dataclass
class EqRSolveOutput(ModelOutput):
    r"""
    answers (`torch.LongTensor` of shape `(num_puzzles, seq_len)`): the selected answer tokens per puzzle.
    chosen (`torch.LongTensor` of shape `(num_puzzles,)`): which restart was selected.
    predictions (`torch.LongTensor` of shape `(num_puzzles, breadth, seq_len)`): every restart's answer.
    residuals (`torch.FloatTensor` of shape `(num_puzzles, breadth)`): every restart's final relative residual.
    halt_probs (`torch.FloatTensor` of shape `(num_puzzles, breadth)`): the halting head's final probability.
    votes (`torch.LongTensor` of shape `(num_puzzles, breadth)`): how many restarts gave the same answer.
    steps (`torch.LongTensor` of shape `(num_puzzles, breadth)`): block applications per restart (``depth``
        unless it halted early).
    nfe (`torch.LongTensor` of shape `(num_puzzles,)`): function evaluations per puzzle: the applications of the
        weight-tied block summed over its restarts (``depth * breadth`` without halting; an iteration of the
        two-level recurrence applies it ``l_cycles + 1`` times).
    """

    answers: torch.LongTensor | None = None
    chosen: torch.LongTensor | None = None
    predictions: torch.LongTensor | None = None
    residuals: torch.FloatTensor | None = None
    halt_probs: torch.FloatTensor | None = None
    votes: torch.LongTensor | None = None
    steps: torch.LongTensor | None = None
    nfe: torch.LongTensor | None = None


class EqRPreTrainedModel(StrictLoadingMixin, PreTrainedModel):
    config_class = EqRConfig
    config: EqRConfig
    main_input_name = "inputs"
    _no_split_modules = ["DecoderLayer", "EqRMixerLayer"]
    _supports_sdpa = True
    _supports_attention_backend = True
    _remote_auto_map = {
        "AutoConfig": "configuration_eqr.EqRConfig",
        "AutoModel": "modeling_eqr.EqRModel",
        "AutoModelForTokenClassification": "modeling_eqr.EqRForPuzzleSolving",
    }

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if self.config.init_scheme == "published":  # the code's: truncated normals scaled by the fan-in
            if isinstance(module, nn.Linear):
                init.trunc_normal_(module.weight, **_truncated(1.0 / math.sqrt(module.in_features)))
                if module.bias is not None:
                    init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                init.trunc_normal_(module.weight, **_truncated(1.0 / math.sqrt(module.embedding_dim)))
        else:
            super()._init_weights(module)
        if isinstance(module, EqRModel):
            init.normal_(module.init_state, std=float(self.config.init_std))
            if self.config.init_scheme == "published" and module.halt_head is not None:  # "not yet" at the start
                init.zeros_(module.halt_head.weight)
                init.constant_(module.halt_head.bias, -5.0)


def _truncation_scale(bound: float) -> float:
    """The standard deviation of a standard normal truncated to ``[-bound, bound]``."""
    mass = math.erf(bound / math.sqrt(2.0))
    density = math.exp(-0.5 * bound**2) / math.sqrt(2.0 * math.pi)
    return math.sqrt(1.0 - 2.0 * bound * density / mass)


def _truncated(std: float, bound: float = 2.0) -> dict:
    """``trunc_normal_`` arguments for a normal truncated at ``bound`` of its standard deviations whose actual
    standard deviation is ``std`` (the compensated truncation the published code uses)."""
    sigma = std / _truncation_scale(bound)
    return {"mean": 0.0, "std": sigma, "a": -bound * sigma, "b": bound * sigma}


def truncated_normal(shape, std: float, bound: float, generator=None, device=None, dtype=None) -> torch.Tensor:
    """Samples of a normal truncated at ``bound`` standard deviations, rescaled to standard deviation ``std``
    (by the inverse CDF, so that ``generator`` decides them)."""
    low = 0.5 * (1.0 + math.erf(-bound / math.sqrt(2.0)))
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64) * (1.0 - 2.0 * low) + low
    return (torch.special.ndtri(u) * (std / _truncation_scale(bound))).to(dtype)


class EqRModel(EqRPreTrainedModel):
    """The iterated weight-tied block with its random or learned start and the halting head. Returns
    [`EqRModelOutput`]."""

    def __init__(self, config: EqRConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        if config.block_type == "attention":
            self.rotary_emb = RotaryEmbedding(config=config)
            self.layers = nn.ModuleList([DecoderLayer(config, i) for i in range(config.total_layers)])
            for layer in self.layers:
                layer.self_attn.is_causal = False  # every cell sees every other
        else:
            self.rotary_emb = None
            self.layers = nn.ModuleList([EqRMixerLayer(config) for _ in range(config.total_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps) if config.norm_style == "pre" else None
        self.init_state = nn.Parameter(torch.zeros(config.state_size))  # the learned start (random_init off)
        self.halt_head = nn.Linear(config.hidden_size, 1) if config.halting else None
        self.post_init()

    def initial_state(
        self,
        batch_size: int,
        seq_len: int,
        generator: torch.Generator | None = None,
        dtype=None,
        random_init: bool | None = None,
    ) -> torch.Tensor:
        """``z_0`` of shape ``(batch_size, seq_len, config.state_size)``: ``N(0, init_std^2)`` per entry when
        ``random_init`` (default ``config.random_init``; truncated at ``config.init_truncation`` standard deviations
        when set), else the learned start on every cell."""
        dtype = dtype or self.embed_tokens.weight.dtype
        device = self.embed_tokens.weight.device
        shape = (batch_size, seq_len, self.config.state_size)
        if not (self.config.random_init if random_init is None else random_init):
            return self.init_state.to(dtype).expand(batch_size, seq_len, -1)
        std, bound = float(self.config.init_std), self.config.init_truncation
        if bound is not None:
            return truncated_normal(shape, std, float(bound), generator=generator, device=device, dtype=dtype)
        return torch.randn(shape, generator=generator, device=device, dtype=dtype) * std

    def embed(self, inputs: torch.LongTensor) -> torch.Tensor:
        """The puzzle's token embeddings (times ``sqrt(hidden_size)`` with ``config.scale_embeddings``)."""
        embeds = self.embed_tokens(inputs)
        return embeds * math.sqrt(self.config.hidden_size) if self.config.scale_embeddings else embeds

    def answer_state(self, state: torch.Tensor) -> torch.Tensor:
        """The part of the state the heads read: all of it, or ``z_H`` with the two-level recurrence."""
        return state[..., : self.config.hidden_size]

    def loop_map(
        self,
        inputs: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        input_ids: torch.LongTensor | None = None,
    ) -> LoopMap:
        """``(f, z_0)`` for these puzzles: one iteration without noise as a function of the state alone (the damped
        update ``z + (1 - inertia) (block(z) - z)``, or the two-level recurrence's whole iteration), and a fresh
        [`initial_state`] drawn with ``generator`` (for analysis and the audit)."""
        if self.config.untied_depth is not None:
            raise ValueError(
                "an untied model (config.untied_depth) applies a different block at each step: no loop map."
            )
        inputs = _puzzle_inputs(inputs, input_ids, self.config)
        embeds = self.embed(inputs)
        mask, position_embeddings = self._context(embeds, attention_mask)
        start = self.initial_state(*inputs.shape, generator=generator, dtype=embeds.dtype)
        return LoopMap(lambda z: self._iteration(z, embeds, mask, position_embeddings, 0.0, None)[0], start)

    def _context(self, embeds: torch.Tensor, attention_mask: torch.Tensor | None):
        if self.rotary_emb is None:
            if attention_mask is not None and not bool(attention_mask.all()):
                raise ValueError("the token-mixing block does not support padding (attention_mask with zeros).")
            return None, None
        positions = torch.arange(embeds.shape[1], device=embeds.device).unsqueeze(0)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=embeds, attention_mask=attention_mask)
        return mask, self.rotary_emb(embeds, positions)

    def _block(self, hidden, mask, position_embeddings, index: int = 0) -> torch.Tensor:
        """The block (the ``index``-th one of an untied model) on ``hidden`` (a state plus what is injected into
        it), with the final norm of the pre-norm style."""
        size = self.config.num_layers
        layers = self.layers if self.config.untied_depth is None else self.layers[index * size : (index + 1) * size]
        for layer in layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings)
        return hidden if self.norm is None else self.norm(hidden)

    def _damped(self, z, fz, beta: float, generator, clean: bool = False):
        """``z + (1 - inertia) (fz - z) + beta * eps`` (with ``clean``: and the update before the noise)."""
        z = z + (1.0 - float(self.config.inertia)) * (fz - z)
        noisy = z + beta * torch.randn(z.shape, generator=generator, device=z.device, dtype=z.dtype) if beta > 0 else z
        return (noisy, z) if clean else noisy

    def _iteration(self, z, embeds, mask, position_embeddings, beta: float, generator, index: int = 0):
        """One iteration: ``(new state, relative residual ||z' - z|| / ||z'||)``. One state: the damped, noisy update
        with ``f(z; x) = block(z + embed(x))``, its residual taken before the noise. Two-level (``config.l_cycles``):
        ``z_L`` updated ``l_cycles`` times from ``z_H + embed(x)``, then ``z_H`` from ``z_L``, each update damped and
        noisy; the residual is the whole iteration's (the noise of its inner updates included)."""
        if self.config.l_cycles == 0:
            fz = self._block(z + embeds, mask, position_embeddings, index)
            new, clean = self._damped(z, fz, beta, generator, clean=True)
            return new, residual(z, clean)[1]
        high, low = z.split(self.config.hidden_size, dim=-1)
        for _ in range(self.config.l_cycles):
            low = self._damped(low, self._block(low + high + embeds, mask, position_embeddings), beta, generator)
        high = self._damped(high, self._block(high + low, mask, position_embeddings), beta, generator)
        new = torch.cat([high, low], dim=-1)
        return new, residual(z, new)[1]

    def _halt_logit(self, z: torch.Tensor) -> torch.Tensor | None:
        """The halting head's logit per puzzle, from the mean over the cells or the first cell's answer state."""
        if self.halt_head is None:
            return None
        answer = self.answer_state(z)
        return self.halt_head(answer[:, 0] if self.config.halt_readout == "first" else answer.mean(dim=1)).squeeze(-1)

    @can_return_tuple
    def forward(
        self,
        inputs: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        state: torch.Tensor | None = None,
        num_loops: int | None = None,
        noise: float | None = None,
        generator: torch.Generator | None = None,
        random_init: bool | None = None,
        output_states: bool = False,
        input_ids: torch.LongTensor | None = None,
        halt_threshold: float | None = None,
        **kwargs,
    ) -> EqRModelOutput:
        r"""Iterate the block ``num_loops`` times.

        Args:
            inputs (`torch.LongTensor` of shape `(batch, seq_len)`): the puzzle tokens (or pass them as
                ``input_ids``, the name token-classification pipelines and collators use).
            state (`torch.Tensor`, *optional*): the state to start from (e.g. the last segment's, detached);
                default: a fresh [`initial_state`].
            num_loops (`int`, *optional*): iterations (>= 1); default ``config.num_loops``.
            noise (`float`, *optional*): ``beta`` for this call; default ``config.train_noise`` in training mode
                and ``config.test_noise`` otherwise.
            generator (`torch.Generator`, *optional*): randomness of the start and the noise.
            random_init (`bool`, *optional*): start from a random state (True) or the learned one (False) when no
                ``state`` is given; default ``config.random_init``.
            halt_threshold (`float`, *optional*): adaptive computation: the halting head is read after every step
                and a row stops once its halting probability reaches this value (in ``(0, 1]``); the rows still
                running are then computed without the stopped ones. ``steps`` reports the block applications per
                row. Default None: every row runs ``num_loops`` steps.
        """
        check_keywords(self, kwargs)
        inputs = _puzzle_inputs(inputs, input_ids, self.config)
        depth = check_depth(self.config.num_loops if num_loops is None else num_loops, "num_loops")
        if self.config.untied_depth is not None and depth != self.config.untied_depth:
            raise ValueError(
                f"this model is untied (untied_depth={self.config.untied_depth}): it runs exactly that many steps, "
                f"got num_loops={depth}."
            )
        beta = (self.config.train_noise if self.training else self.config.test_noise) if noise is None else noise
        beta = check_noise(beta)
        threshold = self._check_halt_threshold(halt_threshold)
        embeds = self.embed(inputs)
        mask, position_embeddings = self._context(embeds, attention_mask)
        batch, seq_len = inputs.shape
        z = self.initial_state(batch, seq_len, generator, embeds.dtype, random_init) if state is None else state
        if z.shape != (batch, seq_len, self.config.state_size):
            raise ValueError(
                f"state must have shape {(batch, seq_len, self.config.state_size)} (batch, cells, config.state_size), "
                f"got {tuple(z.shape)}"
            )
        step = partial(
            self._update,
            embeds=embeds,
            mask=mask,
            position_embeddings=position_embeddings,
            beta=beta,
            generator=generator,
        )
        return self._iterate(step, z, depth, threshold, output_states)

    def _check_halt_threshold(self, value) -> float | None:
        if value is None:
            return None
        if self.halt_head is None:
            raise ValueError("halt_threshold needs a halting head (config.halting=True).")
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not 0.0 < float(value) <= 1.0:
            raise ValueError(
                f"halt_threshold must be a probability in (0, 1] (or None to run the full depth), got {value!r}."
            )
        return float(value)

    def _update(self, z, embeds, mask, position_embeddings, rows, beta, generator, index: int = 0):
        """One damped, noisy step of the rows ``rows`` (all when None; ``z`` holds just those rows): returns the new
        state, the relative residual before the step and the halting logit after it (None without a head)."""
        if rows is not None:
            embeds = embeds[rows]
            if isinstance(mask, torch.Tensor) and mask.shape[0] > 1:
                mask = mask[rows]
        z, res = self._iteration(z, embeds, mask, position_embeddings, beta, generator, index)
        return z, res, self._halt_logit(z)

    def _iterate(self, step, z, depth: int, threshold: float | None, output_states: bool) -> EqRModelOutput:
        """Run ``step`` up to ``depth`` times; with a ``threshold`` a row stops once its halting probability
        reaches it, and the next steps run on the remaining rows only."""
        batch = z.shape[0]
        steps = torch.zeros(batch, dtype=torch.long, device=z.device)
        active = torch.ones(batch, dtype=torch.bool, device=z.device)
        states = (z,) if output_states else None
        residuals, halts = [], []
        rows = None  # the rows still running: None while all are
        for index in range(depth):
            new, res, halt = step(z if rows is None else z[rows], rows=rows, index=index)
            if rows is not None:  # the halted rows keep their state and telemetry
                new = z.index_copy(0, rows, new)
                res = residuals[-1].index_copy(0, rows, res)
                halt = halts[-1].index_copy(0, rows, halt)
            z = new
            steps += active.long()
            residuals.append(res)
            if halt is not None:
                halts.append(halt)
            if output_states:
                states += (z,)
            if threshold is not None:
                active &= torch.sigmoid(halt.float()) < threshold
                rows = active.nonzero().squeeze(1)
                if rows.numel() == 0:
                    break
                rows = None if rows.numel() == batch else rows
        return EqRModelOutput(
            last_hidden_state=self.answer_state(z),
            state=z,
            residuals=torch.stack(residuals, dim=1),
            halt_logits=torch.stack(halts, dim=1) if halts else None,
            states=states,
            steps=steps,
        )


def _puzzle_inputs(inputs, input_ids, config) -> torch.LongTensor:
    """The puzzle tokens (``inputs`` or ``input_ids``), checked against the config (:func:`puzzles.puzzle_inputs`)."""
    return puzzle_inputs(inputs, input_ids, config.vocab_size, config.max_seq_len, "max_seq_len")


class EqRForPuzzleSolving(EqRPreTrainedModel):
    """[`EqRModel`] with a per-cell answer head, the training losses and test-time depth x breadth
    [`solve`]. Registered for ``AutoModelForTokenClassification`` (one answer token per input cell)."""

    _auto_class = "AutoModelForTokenClassification"
    accepts_loss_kwargs = False  # the loss is a per-batch mean: the Trainer scales it for accumulation

    def __init__(self, config: EqRConfig):
        super().__init__(config)
        self.loss_type = "ForMaskedLM"  # self.loss_function: per-cell cross-entropy over the vocabulary, -100 skipped
        self.model = EqRModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        inputs: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        input_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> EqRPuzzleOutput:
        r"""Iterate and read the answers; with ``labels`` (``(batch, seq_len)``, -100 to skip a cell) also the
        losses. The puzzles come as ``inputs`` or ``input_ids``; the loop's arguments (``state``, ``num_loops``,
        ``noise``, ``generator``, ``random_init``, ``output_states``) go to [`EqRModel.forward`]."""
        inputs = _puzzle_inputs(inputs, input_ids, self.config)
        outputs: EqRModelOutput = self.model(inputs, attention_mask=attention_mask, **kwargs)
        logits = self.lm_head(outputs.last_hidden_state)
        loss = lm_loss = halt_loss = None
        if labels is not None:
            labels = check_puzzle_labels(labels, inputs)
            if self.config.answer_loss == "stablemax":
                lm_loss = stablemax_cross_entropy(logits, labels)
            else:
                lm_loss = head_loss(self, logits, labels)
            loss = lm_loss
            if outputs.halt_logits is not None:
                solved = puzzle_solved(logits, labels).float()
                halt_loss = nn.functional.binary_cross_entropy_with_logits(outputs.halt_logits[:, -1].float(), solved)
                loss = loss + float(self.config.halt_loss_weight) * halt_loss
        return EqRPuzzleOutput(
            loss=loss,
            logits=logits,
            lm_loss=lm_loss,
            halt_loss=halt_loss,
            **shared_fields(outputs, EqRPuzzleOutput),
        )

    @torch.no_grad()
    def solve(
        self,
        inputs: torch.LongTensor,
        depth: int | None = None,
        breadth: int = 1,
        select: str = "residual",
        noise: float | None = None,
        attention_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        halt_threshold: float | None = None,
    ) -> EqRSolveOutput:
        """Test-time scaling: ``breadth`` random restarts of ``depth`` iterations per puzzle, run batched, and one
        answer selected per puzzle by ``select``:

        * ``"residual"``: the restart with the lowest final residual (the best-converged trajectory);
        * ``"vote"``: the most common answer among the restarts (ties: the lowest residual among them);
        * ``"halt"``: the restart whose halting head is most confident the answer is right.

        ``noise`` defaults to ``config.test_noise``. With ``halt_threshold=p`` (needs the halting head) each restart
        stops once its halting probability reaches ``p`` and costs no more compute; ``nfe`` reports the block
        applications per puzzle, summed over its restarts. Returns [`EqRSolveOutput`]."""
        depth, breadth = self._check_solve(inputs, depth, breadth, select)
        num = inputs.shape[0]
        was_training = self.training
        self.eval()
        try:
            out = self(
                inputs.repeat_interleave(breadth, dim=0),
                attention_mask=None if attention_mask is None else attention_mask.repeat_interleave(breadth, dim=0),
                num_loops=depth,
                noise=noise,
                generator=generator,
                halt_threshold=halt_threshold,
            )
        finally:
            self.train(was_training)
        predictions = out.logits.argmax(-1).view(num, breadth, -1)
        residuals = out.residuals[:, -1].view(num, breadth)
        halt = torch.sigmoid(out.halt_logits[:, -1].float()).view(num, breadth) if out.halt_logits is not None else None
        same = (predictions[:, :, None, :] == predictions[:, None, :, :]).all(-1)  # (num, breadth, breadth)
        votes = same.sum(-1)
        chosen = pick_restarts(select, residuals, votes, halt)
        answers = predictions[torch.arange(num, device=predictions.device), chosen]
        steps = out.steps.view(num, breadth)
        return EqRSolveOutput(
            answers=answers,
            chosen=chosen,
            predictions=predictions,
            residuals=residuals,
            halt_probs=halt,
            votes=votes,
            steps=steps,
            nfe=steps.sum(dim=1) * (self.config.l_cycles + 1),
        )

    def _check_solve(self, inputs, depth, breadth, select: str) -> tuple[int, int]:
        """``(depth, breadth)`` checked, or a ``ValueError`` naming the bad argument and the allowed values."""
        depth = check_depth(self.config.num_loops if depth is None else depth)
        breadth = as_int(breadth, "breadth", 1, "random restarts per puzzle")
        if select not in SELECTIONS:
            raise ValueError(f"select must be one of {SELECTIONS}, got {select!r}")
        if select == "halt" and self.model.halt_head is None:
            raise ValueError("select='halt' needs a halting head (config.halting=True).")
        _puzzle_inputs(inputs, None, self.config)
        return depth, breadth


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.LongTensor) -> torch.Tensor:
    """The published code's answer loss: cross-entropy of the "stablemax" ``s(x) / sum_j s(x_j)`` with ``s(x) = x +
    1`` for ``x >= 0`` and ``1 / (1 - x)`` below (no exponential, so no logit grows without bound to win), computed
    in float64 and averaged over the labelled cells (-100 skipped), returned in the logits' dtype."""
    x = logits.double()
    s = torch.where(x >= 0, x + 1.0, 1.0 / (1.0 - x + 1e-30))
    log_probs = torch.log(s / s.sum(dim=-1, keepdim=True))
    valid = labels != -100
    picked = log_probs.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (-(picked * valid).sum() / valid.sum().clamp_min(1)).to(logits.dtype)


def pick_restarts(
    select: str, residuals: torch.Tensor, votes: torch.Tensor, halt_probs: torch.Tensor | None
) -> torch.LongTensor:
    """The restart chosen per puzzle (all ``(num_puzzles, breadth)``): lowest final residual (``"residual"``), most
    confident halting head (``"halt"``), or most votes, ties going to the lowest residual (``"vote"``)."""
    if select == "residual":
        return residuals.argmin(dim=1)
    if select == "halt":
        return halt_probs.argmax(dim=1)
    return (votes.float() - residuals.float() / (residuals.float().max() + 1.0)).argmax(dim=1)


__all__ = [
    "EqRForPuzzleSolving",
    "EqRModel",
    "EqRModelOutput",
    "EqRPreTrainedModel",
    "EqRPuzzleOutput",
    "EqRSolveOutput",
    "stablemax_cross_entropy",
]
