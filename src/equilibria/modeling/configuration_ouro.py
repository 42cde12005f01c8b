"""Configuration of the Ouro looped language model.

The keys and their meaning follow the published Ouro-1.4B / Ouro-2.6B ``config.json`` files, so
those load unchanged. Eight keys are Ouro's own (a Llama or Qwen2 config has none of them): two from the
published files, ``total_ut_steps`` (how many times the shared decoder stack is applied) and
``early_exit_threshold`` (the cumulative exit probability at which a token stops looping), and six this
implementation adds, which the published files lack and which then load with their defaults:
``exit_readout``, ``exit_loss``, ``exit_entropy_weight``, ``exit_gate_trained``, ``norm_placement`` and
``recurrent_kv_cache_mode`` (see [`OuroConfig`]).

This module travels to the Hub as remote code: it imports only ``transformers``, ``huggingface_hub`` (one of its
dependencies) and its sibling ``config_checks``, which travels with it.
"""

import math
from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.modeling_rope_utils import RopeParameters
from transformers.utils.type_validators import interval

from .config_checks import LoopConfigMixin, check_attention_heads, fill_attention_defaults, or_none, raise_value_errors

EXIT_LOSSES = ("expected_logits", "final", "expected")
EXIT_READOUTS = ("frozen", "reference")
NORM_PLACEMENTS = ("sandwich", "pre", "post")
RECURRENT_KV_CACHE_MODES = ("per_loop", "last_loop")


