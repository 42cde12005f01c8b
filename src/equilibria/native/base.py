"""The loop protocol for looped LMs that transformers ships (:class:`NativeLoop`) and the hook machinery its
architectures share: recording the calls of a model's own modules during one of its forwards (:class:`Recorder`),
and replacing the loop section's output in a forward (:func:`replace_output`).

Nothing here reimplements a model: every state is one its installed class computed, every decoded state goes through
its own layers, and a loop map calls its own modules with the keywords its forward passed them.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from torch import nn

from ..modeling.loop_map import LoopMap


class Recorder:
    """The calls of some modules during one forward: for each name, every call's ``(args, kwargs)`` (``inputs``,
    from forward pre-hooks) and output (``outputs``), in call order. Use as a context manager around a forward."""

    def __init__(self, inputs: dict[str, nn.Module], outputs: dict[str, nn.Module] | None = None):
        self.watch_inputs, self.watch_outputs = inputs, outputs or {}
        self.inputs: dict[str, list] = defaultdict(list)
        self.outputs: dict[str, list] = defaultdict(list)
        self._handles: list = []

    def __enter__(self) -> Recorder:
        for name, module in self.watch_inputs.items():
            hook = lambda _m, args, kwargs, name=name: self.inputs[name].append((args, kwargs))  # noqa: E731
            self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        for name, module in self.watch_outputs.items():
            hook = lambda _m, _args, output, name=name: self.outputs[name].append(output)  # noqa: E731
            self._handles.append(module.register_forward_hook(hook))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


@contextlib.contextmanager
def replace_output(module: nn.Module, value: Callable[[object], object], call: int = -1) -> Iterator[None]:
    """Within the block, the output of ``module``'s call number ``call`` (0-based; -1: every call) becomes
    ``value(output)``."""
    count = [0]

    def hook(_module, _args, output):
        count[0] += 1
        return value(output) if call in (-1, count[0] - 1) else output

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def without_cache(kwargs: dict) -> dict:
    """A recorded call's keywords for a call of our own outside the model's forward: no cache (nor its offsets and
    shared past)."""
    dropped = {"hidden_states", "cache_offset", "cycle_offset", "shared_kv_states"}
    return {**{k: v for k, v in kwargs.items() if k not in dropped}, "cache": None}


def first_tensor(value):
    """The output of a layer as a tensor (the first element of a tuple output)."""
    return value[0] if isinstance(value, tuple) else value


def rows_of(value, rows: torch.Tensor, batch: int):
    """``value`` (a tensor, or tuples / lists / dicts of them) with the batch rows ``rows`` kept in every tensor whose
    first dimension is the batch (``batch`` rows); other values unchanged."""
    if isinstance(value, torch.Tensor):
        return value.index_select(0, rows.to(value.device)) if value.dim() and value.shape[0] == batch > 1 else value
    if isinstance(value, (tuple, list)):
        return type(value)(rows_of(v, rows, batch) for v in value)
    if isinstance(value, dict):
        return {k: rows_of(v, rows, batch) for k, v in value.items()}
    return value


class NativeLoop:
    """How equilibria drives one transformers looped LM (one subclass per architecture, declaring the
    ``model_type`` values it serves): which config keys hold a loop count, which cache layers a forward with a
    given count reads, which of the model's modules to watch for its states, how to read the loop state after the
    last pass from a recorded forward, how to put a state of our choosing in its place, and the loop as a map ``h -> h'`` (for the
    Jacobian penalty and the trajectory diagnostic).

    A *state* is per position: ``(batch, seq_len, state_width)``. ``base`` is the model's base model (``model.model``),
    ``model`` the causal-LM head model."""

    model_types: tuple[str, ...] = ()
    head_class = ""  # the causal-LM class in transformers (an older release may lack it)
    loops_key = ""
    #: the passes before the state the loop map starts from (0: before the first pass)
    start_after_passes = 0

    def loop_config(self, config, num_loops: int) -> dict:
        """The config values that make a forward run ``num_loops`` passes."""
        return {self.loops_key: num_loops}

    def default_loops(self, config) -> int:
        return int(getattr(config, self.loops_key))

    @contextlib.contextmanager
    def extra_settings(self, base: nn.Module, num_loops: int) -> Iterator[None]:
        """Anything besides the config that a forward with ``num_loops`` passes needs (default: nothing)."""
        yield

    @contextlib.contextmanager
    def running(self, model: nn.Module, num_loops: int) -> Iterator[None]:
        """Within the block, ``model`` (head or base model: they share the config) runs ``num_loops`` passes; the
        config is restored on leaving."""
        config = model.config
        values = self.loop_config(config, num_loops)
        kept = {key: getattr(config, key) for key in values}
        try:
            for key, value in values.items():
                setattr(config, key, value)
            with self.extra_settings(getattr(model, getattr(model, "base_model_prefix", ""), model), num_loops):
                yield
        finally:
            for key, value in kept.items():
                setattr(config, key, value)

    def cache_slots(self, config, num_loops: int) -> list[int] | None:
        """The cache layers a forward with ``num_loops`` passes reads (None: any cache fits any count)."""
        return None

    def state_width(self, config) -> int:
        return int(config.hidden_size)

    def recorder(self, base: nn.Module) -> Recorder:
        """A :class:`Recorder` of what :meth:`state_after` and :meth:`loop_map` read."""
        raise NotImplementedError

    def state_after(self, base: nn.Module, recorded: Recorder, passes: int | None = None) -> torch.Tensor:
        """The loop state after ``passes`` passes of the recorded forward (None: after its last)."""
        raise NotImplementedError

    def substitute(self, base: nn.Module, state: torch.Tensor) -> contextlib.AbstractContextManager:
        """A context in which a forward (of one pass) continues from ``state`` in place of its loop state after the
        last pass: the model's own layers decode it."""
        raise NotImplementedError

    def step(self, base: nn.Module, recorded: Recorder) -> Callable[[torch.Tensor], torch.Tensor]:
        """One pass of the loop as a function of the state, for the inputs of the recorded forward (its masks and
        position embeddings), differentiable in the state and the weights."""
        raise NotImplementedError

    def start(self, base: nn.Module, recorded: Recorder) -> torch.Tensor:
        """The state the loop starts from (before its first pass) in the recorded forward."""
        raise NotImplementedError

    def loop_map(self, base: nn.Module, recorded: Recorder) -> LoopMap:
        return LoopMap(self.step(base, recorded), self.start(base, recorded))


__all__ = ["NativeLoop", "Recorder", "first_tensor", "without_cache", "replace_output", "rows_of"]
