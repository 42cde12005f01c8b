"""Where the benchmarks write their results, and how: JSON under ``docs/results/``. Only ``python -m tools.docs``
rewrites the docs' marked tables and numbers from it (its ``--check``, run by the suite, fails on a page its JSON has
moved away from). The one module every benchmark shares; importing it puts the repository on ``sys.path`` (the docs
tool, ``tools/docs``, for the few benchmarks that print a page's table)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def save_results(path: Path, data, **dumps) -> None:
    """Write a benchmark's results ``data`` as JSON to ``path`` (the pages are rebuilt by ``python -m tools.docs``)."""
    Path(path).write_text(json.dumps(data, **dumps) + "\n")
