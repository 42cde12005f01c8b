"""Character-level tokenizers as real ``transformers`` tokenizers.

They are ``PreTrainedTokenizerFast`` objects backed by a ``tokenizers`` WordLevel model over single
characters, so ``save_pretrained`` writes a plain ``tokenizer.json`` that ``AutoTokenizer`` loads anywhere,
with no custom code.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")


def char_tokenizer(chars: Iterable[str], padding_side: str = "left") -> PreTrainedTokenizerFast:
    """A tokenizer with one token per character of ``chars`` (ids 4...) after ``<pad>``=0, ``<s>``=1,
    ``</s>``=2, ``<unk>``=3. Characters outside ``chars`` map to ``<unk>``.

    ``padding_side`` defaults to ``"left"``, what batched generation with a decoder-only model needs.
    """
    chars = list(dict.fromkeys(chars))
    bad = [c for c in chars if len(c) != 1]
    if bad:
        raise ValueError(f"char_tokenizer takes single characters, got {bad[:5]}")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side=padding_side,
        clean_up_tokenization_spaces=False,
    )


def tokenizer_fields(tokenizer: PreTrainedTokenizerBase) -> dict:
    """What a tokenizer fixes in a language model's config: the vocabulary size and the special token ids."""
    return dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def unknown_characters(
    tokenizer: PreTrainedTokenizerBase, text: str, ids: list[int], offsets: list[tuple[int, int]] | None = None
) -> list[str]:
    """The pieces of ``text`` the tokenizer could not represent: those it turned into its unknown token (or, in a
    vocabulary without one, into another special token such as padding). ``ids`` is the tokenised ``text``; with
    ``offsets`` (its offset mapping) it is not tokenised again. Empty when every piece is known (the common case,
    decided from ``ids`` alone), sorted; :func:`describe_characters` quotes them."""
    suspects = {tokenizer.unk_token_id} if tokenizer.unk_token_id is not None else set(tokenizer.all_special_ids)
    if not suspects.intersection(ids):
        return []
    if offsets is None:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    found = {text[a:b] for i, t, (a, b) in zip(ids, tokens, offsets) if i in suspects and b > a and text[a:b] != t}
    return sorted(found)


def describe_characters(chars: list[str], shown: int = 12) -> str:
    """``['é', 'ü']``, or the first ``shown`` and how many more: ``['a', ..., 'l', ...] (30 in all)``."""
    if len(chars) <= shown:
        return repr(list(chars))
    return repr(list(chars[:shown]))[:-1] + f", ...] ({len(chars)} in all)"


def load_tokenizer(name: str, reading: str, hint: str = "") -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(name)``, or a one-line ``ValueError`` saying that ``name`` has no tokenizer to
    read ``reading`` with (and ``hint``, the way out) instead of transformers' own traceback."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"{name} has no tokenizer to read {reading} with ({type(err).__name__}){hint}") from None
