"""Inkling2-loop (``Inkling2LoopForCausalLM``): layers ``loop_layer_index_start``
to ``loop_layer_index_end`` passed ``loop_num_passes`` times. Each pass after the first restarts from the pre-loop
states and reads the previous pass through a gated message path, so the state a pass hands on is what its loop
layers output (the residual blocks it appended and the hidden states it ends with). Its map takes a pass's state to the next
pass's (a forward of two passes whose first pass is replaced by the state), so it starts after the first pass."""

from __future__ import annotations

import contextlib

import torch

from .transformers_base import Recorder, TransformersLoop, replace_output


class Inkling2Loop(TransformersLoop):
    """The looped layers of an Inkling2-loop model. Loop count ``loop_num_passes``; state: the outputs of the loop
    layers in a pass, side by side (``hidden_size`` times the loop layers, per position): the residual blocks the
    pass appends and the hidden states it ends with are among them, and they are all that the next pass and the
    layers after the loop read of it; map: pass ``t`` -> pass ``t + 1`` (``t >= 1``: the first pass reads no
    messages, so the map starts from the state after it). Cache: each pass after the first writes its own copies of the loop layers' cache layers,
    appended after the model's layers on a cache's first forward."""

    config_class, base_class, head_class = "Inkling2LoopTextConfig", "Inkling2LoopTextModel", "Inkling2LoopForCausalLM"
    loops_key = "loop_num_passes"
    start_after_passes = 1

    def cache_slots(self, config, num_loops):
        start, end = int(config.loop_layer_index_start), int(config.loop_layer_index_end)
        layers = int(config.num_hidden_layers)
        width = end - start
        return list(range(layers)) + [layers + p * width + j for p in range(num_loops - 1) for j in range(width)]

    def _loop_layers(self, base):
        return base.layers[int(base.config.loop_layer_index_start) : int(base.config.loop_layer_index_end)]

    def state_width(self, config):
        return int(config.hidden_size) * (int(config.loop_layer_index_end) - int(config.loop_layer_index_start))

    def recorder(self, base):
        layers = {f"loop{j}": layer for j, layer in enumerate(self._loop_layers(base))}
        return Recorder(inputs={"model": base}, outputs=layers)

    def state_after(self, base, recorded, passes=None):
        at = -1 if passes is None else passes - 1
        return torch.cat([recorded.outputs[f"loop{j}"][at] for j in range(len(self._loop_layers(base)))], dim=-1)

    @contextlib.contextmanager
    def substitute(self, base, state, call: int = -1):
        """(``call``: the pass whose outputs are replaced, 0-based; -1: every pass.)"""
        width = base.config.hidden_size
        with contextlib.ExitStack() as stack:
            for j, layer in enumerate(self._loop_layers(base)):
                piece = state[..., j * width : (j + 1) * width]
                stack.enter_context(replace_output(layer, lambda out, piece=piece: piece.to(out.dtype), call))
            yield

    def start(self, base, recorded):
        return self.state_after(base, recorded, 1)

    def step(self, base, recorded):
        """The next pass from a pass's state: a forward of two passes whose first pass's layer outputs are replaced
        by the state, read at the second (the model's own message path; one forward per call)."""
        args, kwargs = recorded.inputs["model"][0]
        kwargs = {**kwargs, "cache": None, "use_cache": False}

        def next_pass(state: torch.Tensor) -> torch.Tensor:
            with self.running(base, 2), self.substitute(base, state, call=0), self.recorder(base) as inner:
                base(*args, **kwargs)
            return self.state_after(base, inner, 2)

        return next_pass


__all__ = ["Inkling2Loop"]
