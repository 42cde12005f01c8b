"""Configuration of the Equilibrium Reasoner (Huang, Geng and Kolter, 2026, "Equilibrium Reasoners: Learning
Attractors Enables Scalable Reasoning").

This module travels to the Hub as remote code: it imports only ``transformers``, ``huggingface_hub`` (one of its
dependencies) and its sibling ``config_checks``, which travels with it.
"""

import math
from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.modeling_rope_utils import RopeParameters
from transformers.utils.type_validators import interval

from .config_checks import (
    LoopConfigMixin,
    check_attention_heads,
    check_finite,
    fill_attention_defaults,
    or_none,
    raise_value_errors,
)

BLOCK_TYPES = ("attention", "mlp")
SELECTIONS = ("residual", "vote", "halt")
NORM_STYLES = ("pre", "post")
TOKEN_MIXERS = ("mlp", "swiglu")
INIT_SCHEMES = ("default", "published")
HALT_READOUTS = ("mean", "first")
ANSWER_LOSSES = ("cross_entropy", "stablemax")

# Architecture presets: every key a recipe sets. "published": the locuslab/EqR code's Sudoku model
# (config/arch/eqr.yaml with config/train/eqr_sudoku.yaml's mlp_t); docs/eqr.md has the table and the sources.
PRESETS: dict[str, dict] = {
    "published": {
        "hidden_size": 512,
        "intermediate_size": 1536,  # its SwiGLU's round_up(round(4 * 512 * 2 / 3), 256)
        "num_layers": 2,
        "num_attention_heads": 8,
        "block_type": "mlp",
        "token_mixer": "swiglu",
        "token_mixing_size": None,  # the code's rule from the cells, see token_mixing_size
        "norm_style": "post",
        "rms_norm_eps": 1e-5,
        "l_cycles": 6,
        "inertia": 0.05,
        "train_noise": 0.01,
        "test_noise": 0.01,
        "random_init": True,
        "init_std": 1.0,
        "init_truncation": 2.0,
        "init_scheme": "published",
        "scale_embeddings": True,
        "halting": True,
        "halt_readout": "first",
        "halt_loss_weight": 0.5,
        "answer_loss": "stablemax",
    }
}


