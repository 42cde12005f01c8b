"""The tables of ``docs/compatibility.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import load, markdown


def compat_matrix() -> str:
    """A row per release, a column per family, each cell *folder as remote code / package* (transformers' looped
    LMs: *the saved folder / package*; ``absent`` on a release without the model)."""
    payload = load("compat_matrix.json")
    families = list(payload["families"])  # the folders checked, in the order they were run

    def cell(verdict: dict) -> str:
        if verdict["status"] == "absent":
            return "absent"
        return f"{verdict['status']} / {'ok' if verdict['package'] == 'ok' else 'error'}"

    rows = [[release, *(cell(row[f]) for f in families)] for release, row in payload["releases"].items()]
    return markdown(["transformers", *families], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "compat-matrix": compat_matrix,
}
