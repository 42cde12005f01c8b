"""Configuration of the Attractor model (Fein-Ashley and Rashidinejad, 2026, "Solve the Loop: Attractor
Models for Language and Reasoning").

This module travels to the Hub as remote code: it imports only ``transformers``, ``huggingface_hub`` (one of its
dependencies) and its siblings ``config_checks`` and ``solvers``, which travel with it.
"""

import math
from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.modeling_rope_utils import RopeParameters
from transformers.utils.type_validators import interval

from .config_checks import LoopConfigMixin, check_attention_heads, fill_attention_defaults, or_none, raise_value_errors
from .solvers import GRADIENT_MODES, SOLVERS, STOP_RULES

INJECTIONS = ("add", "concat")
RESIDUAL_FORMS = ("paper", "gated", "deq")


@raise_value_errors
@strict
class AttractorConfig(LoopConfigMixin, PreTrainedConfig):
    r"""Configuration for [`AttractorModel`], [`AttractorForCausalLM`] and [`AttractorForPuzzleSolving`].

    The model is a transformer in two parts: a *backbone* of ``num_backbone_layers`` ordinary decoder
    layers maps the tokens to a proposal ``y0`` (in the residual-stream space that the LM head reads), and a
    weight-tied *attractor* of ``num_attractor_layers`` layers refines it to the fixed point
    ``y* = T(y*, y0)``, found by a solver within ``num_loops`` iterations.

    Args:
        vocab_size, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim,
        hidden_act, max_position_embeddings, initializer_range, rms_norm_eps, rope_parameters,
        attention_dropout, attention_bias, mlp_bias, use_cache, tie_word_embeddings: the usual Llama-style
            transformer sizes and switches (both parts use pre-norm decoder layers, ``modeling/layers.py``).
        num_backbone_layers (`int`): Layers of the backbone (0: the proposal is the token embedding itself).
        num_attractor_layers (`int`): Layers of the weight-tied attractor module (>= 1).
        injection (`str`): How the proposal enters every attractor step: ``"add"`` (the module reads
            ``y + y0``) or ``"concat"`` (it reads ``W [y; y0]``, with ``W`` initialised to ``[I I]`` so that it
            starts out equal to ``"add"``).
        solver (`str`): ``"anderson"`` (Anderson acceleration) or ``"picard"`` (plain fixed-point iteration).
        solver_tol (`float`): Relative-residual tolerance ``||T(y) - y|| / ||T(y)||`` at which a sequence stops
            iterating (> 0).
        num_loops (`int`): Default iteration budget of the solver (>= 0); 0 runs the backbone alone.
            ``forward``/``generate`` accept ``num_loops`` to override it for one call.
        anderson_memory (`int`): Past iterates Anderson mixes (>= 1).
        solver_stop (`str`): When the solver stops: ``"per_sample"`` (this package's: each sequence stops once its
            own residual is below ``solver_tol``) or ``"batch"`` (the published code's: every sequence iterates until
            the batch's worst residual is below it).
        solver_mixing (`float`): Weight of ``T(y)`` in the solver's update ``y <- (1 - w) y + w T(y)`` (Anderson:
            of the mixed ``T`` values), in ``(0, 1]`` (1: the plain update). Configs saved with the old key
            ``damping`` load with a deprecation warning.
        gradient_mode (`str`): How training differentiates through the equilibrium: ``"one_step"`` (gradient of
            one application of ``T`` at the detached fixed point; constant memory), ``"implicit"`` (exact
            implicit-function-theorem gradient, solving the backward fixed point with the same solver; constant
            memory), ``"one_step_neumann"`` (the published code's default: the incoming gradient ``v`` becomes
            ``v + J^T v`` at the fixed point, ``J^T v`` clipped by ``neumann_clip``; the paper's one-step gradient is
            ``"one_step"``, ``u = v``) or ``"unrolled"`` (backpropagation through ``num_loops`` plain iterations from ``y0``; memory
            grows with the budget; the baseline the other two are compared with).
        residual_form (`str`): The attractor map ``T(y, y0)``, with ``x = inject(y, y0)`` and ``U(x) =
            layers(x) - x`` the attractor layers' residual update:

            * ``"paper"``: ``T(y, y0) = y0 + U(x)``, the map of the paper (Fein-Ashley and Rashidinejad, 2026, Sec.
              3.1; with addition it is their code's ``FPHead(y + y0) - y``): the fixed point sits wherever the
              layers put it, so training can move the proposal onto it (equilibrium internalization). No gate.
            * ``"gated"``: ``T(y, y0) = y0 + gate * rms(y0) * norm(layers(x))``, this package's earlier form: a
              per-channel gate bounds each step relative to the proposal's scale, which keeps ``T`` contractive,
              but also holds the fixed point at a relative distance of about ``|gate|`` from the proposal.
            * ``"deq"``: ``T(y, y0) = U(x)`` solved from ``y = 0``: a plain deep-equilibrium control (the paper's DEQ
              baseline), in which the backbone's output is only injected, neither the start nor the base of ``T``.
              With ``num_loops=0`` the heads read the zero start.

            New configs default to ``"paper"``; a config saved without the key (before it existed) loads as
            ``"gated"``, the form it was trained with.
        neumann_clip (`float`, *optional*): ``gradient_mode="one_step_neumann"``: ``J^T v`` is rescaled per sequence to
            at most ``neumann_clip * ||v||`` (the published code's default 1.0; None: no clipping).
        layer_scale_init (`float`, *optional*): The published code's LayerScale gates: each attractor layer's
            attention and MLP branch is multiplied by its own per-channel gate ``layer_scale_max * sigmoid(logit)``,
            which starts at this value (the code's default 0.25; its 140M configuration 0.75 with
            ``layer_scale_max=0.75``). None (the default, the paper's map): no gates. Any residual form.
        layer_scale_max (`float`): The gates' upper bound (> 0, at least ``layer_scale_init``; the code's default 1).
        attractor_gate_init (`float`): ``"gated"`` form only: the initial value of the per-channel gate (>= 0),
            a step size relative to the proposal's scale; a small gate keeps ``T`` contractive (0 makes
            ``T(y, y0) = y0`` at initialisation).
        is_causal (`bool`, *optional*): Causal attention (a language model) or bidirectional (every puzzle cell
            sees every other). ``None`` (the default): the head decides, and writes its choice into the config:
            [`AttractorForCausalLM`] causal, [`AttractorForPuzzleSolving`] bidirectional. A config saved without
            the key is causal.
        num_hidden_layers (`int`, *optional*): Derived: ``num_backbone_layers + num_attractor_layers`` (the
            number of key/value cache entries); given explicitly it must equal that sum.
    """

    model_type = "attractor_lm"
    _auto_class = "AutoConfig"  # save_pretrained writes this file beside the weights (remote code)
    # the Trainer's evaluation loop passes only the logits to compute_metrics
    keys_to_ignore_at_inference = [
        "cache",
        "hidden_states",
        "proposal",
        "solver_steps",
        "abs_residual",
        "rel_residual",
        "converged",
        "diverged",
        "jacobian_penalty",
        "correction_loss",
    ]
    # Megatron-style sharding of both parts' decoder layers; the embeddings (sharded on the vocabulary by
    # transformers) and the tied LM head are sharded together
    base_model_tp_plan = {
        f"{part}.*.{module}": style
        for part in ("backbone", "attractor.layers")
        for module, style in (
            ("self_attn.q_proj", "colwise"),
            ("self_attn.k_proj", "colwise"),
            ("self_attn.v_proj", "colwise"),
            ("self_attn.o_proj", "rowwise"),
            ("mlp.gate_proj", "colwise"),
            ("mlp.up_proj", "colwise"),
            ("mlp.down_proj", "rowwise"),
        )
    }

    vocab_size: int = interval(min=1)(default=32000)
    hidden_size: int = interval(min=1)(default=512)
    intermediate_size: int = interval(min=1)(default=1408)
    num_backbone_layers: int = interval(min=0)(default=6)
    num_attractor_layers: int = interval(min=1)(default=2)
    num_attention_heads: int = interval(min=1)(default=8)
    num_key_value_heads: int | None = or_none(interval(min=1))(default=None)
    head_dim: int | None = or_none(interval(min=1))(default=None)
    hidden_act: str = "silu"
    max_position_embeddings: int = interval(min=1)(default=2048)
    initializer_range: float | int = 0.02
    rms_norm_eps: float = interval(min=0.0, exclude_min=True)(default=1e-6)
    use_cache: bool = True
    tie_word_embeddings: bool = True
    rope_parameters: RopeParameters | dict | None = None
    attention_dropout: float | int = interval(min=0.0, max=1.0, exclude_max=True)(default=0.0)
    attention_bias: bool = False
    mlp_bias: bool = False
    injection: Literal[INJECTIONS] = "add"
    solver: Literal[SOLVERS] = "anderson"
    solver_tol: float | int = interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True)(default=1e-4)
    num_loops: int = interval(min=0)(default=16)
    anderson_memory: int = interval(min=1)(default=5)
    solver_mixing: float | int = interval(min=0.0, max=1.0, exclude_min=True)(default=1.0)
    solver_stop: Literal[STOP_RULES] = "per_sample"
    neumann_clip: float | int | None = or_none(interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True))(
        default=1.0
    )
    layer_scale_init: float | int | None = or_none(interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True))(
        default=None
    )
    layer_scale_max: float | int = interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True)(default=1.0)
    gradient_mode: Literal[GRADIENT_MODES] = "one_step"
    residual_form: Literal[RESIDUAL_FORMS] = "paper"
    attractor_gate_init: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=0.5)
    is_causal: bool | None = None
    num_hidden_layers: int | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    _renamed_keys = {"damping": "solver_mixing"}
    _defaults_of_older_saves = {"residual_form": "gated"}

    def __post_init__(self, **kwargs):
        fill_attention_defaults(self)
        total = self.num_backbone_layers + self.num_attractor_layers
        if self.num_hidden_layers is None:
            self.num_hidden_layers = total
        elif self.num_hidden_layers != total:
            raise ValueError(
                f"AttractorConfig: num_hidden_layers is derived (num_backbone_layers + num_attractor_layers = "
                f"{total}), got {self.num_hidden_layers!r}; leave it unset."
            )
        super().__post_init__(**kwargs)

    def validate_architecture(self) -> None:
        """The attention shapes fit together (a ``@strict`` hook, see [`LoopConfigMixin`]; each key's own range
        and the choices of ``injection``, ``solver`` and ``gradient_mode`` are checked by their fields)."""
        super().validate_architecture()
        check_attention_heads(self)
        if self.layer_scale_init is not None and self.layer_scale_init > self.layer_scale_max:
            raise ValueError(
                f"AttractorConfig: layer_scale_init ({self.layer_scale_init}) must be at most layer_scale_max "
                f"({self.layer_scale_max}), the gates' upper bound."
            )


__all__ = ["AttractorConfig", "RESIDUAL_FORMS"]
