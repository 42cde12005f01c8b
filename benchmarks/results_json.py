"""Where the benchmarks write their results, and how: JSON under ``docs/results/``, after which the docs' marked
tables and numbers are rewritten from it (:mod:`tools.docs.engine`), so that a page never shows other numbers than
its JSON. The one module every benchmark shares; importing it puts the repository on ``sys.path`` (the docs tool,
``tools/docs``, for the few benchmarks that print a page's table)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def save_results(path: Path, data, **dumps) -> None:
    """Write a benchmark's results ``data`` as JSON to ``path``; when that is under ``docs/results/``, rewrite the
    docs' tables and numbers too."""
    path = Path(path)
    path.write_text(json.dumps(data, **dumps) + "\n")
    if path.resolve().is_relative_to(RESULTS.resolve()):
        from tools.docs.engine import write_pages

        write_pages()
