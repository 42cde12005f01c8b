"""RL on a looped LM that half-solves its task: GRPO, RLTT and GRPO with sampled loop counts, through the CLI.

A user's path, end to end: ``equilibria train`` trains the Ouro addition recipe stopped early (``--max_steps``, so
that it half-solves the task at its 4 loops), then ``equilibria train --trainer grpo`` fine-tunes that folder with
each objective for the same number of steps, seeds 0-2, reward ``exact_match``. Every run evaluates on the 200
held-out problems of the base model's split (drawn with its training data, none trained on; the RL runs use the
same data seed, so the RL prompts are the base's training problems) at 1 to 16 loops.

    python benchmarks/bench_rl_loops.py                 # the base model, then 3 objectives x 3 seeds
    python benchmarks/bench_rl_loops.py --objectives grpo --seeds 0   # one run (skips those already written)
    python benchmarks/bench_rl_loops.py --quick         # seconds; a test runs this

Writes one JSON per run into ``docs/results/rl/`` (``base.json``; ``<objective>_seed<N>.json`` with top-level
``objective`` and ``seed``) and ``docs/results/rl/summary.json`` (mean and standard error per loop count, and each
objective's difference to GRPO paired by seed), which ``docs/rl.md``'s tables read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from results_json import RESULTS, ROOT, save_results

OUT = RESULTS / "rl"
EVAL_LOOPS = "1,2,3,4,5,6,8,12,16"
# the objectives compared: the LoopGRPOConfig flags of each (the rest shared, RL_FLAGS)
OBJECTIVES = {
    "grpo": ["--objective", "grpo", "--min_loops", "4", "--max_loops", "4"],
    "rltt": ["--objective", "rltt", "--rltt_weights", "exit_pdf", "--min_loops", "4", "--max_loops", "4"],
    "grpo_sampled": ["--objective", "grpo", "--min_loops", "2", "--max_loops", "8", "--loop_draws", "per_step"],
}
QUIET = ["--report_to", "none", "--use_cpu", "--disable_tqdm", "true", "--save_strategy", "no"]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny run for a smoke test (into --out, not the docs)")
    p.add_argument("--out", type=Path, default=OUT, help="where the JSON goes")
    p.add_argument(
        "--work",
        type=Path,
        default=RESULTS.parent.parent / "benchmarks" / "results" / "rl_runs",
        help="where the model folders go",
    )
    p.add_argument("--objectives", default=",".join(OBJECTIVES), help=f"a subset of {tuple(OBJECTIVES)}")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--base_steps", type=int, default=1075, help="the recipe's steps (it is stopped before)")
    p.add_argument("--base_target", type=float, default=0.5, help="stop at this validation exact match at 4 loops")
    p.add_argument("--rl_steps", type=int, default=200)
    p.add_argument(
        "--learning_rates",
        default="1e-5,5e-5,2e-4",
        help="the learning rates tried per objective on seed 0, scored on a validation split; the best one trains "
        "every seed",
    )
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (each with --generations rollouts)")
    p.add_argument("--generations", type=int, default=8)
    args = p.parse_args(argv)
    unknown = set(args.objectives.split(",")) - set(OBJECTIVES)
    if unknown:
        p.error(f"--objectives must be among {tuple(OBJECTIVES)}, got {sorted(unknown)}")
    if args.quick:
        args.base_steps, args.rl_steps, args.prompts, args.generations = 10, 2, 2, 4
        args.learning_rates = "1e-4,1e-3"
    return args


def cli(argv: list[str]) -> None:
    from equilibria.cli import main

    code = main(argv)
    if code != 0:
        raise SystemExit(f"equilibria {' '.join(argv)} exited with {code}")


def split_sizes(args) -> tuple[int, int]:
    """The base model's training and test problems (its split, which the RL runs keep)."""
    return (64, 8) if args.quick else (8000, 200)


def sizes(args) -> list[str]:
    """The flags of the base's split (and, in --quick, its width)."""
    train, test = split_sizes(args)
    return ["--train_size", str(train), "--test_size", str(test), *(["--hidden_size", "16"] if args.quick else [])]


