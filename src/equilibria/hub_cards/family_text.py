"""The model card's text of each family: its name, the paper(s) it comes from, its Hub tags, a usage snippet for
each kind of head, its citation and the lines on a config's own choices. One :class:`FamilyText` per ``model_type``
(the record's modeling facts are in :mod:`equilibria.families`); a family added with ``register_family`` gets
one derived from its record (:func:`record_text`), and a model of no family a ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..families import family_record
from ..loops import DoryLoop, HrmTextLoop, Inkling2Loop
from ..modeling import AttractorConfig, EqRConfig, OuroConfig, PHDEQConfig

LM_USAGE = (
    "from transformers import AutoTokenizer",
    "",
    'tokenizer = AutoTokenizer.from_pretrained("{where}")',
    'inputs = tokenizer("{prompt}", return_tensors="pt")',
    "out = model.generate(**inputs, num_loops={loops}, max_new_tokens=8)  # {loops_note}",
)

#: a looped LM transformers ships reads its loop count from its config; ``looped`` gives it ``num_loops`` per call
TRANSFORMERS_LM_USAGE = (
    "from equilibria import looped",
    "from transformers import AutoTokenizer",
    "",
    "model = looped(model)  # num_loops per call, the config untouched",
    *LM_USAGE[2:],
)


@dataclass(frozen=True)
class FamilyText:
    """What a family's model card says about it: ``usage`` maps a head kind
    (:data:`~equilibria.families.HEAD_KINDS`) to its usage snippet (``{where}`` stands for the repo id or folder,
    ``{loops}`` for the loop count the model scores best at in its loop scaling and ``{loops_note}`` for where that
    count comes from,
    ``{prompt}`` for an input in its task's format); ``notes`` gives the card's lines on a config's own choices."""

    name: str
    paper: str
    tags: tuple[str, ...]
    usage: dict[str, tuple[str, ...]] = field(default_factory=dict)
    citation: str = ""  # BibTeX of the family's paper(s)
    notes: Callable[[object], list[str]] | None = None


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
    "one_step_neumann": "the published code's one-step backward (the incoming gradient `v` becomes `v + J^T v` at "
    "the fixed point, `J^T v` clipped; constant memory)",
}


