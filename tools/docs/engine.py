"""The docs tool's engine: the marked tables and the marked numbers of prose in ``README.md`` and ``docs/**/*.md``,
generated from their JSON under ``docs/results/``, the one place they are written.

A page marks each generated table with ``<!-- table: NAME -->`` and ``<!-- /table -->``; the table builder of that
name (``tables``: name -> a function returning the table's markdown) renders it from the JSON. A number in prose that
restates a JSON number is marked where it stands, on one line, with the field it restates and its format::

    about <!-- num: stars_cost.json:by_loops.4.plain_seconds fmt=.2f -->0.71<!-- /num --> s

``FILE:PATH`` names a file under ``docs/results/`` and a field in it: keys joined by dots, a list index as a number
(``rows.-1``: the last row), a key with a dot, a space or a bracket in brackets and quotes
(``losses.expected.frozen["0.5"].accuracy``), and a key of the form ``[KEY OP NUMBER]`` (``OP``: ``>=``, ``<=``, ``>``,
``<``, ``==``) takes the items of a list whose ``KEY`` compares so (``runs[seed>=100].accuracy.4``: the runs on seeds
100 and up). A number computed from fields is an expression with each field in
braces: ``{a.json:x} / {a.json:y}``, ``100 * ({a.json:x} - {b.json:x})``, ``min({...}, {...})`` (``+ - * /``,
``min``, ``max``, ``mean``, ``se``: the standard error of the mean, ``count``, ``sum``, ``atleast(T, ...)``: how
many of the values are >= ``T``, ``abs``, ``sqrt``). A ``*`` key takes
every item of a list (``min({a.json:rows.*.x})``), a ``*`` in the file every matching file
(``{lm/llama/seed*.json:ppl}``); arithmetic on two such lists pairs their items (``mean({a/seed*.json:x} -
{b/seed*.json:x})``: the mean per-seed difference). ``fmt`` is Python's format spec (``.1f``, ``+.1f``, ``.1%``: times
100 with a percent sign, ``d``, ``,``).

The table builders, one module per page, are in :mod:`tools.docs.pages`; what they share with this module (where
the results are, how a table is written) is in :mod:`tools.docs.results`, which imports neither. This module
imports nothing of the package nor of the benchmarks.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections.abc import Callable
from pathlib import Path

from tools.docs import results
from tools.docs.results import ROOT, mean_se

MARKED = re.compile(r"(<!-- table: ([\w-]+) -->\n)(.*?)(<!-- /table -->)", re.S)


# ---- the pages -------------------------------------------------------------------------------------------------


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def page_name(page: Path) -> str:
    """``page`` relative to the repository (as given, for a page outside it)."""
    return str(page.resolve().relative_to(ROOT)) if page.resolve().is_relative_to(ROOT) else str(page)


def render(text: str, where: str = "page", tables: dict[str, Callable[[], str]] | None = None) -> str:
    """``text`` with every marked table rendered from its JSON by ``tables`` (default: the docs tool's); ``KeyError``
    naming an unknown table."""
    tables = known_tables() if tables is None else tables

    def fill(match: re.Match) -> str:
        name = match.group(2)
        if name not in tables:
            raise KeyError(f"{where}: no table named {name!r}; known: {sorted(tables)}")
        return match.group(1) + tables[name]() + "\n" + match.group(4)

    return MARKED.sub(fill, text)


# ---- numbers in prose ------------------------------------------------------------------------------------------

NUMBER = re.compile(r"<!-- num: (?P<spec>.+?) fmt=(?P<fmt>\S+) -->(?P<text>[^\n]*?)<!-- /num -->")
_KEY = r"""(?:[^\s{}\[\]."':]+|\[(?:"[^"]*"|'[^']*'|-?\d+|\w+(?:>=|<=|==|>|<)-?[\d.]+)\])"""
_FILTER = re.compile(r"(\w+)(>=|<=|==|>|<)(-?[\d.]+)")
_COMPARE = {">=": float.__ge__, "<=": float.__le__, "==": float.__eq__, ">": float.__gt__, "<": float.__lt__}
FIELD = re.compile(rf"(?P<file>[\w./*-][\w./*+-]*?\.json):(?P<path>{_KEY}(?:\.?{_KEY})*)")


def _flat(values: tuple) -> list[float]:
    """The arguments of ``min``, ``max`` and ``mean``, a ``*`` field's list spread out."""
    return [v for value in values for v in (value if isinstance(value, list) else [value])]


def _se(*values) -> float:
    """The standard error of the mean (n - 1 degrees of freedom), as the tables' ``mean ± SE``."""
    return mean_se(_flat(values))[1]


def _each(function: Callable) -> Callable:
    """``function`` of one number, applied to every item of a list (several arguments: to each, as one list)."""

    def apply(*values):
        if len(values) == 1 and not isinstance(values[0], list):
            return function(values[0])
        return [function(v) for v in _flat(values)]

    return apply


FUNCTIONS: dict[str, Callable] = {
    "min": lambda *values: min(_flat(values)),
    "max": lambda *values: max(_flat(values)),
    "mean": lambda *values: sum(_flat(values)) / len(_flat(values)),
    "se": _se,
    "count": lambda *values: len(_flat(values)),
    "sum": lambda *values: sum(_flat(values)),
    "atleast": lambda threshold, *values: sum(v >= threshold for v in _flat(values)),
    "abs": _each(abs),
    "sqrt": _each(lambda value: value**0.5),
}


_LOADED: dict[tuple[str, int], object] = {}  # (path, mtime) -> its JSON, read once per version


class NumberError(ValueError):
    """A marked number whose field cannot be read or whose expression is not one this script evaluates."""


def field(file: str, path: str):
    """The value at ``path`` in ``docs/results/<file>``; :class:`NumberError` saying which key is missing. A ``*``
    in ``file`` (``attractor_lm/llama/seed*.json``) gives the list of the value in every matching file, by name."""
    if "*" in file:
        matches = sorted(results.RESULTS.glob(file))
        if not matches:
            raise NumberError(f"no file matches docs/results/{file}")
        return [field(str(match.relative_to(results.RESULTS)), path) for match in matches]
    path_on_disk = results.RESULTS / file
    if not path_on_disk.is_file():
        raise NumberError(f"no file docs/results/{file}")
    stamp = (str(path_on_disk), path_on_disk.stat().st_mtime_ns)
    if stamp not in _LOADED:
        _LOADED[stamp] = json.loads(path_on_disk.read_text())
    value = _LOADED[stamp]
    keys = re.findall(r"""\[(?:"([^"]*)"|'([^']*)'|(-?\d+)|(\w+(?:>=|<=|==|>|<)-?[\d.]+))\]|([^\s{}\[\]."':]+)""", path)
    keys = [quoted or single or index or (f"?{test}" if test else plain) for quoted, single, index, test, plain in keys]
    return _walk(value, keys, file, path)


def _walk(value, keys: list[str], file: str, path: str):
    """Follow ``keys`` into ``value``; a ``*`` key takes every item of a list (or every value of an object) and
    gives a list, a ``?KEY>=N`` key (``[KEY>=N]`` in the path) the items of a list whose ``KEY`` compares so."""
    for n, key in enumerate(keys):
        if key.startswith("?"):
            name, op, bound = _FILTER.fullmatch(key[1:]).groups()
            if not isinstance(value, list):
                raise NumberError(f"{file}: [{key[1:]}] on something that is not a list on the way to {path}")
            chosen = [item for item in value if isinstance(item, dict) and name in item]
            chosen = [item for item in chosen if _COMPARE[op](float(item[name]), float(bound))]
            return [_walk(item, keys[n + 1 :], file, path) for item in chosen]
        if key == "*":
            items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else None
            if items is None:
                raise NumberError(f"{file}: '*' on something that is not a list on the way to {path}")
            return [_walk(item, keys[n + 1 :], file, path) for item in items]
        try:
            value = value[int(key)] if isinstance(value, list) else value[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise NumberError(f"{file}: no key {key!r} on the way to {path}") from None
    if isinstance(value, str):  # the benchmarks record their arguments as strings ("test_size": "300")
        try:
            return float(value) if any(c in value for c in ".en") else int(value)
        except ValueError:
            pass
    return value


def _arithmetic(op: type, a, b):
    """``a op b``, item by item where either is a list (a list and a number: the number with every item; two
    lists: pairwise, of equal length), so that ``{a*.json:x} - {b*.json:x}`` are the per-seed differences."""
    if isinstance(a, list) or isinstance(b, list):
        a_items = a if isinstance(a, list) else [a] * len(b)
        b_items = b if isinstance(b, list) else [b] * len(a)
        if len(a_items) != len(b_items):
            raise NumberError(f"lists of {len(a_items)} and {len(b_items)} values cannot be paired")
        return [_arithmetic(op, x, y) for x, y in zip(a_items, b_items)]
    if op is ast.Div:
        return a / b if b else float("nan")
    return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[op]


def _evaluate(node: ast.AST, values: dict[str, float]):
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, values)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in values:
        return values[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _evaluate(node.operand, values)
        return _each(lambda v: -v if isinstance(node.op, ast.USub) else v)(operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return _arithmetic(type(node.op), _evaluate(node.left, values), _evaluate(node.right, values))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        return FUNCTIONS[node.func.id](*(_evaluate(arg, values) for arg in node.args))
    raise NumberError(f"not a number expression this script evaluates: {ast.unparse(node)!r}")


def number(spec: str, fmt: str) -> str:
    """The marked number ``spec`` (one ``FILE:PATH``, or an expression of ``{FILE:PATH}`` fields) formatted by
    ``fmt``."""
    if "{" not in spec:
        match = FIELD.fullmatch(spec.strip())
        if not match:
            raise NumberError(f"not FILE.json:PATH: {spec!r}")
        value = field(match["file"], match["path"])
    else:
        values: dict[str, float] = {}

        def name(match: re.Match) -> str:
            ref = FIELD.fullmatch(match.group(1).strip())
            if not ref:
                raise NumberError(f"not FILE.json:PATH: {match.group(1)!r}")
            values[f"_f{len(values)}"] = field(ref["file"], ref["path"])
            return f"_f{len(values) - 1}"

        expression = re.sub(r"\{([^{}]*)\}", name, spec)
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except SyntaxError:
            raise NumberError(f"not an expression: {spec!r}") from None
        try:
            value = _evaluate(tree, values)
        except (TypeError, ValueError, ZeroDivisionError) as error:  # a field that is an object, min() of nothing, ...
            raise NumberError(f"{spec}: {error}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NumberError(f"{spec} is {value!r}, not a number")
    if fmt.endswith("d") and isinstance(value, float) and value.is_integer():
        value = int(value)  # a count computed in floats (300 / 3)
    try:
        text = format(value, fmt)
    except ValueError as error:
        raise NumberError(f"fmt={fmt}: {error}") from None
    if fmt.endswith("e"):  # a short exponent, as the tables write it: 1e-7, 2.5e3
        text = re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m[1] == "-" else "") + m[2], text)
    return text


def numbers(text: str, where: str = "page") -> tuple[str, list[str]]:
    """``text`` with every marked number rewritten from its JSON, and ``where:line: ...`` for each one that differed
    (its field, the JSON's value and the page's) or could not be read (left as it was)."""
    lines, found = text.split("\n"), []
    for n, line in enumerate(lines):

        def fill(match: re.Match, n: int = n) -> str:
            label = f"{where}:{n + 1}: {match['spec']} (fmt={match['fmt']})"
            try:
                value = number(match["spec"], match["fmt"])
            except NumberError as error:
                found.append(f"{label}: cannot read it: {error}")
                return match.group(0)
            if value != match["text"]:
                found.append(f"{label}: the JSON gives {value!r}, the page says {match['text']!r}")
            return match.group(0)[: match.start("text") - match.start()] + value + "<!-- /num -->"

        lines[n] = NUMBER.sub(fill, line)
    return "\n".join(lines), found


def stale_tables(tables: dict[str, Callable[[], str]] | None = None) -> list[str]:
    """``page: table`` for every marked table whose committed text differs from its JSON's rendering."""
    found = []
    for page in pages():
        text = page.read_text()
        for match in MARKED.finditer(text):
            if render(match.group(0), str(page), tables) != match.group(0):
                found.append(f"{page_name(page)}: {match.group(2)}")
    return found


def stale_numbers() -> list[str]:
    """``page:line: FIELD (fmt=...): the JSON gives ..., the page says ...`` for every marked number of prose that
    differs from its JSON (or cannot be read from it)."""
    return [line for page in pages() for line in numbers(page.read_text(), page_name(page))[1]]


def stale(tables: dict[str, Callable[[], str]] | None = None) -> list[str]:
    """Every marked table and number that differs from its JSON."""
    return stale_tables(tables) + stale_numbers()


def write_pages(tables: dict[str, Callable[[], str]] | None = None) -> list[str]:
    """Rewrite every page's marked tables and numbers; return the pages changed. Each rewritten number (and one
    whose field cannot be read, left as it is) is printed: the sentence around it may need reading again."""
    changed = []
    for page in pages():
        text = page.read_text()
        new, rewritten = numbers(render(text, str(page), tables), page_name(page))
        for line in rewritten:
            print(f"number: {line}")
        if new != text:
            page.write_text(new)
            changed.append(page_name(page))
    return changed


def known_tables() -> dict[str, Callable[[], str]]:
    """The table builders of the docs (:data:`tools.docs.pages.TABLES`: one module per page), loaded on first use."""
    from tools.docs.pages import TABLES

    return TABLES


def main(argv: list[str] | None = None, tables: dict[str, Callable[[], str]] | None = None) -> int:
    """``python -m tools.docs [--check]``: rewrite the marked tables and numbers, or (``--check``) exit 1 naming
    those that differ from their JSON."""
    parser = argparse.ArgumentParser(description="the docs' marked tables and numbers, from their JSON")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a table or a marked number differs from its JSON (write nothing)",
    )
    args = parser.parse_args(argv)
    if args.check:
        differing = stale(tables)
        for line in differing:
            print(f"differs from its JSON: {line}")
        return 1 if differing else 0
    for page in write_pages(tables):
        print(f"rewrote {page}")
    return 0
