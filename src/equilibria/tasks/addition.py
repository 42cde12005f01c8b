"""Multi-digit addition, "1234+5678=" -> "6912", as ``datasets.Dataset`` splits (scored by exact match of the
greedy answer: :func:`~equilibria.tasks.text_scoring.exact_match`)."""

from __future__ import annotations

import random

from datasets import Dataset, DatasetDict
from transformers import PreTrainedTokenizerBase

from .tokenization import char_tokenizer

ADDITION_CHARS = "0123456789+="

# The STARS reference code's format (njuyxw/STARS, train_addition/): operands of exactly the given digits, the
# answer a space and then the sum least-significant digit first ("1234+5678=" -> " 2196")
STARS_ADDITION_FORMAT = {"reverse_answer": True, "exact_digits": True, "answer_prefix": " "}


def addition_tokenizer(padding_side: str = "left", with_space: bool = False) -> PreTrainedTokenizerBase:
    """The character tokenizer for addition problems (digits, '+', '='; a space too with ``with_space``, for the
    reference format's answers); ``padding_side`` "left" for generation, "right" for training batches."""
    return char_tokenizer(ADDITION_CHARS + (" " if with_space else ""), padding_side=padding_side)


def build_addition_dataset(
    num_digits: int = 2,
    num_train: int = 2000,
    num_test: int = 200,
    seed: int = 0,
    reverse_answer: bool = False,
    pad_operands: bool = False,
    exact_digits: bool = False,
    answer_prefix: str = "",
) -> DatasetDict:
    """Random ``a+b=`` problems with ``a`` and ``b`` of at most ``num_digits`` digits (uniform in
    ``[0, 10**num_digits)``), or of exactly ``num_digits`` (``exact_digits``: in ``[10**(n-1), 10**n)``).

    Columns: ``prompt`` ("12+34="), ``answer`` ("46"), ``text`` (prompt + answer). The train and test splits
    share no problem: the pairs (a, b) are drawn without replacement. ``reverse_answer=True`` writes the sum
    least-significant digit first ("1234+5678=" -> "2196"), the format of the STARS reference code, which lets a
    left-to-right decoder produce each digit after the carries it depends on. ``pad_operands=True`` writes every
    operand with exactly ``num_digits`` digits and the sum with ``num_digits + 1`` ("0034+5678=" -> "05712"), so
    digits that are added together always sit at the same distance from each other. ``answer_prefix`` goes before
    every answer. ``**STARS_ADDITION_FORMAT`` gives the STARS reference code's format ("1234+5678=" -> " 2196", which
    needs ``addition_tokenizer(with_space=True)``).
    """
    if not isinstance(num_digits, int) or num_digits < 1:
        raise ValueError(f"num_digits must be an integer >= 1, got {num_digits!r}")
    if num_train < 1 or num_test < 0:
        raise ValueError(f"num_train must be >= 1 and num_test >= 0, got {num_train} and {num_test}")
    low = 10 ** (num_digits - 1) if exact_digits and num_digits > 1 else 0
    width = 10**num_digits - low
    space = width**2
    if num_train + num_test > space:
        raise ValueError(
            f"{num_train + num_test} distinct problems requested but only {space} exist with {num_digits} digits"
        )
    rng = random.Random(seed)
    codes = rng.sample(range(space), num_train + num_test)

    def rows(chunk):
        prompts, answers = [], []
        for code in chunk:
            a, b = (low + x for x in divmod(code, width))
            if pad_operands:
                prompts.append(f"{a:0{num_digits}d}+{b:0{num_digits}d}=")
                total = f"{a + b:0{num_digits + 1}d}"
            else:
                prompts.append(f"{a}+{b}=")
                total = str(a + b)
            answers.append(answer_prefix + (total[::-1] if reverse_answer else total))
        return {"prompt": prompts, "answer": answers, "text": [p + s for p, s in zip(prompts, answers)]}

    return DatasetDict(
        train=Dataset.from_dict(rows(codes[:num_train])),
        test=Dataset.from_dict(rows(codes[num_train:])),
    )


def tokenize_for_training(dataset: Dataset, tokenizer, max_length: int | None = None) -> Dataset:
    """``input_ids`` = prompt + answer + eos, ``labels`` = the same with the prompt masked (-100), so the loss
    is on the answer only (:func:`~equilibria.tasks.text_data.encode_prompt_completion` on ``prompt`` and
    ``answer``)."""
    from .text_data import encode_prompt_completion

    def encode(example):
        ids, labels = encode_prompt_completion(tokenizer, example["prompt"], example["answer"])
        return {"input_ids": ids[:max_length], "labels": labels[:max_length]}

    return dataset.map(encode, remove_columns=dataset.column_names)
