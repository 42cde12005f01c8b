"""The loop protocol for looped LMs that transformers ships (:class:`TransformersLoop`) and the hook machinery its
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
import transformers
from torch import nn

from ..modeling.loop_map import LoopMap
from .count_per_call import make_looped
from .protocol import LoopProtocol, LoopStates, base_model_of


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


class TransformersLoop(LoopProtocol):
    """The loop protocol of a looped LM that transformers ships (one subclass per architecture): which config keys
    hold a loop count, which cache layers a forward with a given count reads, which of the model's modules to watch
    for its states, how to read the loop state after a pass from a recorded forward, how to put a state of our
    choosing in place of the last, and one pass as a map ``h -> h'`` (for the Jacobian penalty and the trajectory).

    Nothing here reimplements a model: every state is one its installed class computed, and a map or a decoded state
    goes through its own modules. ``base`` is the model's base model (``model.model``), ``model`` the causal-LM
    model."""

    #: the names of its config, base model and causal-LM classes in transformers (an older release may lack them);
    #: ``model_types`` is read from the config class (empty where the installed release has no such class)
    config_class, base_class, head_class = "", "", ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        config = getattr(transformers, cls.config_class, None) if cls.config_class else None
        cls.model_types = (config.model_type,) if config is not None else ()

    step_name = "pass"
    #: the passes before the state the loop map starts from (0: before the first pass)
    start_after_passes = 0

    def prepare(self, model: nn.Module) -> nn.Module:
        """``model`` with ``num_loops`` (and the STARS penalty's arguments) per call: :func:`equilibria.looped`."""
        return make_looped(model, self)

    def cache_slots(self, config, num_loops: int) -> list[int] | None:
        """The cache layers a forward with ``num_loops`` passes reads (None: any cache fits any count)."""
        return None

    def recorder(self, base: nn.Module) -> Recorder:
        """A :class:`Recorder` of what :meth:`state_after` and :meth:`recorded_map` read."""
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

    def recorded_map(self, base: nn.Module, recorded: Recorder) -> LoopMap:
        return LoopMap(self.step(base, recorded), self.start(base, recorded))

    def loop_map(self, model, batch, generator=None) -> LoopMap:
        """One pass for these inputs as a function of the state alone, and the state the loop starts from (recorded
        from a forward of one pass without a cache, with the masks and position embeddings it builds;
        Inkling2-loop's map starts after that pass)."""
        base = base_model_of(model)
        with self.running(base, 1), self.recorder(base) as recorded:
            base(input_ids=batch.get("input_ids"), attention_mask=batch.get("attention_mask"), use_cache=False)
        return self.recorded_map(base, recorded)

    def decode(self, model, batch, state):
        """A forward of one pass that continues from ``state``: the model's own layers after the loop and its head."""
        base = base_model_of(model)
        with self.running(model, 1), self.substitute(base, state):
            return model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits

    def states(self, model, batch, num_loops):
        """The states after the first, next-to-last and last pass of one forward of ``num_loops`` passes (read by
        hooks), with that forward's logits; no pass exits early."""
        base = base_model_of(model)
        with self.running(model, num_loops), self.recorder(base) as recorded:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits
        first, previous, last = (self.state_after(base, recorded, p) for p in (1, max(num_loops - 1, 1), None))
        return LoopStates(first, previous, last, logits=logits)


__all__ = ["Recorder", "TransformersLoop", "first_tensor", "replace_output", "without_cache"]
