"""Equilibrium Reasoner on small Sudoku (or mazes): feed-forward vs plain weight-tied vs EqR, and EqR's depth x breadth
test-time scaling with three ways of picking the answer.

Three models of the same size (the same weight-tied block, ``--layers`` layers of width ``--width``) are
trained with `EqRTrainer` on the same generated puzzles (``--size`` x ``--size``, unique solutions):

* feed-forward: the block applied once (depth 1, one segment), fixed start, no noise;
* weight-tied: the block iterated (``--segment-loops`` x ``--max-segments``), fixed (learned) start, no noise;
* EqR: the same iteration, random start and noise ``--noise`` in training.

The ablation (``--kinds``, one process per kind and ``eqr_ablation_summary.py`` to merge, see there) adds
``untied`` (``--untied-depth`` blocks with their own weights, run once: the depth-matched feed-forward baseline),
``ri_only`` (random start, no noise), ``ni_only`` (learned start, noise), ``eqr_offline`` (the paper's offline deep
supervision, ``--steps / --max-segments`` optimizer steps so that it supervises as many segments as the online kinds)
and ``eqr_offline_terminal`` (rolled out without gradient, the last segment supervised). ``attractor`` is not an
ablation: the Attractor's puzzle head (``AttractorForPuzzleSolving``, the paper's map, one-step gradient) with the
same layers split into backbone and attractor (``--attractor-backbone-layers``), trained by ``AttractorTrainer`` on
the same data and steps; its "depth" is the solver's budget, 0 the backbone alone. ``--validation-size`` adds a
Sudoku validation split, held out as the test split is, on which every kind is also evaluated (for choosing
settings); ``--from-saved`` evaluates the models an earlier run saved instead of training them again.

Printed: exact-solve accuracy on held-out puzzles (no puzzle shared with training); for EqR, accuracy over
depth x breadth with selection by lowest final residual, majority vote and halting head; and the correlation
between a trajectory's final residual and whether its answer is right. The plot is saved as a PNG.

    python benchmarks/bench_eqr_sudoku.py --split-by board  # 4x4: a memorisation check (36 classes), ~17 min
    python benchmarks/bench_eqr_sudoku.py --size 6 --min-clues 18 --steps 2400 --augmentations 2   # 6x6, held out
    python benchmarks/bench_eqr_sudoku.py --task maze --size 9
    python benchmarks/bench_eqr_sudoku.py --size 6 --min-clues 18 --steps 2400 --augmentations 2 --kinds attractor \
        --layers 4 --attractor-backbone-layers 2 --attractor-intermediate 171 --validation-size 200
    python benchmarks/bench_eqr_sudoku.py --quick         # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import results_json
import torch
from transformers import set_seed

from equilibria import AttractorConfig, AttractorForPuzzleSolving, EqRConfig, EqRForPuzzleSolving
from equilibria.modeling.configuration_eqr import SELECTIONS
from equilibria.modeling.modeling_eqr import pick_restarts
from equilibria.scaling import puzzle_solves
from equilibria.tasks import build_maze_dataset, build_sudoku_dataset, split_census
from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments, EqRTrainer, EqRTrainingArguments


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--task", default="sudoku", choices=["sudoku", "maze"])
    p.add_argument("--size", type=int, default=4, help="Sudoku: 4, 6 or 9; maze: side length 5..30")
    p.add_argument("--train-size", type=int, default=3000)
    p.add_argument("--test-size", type=int, default=200)
    p.add_argument(
        "--validation-size",
        type=int,
        default=0,
        help="Sudoku: puzzles of a validation split held out as the test split is; every kind is also evaluated on "
        "it, one trajectory (for choosing settings without the test split)",
    )
    p.add_argument("--augmentations", type=int, default=1)
    p.add_argument("--min-clues", type=int, default=None, help="Sudoku: keep at least this many clues (easier puzzles)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=None, help="default 1e-3 (with --preset: the preset's 1e-4)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--block", default="attention", choices=["attention", "mlp"])
    p.add_argument(
        "--block-intermediate",
        type=int,
        default=None,
        help="MLP width of the block's layers for every kind but attractor (default 4 x --width)",
    )
    p.add_argument("--segment-loops", type=int, default=None, help="default 4 (with --preset: its 3 H-cycles)")
    p.add_argument("--max-segments", type=int, default=None, help="default 4 (with --preset: its 16)")
    p.add_argument("--noise", type=float, default=None, help="EqR's training noise beta (0.1; --preset: 0.01)")
    p.add_argument(
        "--test-noise",
        type=float,
        default=None,
        help="EqR's noise at test time (breadth diversity; 0.05; --preset: 0.01)",
    )
    p.add_argument("--depths", default="4,8,16,32,64")
    p.add_argument("--breadths", default="1,4,16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--split-by",
        choices=("class", "board"),
        default="class",
        help="test puzzles outside every training puzzle's class up to symmetry (class), or only different boards "
        "(board: a memorisation check, for sizes with few classes: 4x4 Sudoku, 7x7 mazes)",
    )
    p.add_argument("--only", choices=list(KINDS), default=None, help="train just this kind (same as --kinds KIND)")
    p.add_argument(
        "--kinds",
        default="feedforward,weight_tied,eqr",
        help=f"comma-separated, from {', '.join(KINDS)} (the ablation: all of them)",
    )
    p.add_argument("--untied-depth", type=int, default=8, help="blocks of the untied (depth-matched) baseline")
    _add_attractor_flags(p)
    p.add_argument(
        "--preset",
        default=None,
        choices=["published"],
        help="EqR (and its ablations): the published code's architecture and training (EqRConfig.from_preset, "
        "EqRTrainingArguments.from_preset), cut to the CPU by --width, --block-intermediate, --batch-size, --steps "
        "(its warm-up and EMA window kept at the same share of the run), --max-segments and --lr where given; the rest "
        "is the preset's",
    )
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/eqr_sudoku_4x4"))
    p.add_argument(
        "--from-saved",
        type=Path,
        default=None,
        help="evaluate the models a previous run saved (its --output-dir) instead of training; its training log, "
        "time and steps are kept (give it the same data and model options)",
    )
    args = p.parse_args(argv)
    return _settle(args, p)


def _add_attractor_flags(p):
    """The flags of the attractor kind (its backbone, budget, width, tolerance and map)."""
    p.add_argument(
        "--attractor-backbone-layers",
        type=int,
        default=1,
        help="attractor: layers of its backbone (the rest of --layers form its attractor: equal parameters)",
    )
    p.add_argument("--attractor-budget", type=int, default=16, help="attractor: solver iterations in training")
    p.add_argument(
        "--attractor-intermediate",
        type=int,
        default=None,
        help="attractor: MLP width of its layers (default 4 x --width, as EqR's; the MLP has three matrices, so "
        "--layers 4 with 171 at --width 128 keeps the parameters of 2 layers with 512)",
    )
    p.add_argument("--attractor-tol", type=float, default=1e-3, help="attractor: the solver's tolerance")
    p.add_argument(
        "--attractor-form",
        default="paper",
        choices=("paper", "gated"),
        help="attractor: the map (paper: the paper's; gated: this package's earlier form)",
    )


def _settle(args, p):
    """The parsed flags with the preset's or the plain defaults filled in, checked, and cut down for --quick."""
    preset = PRESET_DEFAULTS if args.preset else PLAIN_DEFAULTS
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.validation_size and args.task != "sudoku":
        p.error("--validation-size is implemented for Sudoku only")
    if args.task == "sudoku" and args.size not in (4, 6, 9):
        p.error("--size for Sudoku must be 4, 6 or 9")
    if args.task == "maze" and not 5 <= args.size <= 30:
        p.error("--size for mazes must be in [5, 30]")
    if args.quick:
        args.size = 4 if args.task == "sudoku" else 7
        args.train_size, args.test_size, args.steps, args.batch_size = 64, 16, 4, 16
        args.width, args.depths, args.breadths, args.augmentations = 32, "2,4", "1,2", 0
        args.split_by = "board" if args.task == "sudoku" else args.split_by  # 4x4: too few classes to hold out
    args.kinds = [args.only] if args.only else args.kinds.split(",")
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        p.error(f"--kinds: unknown {unknown}; choose from {', '.join(KINDS)}")
    if args.quick:
        args.untied_depth = 2
    args.depths = [int(x) for x in args.depths.split(",")]
    args.breadths = [int(x) for x in args.breadths.split(",")]
    return args


