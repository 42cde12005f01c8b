"""The model families of equilibria: one record per ``model_type``, the single place that knows which exist.

A record holds a family's modeling facts: its config and model classes, its heads with their Auto classes, the kind
of head each is and the tasks it is trained on. ``import equilibria`` registers the Auto classes from it, and every
layer above reads it. Nothing here names a class of a layer above: the trainers
(:func:`equilibria.trainers.trainer_for`), the audit adapters (:func:`equilibria.diagnostics.adapter_for`), the
evaluators (:data:`equilibria.scaling.EVALUATORS`) and the card text (:mod:`equilibria.hub_cards.family_text`)
each declare the model types or head kinds they serve, and their own layer chooses among them. Adding a family is
its modeling files in :mod:`equilibria.modeling` and one :class:`Family` here (plus a trainer, an audit adapter and
its card text where it needs its own).

The small-config factories (:func:`small_ouro_config`, :func:`small_attractor_config` and each record's
``make_config``) build a config for a task's data: the task fixes the vocabulary or input width, the caller the
sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import transformers
from transformers import PreTrainedConfig, PreTrainedTokenizerBase

from .loops import AttractorLoop, DoryLoop, EqRLoop, HrmTextLoop, Inkling2Loop, LoopProtocol, OuroLoop, PHDEQLoop
from .modeling import (
    AttractorConfig,
    AttractorForCausalLM,
    AttractorForPuzzleSolving,
    AttractorModel,
    EqRConfig,
    EqRForPuzzleSolving,
    EqRModel,
    OuroConfig,
    OuroForCausalLM,
    OuroModel,
    PHDEQConfig,
    PHDEQForSequenceClassification,
    PHDEQModel,
)
from .tasks.tokenization import CharTokenizer, tokenizer_fields
from .wording import with_article

#: the kinds of head, each evaluated and audited its own way (:data:`equilibria.scaling.EVALUATORS`)
HEAD_KINDS = {
    "causal_lm": "next-token logits: generates text, scored by exact match or token accuracy",
    "puzzle_cells": "one answer per puzzle cell from one forward, scored by whole puzzles solved",
    "puzzle_solver": "one answer per puzzle cell from restarts of the loop (solve: depth x breadth), scored by "
    "whole puzzles solved",
    "classifier": "one label per example, scored by accuracy",
}


TEXT_KINDS = frozenset({"causal_lm"})  # the head kinds of a language model (Head.reads_text)
SEARCH_KINDS = frozenset({"puzzle_solver"})  # the head kinds that restart their loop (Head.searches)

#: what a family may support, which trainers and tools ask instead of its name (:meth:`Family.supports`): name ->
#: what it means (the refusal of a family without it says so)
CAPABILITIES = {
    "sampled_loops": "its forward takes a loop count per call, so StarsTrainer can draw one per step",
    "stars_penalty": "its forward takes jsrr= and returns spectral_radius (STARS' Jacobian penalty)",
    "per_loop_readout": "its forward returns the state of every loop step (RLTT's per-loop log-probabilities)",
    "vllm": "the package's vLLM plugin serves its folders, with a loop count per request",
}


@dataclass(frozen=True)
class Head:
    """A task head of a family: its class, the transformers Auto class it is registered with, its kind (a key of
    :data:`HEAD_KINDS`), the tasks it is trained and evaluated on (the first is its default) and the Hub
    ``pipeline_tag`` of its task."""

    model_class: type
    auto_class: str
    kind: str
    tasks: tuple[str, ...]
    pipeline_tag: str

    @property
    def reads_text(self) -> bool:
        """Whether the head is a language model's (next-token logits: it generates text)."""
        return self.kind in TEXT_KINDS

    @property
    def searches(self) -> bool:
        """Whether the head answers by restarting its loop (a puzzle solver's depth x breadth, halting)."""
        return self.kind in SEARCH_KINDS

    @property
    def remote_code(self) -> bool:
        """Whether a saved model of this head carries its modeling code (the package's classes, loaded with
        ``trust_remote_code=True`` without it; transformers' own classes need none)."""
        return bool(getattr(self.model_class, "_remote_auto_map", None))

    def __post_init__(self):
        if self.kind not in HEAD_KINDS:
            raise ValueError(f"Head kind must be one of {tuple(HEAD_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class Family:
    """The modeling facts of one ``model_type`` that code outside its modeling files needs: its config and model
    classes, its heads, its loop protocol (the config key of its loop count, the smallest count, the loop map ...), a
    small-config factory and the default LoRA targets."""

    model_type: str
    loop_meaning: str
    loop: LoopProtocol  # how the package drives the loop (:mod:`equilibria.loops`)
    config_class: type
    base_class: type
    heads: tuple[Head, ...]
    make_config: Callable[
        ..., PreTrainedConfig
    ]  # (task fields, hidden_size, num_layers, num_attention_heads, num_loops)
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
    )  # LoRA's default: the attention projections
    capabilities: frozenset[str] = frozenset()  # keys of CAPABILITIES; see supports() for the one it derives

    def __post_init__(self):
        unknown = set(self.capabilities) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"Family capabilities must be among {tuple(CAPABILITIES)}, got {sorted(unknown)}")

    def supports(self, capability: str) -> bool:
        """Whether the family has ``capability`` (a key of :data:`CAPABILITIES`): declared in ``capabilities``, or,
        for ``sampled_loops``, a text head whose protocol runs a fixed number of loop steps (``states``: a loop count
        per call is then all STARS' sampling needs)."""
        if capability in self.capabilities:
            return True
        return capability == "sampled_loops" and self.heads[0].reads_text and self.loop.runs_fixed_steps

    def require(self, capability: str, what: str) -> None:
        """``ValueError`` in one line unless the family supports ``capability``: ``what`` needs it (named with its
        meaning, the family and the families that have it)."""
        if not self.supports(capability):
            having = families_with(capability)
            raise ValueError(
                f"{what} needs {capability} ({CAPABILITIES[capability]}), which the {self.model_type} family "
                f"lacks; the families with it: {', '.join(having) or 'none'}"
            )

    @property
    def loops_key(self) -> str:
        """The config key holding the default loop count."""
        return self.loop.loops_key

    @property
    def min_loops(self) -> int:
        """The smallest loop count forward accepts (0: the backbone / initialiser alone)."""
        return self.loop.min_loops

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(task for head in self.heads for task in head.tasks))

    @property
    def default_task(self) -> str:
        return self.heads[0].tasks[0]

    def has_config_key(self, key: str) -> bool:
        """Whether the family's config has the field ``key`` (e.g. ``exit_loss``: the families with an exit gate)."""
        return key in {f.name for f in dataclasses.fields(self.config_class)}

    def require_config_key(self, key: str, flag: str) -> None:
        """``ValueError`` unless the family's config has ``key``: ``flag`` applies only to the families whose config
        has it (named in the message)."""
        if not self.has_config_key(key):
            having = ", ".join(f.model_type for f in FAMILIES.values() if f.has_config_key(key))
            raise ValueError(f"{flag} applies to the families whose config has {key} ({having}), not {self.model_type}")

    def head_of_model(self, model) -> Head:
        """The head ``model`` is an instance of (by class name, so that remote-code classes match; a PEFT model's
        base model), else the first."""
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        names = {cls.__name__ for cls in type(model).__mro__}
        return next((head for head in self.heads if head.model_class.__name__ in names), self.heads[0])

    def head_of_config(self, config) -> Head:
        """The head a saved config was written by (its ``architectures``, which ``save_pretrained`` records), else
        the head of the task it was trained on (``equilibria_task``), else the first."""
        names = set(getattr(config, "architectures", None) or ())
        for head in self.heads:
            if head.model_class.__name__ in names:
                return head
        task = getattr(config, "equilibria_task", None)
        return next((head for head in self.heads if task in head.tasks), self.heads[0])

    def head_for_task(self, task: str, what: str | None = None) -> Head:
        """The head trained on ``task``; ``ValueError`` naming the tasks that fit (``what``: how the message
        names the model, default "a <model_type> model")."""
        for head in self.heads:
            if task in head.tasks:
                return head
        what = what or f"{with_article(self.model_type)} model"
        raise ValueError(f"--task {task} does not fit {what} (it fits {self.tasks})")


