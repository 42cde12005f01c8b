"""The main job: train a small Ouro looped LM on addition, then continue two copies for the same number of steps,
one plainly and one with STARS, evaluate both across loop counts on held-out problems, audit both loops, write a
Hub-ready folder with a model card and load it back (through the package and as remote code)."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Trainer,
    TrainingArguments,
    set_seed,
)

from .families import small_ouro_config
from .modeling import OuroForCausalLM
from .tasks import (
    addition_tokenizer,
    build_addition_dataset,
    exact_match,
    fingerprints,
    save_training_record,
    tokenize_for_training,
)

EVAL_LOOPS = (1, 2, 4, 8, 16)
TRAINED_LOOPS = 4


def generate_without_package(folder: Path, prompt: str, loops: tuple[int, ...], max_new_tokens: int) -> dict:
    """Load ``folder`` with ``trust_remote_code=True`` in a fresh interpreter where ``import equilibria`` fails
    and generate greedily from ``prompt`` at each loop count; returns ``{loops: text}``."""
    script = textwrap.dedent(
        """
        import json, sys
        sys.modules["equilibria"] = None  # the package is unavailable: only the folder's remote code can load
        from transformers import AutoModelForCausalLM, AutoTokenizer
        folder, prompt, loops, new = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert model.__class__.__module__.startswith("transformers_modules"), model.__class__.__module__
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
        texts = {n: tok.decode(model.generate(**enc, max_new_tokens=new, do_sample=False, num_loops=n)[0],
                               skip_special_tokens=True) for n in loops}
        print("RESULT " + json.dumps(texts))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(folder), prompt, json.dumps(list(loops)), str(max_new_tokens)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"loading {folder} as remote code failed:\n{result.stderr[-2000:]}")
    return {int(k): v for k, v in json.loads(lines[-1][len("RESULT ") :]).items()}


def run_demo(
    output_dir: str | Path = "equilibria-demo",
    steps: int = 1500,
    stars_steps: int = 600,
    quick: bool = False,
    seed: int = 0,
) -> dict:
    """Run the demo and return its results (also written to ``output_dir/demo_results.json``).

    Trains a small Ouro model on 2-digit addition at 4 loops, then continues two copies for ``stars_steps`` more
    steps each: one with the plain ``Trainer`` at 4 loops, one with STARS (so the comparison is like with like).
    Prints both loop-scaling tables on held-out problems, audits both loops, writes a Hub-ready folder for the
    STARS model (safetensors, remote code, tokenizer, generation config, model card, plots), reloads it through
    the package and as remote code without the package, and generates with two loop counts."""
    if steps < 1 or stars_steps < 1:
        raise ValueError(f"steps and stars_steps must be >= 1, got {steps} and {stars_steps}")
    output_dir = Path(output_dir)
    set_seed(seed)
    started = time.time()
    if quick:
        steps, stars_steps = min(steps, 20), min(stars_steps, 6)
    run = _Run(output_dir, quick, seed)
    model, trainer = _train_plain(run, steps)
    plain_model = _continue_plain(run, model, stars_steps)
    stars_model, stars = _train_stars(run, model, stars_steps)
    curves = _loop_scaling(run, {f"plain, {steps} + {stars_steps} steps": plain_model, "STARS": stars_model})
    reports = _audits(run, {"plain": plain_model, "STARS": stars_model})
    folder = _write_folder(run, (trainer, stars), curves, reports["STARS"])
    samples = _reload(run, folder)
    plain_curve, stars_curve = curves.values()
    results = {
        "accuracy_by_loops": _keys(plain_curve),
        "stars_accuracy_by_loops": _keys(stars_curve),
        "evaluation_data": f"{run.n_test} held-out problems (none in the {len(run.data['train'])} training problems)",
        "audit": {name: _audit_summary(report) for name, report in reports.items()},
        "trained_loops": TRAINED_LOOPS,
        "steps": steps,
        "continuation_steps": stars_steps,
        "final_train_loss": next(
            (h["train_loss"] for h in reversed(trainer.state.log_history) if "train_loss" in h), None
        ),
        "samples": samples,
        "model_dir": str(folder),
        "seconds": round(time.time() - started, 1),
    }
    (output_dir / "demo_results.json").write_text(json.dumps(results, indent=2))
    print(f"done in {results['seconds']} s; results in {output_dir / 'demo_results.json'}")
    return results


def _loop_scaling(run: _Run, models: dict) -> dict[str, dict[int, float]]:
    print(
        f"[5/7] exact match on the {run.n_test} held-out problems at loops {list(run.loops_grid)} (trained at {TRAINED_LOOPS})"
    )
    curves = {
        name: {n: exact_match(model, run.tokenizer, run.data["test"], num_loops=n) for n in run.loops_grid}
        for name, model in models.items()
    }
    names = list(curves)
    print("  loops | " + " | ".join(f"{name:>24}" for name in names))
    for loops in run.loops_grid:
        print(f"  {loops:>5} | " + " | ".join(f"{curves[name][loops]:>24.1%}" for name in names))
    return curves


