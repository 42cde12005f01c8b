"""Trainer callbacks: where the training signal goes, and a progress bar whose ETA leaves out the first step.

[`GradientNormCallback`] logs, per named group of parameters, the norm of the gradient each optimizer step
applied. With the PH-DEQ's groups ([`phdeq_gradient_groups`]) it measures gradient starvation, the mechanism the
lazy-identity study proposes: when the decoder can read the context directly, does the port-Hamiltonian map
still receive gradient, or does the direct path take all of it?
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils import get_total_norm
from transformers import ProgressCallback, TrainerCallback

from ..modeling.configuration_phdeq import PHDEQConfig

GradientGroups = dict[str, Callable[[], list[torch.Tensor | None]]]


def _grads(*params: nn.Parameter) -> Callable[[], list[torch.Tensor | None]]:
    return lambda: [p.grad for p in params]


def _columns(weight: nn.Parameter, start: int, stop: int | None) -> Callable[[], list[torch.Tensor | None]]:
    """The gradient of the input columns ``start:stop`` of a linear layer's weight (what reads those features)."""
    return lambda: [None if weight.grad is None else weight.grad[:, start:stop]]


def phdeq_gradient_groups(model: nn.Module) -> GradientGroups:
    """The PH-DEQ's gradient paths: ``dynamics`` (the port-Hamiltonian map: potential, its scale and the input
    port, where there is one), ``direct_path`` (the decoder's weights that read the context around the solver; absent without
    ``direct_path``), ``state_readout`` (the decoder's weights that read ``h*``), ``encoder`` (the context encoder,
    which both paths reach) and ``initializer`` (absent with a zero start)."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    core, config = model.model, model.config
    state_size = 2 * config.hidden_size
    readout = model.classifier[0].weight
    groups = {
        "dynamics": _grads(
            *core.potential_q.parameters(),
            *core.potential_c.parameters(),
            core.potential_scale,
            *(core.port.parameters() if core.port is not None else ()),
        ),
        "state_readout": _columns(readout, 0, state_size),
        "encoder": _grads(*core.input_proj.parameters(), *core.context_out.parameters()),
    }
    if config.direct_path:
        groups["direct_path"] = _columns(readout, state_size, None)
    if core.initializer is not None:
        groups["initializer"] = _grads(*core.initializer.parameters())
    return groups


def group_norm(grads: list[torch.Tensor | None]) -> torch.Tensor:
    """The 2-norm of all these gradients together (missing ones count as zero), as a 0-dim tensor."""
    return get_total_norm([g.detach().float() for g in grads if g is not None])


class GradientNormCallback(TrainerCallback):
    """Log the gradient norm of each group of parameters at every optimizer step.

    The norms are read just before the optimizer steps, after the Trainer's gradient clipping (``max_grad_norm``
    scales every group by the same factor, so the ratios between groups are those of the raw gradients) and, in
    distributed training, after the gradients were averaged over processes. Each logging step adds the groups'
    means since the last one as ``grad_norm/<group>`` to the logs (and ``trainer.state.log_history``);
    ``history`` keeps every step's values.

    Args:
        groups: ``model -> {name: () -> [gradient tensors]}``; default [`phdeq_gradient_groups`].
    """

    # `equilibria train` adds it for these families: the dynamics' gradient vs the direct path
    model_types = (PHDEQConfig.model_type,)

    def __init__(self, groups: Callable[[nn.Module], GradientGroups] = phdeq_gradient_groups):
        self.make_groups = groups
        self.groups: GradientGroups = {}
        self.history: list[dict[str, float]] = []
        self._pending: list[dict[str, float]] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.groups = self.make_groups(model)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        values = torch.stack([group_norm(get()).cpu() for get in self.groups.values()]).tolist()  # one sync
        norms = dict(zip(self.groups, values))
        self.history.append({"step": state.global_step + 1, **norms})
        self._pending.append(norms)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._pending or logs is None:
            return
        means = {f"grad_norm/{name}": sum(n[name] for n in self._pending) / len(self._pending) for name in self.groups}
        self._pending = []
        logs.update(means)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(means)


class SteadyProgressCallback(ProgressCallback):
    """transformers' training progress bar, with its rate and ETA measured from the end of the first optimizer step.

    The first step carries one-off costs (the optimizer's state, the first call of each kernel, DDP's buckets; on a
    resumed run, the jump to the checkpoint's step), and tqdm's moving average of the rate gave that step weight
    for the next 5-15 updates: the bar showed ETAs far above the run's length before settling. Here, once the first
    step ends, the bar's rate averages start again from that moment (its elapsed time stays the run's), so the ETA
    rests on steady steps only. The family trainers use it in place of ``ProgressCallback``."""

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        self.restarted = False  # the bar's clock has not been restarted after a first step yet
        bar = getattr(self, "training_bar", None)
        if bar is not None and args.device.type == "cpu":  # on a busy CPU the thread count sets the rate
            threads = torch.get_num_threads()
            bar.set_description(f"training ({threads} torch thread{'s' if threads != 1 else ''})")

    def on_step_end(self, args, state, control, **kwargs):
        super().on_step_end(args, state, control, **kwargs)
        bar = getattr(self, "training_bar", None)  # transformers' bar (on the main process only)
        if bar is not None and not bar.disable and not self.restarted:
            done, start = bar.n, bar.start_t
            bar.reset(total=bar.total)  # tqdm's public restart: a fresh clock and fresh rate averages
            bar.n = bar.last_print_n = bar.initial = done  # the steps done are not counted into the rate
            bar.start_t = start
            bar.refresh()
        self.restarted = True
