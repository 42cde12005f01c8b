"""The loop protocols: how the package drives the loop of every looped architecture it serves, its own families'
(:mod:`equilibria.loops.ours`) and the looped LMs transformers ships (Dory, HRM-text, Inkling2-loop), each with one
:class:`~equilibria.loops.protocol.LoopProtocol` reached from its family record (``family_record(model).protocol``).

Transformers' looped LMs read their loop count from their config inside ``forward`` (``n_recurrent_loops``,
``H_cycles``, ``loop_num_passes``). :func:`looped` gives a loaded one the loop arguments of this package's families,
in place::

    from transformers import AutoModelForCausalLM
    from equilibria import looped

    model = looped(AutoModelForCausalLM.from_pretrained("path/to/dory"))
    model(input_ids, num_loops=8)                       # eight passes for this call, the config untouched
    model.generate(input_ids, num_loops=8, max_new_tokens=20)

``save_pretrained`` still writes the untouched transformers class and config.
"""

from __future__ import annotations

import torch
import transformers

from .count_per_call import LoopedCausalLMOutput
from .dory import DoryLoop
from .hrm_text import HrmTextLoop
from .inkling2_loop import Inkling2Loop
from .ours import AttractorLoop, EqRLoop, OuroLoop, PHDEQLoop
from .protocol import LoopProtocol, LoopStates, base_model_of, head_model
from .transformers_base import TransformersLoop

#: the looped LMs transformers ships, one protocol each
TRANSFORMERS_LOOPS: tuple[type[TransformersLoop], ...] = (DoryLoop, HrmTextLoop, Inkling2Loop)


def transformers_model_types() -> tuple[str, ...]:
    """The model types of the looped LMs the installed transformers has (Dory and Inkling2-loop from 5.24, HRM-text
    from 5.9)."""
    return tuple(t for cls in TRANSFORMERS_LOOPS if hasattr(transformers, cls.head_class) for t in cls.model_types)


def looped(model):
    """Give a transformers looped LM (``DoryForCausalLM``, ``HrmTextForCausalLM``, ``Inkling2LoopForCausalLM``,
    also inside a PEFT model) this package's loop arguments, in place, and return it:

    * ``forward(..., num_loops=k)`` and ``generate(..., num_loops=k)`` run ``k`` passes for that call (the config's
      count otherwise); a cache filled at another count is refused with a ``ValueError``;
    * ``forward`` also takes Ouro's ``jsrr`` (a :class:`~equilibria.modeling.regularization.JSRROptions`, or the
      ``spectral_radius_*`` keywords: the STARS penalty, computed inside ``forward`` so that DDP sees it) and returns
      the radius in ``spectral_radius``.

    The loop map, the state's width and decoding a state are its protocol's (``family_record(model).protocol``). The
    weights, the class and the config are untouched: ``save_pretrained`` writes the transformers model as before,
    loadable without this package. Calling it again does nothing. ``ValueError`` for any other model, naming the
    supported model types; ``TypeError`` for anything but a model."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"looped() takes a model (a DoryForCausalLM, HrmTextForCausalLM or Inkling2LoopForCausalLM), got "
            f"{type(model).__name__} {model!r}; load one first, e.g. AutoModelForCausalLM.from_pretrained(folder)"
        )
    model_type = getattr(getattr(head_model(model), "config", None), "model_type", None)
    for cls in TRANSFORMERS_LOOPS:
        if model_type in cls.model_types:
            return cls().prepare(model)
    raise ValueError(
        f"model_type {model_type!r} is not a looped LM that transformers ships; the supported ones are "
        f"{list(transformers_model_types())} (this package's own families take num_loops already)"
    )


__all__ = [
    "AttractorLoop",
    "DoryLoop",
    "EqRLoop",
    "HrmTextLoop",
    "Inkling2Loop",
    "LoopProtocol",
    "LoopStates",
    "LoopedCausalLMOutput",
    "OuroLoop",
    "PHDEQLoop",
    "TRANSFORMERS_LOOPS",
    "TransformersLoop",
    "base_model_of",
    "head_model",
    "looped",
    "transformers_model_types",
]
