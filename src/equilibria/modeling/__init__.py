"""Model families of equilibria.

Every file in this folder can travel to the Hub as remote code: the files import only torch, transformers (with its
dependencies safetensors and huggingface_hub) and each other (``from .name import ...``), never the rest of
``equilibria``. Besides each family's ``configuration_<family>.py`` and ``modeling_<family>.py``, the shared pieces
by concern: ``layers`` (the standard transformer pieces), ``looped_lm`` (the checks of forward's arguments, and what
the looped language models share: the forward's preamble, the causal-LM heads' pieces, generate's loop arguments,
the telemetry cache), ``loop_map`` (the loop as a function of its state), ``solvers`` (the fixed-point entry, the
residual), ``regularization`` (Jacobian estimators), ``config_checks`` (config validation), ``compat`` (where
transformers releases differ) and ``checkpoints`` (loading, saving, publishing).
"""

from .configuration_attractor import AttractorConfig
from .configuration_eqr import EqRConfig
from .configuration_ouro import OuroConfig
from .configuration_phdeq import PHDEQConfig
from .modeling_attractor import (
    AttractorCache,
    AttractorCausalLMOutput,
    AttractorForCausalLM,
    AttractorForPuzzleSolving,
    AttractorModel,
    AttractorModelOutput,
    AttractorPreTrainedModel,
    AttractorPuzzleOutput,
)
from .modeling_eqr import EqRForPuzzleSolving, EqRModel, EqRModelOutput, EqRPuzzleOutput, EqRSolveOutput
from .modeling_ouro import (
    OuroCache,
    OuroCausalLMOutput,
    OuroForCausalLM,
    OuroModel,
    OuroModelOutput,
    OuroPreTrainedModel,
)
from .modeling_phdeq import (
    PHDEQClassifierOutput,
    PHDEQForSequenceClassification,
    PHDEQModel,
    PHDEQModelOutput,
    PHDEQPreTrainedModel,
)

__all__ = sorted(name for name in dir() if name[:1].isupper())  # every class imported above
