"""The Equilibrium Reasoner's record (Huang, Geng and Kolter, 2026): a puzzle solver."""

from __future__ import annotations

from ..loops import EqRLoop
from ..modeling import EqRConfig, EqRForPuzzleSolving, EqRModel
from .record import Family, Head


def _eqr_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return EqRConfig(
        **fields,
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_loops=num_loops,
    )


EQR = Family(
    model_type="eqr",
    loop_meaning="iterations of the weight-tied block (depth)",
    loop=EqRLoop(),
    config_class=EqRConfig,
    base_class=EqRModel,
    heads=(
        Head(
            EqRForPuzzleSolving,
            "AutoModelForTokenClassification",
            "puzzle_solver",
            ("sudoku", "maze"),
            "token-classification",
        ),
    ),
    make_config=_eqr_config,
)
