"""The Equilibrium Reasoner's record (Huang, Geng and Kolter, 2026): a puzzle solver."""

from __future__ import annotations

from ..loops import EqRLoop
from ..modeling import EqRConfig, EqRForPuzzleSolving, EqRModel
from ..tasks.recipes import SCRATCH, SUDOKU_DATA, SUDOKU_SIZED, Recipe, scratch_recipe
from .card_text import FamilyText
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


EQR_BIBTEX = """@misc{huang2026equilibrium,
  title = {Equilibrium Reasoners: Learning Attractors Enables Scalable Reasoning},
  author = {Huang, Benhao and Geng, Zhengyang and Kolter, Zico},
  year = {2026},
  eprint = {2605.21488},
  archivePrefix = {arXiv}
}"""


def _eqr_card_notes(config) -> list[str]:
    """The EqR card's lines on the update, the recurrence and the preset a config was made from."""
    keep = float(config.inertia)
    update = f"`z <- {keep:g} z + {1 - keep:g} f(z; x) + noise`" if keep else "`z <- f(z; x) + noise`"
    lines = [
        f"- Update: {update}, noise {config.train_noise:g} in training and {config.test_noise:g} at inference, from a "
        + (f"random start (std {config.init_std:g})." if config.random_init else "learned start.")
    ]
    if config.l_cycles:
        lines.append(
            f"- Recurrence: the published code's two levels; an iteration updates `z_L` {config.l_cycles} times from "
            "`z_H + x`, then `z_H` from `z_L`; the heads read `z_H`."
        )
    if config.preset:
        changed = ", ".join(f"`{k}={v}`" for k, v in config.preset_overrides().items())
        lines.append(
            f"- Architecture: preset `{config.preset}`" + (f", with {changed}." if changed else ", unchanged.")
        )
    return lines


EQR_TEXT = FamilyText(
    notes=_eqr_card_notes,
    name="Equilibrium Reasoner",
    paper="Huang, Geng and Kolter, 2026, *Equilibrium Reasoners: Learning Attractors Enables Scalable Reasoning*",
    tags=("recurrent-reasoning", "deep-equilibrium"),
    usage={
        "puzzle_solver": ('out = model.solve(puzzles, depth={loops}, breadth=16, select="residual")  # {loops_note}',)
    },
    citation=EQR_BIBTEX,
)

# 6x6 Sudoku: benchmarks/bench_eqr_sudoku.py's settings (docs/benchmarks/eqr_sudoku.md: 91-96% at depth 8 on seeds
# 0-2). Puzzles cut down to a unique solution with no floor on their clues are far harder: the generic settings
# (SCRATCH) on 1500 steps of those solved none.
EQR_SUDOKU = {**SCRATCH, "weight_decay": 0.1, "max_steps": 2400, **SUDOKU_DATA}

EQR = Family(
    loop_meaning="iterations of the weight-tied block (depth)",
    protocol=EqRLoop(),
    base_class=EqRModel,
    heads=(Head(EqRForPuzzleSolving, kind="puzzle_solver", tasks=("sudoku", "maze")),),
    make_config=_eqr_config,
    card=EQR_TEXT,
    recipes=(
        Recipe(
            "sudoku",
            "a small EqR (width 128, 2 layers, segments of 4 iterations) on 3000 generated 6x6 Sudoku "
            "puzzles of at least 18 clues, each with 2 symmetric variants: benchmarks/bench_eqr_sudoku.py's "
            "settings (what they give on seeds 0-2: docs/cli.md#recipes)",
            EQR_SUDOKU,
            sized=SUDOKU_SIZED,
        ),
        scratch_recipe("maze", "a small EqR on generated 9x9 mazes", max_steps=1500, size=9),
    ),  # fmt: skip
)