def _audits(run: _Run, models: dict) -> dict:
    from .diagnostics import audit
    from .provenance import data_fingerprint

    print(
        "[6/7] the computation audit of both loops on the held-out problems (start: the state after the first loop "
        "step; solved: after the last; do the extra steps compute?)"
    )
    data = tokenize_for_training(run.data["test"], run.tokenizer)
    reports = {}
    for name, model in models.items():
        reports[name] = report = audit(model, data, progress=False, seed=run.seed)
        report.data = {
            "name": f"{run.n_test} held-out {run.digits}-digit addition problems",
            "dataset": None,
            "fingerprint": data_fingerprint(fingerprints("addition", run.data["test"])),
            "held_out": True,
            "note": "no training problem is among them",
        }
        chance = report.chance
        print(
            f"  {name}: {report.verdict.upper()}, resting on: accuracy {100 * report.accuracy:.1f}% per sequence "
            f"against {100 * chance['majority']:.1f}% for the most common answer ({chance['margin_se']:+.1f} SE)"
        )
        print("\n".join("    - " + reason for reason in report.reasons[:2]))
    return reports


def _audit_summary(report) -> dict:
    """The verdict with what it rests on: accuracy against the majority class, and T1 with its standard error."""
    return {
        "verdict": report.verdict,
        "units": report.num_units,
        "accuracy": report.accuracy,
        "majority_class": report.chance["majority"],
        "margin_se": report.chance["margin_se"],
        "t1_change_points": report.substitution["change_points"],
        "t1_se_points": report.substitution["se_points"],
        "reasons": report.reasons,
    }


class _Run:
    """The demo's data and shared settings."""

    def __init__(self, output_dir: Path, quick: bool, seed: int):
        self.output_dir, self.quick, self.seed = output_dir, quick, seed
        self.digits, n_train, self.n_test = (2, 2000, 200) if not quick else (1, 80, 20)
        self.loops_grid = EVAL_LOOPS if not quick else (1, 2, 4, 8)
        print(
            f"[1/7] addition data: {self.digits}-digit operands, {n_train} train / {self.n_test} test problems "
            "(no overlap)"
        )
        self.data = build_addition_dataset(num_digits=self.digits, num_train=n_train, num_test=self.n_test, seed=seed)
        self.tokenizer = addition_tokenizer()
        train_tokenizer = copy.deepcopy(self.tokenizer)
        train_tokenizer.padding_side = "right"
        self.train_set = tokenize_for_training(self.data["train"], self.tokenizer)
        self.collator = DataCollatorForSeq2Seq(train_tokenizer, label_pad_token_id=-100)
        self.common = dict(
            per_device_train_batch_size=64,
            learning_rate=1e-3,
            lr_scheduler_type="cosine",
            weight_decay=0.01,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            seed=seed,
            disable_tqdm=quick,
        )


