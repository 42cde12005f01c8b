"""Dory (``DoryForCausalLM``, NVIDIA Nemotron-Labs): input layers, a recurrent section run ``n_recurrent_loops``
times, output layers. Each pass restarts from the normalised input section's output: ``h' = R(norm(h) + x0)`` with
``x0 = norm(h_0)`` and ``h_0`` the input section's output (``R``: the recurrent layers in order)."""

from __future__ import annotations

import torch

from .transformers_base import Recorder, TransformersLoop, first_tensor, replace_output, without_cache


class DoryLoop(TransformersLoop):
    """The recurrent section of a Dory model: loop count ``n_recurrent_loops``; state: the hidden states after a
    pass; map: ``h -> R(norm(h) + x0)``. Cache: ``per_loop`` mode keeps each pass's keys and values in its own
    copies of the recurrent layers' cache layers (appended after the model's layers on a cache's first forward),
    ``last_loop`` one set for every pass."""

    config_class, base_class, head_class = "DoryConfig", "DoryModel", "DoryForCausalLM"
    loops_key = "n_recurrent_loops"

    @staticmethod
    def _section(config) -> tuple[int, int]:
        start = int(config.n_input_layers)
        return start, start + int(config.n_recurrent_layers)

    def cache_slots(self, config, num_loops):
        if config.recurrent_kv_cache_mode == "last_loop":
            return None
        start, end = self._section(config)
        layers, width = int(config.num_hidden_layers), end - start
        return list(range(end)) + [layers + p * width + j for p in range(num_loops - 1) for j in range(width)]

    def recorder(self, base):
        start, end = self._section(base.config)
        watched = {f"layer{i}": base.layers[i] for i in range(start, end)}
        before = base.layers[start - 1] if start > 0 else base.embed_tokens
        return Recorder(inputs=watched, outputs={"input_section": before, "last": base.layers[end - 1]})

    def state_after(self, base, recorded, passes=None):
        return first_tensor(recorded.outputs["last"][-1 if passes is None else passes - 1])

    def substitute(self, base, state):
        return replace_output(base.layers[self._section(base.config)[1] - 1], lambda out: state)

    def start(self, base, recorded):
        return first_tensor(recorded.outputs["input_section"][0])

    def step(self, base, recorded):
        start, end = self._section(base.config)
        keywords = [without_cache(recorded.inputs[f"layer{i}"][0][1]) for i in range(start, end)]
        anchor = base.norm(self.start(base, recorded))

        def one_pass(h: torch.Tensor) -> torch.Tensor:
            h = base.norm(h) + anchor
            for layer, kwargs in zip(base.layers[start:end], keywords):
                h = first_tensor(layer(h, **kwargs))
            return h

        return one_pass


__all__ = ["DoryLoop"]
