"""The prepared GPU run (issue #61): the STARS reference recipe uncut, and an Ouro of Ouro-1.4B's size, measured on one
lent GPU so that its minutes go to measuring, not debugging.

Sections, each written as ``SECTION.json`` under ``--output-dir`` as soon as it (or, for ``stars_reference``, each of
its runs) ends, with the GPU's name, the torch and transformers versions, every setting and the results under the
section's name:

* ``smoke`` (seconds): the GPU is seen, bfloat16 works, one training step of each section's model (its time).
* ``stars_reference``: the STARS paper's addition claim at the published scale, through ``bench_stars_addition.py``
  with the ``reference_addition`` preset uncut (4-digit reversed addition; width 512, 8 heads, FFN 1024, one
  weight-tied block, attention dropout 0.1, tied embeddings; batch 512, 10,000 steps, AdamW 1e-4, cosine with 2,000
  warm-up steps, loops round(LogNormal(2, 0.7)) in [1, 100], penalty 0.1 after step 2,000; bf16 autocast, fused
  AdamW). Arms ``plain`` (4 loops), ``sampling`` and ``stars``, one seed of each first; each run is scored on the
  first 1,000 of 5,076 held-out problems at 1-100 loops. Runs already in ``--previous`` (the committed
  ``docs/results/gpu/stars_reference.json``) are not run again, so later device sessions add the missing seeds.
* ``ouro_real_size``: random weights at the published Ouro-1.4B config in bfloat16: greedy decode tokens/s (batch 1
  and 8, 128 new tokens after 512) per cache layout against transformers' Llama with 4x the layers at the same
  width (equal depth), in the same process; a static cache with a compiled decoding step; one early-exit decode with
  about half the tokens exiting; a STARS training step (full and LoRA, 2048 tokens, batch 1, gradient
  checkpointing, penalty on and off); the bfloat16 logits on the GPU against float32 ones on the CPU.

``--budget-s`` is respected between runs: what did not start is recorded as skipped with the reason.

    PYTHONPATH=src python3 benchmarks/gpu_run.py --sections smoke,stars_reference --budget-s 500 --output-dir $OUT
    PYTHONPATH=src python3 benchmarks/gpu_run.py --sections smoke,ouro_real_size --budget-s 500 --output-dir $OUT
    python benchmarks/gpu_run.py --quick --output-dir DIR     # every section tiny, on the CPU (a test runs this)
    python benchmarks/gpu_run.py --summarize --output-dir docs/results/gpu   # the sections into gpu_run.json

``docs/benchmarks/gpu.md`` has the device commands (wheels, carry) and the tables.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import torch
from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ouro_decode as decode  # noqa: E402
import bench_stars_addition as stars  # noqa: E402
import results_json  # noqa: E402

SECTIONS = ("smoke", "stars_reference", "ouro_real_size")
ARMS = ("plain", "sampling", "stars", "penalty")
# an arm -> bench_stars_addition's kind of training ("penalty": the penalty alone, at the fixed 4 loops)
ARM_KINDS = {"plain": "plain", "sampling": "sampling", "stars": "stars", "penalty": "jsrr"}
PREVIOUS = ROOT / "docs" / "results" / "gpu"


class Budget:
    """Seconds left of ``--budget-s`` (counted from the start of the run)."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def header(args) -> dict:
    """What every section's JSON starts with: the device, the versions, the command's settings."""
    import transformers

    cuda = torch.cuda.is_available() and not args.quick
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }


def save_section(args, name: str, results: dict) -> Path:
    """``SECTION.json`` under ``--output-dir``: the header and ``results`` under the section's name."""
    path = args.output_dir / f"{name}.json"
    results_json.save_results(path, {**header(args), name: results}, indent=1, default=str)
    return path


def device_of(args) -> torch.device:
    if args.quick or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_memory(device: torch.device) -> int | None:
    """Bytes of GPU memory at the peak since the last reset (``None`` on the CPU)."""
    return torch.cuda.max_memory_allocated() if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# ---- smoke ------------------------------------------------------------------------------------------------------


def timed_step(model, batch: dict, device: torch.device, **forward) -> float:
    """Seconds of one forward and backward of ``model`` on ``batch`` under bf16 autocast on a GPU."""
    synchronize(device)
    start = time.perf_counter()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        loss = model(**batch, **forward).loss
    loss.backward()
    synchronize(device)
    return time.perf_counter() - start


