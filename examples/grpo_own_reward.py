"""Reinforcement learning of a looped LM with a reward of your own: LoopGRPOTrainer (TRL's GRPO, every forward of
a step at that step's loop count), on a saved model folder. Needs the rl extra: pip install "equilibria[rl]".

The reward here is partial credit for a sum: the share of the answer's digits in their right places, and a small
penalty per character of a too-long completion; any function with TRL's reward signature works (completions and the
dataset's columns as keywords, one float per completion). Every LoopGRPOConfig / GRPOConfig field is a flag:

    equilibria train --family ouro --task addition --output_dir base --max_steps 1100 --use_cpu   # a model to start from
    python examples/grpo_own_reward.py --model base --output_dir rl --max_steps 50 --use_cpu
    python examples/grpo_own_reward.py --model base --output_dir rl --max_steps 50 --use_cpu --objective rltt
    python examples/grpo_own_reward.py --model base --output_dir rl --max_steps 50 --use_cpu --min_loops 2 --max_loops 8
    torchrun --nproc_per_node 2 examples/grpo_own_reward.py --model base --output_dir rl --max_steps 50 --use_cpu

The prompts are generated 2-digit sums the model was not trained on (another seed's, minus its training questions);
the exact-match accuracy on held-out sums before and after, at the model's loop count, is printed.
"""

from dataclasses import dataclass, field

from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser

from equilibria.tasks import build_addition_dataset, exact_match, fingerprints, load_training_record
from equilibria.trainers import LoopGRPOConfig, LoopGRPOTrainer, finish_distributed


@dataclass
class ExampleArguments:
    model: str = field(metadata={"help": "a saved Ouro folder trained on addition (equilibria train --task addition)"})
    prompts: int = field(default=2000, metadata={"help": "training prompts"})
    test_size: int = field(default=200, metadata={"help": "held-out sums for the accuracy printed"})


def digits_in_place(completions, answer, **columns):
    """Partial credit: the share of the answer's digits in their places, minus 0.1 per extra character."""
    rewards = []
    for completion, target in zip(completions, answer):
        text = completion.strip()
        right = sum(a == b for a, b in zip(text, target)) / len(target)
        rewards.append(right - 0.1 * max(0, len(text) - len(target)))
    return rewards


def held_out(model_folder: str, prompts: int, test_size: int, seed: int = 1):
    """Fresh sums (seed ``seed``) without any question the model was trained on: ``(train, test)``."""
    data = build_addition_dataset(2, prompts, test_size, seed=seed)
    record = load_training_record(model_folder) or {}
    seen = set(record.get("fingerprints", []))

    def unseen(split):
        return split.select([i for i, key in enumerate(fingerprints("addition", split)) if key not in seen])

    return unseen(data["train"]), unseen(data["test"])


def main():
    example, args = HfArgumentParser((ExampleArguments, LoopGRPOConfig)).parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained(example.model, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(example.model)
    train, test = held_out(example.model, example.prompts, example.test_size)
    loops = model.config.total_ut_steps
    before = exact_match(model.eval(), tokenizer, test, loops)
    trainer = LoopGRPOTrainer(
        model=model, reward_funcs=digits_in_place, args=args, train_dataset=train, processing_class=tokenizer
    )
    trainer.train()
    trainer.save_model()
    if trainer.is_world_process_zero():
        after = exact_match(trainer.accelerator.unwrap_model(trainer.model).eval(), tokenizer, test, loops)
        print(f"exact match on {len(test)} held-out sums at {loops} loops: {before:.1%} before, {after:.1%} after")
    finish_distributed()


if __name__ == "__main__":
    main()
