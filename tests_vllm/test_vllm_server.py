"""``vllm serve FOLDER`` as a process (the benchmark's :class:`bench_vllm_serving.Server`), queried over HTTP with
the ``openai`` client: the completions and chat APIs give the package's greedy tokens, a request's loop count
travels in ``extra_body``, and what the server cannot do is answered in one line.

Run by ``./run vllm`` in the serving environment ``.venv-vllm``, like ``test_vllm_ouro.py``.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_vllm_serving import Server  # noqa: E402  (the benchmark's server: one copy)
from test_vllm_ouro import package_tokens, save_random_ouro  # noqa: E402

from equilibria import AttractorForCausalLM  # noqa: E402
from equilibria.families import small_attractor_config  # noqa: E402
from equilibria.tasks.text_data import DEFAULT_CHAT_TEMPLATE  # noqa: E402
from equilibria.tasks.tokenization import char_tokenizer  # noqa: E402

NEW_TOKENS = 12
TEXTS = ["12+34=", "7+8=", "Loops compute, or copy their start?"]
CHAT = [{"role": "system", "content": "Add."}, {"role": "user", "content": "12+30"}]


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory) -> str:
    """A random-weight Ouro (head size 32) with a character tokenizer over printable ASCII and the ChatML template
    the package gives a tokenizer without one."""
    folder = tmp_path_factory.mktemp("served")
    tokenizer = char_tokenizer(string.printable)
    tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    save_random_ouro(
        folder,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return str(folder)


@pytest.fixture(scope="module")
def server(chat_folder, tmp_path_factory):
    """``vllm serve`` on the folder, with nothing but the CPU settings (float32, eager): yields an ``openai``
    client."""
    with Server(chat_folder, tmp_path_factory.mktemp("server") / "vllm.log", max_model_len=128) as running:
        yield running.client


def greedy_body(**extra) -> dict:
    return {"ignore_eos": True, "return_token_ids": True, **extra}


def test_completions_equal_the_package(server, chat_folder):
    """Text prompts in one request (vLLM batches them) get the package's greedy tokens of the same token ids, at the
    folder's count and, per request, at 2 loops (``extra_body={"vllm_xargs": {"num_loops": 2}}``)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_folder)
    ids = [tokenizer(text)["input_ids"] for text in TEXTS]
    for loops, body in ((None, greedy_body()), (2, greedy_body(vllm_xargs={"num_loops": 2}))):
        response = server.completions.create(
            model=chat_folder, prompt=TEXTS, max_tokens=NEW_TOKENS, temperature=0.0, extra_body=body
        )
        choices = sorted(response.choices, key=lambda c: c.index)
        assert [c.prompt_token_ids for c in choices] == ids
        expected = package_tokens(chat_folder, ids, NEW_TOKENS, **({"num_loops": loops} if loops else {}))
        assert [c.token_ids for c in choices] == expected
        assert [c.text for c in choices] == tokenizer.batch_decode(expected)


def test_chat_equals_the_package(server, chat_folder):
    """The chat API renders the folder's chat template and answers with the package's greedy tokens of it."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(chat_folder).apply_chat_template(CHAT, add_generation_prompt=True)
    ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    response = server.chat.completions.create(
        model=chat_folder, messages=CHAT, max_tokens=NEW_TOKENS, temperature=0.0, extra_body=greedy_body()
    )
    assert response.prompt_token_ids == ids
    assert response.choices[0].token_ids == package_tokens(chat_folder, [ids], NEW_TOKENS)[0]


@pytest.mark.parametrize("bad", [9, "2"])
def test_bad_loop_count_is_a_400_in_one_line(server, chat_folder, bad):
    with pytest.raises(openai.BadRequestError) as raised:
        server.completions.create(
            model=chat_folder,
            prompt="1+1=",
            max_tokens=2,
            temperature=0.0,
            extra_body=greedy_body(vllm_xargs={"num_loops": bad}),
        )
    assert raised.value.status_code == 400
    message = raised.value.body["message"] if isinstance(raised.value.body, dict) else str(raised.value)
    assert "num_loops must be an integer from 1 to 4" in message and f"got {bad!r}" in message
    assert "\n" not in message and "Traceback" not in message


def test_other_family_is_refused_in_one_line(tmp_path):
    """``vllm serve`` on an Attractor folder exits before any worker starts, its last line naming why."""
    torch.manual_seed(0)
    AttractorForCausalLM(small_attractor_config(64)).save_pretrained(tmp_path / "attractor")
    server = Server(str(tmp_path / "attractor"), tmp_path / "vllm.log")
    with pytest.raises(RuntimeError, match="vllm serve exited"), server:
        pass
    last = server.log.read_text().strip().splitlines()[-1]
    assert "serves Ouro folders only" in last and "'attractor_lm' (AttractorForCausalLM)" in last, last