@raise_value_errors
@strict
class OuroConfig(LoopConfigMixin, PreTrainedConfig):
    r"""Configuration for [`OuroModel`] and [`OuroForCausalLM`].

    Args:
        vocab_size (`int`): Number of tokens in the vocabulary.
        hidden_size (`int`): Width of the residual stream.
        intermediate_size (`int`): Width of the SwiGLU MLP.
        num_hidden_layers (`int`): Number of distinct decoder layers in the shared stack (``L``).
        num_attention_heads (`int`): Number of query heads; must divide ``hidden_size``.
        num_key_value_heads (`int`, *optional*): Number of key/value heads (grouped-query attention);
            must divide ``num_attention_heads``. Defaults to ``num_attention_heads``.
        head_dim (`int`, *optional*): Width of one head. Defaults to ``hidden_size // num_attention_heads``.
        hidden_act (`str`): Activation of the MLP gate.
        max_position_embeddings (`int`): Longest sequence the RoPE tables are sized for.
        initializer_range (`float`): Standard deviation of the normal initialiser.
        rms_norm_eps (`float`): Epsilon of the RMSNorms.
        use_cache (`bool`): Whether forward returns a key/value cache by default.
        tie_word_embeddings (`bool`): Whether ``lm_head`` shares the input embedding matrix.
        rope_parameters (`dict`, *optional*): RoPE parameters (``rope_theta``, ``rope_type`` ...). The legacy
            keys ``rope_theta`` and ``rope_scaling`` of the published configs are converted into it.
        use_sliding_window, sliding_window, max_window_layers, layer_types: Qwen2-style sliding-window
            attention switches, kept for compatibility (the published checkpoints use full attention).
        attention_dropout (`float`): Dropout on attention probabilities.
        total_ut_steps (`int`): Default number of loop steps ``T``: the whole stack (and the final norm) is
            applied ``T`` times with shared weights. ``forward``/``generate`` accept ``num_loops`` to override it
            for one call (any value >= 1).
        early_exit_threshold (`float`, *optional*): Default exit threshold in ``(0, 1]``. A token exits at the
            first step where the cumulative probability of its exit distribution reaches the threshold. ``None``
            or ``1.0`` (the published default) run every token for all steps.
        exit_readout (`str`): What ``exit_threshold < 1`` does (``EXIT_READOUTS``): ``"frozen"`` (the compute-saving
            early exit: an exited token stops computing and later tokens see its frozen keys/values) or
            ``"reference"`` (the published code's: every step is computed for every token, and each token is read
            out at its exit step; no compute is saved, and later tokens see the continued states).
        exit_loss (`str`): The loss with ``labels``, and the logits returned with it (``EXIT_LOSSES``):
            ``"expected_logits"`` (the published code's: the cross-entropy of the *expected logits*, each loop
            step's logits weighted by the exit gate's distribution, which trains the gate; those logits are
            returned), ``"final"`` (the last step's logits alone; no loss reaches the exit gate, which is then
            frozen) or ``"expected"`` (the Ouro paper's objective: the expected cross-entropy over exit steps minus
            ``exit_entropy_weight`` times the entropy of the exit distribution; the expected logits are returned).
        exit_entropy_weight (`float`): The entropy bonus of ``exit_loss="expected"`` (>= 0; 0.05 by default, our
            choice: it keeps the exit distribution from collapsing onto one step early in training).
        norm_placement (`str`): Where the RMSNorms sit (``NORM_PLACEMENTS``; the STARS paper's norm study):
            ``"sandwich"`` (Ouro's, the published checkpoints'): each sublayer's input and output are normed,
            ``h + norm(attn(norm(h)))``, and the final norm closes every loop step, so the state carried between
            loops is normalised; ``"pre"``: ``h + attn(norm(h))``, the final norm only on what is read out (head,
            exit gate, ``hidden_states``), so the carried state is the raw residual stream; ``"post"``:
            ``norm(h + attn(h))``, the carried state normalised by the layer's own last norm, the final norm again
            only on what is read out. A layer has the norms its placement uses (four, two, two).
        exit_gate_trained (`bool`, *optional*): Whether the exit gate was trained with these weights, set by
            training: ``True`` after training with a loss that reaches the gate, ``False`` after training with
            ``exit_loss="final"`` (the gate frozen while the weights it reads change); ``None``: not known (a
            published checkpoint, or never trained here). Early exit and the weighted readout warn when it is
            ``False``.
        recurrent_kv_cache_mode (`str`): The KV cache's layout (``RECURRENT_KV_CACHE_MODES``, named as transformers
            names it for its Dory model), the default of the ``forward``/``generate`` argument of that name:
            ``"per_loop"`` (the published code's; folders saved without the key load so): one entry per (loop
            step, layer), ``num_loops x L`` in all, and a cached run equals an uncached one; ``"last_loop"``: one
            entry per layer, written by the last loop step only; the earlier steps attend to those entries for past
            tokens and to their own keys/values for the tokens of the current forward. The cache is ``num_loops``
            times smaller and can be continued with another ``num_loops``, but a run then depends on how its input
            was split into forwards (decoding token by token differs from one uncached forward over the same text;
            a prompt run in one forward is exactly the uncached computation).
    """

    model_type = "ouro"
    _auto_class = "AutoConfig"  # save_pretrained writes this file beside the weights (remote code)
    # the Trainer's evaluation loop passes only the logits to compute_metrics
    keys_to_ignore_at_inference = ["cache", "hidden_states", "exit_steps", "exit_probs", "loop_residual"]

    base_model_tp_plan = {
        "layers.*.self_attn.q_proj": "colwise",
        "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }

    vocab_size: int = interval(min=1)(default=49152)
    hidden_size: int = interval(min=1)(default=2048)
    intermediate_size: int = interval(min=1)(default=5632)
    num_hidden_layers: int = interval(min=1)(default=24)
    num_attention_heads: int = interval(min=1)(default=16)
    num_key_value_heads: int | None = or_none(interval(min=1))(default=None)
    head_dim: int | None = or_none(interval(min=1))(default=None)
    hidden_act: str = "silu"
    max_position_embeddings: int = interval(min=1)(default=4096)
    initializer_range: float = 0.02
    rms_norm_eps: float = interval(min=0.0, exclude_min=True)(default=1e-6)
    use_cache: bool = True
    tie_word_embeddings: bool = False
    rope_parameters: RopeParameters | dict | None = None
    use_sliding_window: bool = False
    sliding_window: int | None = None
    max_window_layers: int = 28
    layer_types: list[str] | None = None
    attention_dropout: float | int = interval(min=0.0, max=1.0, exclude_max=True)(default=0.0)
    total_ut_steps: int = interval(min=1)(default=4)
    early_exit_threshold: float | int | None = or_none(interval(min=0.0, max=1.0, exclude_min=True))(default=1.0)
    exit_readout: Literal[EXIT_READOUTS] = "frozen"
    exit_loss: Literal[EXIT_LOSSES] = "expected_logits"
    exit_entropy_weight: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=0.05)
    exit_gate_trained: bool | None = None
    norm_placement: Literal[NORM_PLACEMENTS] = "sandwich"
    recurrent_kv_cache_mode: Literal[RECURRENT_KV_CACHE_MODES] = "per_loop"
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        if "num_loops" in kwargs:  # the loop count's name everywhere else in the package: here total_ut_steps
            try:
                self.total_ut_steps = kwargs.pop("num_loops")
            except (TypeError, ValueError) as err:
                raise ValueError(f"{err} (num_loops sets OuroConfig's total_ut_steps)") from None
        fill_attention_defaults(self)
        if not self.use_sliding_window:
            self.sliding_window = None
        if self.layer_types is None:
            self.layer_types = [
                "sliding_attention"
                if self.sliding_window is not None and i >= self.max_window_layers
                else "full_attention"
                for i in range(self.num_hidden_layers)
            ]
        super().__post_init__(**kwargs)

    def to_dict(self) -> dict:
        """transformers' keys plus the legacy rope keys the published ``config.json`` files carry, which engines'
        converters read: ``rope_theta`` and ``rope_scaling``, from ``rope_parameters`` (loading turns them back
        into equal ``rope_parameters``)."""
        out = super().to_dict()
        rope = dict(out.get("rope_parameters") or {})
        scaling = {key: value for key, value in rope.items() if key != "rope_theta"}
        out["rope_theta"] = rope.get("rope_theta")
        out["rope_scaling"] = None if scaling in ({}, {"rope_type": "default"}) else scaling
        return out

    def to_diff_dict(self) -> dict:
        """The keys ``config.json`` gets, with the published files' ``torch_dtype`` beside ``dtype`` (here and not in
        :meth:`to_dict`: transformers reads each key of that back through a property that warns for this one)."""
        out = super().to_diff_dict()
        if out.get("dtype") is not None:
            out["torch_dtype"] = out["dtype"]
        return out

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """[`PreTrainedConfig.from_dict`]; a ``torch_dtype`` written beside ``dtype`` (by :meth:`to_dict`) is dropped,
        so that loading a folder this package saved does not warn that ``torch_dtype`` is deprecated."""
        if "dtype" in config_dict and "torch_dtype" in config_dict:
            config_dict = {key: value for key, value in config_dict.items() if key != "torch_dtype"}
        return super().from_dict(config_dict, **kwargs)

    def validate_architecture(self) -> None:
        """The attention shapes fit together and sliding-window attention has a window (a ``@strict`` hook, see
        [`LoopConfigMixin`]; each key's own range is checked by its field)."""
        super().validate_architecture()
        check_attention_heads(self)
        if self.use_sliding_window and (self.sliding_window is None or self.sliding_window < 1):
            raise ValueError(
                f"OuroConfig: use_sliding_window=True needs sliding_window >= 1, got {self.sliding_window!r}."
            )


