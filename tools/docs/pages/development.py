"""The tables of ``docs/development.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import load, markdown


def forward_paths() -> str:
    """A row per forward path: the package's functions it runs and their files, release 0.2's code and now."""
    before, now = load("forward_paths_0.2.json")["paths"], load("forward_paths.json")["paths"]
    rows = []
    for name, got in now.items():
        old = before.get(name)
        then = f"{old['functions']} in {old['files']}" if old else "-"
        files = ", ".join(f"`{file}`" for file in got["file_names"])
        rows.append([f"`{name}`", then, f"{got['functions']} in {got['files']}", files])
    return markdown(["forward", "0.2: functions in files", "now: functions in files", "files now"], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "forward-paths": forward_paths,
}