def small_ouro_config(
    tokenizer: PreTrainedTokenizerBase | int,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    total_ut_steps: int = 4,
) -> OuroConfig:
    """A small Ouro config for a character-level task: vocabulary and special tokens from ``tokenizer`` (or just a
    vocabulary size), SwiGLU width ``2 * hidden_size``, positions up to 64 with a tokenizer (512 without)."""
    return _ouro_config(_vocabulary(tokenizer), hidden_size, num_hidden_layers, num_attention_heads, total_ut_steps)


def _vocabulary(tokenizer) -> dict:
    """What a small LM config takes from ``tokenizer`` (vocabulary, special tokens, 64 positions) or from a vocabulary
    size (512 positions); ``ValueError`` for a size below 1, ``TypeError`` for anything else."""
    if isinstance(tokenizer, int) and not isinstance(tokenizer, bool):
        if tokenizer < 1:
            raise ValueError(f"the vocabulary size must be >= 1, got {tokenizer}")
        return dict(vocab_size=tokenizer, max_position_embeddings=512)
    if not hasattr(tokenizer, "pad_token_id"):
        raise TypeError(f"pass a tokenizer or a vocabulary size (an int), got {type(tokenizer).__name__} {tokenizer!r}")
    return dict(tokenizer_fields(tokenizer), max_position_embeddings=64)


