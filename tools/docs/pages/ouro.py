"""The tables of ``docs/ouro.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.results import markdown


def stars_presets() -> str:
    """Every option of each STARS preset, read from ``equilibria.trainers.stars_presets`` (the code is the source)."""
    from equilibria.trainers.stars_presets import DEFAULTS, PRESETS, STARS_OPTIONS

    names = list(PRESETS)
    training = list(dict.fromkeys(k for name in names for k in PRESETS[name]["training"]))

    def cell(value) -> str:
        if value is None:
            return "-"
        return f"{value:.4g}" if isinstance(value, float) else str(value).replace("{", "").replace("}", "")

    rows = [[f"`{k}`", cell(DEFAULTS[k]), *(cell(PRESETS[n]["stars"][k]) for n in names)] for k in STARS_OPTIONS]
    rows += [[f"`{k}`", "(Trainer's)", *(cell(PRESETS[n]["training"].get(k)) for n in names)] for k in training]
    return markdown(["option", "no preset", *(f"`{n}`" for n in names)], rows)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "stars-presets": stars_presets,
}
