"""The model families of equilibria: one record per ``model_type``, the single place that knows which exist.

Everything that varies by family reads its record: ``import equilibria`` registers the Auto classes from it, the
CLI picks the head, task and trainer, the model card takes its text, the computation audit its adapter. Adding a
family is its modeling files in :mod:`equilibria.modeling` (plus a trainer or an audit adapter if it needs its
own) and one :class:`Family` here.

The small-config factories (:func:`small_ouro_config`, :func:`small_attractor_config` and each record's
``make_config``) build a config for a task's data: the task fixes the vocabulary or input width, the caller the
sizes.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from transformers import PreTrainedConfig, PreTrainedTokenizerBase

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

LM_USAGE = (
    "from transformers import AutoTokenizer",
    "",
    'tokenizer = AutoTokenizer.from_pretrained("{where}")',
    'inputs = tokenizer("{prompt}", return_tensors="pt")',
    "out = model.generate(**inputs, num_loops=8, max_new_tokens=8)",
)


@dataclass(frozen=True)
class Head:
    """A task head of a family: its class, the transformers Auto class it is registered with, the tasks it is
    trained and evaluated on (the first is its default), the Hub ``pipeline_tag`` and a usage snippet for its card
    (``{where}`` stands for the repo id or folder, ``{prompt}`` for an input in its task's format)."""

    model_class: type
    auto_class: str
    tasks: tuple[str, ...]
    pipeline_tag: str
    usage: tuple[str, ...]
    adapter: str = ""  # "module:Class": this head's audit adapter, where it is not the family's


@dataclass(frozen=True)
class Family:
    """Everything about one ``model_type`` that code outside its modeling files needs."""

    model_type: str
    name: str
    paper: str
    tags: tuple[str, ...]
    loop_meaning: str
    loops_key: str  # the config key holding the default loop count
    min_loops: int  # the smallest loop count forward accepts (0: the backbone / initialiser alone)
    config_class: type
    base_class: type
    heads: tuple[Head, ...]
    make_config: Callable[
        ..., PreTrainedConfig
    ]  # (task fields, hidden_size, num_layers, num_attention_heads, num_loops)
    trainer: str = "equilibria.trainers:EquilibriaTrainer"  # "module:Class", imported when asked for
    arguments: str = "transformers:TrainingArguments"
    adapter: str = ""
    callbacks: tuple[str, ...] = ()  # "module:Class" TrainerCallbacks `equilibria train` adds
    citation: str = ""  # BibTeX of the family's paper(s), for the model card
    card_notes: Callable[[PreTrainedConfig], list[str]] | None = None  # the card's lines on a config's own choices
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
    )  # LoRA's default: the attention projections

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

    def head_of(self, model) -> Head:
        """The head ``model`` is an instance of (by class name, so that remote-code classes match; a PEFT model's
        base model), else the first."""
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        names = {cls.__name__ for cls in type(model).__mro__}
        return next((head for head in self.heads if head.model_class.__name__ in names), self.heads[0])

    def saved_head(self, config) -> Head:
        """The head a saved config was written by (its ``architectures``, which ``save_pretrained`` records), else
        the head of the task it was trained on (``equilibria_task``), else the first."""
        names = set(getattr(config, "architectures", None) or ())
        for head in self.heads:
            if head.model_class.__name__ in names:
                return head
        task = getattr(config, "equilibria_task", None)
        return next((head for head in self.heads if task in head.tasks), self.heads[0])

    def head_for(self, task: str, what: str | None = None) -> Head:
        """The head trained on ``task``; ``ValueError`` naming the tasks that fit (``what``: how the message
        names the model, default "a <model_type> model")."""
        for head in self.heads:
            if task in head.tasks:
                return head
        what = what or f"{with_article(self.model_type)} model"
        raise ValueError(f"--task {task} does not fit {what} (it fits {self.tasks})")

    def trainer_class(self) -> type:
        return _load(self.trainer)

    def make_callbacks(self) -> list:
        return [_load(path)() for path in self.callbacks]

    def arguments_class(self) -> type:
        return _load(self.arguments)

    def adapter_class(self, model=None) -> type:
        """The audit adapter: ``model``'s head's own where its record names one, else the family's."""
        head = self.head_of(model) if model is not None else None
        return _load(head.adapter if head is not None and head.adapter else self.adapter)


