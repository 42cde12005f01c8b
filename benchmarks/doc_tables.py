"""Rewrite the docs' marked tables and numbers from their JSON, or (``--check``) name those that differ: the docs tool
(``python -m tools.docs``; its engine is ``tools/docs/engine.py``, its table builders ``tools/docs/pages/``), run from
here too.

    python benchmarks/doc_tables.py           # rewrite the marked tables and numbers of README.md and docs/**/*.md
    python benchmarks/doc_tables.py --check   # exit 1, naming the tables and the numbers that differ from their JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: the docs tool (tools/docs)
from tools.docs.engine import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
