"""Model families of equilibria.

Every file in this folder can travel to the Hub as remote code: the files import only torch,
transformers and each other (``from .name import ...``), never the rest of ``equilibria``.
"""

from .configuration_ouro import OuroConfig
from .modeling_ouro import (
    OuroCache,
    OuroCausalLMOutput,
    OuroForCausalLM,
    OuroModel,
    OuroModelOutput,
    OuroPreTrainedModel,
)

__all__ = [
    "OuroCache",
    "OuroCausalLMOutput",
    "OuroConfig",
    "OuroForCausalLM",
    "OuroModel",
    "OuroModelOutput",
    "OuroPreTrainedModel",
]
