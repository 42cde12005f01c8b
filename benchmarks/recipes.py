"""Every documented training command, run as a user runs it: what each recipe delivers on seeds nobody tuned it on.

A page that trains and states a result (the README's ``equilibria train`` commands, ...) gets its numbers from here:
each command in :data:`DOCUMENTED` is run as written, with ``--seed S`` added (and its output folder moved into a
scratch folder), in a process of its own limited to the given torch threads, and its held-out loop-scaling table
(``loop_scaling.json``, written by ``equilibria train``) is recorded with the wall time of the whole command. Every
run is kept: the pages state the range over seeds and threads (lowest-highest), generated from the JSON by
``python -m tools.docs``, never one run. A recipe is chosen on seeds 0-2 and measured on seeds 100-109 (fixed before any
run, never replaced): the pages' ranges, and how many runs reach the target, are over every run on a seed outside 0-2;
seeds 0-2 are shown beside them as the seeds the recipe was chosen on. ``before`` holds the same measurement of the command the page showed
before the recipes existed, where there was one. :data:`RECIPE_CHECKS` run the recipes no page shows with a result
(``equilibria train --family F --task T`` alone), to see that their settings train.

    python benchmarks/recipes.py                                 # every recipe, seeds 0-2 (about 30 minutes on 2 cores)
    python benchmarks/recipes.py --recipes readme-ouro,readme-dory --seeds 100-109   # the seeds nobody tuned on
    python benchmarks/recipes.py --recipes readme-ouro --threads 1,2
    python benchmarks/recipes.py --before --recipes readme-ouro  # the command the page showed before
    python benchmarks/recipes.py --recipes recipe-eqr-sudoku --seeds 0   # a recipe no page runs
    python benchmarks/recipes.py --quick                         # seconds (a test runs it): 2 steps, a scratch JSON

Results: ``docs/results/recipes.json`` (a top-level ``recipes`` mapping: per recipe its command, page, trained loop
count and target, and ``runs``, each with its ``seed``, ``threads``, ``wall_s``, ``accuracy`` by loop count and,
for a validated run, ``kept``: the step whose weights it ended with, of how many, and whether it stopped at its target),
saved after every run, so a stopped sweep keeps what it measured; a run of the same recipe, seed and threads
replaces the earlier one, and the runs of a command or recipe settings the recipe had before move to its
``superseded`` list (kept, with their command, out of the pages' ranges). Run it alone: a second busy process slows small torch ops many times.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import results_json

from equilibria.families import family_record

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = results_json.RESULTS / "recipes.json"


@dataclass(frozen=True)
class Documented:
    """A training command as a page shows it, the loop count its result is read at and what the page promises
    there (``target``: the lowest share of held-out problems right on every seed; ``None``: the page states what
    the runs give). ``before``: the command the page showed before the recipes existed."""

    name: str
    page: str
    command: str
    loops: int
    target: float | None
    what: str
    before: str | None = None
    folder: str = ""  # where, inside the output folder, the model folder with its loop_scaling.json lies
    flags: tuple[str, ...] = ("--disable_tqdm", "true", "--report_to", "none")  # added to every run
    base: str | None = None  # a command run first (same seed); its output folder is --model_name_or_path
    shown: bool = True  # a page shows the command (else: a check of a recipe's settings, in the recipes table only)


README_OURO = "equilibria train --family ouro --task addition --output_dir out --use_cpu"  # also the fine-tune's base
DOCUMENTED = (
    Documented(
        "readme-ouro",
        "README.md",
        README_OURO,
        4,
        0.95,
        "exact match at 4 loops on the 200 held-out 2-digit sums",
        before="equilibria train --family ouro --task addition --output_dir out --max_steps 1500 --use_cpu "
        "--learning_rate 1e-3 --per_device_train_batch_size 64 --lr_scheduler_type cosine --warmup_steps 75 "
        "--weight_decay 0.01 --min_loops 4 --max_loops 4 --jsrr_weight 0 --train_size 2000 --exit_loss expected_logits",
    ),
    Documented(
        "readme-dory",
        "README.md",
        "equilibria train --family dory --task addition --output_dir dory --use_cpu",
        4,
        0.90,
        "exact match at 4 passes on the 200 held-out 2-digit sums",
        before="equilibria train --family dory --task addition --max_steps 300 --output_dir dory --use_cpu "
        "--learning_rate 5e-5 --per_device_train_batch_size 8 --lr_scheduler_type linear --warmup_steps 0 "
        "--weight_decay 0 --train_size 2000 --min_loops 1 --max_loops 16 --jsrr_weight 0.1",
    ),
    Documented(
        "demo",
        "docs/demo.md",
        "equilibria demo",
        8,
        None,
        "exact match at 8 loops of the STARS model (trained at 4) on the demo's 200 held-out 2-digit sums",
        folder="model",
        flags=(),
    ),
    Documented(
        "readme-fine-tune",
        "README.md",
        "equilibria train --model_name_or_path out --dataset_name examples/sum_rows.jsonl --output_dir tuned "
        "--use_peft --lora_target_modules q_proj k_proj v_proj o_proj gate_proj up_proj down_proj --learning_rate 3e-3 "
        "--per_device_train_batch_size 64 --max_steps 6000 --min_loops 4 --max_loops 8 --jsrr_weight 0.1 "
        "--exit_loss final --eval_metric exact_match --validation_loops 8 --use_cpu",
        8,
        0.95,
        "exact match at 8 loops on the 200 held-out rows of examples/sum_rows.jsonl (3-digit sums; the base model "
        "was trained on 2-digit ones at 4 loops)",
        base=README_OURO,
    ),
    Documented(
        "cli-eqr",
        "docs/cli.md",
        "torchrun --nproc_per_node 2 -m equilibria.cli train --family eqr --task sudoku --size 4 --split_by board "
        "--output_dir out-eqr --max_steps 2000 --learning_rate 1e-3 --per_device_train_batch_size 32 "
        "--warmup_steps 100 --lr_scheduler_type linear --weight_decay 0 --use_cpu --eval_loops 4,8,16,32,64",
        8,
        None,
        "4x4 Sudoku solved at depth 8 on its 200 held-out boards (two processes of 1 thread; a memorisation check)",
    ),
)


def recipe_check(family: str, task: str, what: str, loops: int = 8) -> Documented:
    """A recipe no page runs with a stated result: ``equilibria train --family F --task T`` as it is, to see that
    its settings train (the table in docs/cli.md#recipes shows what it gives)."""
    command = f"equilibria train --family {family} --task {task} --output_dir out --use_cpu"
    return Documented(f"recipe-{family}-{task}", "docs/cli.md", command, loops, None, what, shown=False)


RECIPE_CHECKS = (
    recipe_check("hrm_text", "addition", "exact match at its trained 4 H-cycles on 200 held-out 2-digit sums", 4),
    recipe_check("inkling2_loop_text", "addition", "exact match at its trained 4 passes on 200 held-out sums", 4),
    recipe_check("attractor_lm", "addition", "exact match with 8 solver iterations on 200 held-out 2-digit sums"),
    recipe_check(
        "attractor_lm", "sudoku", "6x6 Sudoku (at least 18 clues) solved at 8 iterations, 200 held out by class"
    ),
    recipe_check("attractor_lm", "maze", "9x9 mazes solved at 8 iterations, 200 held out by class"),
    recipe_check("eqr", "sudoku", "6x6 Sudoku (at least 18 clues) solved at depth 8, 200 held out by class"),
    recipe_check("eqr", "maze", "9x9 mazes solved at depth 8, 200 held out by class"),
    recipe_check("phdeq", "reachability", "accuracy at 8 solver iterations on 200 held-out 16-node graphs"),
    recipe_check("phdeq", "entailment", "accuracy at 8 solver iterations on 200 held-out problems"),
)
QUICK = ["--max_steps", "2", "--train_size", "64", "--test_size", "8", "--eval_loops", "1,4"]


def quick_flags(recipe: Documented, quick: bool) -> list[str]:
    """The flags that make ``recipe``'s command a seconds-long smoke run (none outside ``--quick``)."""
    if not quick:
        return []
    return ["--quick"] if recipe.command.startswith("equilibria demo") else QUICK


def launcher(command: str) -> list[str]:
    """``command`` (``equilibria ...``, or ``torchrun ... -m equilibria.cli ...``) as the argv this interpreter runs."""
    argv = shlex.split(command)
    if argv[0] == "equilibria":
        return [sys.executable, "-m", "equilibria.cli", *argv[1:]]
    if argv[0] == "torchrun" and "equilibria.cli" in argv:
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    raise ValueError(f"not an equilibria or torchrun -m equilibria.cli command: {command!r}")


def _replace(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value set to ``value`` (added where the command does not give it)."""
    if flag not in argv:
        return [*argv, flag, value]
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


def timed(argv: list[str], threads: int, what: str) -> float:
    """Run ``argv`` from the repository's root with ``threads`` torch threads per process; its wall time in s."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def run_command(
    recipe: Documented, command: str, seed: int, threads: int, scratch: Path, extra=(), done: dict | None = None
) -> dict:
    """One run of ``command`` (``recipe``'s line or its ``before``) with ``--seed seed``, ``threads`` torch threads
    per process, its output folder inside ``scratch`` (after ``recipe.base``, run the same way, whose folder becomes
    ``--model_name_or_path``): ``{"seed", "threads", "wall_s", "accuracy", "trained_loops", "data", "recipe"}``
    (the held-out data's name; the recipe's settings and what the command overrode), ``compared`` where the
    folder's ``loop_scaling.json`` has other models' tables too, and ``base`` (its wall time and accuracy).
    ``done``: ``{(command, seed, threads, extra): (folder, run)}`` of the runs of this sweep whose folders still
    exist; a base found there is not trained again (the README's Ouro run is the fine-tune's base), and this run
    joins it."""
    argv, base, done = launcher(command), {}, {} if done is None else done
    if recipe.base:
        key = (recipe.base, seed, threads, tuple(extra))
        if key not in done:
            base_recipe = Documented("base", "", recipe.base, 0, None, "")
            run_command(base_recipe, recipe.base, seed, threads, scratch / "base", extra, done)
        folder, base_run = done[key]
        argv = _replace(argv, "--model_name_or_path", str(folder))
        base = {"base": {k: base_run[k] for k in ("wall_s", "accuracy", "data")}}
    out = scratch / f"seed{seed}-threads{threads}"
    argv = [*_replace(argv, "--output_dir", str(out)), "--seed", str(seed), *extra, *recipe.flags]
    wall = timed(argv, threads, f"{command} (seed {seed})")
    folder = out / recipe.folder
    scaling = json.loads((folder / "loop_scaling.json").read_text())
    stage = json.loads((folder / "training_history.json").read_text())[-1]
    config = json.loads((folder / "config.json").read_text())
    trained = config[family_record(config["model_type"]).loops_key]
    compared = scaling.get("compared")  # {"plain, 1500 + 600 steps": ..., "STARS": ...}: keyed by the first word
    compared = {"compared": {name.split(",")[0]: curve for name, curve in compared.items()}} if compared else {}
    kept = stage.get("kept")
    kept = {"kept": {k: kept[k] for k in ("step", "steps_run", "accuracy", "stopped_at_target")}} if kept else {}
    run = {
        "seed": seed,
        "threads": threads,
        "wall_s": round(wall, 1),
        "accuracy": scaling["accuracy"],
        "trained_loops": trained,
        "data": scaling["data"]["name"],
        "recipe": stage.get("task_recipe"),  # the recipe's settings as the run applied them, and what it changed
        **kept,
        **compared,
        **base,
    }
    done[command, seed, threads, tuple(extra)] = (folder, run)
    return run


def record(results: dict, recipe: Documented, run: dict, before: bool) -> None:
    """Put ``run`` into ``results`` under ``recipe`` (its ``before`` part when ``before``), replacing a run of the
    same seed and threads. Runs of another command or recipe settings than ``run``'s (the recipe changed since) move
    to the entry's ``superseded`` list, with their command: kept, and no longer in the page's ranges."""
    entry = results.setdefault("recipes", {}).setdefault(recipe.name, {})
    earlier_command = entry.get("command")
    entry.update(page=recipe.page, command=recipe.command, loops=recipe.loops, target=recipe.target, what=recipe.what)
    entry["shown"] = recipe.shown
    part = entry.setdefault("before", {"command": recipe.before}) if before else entry
    current = part.get("runs", [])
    if not before:
        changed = [r for r in current if earlier_command != recipe.command or _settings(r) != _settings(run)]
        if changed:
            entry.setdefault("superseded", []).append({"command": earlier_command, "runs": changed})
            current = [r for r in current if r not in changed]
    current = [r for r in current if (r["seed"], r["threads"]) != (run["seed"], run["threads"])]
    part["runs"] = sorted([*current, run], key=lambda r: (r["threads"], r["seed"]))


def _settings(run: dict) -> dict | None:
    """The recipe settings a run applied (``None`` for a command without a recipe)."""
    return (run.get("recipe") or {}).get("settings")


def parse_seeds(text: str, parser: argparse.ArgumentParser) -> list[int]:
    """``"0,1,2"`` or ``"100-109"`` (or both, comma-separated) -> the seeds; a one-line error otherwise."""
    seeds = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            parser.error(f"--seeds takes comma-separated seeds or ranges such as 0,1,2 or 100-109, got {text!r}")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--recipes",
        default=",".join(r.name for r in DOCUMENTED),
        help="comma-separated names "
        f"(default: the documented commands; also {', '.join(r.name for r in RECIPE_CHECKS)})",
    )
    parser.add_argument(
        "--seeds",
        default="0,1,2",
        help="comma-separated seeds or ranges (0-2: the seeds a recipe is chosen on; 100-109: the ones it is measured on)",
    )
    parser.add_argument("--threads", default="2", help="torch threads per run, comma-separated (e.g. 1,2)")
    parser.add_argument("--before", action="store_true", help="run the command each page showed before instead")
    parser.add_argument("--quick", action="store_true", help="2 steps on 64 problems, seed 0, into --output")
    parser.add_argument("--output", type=Path, default=None, help=f"the JSON (default {OUTPUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    known = {r.name: r for r in (*DOCUMENTED, *RECIPE_CHECKS)}
    names = [n for n in args.recipes.split(",") if n]
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"--recipes: unknown {unknown}; the recipes are {sorted(known)}")
    seeds = [0] if args.quick else parse_seeds(args.seeds, parser)
    threads = [1] if args.quick else [int(t) for t in args.threads.split(",")]
    output = args.output or (Path(tempfile.mkdtemp()) / "recipes.json" if args.quick else OUTPUT)
    results = json.loads(output.read_text()) if output.exists() else {}
    results["command"] = "python benchmarks/recipes.py"
    done: dict = {}
    with tempfile.TemporaryDirectory() as root:  # every run's folder, until the sweep ends (a base is reused)
        for name in names:
            sweep(results, known[name], seeds, threads, args, output, Path(root), done)
    return results


def sweep(results: dict, recipe: Documented, seeds, threads, args, output: Path, root: Path, done: dict) -> None:
    """Run ``recipe`` on every seed and thread count, saving ``output`` after each run (``done``: the runs of this
    process whose folders are under ``root``)."""
    command = recipe.before if args.before else recipe.command
    if command is None:
        return
    name = recipe.name
    for t in threads:
        for seed in seeds:
            scratch = root / f"{name}{'-before' if args.before else ''}-seed{seed}-threads{t}"
            run = run_command(recipe, command, seed, t, scratch, quick_flags(recipe, args.quick), done)
            record(results, recipe, run, args.before)
            print(f"{name}{' (before)' if args.before else ''} seed {seed}, {t} threads: {run['wall_s']} s, "
                  f"{json.dumps(run['accuracy'])}", flush=True)  # fmt: skip
            output.parent.mkdir(parents=True, exist_ok=True)
            if args.quick:
                output.write_text(json.dumps(results, indent=1) + "\n")
            else:
                results_json.save_results(output, results, indent=1)


if __name__ == "__main__":
    main()
