"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: a few StarsTrainer steps with the JSRR penalty on a tiny Dory and a
tiny HRM-text (transformers' own classes, given `equilibria.looped` by the trainer; the penalty is computed inside
their looped forward). Each rank writes its final parameters to OUT/rank{R}.pt, for the test to compare."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import tiny_native  # noqa: E402
from ddp_common import save_rank  # noqa: E402
from stars_ddp import arguments, data  # noqa: E402

from equilibria.trainers import StarsTrainer  # noqa: E402

MODELS = ("dory", "hrm_text")


def main(out: Path) -> None:
    results = {}
    for model_type in MODELS:
        model = tiny_native(model_type, num_loops=2)
        trainer = StarsTrainer(model=model, args=arguments(out / model_type, max_loops=4), train_dataset=data())
        trainer.train()
        params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        results[model_type] = {"params": params, "log": trainer.state.log_history}
    save_rank(out, results)
