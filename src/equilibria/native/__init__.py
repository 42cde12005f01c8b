"""Looped LMs that transformers itself ships (Dory, HRM-text, Inkling2-loop), driven through their installed classes.

Each reads its loop count from its config inside ``forward`` (``n_recurrent_loops``, ``H_cycles``,
``loop_num_passes``). :func:`looped` gives a loaded model the loop arguments of this package's families, in place::

    from transformers import AutoModelForCausalLM
    from equilibria import looped

    model = looped(AutoModelForCausalLM.from_pretrained("path/to/dory"))
    model(input_ids, num_loops=8)                       # eight passes for this call, the config untouched
    model.generate(input_ids, num_loops=8, max_new_tokens=20)

One :class:`~equilibria.native.base.NativeLoop` per architecture (:data:`NATIVE_LOOPS`, each declaring the model
types it serves) says which config keys hold the count, which cache layers a count reads, where the loop state is
and the loop as a map ``h -> h'``. The audit, ``equilibria eval`` and ``StarsTrainer``
use it; ``save_pretrained`` still writes the untouched transformers class and config.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from types import MethodType

import torch
import transformers
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.utils import ModelOutput

from ..modeling.loop_map import LoopMap
from ..modeling.looped_lm import warn_far_beyond
from ..modeling.regularization import spectral_radius
from .base import NativeLoop, Recorder, rows_of
from .dory import DoryLoop
from .hrm_text import HrmTextLoop
from .inkling2_loop import Inkling2Loop

#: the architectures, one protocol each
NATIVE_LOOPS: tuple[type[NativeLoop], ...] = (DoryLoop, HrmTextLoop, Inkling2Loop)

_JSRR_DEFAULTS = dict(
    spectral_radius_iters=None,
    spectral_radius_estimator="vjp",
    spectral_radius_start=None,
    spectral_radius_probe="sequence",
    spectral_radius_rows=None,
    spectral_radius_step=None,
)


def native_model_types() -> tuple[str, ...]:
    """The model types of the architectures the installed transformers has (Dory and Inkling2-loop from 5.24,
    HRM-text from 5.9)."""
    return tuple(t for cls in NATIVE_LOOPS if hasattr(transformers, cls.head_class) for t in cls.model_types)


def native_loop_for(model_or_config) -> NativeLoop:
    """The protocol of a transformers looped LM (a model, its config or a ``model_type``); ``ValueError`` naming
    the supported model types otherwise."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = config if isinstance(config, str) else getattr(config, "model_type", None)
    for cls in NATIVE_LOOPS:
        if model_type in cls.model_types:
            return cls()
    raise ValueError(
        f"model_type {model_type!r} is not a looped LM that transformers ships; the supported ones are "
        f"{list(native_model_types())} (this package's own families take num_loops already)"
    )


def is_native(model) -> bool:
    """Whether ``model`` (or the base model of a PEFT model) is a looped LM that transformers ships."""
    return getattr(getattr(_head_model(model), "config", None), "model_type", None) in native_model_types()


