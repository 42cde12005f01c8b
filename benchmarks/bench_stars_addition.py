"""The STARS ablation on multi-digit addition under a named recipe (a ``StarsTrainingArguments`` preset): four kinds of
training of a small Ouro model, several seeds each, evaluated across loop counts beyond the sampled range too.

Every kind starts from the same random weights (per seed) and sees the same data in the same order for the same
number of steps with the same optimiser, the preset's (``StarsTrainingArguments.from_preset``):

* ``plain``: a fixed loop count (``--train-loops``), no penalty;
* ``sampling``: the preset's loop sampling only (``jsrr_weight=0``);
* ``jsrr``: the preset's penalty at the fixed loop count only;
* ``stars``: both (the paper's method).

Data: ``--digits``-digit problems in the preset's format (``reference_addition``: the STARS reference code's, operands
of exactly 4 digits, the answer a space and the sum reversed); ``--test-size`` test problems (the reference test
file's 5,076) of which the first ``--test-eval`` are scored (default all; the code reads 1,000),
``--validation-size`` validation problems, and the training problems, the three disjoint. The data are the same for every seed (data seed 0); the seed sets the
weights, the data order and the loop draws.

Each run (kind, seed) checkpoints every ``--save-steps`` and resumes from its last checkpoint when started again,
and writes ``runs/<kind>_seed<seed>.json`` when it ends (a finished run is not trained again). After the runs, the
summary (``results.json``, and the plot) gathers every finished run: per kind the mean accuracy and its standard
error over seeds at each test loop count, and the seed-paired differences between kinds with their standard
errors. ``--summarize`` only rebuilds it.

    python benchmarks/bench_stars_addition.py --preset reference_addition --seeds 0,1,2 --kinds plain,sampling,stars \
        --steps 3000 --batch-size 64 --width 128          # a CPU cut of the reference recipe (say which)
    python benchmarks/bench_stars_addition.py --quick     # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
from pathlib import Path

import results_json
import torch
from datasets import Dataset
from transformers import DataCollatorForSeq2Seq, set_seed
from transformers.trainer_utils import get_last_checkpoint

from equilibria import OuroForCausalLM
from equilibria.diagnostics import loop_trajectory
from equilibria.families import FAMILIES, small_ouro_config
from equilibria.loading import load_saved_model
from equilibria.loops import transformers_model_types
from equilibria.tasks import (
    STARS_ADDITION_FORMAT,
    addition_tokenizer,
    build_addition_dataset,
    evaluate_loop_scaling,
    tokenize_for_training,
    tokenizer_fields,
)
from equilibria.trainers import StarsTrainer, StarsTrainingArguments
from equilibria.trainers.stars_presets import PRESETS

KINDS = ("plain", "sampling", "jsrr", "stars")
# the recipe's options a command-line flag may override (the cut); None: the preset's
OVERRIDE_FLAGS = {
    "steps": "max_steps",
    "batch_size": "per_device_train_batch_size",
    "lr": "learning_rate",
    "min_loops": "min_loops",
    "max_loops": "max_loops",
    "loop_log_mean": "loop_log_mean",
    "loop_log_std": "loop_log_std",
    "jsrr_weight": "jsrr_weight",
    "jsrr_power_iters": "jsrr_power_iters",
    "jsrr_penalty": "jsrr_penalty",
    "jsrr_target": "jsrr_target",
    "jsrr_warmup_steps": "jsrr_warmup_steps",
}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny run for a smoke test")
    p.add_argument("--preset", default="equilibria", choices=sorted(PRESETS), help="the STARS recipe")
    p.add_argument("--digits", type=int, default=None, help="operand digits (default: 4 for reference_*, else 2)")
    p.add_argument(
        "--reverse-answer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the STARS reference code's format (exact digits, ' ' + reversed sum); default: with reference_*",
    )
    p.add_argument("--pad-operands", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--train-size", type=int, default=8000)
    p.add_argument("--test-size", type=int, default=None, help="test problems drawn (reference_*: 5076, else 300)")
    p.add_argument(
        "--test-eval", type=int, default=None, help="test problems scored (default: all; the reference code reads 1000)"
    )
    p.add_argument("--validation-size", type=int, default=0, help="validation problems (choose the cut on these)")
    for flag in OVERRIDE_FLAGS:
        kind = str if flag == "jsrr_penalty" else int if flag in ("steps", "batch_size", "min_loops", "max_loops",
                                                                  "jsrr_power_iters", "jsrr_warmup_steps") else float  # fmt: skip
        p.add_argument(f"--{flag.replace('_', '-')}", type=kind, default=None, help="overrides the preset's")
    p.add_argument(
        "--scale-warmups",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --steps below the preset's, shorten its warm-up and penalty start by the same factor "
        "(default: on for reference_*)",
    )
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate-size", type=int, default=None, help="the MLP's width (default: 2 x --width)")
    p.add_argument("--attention-dropout", type=float, default=0.0, help="OuroConfig.attention_dropout")
    p.add_argument(
        "--tie-embeddings", action="store_true", help="lm_head shares the input embedding (as the reference's does)"
    )
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to train (default cpu)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (TrainingArguments.bf16); a GPU's choice")
    p.add_argument("--dataloader-workers", type=int, default=0, help="processes that collate the batches")
    p.add_argument(
        "--norm-placement", default="sandwich", choices=("sandwich", "pre", "post"), help="OuroConfig.norm_placement"
    )
    p.add_argument(
        "--family",
        default="ouro",
        choices=("ouro", *transformers_model_types()),
        help="the looped LM: Ouro, or one transformers ships (its small config: --layers looped layers, "
        "--train-loops passes)",
    )
    p.add_argument("--train-loops", type=int, default=4, help="the fixed loop count of plain and jsrr")
    p.add_argument("--eval-loops", default=None, help="test loop counts (reference_*: 1,2,4,...,64,100)")
    p.add_argument("--seeds", default="0", help="training seeds, comma-separated")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"which of {KINDS} to train (comma-separated)")
    p.add_argument("--save-steps", type=int, default=250, help="checkpoint every this many steps (resume)")
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="where the runs' checkpoints go (default: OUTPUT_DIR/checkpoints)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--summarize", action="store_true", help="only rebuild the summary from the finished runs")
    p.add_argument(
        "--rediagnose",
        action="store_true",
        help="recompute every finished run's loop trajectory from its last checkpoint, then summarize",
    )
    p.add_argument("--output-dir", type=Path, default=Path("docs/results/stars_addition"))
    args = p.parse_args(argv)
    return _settle(args, p)


def _settle(args, p):
    """The parsed flags with the preset's defaults filled in, cut down for --quick, and the lists split."""
    reference = args.preset.startswith("reference")
    defaults = dict(
        digits=4 if reference else 2,
        reverse_answer=reference,
        test_size=5076 if reference else 300,
        eval_loops="1,2,4,8,16,32,64,100" if reference else "1,2,4,8,16,32,64",
        scale_warmups=reference,
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.quick:
        args.digits, args.train_size, args.test_size, args.test_eval, args.validation_size = 2, 512, 16, None, 8
        args.steps, args.jsrr_warmup_steps, args.width, args.batch_size, args.max_loops = 4, 1, 32, 16, 4
        args.eval_loops, args.train_loops, args.seeds, args.save_steps = "1,2,4", 2, "0,1", 2
        args.reverse_answer, args.min_loops = False, 1
    args.test_eval = args.test_eval or args.test_size
    args.eval_loops = [int(x) for x in args.eval_loops.split(",")]
    args.seeds = [int(x) for x in args.seeds.split(",")]
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        p.error(f"--kinds {unknown}: the kinds are {KINDS}")
    return args


# ---- the recipe and the data ----------------------------------------------------------------------------------------


def recipe_overrides(args) -> dict:
    """The options the command line changes in the preset (the cut), warm-ups scaled with the steps if asked."""
    overrides = {OVERRIDE_FLAGS[f]: getattr(args, f) for f in OVERRIDE_FLAGS if getattr(args, f) is not None}
    preset = {**PRESETS[args.preset]["stars"], **PRESETS[args.preset]["training"]}
    steps = overrides.get("max_steps", preset.get("max_steps"))
    if args.scale_warmups and steps and preset.get("max_steps") and steps < preset["max_steps"]:
        factor = steps / preset["max_steps"]
        for key in ("warmup_steps", "jsrr_warmup_steps"):
            if key not in overrides and preset.get(key, 0) >= 1:
                overrides[key] = max(1, round(preset[key] * factor))
    return overrides


def kind_overrides(kind: str, args) -> dict:
    """What makes each kind out of the recipe: the fixed loop count of plain / jsrr, no penalty for plain /
    sampling."""
    out = {}
    if kind in ("plain", "jsrr"):
        out.update(min_loops=args.train_loops, max_loops=args.train_loops, loop_log_mean=math.log(args.train_loops))
        out["loop_log_std"] = 0.0
    if kind in ("plain", "sampling"):
        out["jsrr_weight"] = 0.0
    return out


def build_data(args):
    """``(train, validation, test, tokenizer)``: disjoint problems, the same for every seed."""
    style = STARS_ADDITION_FORMAT if args.reverse_answer else {}
    held = args.test_size + args.validation_size
    data = build_addition_dataset(
        args.digits, args.train_size, held, seed=0, pad_operands=args.pad_operands, **style
    )  # fmt: skip
    test = data["test"].select(range(args.test_size))
    validation = data["test"].select(range(args.test_size, held)) if args.validation_size else data["test"].select([])
    return data["train"], validation, test, addition_tokenizer(with_space=bool(style))


def build_model(args, tokenizer, seed: int):
    set_seed(seed)
    if args.family != "ouro":  # transformers' own class (StarsTrainer gives it `looped`)
        family = FAMILIES[args.family]
        sizes = (args.width, args.layers, args.heads, args.train_loops)
        return family.heads[0].model_class(family.make_config(tokenizer_fields(tokenizer), *sizes))
    config = small_ouro_config(
        tokenizer,
        hidden_size=args.width,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        total_ut_steps=args.train_loops,
    )
    config.norm_placement = args.norm_placement
    config.intermediate_size = args.intermediate_size or config.intermediate_size
    config.attention_dropout = args.attention_dropout
    config.tie_word_embeddings = args.tie_embeddings
    config.exit_loss = "final"  # STARS trains the state after the sampled number of steps (as recorded)
    return OuroForCausalLM(config)


def common_training_args(args, name: str) -> dict:
    """The optimiser and schedule of the ``equilibria`` recipe for a run of ``args.steps`` steps of
    ``args.batch_size``, as keyword arguments of ``TrainingArguments`` (the other benchmarks train with them)."""
    return dict(
        output_dir=str(args.output_dir / name),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=max(1, args.steps // 20),
        lr_scheduler_type="cosine",
        weight_decay=0.01,
        max_grad_norm=1.0,
        logging_steps=max(1, args.steps // 20),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=args.seed,
        data_seed=args.seed,
        disable_tqdm=True,
    )


# ---- one run --------------------------------------------------------------------------------------------------------


def training_arguments(kind: str, args, seed: int, folder: Path) -> StarsTrainingArguments:
    return StarsTrainingArguments.from_preset(
        args.preset,
        output_dir=str(folder),
        **{**recipe_overrides(args), **kind_overrides(kind, args)},
        logging_steps=max(1, (args.steps or 1000) // 20),
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=1,
        report_to=[],
        use_cpu=args.device == "cpu",
        bf16=args.bf16,
        optim="adamw_torch_fused" if args.device == "cuda" else "adamw_torch",
        dataloader_num_workers=args.dataloader_workers,
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
    )


def latent_dynamics(model, tokenizer, dataset, max_loops: int, power_iters: int = 20) -> dict:
    """The loop's trajectory on the first 64 test prompts (:func:`equilibria.diagnostics.loop_trajectory`): per step
    the state's norm and relative step, the spectral radius at the powers of two up to ``max_loops`` and at it."""
    prompts = dataset.select(range(min(64, len(dataset))))
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts["prompt"]]
    rows = Dataset.from_dict({"input_ids": ids, "labels": ids})
    loops = sorted({2**k for k in range(int(math.log2(max_loops)) + 1)} | {max_loops})
    return loop_trajectory(model, rows, loops, num_examples=None, power_iters=power_iters).to_dict()


def rediagnose(args) -> None:
    """Recompute ``dynamics`` of every finished run from its final checkpoint (runs made before the trajectory
    diagnostic, or to change what it measures) and rewrite its JSON."""
    _, _, test, tokenizer = build_data(args)
    scored = test.select(range(args.test_eval))
    for path in sorted((args.output_dir / "runs").glob("*_seed*.json")):
        run = json.loads(path.read_text())
        folder = (args.checkpoint_dir or args.output_dir / "checkpoints") / f"{run['kind']}_seed{run['seed']}"
        last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
        if last is None:
            print(f"  {path.name}: no checkpoint under {folder}; left as it is")
            continue
        model = OuroForCausalLM.from_pretrained(last) if args.family == "ouro" else load_saved_model(last)
        run["dynamics"] = latent_dynamics(model, tokenizer, scored, max(args.eval_loops))
        run["dynamics_from"] = Path(last).name
        path.write_text(json.dumps(run, indent=1, default=str) + "\n")
        print(f"  {path.name}: dynamics from {Path(last).name}", flush=True)


def train_one(kind: str, seed: int, args, data, tokenized=None) -> dict:
    """Train (or resume) one run and evaluate it; its JSON is written when it ends. ``tokenized``: the training set
    already tokenized (``tokenize_for_training``), when several runs share it."""
    train, validation, test, tokenizer = data
    folder = (args.checkpoint_dir or args.output_dir / "checkpoints") / f"{kind}_seed{seed}"
    model = build_model(args, tokenizer, seed)
    train_tokenizer = copy.deepcopy(tokenizer)
    train_tokenizer.padding_side = "right"
    targs = training_arguments(kind, args, seed, folder)
    trainer = StarsTrainer(
        model=model,
        args=targs,
        train_dataset=tokenized if tokenized is not None else tokenize_for_training(train, tokenizer),
        data_collator=DataCollatorForSeq2Seq(train_tokenizer, label_pad_token_id=-100),
    )
    last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    started = time.time()
    trainer.train(resume_from_checkpoint=last)
    seconds = time.time() - started
    scored = test.select(range(args.test_eval))
    result = {
        "kind": kind,
        "seed": seed,
        "recipe": targs.recipe(),
        "family": args.family,
        "norm_placement": args.norm_placement if args.family == "ouro" else None,
        "resumed_from": last and Path(last).name,
        "train_seconds_this_session": seconds,
        "accuracy": evaluate_loop_scaling(model, tokenizer, scored, loops=args.eval_loops),
        "validation_accuracy": (
            evaluate_loop_scaling(model, tokenizer, validation, loops=args.eval_loops) if len(validation) else None
        ),
        "dynamics": latent_dynamics(model, tokenizer, scored, max(args.eval_loops)),
        "log": [h for h in trainer.state.log_history if "loss" in h],
    }
    print(f"  {kind} seed {seed}: {targs.max_steps} steps ({seconds:.0f} s this session)", flush=True)
    return result


# ---- the summary ----------------------------------------------------------------------------------------------------


def mean_and_se(values: list[float]) -> dict:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return {"mean": mean, "se": se, "n": len(values)}


def percent_cell(row: dict) -> str:
    return f"{100 * row['mean']:.1f}" + ("" if row["se"] is None else f" +- {100 * row['se']:.1f}")


def summarize(runs: dict) -> dict:
    """Per kind and test loop count the mean accuracy and its standard error over seeds; per pair of kinds the
    seed-paired difference (the seeds both have) and its standard error."""
    by_kind = {}
    for kind, seeds in runs.items():
        loops = next(iter(seeds.values()))["accuracy"]
        by_kind[kind] = {n: mean_and_se([run["accuracy"][n] for run in seeds.values()]) for n in loops}
    differences = {}
    kinds = list(runs)
    for i, a in enumerate(kinds):
        for b in kinds[i + 1 :]:
            shared = sorted(set(runs[a]) & set(runs[b]))
            if shared:
                loops = runs[a][shared[0]]["accuracy"]
                differences[f"{b} - {a}"] = {
                    n: mean_and_se([runs[b][s]["accuracy"][n] - runs[a][s]["accuracy"][n] for s in shared])
                    for n in loops
                }
    return {"accuracy": by_kind, "differences": differences}


def finished_runs(folder: Path) -> dict:
    """``{kind: {seed: run}}`` of the runs whose JSON is in ``folder / "runs"``."""
    runs: dict = {}
    for path in sorted((folder / "runs").glob("*_seed*.json")):
        run = json.loads(path.read_text())
        runs.setdefault(run["kind"], {})[str(run["seed"])] = run
    return {kind: runs[kind] for kind in KINDS if kind in runs}


def plot(runs: dict, summary: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for kind, rows in summary["accuracy"].items():
        loops = sorted(rows, key=int)
        means = [100 * rows[n]["mean"] for n in loops]
        errors = [100 * (rows[n]["se"] or 0) for n in loops]
        left.errorbar([int(n) for n in loops], means, yerr=errors, marker="o", capsize=3, label=kind)
        steps = [statistics.fmean(s) for s in zip(*(r["dynamics"]["relative_step"] for r in runs[kind].values()))]
        right.plot(range(1, len(steps) + 1), steps, label=kind)
    left.set_xscale("log", base=2)
    left.axvline(args.train_loops, color="grey", linestyle=":", label=f"plain / jsrr train at {args.train_loops}")
    left.set_xlabel("loops at test time")
    left.set_ylabel("exact match (%), mean +- s.e. over seeds")
    left.set_title(f"{args.digits}-digit addition, preset {args.preset}")
    left.legend()
    right.set_yscale("log")
    right.set_xlabel("loop step t")
    right.set_ylabel("||z_t - z_(t-1)|| / ||z_(t-1)||")
    right.set_title("does the latent state settle?")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def result_flags(argv: list[str]) -> list[str]:
    """The command line without the flags that do not change the results (``--summarize``, ``--rediagnose``,
    ``--threads``, ``--checkpoint-dir``): the command recorded is the one that makes the runs."""
    out, skip = [], False
    for arg in argv:
        name = arg.split("=", 1)[0]
        if skip or name in ("--summarize", "--rediagnose"):
            skip = False
            continue
        if name in ("--threads", "--checkpoint-dir"):
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def write_summary(args, argv) -> dict:
    runs = finished_runs(args.output_dir)
    if not runs:
        raise SystemExit(f"no finished runs under {args.output_dir / 'runs'}")
    summary = summarize(runs)
    print("\nexact match (%) by loops at test time, mean +- s.e. over seeds")
    loops = list(next(iter(summary["accuracy"].values())))
    print("loops     " + "".join(f"{n:>13}" for n in loops))
    for kind, rows in summary["accuracy"].items():
        print(f"{kind:<10}" + "".join(f"{percent_cell(rows[n]):>13}" for n in loops))
    png = args.output_dir / "stars_addition.png"
    plot(runs, summary, args, png)
    command = "python benchmarks/bench_stars_addition.py " + " ".join(result_flags(argv))
    payload = {
        "command": command.strip(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "preset": args.preset,
        "recipe_overrides": recipe_overrides(args),
        "summary": summary,
        "runs": runs,
    }
    results_json.save_results(args.output_dir / "results.json", payload, indent=1, default=str)
    print(f"\nplot: {png}\nresults: {args.output_dir / 'results.json'}")
    return payload


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    (args.output_dir / "runs").mkdir(parents=True, exist_ok=True)
    if args.rediagnose:
        rediagnose(args)
    elif not args.summarize:
        data = build_data(args)
        print(
            f"{args.digits}-digit addition ({'reference format' if args.reverse_answer else 'plain format'}): "
            f"{len(data[0])} train / {len(data[1])} validation / {args.test_eval} of {len(data[2])} test problems; "
            f"preset {args.preset} with {recipe_overrides(args)}; {args.family} width {args.width}, {args.layers} "
            "looped layers",
            flush=True,
        )
        for seed in args.seeds:
            for kind in args.kinds:
                path = args.output_dir / "runs" / f"{kind}_seed{seed}.json"
                if path.exists():
                    continue
                path.write_text(json.dumps(train_one(kind, seed, args, data), indent=1, default=str) + "\n")
    return write_summary(args, argv)


if __name__ == "__main__":
    main()