def _attractor_card_notes(config) -> list[str]:
    """The Attractor card's lines on the map, the injection, the gradient and the attention a config chose."""
    inject = "`x = y + y0`" if config.injection == "add" else "`x = W [y; y0]` (concatenation, projected)"
    attention = (
        "causal (a language model)" if config.is_causal is not False else "bidirectional over the puzzle's cells"
    )
    return [
        f"**The map.** `residual_form={config.residual_form!r}`: {ATTRACTOR_FORMS[config.residual_form]}; the "
        f"proposal is injected at every step as {inject}. Solver: {config.solver}, tolerance {config.solver_tol:g}"
        + (", the batch stops on its worst sequence" if getattr(config, "solver_stop", "per_sample") == "batch" else "")
        + "."
        + (
            f" LayerScale gates on the attractor's branches (the published code's), starting at "
            f"{config.layer_scale_init:g}."
            if getattr(config, "layer_scale_init", None) is not None
            else ""
        ),
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


def _eqr_card_notes(config) -> list[str]:
    """The EqR card's lines on the update, the recurrence and the preset a config was made from."""
    keep = float(config.inertia)
    update = f"`z <- {keep:g} z + {1 - keep:g} f(z; x) + noise`" if keep else "`z <- f(z; x) + noise`"
    lines = [
        f"- Update: {update}, noise {config.train_noise:g} in training and {config.test_noise:g} at inference, from a "
        + (f"random start (std {config.init_std:g})." if config.random_init else "learned start.")
    ]
    if config.l_cycles:
        lines.append(
            f"- Recurrence: the published code's two levels; an iteration updates `z_L` {config.l_cycles} times from "
            "`z_H + x`, then `z_H` from `z_L`; the heads read `z_H`."
        )
    if config.preset:
        changed = ", ".join(f"`{k}={v}`" for k, v in config.preset_overrides().items())
        lines.append(
            f"- Architecture: preset `{config.preset}`" + (f", with {changed}." if changed else ", unchanged.")
        )
    return lines


def _transformers_lm_text(name: str, class_name: str, source: str) -> FamilyText:
    """The card text of a looped LM that transformers ships: its usage applies :func:`equilibria.looped`."""
    return FamilyText(
        name=f"{name} (transformers' `{class_name}`)",
        paper=f"{source}; the architecture ships in transformers",
        tags=("looped-lm", "recurrent-depth"),
        usage={"causal_lm": TRANSFORMERS_LM_USAGE},
    )


FAMILY_TEXTS: dict[str, FamilyText] = {
    OuroConfig.model_type: FamilyText(
        name="Ouro looped language model",
        paper="Zhu et al., 2025, *Scaling Latent Reasoning via Looped Language Models* (Ouro); STARS fine-tuning "
        "(random loop counts + a Jacobian spectral-radius penalty) from Yang et al., 2026, *Stabilizing Recurrent "
        "Dynamics for Test-Time Scalable Latent Reasoning in Looped Language Models*",
        tags=("looped-lm", "recurrent-depth"),
        usage={"causal_lm": LM_USAGE},
        citation=OURO_BIBTEX,
    ),
    AttractorConfig.model_type: FamilyText(
        name="Attractor model",
        paper="Fein-Ashley and Rashidinejad, 2026, *Solve the Loop: Attractor Models for Language and Reasoning*",
        tags=("deep-equilibrium", "looped-lm"),
        usage={
            "causal_lm": LM_USAGE,
            "puzzle_cells": (
                "out = model(puzzles, num_loops={loops})  # {loops_note}; out.logits.argmax(-1): one answer per cell",
            ),
        },
        citation=ATTRACTOR_BIBTEX,
        notes=_attractor_card_notes,
    ),
    EqRConfig.model_type: FamilyText(
        notes=_eqr_card_notes,
        name="Equilibrium Reasoner",
        paper="Huang, Geng and Kolter, 2026, *Equilibrium Reasoners: Learning Attractors Enables Scalable Reasoning*",
        tags=("recurrent-reasoning", "deep-equilibrium"),
        usage={
            "puzzle_solver": (
                'out = model.solve(puzzles, depth={loops}, breadth=16, select="residual")  # {loops_note}',
            )
        },
        citation=EQR_BIBTEX,
    ),
    PHDEQConfig.model_type: FamilyText(
        name="Port-Hamiltonian deep equilibrium model",
        paper="a DEQ over phase space with damped, anchored symplectic-Euler dynamics and a learned initialiser, "
        "the model studied in *The Equilibrium Is the Initialization: Lazy Identity Collapse in Physics-Structured "
        "Deep Equilibrium Reasoning* (2026)",
        tags=("deep-equilibrium",),
        usage={
            "classifier": ("out = model(inputs, num_loops=300)  # logits, solved_state, solver_steps, converged, ...",)
        },
        citation=PHDEQ_BIBTEX,
    ),
    **{
        loop.model_types[0]: _transformers_lm_text(name, loop.head_class, source)
        for loop, name, source in (
            (
                DoryLoop,
                "Dory looped language model",
                "NVIDIA Nemotron-Labs' Dory: input layers, a recurrent section "
                "looped `n_recurrent_loops` times, output layers",
            ),
            (
                HrmTextLoop,
                "HRM-text language model",
                "the Hierarchical Reasoning Model's text variant (Sapient): an "
                "L-stack and an H-stack, `H_cycles` x `L_cycles`",
            ),
            (
                Inkling2Loop,
                "Inkling2-loop language model",
                "Thinking Machines' Inkling-2 with looped layers passed "
                "`loop_num_passes` times through a gated message path",
            ),
        )
        if loop.model_types  # the installed transformers has the model
    },  # fmt: skip
}


#: the usage line of a head kind no family text gives one for (a registered family's card)
GENERIC_USAGE = ("out = model(inputs, num_loops={loops})  # {loops_note}",)


def family_text(model_or_config) -> FamilyText:
    """The card text of a model's (or config's) family: its :class:`FamilyText`, or, for a family added with
    ``register_family``, one derived from its record (:func:`record_text`); ``ValueError`` for a model of no
    equilibria family."""
    family = family_record(model_or_config, "model card template")
    return FAMILY_TEXTS.get(family.model_type) or record_text(family)


def record_text(family) -> FamilyText:
    """The card text of a family with no :class:`FamilyText` of its own: named after its config class, its source
    the module that defines it, the usage of its head kinds (a text head: ``generate`` with ``num_loops``)."""
    name = family.config_class.__name__.removesuffix("Config") or family.model_type
    usage = {head.kind: LM_USAGE if head.reads_text else GENERIC_USAGE for head in family.heads}
    module = family.config_class.__module__
    where = "its author's own script" if module == "__main__" else f"`{module}`"
    return FamilyText(
        name=f"{name} looped model",
        paper=f"An architecture of its author's, defined in {where} and registered with equilibria's "
        "`register_family`; no paper is on record",
        tags=("looped-lm",),
        usage=usage,
    )


__all__ = ["FAMILY_TEXTS", "FamilyText", "LM_USAGE", "family_text", "record_text"]