def _load(path: str) -> type:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def small_ouro_config(
    tokenizer, hidden_size: int = 128, num_hidden_layers: int = 2, num_attention_heads: int = 4, total_ut_steps: int = 4
) -> OuroConfig:
    """A small Ouro config for a character-level task: vocabulary and special tokens from ``tokenizer``, SwiGLU
    width ``2 * hidden_size``, positions up to 64."""
    return _ouro_config(
        tokenizer_fields(tokenizer), hidden_size, num_hidden_layers, num_attention_heads, total_ut_steps
    )


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
    if isinstance(tokenizer, int):
        fields = dict(vocab_size=tokenizer, max_position_embeddings=512)
    else:
        fields = dict(tokenizer_fields(tokenizer), max_position_embeddings=64)
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


ATTRACTOR_FORMS = {
    "paper": "`T(y, y0) = y0 + U(x)`, the attractor layers' residual update `U(x) = layers(x) - x` added to the "
    "proposal: the map of the paper (its Sec. 3.1; with addition, its code's `FPHead(y + y0) - y`)",
    "gated": "`T(y, y0) = y0 + gate * rms(y0) * norm(layers(x))`: this package's earlier gated form, not the "
    "paper's; its per-channel gate bounds each step, and holds the fixed point at a relative distance of about "
    "`|gate|` from the proposal",
    "deq": "`T(y, y0) = U(x)` solved from `y = 0`: a plain deep-equilibrium control, not the paper's Attractor (the "
    "backbone's output is only injected)",
}
ATTRACTOR_GRADIENTS = {
    "one_step": "the one-step gradient (one application of `T` at the detached fixed point; constant memory)",
    "implicit": "the implicit-function-theorem gradient (a backward fixed-point solve; constant memory)",
    "unrolled": "backpropagation through every solver iteration (memory grows with the budget)",
}


def _attractor_card_notes(config) -> list[str]:
    """The Attractor card's lines on the map, the injection, the gradient and the attention a config chose."""
    inject = "`x = y + y0`" if config.injection == "add" else "`x = W [y; y0]` (concatenation, projected)"
    attention = (
        "causal (a language model)" if config.is_causal is not False else "bidirectional over the puzzle's cells"
    )
    return [
        f"**The map.** `residual_form={config.residual_form!r}`: {ATTRACTOR_FORMS[config.residual_form]}; the "
        f"proposal is injected at every step as {inject}. Solver: {config.solver}, tolerance {config.solver_tol:g}.",
        "",
        f"**Training gradient.** `gradient_mode={config.gradient_mode!r}`: {ATTRACTOR_GRADIENTS[config.gradient_mode]}.",
        "",
        f"**Attention.** {attention}.",
        "",
    ]


OURO_BIBTEX = """@misc{zhu2025ouro,
  title = {Scaling Latent Reasoning via Looped Language Models},
  author = {Zhu, Rui-Jie and Wang, Zixuan and Hua, Kai and Zhang, Tianyu and Li, Ziniu and Que, Haoran and Wei, Boyi
    and Wen, Zixin and Yin, Fan and Xing, He and Li, Lu and Shi, Jiajun and Ma, Kaijing and Li, Shanda and Kergan,
    Taylor and Smith, Andrew and Qu, Xingwei and Hui, Mude and Wu, Bohong and Min, Qiyang and Huang, Hongzhi and Zhou,
    Xun and Ye, Wei and Liu, Jiaheng and Yang, Jian and Shi, Yunfeng and Lin, Chenghua and Zhao, Enduo and Cai, Tianle
    and Zhang, Ge and Huang, Wenhao and Bengio, Yoshua and Eshraghian, Jason},
  year = {2025},
  eprint = {2510.25741},
  archivePrefix = {arXiv}
}

@misc{yang2026stars,
  title = {Stabilizing Recurrent Dynamics for Test-Time Scalable Latent Reasoning in Looped Language Models},
  author = {Yang, Xiao-Wen and Han, Zi-Yu and Zhang, Xi-Hua and Wei, Wen-Da and Shao, Jie-Jing and Guo, Lan-Zhe
    and Li, Yu-Feng},
  year = {2026},
  eprint = {2605.26733},
  archivePrefix = {arXiv}
}"""

