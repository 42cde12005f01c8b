"""Fine-tune a small Ouro model with STARS on multi-digit addition, on one or many processes.

Every StarsTrainingArguments / TrainingArguments field is a command-line flag (HfArgumentParser), e.g.

    python examples/stars_addition.py --output_dir out --max_steps 200 --use_cpu
    torchrun --nproc_per_node 2 examples/stars_addition.py --output_dir out --max_steps 200 --use_cpu --ddp_backend gloo
    accelerate launch --num_processes 8 examples/stars_addition.py --output_dir out --max_steps 2000 --bf16

The model, tokenizer and a loop-scaling table are written to --output_dir.
"""

import copy
from dataclasses import dataclass, field

from transformers import DataCollatorForSeq2Seq, HfArgumentParser

from equilibria import OuroForCausalLM
from equilibria.families import small_ouro_config
from equilibria.tasks import (
    addition_tokenizer,
    build_addition_dataset,
    evaluate_loop_scaling,
    tokenize_for_training,
)
from equilibria.trainers import StarsTrainer, StarsTrainingArguments, finish_distributed


@dataclass
class TaskArguments:
    digits: int = field(default=2, metadata={"help": "operand digits"})
    train_size: int | None = field(
        default=None,
        metadata={"help": "training problems (default: every distinct problem not held out, at most 20000)"},
    )
    test_size: int = field(default=200, metadata={"help": "held-out problems of the loop-scaling table"})
    reverse_answer: bool = field(default=True, metadata={"help": "sums least-significant digit first"})
    hidden_size: int = field(default=128)
    num_hidden_layers: int = field(default=2)
    eval_loops: str = field(default="1,2,4,8,16")
    exit_loss: str = field(
        default="final",
        metadata={
            "help": "OuroConfig.exit_loss: final (STARS reads the state after the sampled steps), "
            "expected_logits (the published Ouro code's) or expected (the Ouro paper's)"
        },
    )


def main():
    task, args = HfArgumentParser((TaskArguments, StarsTrainingArguments)).parse_args_into_dataclasses()
    train_size = task.train_size or min(20000, 10 ** (2 * task.digits) - task.test_size)  # 2 digits: 9800
    data = build_addition_dataset(
        task.digits, train_size, task.test_size, seed=args.seed, reverse_answer=task.reverse_answer
    )
    tokenizer = addition_tokenizer()
    collate_tokenizer = copy.deepcopy(tokenizer)
    collate_tokenizer.padding_side = "right"
    config = small_ouro_config(tokenizer, hidden_size=task.hidden_size, num_hidden_layers=task.num_hidden_layers)
    config.exit_loss = task.exit_loss
    config.validate_architecture()
    model = OuroForCausalLM(config)
    trainer = StarsTrainer(
        model=model,
        args=args,
        train_dataset=tokenize_for_training(data["train"], tokenizer),
        data_collator=DataCollatorForSeq2Seq(collate_tokenizer, label_pad_token_id=-100),
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model()
    if trainer.is_world_process_zero():
        loops = [int(x) for x in task.eval_loops.split(",")]
        accuracy = evaluate_loop_scaling(trainer.model, tokenizer, data["test"], loops=loops)
        for n, acc in accuracy.items():
            print(f"loops {n:>3}: exact match {acc:.1%}")
    finish_distributed()  # under torchrun: every rank leaves the process group together


if __name__ == "__main__":
    main()
