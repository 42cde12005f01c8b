"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: `equilibria train` fine-tunes the Ouro checkpoint OUT/base on
OUT/rows.jsonl with LoRA, STARS loop sampling and the JSRR penalty, plain DDP (no unused-parameter search). Each
rank writes its merged weights to OUT/rank{R}.pt; rank 0 also writes the merged folder OUT/model."""

from pathlib import Path

from ddp_common import save_rank

from equilibria.train import train_and_evaluate


def prepare(out: Path) -> None:
    """Before the launch, in the test's process: the checkpoint and the rows."""
    from conftest import addition_rows, tiny_trained_ouro, write_jsonl

    tiny_trained_ouro(out / "base")
    write_jsonl(out / "rows.jsonl", addition_rows())


def main(out: Path) -> None:
    argv = ["--model_name_or_path", str(out / "base"), "--dataset_name", str(out / "rows.jsonl")]
    argv += ["--output_dir", str(out / "model"), "--use_peft", "--lora_r", "4", "--test_size", "4"]
    argv += ["--max_steps", "3", "--learning_rate", "1e-2", "--eval_loops", "2", "--per_device_train_batch_size", "4"]
    argv += ["--min_loops", "1", "--max_loops", "3", "--jsrr_weight", "0.1", "--jsrr_power_iters", "2"]
    argv += ["--use_cpu", "--ddp_backend", "gloo", "--ddp_find_unused_parameters", "false"]
    argv += ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true"]
    trainer, _ = train_and_evaluate(argv)
    model = trainer.model  # rank 0: already merged into the saved folder; the other ranks merge their own copy
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    save_rank(out, {"params": {k: v.detach().clone() for k, v in merged.state_dict().items()}})