def smoke(args, budget: Budget) -> dict:
    """The GPU is seen, bfloat16 works, and one training step of each section's model runs (timed after a
    warm-up step)."""
    device = device_of(args)
    a = torch.randn(256, 256, device=device, dtype=torch.bfloat16)
    product = a @ a
    reference_args = stars_arguments(args)
    tokenizer = stars.addition_tokenizer(with_space=True)
    model = stars.build_model(reference_args, tokenizer, 0).to(device)
    ids = torch.randint(3, len(tokenizer), (16 if args.quick else 512, 16), device=device)
    batch = {"input_ids": ids, "labels": ids}
    steps = [timed_step(model, batch, device, num_loops=9) for _ in range(2)]
    big, big_batch = real_size_model(args, device), token_batch(args, device, 256 if not args.quick else 16)
    big.train()
    big_steps = [timed_step(big, big_batch, device, num_loops=4) for _ in range(2)]
    return {
        "cuda": device.type == "cuda",
        "bf16_matmul_finite": bool(torch.isfinite(product.float()).all()),
        "stars_reference_step_s": steps[-1],
        "stars_reference_step_at_loops": 9,
        "stars_reference_batch": int(ids.shape[0]),
        "ouro_real_size_step_s": big_steps[-1],
        "ouro_real_size_step_tokens": int(big_batch["input_ids"].shape[1]),
        "stars_reference_pipeline": pipeline_check(args),
        "budget_left_s": budget.left(),
    }


# ---- stars_reference --------------------------------------------------------------------------------------------


def stars_arguments(args, *extra: str):
    """``bench_stars_addition.py``'s arguments for the reference recipe uncut (``--quick``: its tiny run, with the
    reference's model options at toy width), then the flags ``extra``."""
    flags = ["--preset", "reference_addition", "--kinds", ",".join(ARM_KINDS[a] for a in args.arms)]
    flags += ["--save-steps", "100000", "--output-dir", str(args.work_dir / "stars_reference")]
    flags += ["--layers", "1", "--attention-dropout", "0.1", "--tie-embeddings"]
    if args.quick:  # --quick sets width 32
        return stars.parse([*flags, "--heads", "4", "--intermediate-size", "64", "--quick", *extra])
    flags += ["--width", "512", "--heads", "8", "--intermediate-size", "1024", "--test-eval", "1000"]
    flags += ["--train-size", str(args.train_size), "--device", "cuda", "--bf16", "--dataloader-workers", "4"]
    return stars.parse([*flags, *extra])


