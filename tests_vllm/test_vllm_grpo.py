"""LoopGRPOTrainer's rollouts on vLLM (``use_vllm=True``, ``vllm_mode="colocate"``): TRL's engine runs the package's
plugin, and every request carries its rollout's loop count.

The check is TRL's own: with ``vllm_importance_sampling_correction`` it logs how far vLLM's log-probability of each
sampled token is from the trainer's, which scores the rollout at its count
(``sampling/sampling_logp_difference/mean``). vLLM runs the float32 folder in bfloat16 (TRL passes no dtype), so the
yardstick is the gap of a run at the folder's own count (4 loops): counts drawn per prompt from 2-6 stay near it,
step after step (so the trained weights reach vLLM too), while the same run with the count kept off the requests
(vLLM at the folder's 4) is far off. Run by ``./run vllm``.
"""

from __future__ import annotations

import contextlib
import gc
import os

import pytest
import torch

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: the folder here is tiny

vllm = pytest.importorskip("vllm")
pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from equilibria import OuroForCausalLM  # noqa: E402
from equilibria.families import small_ouro_config  # noqa: E402
from equilibria.tasks import addition_tokenizer  # noqa: E402
from equilibria.trainers import LoopGRPOConfig, LoopGRPOTrainer  # noqa: E402

PROMPTS = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(4) for b in range(4)]})


def digit_share(completions, **columns) -> list[float]:
    """A reward that varies between rollouts of a random model: the share of a completion's characters that are
    digits."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def save_ouro(folder, **overrides) -> str:
    """A random-weight Ouro at 4 loops (head size 32, which vLLM's CPU attention runs) with the addition tokenizer;
    the initialiser is wide so that the loop count changes the next-token distribution."""
    tokenizer = addition_tokenizer()
    config = small_ouro_config(len(tokenizer), hidden_size=128, num_hidden_layers=2, num_attention_heads=4)
    config.total_ut_steps, config.initializer_range = 4, 0.2
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    OuroForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def train(folder: str, output, **overrides) -> LoopGRPOTrainer:
    args = dict(
        output_dir=str(output), use_vllm=True, vllm_mode="colocate", min_loops=2, max_loops=6,
        loop_draws="per_prompt", per_device_train_batch_size=8, num_generations=4, max_completion_length=4,
        max_steps=3, learning_rate=5e-3, beta=0.0, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
        seed=0,
    )  # fmt: skip
    trainer = LoopGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
        reward_funcs=digit_share,
        args=LoopGRPOConfig(**{**args, **overrides}),
        train_dataset=PROMPTS,
    )
    trainer.train()
    return trainer


def logged(trainer, key: str) -> list[float]:
    return [h[key] for h in trainer.state.log_history if key in h]


def logp_gap(folder: str, output, **overrides) -> tuple[float, LoopGRPOTrainer]:
    """The run's largest per-step mean gap between vLLM's and the trainer's log-probabilities, and the trainer
    (its engine shut down)."""
    trainer = train(folder, output, **overrides)
    gaps = logged(trainer, "sampling/sampling_logp_difference/mean")
    trainer.vllm_generation.llm.llm_engine.engine_core.shutdown()
    gc.collect()
    assert len(gaps) == 3, gaps
    return max(gaps), trainer


def test_rollouts_on_vllm_run_at_their_counts_and_with_the_trained_weights(tmp_path, monkeypatch):
    """vLLM runs a float32 folder in bfloat16 (TRL passes no dtype), so its log-probs are never the trainer's to the
    last digit: the yardstick is the gap at the folder's own count (no count can be wrong there)."""
    folder = save_ouro(tmp_path / "ouro", max_num_loops=6)
    floor, _ = logp_gap(folder, tmp_path / "fixed", min_loops=4, max_loops=4)
    drawn, trainer = logp_gap(folder, tmp_path / "drawn")
    counts = logged(trainer, "num_loops")
    start = OuroForCausalLM.from_pretrained(folder).state_dict()
    moved = max((p - start[n]).abs().max().item() for n, p in trainer.model.state_dict().items() if n in start)
    assert set(counts) != {4.0}, counts  # rollouts at counts other than the folder's 4 were scored
    assert moved > 1e-3  # the weights trained, so steps 2 and 3 were generated with the synced ones
    # the control: the same run with the requests' count left off runs vLLM at the folder's 4 loops
    monkeypatch.setattr(LoopGRPOTrainer, "vllm_requests_at", lambda self, n: contextlib.nullcontext())
    off, _ = logp_gap(folder, tmp_path / "off")
    print(f"largest mean log-prob gap: fixed 4 loops {floor:.4f}, drawn 2-6 {drawn:.4f}, count left off {off:.4f}")
    assert drawn < 2 * floor + 0.01 and off > 5 * drawn, (floor, drawn, off)


def test_what_vllm_cannot_run_at_its_counts_is_refused_in_one_line(tmp_path):
    from equilibria import AttractorForCausalLM
    from equilibria.families import small_attractor_config

    AttractorForCausalLM(small_attractor_config(64, hidden_size=64)).save_pretrained(tmp_path / "attractor")
    with pytest.raises(
        ValueError,
        match=r"use_vllm=True \(rollouts at each one's count through the package's vLLM plugin\) needs vllm .*the attractor_lm family lacks",
    ):
        train(str(tmp_path / "attractor"), tmp_path / "run", min_loops=None, max_loops=None)
    args = LoopGRPOConfig(output_dir=str(tmp_path / "run"), use_vllm=True, use_cpu=True, report_to=[])
    unsaved = OuroForCausalLM(small_ouro_config(64, hidden_size=128, num_attention_heads=4))
    with pytest.raises(ValueError, match="use_vllm=True starts vLLM from the folder the model was loaded from"):
        LoopGRPOTrainer(model=unsaved, reward_funcs=digit_share, args=args, train_dataset=PROMPTS)


def test_counts_above_the_folders_max_num_loops_are_refused_in_one_line(tmp_path):
    folder = save_ouro(tmp_path / "ouro")
    with pytest.raises(ValueError, match=r"max_loops=6: the folder's vLLM engine takes counts up to .*=4"):
        train(folder, tmp_path / "run")
    gate = save_ouro(tmp_path / "gate", max_num_loops=6, early_exit_threshold=0.5)
    with pytest.raises(ValueError, match=r"takes none \(not taken with the exit gate on"):
        train(gate, tmp_path / "run")
