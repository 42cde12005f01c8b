"""``num_loops`` per call for a looped LM that transformers ships: its ``forward`` and ``generate`` wrapped in place
(:func:`make_looped`, what :func:`equilibria.looped` does with the model's protocol), the class and config untouched.

Within a call the protocol's ``running`` block sets the config keys that make the model's own ``forward`` run the
count, and puts them back; the STARS penalty's spectral radius is computed inside the wrapped ``forward`` (so that
DDP sees it), on the protocol's recorded loop map.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from types import MethodType

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.utils import ModelOutput

from ..modeling.looped_lm import warn_far_beyond
from ..modeling.regularization import JSRROptions, jsrr_estimate
from .protocol import base_model_of, head_model


def check_cache(protocol, config, cache, num_loops: int) -> None:
    """``ValueError`` unless ``cache`` (or none) fits a forward of ``num_loops`` passes: every cache layer that
    forward reads must hold the tokens the others hold (a cache filled at another loop count lacks some)."""
    if cache is None or not hasattr(cache, "layers"):
        return
    past = cache.get_seq_length()
    slots = protocol.cache_slots(config, num_loops)
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


def _jsrr(protocol, head, recorded, attention_mask, jsrr: JSRROptions) -> torch.Tensor:
    """The JSRR estimate (:func:`~equilibria.modeling.regularization.jsrr_estimate`, every family's) of the recorded
    forward's loop map at its last state (or the state after ``jsrr.step`` passes)."""
    base = base_model_of(head)

    def make_step(pick):
        recorded.inputs = {k: pick(v) for k, v in recorded.inputs.items()}
        recorded.outputs = {k: pick(v) for k, v in recorded.outputs.items()}
        return protocol.step(base, recorded)

    return jsrr_estimate(make_step, protocol.state_after(base, recorded, jsrr.step), attention_mask, jsrr)


def _looped_forward(original, protocol):
    @functools.wraps(original)
    def forward(self, *args, num_loops: int | None = None, jsrr: JSRROptions | None = None, **kwargs):
        jsrr = JSRROptions.pop_from(kwargs, jsrr)
        with protocol.running(self, num_loops) as count:
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            check_cache(protocol, self.config, cache, count)
            if jsrr is not None and cache is not None and cache.get_seq_length():
                raise ValueError(
                    "spectral_radius_iters: the loop map is read from a forward without past tokens; "
                    "pass no cache (use_cache=False)"
                )
            if jsrr is not None:
                jsrr.check_step(count)
            if jsrr is None:
                outputs = original(self, *args, **kwargs)
                rho = None
            else:
                with protocol.recorder(base_model_of(self)) as recorded:
                    outputs = original(self, *args, **kwargs)
                rho = _jsrr(protocol, self, recorded, kwargs.get("attention_mask"), jsrr)
        if type(outputs) is CausalLMOutputWithPast:
            return LoopedCausalLMOutput(**outputs, num_loops=count, spectral_radius=rho)
        return _with_radius(outputs, rho, count) if isinstance(outputs, ModelOutput) else outputs

    signature = inspect.signature(original)
    params = list(signature.parameters.values())
    keyword = inspect.Parameter.KEYWORD_ONLY
    extra = [
        inspect.Parameter("num_loops", keyword, default=None, annotation="int | None"),
        inspect.Parameter("jsrr", keyword, default=None, annotation="JSRROptions | None"),
    ]
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    forward.__signature__ = signature.replace(parameters=params[:at] + extra + params[at:])
    return forward


def _with_radius(outputs, rho, count):
    """A model output of another class (Inkling2-loop's) with the loop count and radius as attributes."""
    outputs.spectral_radius, outputs.num_loops = rho, count
    return outputs


def _looped_generate(original, protocol):
    @functools.wraps(original)
    def generate(self, *args, num_loops: int | None = None, **kwargs):
        if num_loops is not None:
            warn_far_beyond(self, num_loops, protocol.default_loops(self.config), protocol.loops_key)
        # the cache generate builds is sized for the count, every forward runs it
        with protocol.running(self, num_loops):
            return original(self, *args, **kwargs)

    return generate


def make_looped(model, protocol):
    """``model`` (also inside a PEFT model) with ``forward`` and ``generate`` taking ``num_loops`` per call, driven by
    ``protocol``, in place; calling it again does nothing."""
    head = head_model(model)
    if getattr(head, "equilibria_looped", False):
        return model
    head.forward = MethodType(_looped_forward(type(head).forward, protocol), head)
    head.generate = MethodType(_looped_generate(type(head).generate, protocol), head)
    head.equilibria_looped = True
    return model


__all__ = ["LoopedCausalLMOutput", "check_cache", "make_looped"]
