"""Checks for the looped LMs vLLM serves with its own code, run where vLLM builds its config (its per-architecture
hook, ``MODELS_CONFIG_MAP``; the plugin registers them).

HRM-text (``HrmTextForCausalLM``, vLLM's ``model_executor/models/hrm_text.py``): vLLM 0.32 attends over every prompt
bidirectionally (its ``PrefillPrefixLMAttention``, whatever the config says), which is ``prefix_lm=True`` with the
whole prompt as the prefix. A folder with ``prefix_lm=False`` (causal everywhere, as the package's HRM-text configs
are trained) then gets other tokens for any prompt longer than one token, so it is refused in one line.
"""

from __future__ import annotations

from vllm.config import VllmConfig
from vllm.model_executor.models.config import VerifyAndUpdateConfig

from .vllm_ouro import NotServable


class HrmTextCheck(VerifyAndUpdateConfig):
    """Refuses an HRM-text folder whose attention is causal (``prefix_lm=False``), which vLLM would run as a prefix
    LM."""

    @staticmethod
    def verify_and_update_config(vllm_config: VllmConfig) -> None:
        config = vllm_config.model_config.hf_config
        if getattr(config, "prefix_lm", True) is False:
            raise NotServable(
                "this HRM-text folder attends causally (prefix_lm=False), but vLLM's HRM-text attends over the whole "
                "prompt in both directions, so its tokens would not be this model's: serve it with the package, or "
                'pass hf_overrides={"prefix_lm": true} to run it as a prefix LM anyway.'
            )
