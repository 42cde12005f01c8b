"""How a language model's answers on rows of text are scored at a loop count: exact match of its greedy answer to a
prompt (the addition task, prompt/completion rows) and next-token accuracy on the labelled tokens (text rows). The
causal-LM evaluator of :mod:`equilibria.scaling` runs them at each loop count."""

from __future__ import annotations

import torch
from datasets import Dataset

from .text_data import training_collator


@torch.no_grad()
def greedy_answers(
    model,
    tokenizer,
    dataset: Dataset,
    num_loops: int,
    batch_size: int = 64,
    max_new_tokens: int | None = None,
    **generate_kwargs,
) -> list[str]:
    """The greedy continuation (up to eos, at most ``max_new_tokens``: by default one more than the longest answer
    has characters) of each row's ``prompt`` at ``num_loops``, decoded; ``generate_kwargs`` go to ``generate``
    (``recurrent_kv_cache_mode=...``)."""
    model.eval()
    answers = []
    max_answer = max_new_tokens or max(len(a) for a in dataset["answer"]) + 1
    tokenizer.padding_side = "left"
    for start in range(0, len(dataset), batch_size):
        batch = dataset[start : start + batch_size]
        enc = tokenizer(batch["prompt"], return_tensors="pt", padding=True)  # as in training
        out = model.generate(
            **enc.to(model.device),
            max_new_tokens=max_answer,
            do_sample=False,
            num_loops=num_loops,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **generate_kwargs,
        )
        answers += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return answers


def exact_match(model, tokenizer, dataset: Dataset, num_loops: int, batch_size: int = 64, **generate_kwargs) -> float:
    """Fraction of problems whose greedy continuation (up to eos, :func:`greedy_answers`) equals the answer, at
    ``num_loops``."""
    answers = greedy_answers(model, tokenizer, dataset, num_loops, batch_size, **generate_kwargs)
    return sum(exact_match_reward(answers, dataset["answer"])) / len(dataset)


def evaluate_loop_scaling(
    model, tokenizer, dataset: Dataset, loops=(1, 2, 4, 8, 16, 32), batch_size: int = 64, **generate_kwargs
) -> dict[int, float]:
    """Exact-match accuracy of greedy generation at each loop count: ``{num_loops: accuracy}``."""
    return {
        n: exact_match(model, tokenizer, dataset, num_loops=n, batch_size=batch_size, **generate_kwargs) for n in loops
    }


@torch.no_grad()
def token_accuracy(model, encoded: Dataset, num_loops: int, tokenizer, batch_size: int = 32) -> float:
    """The share of labelled tokens (``labels != -100``) that the model predicts as its top choice, reading the
    right tokens before them (teacher forcing), at ``num_loops``."""
    model.eval()
    collate = training_collator(tokenizer)
    right = total = 0
    for start in range(0, len(encoded), batch_size):
        batch = collate(list(encoded.select(range(start, min(start + batch_size, len(encoded))))))
        labels = batch.pop("labels")
        logits = model(**batch.to(model.device), num_loops=num_loops).logits
        predicted, target = logits[:, :-1].argmax(-1).cpu(), labels[:, 1:]
        scored = target != -100
        right += int((predicted[scored] == target[scored]).sum())
        total += int(scored.sum())
    return right / max(total, 1)


def exact_match_reward(completions: list, answer: list[str], **columns) -> list[float]:
    """A reward for reinforcement learning (TRL's reward signature: ``completions`` and the rows' columns as
    keywords): 1.0 where a completion, stripped, is the row's ``answer``, stripped (as :func:`exact_match` scores),
    else 0.0. A conversational completion (a list of messages) is scored on its last message's content."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(t.strip() == a.strip()) for t, a in zip(texts, answer)]


__all__ = ["evaluate_loop_scaling", "exact_match", "exact_match_reward", "greedy_answers", "token_accuracy"]
