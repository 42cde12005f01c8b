"""What a family's model card says about it (:class:`FamilyText`: its name, paper, Hub tags, a usage snippet per head
kind, citation, notes on a config's choices), the usage snippets the families share, and the text derived from a
record that has none (:func:`record_text`: a family added with ``register_family``). Each family's own text is in its
record's module; the card is built in :mod:`equilibria.hub_cards`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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


#: the usage line of a head kind no family text gives one for (a registered family's card)
GENERIC_USAGE = ("out = model(inputs, num_loops={loops})  # {loops_note}",)


def transformers_lm_text(name: str, class_name: str, source: str) -> FamilyText:
    """The card text of a looped LM that transformers ships: its usage applies :func:`equilibria.looped`."""
    return FamilyText(
        name=f"{name} (transformers' `{class_name}`)",
        paper=f"{source}; the architecture ships in transformers",
        tags=("looped-lm", "recurrent-depth"),
        usage={"causal_lm": TRANSFORMERS_LM_USAGE},
    )


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
