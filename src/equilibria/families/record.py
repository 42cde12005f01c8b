"""The family record: what the package knows of one ``model_type`` (its classes and heads, its loop protocol, a
small-config factory, its capabilities), the registry of every record (:data:`FAMILIES`: the package's, transformers'
looped LMs', and those added with :func:`register_family`), and the lookups every layer above uses. Nothing here names
a family: each has its own module beside this one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

import transformers
from transformers import PreTrainedConfig

from ..loops import LoopProtocol
from ..tasks.recipes import Recipe, add_recipes
from ..tasks.tokenization import CharTokenizer
from ..wording import with_article
from .card_text import FamilyText


class HeadKind(NamedTuple):
    """One kind of head: what it answers and how it is scored, the transformers Auto class its heads register with
    and the Hub ``pipeline_tag`` of its task."""

    description: str
    auto_class: str
    pipeline_tag: str


#: the kinds of head, each evaluated and audited its own way (:data:`equilibria.scaling.EVALUATORS`)
HEAD_KINDS = {
    "causal_lm": HeadKind(
        "next-token logits: generates text, scored by exact match or token accuracy",
        "AutoModelForCausalLM",
        "text-generation",
    ),
    "puzzle_cells": HeadKind(
        "one answer per puzzle cell from one forward, scored by whole puzzles solved",
        "AutoModelForTokenClassification",
        "token-classification",
    ),
    "puzzle_solver": HeadKind(
        "one answer per puzzle cell from restarts of the loop (solve: depth x breadth), scored by whole puzzles solved",
        "AutoModelForTokenClassification",
        "token-classification",
    ),
    "classifier": HeadKind(
        "one label per example, scored by accuracy", "AutoModelForSequenceClassification", "text-classification"
    ),
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
    "early_exit": "an exit gate that lets a token leave the loop early: forward takes exit_threshold, and the "
    "config's exit_loss trains the gate",
}


@dataclass(frozen=True)
class Head:
    """A task head of a family: its class, the transformers Auto class it is registered with, its kind (a key of
    :data:`HEAD_KINDS`), the tasks it is trained and evaluated on (the first is its default) and the Hub
    ``pipeline_tag`` of its task, both its kind's (:class:`HeadKind`; left out, they are filled in, and one that
    differs is refused): ``Head(MyForCausalLM, kind="causal_lm", tasks=("addition",))``."""

    model_class: type
    auto_class: str = ""
    kind: str = "causal_lm"
    tasks: tuple[str, ...] = ()
    pipeline_tag: str = ""

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
        if not self.tasks:
            raise ValueError(f"Head({self.model_class.__name__}) needs tasks: the tasks it is trained on")
        for name in ("auto_class", "pipeline_tag"):
            given, value = getattr(self, name), getattr(HEAD_KINDS[self.kind], name)
            if given and given != value:
                raise ValueError(
                    f"Head({self.model_class.__name__}): a {self.kind} head's {name} is {value!r}, not {given!r} "
                    "(leave it out: the kind sets it)"
                )
            object.__setattr__(self, name, value)


@dataclass(frozen=True, kw_only=True)
class Family:
    """What the package knows of one ``model_type`` beyond its modeling files: its base model and heads, its loop
    protocol (the config key of its loop count, the smallest count, the loop map ...), a small-config factory, the
    default LoRA targets, its capabilities, its card text, the audit adapter where the package's do not fit, and its
    recipes. Its config class and model type are its base model's (``base_class.config_class`` and that class's
    ``model_type``); given, they must agree. Keywords only."""

    loop_meaning: str
    protocol: LoopProtocol  # how the package drives the loop (:mod:`equilibria.loops`)
    base_class: type
    heads: tuple[Head, ...]
    #: (task fields, hidden_size, num_layers, num_attention_heads, num_loops) -> a small config for the task
    make_config: Callable[..., PreTrainedConfig]
    config_class: type | None = None  # base_class.config_class unless given
    model_type: str = ""  # config_class.model_type unless given
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")  # LoRA's default: attention projections
    capabilities: frozenset[str] = frozenset()  # keys of CAPABILITIES; see supports() for the one it derives
    card: FamilyText | None = None  # its model card's text (None: derived from the record, card_text.record_text)
    #: the audit's adapter (a ``equilibria.diagnostics.LoopAdapter`` subclass) where the package's do not fit; None:
    #: the one that declares its head's kind and its loop's form (:meth:`fitting`)
    audit_adapter: type | None = None
    #: its recipes, each named by its task (``equilibria train``'s defaults for a new model of the family on that
    #: task; :mod:`equilibria.tasks.recipes`)
    recipes: tuple[Recipe, ...] = ()

    def __post_init__(self):
        self._derive("config_class", self.base_class, "base_class")
        self._derive("model_type", self.config_class, "config_class")
        unknown = set(self.capabilities) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"Family capabilities must be among {tuple(CAPABILITIES)}, got {sorted(unknown)}")
        stray = [recipe.name for recipe in self.recipes if recipe.name not in self.tasks]
        if stray:
            raise ValueError(
                f"the {self.model_type} family's recipes are named by the task they train, one of its heads' "
                f"{self.tasks}; got {stray}"
            )

    def _derive(self, name: str, source: type | None, source_name: str) -> None:
        """Fill ``name`` from ``source``'s attribute of that name; ``ValueError`` in one line when neither says it
        or the two differ."""
        given, derived = getattr(self, name), getattr(source, name, None)
        if given and derived and given != derived:
            raise ValueError(
                f"Family({name}={given!r}) differs from {source_name}.{name} ({derived!r}): leave it out (or None)"
            )
        if not (given or derived):
            raise ValueError(f"Family needs {name}: {source_name} ({source!r}) has none; pass {name}=...")
        object.__setattr__(self, name, given or derived)

    def supports(self, capability: str) -> bool:
        """Whether the family has ``capability`` (a key of :data:`CAPABILITIES`): declared in ``capabilities``, or,
        for ``sampled_loops``, a text head whose protocol runs a fixed number of loop steps (``states``: a loop count
        per call is then all STARS' sampling needs)."""
        if capability in self.capabilities:
            return True
        return capability == "sampled_loops" and self.heads[0].reads_text and self.protocol.runs_fixed_steps

    def fitting(self, classes: Iterable[type], head_kind: str) -> list[type]:
        """The classes of ``classes`` (the audit's adapters) that declare ``head_kind`` in their ``head_kinds`` and
        whose ``fixed_steps`` (None: either) is this family's loop's form (:attr:`LoopProtocol.runs_fixed_steps`)."""
        fixed = self.protocol.runs_fixed_steps
        return [cls for cls in classes if head_kind in cls.head_kinds and cls.fixed_steps in (None, fixed)]

    @property
    def loop(self) -> LoopProtocol:
        """:attr:`protocol`'s name before 0.3."""
        return self.protocol

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
        return self.protocol.loops_key

    @property
    def min_loops(self) -> int:
        """The smallest loop count forward accepts (0: the backbone / initialiser alone)."""
        return self.protocol.min_loops

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(task for head in self.heads for task in head.tasks))

    @property
    def default_task(self) -> str:
        return self.heads[0].tasks[0]

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