def _ouro_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return OuroConfig(
        **{"max_position_embeddings": 64, **fields},
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        total_ut_steps=num_loops,
    )


def small_attractor_config(
    tokenizer: PreTrainedTokenizerBase | int,
    hidden_size: int = 128,
    num_backbone_layers: int = 2,
    num_attractor_layers: int = 2,
    num_attention_heads: int | None = None,
    **overrides,
) -> AttractorConfig:
    """A small Attractor LM config: vocabulary and special tokens from ``tokenizer`` (or just a vocabulary size),
    SwiGLU width ``2 * hidden_size``, heads of width 32 unless given, positions up to 64 with a tokenizer (512
    without); ``overrides`` set any other field (``num_loops``, ``solver``, ``gradient_mode`` ...)."""
    fields = _vocabulary(tokenizer)
    return AttractorConfig(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_backbone_layers=num_backbone_layers,
        num_attractor_layers=num_attractor_layers,
        num_attention_heads=num_attention_heads or max(1, hidden_size // 32),
        **{**fields, **overrides},
    )


def _attractor_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    if "max_seq_len" in fields:  # a puzzle's cells: every cell a position, an answer head of its own
        fields = dict(fields, tie_word_embeddings=False, max_position_embeddings=fields.pop("max_seq_len"))
    fields = {"max_position_embeddings": 64, **fields}
    return small_attractor_config(
        fields.pop("vocab_size"),
        hidden_size,
        num_layers,
        num_layers,
        num_attention_heads,
        num_loops=num_loops,
        **fields,
    )


def _eqr_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return EqRConfig(
        **fields,
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_loops=num_loops,
    )


def _phdeq_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return PHDEQConfig(**fields, hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_loops=num_loops)


FAMILIES: dict[str, Family] = {
    family.model_type: family
    for family in (
        Family(
            model_type="ouro",
            loop_meaning="recurrence steps of the shared decoder stack",
            loop=OuroLoop(),
            config_class=OuroConfig,
            base_class=OuroModel,
            heads=(Head(OuroForCausalLM, "AutoModelForCausalLM", "causal_lm", ("addition",), "text-generation"),),
            make_config=_ouro_config,
            capabilities=frozenset({"sampled_loops", "stars_penalty", "per_loop_readout", "vllm"}),
        ),
        Family(
            model_type="attractor_lm",
            loop_meaning="the fixed-point solver's iteration budget (0 = backbone only)",
            loop=AttractorLoop(),
            config_class=AttractorConfig,
            base_class=AttractorModel,
            heads=(
                Head(AttractorForCausalLM, "AutoModelForCausalLM", "causal_lm", ("addition",), "text-generation"),
                Head(
                    AttractorForPuzzleSolving,
                    "AutoModelForTokenClassification",
                    "puzzle_cells",
                    ("sudoku", "maze"),
                    "token-classification",
                ),
            ),
            make_config=_attractor_config,
        ),
        Family(
            model_type="eqr",
            loop_meaning="iterations of the weight-tied block (depth)",
            loop=EqRLoop(),
            config_class=EqRConfig,
            base_class=EqRModel,
            heads=(
                Head(
                    EqRForPuzzleSolving,
                    "AutoModelForTokenClassification",
                    "puzzle_solver",
                    ("sudoku", "maze"),
                    "token-classification",
                ),
            ),
            make_config=_eqr_config,
        ),
        Family(
            model_type="phdeq",
            loop_meaning="the fixed-point solver's iteration cap (Anderson or Picard: config.solver)",
            loop=PHDEQLoop(),
            config_class=PHDEQConfig,
            base_class=PHDEQModel,
            heads=(
                Head(
                    PHDEQForSequenceClassification,
                    "AutoModelForSequenceClassification",
                    "classifier",
                    ("reachability", "entailment"),
                    "text-classification",
                ),
            ),
            make_config=_phdeq_config,
            lora_targets=("potential_q", "potential_c", "port"),  # no attention: the dynamics' maps
        ),
    )
}


def _dory_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    """A small Dory: one input layer, ``num_layers`` recurrent layers looped ``num_loops`` times, one output layer,
    full attention (a sliding window as long as the positions)."""
    fields = {"max_position_embeddings": 64, **fields}
    return transformers.DoryConfig(
        **fields,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers + 2,
        n_input_layers=1,
        n_recurrent_layers=num_layers,
        n_output_layers=1,
        n_recurrent_loops=num_loops,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        head_dim=hidden_size // num_attention_heads,
        sliding_window=fields["max_position_embeddings"],
    )


def _hrm_text_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    """A small HRM-text: stacks of ``num_layers`` layers, ``num_loops`` H-cycles of 2 L-cycles, causal attention
    everywhere (``prefix_lm`` off)."""
    return transformers.HrmTextConfig(
        **{"max_position_embeddings": 64, **fields},
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        head_dim=hidden_size // num_attention_heads,
        H_cycles=num_loops,
        L_cycles=2,
        prefix_lm=False,
    )


def _inkling2_loop_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    """A small Inkling2-loop: one layer before ``num_layers`` looped layers passed ``num_loops`` times and none after
    them (the model needs a layer before its loop; with none after, the passes do the rest of the work), 4 experts
    (2 per token), a residual block per layer."""
    fields = {"max_position_embeddings": 64, **fields}
    heads = dict(num_attention_heads=num_attention_heads, head_dim=hidden_size // num_attention_heads)
    return transformers.Inkling2LoopTextConfig(
        **fields,
        unpadded_vocab_size=fields["vocab_size"],
        hidden_size=hidden_size,
        num_hidden_layers=num_layers + 1,
        **heads,
        num_key_value_heads=num_attention_heads,
        swa_num_attention_heads=num_attention_heads,
        swa_num_key_value_heads=num_attention_heads,
        swa_head_dim=heads["head_dim"],
        sliding_window_size=fields["max_position_embeddings"],
        rel_extent=fields["max_position_embeddings"],
        d_rel=8,
        moe_intermediate_size=hidden_size,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_layers_per_attn_res_block=1,
        loop_layer_index_start=1,
        loop_layer_index_end=1 + num_layers,
        loop_num_passes=num_loops,
        loop_gate_rank=8,
    )


def _transformers_families() -> list[Family]:
    """The records of the looped LMs transformers ships, where the installed release has their classes (Dory and
    Inkling2-loop from 5.24, HRM-text from 5.9): the class names and model type are their protocols'."""
    lm = lambda cls: (Head(cls, "AutoModelForCausalLM", "causal_lm", ("addition",), "text-generation"),)  # noqa: E731
    known = [  # protocol, loop meaning, small config
        (DoryLoop, "passes of the recurrent section", _dory_config),
        (HrmTextLoop, "H-cycles (each: L_cycles of the L-stack, then the H-stack)", _hrm_text_config),
        (Inkling2Loop, "passes of the looped layers", _inkling2_loop_config),
    ]  # fmt: skip
    records = []
    for protocol, meaning, make in known:
        names = (protocol.config_class, protocol.base_class, protocol.head_class)
        if protocol.model_types and all(hasattr(transformers, name) for name in names):
            config_class, base_class, head_class = (getattr(transformers, name) for name in names)
            records.append(
                Family(protocol.model_types[0], meaning, protocol(), config_class, base_class, lm(head_class), make,
                       capabilities=frozenset({"sampled_loops", "stars_penalty"}))  # the penalty: through looped()
            )  # fmt: skip
    return records


FAMILIES.update((family.model_type, family) for family in _transformers_families())


def family_record(model_or_config, needed: str | None = None) -> Family:
    """The record of a model's (or config's, or a ``model_type`` string's) family; ``ValueError`` naming the
    families otherwise (starting "no <needed> for ..." when the caller says what it was looking for)."""
    if isinstance(model_or_config, str):
        model_type = model_or_config
    else:
        config = getattr(model_or_config, "config", model_or_config)
        model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        prefix = f"no {needed} for " if needed else ""
        raise ValueError(
            f"{prefix}model_type {model_type!r}: it is not an equilibria family; the families are {sorted(FAMILIES)}"
        )
    return FAMILIES[model_type]


def serving(classes: Iterable[type], model_type: str, head_kind: str | None = None) -> list[type]:
    """The classes of ``classes`` that declare they serve ``model_type`` (in their ``model_types``) and, where
    they name head kinds (``head_kinds``, empty: every head), a head of ``head_kind``: how a layer above picks its
    trainer, audit adapter or callbacks for a family without the record naming them."""
    return [
        cls
        for cls in classes
        if model_type in getattr(cls, "model_types", ())
        and (head_kind is None or not getattr(cls, "head_kinds", ()) or head_kind in cls.head_kinds)
    ]


def families_with(capability: str) -> tuple[str, ...]:
    """The model types of the families (registered ones included) that support ``capability``."""
    return tuple(model_type for model_type, family in FAMILIES.items() if family.supports(capability))


class ServesFamiliesWith:
    """A class attribute (``model_types = ServesFamiliesWith("sampled_loops")``) that reads, each time it is read,
    the model types of the families with a capability: so a trainer serves a family registered after its import."""

    def __init__(self, capability: str):
        self.capability = capability

    def __get__(self, instance, owner) -> tuple[str, ...]:
        return families_with(self.capability)


def model_task(model_or_config) -> str:
    """The task a saved model was trained on (``config.equilibria_task``, written by ``equilibria train``), else
    its family's default task."""
    config = getattr(model_or_config, "config", model_or_config)
    return getattr(config, "equilibria_task", None) or family_record(config).default_task


def register_auto_classes() -> None:
    """Register every family's config, base model and heads with transformers' Auto classes (those transformers
    ships are registered there already)."""
    for family in FAMILIES.values():
        _register(family)


def _register(family: Family) -> None:
    if (
        transformers.CONFIG_MAPPING.get(family.model_type) is family.config_class
    ):  # registered already (by transformers)
        return
    transformers.AutoConfig.register(family.model_type, family.config_class, exist_ok=True)
    transformers.AutoModel.register(family.config_class, family.base_class, exist_ok=True)
    for head in family.heads:
        getattr(transformers, head.auto_class).register(family.config_class, head.model_class, exist_ok=True)
    if family.heads[0].reads_text:  # so a saved CharTokenizer loads as one
        transformers.AutoTokenizer.register(family.config_class, fast_tokenizer_class=CharTokenizer, exist_ok=True)


def register_family(family: Family) -> Family:
    """Add a looped architecture of your own: its record (with its :class:`~equilibria.loops.LoopProtocol`) joins
    :data:`FAMILIES` and its classes the Auto classes, so that loading, ``equilibria eval``, the audit, the card and
    the trainers that declare its model type serve it. ``ValueError`` when the model type is taken by another
    record."""
    taken = FAMILIES.get(family.model_type)
    if taken is not None and taken is not family:
        raise ValueError(
            f"model_type {family.model_type!r} is already a family ({taken.config_class.__name__}); a second record "
            "under it would change what every folder of that type loads as: give yours another model_type (the same "
            "record object again is a no-op)"
        )
    if family.model_type not in family.loop.model_types:
        raise ValueError(
            f"{type(family.loop).__name__}.model_types is {family.loop.model_types}: it must name {family.model_type!r}"
        )
    FAMILIES[family.model_type] = family
    _register(family)
    return family


def loop_count(model, num_loops: int | None):
    """A context manager: within the block, ``model`` (a model of a family, with or without its head) runs
    ``num_loops`` loops by default, in ``forward`` and ``generate`` (the config's count, and whatever else its
    protocol needs: HRM-text's cache slots), put back on leaving; ``None``: the config's. Yields the count."""
    return family_record(model).loop.count(model, num_loops)


__all__ = [
    "CAPABILITIES",
    "FAMILIES",
    "Family",
    "HEAD_KINDS",
    "Head",
    "family_record",
    "loop_count",
    "model_task",
    "register_auto_classes",
    "register_family",
    "ServesFamiliesWith",
    "families_with",
    "serving",
    "small_attractor_config",
    "small_ouro_config",
]
