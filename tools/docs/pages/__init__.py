"""The table builders of the docs, one module per page (``common``: what several share); :data:`TABLES` maps every
marked table's name to its builder."""

from __future__ import annotations

from collections.abc import Callable

from tools.docs.pages import (
    attractor,
    attractor_internalization,
    attractor_lm,
    attractor_memory,
    attractor_puzzles,
    audit_reachability,
    cli,
    compatibility,
    demo,
    development,
    eqr_ablations,
    eqr_halting,
    eqr_sudoku,
    exit_gate,
    gpu,
    jsrr_estimator,
    lazy_identity,
    native,
    ouro,
    ouro_decode,
    ouro_serving,
    puzzle_census,
    readme,
    solvers,
    stars_addition,
    stars_cost,
)

TABLES: dict[str, Callable[[], str]] = {
    **attractor.TABLES,
    **attractor_internalization.TABLES,
    **attractor_lm.TABLES,
    **attractor_memory.TABLES,
    **attractor_puzzles.TABLES,
    **audit_reachability.TABLES,
    **cli.TABLES,
    **compatibility.TABLES,
    **demo.TABLES,
    **development.TABLES,
    **eqr_ablations.TABLES,
    **eqr_halting.TABLES,
    **eqr_sudoku.TABLES,
    **exit_gate.TABLES,
    **gpu.TABLES,
    **jsrr_estimator.TABLES,
    **lazy_identity.TABLES,
    **native.TABLES,
    **ouro.TABLES,
    **ouro_decode.TABLES,
    **ouro_serving.TABLES,
    **puzzle_census.TABLES,
    **readme.TABLES,
    **solvers.TABLES,
    **stars_addition.TABLES,
    **stars_cost.TABLES,
}
