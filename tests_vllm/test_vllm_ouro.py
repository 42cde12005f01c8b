"""Ouro served by vLLM through the package's plugin: greedy tokens equal to the package's ``generate``.

Run by ``./run vllm`` in the serving environment ``.venv-vllm`` (vllm-cpu, its torch, this package), not by
``./run test``. Each engine is started with nothing but the folder and the CPU settings a test needs (float32,
eager); the plugin reaches vLLM through the package's entry point.
"""

from __future__ import annotations

import gc
import os

import pytest
import torch

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: the folders here are tiny

vllm = pytest.importorskip("vllm")

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

from equilibria import AttractorForCausalLM, OuroForCausalLM  # noqa: E402
from equilibria.families import small_attractor_config, small_ouro_config  # noqa: E402

VOCAB = 64
NEW_TOKENS = 12
# different lengths; the second starts with the first (a shared prefix), the last is one token
PROMPTS = [
    [5, 9, 13, 2, 40, 41, 7],
    [5, 9, 13, 2, 40, 41, 7, 30, 31, 32, 11, 12, 60],
    [17, 18],
    [3, 33, 21, 50, 8, 8, 8, 44, 1, 6, 27, 14, 15, 16, 19, 22, 23, 24, 25],
    [63],
]


def save_random_ouro(folder, seed: int = 0, **overrides) -> str:
    """A random-weight Ouro (head size 32, which vLLM's CPU attention runs) saved with ``save_pretrained``. The
    initialiser is wider than a trained model's start so that greedy choices are not near-ties."""
    config = small_ouro_config(VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, total_ut_steps=4)
    config.initializer_range = 0.2
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    OuroForCausalLM(config).save_pretrained(folder)
    return str(folder)


def package_tokens(folder: str, prompts=PROMPTS, new_tokens: int = NEW_TOKENS, **loop_arguments) -> list[list[int]]:
    """The package's greedy ``generate`` of each prompt on its own (float32)."""
    model = OuroForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        generated = model.generate(
            ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, **loop_arguments
        )
        out.append(generated[0, len(prompt) :].tolist())
    return out


def start(folder: str, **engine_arguments) -> LLM:
    """vLLM's engine on ``folder``: float32, eager, token ids in and out (the random folders have no tokenizer)."""
    arguments = dict(dtype="float32", enforce_eager=True, skip_tokenizer_init=True, max_model_len=64, seed=0)
    return LLM(folder, **{**arguments, **engine_arguments})


def stop(llm: LLM) -> None:
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def greedy(new_tokens: int = NEW_TOKENS, **extra) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, detokenize=False, **extra)


def served_tokens(llm: LLM, prompts=PROMPTS, params=None) -> list[list[int]]:
    """Every prompt in one ``generate`` call: vLLM batches them (continuous batching, shared prefixes). ``params``:
    one ``SamplingParams`` for all, or one per prompt."""
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params or greedy(), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def per_request(counts) -> list[SamplingParams]:
    """Greedy sampling with ``extra_args={"num_loops": k}`` for each ``k`` (None: no count asked)."""
    return [greedy(extra_args=None if k is None else {"num_loops": k}) for k in counts]


def staggered_tokens(llm: LLM, prompts=PROMPTS, params=None) -> list[list[int]]:
    """Requests that arrive while others decode: one prompt added every two engine steps."""
    engine, pending, done = llm.llm_engine, list(enumerate(prompts)), {}
    for step in range(4 * len(prompts) * NEW_TOKENS):  # a bound, so that a lost request fails instead of hanging
        if pending and step % 2 == 0:
            index, prompt = pending.pop(0)
            request = params[index] if params else greedy()
            engine.add_request(f"staggered-{index}", TokensPrompt(prompt_token_ids=prompt), request)
        for output in engine.step():
            if output.finished:
                done[output.request_id] = list(output.outputs[0].token_ids)
        if not pending and not engine.has_unfinished_requests():
            break
    return [done.get(f"staggered-{i}") for i in range(len(prompts))]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return save_random_ouro(tmp_path_factory.mktemp("ouro"))


def test_saved_count_batched_and_staggered(folder):
    """At the folder's count (4 loops): one batch of prompts of different lengths, and requests arriving while
    others decode, each equal to the package's greedy tokens."""
    expected = package_tokens(folder)
    llm = start(folder)
    try:
        assert served_tokens(llm) == expected
        assert staggered_tokens(llm) == expected
    finally:
        stop(llm)


def test_count_through_hf_overrides(folder):
    """``hf_overrides={"total_ut_steps": 2}`` serves the tokens of ``generate(num_loops=2)``, which differ from the
    saved count's."""
    expected = package_tokens(folder, num_loops=2)
    assert expected != package_tokens(folder)
    llm = start(folder, hf_overrides={"total_ut_steps": 2})
    try:
        assert served_tokens(llm) == expected
    finally:
        stop(llm)


@pytest.mark.parametrize(
    ("overrides", "loop_arguments"),
    [
        ({"early_exit_threshold": 0.6}, {"exit_threshold": 0.6}),
        (
            {"early_exit_threshold": 0.6, "exit_readout": "reference"},
            {"exit_threshold": 0.6, "exit_readout": "reference"},
        ),
        ({"recurrent_kv_cache_mode": "last_loop"}, {"recurrent_kv_cache_mode": "last_loop"}),
    ],
    ids=["early-exit-frozen", "early-exit-reference", "last-loop-cache"],
)
def test_server_options(folder, overrides, loop_arguments):
    """The exit gate (``early_exit_threshold``, both readouts) and the ``last_loop`` cache layout, set per server with
    ``hf_overrides``, serve the tokens of ``generate`` with the same arguments, batched and staggered."""
    expected = package_tokens(folder, **loop_arguments)
    llm = start(folder, hf_overrides=overrides)
    try:
        assert served_tokens(llm) == expected
        assert staggered_tokens(llm) == expected
    finally:
        stop(llm)