def pipeline_check(args) -> dict:
    """``stars_reference``'s whole path on the device at its sizes for 2 steps (the penalty on at the second):
    training, scoring at 1 and 100 loops, the loop trajectory. ``{"seconds", "accuracy"}``, or ``{"error"}``."""
    start = time.perf_counter()
    small = ["--steps", "2", "--train-size", "64", "--test-size", "16", "--test-eval", "16", "--eval-loops", "1,100"]
    try:
        sargs = stars_arguments(args, *small, "--output-dir", str(args.work_dir / "pipeline"))
        run = stars.train_one("stars", 0, sargs, stars.build_data(sargs))
    except Exception as error:  # recorded: the device's minutes must not go to runs that would fail the same way
        return {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
    return {"seconds": time.perf_counter() - start, "accuracy": run["accuracy"]}


def previous_runs(args) -> dict:
    """``{arm: {seed: run}}`` already measured (``--previous``'s ``stars_reference.json``), not run again."""
    path = args.previous / "stars_reference.json"
    if args.quick or not path.is_file():
        return {}
    return json.loads(path.read_text())["stars_reference"]["runs"]


def stars_reference(args, budget: Budget) -> dict:
    """The arms and seeds not measured yet, one run at a time while the budget lasts (a run's expected time: the
    longest so far, else ``--run-estimate-s``, which the smoke section sets from its step time); the section's JSON
    is rewritten after each run."""
    sargs = stars_arguments(args)
    (sargs.output_dir / "runs").mkdir(parents=True, exist_ok=True)
    data = stars.build_data(sargs)
    tokenized = stars.tokenize_for_training(data[0], data[3])  # once for every run
    runs, skipped, took = previous_runs(args), [], []
    results = {"recipe": stars.recipe_overrides(sargs), "train_size": len(data[0]), "runs": runs}
    for seed in args.seeds:
        for arm in args.arms:
            if str(seed) in runs.get(arm, {}):
                continue
            expected = max([*took, args.run_estimate_s])  # the smoke's estimate (at 9 loops) stays a floor
            if args.pipeline_error:
                skipped.append(
                    {"arm": arm, "seed": seed, "why": f"the smoke's pipeline check failed: {args.pipeline_error}"}
                )
                continue
            if budget.left() < expected:
                skipped.append(
                    {"arm": arm, "seed": seed, "why": f"{budget.left():.0f} s left, a run takes ~{expected:.0f} s"}
                )
                continue
            start = time.perf_counter()
            run = stars.train_one(ARM_KINDS[arm], seed, sargs, data, tokenized)
            took.append(time.perf_counter() - start)
            keyed = json.dumps({**run, "wall_s": took[-1]}, default=str)
            run = json.loads(keyed)  # the JSON's keys (loop counts as strings), as a later call reads them
            runs.setdefault(arm, {})[str(seed)] = run
            results.update(summary=stars.summarize(runs), skipped=skipped)
            save_section(args, "stars_reference", results)
    results.update(summary=stars.summarize(runs) if runs else None, skipped=skipped)
    return results


# ---- ouro_real_size ---------------------------------------------------------------------------------------------


def real_size_config(args, **overrides):
    """The published Ouro-1.4B's config (``--quick``: the same shape at toy sizes)."""
    from equilibria import OuroConfig

    sizes = dict(decode.OURO_1_4B)
    if args.quick:
        sizes.update(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2)
        sizes.update(num_attention_heads=4, num_key_value_heads=4, head_dim=16)
    return OuroConfig(**{**sizes, **overrides})


def real_size_model(args, device: torch.device, dtype: torch.dtype | None = None, **overrides):
    """Random weights at :func:`real_size_config` (seed 0), built on ``device`` in ``dtype`` (default: bfloat16 on
    a GPU, float32 on the CPU)."""
    from equilibria import OuroForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = OuroForCausalLM(real_size_config(args, **overrides))
    return model.to(dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32))


def llama_of_equal_depth(args, device: torch.device):
    """transformers' Llama as deep as the Ouro's unrolled loop (its 4 loops x its layers), as wide, with its heads and
    vocabulary (:func:`bench_ouro_decode.llama_of_equal_depth`), 4096 positions."""
    from transformers import LlamaForCausalLM

    config = decode.llama_of_equal_depth(real_size_config(args))
    config.max_position_embeddings = 4096
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model.to(torch.bfloat16) if device.type == "cuda" else model


def token_batch(args, device: torch.device, length: int, batch: int = 1) -> dict:
    vocab = real_size_config(args).vocab_size
    ids = torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(1)).to(device)
    return {"input_ids": ids, "labels": ids}


def decode_rates(args, device: torch.device, ouro, llama) -> dict:
    """Greedy decode at batch 1 and 8 (``--new-tokens`` after ``--prompt-tokens``): tokens per second of the Ouro
    per cache layout and of the Llama of equal depth, runs interleaved; the ratio of seconds per decode to the
    Llama's (median of paired ratios [min, max]); the peak memory of a decode of each."""
    out = {}
    for batch in (1, 8):
        ids = token_batch(args, device, args.prompt_tokens, batch)["input_ids"]
        runs = {mode: _decoder(ouro, ids, args, recurrent_kv_cache_mode=mode) for mode in decode.MODES}
        runs["llama"] = _decoder(llama, ids, args)
        times = decode.compare(runs, args.repeats)
        row = {"tokens_per_s": {k: batch * args.new_tokens / statistics.median(t) for k, t in times.items()}}
        for mode in decode.MODES:
            ratio, low, high = decode.paired_ratio(times, mode, "llama")
            row[f"{mode}_vs_llama"] = {"ratio": ratio, "range": [low, high]}
        row["peak_bytes"] = {name: _peak_of(run, device) for name, run in runs.items()}
        out[str(batch)] = row
    return out


def _decoder(model, ids, args, **kwargs):
    return lambda: decode.timed_generate(model, ids, args.new_tokens, **kwargs)


