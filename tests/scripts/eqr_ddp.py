"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: a few EqRTrainer segments on tiny 4x4 Sudoku. Each rank writes its
final parameters to OUT/rank{R}.pt."""

from pathlib import Path

import torch
from ddp_common import save_rank

from equilibria import EqRConfig, EqRForPuzzleSolving
from equilibria.tasks import build_sudoku_dataset
from equilibria.trainers import EqRTrainer, EqRTrainingArguments


def model():
    torch.manual_seed(0)
    config = EqRConfig(max_seq_len=16, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_loops=2)
    return EqRForPuzzleSolving(config)


def main(out: Path) -> None:
    data = build_sudoku_dataset(size=4, num_train=32, num_test=1, seed=0, split_by="board")["train"]
    args = EqRTrainingArguments(
        output_dir=str(out),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        save_strategy="no",
        logging_steps=2,
        max_segments=2,
        seed=0,
        disable_tqdm=True,
        dataloader_drop_last=True,
    )
    trainer = EqRTrainer(model=model(), args=args, train_dataset=data)
    trainer.train()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    save_rank(out, {"params": params, "log": trainer.state.log_history})