def base_model(args) -> dict:
    """The recipe ``ouro/addition`` (seed 0) for ``--base_steps`` with a checkpoint every 5 steps, stopped at the
    first checkpoint whose exact match at 4 loops on the validation split reaches ``--base_target`` (found by
    bisection: accuracy rises with the steps, sharply near the end); its loop scaling on the 200 test sums."""
    import shutil

    run, folder = args.work / "base_run", args.work / "base"
    if not (folder / "model.safetensors").is_file():
        argv = ["train", "--family", "ouro", "--task", "addition", "--output_dir", str(run), "--seed", "0"]
        argv += ["--max_steps", str(args.base_steps), "--eval_loops", "4", *sizes(args), *QUIET[:-2]]
        saving = ["--save_strategy", "steps", "--save_steps", "5", "--save_only_model", "true", "--keep_checkpoints"]
        cli([*argv, *saving, "true", "--eval_strategy", "no"])  # the stop is chosen below, by bisection
        steps, scores = _stop_early(args, run)
        shutil.copytree(run, folder, ignore=shutil.ignore_patterns("checkpoint-*", "loop_scaling*", "README.md"))
        shutil.copy(run / f"checkpoint-{steps}" / "model.safetensors", folder / "model.safetensors")
        (folder / "stopped.json").write_text(json.dumps({"steps": steps, "validation_at_4": scores}))
        _name_the_kept_step(folder, steps, scores, args.base_target)
    stopped = json.loads((folder / "stopped.json").read_text())
    result = {"run": "base", "seed": 0, "steps": stopped["steps"], "of_steps": args.base_steps}
    result["validation_at_4"] = stopped["validation_at_4"]  # {checkpoint step: exact match}, the ones bisection read
    result["accuracy"] = test_scaling(args, folder)
    result["data"] = f"the {split_sizes(args)[1]}-problem test split generated with the training data (seed 0)"
    result["command"] = (
        f"equilibria train --family ouro --task addition --seed 0 --max_steps {args.base_steps} --save_steps 5, "
        f"stopped at step {stopped['steps']}"
    )
    save_results(args.out / "base.json", result, indent=1)
    return result


def _name_the_kept_step(folder: Path, steps: int, scores: dict, target: float) -> None:
    """The folder's training history says which checkpoint's weights it holds (its card then names that step, not
    the run's length)."""
    history = json.loads((folder / "training_history.json").read_text())
    evaluations = sorted([int(step), value] for step, value in scores.items())
    history[-1]["kept"] = {
        "step": steps, "accuracy": scores.get(steps), "how": "first", "stopped_at_target": False, "target": target,
        "steps_run": history[-1]["steps"], "every": 5, "evaluations": evaluations,
        "validation": "exact match at 4 loops on the benchmark's validation sums (checkpoints read by bisection)",
    }  # fmt: skip
    (folder / "training_history.json").write_text(json.dumps(history, indent=1) + "\n")