def _peak_of(run, device: torch.device) -> int | None:
    """Bytes of GPU memory a decode's peak holds above what was allocated before it (the loaded models)."""
    reset_peak(device)
    before = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    run()
    peak = peak_memory(device)
    return None if peak is None else peak - before


def compiled_decode(args, device: torch.device, ouro) -> dict:
    """A static cache with the decoding step compiled (generate's compile config, whole graph) against eager
    decoding with the dynamic cache, batch 1: the first call (compiles), then paired runs."""
    from transformers import CompileConfig

    ids = token_batch(args, device, args.prompt_tokens)["input_ids"]
    config = CompileConfig(fullgraph=True, backend="eager" if args.quick else "inductor", mode=None)
    config._compile_all_devices = True  # transformers compiles by itself on accelerators only
    compiled = _decoder(ouro, ids, args, cache_implementation="static", compile_config=config)
    torch._dynamo.reset()
    first = compiled()
    same = torch.equal(
        decode.greedy(ouro, ids, args.new_tokens, cache_implementation="static", compile_config=config),
        decode.greedy(ouro, ids, args.new_tokens),
    )
    times = decode.compare({"compiled_static": compiled, "eager_dynamic": _decoder(ouro, ids, args)}, args.repeats)
    ratio, low, high = decode.paired_ratio(times, "compiled_static", "eager_dynamic")
    return {"backend": config.backend, "first_call_s": first, "ratio": ratio, "range": [low, high], "same_tokens": same}


def early_exit_decode(args, device: torch.device, ouro) -> dict:
    """The exit threshold at which decoded tokens exit after about half the loop steps (bisection), and the decode
    time with it against the full loop, batch 1."""
    ids = token_batch(args, device, args.prompt_tokens)["input_ids"]
    loops, low, high, tried = ouro.config.total_ut_steps, 0.5, 0.999, {}
    for _ in range(args.calibration_steps):
        middle = round((low + high) / 2, 4)
        tried[middle] = decode.mean_decode_exit_steps(ouro, ids, args.new_tokens, middle)
        low, high = (middle, high) if tried[middle] < loops / 2 else (low, middle)
    threshold = min(tried, key=lambda t: abs(tried[t] - loops / 2))
    times = decode.compare(
        {"exit": _decoder(ouro, ids, args, exit_threshold=threshold), "full": _decoder(ouro, ids, args)}, args.repeats
    )
    ratio, low, high = decode.paired_ratio(times, "exit", "full")
    return {"threshold": threshold, "mean_exit_steps": tried[threshold], "calibration": tried, "ratio": ratio,
            "range": [low, high]}  # fmt: skip


class _StepTimes(TrainerCallback):
    """Seconds of every optimizer step (synchronized on a GPU)."""

    def __init__(self, device: torch.device):
        self.device, self.seconds = device, []

    def on_step_begin(self, *args, **kwargs):
        synchronize(self.device)
        self.start = time.perf_counter()

    def on_step_end(self, *args, **kwargs):
        synchronize(self.device)
        self.seconds.append(time.perf_counter() - self.start)


def training_step(args, device: torch.device, lora: bool, penalty: bool) -> dict:
    """``StarsTrainer`` steps of the real-size Ouro at ``--train-tokens`` tokens, batch 1, 4 loops, gradient
    checkpointing, bf16 autocast over float32 weights on a GPU, the penalty on or off, full or LoRA (r 16, every
    linear layer): the median step after the first, and the peak memory."""
    from datasets import Dataset

    from equilibria.trainers import StarsTrainer, StarsTrainingArguments

    reset_peak(device)
    model = real_size_model(args, device, torch.float32)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    ids = token_batch(args, device, args.train_tokens)["input_ids"][0].tolist()
    cuda = device.type == "cuda"
    targs = StarsTrainingArguments(
        output_dir=str(args.work_dir / "train_step"), max_steps=args.train_steps, per_device_train_batch_size=1,
        gradient_checkpointing=True, bf16=cuda, use_cpu=not cuda, optim="adamw_torch_fused" if cuda else "adamw_torch",
        min_loops=4, max_loops=4, jsrr_weight=0.1 if penalty else 0.0, learning_rate=1e-6, report_to=[],
        save_strategy="no", disable_tqdm=True, logging_steps=1,
    )  # fmt: skip
    timer = _StepTimes(device)
    rows = Dataset.from_dict({"input_ids": [ids] * args.train_steps, "labels": [ids] * args.train_steps})
    trainer = StarsTrainer(model=model, args=targs, train_dataset=rows, callbacks=[timer])
    trainer.train()
    peak = peak_memory(device)
    del trainer, model  # accelerate's wrapped forward makes the model refer to itself: collect it before the next
    gc.collect()
    reset_peak(device)
    return {"step_s": statistics.median(timer.seconds[1:] or timer.seconds), "peak_bytes": peak}