@raise_value_errors
@strict
class EqRConfig(LoopConfigMixin, PreTrainedConfig):
    r"""Configuration for [`EqRModel`] and [`EqRForPuzzleSolving`].

    The model iterates one weight-tied block ``f(z; x) = norm(block(z + embed(x)))`` on a latent state ``z``
    (one vector per puzzle cell):

        z_{k+1} = z_k + (1 - inertia) * (f(z_k; x) - z_k) + noise * eps_k,      eps_k ~ N(0, I),

    from a random start ``z_0 ~ N(0, init_std^2 I)`` (``random_init=True``) or a learned one. A linear head reads
    each cell's answer from ``z``; a halting head reads, per puzzle, whether the current answer is right.

    Args:
        vocab_size (`int`): Input and output tokens (11 for the published Sudoku encoding, 6 for mazes).
        max_seq_len (`int`): Cells per puzzle (81 for 9x9 Sudoku, 900 for 30x30 mazes); the token-mixing MLP block
            needs every input to have exactly this length, the attention block accepts up to it.
        hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim, hidden_act,
        rms_norm_eps, rope_parameters, attention_dropout, attention_bias, mlp_bias, initializer_range:
            the usual transformer sizes (the attention block uses pre-norm decoder layers, bidirectional).
        num_layers (`int`): Layers inside the weight-tied block.
        block_type (`str`): ``"attention"`` (bidirectional self-attention layers) or ``"mlp"`` (MLP-Mixer layers:
            a token-mixing MLP across the cells, then a channel MLP).
        token_mixing_size (`int`, *optional*): Hidden width of the token-mixing MLP (default ``2 * max_seq_len``).
        inertia (`float`): ``lambda`` in ``[0, 1)``, the paper's damping: the share of the old state kept at every
            step. Configs saved with the old key ``damping`` load with a deprecation warning.
        train_noise (`float`): ``beta`` during training (>= 0), the scale of the Gaussian noise added per step.
        test_noise (`float`): ``beta`` at inference (>= 0).
        random_init (`bool`): Start from ``N(0, init_std^2)`` states (True) or from a learned state (False).
        init_std (`float`): Standard deviation of the random start (> 0).
        num_loops (`int`): Default depth (iterations, >= 1); ``forward``/``solve`` accept ``num_loops``/``depth``.
        halting (`bool`): Whether the model has a halting head.
        untied_depth (`int`, *optional*): None (default) for the weight-tied model. An integer ``n`` makes the
            depth-matched feed-forward baseline of the paper's comparison: ``n`` blocks with their own weights,
            applied once each in order (``n * num_layers`` layers; the model then runs exactly ``n`` steps).

    The published code's choices (``EqRConfig.from_preset("published")`` sets them all; docs/eqr.md compares):
        l_cycles (`int`): 0 (default): one state, one block application per iteration (the paper's description).
            ``n >= 1``: the published code's two-level recurrence: a second state ``z_L``; one iteration updates
            ``z_L`` ``n`` times from ``z_H + embed(x)`` and then ``z_H`` once from ``z_L``, each update damped and
            noisy as above (``n + 1`` block applications). The state holds both, ``[z_H, z_L]`` on the last axis;
            the answer and halting heads read ``z_H``.
        norm_style (`str`): ``"pre"`` (default: pre-norm layers with RMSNorm gains and a final norm) or ``"post"``
            (the code's: ``h = rms(h + branch(h))`` after each branch, without gains or a final norm; the
            token-mixing branch is normed over the cells, as the code does; ``block_type="mlp"`` only).
        token_mixer (`str`): the token-mixing MLP: ``"mlp"`` (default: a SiLU MLP) or ``"swiglu"`` (the code's).
            With ``"swiglu"`` and no ``token_mixing_size`` its width is the code's rule,
            ``round_up(round(4 * max_seq_len * 2 / 3), 256)``.
        init_truncation (`float`, *optional*): the random start's normal truncated at this many standard
            deviations and rescaled to ``init_std`` (the code's: 2.0); None (default): untruncated.
        init_scheme (`str`): ``"default"`` (transformers' normal init, ``initializer_range``) or ``"published"``
            (the code's: truncated normals of standard deviation ``1 / sqrt(fan_in)``, embeddings
            ``1 / sqrt(hidden_size)``, the halting head's weights 0 and bias -5).
        scale_embeddings (`bool`): multiply the token embeddings by ``sqrt(hidden_size)`` (the code's).
        halt_readout (`str`): what the halting head reads: ``"mean"`` over the cells (default) or the ``"first"``
            cell's state (the code's).
        halt_loss_weight (`float`): weight of the halting loss in ``loss`` (default 1.0; the code's 0.5).
        answer_loss (`str`): ``"cross_entropy"`` (default) or ``"stablemax"`` (the code's: cross-entropy of
            ``s(x) = x + 1`` for ``x >= 0`` and ``1 / (1 - x)`` below, normalised, in float64).
        preset (`str`, *optional*): the preset the config was made from (set by [`from_preset`]), or None.
    """

    model_type = "eqr"
    _auto_class = "AutoConfig"
    keys_to_ignore_at_inference = ["state", "residuals", "halt_logits", "states", "steps", "lm_loss", "halt_loss"]

    vocab_size: int = interval(min=1)(default=11)
    max_seq_len: int = interval(min=1)(default=81)
    hidden_size: int = interval(min=1)(default=128)
    intermediate_size: int = interval(min=1)(default=512)
    num_layers: int = interval(min=1)(default=2)
    num_attention_heads: int = interval(min=1)(default=4)
    num_key_value_heads: int | None = or_none(interval(min=1))(default=None)
    head_dim: int | None = or_none(interval(min=1))(default=None)
    hidden_act: str = "silu"
    block_type: Literal[BLOCK_TYPES] = "attention"
    token_mixing_size: int | None = or_none(interval(min=1))(default=None)
    inertia: float | int = interval(min=0.0, max=1.0, exclude_max=True)(default=0.0)
    train_noise: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=0.1)
    test_noise: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=0.0)
    random_init: bool = True
    init_std: float | int = interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True)(default=1.0)
    num_loops: int = interval(min=1)(default=16)
    halting: bool = True
    untied_depth: int | None = or_none(interval(min=1))(default=None)
    rms_norm_eps: float = interval(min=0.0, exclude_min=True)(default=1e-6)
    rope_parameters: RopeParameters | dict | None = None
    attention_dropout: float | int = interval(min=0.0, max=1.0, exclude_max=True)(default=0.0)
    attention_bias: bool = False
    mlp_bias: bool = False
    initializer_range: float | int = 0.02
    max_position_embeddings: int | None = None
    tie_word_embeddings: bool = False
    pad_token_id: int | None = 0
    l_cycles: int = interval(min=0)(default=0)
    norm_style: Literal[NORM_STYLES] = "pre"
    token_mixer: Literal[TOKEN_MIXERS] = "mlp"
    init_truncation: float | int | None = or_none(interval(min=0.0, exclude_min=True))(default=None)
    init_scheme: Literal[INIT_SCHEMES] = "default"
    scale_embeddings: bool = False
    halt_readout: Literal[HALT_READOUTS] = "mean"
    halt_loss_weight: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=1.0)
    answer_loss: Literal[ANSWER_LOSSES] = "cross_entropy"
    preset: str | None = None

    _renamed_keys = {"damping": "inertia"}

    def __post_init__(self, **kwargs):
        fill_attention_defaults(self)
        if self.token_mixing_size is None and self.token_mixer == "swiglu":  # the published code's SwiGLU width
            self.token_mixing_size = -(-round(4 * self.max_seq_len * 2 / 3) // 256) * 256
        elif self.token_mixing_size is None:
            self.token_mixing_size = 2 * self.max_seq_len
        if self.max_position_embeddings is None:
            self.max_position_embeddings = self.max_seq_len
        super().__post_init__(**kwargs)

    def validate_architecture(self) -> None:
        """The attention block's shapes fit together and the padding token is in the vocabulary (a ``@strict`` hook,
        see [`LoopConfigMixin`]; each key's own range, the update's inertia and noise and the start among them, is
        checked by its field)."""
        super().validate_architecture()
        if self.block_type == "attention":
            check_attention_heads(self)
        if self.token_mixing_size is None:  # filled in at construction; None set afterwards would break the block
            raise ValueError(
                "EqRConfig: token_mixing_size must be an integer >= 1 (default 2 * max_seq_len), got None."
            )
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"EqRConfig: pad_token_id must be in [0, vocab_size), got {self.pad_token_id!r}.")
        if self.norm_style == "post" and self.block_type != "mlp":
            raise ValueError(
                "EqRConfig: norm_style='post' (the published code's block) is implemented for block_type='mlp'; "
                f"got block_type={self.block_type!r}. Use norm_style='pre' with attention."
            )
        if self.l_cycles > 0 and self.untied_depth is not None:
            raise ValueError(
                "EqRConfig: l_cycles (the two-level recurrence) needs the weight-tied model: set untied_depth=None."
            )
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"EqRConfig: preset must be one of {tuple(PRESETS)} or None, got {self.preset!r}.")

    @classmethod
    def from_preset(cls, preset: str, **overrides) -> "EqRConfig":
        """A config with every key of the architecture preset ``preset`` (``"published"``: the locuslab/EqR code's
        Sudoku model), the keyword arguments overriding any of them (and giving the rest, e.g. ``max_seq_len``)."""
        if preset not in PRESETS:
            raise ValueError(f"EqRConfig.from_preset: preset must be one of {tuple(PRESETS)}, got {preset!r}.")
        return cls(**{**PRESETS[preset], **overrides, "preset": preset})

    def preset_overrides(self) -> dict:
        """The keys of this config's preset whose values it changes (empty without a preset)."""
        wanted = {**PRESETS.get(self.preset, {})}
        wanted.pop("token_mixing_size", None)  # filled in from the cells
        return {key: getattr(self, key) for key, value in wanted.items() if getattr(self, key) != value}

    @property
    def state_size(self) -> int:
        """Width of the state per cell: ``hidden_size``, twice that with the two-level recurrence."""
        return self.hidden_size * (2 if self.l_cycles > 0 else 1)

    @property
    def total_layers(self) -> int:
        """Layers the model holds: ``num_layers``, times ``untied_depth`` for an untied model."""
        return self.num_layers * (self.untied_depth or 1)


def check_noise(value, name: str = "noise") -> float:
    """Return ``value`` as a float, or raise ``ValueError`` unless it is a finite number >= 0: the check of a noise
    scale given for one call (the config's ``train_noise`` and ``test_noise`` are checked by their fields)."""
    return check_finite(value, name, 0.0)


__all__ = ["PRESETS", "EqRConfig"]
