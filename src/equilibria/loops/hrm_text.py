"""HRM-text (``HrmTextForCausalLM``): two weight-tied stacks, L and H. One H-cycle runs the L-stack ``L_cycles``
times on ``z_L + z_H`` and then the H-stack once on ``z_H + z_L``; ``H_cycles`` cycles make a forward, and the head
reads ``z_H``. The loop count here is ``H_cycles`` (``L_cycles`` stays the config's): one pass is one H-cycle, on the
state ``(z_H, z_L)``, started from the scaled token embeddings and ``z_L_init``."""

from __future__ import annotations

import contextlib

import torch

from .transformers_base import Recorder, TransformersLoop, first_tensor, replace_output, without_cache


class HrmTextLoop(TransformersLoop):
    """The H-cycle of an HRM-text model. Loop count ``H_cycles``; state ``cat(z_H, z_L)`` (twice the hidden
    size); map: one H-cycle. The config keeps one cache slot per attention call, ``num_hidden_layers =
    num_layers_per_stack * H_cycles * (L_cycles + 1)``, and the forward indexes them by cycle, so a loop count sets
    ``num_hidden_layers`` with ``H_cycles`` (a cache is then built with the slots the count needs), and the
    training-time gradient routing (``L_bp_cycles``, left-padded with 1s to ``H_cycles`` by the model) follows the
    count."""

    config_class, base_class, head_class = "HrmTextConfig", "HrmTextModel", "HrmTextForCausalLM"
    loops_key = "H_cycles"

    def loop_config(self, config, num_loops):
        slots = int(config.num_layers_per_stack) * num_loops * (int(config.L_cycles) + 1)
        return {"H_cycles": num_loops, "num_hidden_layers": slots}

    @contextlib.contextmanager
    def extra_settings(self, base, num_loops):
        given = list(base.config.L_bp_cycles)
        kept = base.L_bp_cycles_padded
        base.L_bp_cycles_padded = [1] * max(0, num_loops - len(given)) + given
        try:
            yield
        finally:
            base.L_bp_cycles_padded = kept

    def cache_slots(self, config, num_loops):
        return list(range(self.loop_config(config, num_loops)["num_hidden_layers"]))

    def state_width(self, config):
        return 2 * int(config.hidden_size)

    def recorder(self, base):
        stacks = {"L": base.L_module, "H": base.H_module}
        return Recorder(inputs=stacks, outputs={**stacks, "embeddings": base.embed_tokens})

    def state_after(self, base, recorded, passes=None):
        high, low = recorded.outputs["H"], recorded.outputs["L"]
        if passes is not None:
            high, low = high[:passes], low[: passes * int(base.config.L_cycles)]
        return torch.cat([high[-1], low[-1]], dim=-1)

    def substitute(self, base, state):
        return replace_output(base.H_module, lambda out: state[..., : base.config.hidden_size])

    def start(self, base, recorded):
        z_high = first_tensor(recorded.outputs["embeddings"][0]) * base.embedding_scale
        z_low = base.z_L_init.to(dtype=z_high.dtype, device=z_high.device).expand_as(z_high)
        return torch.cat([z_high, z_low], dim=-1)

    def step(self, base, recorded):
        low_kwargs, high_kwargs = (without_cache(recorded.inputs[s][0][1]) for s in ("L", "H"))
        width, cycles = base.config.hidden_size, int(base.config.L_cycles)

        def one_cycle(state: torch.Tensor) -> torch.Tensor:
            z_high, z_low = state[..., :width], state[..., width:]
            for _ in range(cycles):
                z_low = base.L_module(z_low + z_high, **low_kwargs)
            z_high = base.H_module(z_high + z_low, **high_kwargs)
            return torch.cat([z_high, z_low], dim=-1)

        return one_cycle


__all__ = ["HrmTextLoop"]