def training_steps(args, device: torch.device) -> dict:
    """:func:`training_step` full and LoRA, the penalty off and on, and the step-time ratio penalty on / off."""
    out = {}
    for adapter in ("lora", "full"):  # full with the penalty is the likeliest to run out of memory: last
        runs = {p: _recorded(training_step, args, device, adapter == "lora", p == "jsrr") for p in ("plain", "jsrr")}
        both = all("step_s" in run for run in runs.values())
        out[adapter] = {**runs, "jsrr_over_plain": runs["jsrr"]["step_s"] / runs["plain"]["step_s"] if both else None}
    return out


def _recorded(function, *args) -> dict:
    """``function(*args)``, or ``{"error": ...}`` when it raises (out of memory, say): the next setting still runs."""
    try:
        return function(*args)
    except Exception as error:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {"error": f"{type(error).__name__}: {str(error)[:500]}", "traceback": traceback.format_exc()[-2000:]}


def logits_difference(args, device: torch.device) -> dict:
    """The same weights in bfloat16 on ``device`` against float32 on the CPU, a 32-token prompt, at 4 and 8 loops
    (``bench_ouro_decode.drift_stats``)."""
    cpu = real_size_model(args, torch.device("cpu"), torch.float32).eval()
    half = copy.deepcopy(cpu).to(device, torch.bfloat16).eval()
    ids = token_batch(args, torch.device("cpu"), 32)["input_ids"]
    out = {}
    with torch.no_grad():
        for loops in (4, 8):
            full = cpu(ids, num_loops=loops, use_cache=False).logits.float()
            low = half(ids.to(device), num_loops=loops, use_cache=False).logits.float().cpu()
            out[str(loops)] = decode.drift_stats(full, low)
    return out


def ouro_real_size(args, budget: Budget) -> dict:
    """Each part of the section while the budget lasts (those that did not start are listed as skipped)."""
    device = device_of(args)
    results, skipped = {"config": real_size_config(args).to_dict()}, []
    ouro, llama = real_size_model(args, device).eval(), llama_of_equal_depth(args, device).eval()
    parts = {  # the compiled decode last: its compile time is the least predictable
        "decode": lambda: decode_rates(args, device, ouro, llama),
        "early_exit": lambda: early_exit_decode(args, device, ouro),
        "training_step": lambda: training_steps(args, device),
        "logits_bf16_vs_cpu_fp32": lambda: logits_difference(args, device),
        "compiled_decode": lambda: compiled_decode(args, device, real_size_model(args, device).eval()),
    }
    for name, part in parts.items():
        if name == "training_step":
            del ouro, llama  # the training steps build their own float32 models
            reset_peak(device)
        if budget.left() < args.part_estimate_s:
            skipped.append({"part": name, "why": f"{budget.left():.0f} s of the budget left"})
            continue
        results[name] = _recorded(part)  # an error is recorded, and the next part runs
        save_section(args, "ouro_real_size", {**results, "skipped": skipped})
    return {**results, "skipped": skipped}


# ---- the run ----------------------------------------------------------------------------------------------------

RUNNERS = {"smoke": smoke, "stars_reference": stars_reference, "ouro_real_size": ouro_real_size}


