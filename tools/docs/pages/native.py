"""The tables of ``docs/native.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import stars_preset_runs
from tools.docs.results import load, markdown, pct

NATIVE_CONTROLS = {
    "dory": "Dory",
    "hrm_text": "HRM-text",
    "inkling2_loop_text": "Inkling2-loop",
    "dory-lazy": "Dory, loop returning its start (negative control)",
}


def native_audit_controls() -> str:
    """The trained controls of transformers' looped LMs (``build_audit_control.py --family F [--lazy]``): loop scaling
    at 1 and 4 passes on held-out problems and the audit's verdict, T1 and probe on fresh ones."""
    rows = []
    for label, name in NATIVE_CONTROLS.items():
        path = docs_results.RESULTS / f"audit_control_{label}.json"
        if not path.is_file():
            continue
        control = load(path.name)
        accuracy, audit = control["loop_scaling"]["accuracy"], control["audit"]
        probe = audit["probe"]["change_points"] if audit.get("probe") else None
        rows.append([
            name, f"{control['folder_bytes'] / 1000:.0f} KB", pct(accuracy["1"], 1), pct(accuracy["4"], 1),
            f"{audit['accuracy']:.1%}", f"{audit['substitution']['change_points']:+.1f}",
            "-" if probe is None else f"{probe:+.1f}", audit["verdict"],
        ])  # fmt: skip
    header = ["model (4 passes, 2-digit addition)", "folder", "1 pass", "4 passes", "audited accuracy", "T1 (points)"]
    return markdown([*header, "probe h* - z0 (points)", "verdict"], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "stars-addition-dory": lambda: stars_preset_runs("stars_addition_dory"),
    "native-audit-controls": native_audit_controls,
}