@pytest.mark.parametrize(
    "overrides",
    [
        {"norm_placement": "pre", "num_key_value_heads": 2, "tie_word_embeddings": True},
        {"norm_placement": "post"},
    ],
    ids=["pre-norm-gqa-tied", "post-norm"],
)
def test_saved_options(tmp_path, overrides):
    """Folders saved with the package's options beyond the published model (norm placement, grouped key/value heads,
    tied embeddings) serve the package's tokens."""
    folder = save_random_ouro(tmp_path / "ouro", seed=1, **overrides)
    expected = package_tokens(folder)
    llm = start(folder)
    try:
        assert served_tokens(llm) == expected
    finally:
        stop(llm)


def test_refusals_in_one_line(tmp_path):
    """A head size vLLM's CPU attention lacks, sliding-window attention, and a folder of another family are refused
    with one line naming what, before any worker starts."""
    narrow = save_random_ouro(tmp_path / "narrow", hidden_size=96, head_dim=24)
    with pytest.raises(ValueError, match=r"head sizes \[32, .*head_dim is 24"):
        start(narrow)
    sliding = save_random_ouro(tmp_path / "sliding", use_sliding_window=True, sliding_window=16)
    with pytest.raises(ValueError, match=r"does not serve sliding-window attention \(config use_sliding_window"):
        start(sliding)
    torch.manual_seed(0)
    AttractorForCausalLM(small_attractor_config(VOCAB)).save_pretrained(tmp_path / "attractor")
    with pytest.raises(ValueError, match=r"serves Ouro folders only .*'attractor_lm' \(AttractorForCausalLM\)"):
        start(str(tmp_path / "attractor"))


COUNTS = [1, 2, 3, 4, None]  # one per prompt; None: the server's count


def expected_per_request(folder: str, counts, default: int) -> list[list[int]]:
    return [package_tokens(folder, [p], num_loops=k or default)[0] for p, k in zip(PROMPTS, counts, strict=True)]


def test_loop_count_per_request(folder):
    """``SamplingParams(extra_args={"num_loops": k})``: requests of different counts in one batch (and arriving while
    others decode) each get the tokens of ``generate(num_loops=k)``; with prefix caching (vLLM's default) every
    forward runs the server's most loops. A count above it, or not an integer, is refused when the request arrives."""
    expected = expected_per_request(folder, COUNTS, 4)
    assert len({tuple(map(tuple, package_tokens(folder, num_loops=k))) for k in (1, 2, 3, 4)}) == 4
    llm = start(folder)
    try:
        assert served_tokens(llm, params=per_request(COUNTS)) == expected
        assert staggered_tokens(llm, params=per_request(COUNTS)) == expected
        for bad in (5, 0, "2"):
            with pytest.raises(VLLMValidationError, match=r"num_loops must be an integer from 1 to 4 .*max_num_loops"):
                served_tokens(llm, params=per_request([bad] * len(PROMPTS)))
    finally:
        stop(llm)


def test_loop_count_per_request_beyond_the_folder(folder):
    """``hf_overrides={"max_num_loops": 6}`` admits counts up to 6; without prefix caching each forward runs the most
    its requests ask for."""
    counts = [6, 1, 5, None, 2]
    expected = expected_per_request(folder, counts, 4)
    llm = start(folder, hf_overrides={"max_num_loops": 6}, enable_prefix_caching=False)
    try:
        assert served_tokens(llm, params=per_request(counts)) == expected
    finally:
        stop(llm)


def save_random_hrm_text(folder, **overrides) -> str:
    """transformers' HRM-text as the package makes it (its small config: head size 32, 4 H-cycles of 2 L-cycles,
    ``prefix_lm=False``), random weights, saved with ``save_pretrained``."""
    import transformers

    from equilibria.families import FAMILIES

    config = FAMILIES["hrm_text"].make_config({"vocab_size": VOCAB, "pad_token_id": 0}, 128, 2, 4, 4)
    config.initializer_range = 0.2
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    transformers.HrmTextForCausalLM(config).save_pretrained(folder)
    return str(folder)


def test_hrm_text_on_vllms_own_model(tmp_path):
    """vLLM serves HRM-text with its own code, which attends over the whole prompt in both directions: the package's
    HRM-text (causal, ``prefix_lm=False``) is refused in one line; run as a prefix LM anyway
    (``hf_overrides={"prefix_lm": True}``), its one-token prompts, where the two attentions agree, get the greedy
    tokens of transformers' ``generate`` at the folder's 4 H-cycles (the cycles, the embedding scale and the initial
    L state run alike)."""
    import transformers

    folder = save_random_hrm_text(tmp_path / "hrm_text")
    with pytest.raises(ValueError, match=r"HRM-text folder attends causally \(prefix_lm=False\)"):
        start(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = [[63], [5], [17], [40]]
    expected = [
        model.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, 1:].tolist() for p in prompts
    ]
    llm = start(folder, hf_overrides={"prefix_lm": True})
    try:
        assert served_tokens(llm, prompts) == expected
    finally:
        stop(llm)
