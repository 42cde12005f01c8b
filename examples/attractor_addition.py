"""Train a small Attractor LM on multi-digit addition with AttractorTrainer, on one or many processes.

Every AttractorTrainingArguments / TrainingArguments field is a command-line flag (HfArgumentParser), e.g.

    python examples/attractor_addition.py --output_dir out --max_steps 300 --use_cpu
    python examples/attractor_addition.py --output_dir out --max_steps 300 --use_cpu --jacobian_weight 0.1
    torchrun --nproc_per_node 2 examples/attractor_addition.py --output_dir out --max_steps 300 --use_cpu --ddp_backend gloo
    accelerate launch --num_processes 8 examples/attractor_addition.py --output_dir out --max_steps 3000 --bf16

The model (with remote code) and tokenizer are written to --output_dir; the exact-match accuracy with the
backbone alone (budget 0) and with the solver is printed.
"""

import copy
from dataclasses import dataclass, field

from transformers import DataCollatorForSeq2Seq, HfArgumentParser

from equilibria import AttractorForCausalLM
from equilibria.families import small_attractor_config
from equilibria.tasks import (
    addition_tokenizer,
    build_addition_dataset,
    exact_match,
    tokenize_for_training,
)
from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments, finish_distributed


@dataclass
class ModelArguments:
    digits: int = field(default=2, metadata={"help": "operand digits"})
    train_size: int = field(default=6000)
    test_size: int = field(default=200)
    hidden_size: int = field(default=128)
    num_backbone_layers: int = field(default=2)
    num_attractor_layers: int = field(default=2)
    num_loops: int = field(default=30, metadata={"help": "the solver's iteration budget"})
    solver: str = field(default="anderson", metadata={"help": "anderson or picard"})
    solver_tol: float = field(default=1e-4)
    injection: str = field(default="add", metadata={"help": "add or concat"})


def main():
    model_args, args = HfArgumentParser((ModelArguments, AttractorTrainingArguments)).parse_args_into_dataclasses()
    data = build_addition_dataset(model_args.digits, model_args.train_size, model_args.test_size, seed=args.seed)
    tokenizer = addition_tokenizer()
    collate_tokenizer = copy.deepcopy(tokenizer)
    collate_tokenizer.padding_side = "right"
    config = small_attractor_config(
        tokenizer,
        hidden_size=model_args.hidden_size,
        num_backbone_layers=model_args.num_backbone_layers,
        num_attractor_layers=model_args.num_attractor_layers,
        num_loops=model_args.num_loops,
        solver=model_args.solver,
        solver_tol=model_args.solver_tol,
        injection=model_args.injection,
    )
    trainer = AttractorTrainer(
        model=AttractorForCausalLM(config),
        args=args,
        train_dataset=tokenize_for_training(data["train"], tokenizer),
        data_collator=DataCollatorForSeq2Seq(collate_tokenizer, label_pad_token_id=-100),
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model()
    if trainer.is_world_process_zero():
        model = trainer.model
        for budget in (0, model_args.num_loops):
            accuracy = exact_match(model, tokenizer, data["test"], num_loops=budget)
            print(f"budget {budget:>3}: exact match {accuracy:.1%}")
    finish_distributed()  # under torchrun: every rank leaves the process group together


if __name__ == "__main__":
    main()