def summarize(args) -> Path:
    """``gpu_run.json`` under ``--output-dir``: every section's JSON there, each under its name (with its own
    device, versions and settings)."""
    merged = {}
    for name in SECTIONS:
        path = args.output_dir / f"{name}.json"
        if path.is_file():
            merged[name] = json.loads(path.read_text())
    if not merged:
        raise SystemExit(f"--summarize: no section JSON ({', '.join(SECTIONS)}) under {args.output_dir}")
    first = next(iter(merged.values()))
    out = {key: first[key] for key in ("device", "torch", "transformers", "cuda")}
    out.update({name: section[name] for name, section in merged.items()})
    out["sections"] = {name: {k: v for k, v in section.items() if k != name} for name, section in merged.items()}
    path = args.output_dir / "gpu_run.json"
    results_json.save_results(path, out, indent=1, default=str)
    return path


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="smoke,stars_reference", help=f"comma-separated, of {SECTIONS}")
    p.add_argument("--budget-s", type=float, default=500.0, help="seconds the sections may take (default 500)")
    p.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help=f"where the sections' JSON go (required to run sections; --summarize: default {PREVIOUS.relative_to(ROOT)})",
    )
    p.add_argument("--previous", type=Path, default=PREVIOUS, help="stars_reference runs already measured")
    p.add_argument("--quick", action="store_true", help="every section tiny, on the CPU (about a minute)")
    p.add_argument("--cpu", action="store_true", help="run the full-size sections without a CUDA GPU (hours, if ever)")
    p.add_argument("--summarize", action="store_true", help="only merge the sections' JSON into gpu_run.json")
    p.add_argument("--seeds", default="0", help="stars_reference: seeds (comma-separated; default 0)")
    p.add_argument("--arms", default="plain,stars,sampling", help=f"stars_reference: arms, of {ARMS}")
    p.add_argument("--train-size", type=int, default=500_000, help="stars_reference: training problems")
    p.add_argument("--run-estimate-s", type=float, default=150.0, help="stars_reference: a first run's expected s")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--train-tokens", type=int, default=2048)
    p.add_argument("--train-steps", type=int, default=4, help="ouro_real_size: StarsTrainer steps per setting")
    p.add_argument("--repeats", type=int, default=3, help="interleaved timed repeats per decode setting")
    p.add_argument("--calibration-steps", type=int, default=6, help="bisection steps of the early-exit threshold")
    p.add_argument("--part-estimate-s", type=float, default=60.0, help="ouro_real_size: budget a part needs")
    args = p.parse_args(argv)
    args.sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    args.arms = [arm.strip() for arm in args.arms.split(",") if arm.strip()]
    for flag, values, allowed in (("--sections", args.sections, SECTIONS), ("--arms", args.arms, ARMS)):
        if not values or set(values) - set(allowed):
            p.error(f"{flag} takes a comma-separated list of {', '.join(allowed)}; got {','.join(values)!r}")
    if not (args.summarize or args.quick or args.cpu or torch.cuda.is_available()):
        p.error(
            "no CUDA GPU is visible to torch: --quick runs every section tiny on the CPU (seconds), --cpu runs the "
            "full-size sections on it anyway (hours)"
        )
    if args.summarize:
        args.output_dir = args.output_dir or PREVIOUS
    elif args.output_dir is None:
        p.error("--output-dir is required: the folder the sections' JSON are written to (the device run: $OUT)")
    if args.quick and not args.summarize and args.output_dir.resolve() == PREVIOUS.resolve():
        p.error(f"--quick writes toy results: give it an --output-dir other than {PREVIOUS.relative_to(ROOT)}")
    args.seeds = [int(seed) for seed in args.seeds.split(",")]
    args.work_dir = Path(tempfile.mkdtemp(prefix="gpu_run-"))  # checkpoints and scratch: not under --output-dir
    args.pipeline_error = None  # the smoke's pipeline check sets it
    if args.quick:
        args.sections, args.seeds = list(SECTIONS), [0]
        args.prompt_tokens, args.new_tokens, args.train_tokens, args.train_steps = 16, 4, 32, 2
        args.repeats, args.calibration_steps, args.part_estimate_s = 1, 2, 0.0
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if args.summarize:
        print(f"wrote {summarize(args)}")
        return json.loads((args.output_dir / "gpu_run.json").read_text())
    budget, done = Budget(args.budget_s), {}
    for name in args.sections:
        start = time.perf_counter()
        done[name] = RUNNERS[name](args, budget)
        if name == "smoke":
            args.pipeline_error = done[name]["stars_reference_pipeline"].get("error")
        if name == "smoke" and not args.quick:  # a reference run's expected time: its steps at the smoke's step time
            args.run_estimate_s = done[name]["stars_reference_step_s"] * 10_000 + 60
        path = save_section(args, name, done[name])
        print(f"{name}: {time.perf_counter() - start:.0f} s, wrote {path} ({budget.left():.0f} s of the budget left)")
    if args.quick:
        print(f"wrote {summarize(args)}")
    return done


if __name__ == "__main__":
    main()