ATTRACTOR_BIBTEX = """@misc{feinashley2026attractor,
  title = {Solve the Loop: Attractor Models for Language and Reasoning},
  author = {Fein-Ashley, Jacob and Rashidinejad, Paria},
  year = {2026},
  eprint = {2605.12466},
  archivePrefix = {arXiv}
}"""

EQR_BIBTEX = """@misc{huang2026equilibrium,
  title = {Equilibrium Reasoners: Learning Attractors Enables Scalable Reasoning},
  author = {Huang, Benhao and Geng, Zhengyang and Kolter, Zico},
  year = {2026},
  eprint = {2605.21488},
  archivePrefix = {arXiv}
}"""

PHDEQ_BIBTEX = """@misc{lazyidentity2026,
  title = {The Equilibrium Is the Initialization: Lazy Identity Collapse in Physics-Structured Deep Equilibrium
    Reasoning},
  year = {2026},
  eprint = {2607.11116},
  archivePrefix = {arXiv},
  note = {authors as listed on arXiv:2607.11116}
}"""


FAMILIES: dict[str, Family] = {
    family.model_type: family
    for family in (
        Family(
            model_type="ouro",
            name="Ouro looped language model",
            paper="Zhu et al., 2025, *Scaling Latent Reasoning via Looped Language Models* (Ouro); STARS fine-tuning "
            "(random loop counts + a Jacobian spectral-radius penalty) from Yang et al., 2026, *Stabilizing Recurrent "
            "Dynamics for Test-Time Scalable Latent Reasoning in Looped Language Models*",
            tags=("looped-lm", "recurrent-depth"),
            loop_meaning="recurrence steps of the shared decoder stack",
            loops_key="total_ut_steps",
            min_loops=1,
            config_class=OuroConfig,
            base_class=OuroModel,
            heads=(Head(OuroForCausalLM, "AutoModelForCausalLM", ("addition",), "text-generation", LM_USAGE),),
            make_config=_ouro_config,
            trainer="equilibria.trainers:StarsTrainer",
            arguments="equilibria.trainers:StarsTrainingArguments",
            adapter="equilibria.diagnostics.adapters:OuroAdapter",
            citation=OURO_BIBTEX,
        ),
        Family(
            model_type="attractor_lm",
            name="Attractor model",
            paper="Fein-Ashley and Rashidinejad, 2026, *Solve the Loop: Attractor Models for Language and Reasoning*",
            tags=("deep-equilibrium", "looped-lm"),
            loop_meaning="the fixed-point solver's iteration budget (0 = backbone only)",
            loops_key="num_loops",
            min_loops=0,
            config_class=AttractorConfig,
            base_class=AttractorModel,
            heads=(
                Head(AttractorForCausalLM, "AutoModelForCausalLM", ("addition",), "text-generation", LM_USAGE),
                Head(
                    AttractorForPuzzleSolving,
                    "AutoModelForTokenClassification",
                    ("sudoku", "maze"),
                    "token-classification",
                    ("out = model(puzzles, num_loops=16)  # out.logits.argmax(-1): one answer per cell",),
                    adapter="equilibria.diagnostics.adapters:AttractorPuzzleAdapter",
                ),
            ),
            make_config=_attractor_config,
            trainer="equilibria.trainers:AttractorTrainer",
            arguments="equilibria.trainers:AttractorTrainingArguments",
            adapter="equilibria.diagnostics.adapters:AttractorAdapter",
            citation=ATTRACTOR_BIBTEX,
            card_notes=_attractor_card_notes,
        ),
        Family(
            model_type="eqr",
            name="Equilibrium Reasoner",
            paper="Huang, Geng and Kolter, 2026, *Equilibrium Reasoners: Learning Attractors Enables Scalable "
            "Reasoning*",
            tags=("recurrent-reasoning", "deep-equilibrium"),
            loop_meaning="iterations of the weight-tied block (depth)",
            loops_key="num_loops",
            min_loops=1,
            config_class=EqRConfig,
            base_class=EqRModel,
            heads=(
                Head(
                    EqRForPuzzleSolving,
                    "AutoModelForTokenClassification",
                    ("sudoku", "maze"),
                    "token-classification",
                    ('out = model.solve(puzzles, depth=64, breadth=16, select="residual")  # answers per puzzle',),
                ),
            ),
            make_config=_eqr_config,
            trainer="equilibria.trainers:EqRTrainer",
            arguments="equilibria.trainers:EqRTrainingArguments",
            adapter="equilibria.diagnostics.adapters:EqRAdapter",
            citation=EQR_BIBTEX,
        ),
        Family(
            model_type="phdeq",
            name="Port-Hamiltonian deep equilibrium model",
            paper="a DEQ over phase space with damped, anchored symplectic-Euler dynamics and a learned initialiser, "
            "the model studied in *The Equilibrium Is the Initialization: Lazy Identity Collapse in Physics-Structured "
            "Deep Equilibrium Reasoning* (2026)",
            tags=("deep-equilibrium",),
            loop_meaning="the fixed-point solver's iteration cap (Anderson or Picard: config.solver)",
            loops_key="num_loops",
            min_loops=0,
            config_class=PHDEQConfig,
            base_class=PHDEQModel,
            heads=(
                Head(
                    PHDEQForSequenceClassification,
                    "AutoModelForSequenceClassification",
                    ("reachability", "entailment"),
                    "text-classification",
                    ("out = model(inputs, num_loops=300)  # logits, solved_state, solver_steps, converged, ...",),
                ),
            ),
            make_config=_phdeq_config,
            adapter="equilibria.diagnostics.adapters:PHDEQAdapter",
            callbacks=("equilibria.trainers:GradientNormCallback",),  # gradient to the dynamics vs the direct path
            citation=PHDEQ_BIBTEX,
            lora_targets=("potential_q", "potential_c", "port"),  # no attention: the dynamics' maps
        ),
    )
}


