"""Small wording helpers for messages, records and cards: an article before a family's name, a count with its noun,
a list in prose."""

from __future__ import annotations


def with_article(word: str) -> str:
    """``word`` with its indefinite article: ``"an ouro"``, ``"a phdeq"``, ``"an Ouro looped language model"``."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless the count is one: ``"1 row"``, ``"3 rows"``, ``"2 mazes"``
    (``plural`` when adding an "s" is wrong)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def listed(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
