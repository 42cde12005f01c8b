"""equilibria: looped and equilibrium language/reasoning models for the Hugging Face ecosystem.

Importing the package registers every model family with transformers' Auto classes::

    import equilibria
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained("path/to/ouro-checkpoint")
    model.generate(input_ids, num_loops=8, max_new_tokens=32)

Families: Ouro looped LM (``model_type="ouro"``), the Attractor LM (``"attractor_lm"``) and the Equilibrium
Reasoner (``"eqr"``, ``AutoModelForTokenClassification``: one answer token per puzzle cell) and the
port-Hamiltonian DEQ (``"phdeq"``, ``AutoModelForSequenceClassification``).
"""

from importlib.metadata import PackageNotFoundError, version

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .modeling import (
    AttractorCache,
    AttractorCausalLMOutput,
    AttractorConfig,
    AttractorForCausalLM,
    AttractorModel,
    AttractorModelOutput,
    AttractorPreTrainedModel,
    EqRConfig,
    EqRForPuzzleSolving,
    EqRModel,
    EqRModelOutput,
    EqRPuzzleOutput,
    EqRSolveOutput,
    OuroCache,
    OuroCausalLMOutput,
    OuroConfig,
    OuroForCausalLM,
    OuroModel,
    OuroModelOutput,
    OuroPreTrainedModel,
    PHDEQClassifierOutput,
    PHDEQConfig,
    PHDEQForSequenceClassification,
    PHDEQModel,
    PHDEQModelOutput,
    PHDEQPreTrainedModel,
)

try:
    __version__ = version("equilibria")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"


def _register() -> None:
    AutoConfig.register(OuroConfig.model_type, OuroConfig, exist_ok=True)
    AutoModel.register(OuroConfig, OuroModel, exist_ok=True)
    AutoModelForCausalLM.register(OuroConfig, OuroForCausalLM, exist_ok=True)
    AutoConfig.register(AttractorConfig.model_type, AttractorConfig, exist_ok=True)
    AutoModel.register(AttractorConfig, AttractorModel, exist_ok=True)
    AutoModelForCausalLM.register(AttractorConfig, AttractorForCausalLM, exist_ok=True)
    AutoConfig.register(EqRConfig.model_type, EqRConfig, exist_ok=True)
    AutoModel.register(EqRConfig, EqRModel, exist_ok=True)
    AutoModelForTokenClassification.register(EqRConfig, EqRForPuzzleSolving, exist_ok=True)
    AutoConfig.register(PHDEQConfig.model_type, PHDEQConfig, exist_ok=True)
    AutoModel.register(PHDEQConfig, PHDEQModel, exist_ok=True)
    AutoModelForSequenceClassification.register(PHDEQConfig, PHDEQForSequenceClassification, exist_ok=True)


_register()

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
    "__version__",
]
