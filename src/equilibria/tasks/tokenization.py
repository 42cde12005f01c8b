"""Character-level tokenizers as real ``transformers`` tokenizers.

They are :class:`CharTokenizer` objects, ``PreTrainedTokenizerFast`` backed by a ``tokenizers`` WordLevel model
over single characters, so ``save_pretrained`` writes a plain ``tokenizer.json`` that ``AutoTokenizer`` loads
anywhere, with no custom code (where ``equilibria`` is not imported, as transformers' own ``TokenizersBackend``).
A ``CharTokenizer`` warns, naming them, when a text holds characters it lacks: they become ``<unk>`` tokens, and a
model answers them with nonsense.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")


class UnknownCharactersWarning(UserWarning):
    """A text given to a :class:`CharTokenizer` holds characters it does not know (they became ``<unk>``)."""


class CharTokenizer(PreTrainedTokenizerFast):
    """The tokenizer of equilibria's character-level tasks: a ``PreTrainedTokenizerFast`` that warns
    (:class:`UnknownCharactersWarning`, naming them) when a text it encodes holds characters it does not know.
    ``AutoTokenizer`` returns it for a saved folder after ``import equilibria`` (it is registered for the language
    models' configs); elsewhere the same files load as transformers' ``TokenizersBackend``, without the warning.
    ``warn_unknown = False`` turns the warning off (the package's own readers check the characters themselves and
    refuse, naming the row or flag)."""

    warn_unknown = True

    def _encode_plus(self, text, text_pair=None, *args, **kwargs):
        encoding = super()._encode_plus(text, text_pair, *args, **kwargs)
        unk = self.unk_token_id
        if self.warn_unknown and unk is not None and any(unk in e.ids for e in (encoding.encodings or ())):
            if not kwargs.get("is_split_into_words"):
                unknown = sorted({c for t in _texts(text, text_pair) for c in self._unknown_pieces(t)})
                if unknown:
                    known = "".join(sorted(t for t in self.get_vocab() if len(t) == 1))
                    warnings.warn(
                        f"the text holds {describe_characters(unknown)}, which the tokenizer does not know: each "
                        f"became its unknown token {self.unk_token} (id {unk}), which the model cannot read"
                        + (f"; it knows {known!r}" if len(known) <= 100 else ""),
                        UnknownCharactersWarning,
                        stacklevel=3,
                    )
        return encoding

    def _unknown_pieces(self, text: str) -> list[str]:
        """The pieces of ``text`` the backend turns into the unknown token (it encodes ``text`` once more, with
        offsets: only when an unknown token was seen)."""
        enc = self.backend_tokenizer.encode(text, add_special_tokens=False)
        return unknown_characters(self, text, enc.ids, enc.offsets)


def _texts(text, pair) -> list[str]:
    """The strings of a call's ``text`` and ``text_pair`` (a string, or a batch of them)."""
    found = []
    for part in (text, pair):
        found += [part] if isinstance(part, str) else [t for t in (part or ()) if isinstance(t, str)]
    return found


def char_tokenizer(chars: Iterable[str], padding_side: str = "left") -> PreTrainedTokenizerFast:
    """A :class:`CharTokenizer` with one token per character of ``chars`` (ids 4...) after ``<pad>``=0, ``<s>``=1,
    ``</s>``=2, ``<unk>``=3. Characters outside ``chars`` map to ``<unk>``, with a warning naming them.

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
    return CharTokenizer(
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
        with warnings.catch_warnings():  # this is the check: a CharTokenizer's warning would say it twice
            warnings.simplefilter("ignore", UnknownCharactersWarning)
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
    read ``reading`` with (and ``hint``, the way out) instead of transformers' own traceback. A
    :class:`CharTokenizer` comes back without its warning: the package's readers check the characters themselves."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"{name} has no tokenizer to read {reading} with ({type(err).__name__}){hint}") from None
    if isinstance(tokenizer, CharTokenizer):
        tokenizer.warn_unknown = False
    return tokenizer
