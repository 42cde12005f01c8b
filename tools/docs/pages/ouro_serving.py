"""The tables of ``docs/benchmarks/ouro_serving.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tools.docs import engine
from tools.docs.engine import markdown, pct


def ouro_serving() -> str:
    """A saved Ouro on an existing engine against the package (``bench_ouro_serving.py``), one row per precision."""
    runs = sorted(engine.RESULTS.glob("ouro_serving*.json"))
    if not runs:
        return "(not run yet: `python benchmarks/bench_ouro_serving.py --model out --engine-python ENV/bin/python`)"
    rows = []
    for path in runs:
        r = json.loads(path.read_text())
        v = r["versions"]
        used = re.sub(r"<Type: '(.*)'>", r"\1", v.get("inference_precision", "-"))  # OpenVINO's element type
        serving = f"{r['engine']} {v.get('openvino', '')} (optimum-intel {v.get('optimum-intel', '-')}, transformers {v['transformers']})"
        rows.append(
            [
                serving,
                f"{r['precision']} ({used})",
                f"{r['data']['units']} held-out problems, {r['loops']} loops",
                f"{pct(r['answers_equal'])} ({'all' if r['tokens_equal'] else 'not all'})",
                f"{pct(r['exact_match']['package'])} / {pct(r['exact_match']['engine'])}",
                f"{r['seconds']['package'] / r['seconds']['engine']:.2f}x",
            ]
        )
    header = [
        "engine",
        "precision asked (used)",
        "data",
        "answers equal to the package's",
        "exact match package / engine",
        "engine speed (package time / engine time)",
    ]
    return markdown(header, rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "ouro-serving": ouro_serving,
}
