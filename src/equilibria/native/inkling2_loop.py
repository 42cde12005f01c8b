"""Inkling2-loop (``Inkling2LoopForCausalLM``, model type ``inkling2_loop_text``): layers ``loop_layer_index_start``
to ``loop_layer_index_end`` passed ``loop_num_passes`` times. Each pass after the first restarts from the pre-loop
states and reads the previous pass through a gated message path, so the state a pass hands on is what its loop
layers output (the residual blocks it appended and the hidden states it ends with). The loop is read by pass count
(the state after one pass against the state after all of them); STARS' Jacobian penalty is not offered."""

from __future__ import annotations

import contextlib

import torch

from .base import NativeLoop, Recorder, replace_output


class Inkling2Loop(NativeLoop):
    """The looped layers of an Inkling2-loop model. Loop count ``loop_num_passes``; state: the outputs of the loop
    layers in a pass, side by side (``hidden_size`` times the loop layers, per position): the residual blocks the
    pass appends and the hidden states it ends with are among them, and they are all that the next pass and the
    layers after the loop read of it; no map. Cache: each pass after the first writes its own copies of the loop layers' cache layers,
    appended after the model's layers on a cache's first forward."""

    model_types = ("inkling2_loop_text",)
    loops_key = "loop_num_passes"
    no_map_reason = (
        "Inkling2-loop's passes restart from the pre-loop states and read the previous pass through gated messages: "
        "the map from one pass's layer outputs to the next's is not written here, so it is audited by pass "
        "count and has no loop map (no STARS Jacobian penalty, no loop trajectory)"
    )

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
        return Recorder(inputs={}, outputs={f"loop{j}": layer for j, layer in enumerate(self._loop_layers(base))})

    def state_after(self, base, recorded, passes=None):
        at = -1 if passes is None else passes - 1
        return torch.cat([recorded.outputs[f"loop{j}"][at] for j in range(len(self._loop_layers(base)))], dim=-1)

    @contextlib.contextmanager
    def substitute(self, base, state):
        width = base.config.hidden_size
        with contextlib.ExitStack() as stack:
            for j, layer in enumerate(self._loop_layers(base)):
                piece = state[..., j * width : (j + 1) * width]
                stack.enter_context(replace_output(layer, lambda out, piece=piece: piece.to(out.dtype)))
            yield


__all__ = ["Inkling2Loop"]
