"""Shared fixtures: tiny seeded Ouro models and a character tokenizer, all built locally (no Hub access)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import equilibria  # noqa: F401  (registers the Auto classes)
from equilibria import AttractorConfig, AttractorForCausalLM, OuroConfig, OuroForCausalLM

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: one thread each, for their subprocesses too
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(min(2, torch.get_num_threads()))

OURO_REFERENCE = Path(__file__).resolve().parent / "data" / "ouro-reference-tiny"  # see its README.md

CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 .,+=?!")


def tiny_ouro_config(**overrides) -> OuroConfig:
    kwargs = dict(
        vocab_size=len(CHARS) + 3,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        total_ut_steps=3,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    kwargs.update(overrides)
    return OuroConfig(**kwargs)


def tiny_ouro(seed: int = 0, **overrides) -> OuroForCausalLM:
    torch.manual_seed(seed)
    model = OuroForCausalLM(tiny_ouro_config(**overrides)).eval()
    # random init gives near-uniform logits; sharpen them so greedy decoding is not decided by rounding noise
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
        model.model.embed_tokens.weight.mul_(20.0)
    return model


def tiny_attractor_config(**overrides) -> AttractorConfig:
    kwargs = dict(
        vocab_size=len(CHARS) + 3,
        hidden_size=32,
        intermediate_size=64,
        num_backbone_layers=1,
        num_attractor_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        num_loops=60,
        solver_tol=1e-6,
        attractor_gate_init=1.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    kwargs.update(overrides)
    return AttractorConfig(**kwargs)


def tiny_attractor(seed: int = 0, strength: float = 10.0, **overrides) -> AttractorForCausalLM:
    """A tiny seeded Attractor LM whose attractor really iterates: the attractor layers' output weights are
    scaled by ``strength`` (random init alone makes T nearly constant, solved in one or two steps), and the
    logits are sharpened so greedy decoding is not decided by rounding noise."""
    torch.manual_seed(seed)
    model = AttractorForCausalLM(tiny_attractor_config(**overrides)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
        for layer in model.model.attractor.layers:
            for weight in (layer.self_attn.v_proj, layer.self_attn.o_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                weight.weight.mul_(strength)
    return model


def load_benchmark(name: str):
    """The module ``benchmarks/<name>.py`` (benchmarks are scripts, not a package)."""
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def run_two_processes(script_name: str, out_dir: Path) -> tuple[dict, dict]:
    """Run ``tests/scripts/<script_name>`` under ``torchrun --nproc_per_node 2`` (gloo on CPU) with ``out_dir`` as
    its argument, and return what ranks 0 and 1 saved in ``out_dir/rank{R}.pt``."""
    import socket
    import subprocess
    import sys

    script = Path(__file__).parent / "scripts" / script_name
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    cmd += ["--master_port", str(port), str(script), str(out_dir)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(out_dir / "rank0.pt"), torch.load(out_dir / "rank1.pt")


def char_tokenizer():
    """A real PreTrainedTokenizerFast over single characters (pad=0, bos=1, eos=2)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    vocab.update({c: i + 3 for i, c in enumerate(CHARS)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", padding_side="left"
    )


@pytest.fixture
def model() -> OuroForCausalLM:
    return tiny_ouro()


@pytest.fixture
def tokenizer():
    return char_tokenizer()