PLAIN_DEFAULTS = {"lr": 1e-3, "segment_loops": 4, "max_segments": 4, "noise": 0.1, "test_noise": 0.05}
PRESET_DEFAULTS = {"lr": 1e-4, "segment_loops": 3, "max_segments": 16, "noise": 0.01, "test_noise": 0.01}

KINDS = {  # training switches per kind; "eqr" is random init (RI) + noise injection (NI), online segments
    "feedforward": dict(random_init=False, train_noise=0.0, segment_loops=1, max_segments=1),
    "untied": dict(random_init=False, train_noise=0.0, untied=True, max_segments=1),
    "weight_tied": dict(random_init=False, train_noise=0.0),
    "ri_only": dict(random_init=True, train_noise=0.0),
    "ni_only": dict(random_init=False),
    "eqr": dict(random_init=True),
    "eqr_offline": dict(random_init=True, supervision="offline"),
    "eqr_offline_terminal": dict(random_init=True, supervision="offline_terminal"),
    # the Attractor's puzzle head (the paper's map, one-step gradient) with as many layers: not an EqR ablation
    "attractor": dict(random_init=False, train_noise=0.0, attractor=True),
}


def train_steps(args, kind: str) -> int:
    """Optimizer steps: ``--steps``, except under "offline" supervision, whose step supervises all
    ``--max-segments`` segments of a trajectory: ``--steps / --max-segments`` of them give it the same supervised
    segments (block applications with gradient, puzzles x segments) as the online kinds."""
    if KINDS[kind].get("supervision") == "offline":
        return max(1, args.steps // args.max_segments)
    return args.steps


def segment_loops(args, kind: str) -> int:
    spec = KINDS[kind]
    return args.untied_depth if spec.get("untied") else spec.get("segment_loops", args.segment_loops)


def looped(kind: str) -> bool:
    """Whether the kind applies one shared block repeatedly (so it has a fixed point and a residual to select by)."""
    return kind != "feedforward" and not KINDS[kind].get("untied")


def stochastic(args, kind: str) -> bool:
    """Whether restarts differ: a random start, or noise at test time (kinds trained with noise get it)."""
    spec = KINDS[kind]
    return spec["random_init"] or spec.get("train_noise", args.noise) > 0


def load_task(args):
    """The task's splits and vocabulary; ``args.split_census`` says how far the test split is held out."""
    if args.task == "maze":
        data = build_maze_dataset(
            args.size, args.train_size, args.test_size, seed=args.seed, min_path=args.size, split_by=args.split_by
        )
        print(
            f"{args.size}x{args.size} mazes: {len(data['train'])} training, {len(data['test'])} held-out; mean path "
            f"length {sum(data['test']['rating']) / len(data['test']):.1f}"
        )
    else:
        data = build_sudoku_dataset(
            args.size,
            args.train_size,
            args.test_size,
            seed=args.seed,
            augmentations=args.augmentations,
            min_clues=args.min_clues,
            split_by=args.split_by,
            num_validation=args.validation_size,
        )
        print(
            f"{args.size}x{args.size} Sudoku: {len(data['train'])} training puzzles ({args.train_size} + "
            f"augmentations), {len(data['test'])} held-out; mean clues "
            f"{sum(data['test']['clues']) / len(data['test']):.1f}"
        )
    args.split_census = split_census(args.task, data["train"], data["test"])
    census = args.split_census
    verdict = "held out" if census["held_out"] else "NOT held out: a memorisation check"
    print(
        f"  split census: {census['train_classes']} training classes, {census['test_classes']} test classes, "
        f"{census['test_rows_in_training_classes']} test puzzles in a training class ({verdict})"
    )
    return data, 6 if args.task == "maze" else 11


def build_attractor(args) -> AttractorForPuzzleSolving:
    """The Attractor puzzle model with the EqR block's sizes: ``--layers`` layers split into backbone and attractor."""
    set_seed(args.seed)
    backbone = args.attractor_backbone_layers
    if not 0 <= backbone < args.layers:
        raise SystemExit(
            f"--attractor-backbone-layers must be in [0, --layers - 1 = {args.layers - 1}], got {backbone}"
        )
    config = AttractorConfig(
        vocab_size=args.vocab_size,
        max_position_embeddings=args.size * args.size,
        hidden_size=args.width,
        intermediate_size=args.attractor_intermediate or 4 * args.width,
        num_attention_heads=max(1, args.width // 32),
        num_backbone_layers=backbone,
        num_attractor_layers=args.layers - backbone,
        num_loops=args.attractor_budget,
        solver_tol=args.attractor_tol,
        residual_form=args.attractor_form,
        tie_word_embeddings=False,
    )
    return AttractorForPuzzleSolving(config)


def build(args, kind: str) -> EqRForPuzzleSolving:
    set_seed(args.seed)
    spec = KINDS[kind]
    loops = segment_loops(args, kind)
    values = dict(
        vocab_size=args.vocab_size,
        max_seq_len=args.size * args.size,
        hidden_size=args.width,
        intermediate_size=args.block_intermediate or 4 * args.width,
        num_attention_heads=max(1, args.width // 32),
        num_layers=args.layers,
        random_init=spec["random_init"],
        train_noise=spec.get("train_noise", args.noise),
        test_noise=args.test_noise if stochastic(args, kind) else 0.0,
        num_loops=loops,
        untied_depth=loops if spec.get("untied") else None,
    )
    if args.preset:  # the published architecture (its Mixer block, two levels, ...), at this width
        return EqRForPuzzleSolving(EqRConfig.from_preset(args.preset, **values))
    return EqRForPuzzleSolving(EqRConfig(**values, block_type=args.block))


def train(args, kind: str, data) -> tuple[EqRForPuzzleSolving, float, list]:
    spec = KINDS[kind]
    steps = train_steps(args, kind)
    common = dict(
        output_dir=str(args.output_dir / kind),
        max_steps=steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=max(1, steps // 20),
        lr_scheduler_type="cosine",
        weight_decay=0.1,
        max_grad_norm=1.0,
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=args.seed,
        data_seed=args.seed,
        disable_tqdm=True,
        dataloader_drop_last=True,
    )
    if spec.get("attractor"):
        model = build_attractor(args)
        rows = data["train"].select_columns(["inputs", "labels"])
        trainer = AttractorTrainer(model=model, args=AttractorTrainingArguments(**common), train_dataset=rows)
    else:
        model = build(args, kind)
        training_args = eqr_training_args(args, kind, common)
        trainer = EqRTrainer(model=model, args=training_args, train_dataset=data["train"])
        args.recipe = training_args.recipe()
    started = time.time()
    trainer.train()
    return model, time.time() - started, [h for h in trainer.state.log_history if "loss" in h]


def eqr_training_args(args, kind: str, common: dict) -> EqRTrainingArguments:
    """The kind's EqR training arguments: the package's recipe (``common``), or with ``--preset`` the preset's
    optimizer, schedule, EMA and halting with ``common``'s run length, batch, logging and seeds; the warm-up (2000 of
    its 50000 steps) and the EMA's window (decay 0.999: about 1000 steps) cut to the same share of this run."""
    spec = KINDS[kind]
    segments = dict(
        segment_loops=segment_loops(args, kind),
        max_segments=spec.get("max_segments", args.max_segments),
        supervision=spec.get("supervision", "online"),
    )
    if not args.preset:
        return EqRTrainingArguments(**common, **segments)
    keep = ("output_dir", "max_steps", "per_device_train_batch_size", "logging_steps", "save_strategy", "report_to")
    keep += ("use_cpu", "seed", "data_seed", "disable_tqdm", "dataloader_drop_last", "learning_rate")
    run = {k: common[k] for k in keep}
    share = 50000 / common["max_steps"]  # the preset's run over this one: warm-up and EMA window keep their share
    run["warmup_steps"] = max(1, round(2000 / share))
    run["ema_decay"] = max(0.5, 1.0 - (1.0 - 0.999) * share)  # a window of 1000 steps is 2% of its run
    if segments["segment_loops"] == 1 or segments["supervision"] != "online":  # one iteration or offline: no split
        segments.update(grad_loops=None, halt_exploration=0.0)
    return EqRTrainingArguments.from_preset(args.preset, **run, **segments)


_EVALUATED: dict = {}  # (model, data, split, depth, breadth, seed) -> evaluate's result, shared by sweep, rules, grid


def evaluate(model, data, depth: int, breadth: int, seed: int, batch: int = 128, split: str = "test") -> dict:
    """Exact-solve accuracy on ``data[split]`` for each selection rule (all read from the same restarts), plus
    every restart's final residual and correctness. Seeded, so a repeated cell is read back, not solved again."""
    key = (id(model), id(data), split, depth, breadth, seed)
    if key not in _EVALUATED:
        _EVALUATED[key] = _evaluate(model, data, depth, breadth, seed, batch, split)
    return _EVALUATED[key]


@torch.no_grad()
def _evaluate(model, data, depth: int, breadth: int, seed: int, batch: int, split: str) -> dict:
    if isinstance(model, AttractorForPuzzleSolving):
        return evaluate_attractor(model, data[split], depth, batch)
    test = data[split].with_format("torch")
    cell = _new_cell(model)
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, len(test), batch):
        rows = test[start : start + batch]
        out = model.solve(rows["inputs"], depth=depth, breadth=breadth, select="residual", generator=generator)
        restart_right = (out.predictions == rows["labels"][:, None, :]).all(-1)  # (puzzles, breadth)
        _tally(cell, restart_right, out.residuals, out.votes, out.halt_probs)
    return _cell_result(cell, len(test))


def _new_cell(model) -> dict:
    rules = [s for s in SELECTIONS if s != "halt" or model.config.halting]
    return {"right": dict.fromkeys(rules, 0), "residuals": [], "correct": []}


def _tally(cell: dict, restart_right, residuals, votes, halt) -> None:
    """Add one batch of restarts (all ``(puzzles, breadth)``) to ``cell``: each of solve's selection rules applied to
    the same restarts, and every restart's final residual and correctness."""
    for rule in cell["right"]:
        picks = pick_restarts(rule, residuals, votes, halt)
        cell["right"][rule] += int(restart_right.gather(1, picks[:, None]).sum())
    cell["residuals"].append(residuals.flatten())
    cell["correct"].append(restart_right.flatten())


def _cell_result(cell: dict, n: int) -> dict:
    return {
        "accuracy": {s: r / n for s, r in cell["right"].items()},
        "residuals": torch.cat(cell["residuals"]),
        "correct": torch.cat(cell["correct"]),
    }


@torch.no_grad()
def evaluate_grid(model, data, depths, breadths, seed: int, batch: int = 128, split: str = "test") -> None:
    """Every (depth, breadth) cell of EqR's grid from one run of ``max(breadths)`` restarts per puzzle to
    ``max(depths)`` iterations: depth ``d`` is read off the same trajectories after ``d`` iterations (the model
    continued from its state, as ``solve`` would have run it), breadth ``b`` is the first ``b`` restarts. Each cell
    goes to the memo :func:`evaluate` reads, in its format; the widest column equals ``solve(depth=d,
    breadth=max(breadths))`` on the first batch with the same seed."""
    widest = max(breadths)
    cells = {(d, b): _new_cell(model) for d in depths for b in breadths}
    test = data[split].with_format("torch")
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    for start in range(0, len(test), batch):
        rows = test[start : start + batch]
        inputs, labels = rows["inputs"].repeat_interleave(widest, dim=0), rows["labels"]
        state, done = None, 0
        for depth in sorted(depths):
            out = model(inputs, state=state, num_loops=depth - done, generator=generator)
            state, done = out.state, depth
            predictions = out.logits.argmax(-1).view(len(labels), widest, -1)
            residuals = out.residuals[:, -1].view(len(labels), widest)
            halt = None if out.halt_logits is None else torch.sigmoid(out.halt_logits[:, -1].float()).view(-1, widest)
            restart_right = (predictions == labels[:, None, :]).all(-1)
            for breadth in breadths:
                pred = predictions[:, :breadth]
                votes = (pred[:, :, None, :] == pred[:, None, :, :]).all(-1).sum(-1)  # as solve counts them
                sub = None if halt is None else halt[:, :breadth]
                _tally(cells[(depth, breadth)], restart_right[:, :breadth], residuals[:, :breadth], votes, sub)
    for (depth, breadth), cell in cells.items():
        _EVALUATED[(id(model), id(data), split, depth, breadth, seed)] = _cell_result(cell, len(test))


def evaluate_attractor(model, rows, budget: int, batch: int = 128) -> dict:
    """The Attractor's exact solves of ``rows`` with a solver ``budget`` (one deterministic answer: "residual" is
    its only rule), its final relative residuals and correctness, as :func:`evaluate` reports them."""
    run = puzzle_solves(model, rows, budget, batch)
    return {
        "accuracy": {"residual": run["solved"].float().mean().item()},
        "residuals": run["residual"],
        "correct": run["solved"],
    }


def correlation(residuals: torch.Tensor, correct: torch.Tensor) -> float:
    """Pearson r between log10 final residual and correctness (point-biserial); NaN if either is constant."""
    x = residuals.double().clamp_min(1e-12).log10()
    y = correct.double()
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(((x - x.mean()) * (y - y.mean())).mean() / (x.std(unbiased=False) * y.std(unbiased=False)))


def plot(grid: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for breadth in args.breadths:
        axes[0].plot(
            args.depths,
            [100 * grid[(d, breadth)]["residual"] for d in args.depths],
            marker="o",
            label=f"breadth {breadth}",
        )
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("depth (iterations)")
    axes[0].set_ylabel("exact solve (%)")
    axes[0].set_title("EqR: depth x breadth (lowest-residual pick)")
    axes[0].legend(fontsize=8)
    depth = args.depths[-1]
    for select, marker in zip(SELECTIONS, "osx"):
        if (depth, args.breadths[0]) in grid and select in grid[(depth, args.breadths[0])]:
            axes[1].plot(
                args.breadths, [100 * grid[(depth, b)][select] for b in args.breadths], marker=marker, label=select
            )
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("breadth (random restarts)")
    axes[1].set_ylabel("exact solve (%)")
    axes[1].set_title(f"selection rule at depth {depth}")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def depth_sweep(args, kind: str, model, data, split: str = "test") -> tuple[dict, dict]:
    """One trajectory per puzzle of ``data[split]`` at each depth the kind can run: exact solve (%) and mean final
    residual."""
    if kind == "feedforward":
        depths = [1]
    elif KINDS[kind].get("attractor"):  # solver budgets; 0 reads the backbone's proposal alone
        depths = sorted({0, args.attractor_budget, *args.depths})
    elif KINDS[kind].get("untied"):
        depths = [args.untied_depth]
    else:
        depths = sorted({args.segment_loops * args.max_segments, *args.depths})
    accuracy, residual = {}, {}
    for depth in depths:
        ev = evaluate(model, data, depth, 1, args.seed, split=split)
        accuracy[depth], residual[depth] = ev["accuracy"]["residual"], float(ev["residuals"].mean())
    return accuracy, residual


def selection_rules(args, kind: str, model, data) -> dict | None:
    """Each selection rule at the deepest depth and widest breadth (None for kinds whose restarts are identical)."""
    if not looped(kind) or not stochastic(args, kind):
        return None
    ev = evaluate(model, data, args.depths[-1], args.breadths[-1], args.seed)
    return {**ev["accuracy"], "residual_correctness_r": correlation(ev["residuals"], ev["correct"])}


def eqr_grid(args, model, data, results: dict) -> None:
    grid, corr = {}, {}
    print("\nEqR depth x breadth (exact solve %, lowest-residual / vote / halting-head selection)")
    print("  depth " + "".join(f"{'breadth ' + str(b):>22}" for b in args.breadths))
    for depth in args.depths:
        cells = []
        for breadth in args.breadths:
            ev = evaluate(model, data, depth, breadth, args.seed)
            grid[(depth, breadth)] = ev["accuracy"]
            if breadth == args.breadths[-1]:
                corr[depth] = correlation(ev["residuals"], ev["correct"])
            cells.append("/".join(f"{100 * ev['accuracy'][s]:.0f}" for s in SELECTIONS if s in ev["accuracy"]))
        print(f"  {depth:>5} " + "".join(f"{c:>22}" for c in cells))
    print("\ncorrelation of log10 final residual with a restart being right (Pearson r):")
    print("  " + "  ".join(f"depth {d}: {r:+.2f}" for d, r in corr.items()))
    results["eqr"]["grid"] = {f"{d}x{b}": v for (d, b), v in grid.items()}
    results["eqr"]["residual_correctness_r"] = corr
    try:
        plot(grid, args, args.output_dir / "eqr_sudoku.png")
        print(f"wrote {args.output_dir / 'eqr_sudoku.png'}")
    except ImportError:
        print("matplotlib is not installed: no plot")


def trained(args, kind: str, data) -> tuple:
    """The kind's model and its results entry: trained here (and saved under ``--output-dir``/models, for
    bench_eqr_halting --model; not committed), or loaded from ``--from-saved`` with that run's training record."""
    if args.from_saved is not None:
        cls = AttractorForPuzzleSolving if KINDS[kind].get("attractor") else EqRForPuzzleSolving
        folder = args.from_saved / "models" / kind
        if not folder.is_dir():
            raise SystemExit(f"--from-saved: no saved {kind!r} model at {folder}")
        record = json.loads((args.from_saved / "eqr_sudoku.json").read_text())[kind]
        print(f"  loaded {kind} from {folder}")
        return cls.from_pretrained(folder).eval(), {
            k: record[k] for k in ("train_seconds", "train_steps", "parameters", "log")
        }
    model, seconds, log = train(args, kind, data)
    model.save_pretrained(args.output_dir / "models" / kind)
    print(f"  trained {kind} in {seconds:.0f} s (final logged loss {log[-1]['loss'] if log else float('nan'):.4f})")
    record = {"train_seconds": seconds, "train_steps": train_steps(args, kind), "parameters": model.num_parameters()}
    if isinstance(model, EqRForPuzzleSolving):  # the recipe: a preset and what this run changed of it
        record["recipe"] = args.recipe
    return model, {**record, "log": log}


def main(argv=None) -> dict:
    args = parse(argv)
    _EVALUATED.clear()  # keys hold ids: a model of an earlier call in this process may share one
    data, args.vocab_size = load_task(args)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results = {
        "args": {k: str(v) for k, v in vars(args).items() if k != "split_census"},
        "split_census": args.split_census,
    }
    models = {}
    for kind in args.kinds:
        models[kind], results[kind] = trained(args, kind, data)
    path = args.output_dir / "eqr_sudoku.json"
    if args.from_saved is None:  # the training record first, JSON only (the pages wait for the whole record)
        path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if "eqr" in models:  # EqR's grid from one run per batch; the depth sweep's breadth-1 cells are among them
        depths = sorted({*args.depths, args.segment_loops * args.max_segments})
        evaluate_grid(models["eqr"], data, depths, args.breadths, args.seed)
    sweeps(args, models, data, results)
    if "eqr" in models:
        eqr_grid(args, models["eqr"], data, results)
    results_json.save_results(path, results, indent=2, default=str)
    return results


def sweeps(args, models: dict, data, results: dict) -> None:
    """Each kind's depth sweep on each held-out split and its selection rules at the deepest, widest cell."""
    splits = ["validation", "test"] if "validation" in data else ["test"]
    for split in splits:
        print(f"\nexact solve on held-out {split} puzzles, one trajectory (mean final relative residual in brackets)")
        for kind, model in models.items():
            accuracy, residual = depth_sweep(args, kind, model, data, split)
            prefix = "" if split == "test" else f"{split}_"
            results[kind].update({f"{prefix}accuracy_by_depth": accuracy, f"{prefix}residual_by_depth": residual})
            cells = "  ".join(f"depth {d}: {100 * a:5.1f}% ({residual[d]:.2g})" for d, a in accuracy.items())
            print(f"  {kind:<12} {cells}")
    print(f"\nselection rules at depth {args.depths[-1]}, breadth {args.breadths[-1]} (exact solve %)")
    for kind, model in models.items():
        rules = selection_rules(args, kind, model, data)
        results[kind]["selection"] = rules
        if rules is not None:
            picks = "  ".join(f"{s} {100 * rules[s]:5.1f}" for s in SELECTIONS if s in rules)
            print(f"  {kind:<12} {picks}  (r of log residual with right: {rules['residual_correctness_r']:+.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
