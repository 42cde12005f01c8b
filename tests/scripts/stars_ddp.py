"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: a few StarsTrainer steps with the JSRR penalty on a tiny Ouro model.
Each rank writes its final parameters to OUT/rank{R}.pt, for the test to compare."""

import functools
import sys
from pathlib import Path

from datasets import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import ragged_lm_rows, tiny_ouro  # noqa: E402
from ddp_common import save_rank

from equilibria.trainers import StarsTrainer, StarsTrainingArguments  # noqa: E402


def data() -> Dataset:
    """Ragged rows (padded, part of the labels -100): the two processes' halves of a batch hold different numbers of
    labelled tokens, so averaging the loss per process instead of over the whole batch's tokens shows."""
    return Dataset.from_dict(ragged_lm_rows(n=32))


def arguments(out: Path, **overrides) -> StarsTrainingArguments:
    kwargs = dict(
        output_dir=str(out),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        optim="sgd",  # neither Adam's normalisation nor gradient clipping hides a wrongly scaled gradient
        max_grad_norm=0.0,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        ddp_find_unused_parameters=False,  # plain DDP: every trainable parameter must get a gradient
        save_strategy="no",
        logging_steps=2,
        min_loops=1,
        max_loops=5,
        jsrr_weight=0.3,
        seed=0,
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    return StarsTrainingArguments(**kwargs)


def main(out: Path) -> None:
    results = {}
    runs = {
        "jsrr": {},
        "lm_only": {"jsrr_weight": 0.0},
        # the reference code's per-forward draws: keyed by (seed, step, micro-batch), the same on every rank
        "per_micro_batch": {"loop_draws": "per_micro_batch", "gradient_accumulation_steps": 2, "max_loops": 8},
    }
    for name, overrides in runs.items():
        model, counts, loops = tiny_ouro(seed=0), [], []  # per micro-batch of this rank: labelled tokens, loops
        original = model.forward

        @functools.wraps(original)
        def counting_forward(*args, _original=original, _counts=counts, _loops=loops, **kwargs):
            _counts.append(int((kwargs["labels"][:, 1:] != -100).sum()))
            _loops.append(int(kwargs["num_loops"]))
            return _original(*args, **kwargs)

        model.forward = counting_forward
        trainer = StarsTrainer(model=model, args=arguments(out / name, **overrides), train_dataset=data())
        trainer.train()
        params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        results[name] = {"params": params, "log": trainer.state.log_history, "counts": counts, "loops": loops}
    save_rank(out, {**results})