def check_exit_readout(value, name: str = "exit_readout") -> str:
    """Return ``value`` unless it is not one of ``EXIT_READOUTS`` (``ValueError``): the check of the ``exit_readout``
    argument of ``forward``/``generate`` (the config key is checked by its field)."""
    if value not in EXIT_READOUTS:
        raise ValueError(f"{name} must be one of {EXIT_READOUTS}, got {value!r}.")
    return value


def check_recurrent_kv_cache_mode(value, name: str = "recurrent_kv_cache_mode") -> str:
    """Return ``value`` unless it is not one of ``RECURRENT_KV_CACHE_MODES`` (``ValueError``): the check of the
    ``recurrent_kv_cache_mode`` argument of ``forward``/``generate`` (the config key is checked by its field)."""
    if value not in RECURRENT_KV_CACHE_MODES:
        raise ValueError(f"{name} must be one of {RECURRENT_KV_CACHE_MODES}, got {value!r}.")
    return value


def check_exit_threshold(value, name: str = "exit_threshold") -> None:
    """Raise ``ValueError`` unless ``value`` is ``None`` or a number in ``(0, 1]``: the check of the
    ``exit_threshold`` argument of ``forward``/``generate`` (the config key is checked by its field)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) <= 1.0:
        raise ValueError(f"{name} must be None or a number in (0, 1], got {value!r}.")


__all__ = ["EXIT_LOSSES", "EXIT_READOUTS", "NORM_PLACEMENTS", "RECURRENT_KV_CACHE_MODES", "OuroConfig"]
