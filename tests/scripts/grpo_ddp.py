"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: a few LoopGRPOTrainer steps on a tiny Ouro with loop
counts drawn per prompt and the RLTT objective with learned exit weights (their logits live outside the model, so
the trainer averages their gradient itself). Each rank writes its final parameters and logits, its log and the loop
counts of its rollouts to OUT/rank{R}.pt."""

from pathlib import Path

from conftest import char_tokenizer, tiny_ouro
from datasets import Dataset
from ddp_common import save_rank

from equilibria.trainers import LoopGRPOConfig, LoopGRPOTrainer


def digit_share(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def main(out: Path) -> None:
    prompts = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(4) for b in range(4)]})
    args = LoopGRPOConfig(
        output_dir=str(out), per_device_train_batch_size=8, num_generations=4, max_completion_length=3, max_steps=3,
        learning_rate=1e-3, beta=0.0, use_cpu=True, ddp_backend="gloo", report_to=[], logging_steps=1,
        save_strategy="no", disable_tqdm=True, seed=0, min_loops=1, max_loops=6, loop_log_std=0.8,
        loop_draws="per_prompt", objective="rltt", rltt_weights="learned",
    )  # fmt: skip
    trainer = LoopGRPOTrainer(
        model=tiny_ouro(seed=0), reward_funcs=digit_share, args=args, train_dataset=prompts,
        processing_class=char_tokenizer(),
    )  # fmt: skip
    counts, generate = [], trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda rows: (counts.append(trainer.row_loops(rows)), generate(rows))[1]
    trainer.train()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    logits = trainer.rltt_logits.detach().clone()
    save_rank(out, {"params": params, "logits": logits, "log": trainer.state.log_history, "counts": counts})