def _stop_early(args, run: Path) -> tuple[int, dict]:
    """The first checkpoint (bisection over ``checkpoint-N``) reaching ``--base_target`` on the validation split."""
    steps = sorted(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*"))
    rows, scores = validation_rows(args), {}
    low, high = 0, len(steps) - 1
    while low < high:
        middle = (low + high) // 2
        scores[steps[middle]] = round(validation_accuracy(run / f"checkpoint-{steps[middle]}", rows), 4)
        low, high = (low, middle) if scores[steps[middle]] >= args.base_target else (middle + 1, high)
    return steps[low], scores


def test_scaling(args, folder: Path) -> dict:
    """Exact match on the base split's test sums (what ``equilibria train`` evaluates) at each loop count."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from equilibria.tasks import build_addition_dataset, exact_match

    train, test = split_sizes(args)
    rows = build_addition_dataset(2, train, test, seed=0)["test"]
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    return {n: round(exact_match(model, tokenizer, rows, int(n)), 4) for n in EVAL_LOOPS.split(",")}


def validation_rows(args):
    """200 sums (8 in --quick) in neither split of the base model (the 10,000 2-digit pairs minus its training and
    test problems), drawn with seed 1: where learning rates are chosen."""
    import random

    from datasets import Dataset

    from equilibria.tasks import build_addition_dataset

    train, test = split_sizes(args)
    base = build_addition_dataset(2, train, test, seed=0)
    used = set(base["train"]["prompt"]) | set(base["test"]["prompt"])
    free = [(a, b) for a in range(100) for b in range(100) if f"{a}+{b}=" not in used]
    picked = random.Random(1).sample(free, 8 if args.quick else 200)
    return Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in picked], "answer": [str(a + b) for a, b in picked]})


def validation_accuracy(folder: Path, rows) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from equilibria.tasks import exact_match

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer_folder = folder if (folder / "tokenizer.json").is_file() else folder.parent  # a checkpoint-N folder
    return exact_match(model, AutoTokenizer.from_pretrained(tokenizer_folder), rows, 4)


def choose_learning_rates(args, objectives: list[str]) -> dict:
    """Per objective, each of ``--learning_rates`` on seed 0, scored by exact match at 4 loops on
    :func:`validation_rows`; the best (the smaller on a tie) is the objective's. Written to ``sweep.json``."""
    path = args.out / "sweep.json"
    sweep = json.loads(path.read_text()) if path.is_file() and not args.quick else {}
    rows = validation_rows(args)
    for objective in objectives:
        tried = sweep.setdefault(objective, {})
        for rate in args.learning_rates.split(","):
            if rate not in tried:
                folder = args.work / f"sweep_{objective}_{rate}"
                rl_run(args, objective, 0, float(rate), folder=folder, eval_loops="4")  # its test result is not read
                tried[rate] = round(validation_accuracy(folder, rows), 4)
                save_results(path, sweep, indent=1)
                print(f"{objective} lr {rate}: exact match {tried[rate]} on the validation split at 4 loops")
    return {o: max(sorted(sweep[o], key=float), key=lambda r: sweep[o][r]) for o in objectives}


def grpo_argv(args, folder: Path) -> list[str]:
    """The flags every RL run here shares: GRPO on the base folder's addition prompts with ``exact_match``, into
    ``folder``; ``--prompts`` x ``--generations`` rollouts of at most 4 tokens per step, no reference model."""
    argv = ["--trainer", "grpo", "--model_name_or_path", str(args.work / "base"), "--task", "addition"]
    argv += ["--reward", "exact_match", "--output_dir", str(folder), "--beta", "0"]
    argv += ["--per_device_train_batch_size", str(args.prompts * args.generations)]
    return [*argv, "--num_generations", str(args.generations), "--max_completion_length", "4"]


def rl_run(args, objective: str, seed: int, learning_rate: float, folder=None, eval_loops: str = EVAL_LOOPS) -> dict:
    """``equilibria train --trainer grpo`` on the base folder; its loop scaling and training log."""
    folder = folder or args.work / f"{objective}_seed{seed}"
    argv = [*grpo_argv(args, folder), "--seed", str(seed), "--data_seed_offset", str(-seed)]  # the base's data seed
    argv += [*sizes(args)[:4], "--max_steps", str(args.rl_steps), "--learning_rate", str(learning_rate)]
    argv += ["--temperature", "1.0", "--logging_steps", "10", *OBJECTIVES[objective]]
    from equilibria.train import train_and_evaluate

    start = time.perf_counter()
    trainer, _ = train_and_evaluate([*argv, "--eval_loops", eval_loops, *QUIET])
    wall = time.perf_counter() - start
    scaling = json.loads((folder / "loop_scaling.json").read_text())
    state = json.loads((folder / "training_history.json").read_text())[-1]
    log = trainer.state.log_history
    return {
        "objective": objective,
        "seed": seed,
        "loops": " ".join(OBJECTIVES[objective]),
        "steps": args.rl_steps,
        "learning_rate": learning_rate,
        "accuracy": scaling["accuracy"],
        "data": scaling["data"]["name"],
        "train_reward": [round(h["reward"], 4) for h in log if "reward" in h],
        "step_time_s": _mean([h["step_time"] for h in log if "step_time" in h]),
        "wall_s": round(wall, 1),
        "threads": _threads(),
        "stage": state.get("reinforcement"),
        "command": "equilibria train " + " ".join([*argv, "--eval_loops", eval_loops]).replace(f"{ROOT}/", ""),
    }


def step_cost(args, repeats: int = 3, steps: int = 12) -> dict:
    """What a step of each objective costs against plain GRPO at 4 loops, measured side by side in this process:
    ``repeats`` rounds, each training every objective ``steps`` steps from the base (no evaluation), in turn; TRL's
    logged ``step_time`` (generation, scoring and the update), median over the steps after the first of a round."""
    import statistics

    from equilibria.train import train_and_evaluate

    times = {objective: [] for objective in OBJECTIVES}
    for _ in range(repeats):
        for objective, flags in OBJECTIVES.items():
            argv = [*grpo_argv(args, args.work / "cost"), "--test_size", "0", "--max_steps", str(steps)]
            trainer, _ = train_and_evaluate([*argv, "--logging_steps", "1", *flags, *QUIET])
            times[objective] += [h["step_time"] for h in trainer.state.log_history if "step_time" in h][1:]
    median = {o: statistics.median(t) for o, t in times.items()}
    return {
        "median_step_s": {o: round(m, 4) for o, m in median.items()},
        "vs_grpo": {o: round(m / median["grpo"], 3) for o, m in median.items()},
        "steps_timed": {o: len(t) for o, t in times.items()},
        "threads": _threads(),
        "how": f"{repeats} rounds of {steps} steps per objective, in turn, one process; the first step of a round "
        "left out; rollouts per step: " + str(args.prompts * args.generations),
    }


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def mean_se(values: list[float]) -> dict:
    n = len(values)
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else None
    return {"mean": round(mean, 4), "se": None if se is None else round(se, 4), "n": n}


def t_two_sided_p(t: float, df: int) -> float:
    """The two-sided p-value of Student's t with ``df`` (integer) degrees of freedom, in closed form (Abramowitz and
    Stegun 26.7.3-4): ``1 - A(t | df)``."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 0:
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return max(0.0, 1.0 - math.sin(theta) * total)
    if df == 1:
        return 1.0 - 2 * theta / math.pi
    for k in range(1, (df - 1) // 2):
        term *= c2 * (2 * k) / (2 * k + 1)
        total += term
    return max(0.0, 1.0 - 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total))


def paired(differences: list[float]) -> dict:
    """Mean and standard error of paired differences, and the paired t-test's two-sided p (``n - 1`` df)."""
    cell = mean_se(differences)
    if cell["se"] is None:
        return cell
    if cell["se"] == 0:
        return {**cell, "t": None, "p": 1.0 if cell["mean"] == 0 else 0.0}
    t = cell["mean"] / cell["se"]
    return {**cell, "t": round(t, 3), "p": round(t_two_sided_p(t, cell["n"] - 1), 4)}


def corrected(diffs: dict, primary: str) -> None:
    """Holm's correction, in place: over the objectives at the trained count ``primary`` (the question fixed before
    the runs), and separately over every other loop count and objective; ``holm`` is True where significant at 0.05."""
    from equilibria.diagnostics.statistics import holm

    for family in ([primary], [n for n in next(iter(diffs.values()), {}) if n != primary]):
        cells = [cells[n] for cells in diffs.values() for n in family if cells[n].get("p") is not None]
        for cell, kept in zip(cells, holm([c["p"] for c in cells])):
            cell["holm"] = kept


def summarize(out: Path) -> dict:
    """Mean and standard error per objective and loop count, and each objective minus GRPO paired by seed."""
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*_seed*.json"))]
    by = {}
    for run in runs:
        by.setdefault(run["objective"], {})[run["seed"]] = run
    base = json.loads((out / "base.json").read_text())
    loops = list(base["accuracy"])
    table = {o: {n: mean_se([r["accuracy"][n] for r in seeds.values()]) for n in loops} for o, seeds in by.items()}
    diffs = {}
    for objective, seeds in by.items():
        shared = sorted(set(seeds) & set(by.get("grpo", {})))
        if objective == "grpo" or len(shared) < 2:
            continue
        diffs[objective] = {
            n: paired([seeds[s]["accuracy"][n] - by["grpo"][s]["accuracy"][n] for s in shared]) for n in loops
        }
    corrected(diffs, "4")
    cost = {o: _mean([r["step_time_s"] for r in seeds.values() if r["step_time_s"]]) for o, seeds in by.items()}
    rates = {o: sorted({r["learning_rate"] for r in seeds.values()}) for o, seeds in by.items()}
    rewards = {o: [v for r in seeds.values() for v in r["train_reward"]] for o, seeds in by.items()}
    return {"base": base["accuracy"], "objectives": table, "minus_grpo": diffs, "step_time_s": cost,
            "seeds": {o: sorted(seeds) for o, seeds in by.items()}, "learning_rates": rates,
            "train_reward_range": {o: [min(v), max(v)] if v else None for o, v in rewards.items()}}  # fmt: skip


def main(argv=None) -> dict:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    base = base_model(args)
    print(f"base model: {base['accuracy']}")
    objectives = args.objectives.split(",")
    rates = choose_learning_rates(args, objectives)
    for objective in objectives:
        for seed in (int(s) for s in args.seeds.split(",")):
            path = args.out / f"{objective}_seed{seed}.json"
            if path.is_file() and not args.quick:
                continue
            result = rl_run(args, objective, seed, float(rates[objective]))
            save_results(path, result, indent=1)
            print(f"{objective} seed {seed}: {result['accuracy']}")
    if args.quick or not (args.out / "cost.json").is_file():
        save_results(args.out / "cost.json", step_cost(args, repeats=1 if args.quick else 3), indent=1)
    summary = summarize(args.out)
    save_results(args.out / "summary.json", summary, indent=1)
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
