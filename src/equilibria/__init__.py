"""equilibria: looped and equilibrium language/reasoning models for the Hugging Face ecosystem.

Importing the package registers every model family with transformers' Auto classes::

    import equilibria
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained("path/to/ouro-checkpoint")
    model.generate(input_ids, num_loops=8, max_new_tokens=32)

The families (one record each in :mod:`equilibria.families`, which names their model types): the Ouro looped LM,
the Attractor LM, the Equilibrium Reasoner (``AutoModelForTokenClassification``: one answer token per puzzle cell),
the port-Hamiltonian DEQ (``AutoModelForSequenceClassification``) and the looped LMs transformers ships.
"""

from importlib.metadata import PackageNotFoundError, version

from . import modeling
from .families import register_auto_classes
from .loops import looped
from .modeling import *  # noqa: F403  (the model classes, configs and outputs of every family)

try:
    __version__ = version("equilibria")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

register_auto_classes()

__all__ = [*modeling.__all__, "__version__", "looped"]