def family_of(model_or_config, needed: str | None = None) -> Family:
    """The record of a model's (or config's) ``model_type``; ``ValueError`` naming the families otherwise (starting
    "no <needed> for ..." when the caller says what it was looking for)."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        prefix = f"no {needed} for " if needed else ""
        raise ValueError(
            f"{prefix}model_type {model_type!r}: it is not an equilibria family; the families are {sorted(FAMILIES)}"
        )
    return FAMILIES[model_type]


def family_using(role: str, cls: type) -> Family:
    """The family whose record names ``cls``, or the nearest class it derives from, as its ``role`` (``"trainer"``
    or ``"adapter"``): how a trainer or an audit adapter knows its family's ``model_type``. ``ValueError`` when no
    record names it."""
    for klass in cls.__mro__:
        for family in FAMILIES.values():
            if getattr(family, role) and _load(getattr(family, role)) is klass:
                return family
    raise ValueError(f"no family's record names {cls.__name__} (or a class it derives from) as its {role}")


def model_task(model_or_config) -> str:
    """The task a saved model was trained on (``config.equilibria_task``, written by ``equilibria train``), else
    its family's default task."""
    config = getattr(model_or_config, "config", model_or_config)
    return getattr(config, "equilibria_task", None) or family_of(config).default_task


def register_auto_classes() -> None:
    """Register every family's config, base model and heads with transformers' Auto classes."""
    import transformers

    for family in FAMILIES.values():
        transformers.AutoConfig.register(family.model_type, family.config_class, exist_ok=True)
        transformers.AutoModel.register(family.config_class, family.base_class, exist_ok=True)
        for head in family.heads:
            getattr(transformers, head.auto_class).register(family.config_class, head.model_class, exist_ok=True)
        if family.heads[0].auto_class == "AutoModelForCausalLM":  # so a saved CharTokenizer loads as one
            transformers.AutoTokenizer.register(family.config_class, fast_tokenizer_class=CharTokenizer, exist_ok=True)


__all__ = [
    "FAMILIES",
    "Family",
    "Head",
    "family_of",
    "model_task",
    "register_auto_classes",
    "small_attractor_config",
    "small_ouro_config",
]
