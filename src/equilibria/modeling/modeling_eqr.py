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
from .looped_lm import as_int, check_keywords, shared_fields
from .puzzles import check_puzzle_labels, puzzle_inputs, puzzle_solved
from .solvers import residual


def check_depth(value, name: str = "depth") -> int:
    return as_int(value, name, 1, "iterations of the weight-tied block")


class EqRMixerLayer(nn.Module):
    """An MLP-Mixer layer: a token-mixing MLP across the cells, then a channel MLP, each pre-normed and residual."""

    def __init__(self, config: EqRConfig):
        super().__init__()
        self.seq_len = config.max_seq_len
        self.token_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.token_in = nn.Linear(config.max_seq_len, config.token_mixing_size, bias=config.mlp_bias)
        self.token_out = nn.Linear(config.token_mixing_size, config.max_seq_len, bias=config.mlp_bias)
        self.channel_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.channel_mlp = MLP(config)

    def forward(self, hidden: torch.Tensor, **kwargs) -> torch.Tensor:
        if hidden.shape[1] != self.seq_len:
            raise ValueError(
                f"the token-mixing block needs puzzles of exactly max_seq_len={self.seq_len} cells, got "
                f"{hidden.shape[1]}; use block_type='attention' for variable sizes."
            )
        mixed = self.token_out(nn.functional.silu(self.token_in(self.token_norm(hidden).transpose(1, 2))))
        hidden = hidden + mixed.transpose(1, 2)
        return hidden + self.channel_mlp(self.channel_norm(hidden))


@dataclass
class EqRLoopTelemetry:
    r"""The loop's telemetry in EqR's outputs.

    residuals (`torch.FloatTensor` of shape `(batch, depth)`): per step ``k``, the relative residual
        ``||f(z_k) - z_k|| / ||f(z_k)||`` of each puzzle (the last column is the final one).
    halt_logits (`torch.FloatTensor` of shape `(batch, depth)`): the halting head's logit after each step
        ("the current answer is right"); ``None`` without a halting head.
    states (`tuple(torch.FloatTensor)`): with ``output_states=True``, ``z_0 .. z_D``.
    steps (`torch.LongTensor` of shape `(batch,)`): applications of the weight-tied block per row: ``depth``, or
        fewer for a row that halted (``halt_threshold``). With halting the telemetry has one column per step the
        longest row ran, and a halted row's state, residual and halting logit stay at their values when it stopped.
    """

    residuals: torch.FloatTensor | None = None
    halt_logits: torch.FloatTensor | None = None
    states: tuple[torch.FloatTensor, ...] | None = None
    steps: torch.LongTensor | None = None