#: every record, by model type: the package's families in order (Ouro first: ``equilibria train``'s default family),
#: then transformers' looped LMs, then any added with :func:`register_family`
FAMILIES: dict[str, Family] = {}


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


def serving(classes: Iterable[type], model_type: str) -> list[type]:
    """The classes of ``classes`` that declare they serve ``model_type`` (in their ``model_types``): how a layer
    above picks its trainer or callbacks for a family without the record naming them."""
    return [cls for cls in classes if model_type in getattr(cls, "model_types", ())]


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
    if transformers.CONFIG_MAPPING.get(family.model_type) is family.config_class:  # transformers registered it
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
    if family.model_type not in family.protocol.model_types:
        raise ValueError(
            f"{type(family.protocol).__name__}.model_types is {family.protocol.model_types}: it must name "
            f"{family.model_type!r}"
        )
    add_family(family)
    _register(family)
    return family


def add_family(family: Family) -> None:
    """Put ``family`` in :data:`FAMILIES` and its recipes in :data:`~equilibria.tasks.recipes.RECIPES`."""
    FAMILIES[family.model_type] = family
    add_recipes(family.model_type, family.recipes)


def running_loops(model, num_loops: int | None):
    """A context manager: within the block, ``model`` (a model of a family, with or without its head) runs
    ``num_loops`` loops by default, in ``forward`` and ``generate`` (the config's count, and whatever else its
    protocol needs: HRM-text's cache slots), put back on leaving; ``None``: the config's. Yields the count:
    ``with running_loops(model, 8): model.generate(...)``."""
    return family_record(model).protocol.running(model, num_loops)


loop_count = running_loops  # its name before 0.3 (it is a context manager, not a count)