def _train_plain(run: _Run, steps: int):
    config = small_ouro_config(run.tokenizer, hidden_size=128 if not run.quick else 32, total_ut_steps=TRAINED_LOOPS)
    # the demo reads fixed loop counts, the state after the last step: that is what the last-step loss trains (with
    # the published expected-logits loss the gate learns to exit early and the late steps go untrained; README)
    config.exit_loss = "final"
    model = OuroForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"[2/7] training an Ouro model ({n_params / 1e6:.2f}M parameters, {config.num_hidden_layers} layers x "
        f"{config.total_ut_steps} loops) for {steps} steps"
    )
    args = TrainingArguments(
        output_dir=str(run.output_dir / "training"),
        max_steps=steps,
        warmup_steps=max(1, steps // 20),
        logging_steps=max(1, steps // 10),
        **run.common,
    )
    trainer = Trainer(model=model, args=args, train_dataset=run.train_set, data_collator=run.collator)
    trainer.train()
    return model, trainer


def _continue_plain(run: _Run, model, steps: int):
    """The baseline for STARS: a copy trained ``steps`` more steps the plain way (4 loops), with STARS' schedule."""
    plain = copy.deepcopy(model)
    print(f"[3/7] continuing a copy the plain way for {steps} steps (the baseline for STARS' {steps} steps)")
    args = TrainingArguments(
        output_dir=str(run.output_dir / "plain-continuation"),
        max_steps=steps,
        warmup_steps=max(1, steps // 10),
        logging_steps=max(1, steps // 6),
        **{**run.common, "learning_rate": 5e-4},
    )
    Trainer(model=plain, args=args, train_dataset=run.train_set, data_collator=run.collator).train()
    return plain


def _train_stars(run: _Run, model, stars_steps: int):
    from .trainers import StarsTrainer, StarsTrainingArguments

    stars_model = copy.deepcopy(model)
    print(
        f"[4/7] STARS fine-tuning of a copy for {stars_steps} steps: loop counts drawn log-normally in [2, 10] "
        "each step, plus the Jacobian spectral-radius penalty (hinge at 0.9, weight 0.1)"
    )
    stars_args = StarsTrainingArguments(
        output_dir=str(run.output_dir / "stars-training"),
        max_steps=stars_steps,
        warmup_steps=max(1, stars_steps // 10),
        logging_steps=max(1, stars_steps // 6),
        min_loops=2,
        max_loops=10,
        loop_log_mean=math.log(4),
        loop_log_std=0.35,
        jsrr_weight=0.1,
        jsrr_power_iters=2,
        jsrr_penalty="hinge",
        jsrr_target=0.9,
        **{**run.common, "learning_rate": 5e-4},
    )
    stars = StarsTrainer(model=stars_model, args=stars_args, train_dataset=run.train_set, data_collator=run.collator)
    stars.train()
    return stars_model, stars


def _write_folder(run: _Run, stages: tuple, curves: dict, report) -> Path:
    """The Hub-ready folder: weights, remote code, tokenizer, card, loop-scaling plot and JSON, audit, and the
    training history (``stages``: the trainers of the pre-training and of the STARS continuation)."""
    from .hub_cards.publish import record_training_stage, write_model_card
    from .plots import plot_loop_scaling
    from .provenance import weights_fingerprint

    stars = stages[-1]
    folder = run.output_dir / "model"
    stars.model.save_pretrained(folder)
    run.tokenizer.save_pretrained(folder)
    description = f"{len(run.data['train'])} generated {run.digits}-digit addition problems (seed {run.seed})"
    save_training_record(folder, "addition", fingerprints("addition", run.data["train"]), description)
    plot_loop_scaling(curves, folder / "loop_scaling.png", "Ouro on addition: accuracy vs loops", mark=TRAINED_LOOPS)
    report.weights = weights_fingerprint(folder)
    report.save(folder)
    scaling = {
        "weights": report.weights,
        "data": report.data,
        "accuracy": _keys(curves["STARS"]),
        "compared": {k: _keys(v) for k, v in curves.items()},
    }
    (folder / "loop_scaling.json").write_text(json.dumps(scaling, indent=2) + "\n")
    for trainer in stages:
        record_training_stage(folder, trainer)
    write_model_card(
        stars.model,
        folder,
        model_name="ouro-addition-stars (equilibria demo)",
        task_name=f"{run.digits}-digit addition",
    )
    print(f"[7/7] wrote a Hub-ready folder to {folder}:")
    for name, what in (
        ("model.safetensors", "the weights"),
        ("config.json, generation_config.json", f"the config (num_loops default {TRAINED_LOOPS})"),
        ("configuration_ouro.py, modeling_ouro.py, ...", "remote code: loads with trust_remote_code=True"),
        ("tokenizer.json, tokenizer_config.json", "the tokenizer"),
        ("README.md", "the model card (metadata with accuracy per loop count, usage, audit, training)"),
        ("loop_scaling.png, loop_scaling.json", "plain vs STARS accuracy per loop count (same steps)"),
        ("training_data.json", "fingerprints of the training problems (eval and audit exclude them)"),
        ("training_history.json", "both training stages (plain pre-training, then STARS), listed in the card"),
        ("audit.json, audit.png", f"the audit (verdict: {report.verdict})"),
    ):
        print(f"  {name:<46} {what}")
    return folder


def _reload(run: _Run, folder: Path) -> dict:
    """Generate from the saved folder, through the package and as remote code without it."""
    prompt = run.data["test"][0]["prompt"]
    sample_loops = (TRAINED_LOOPS, 2 * TRAINED_LOOPS)
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(folder)
    enc = loaded_tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    samples = {}
    for loops in sample_loops:
        with torch.no_grad():
            out = loaded.generate(**enc, max_new_tokens=run.digits + 2, do_sample=False, num_loops=loops)
        samples[f"package, num_loops={loops}"] = text = loaded_tokenizer.decode(out[0], skip_special_tokens=True)
        print(f"  reloaded with AutoModelForCausalLM ({type(loaded).__module__}), num_loops={loops}: {text!r}")
    for loops, text in generate_without_package(folder, prompt, sample_loops, max_new_tokens=run.digits + 2).items():
        samples[f"remote code, num_loops={loops}"] = text
        print(
            f"  reloaded with trust_remote_code in a process where `import equilibria` fails, "
            f"num_loops={loops}: {text!r}"
        )
    return samples


def _keys(accuracy: dict) -> dict:
    return {str(k): v for k, v in accuracy.items()}