@dataclass
class EqRModelOutput(EqRLoopTelemetry, BaseModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`): the final state ``z_D``.
    residuals, halt_logits, states: the loop's telemetry ([`EqRLoopTelemetry`]).
    """


@dataclass
class EqRPuzzleOutput(EqRLoopTelemetry, TokenClassifierOutput):
    r"""
    loss (`torch.FloatTensor`): ``lm_loss + halt_loss`` when ``labels`` are given.
    logits (`torch.FloatTensor` of shape `(batch, seq_len, vocab_size)`): per-cell answer logits from ``z_D``.
    residuals, halt_logits, states: the loop's telemetry ([`EqRLoopTelemetry`]).
    lm_loss (`torch.FloatTensor`): cross-entropy of every cell's answer (cells labelled -100 are skipped).
    halt_loss (`torch.FloatTensor`): binary cross-entropy of the final halting logit against "every cell is
        right"; ``None`` without a halting head.
    state (`torch.FloatTensor`): the final state ``z_D``, to continue from (pass it back as ``state``).
    """

    lm_loss: torch.FloatTensor | None = None
    halt_loss: torch.FloatTensor | None = None
    state: torch.FloatTensor | None = None


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
        weight-tied block summed over its restarts (``depth * breadth`` without halting).
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
        super()._init_weights(module)
        if isinstance(module, EqRModel):
            init.normal_(module.init_state, std=float(self.config.init_std))


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
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.init_state = nn.Parameter(torch.zeros(config.hidden_size))  # the learned start (random_init off)
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
        """``z_0``: ``N(0, init_std^2)`` per entry when ``random_init`` (default ``config.random_init``), else the
        learned start on every cell."""
        dtype = dtype or self.embed_tokens.weight.dtype
        device = self.embed_tokens.weight.device
        if self.config.random_init if random_init is None else random_init:
            noise = torch.randn(
                (batch_size, seq_len, self.config.hidden_size), generator=generator, device=device, dtype=dtype
            )
            return noise * float(self.config.init_std)
        return self.init_state.to(dtype).expand(batch_size, seq_len, -1)

    def loop_map(
        self,
        inputs: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        input_ids: torch.LongTensor | None = None,
    ) -> LoopMap:
        """``(f, z_0)`` for these puzzles: the block ``f(., x)`` as a function of the state alone (the damped
        update mixes it with the state: ``z + (1 - inertia) (f(z) - z)``), and a fresh [`initial_state`] drawn
        with ``generator`` (for analysis and the audit)."""
        if self.config.untied_depth is not None:
            raise ValueError(
                "an untied model (config.untied_depth) applies a different block at each step: no loop map."
            )
        inputs = _puzzle_inputs(inputs, input_ids, self.config)
        embeds = self.embed_tokens(inputs)
        mask, position_embeddings = self._context(embeds, attention_mask)
        start = self.initial_state(*inputs.shape, generator=generator, dtype=embeds.dtype)
        return LoopMap(lambda z: self._step(z, embeds, mask, position_embeddings), start)

    def _context(self, embeds: torch.Tensor, attention_mask: torch.Tensor | None):
        if self.rotary_emb is None:
            if attention_mask is not None and not bool(attention_mask.all()):
                raise ValueError("the token-mixing block does not support padding (attention_mask with zeros).")
            return None, None
        positions = torch.arange(embeds.shape[1], device=embeds.device).unsqueeze(0)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=embeds, attention_mask=attention_mask)
        return mask, self.rotary_emb(embeds, positions)

    def _step(self, z, embeds, mask, position_embeddings, index: int = 0) -> torch.Tensor:
        """``f(z; x)``: the block (the ``index``-th one of an untied model) on ``z + embed(x)``, normed."""
        size = self.config.num_layers
        layers = self.layers if self.config.untied_depth is None else self.layers[index * size : (index + 1) * size]
        hidden = z + embeds
        for layer in layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings)
        return self.norm(hidden)

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
        embeds = self.embed_tokens(inputs)
        mask, position_embeddings = self._context(embeds, attention_mask)
        batch, seq_len = inputs.shape
        z = self.initial_state(batch, seq_len, generator, embeds.dtype, random_init) if state is None else state
        if z.shape != embeds.shape:
            raise ValueError(f"state must have shape {tuple(embeds.shape)}, got {tuple(z.shape)}")
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
        fz = self._step(z, embeds, mask, position_embeddings, index)
        res = residual(z, fz)[1]
        z = z + (1.0 - float(self.config.inertia)) * (fz - z)
        if beta > 0:
            z = z + beta * torch.randn(z.shape, generator=generator, device=z.device, dtype=z.dtype)
        halt = self.halt_head(z.mean(dim=1)).squeeze(-1) if self.halt_head is not None else None
        return z, res, halt

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
            last_hidden_state=z,
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
            lm_loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size)
            loss = lm_loss
            if outputs.halt_logits is not None:
                solved = puzzle_solved(logits, labels).float()
                halt_loss = nn.functional.binary_cross_entropy_with_logits(outputs.halt_logits[:, -1].float(), solved)
                loss = loss + halt_loss
        return EqRPuzzleOutput(
            loss=loss,
            logits=logits,
            lm_loss=lm_loss,
            halt_loss=halt_loss,
            state=outputs.last_hidden_state,
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
            nfe=steps.sum(dim=1),
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
]
