"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: a few AttractorTrainer steps (implicit gradient, Jacobian penalty,
correction loss) on a tiny Attractor LM, then on a tiny Attractor puzzle model. Each rank writes both models' final
parameters to OUT/rank{R}.pt."""

import sys
from pathlib import Path

import torch
from datasets import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import tiny_attractor, tiny_attractor_puzzle  # noqa: E402
from ddp_common import save_rank

from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments  # noqa: E402


def data() -> Dataset:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (32, 10), generator=g)
    return Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})


def model():
    return tiny_attractor(seed=0, strength=3.0, solver_tol=1e-4, num_loops=20)


def puzzle_data() -> Dataset:
    g = torch.Generator().manual_seed(1)
    inputs, labels = torch.randint(0, 11, (32, 16), generator=g), torch.randint(1, 11, (32, 16), generator=g)
    return Dataset.from_dict({"inputs": inputs.tolist(), "labels": labels.tolist()})


def puzzle_model():
    return tiny_attractor_puzzle(seed=0, strength=2.0, solver_tol=1e-4, num_loops=20)


def arguments(out: Path, **overrides) -> AttractorTrainingArguments:
    kwargs = dict(
        output_dir=str(out),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        save_strategy="no",
        logging_steps=2,
        gradient_mode="implicit",
        jacobian_weight=0.5,
        correction_weight=0.5,
        seed=0,
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    return AttractorTrainingArguments(**kwargs)


def main(out: Path) -> None:
    trainer = AttractorTrainer(model=model(), args=arguments(out), train_dataset=data())
    trainer.train()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    puzzles = AttractorTrainer(model=puzzle_model(), args=arguments(out / "puzzle"), train_dataset=puzzle_data())
    puzzles.train()
    puzzle_params = {n: p.detach().clone() for n, p in puzzles.model.named_parameters()}
    save_rank(out, {"params": params, "log": trainer.state.log_history, "puzzle_params": puzzle_params})
