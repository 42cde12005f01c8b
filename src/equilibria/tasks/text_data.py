"""Your own fine-tuning data for the language-model families (``equilibria train --dataset_name``), in TRL's
conventions.

Where the rows come from (:func:`load_rows`): a Hub dataset id, a local ``.json`` / ``.jsonl`` / ``.csv`` /
``.parquet`` file, or a folder written by ``Dataset.save_to_disk``. What a row is (:func:`row_format`), by its
columns:

- ``prompt`` and ``completion`` (strings): the loss is on the completion (and the end-of-sequence token after it);
- ``messages``: a conversation, a list of ``{"role", "content"}`` turns, rendered with the tokenizer's chat
  template (:data:`DEFAULT_CHAT_TEMPLATE`, ChatML, when it has none; the template is then saved with the model);
  the loss is on the assistant turns (their content and the end-of-turn marker), not on what the other roles say;
- plain text in the column ``--dataset_text_field`` (``text``): the loss is on every token.

Rows are cut to ``max_length`` tokens; with ``packing`` they are concatenated (each ending with the
end-of-sequence token) and cut into blocks of exactly ``max_length`` tokens, TRL's ``"wrapped"`` strategy: a block
may hold the end of one row and the start of the next, which then attend to each other. Every row is checked as it
is read; a bad one is a ``ValueError`` naming the file, the row (counted from 1, a CSV header not counted) and the
column.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from datasets import Dataset

from ..wording import counted
from .held_out import POSITION, held_out_counts, held_out_record, hold_out, numbered, read_held_out, source_of
from .row_files import DATA_FILES, LINE, load_rows
from .tokenization import describe_characters, unknown_characters

FORMATS = ("prompt_completion", "messages", "text")
ROLES = ("system", "user", "assistant", "tool")
# ChatML, the format of the published Ouro chat models, used when a tokenizer has no chat template of its own
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def row_format(columns: list[str], name: str, text_field: str = "text") -> str:
    """Which of :data:`FORMATS` rows with these columns are; ``ValueError`` naming the columns otherwise."""
    if "prompt" in columns or "completion" in columns:
        missing = [c for c in ("prompt", "completion") if c not in columns]
        if missing:
            raise ValueError(
                f"{name}: has a `{({'prompt', 'completion'} - set(missing)).pop()}` column but no "
                f"`{missing[0]}` column; prompt/completion rows need both"
            )
        return "prompt_completion"
    if "messages" in columns:
        return "messages"
    if text_field in columns:
        return "text"
    raise ValueError(
        f"{name}: rows need `prompt` and `completion`, or `messages`, or a text column `{text_field}` "
        f"(--dataset_text_field); its columns are {sorted(c for c in columns if not c.startswith('__'))}"
    )


def row_key(fmt: str, row: dict, text_field: str = "text") -> str:
    """A 64-bit BLAKE2b fingerprint (hex) of what a row asks: the prompt, the conversation before the last
    assistant turn, or the text (what a held-out check compares)."""
    if fmt == "prompt_completion":
        key = row["prompt"]
    elif fmt == "messages":
        turns = row["messages"]
        last = max((i for i, turn in enumerate(turns) if turn.get("role") == "assistant"), default=len(turns))
        key = json.dumps(turns[:last])
    else:
        key = row[text_field]
    return hashlib.blake2b(str(key).encode(), digest_size=8).hexdigest()


def where_is(row: dict, index: int, name: str) -> str:
    """How an error names a row: the file's line (JSON Lines, CSV), else its position in the split as read, else
    ``index`` (each counted from 1)."""
    if row.get(LINE) is not None:
        return f"{name}, line {row[LINE]}"
    return f"{name}, row {(row[POSITION] if row.get(POSITION) is not None else index) + 1}"


class RowEncoder:
    """Turns rows of one format into ``input_ids`` and ``labels`` (``-100`` where there is no loss), checking each
    row. ``name`` is what errors call the data (the file or Hub id). Rows are cut to ``max_length`` tokens, except
    when ``packing`` (then ``max_length`` is the block length of :func:`pack`)."""

    def __init__(
        self,
        tokenizer,
        fmt: str,
        name: str,
        text_field: str = "text",
        max_length: int | None = None,
        packing: bool = False,
    ):
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
        if fmt == "messages" and tokenizer.chat_template is None:
            tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE  # saved with the tokenizer, so chat inference matches
        self.tokenizer, self.fmt, self.name, self.text_field, self.max_length = (
            tokenizer,
            fmt,
            name,
            text_field,
            max_length,
        )
        self.packing = packing

    def __call__(self, row: dict, index: int) -> dict:
        where = where_is(row, index, self.name)
        if self.fmt == "prompt_completion":
            prompt, completion = self._text(row, "prompt", where), self._text(row, "completion", where)
            try:
                ids, labels = encode_prompt_completion(self.tokenizer, prompt, completion)
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
        elif self.fmt == "messages":
            ids, labels = self._conversation(row.get("messages"), where)
        else:
            ids = self._ids(self._text(row, self.text_field, where), where, self.text_field, special=True)
            ids = ids + [self.tokenizer.eos_token_id]
            labels = list(ids)
        if self.max_length is not None and not self.packing:
            ids, labels = ids[: self.max_length], labels[: self.max_length]
        return {"input_ids": ids, "labels": labels}

    def _text(self, row: dict, column: str, where: str) -> str:
        value = row.get(column)
        if value is None or value == "":
            raise ValueError(f"{where}: `{column}` is missing or empty")
        if not isinstance(value, str):
            raise ValueError(
                f"{where}: `{column}` must be a string, got {type(value).__name__}"
                + ("; conversations go in a `messages` column" if isinstance(value, list) else "")
            )
        return value

    def _ids(self, text: str, where: str, column: str, special: bool = False) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=special)["input_ids"]
        unknown = unknown_characters(self.tokenizer, text, ids)
        if unknown:
            raise ValueError(
                f"{where}: `{column}` contains {describe_characters(unknown)}, which the tokenizer does not know"
            )
        return ids

    def _conversation(self, turns, where: str) -> tuple[list[int], list[int]]:
        _check_turns(turns, where)
        render = self.tokenizer.apply_chat_template
        text = render(turns, tokenize=False)
        spans = []  # the characters of each assistant turn, found by rendering the conversation up to it
        for i, turn in enumerate(turns):
            if turn["role"] == "assistant":
                start = len(render(turns[:i], tokenize=False, add_generation_prompt=True)) if i else 0
                upto = render(turns[: i + 1], tokenize=False)
                if not text.startswith(upto):
                    raise ValueError(
                        f"{where}: the tokenizer's chat template does not render a conversation as the rendering of "
                        "its first turns followed by the rest, so the assistant turns cannot be found in it"
                    )
                spans.append((start, len(upto)))
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        unknown = unknown_characters(self.tokenizer, text, ids, enc["offset_mapping"])
        if unknown:
            raise ValueError(
                f"{where}: `messages` (with the chat template) contains {describe_characters(unknown)}, which the "
                "tokenizer does not know"
            )
        labels = [t if any(a <= lo < b for a, b in spans) else -100 for t, (lo, _) in zip(ids, enc["offset_mapping"])]
        if turns[-1]["role"] == "assistant":
            ids, labels = ids + [self.tokenizer.eos_token_id], labels + [self.tokenizer.eos_token_id]
        return ids, labels


def _check_turns(turns, where: str) -> None:
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"{where}: `messages` must be a non-empty list of {{'role', 'content'}} turns")
    for j, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("role") not in ROLES or not isinstance(turn.get("content"), str):
            raise ValueError(
                f"{where}: `messages` turn {j + 1} must have a `role` (one of {ROLES}) and a string `content`, "
                f"got {turn!r}"[:300]
            )
    if not any(turn["role"] == "assistant" for turn in turns):
        raise ValueError(f"{where}: `messages` has no assistant turn, so nothing to train on")


def encode_prompt_completion(tokenizer, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)``: the prompt (with the tokenizer's special tokens, as at inference), the completion
    and the end-of-sequence token; the prompt's labels are ``-100``. ``ValueError`` for text the tokenizer does
    not know."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    answer = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    for text, ids, column in ((prompt, prompt_ids, "prompt"), (completion, answer[:-1], "completion")):
        unknown = unknown_characters(tokenizer, text, ids)
        if unknown:
            raise ValueError(f"`{column}` contains {describe_characters(unknown)}, which the tokenizer does not know")
    return prompt_ids + answer, [-100] * len(prompt_ids) + answer


def encode_rows(rows: Dataset, encoder: RowEncoder) -> Dataset:
    """``rows`` as ``input_ids`` / ``labels`` (packed into ``encoder.max_length`` blocks when ``encoder.packing``);
    rows left without a labelled token (cut off by ``max_length``) are dropped, with a warning."""
    import warnings

    encoded = rows.map(encoder, with_indices=True, remove_columns=rows.column_names, desc="tokenizing")
    keep = [i for i, labels in enumerate(encoded["labels"]) if any(t != -100 for t in labels)]
    if len(keep) < len(encoded):
        warnings.warn(
            f"{encoder.name}: {len(encoded) - len(keep)} of {len(encoded)} rows have nothing to learn once cut to "
            f"{encoder.max_length} tokens (the completion or assistant turns start later); they are dropped",
            stacklevel=2,
        )
        encoded = encoded.select(keep)
    if not len(encoded):
        raise ValueError(f"{encoder.name}: no row is left to train on")
    return pack(encoded, encoder.max_length) if encoder.packing else encoded


def first_bad_row(splits: list[Dataset], encoder: RowEncoder) -> ValueError | None:
    """The error of the first row (in the file's order) of ``splits`` that ``encoder`` refuses, saying how many of
    their rows it refuses and where the next few are; ``None`` when it refuses none. Training rows are encoded
    after a shuffle, so the row an encoding error names is any bad row, not the first."""
    for rows in splits:
        first, lines = None, []
        for index, row in enumerate(rows):
            try:
                encoder(row, index)
            except ValueError as err:
                first = first or err
                lines.append(where_is(row, index, encoder.name).rsplit(", ", 1)[-1])
        if first is not None:
            if len(lines) == 1:
                return ValueError(f"{first} (the only bad one of its {len(rows)} rows)") if len(rows) > 1 else first
            unit, numbers = lines[1].split()[0], [line.split()[-1] for line in lines[1:6]]
            rest = f"{unit}{'s' if len(lines) > 2 else ''} {', '.join(numbers)}" + (", ..." if len(lines) > 6 else "")
            return ValueError(f"{first} ({len(lines)} of its {len(rows)} rows are bad; this is the first, then {rest})")
    return None


def pack(encoded: Dataset, block: int | None) -> Dataset:
    """Rows concatenated and cut into blocks of ``block`` tokens (the last block may be shorter)."""
    if not block:
        raise ValueError("packing needs a block length (--max_length)")
    ids = [t for row in encoded["input_ids"] for t in row]
    labels = [t for row in encoded["labels"] for t in row]
    starts = range(0, len(ids), block)
    return Dataset.from_dict(
        {"input_ids": [ids[s : s + block] for s in starts], "labels": [labels[s : s + block] for s in starts]}
    )


def build_text_data(
    name: str,
    tokenizer,
    max_length: int,
    *,
    config_name: str | None = None,
    train_split: str = "train",
    test_split: str = "test",
    test_size: int | None = None,
    train_size: int | None = None,
    text_field: str = "text",
    packing: bool = False,
    metric: str = "token_accuracy",
    seed: int = 0,
    columns: dict[str, str] | None = None,
    validation_size: int | None = 0,
):
    """A :class:`~equilibria.tasks.TaskData` from your rows: ``train_split`` encoded for training (its first
    ``train_size`` rows after a seeded shuffle, all by default), and the held-out rows the loop-scaling evaluation
    reads: ``test_split`` when the data has it (at most ``test_size``, default 200), else ``test_size`` rows
    (default :func:`held_out_count`) held out of the training split before training; held-out rows that ask what a
    training row asks (:func:`row_key`) are dropped. ``metric``: ``"token_accuracy"`` (next-token accuracy on the
    labelled tokens, every format) or ``"exact_match"`` (the greedy completion equals the reference,
    prompt/completion rows). ``columns``: the rows' own columns mapped onto a format (``--dataset_columns``,
    :func:`~equilibria.tasks.row_files.map_columns`). ``record`` says where the rows come from and which are held out
    (:func:`held_out_rows` reads them again). ``validation_size`` rows of the training split (``None``: a tenth, 5
    to 200) are held out as well, for validation during training (``validation``, in the test rows' form)."""
    from .task_data import TaskData

    splits = load_rows(name, config_name, columns)
    if train_split not in splits:
        raise ValueError(f"--dataset_train_split {train_split!r} is not in {name} (splits: {sorted(splits)})")
    fmt = row_format(splits[train_split].column_names, name, text_field)
    source = text_source(name, config_name, fmt, text_field, max_length, metric, columns)
    train, test, held_split, trained, held, validation = hold_out(
        splits, train_split, test_split, test_size, train_size, seed, lambda rows: row_keys(rows, source),
        validation_size,
    )  # fmt: skip
    label = source["label"]
    where = (
        f"({held_split} split)"
        if held_split != train_split
        else f"(held out of the {train_split} split before training)"
    )
    description = f"{counted(len(test), 'row')} of {label} {where}, none asking what a training row asks"
    record = {"source": source, **({"held_out": held_out_record(held_split, test, description)} if len(test) else {})}
    if held:
        record["held_out_counts"] = held_out_counts(held, len(test))
    if validation is not None:
        record["validation_fingerprints"] = sorted(set(row_keys(validation, source)))
    if len(test) and fmt == "prompt_completion":  # the card's usage example: a real prompt of the data, held out
        record["example_prompt"] = test[0]["prompt"]
    encoder = RowEncoder(tokenizer, fmt, name, text_field, max_length, packing)
    try:
        encoded, evaluated = encode_rows(train, encoder), evaluation_rows(test, source, tokenizer)
        validation = evaluation_rows(validation, source, tokenizer) if validation is not None else None
    except ValueError as err:  # a bad row: name the file's first one, not the first met after the shuffle
        other = [splits[held_split]] if held_split != train_split else []
        raise first_bad_row([splits[train_split], *other], encoder) or err from None
    return TaskData(
        f"dataset:{name}",
        encoded,
        evaluated,
        tokenizer=tokenizer,
        train_fingerprints=trained,
        description=f"{counted(len(train), fmt.replace('_', '/') + ' row')} of {label} ({train_split} split)",
        metric=metric,
        test_description=description,
        record=record,
        validation=validation,
    )


METRICS = ("token_accuracy", "exact_match")


def text_source(
    name: str,
    config_name: str | None,
    fmt: str,
    text_field: str,
    max_length: int | None,
    metric: str,
    columns: dict[str, str] | None = None,
) -> dict:
    """What the training record says of rows read from ``name``: where they are (:func:`~equilibria.tasks.held_out.
    source_of`), their format, the column mapping read with them, and how they were encoded and scored;
    ``ValueError`` for a metric the format cannot be scored with."""
    if metric not in METRICS or (metric == "exact_match" and fmt != "prompt_completion"):
        raise ValueError(
            f"--eval_metric must be one of {METRICS} (exact_match: prompt/completion rows), got {metric!r}"
        )
    return {
        **source_of(name, config_name),
        "format": fmt,
        "text_field": text_field,
        "max_length": max_length,
        "metric": metric,
        **({"columns": dict(columns)} if columns else {}),
    }


def row_keys(rows: Dataset, source: dict) -> list[str]:
    return [row_key(source["format"], row, source["text_field"]) for row in rows]


def without_questions(rows: Dataset, source: dict, exclude: set[str]) -> Dataset:
    """``rows`` without those asking a question whose :func:`row_key` is in ``exclude``."""
    if not exclude:
        return rows
    return rows.select([i for i, key in enumerate(row_keys(rows, source)) if key not in exclude])


def evaluation_rows(rows: Dataset, source: dict, tokenizer) -> Dataset:
    """``rows`` as the loop-scaling evaluation of ``source["metric"]`` reads them: ``prompt`` / ``answer`` for exact
    match, else encoded row by row (never packed) for token accuracy."""
    if source["metric"] == "exact_match":
        return rows.rename_columns({"completion": "answer"}).select_columns(["prompt", "answer"])
    if not len(rows):
        return rows
    return encode_rows(
        rows, RowEncoder(tokenizer, source["format"], source["label"], source["text_field"], source["max_length"])
    )


def held_out_rows(record: dict, folder: str | Path | None = None) -> Dataset:
    """The held-out rows a training record (``training_data.json`` of a model trained on rows of your own, in
    ``folder``) names, read again from their file or Hub dataset; ``ValueError`` when they cannot be found or have
    changed since."""
    source = record["source"]

    def read(location: str, split: str) -> Dataset:
        splits = load_rows(location, source.get("config"), source.get("columns"))
        if split not in splits:
            raise ValueError(f"{location} has no {split!r} split")
        return numbered(splits[split])

    return read_held_out(record, read, folder)


def training_collator(tokenizer):
    """transformers' ``DataCollatorForSeq2Seq`` on a right-padding copy of ``tokenizer``: pads ``input_ids`` with
    the padding token, ``labels`` with ``-100``, and adds the ``attention_mask``."""
    import copy

    from transformers import DataCollatorForSeq2Seq

    right = copy.deepcopy(tokenizer)
    right.padding_side = "right"
    return DataCollatorForSeq2Seq(right, label_pad_token_id=-100)


__all__ = [
    "DATA_FILES",
    "DEFAULT_CHAT_TEMPLATE",
    "FORMATS",
    "METRICS",
    "RowEncoder",
    "build_text_data",
    "encode_prompt_completion",
    "encode_rows",
    "load_rows",
    "pack",
    "row_format",
    "row_key",
    "training_collator",
]
