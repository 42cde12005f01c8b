"""Model families of equilibria.

Every file in this folder can travel to the Hub as remote code: the files import only torch,
transformers and each other (``from .name import ...``), never the rest of ``equilibria``.
"""

from .configuration_attractor import AttractorConfig
from .configuration_eqr import EqRConfig
from .configuration_ouro import OuroConfig
from .configuration_phdeq import PHDEQConfig
from .modeling_attractor import (
    AttractorCache,
    AttractorCausalLMOutput,
    AttractorForCausalLM,
    AttractorModel,
    AttractorModelOutput,
    AttractorPreTrainedModel,
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

__all__ = [
    "AttractorCache",
    "AttractorCausalLMOutput",
    "AttractorConfig",
    "AttractorForCausalLM",
    "AttractorModel",
    "AttractorModelOutput",
    "AttractorPreTrainedModel",
    "EqRConfig",
    "EqRForPuzzleSolving",
    "EqRModel",
    "EqRModelOutput",
    "EqRPuzzleOutput",
    "EqRSolveOutput",
    "OuroCache",
    "OuroCausalLMOutput",
    "OuroConfig",
    "OuroForCausalLM",
    "OuroModel",
    "OuroModelOutput",
    "OuroPreTrainedModel",
    "PHDEQClassifierOutput",
    "PHDEQConfig",
    "PHDEQForSequenceClassification",
    "PHDEQModel",
    "PHDEQModelOutput",
    "PHDEQPreTrainedModel",
]