def _head_model(model):
    """The causal-LM model inside ``model`` (a PEFT model's base model)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def base_model_of(model):
    """The base model (``DoryModel`` ...) of a transformers looped LM, with or without its head."""
    head = _head_model(model)
    return getattr(head, head.base_model_prefix, head)


def _check_num_loops(num_loops) -> int:
    if isinstance(num_loops, bool) or not isinstance(num_loops, int) or num_loops < 1:
        raise ValueError(f"num_loops must be an integer >= 1 (loop passes for this call), got {num_loops!r}")
    return num_loops


@contextlib.contextmanager
def loop_count(model, num_loops: int | None) -> Iterator[int]:
    """Within the block, ``model`` (a transformers looped LM, its head or base model) runs ``num_loops`` passes
    (``None``: its config's); the config (shared by the head and base model) is restored on leaving."""
    protocol = native_loop_for(model)
    if num_loops is None:
        yield protocol.default_loops(model.config)
        return
    with protocol.running(model, _check_num_loops(num_loops)):
        yield num_loops


def check_cache(model, cache, num_loops: int) -> None:
    """``ValueError`` unless ``cache`` (or none) fits a forward of ``num_loops`` passes: every cache layer that
    forward reads must hold the tokens the others hold (a cache filled at another loop count lacks some)."""
    if cache is None or not hasattr(cache, "layers"):
        return
    past = cache.get_seq_length()
    slots = native_loop_for(model).cache_slots(model.config, num_loops)
    if not past or slots is None:
        return
    short = [i for i in slots if i >= len(cache.layers) or cache.layers[i].get_seq_length() != past]
    if short:
        raise ValueError(
            f"this cache does not fit num_loops={num_loops}: it holds {past} tokens, but {len(short)} of the cache "
            f"layers a forward of {num_loops} passes reads hold fewer or are missing (it was filled at another loop "
            "count). Start from a new cache (or none) when the loop count changes."
        )


@dataclass
class LoopedCausalLMOutput(CausalLMOutputWithPast):
    """The model's own causal-LM output, plus the loop count it ran and (when asked for) the spectral radius of
    the loop map's Jacobian."""

    num_loops: int | None = None
    spectral_radius: torch.FloatTensor | None = None


def _jsrr(head, recorded: Recorder, attention_mask, options: dict) -> torch.Tensor:
    """The spectral-radius estimate of the recorded forward's loop map at its last state (or the state after
    ``spectral_radius_step`` passes), over the real tokens; with ``rows``, on those batch rows only."""
    protocol, base = native_loop_for(head), base_model_of(head)
    state = protocol.state_after(base, recorded, options["spectral_radius_step"])
    valid = attention_mask if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 else None
    rows, start = options["spectral_radius_rows"], options["spectral_radius_start"]
    if rows is not None:
        if rows.numel() == 0:
            return state.new_zeros((0,), dtype=torch.float32)
        batch = state.shape[0]
        state, valid, start = (rows_of(t, rows, batch) for t in (state, valid, start))
        recorded.inputs = {k: rows_of(v, rows, batch) for k, v in recorded.inputs.items()}
        recorded.outputs = {k: rows_of(v, rows, batch) for k, v in recorded.outputs.items()}
    return spectral_radius(
        protocol.step(base, recorded),
        state,
        num_iters=options["spectral_radius_iters"],
        valid=valid,
        estimator=options["spectral_radius_estimator"],
        start=start,
        probe=options["spectral_radius_probe"],
    )


def _looped_forward(original):
    @functools.wraps(original)
    def forward(self, *args, num_loops: int | None = None, **kwargs):
        options = {key: kwargs.pop(key, default) for key, default in _JSRR_DEFAULTS.items()}
        with loop_count(self, num_loops) as count:
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            check_cache(self, cache, count)
            if options["spectral_radius_iters"] and cache is not None and cache.get_seq_length():
                raise ValueError(
                    "spectral_radius_iters: the loop map is read from a forward without past tokens; "
                    "pass no cache (use_cache=False)"
                )
            if not options["spectral_radius_iters"]:
                outputs = original(self, *args, **kwargs)
                rho = None
            else:
                with native_loop_for(self).recorder(base_model_of(self)) as recorded:
                    outputs = original(self, *args, **kwargs)
                rho = _jsrr(self, recorded, kwargs.get("attention_mask"), options)
        if type(outputs) is CausalLMOutputWithPast:
            return LoopedCausalLMOutput(**outputs, num_loops=count, spectral_radius=rho)
        return _with_radius(outputs, rho, count) if isinstance(outputs, ModelOutput) else outputs

    signature = inspect.signature(original)
    params = list(signature.parameters.values())
    extra = [inspect.Parameter("num_loops", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | None")]
    extra += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in _JSRR_DEFAULTS.items()]
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    forward.__signature__ = signature.replace(parameters=params[:at] + extra + params[at:])
    return forward


def _with_radius(outputs, rho, count):
    """A model output of another class (Inkling2-loop's) with the loop count and radius as attributes."""
    outputs.spectral_radius, outputs.num_loops = rho, count
    return outputs


def _looped_generate(original):
    @functools.wraps(original)
    def generate(self, *args, num_loops: int | None = None, **kwargs):
        if num_loops is not None:
            protocol = native_loop_for(self)
            warn_far_beyond(self, num_loops, protocol.default_loops(self.config), protocol.loops_key)
        with loop_count(self, num_loops):  # the cache generate builds is sized for the count, every forward runs it
            return original(self, *args, **kwargs)

    return generate


def native_loop_map(base, input_ids=None, attention_mask=None, inputs_embeds=None) -> LoopMap:
    """``(f, h_0)`` of a transformers looped LM's base model: one pass of the loop for these inputs as a function of
    the state alone, and the state the loop starts from (the model's own modules, with the masks and position
    embeddings its forward builds: recorded from a forward of one pass without a cache; Inkling2-loop's map starts
    after that pass)."""
    protocol = native_loop_for(base)
    with loop_count(base, 1), protocol.recorder(base) as recorded:
        base(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, use_cache=False)
    return protocol.loop_map(base, recorded)


def looped(model):
    """Give a transformers looped LM (``DoryForCausalLM``, ``HrmTextForCausalLM``, ``Inkling2LoopForCausalLM``,
    also inside a PEFT model) this package's loop arguments, in place, and return it:

    * ``forward(..., num_loops=k)`` and ``generate(..., num_loops=k)`` run ``k`` passes for that call (the config's
      count otherwise); a cache filled at another count is refused with a ``ValueError``;
    * the base model gets ``loop_map(input_ids, attention_mask)`` (the loop as a map ``h -> h'`` with its start)
      and ``loop_state_width``, so that the audit, the loop trajectory and ``StarsTrainer`` work on it;
    * ``forward`` also takes the ``spectral_radius_*`` arguments of Ouro's (the STARS penalty, computed inside
      ``forward`` so that DDP sees it) and returns the radius in ``spectral_radius``.

    The weights, the class and the config are untouched: ``save_pretrained`` writes the transformers model as
    before, loadable without this package. Calling it again does nothing. ``ValueError`` for any other model,
    naming the supported model types; ``TypeError`` for anything but a model."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"looped() takes a model (a DoryForCausalLM, HrmTextForCausalLM or Inkling2LoopForCausalLM), got "
            f"{type(model).__name__} {model!r}; load one first, e.g. AutoModelForCausalLM.from_pretrained(folder)"
        )
    head = _head_model(model)
    protocol = native_loop_for(head)
    if getattr(head, "equilibria_looped", False):
        return model
    head.forward = MethodType(_looped_forward(type(head).forward), head)
    head.generate = MethodType(_looped_generate(type(head).generate), head)
    base = base_model_of(head)
    base.loop_map = functools.partial(native_loop_map, base)
    base.loop_state_width = protocol.state_width(head.config)
    head.equilibria_looped = True
    return model


__all__ = [
    "LoopedCausalLMOutput",
    "NATIVE_LOOPS",
    "NativeLoop",
    "base_model_of",
    "check_cache",
    "is_native",
    "loop_count",
    "looped",
    "native_loop_for",
    "native_loop_map",
    "native_model_types",
]
