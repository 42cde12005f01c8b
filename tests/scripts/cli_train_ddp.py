"""Run under `torchrun --nproc_per_node 2`: `equilibria train` for a tiny PH-DEQ. Each rank writes its final
parameters to OUT/rank{R}.pt; rank 0 also writes the Hub-ready folder OUT/model."""

import sys
from pathlib import Path

from ddp_common import save_rank_and_finish

from equilibria.train import train_and_evaluate


def main(out: Path) -> None:
    argv = [
        "--family",
        "phdeq",
        "--output_dir",
        str(out / "model"),
        "--max_steps",
        "4",
        "--train_size",
        "64",
        "--test_size",
        "16",
        "--nodes",
        "6",
        "--hidden_size",
        "8",
        "--num_loops",
        "20",
        "--eval_loops",
        "0,20",
        "--use_cpu",
        "--ddp_backend",
        "gloo",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--per_device_train_batch_size",
        "8",
        "--disable_tqdm",
        "true",
    ]
    trainer, _ = train_and_evaluate(argv)
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    save_rank_and_finish(out, {"params": params})


if __name__ == "__main__":
    main(Path(sys.argv[1]))
