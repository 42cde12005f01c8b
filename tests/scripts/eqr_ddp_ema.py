"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: `eqr_ddp.py`'s run with an EMA of the weights and a
checkpoint at its last step, counting the EMA's writes. Each rank writes its EMA, its parameters and its writes to
OUT/rank{R}.pt."""

from pathlib import Path

from ddp_common import save_rank
from eqr_ddp import model

from equilibria.tasks import build_sudoku_dataset
from equilibria.trainers import EqRTrainer, EqRTrainingArguments


def main(out: Path) -> None:
    args = EqRTrainingArguments(
        output_dir=str(out), max_steps=4, per_device_train_batch_size=4, learning_rate=3e-3, report_to=[],
        use_cpu=True, ddp_backend="gloo", save_strategy="steps", save_steps=4, logging_steps=2, max_segments=2,
        seed=0, disable_tqdm=True, dataloader_drop_last=True, ema_decay=0.7,
    )  # fmt: skip
    data = build_sudoku_dataset(size=4, num_train=32, num_test=1, seed=0, split_by="board")["train"]
    trainer = EqRTrainer(model=model(), args=args, train_dataset=data)
    writes, save = [], trainer._ema.save
    trainer._ema.save = lambda folder: (writes.append(folder), save(folder))
    trainer.train()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    save_rank(out, {"ema": dict(trainer.ema_weights), "params": params, "writes": writes})
