"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: a few Trainer steps of a tiny PH-DEQ (learned initialiser, implicit
gradient, amortisation loss) on reachability questions. Each rank writes its final parameters to OUT/rank{R}.pt."""

from pathlib import Path

import torch
from ddp_common import save_rank
from transformers import Trainer, TrainingArguments

from equilibria import PHDEQConfig, PHDEQForSequenceClassification
from equilibria.tasks import build_reachability_dataset, reachability_input_size


def main(out: Path) -> None:
    data = build_reachability_dataset(64, 0, num_nodes=6, edge_prob=0.25, max_hops=3, seed=0)["train"]
    data = data.select_columns(["inputs", "labels"])
    torch.manual_seed(0)
    config = PHDEQConfig(input_size=reachability_input_size(6), hidden_size=8, intermediate_size=16, num_labels=2)
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=4,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=PHDEQForSequenceClassification(config), args=args, train_dataset=data)
    trainer.train()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    save_rank(out, {"params": params})
