"""vLLM's plugin entry point for equilibria (``[project.entry-points."vllm.general_plugins"]`` in pyproject.toml).

vLLM calls :func:`register` in each of its processes (the front end, the engine core, every worker) before it reads
a model's config. It registers the package's configs with transformers' ``AutoConfig`` (``import equilibria``: a
folder's ``model_type: ouro`` then loads without remote code) and the package's Ouro
(:class:`equilibria.serving.vllm_ouro.OuroForCausalLM`) with vLLM's model registry under the architecture name
Ouro folders carry, ``OuroForCausalLM``, which vLLM 0.27 and later list as removed. The model's module, which imports
vLLM, is imported by vLLM when it needs it.

What a folder asks that the model cannot serve is refused in one line when vLLM builds its config, in the process
that starts the engine (vLLM's per-architecture config hook, ``MODELS_CONFIG_MAP``), before any worker starts; so are
the folders of the package's other families, registered under their architecture names for that purpose. Such a
refusal that ends the process (``vllm serve``, a script that does not catch it) prints one line, not vLLM's
traceback (:func:`~equilibria.serving.vllm_ouro.print_refusals`, the process's ``sys.excepthook``). vLLM's own
HRM-text gets a check too (:mod:`~equilibria.serving.vllm_native`).
"""

from __future__ import annotations

import sys
from functools import partial

ARCHITECTURE = "OuroForCausalLM"
#: the package's other language models: refused in one line (vLLM would list every architecture it has)
REFUSED = ("AttractorForCausalLM",)


def register() -> None:
    """Register Ouro with transformers' Auto classes and vLLM's model registry (re-entrant: vLLM may call it more
    than once in a process)."""
    from vllm import ModelRegistry
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    import equilibria  # noqa: F401  (registers the package's configs, models and tokenizer with the Auto classes)

    from .vllm_ouro import ConfigCheck, OuroForCausalLM, print_refusals

    if getattr(sys.excepthook, "func", None) is not print_refusals:
        sys.excepthook = partial(print_refusals, previous=sys.excepthook)

    from .vllm_native import HrmTextCheck

    for architecture in (ARCHITECTURE, *REFUSED):
        ModelRegistry.register_model(architecture, OuroForCausalLM)
        MODELS_CONFIG_MAP[architecture] = ConfigCheck
    MODELS_CONFIG_MAP.setdefault("HrmTextForCausalLM", HrmTextCheck)  # vLLM's own HRM-text: what it cannot run
