"""The old import path of the pieces the families share, kept for code that imports it (for one, the shared peer
tests' lenient-loading variant). They now live by concern: :mod:`.loop_map`, :mod:`.strict_loading`,
:mod:`.loop_generation`, :mod:`.causal_lm` and :mod:`.argument_checks`; new code imports those."""

from .argument_checks import as_int, check_keywords, shared_fields
from .causal_lm import CausalLoopMixin, LMInputs, pop_loss_kwargs, recorded_calls, recording_attentions
from .loop_generation import LoopGenerationMixin, TelemetryCache
from .loop_map import LoopMap
from .strict_loading import StrictLoadingMixin

__all__ = [
    "CausalLoopMixin",
    "LMInputs",
    "LoopGenerationMixin",
    "LoopMap",
    "StrictLoadingMixin",
    "TelemetryCache",
    "as_int",
    "check_keywords",
    "pop_loss_kwargs",
    "recorded_calls",
    "recording_attentions",
    "shared_fields",
]
