"""The main job: train a small Ouro looped LM on addition, evaluate it across loop counts, write a Hub-ready
folder and load it back (through the package and as remote code)."""

from __future__ import annotations

import copy
import json
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

from .modeling import OuroForCausalLM
from .tasks import addition_tokenizer, build_addition_dataset, exact_match, small_ouro_config, tokenize_for_training

EVAL_LOOPS = (1, 2, 4, 8)


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


def run_demo(output_dir: str | Path = "equilibria-demo", steps: int = 1500, quick: bool = False, seed: int = 0) -> dict:
    """Run the demo and return its results (also written to ``output_dir/demo_results.json``)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    output_dir = Path(output_dir)
    set_seed(seed)
    started = time.time()
    if quick:
        steps = min(steps, 20)
    digits, n_train, n_test = (2, 2000, 200) if not quick else (1, 80, 20)

    print(f"[1/4] addition data: {digits}-digit operands, {n_train} train / {n_test} test problems (no overlap)")
    data = build_addition_dataset(num_digits=digits, num_train=n_train, num_test=n_test, seed=seed)
    tokenizer = addition_tokenizer()
    train_tokenizer = copy.deepcopy(tokenizer)
    train_tokenizer.padding_side = "right"
    train_set = tokenize_for_training(data["train"], tokenizer)

    config = small_ouro_config(tokenizer, hidden_size=128 if not quick else 32, total_ut_steps=4)
    model = OuroForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"[2/4] training an Ouro model ({n_params / 1e6:.2f}M parameters, {config.num_hidden_layers} layers x "
        f"{config.total_ut_steps} loops) for {steps} steps"
    )
    args = TrainingArguments(
        output_dir=str(output_dir / "training"),
        max_steps=steps,
        per_device_train_batch_size=64,
        learning_rate=1e-3,
        warmup_steps=max(1, steps // 20),
        lr_scheduler_type="cosine",
        weight_decay=0.01,
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
        disable_tqdm=quick,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        data_collator=DataCollatorForSeq2Seq(train_tokenizer, label_pad_token_id=-100),
        processing_class=tokenizer,
    )
    trainer.train()

    print(f"[3/4] exact match on the test split at loops {list(EVAL_LOOPS)} (trained at {config.total_ut_steps})")
    accuracy = {loops: exact_match(model, tokenizer, data["test"], num_loops=loops) for loops in EVAL_LOOPS}
    print("  loops | exact match")
    for loops, acc in accuracy.items():
        print(f"  {loops:>5} | {acc:6.1%}")

    folder = output_dir / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    print(f"[4/4] wrote a Hub-ready folder to {folder}: " + ", ".join(sorted(p.name for p in folder.iterdir())))

    prompt = data["test"][0]["prompt"]
    sample_loops = (config.total_ut_steps, 2 * config.total_ut_steps)
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(folder)
    enc = loaded_tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    samples = {}
    for loops in sample_loops:
        with torch.no_grad():
            out = loaded.generate(**enc, max_new_tokens=digits + 2, do_sample=False, num_loops=loops)
        samples[f"package, num_loops={loops}"] = text = loaded_tokenizer.decode(out[0], skip_special_tokens=True)
        print(f"  reloaded with AutoModelForCausalLM ({type(loaded).__module__}), num_loops={loops}: {text!r}")
    for loops, text in generate_without_package(folder, prompt, sample_loops, max_new_tokens=digits + 2).items():
        samples[f"remote code, num_loops={loops}"] = text
        print(
            f"  reloaded with trust_remote_code in a process where `import equilibria` fails, "
            f"num_loops={loops}: {text!r}"
        )

    results = {
        "accuracy_by_loops": {str(k): v for k, v in accuracy.items()},
        "trained_loops": config.total_ut_steps,
        "steps": steps,
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
