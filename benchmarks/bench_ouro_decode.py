"""Ouro decoding cost, measured side by side in one run (ratios, not absolute times).

1. Loop overhead: Ouro with L layers x k loops vs transformers' own LlamaForCausalLM with k*L layers of the
   same width (same MLP, attention and vocabulary sizes), greedy decoding of the same number of tokens with
   the KV cache. Target: ratio <= 1.10 (the loop adds nothing but the layers it runs; Ouro's layers carry two
   extra RMSNorms each, the sandwich norms, which are part of the architecture).
2. Early exit: the exit threshold is calibrated so that decoded tokens exit after about half of the loop
   steps on average; decode time with early exit / without. Target: <= 0.6.
3. KV cache: decoding 128 new tokens with the cache vs without it (the whole sequence re-run per token).

Timings interleave the contenders (A B A B ...) and compare medians, since machines are shared and noisy.

    python benchmarks/bench_ouro_decode.py            # the full run (a few minutes on 2 CPU cores)
    python benchmarks/bench_ouro_decode.py --quick    # tiny sizes, seconds; a test runs this

Results: ``docs/results/ouro_decode.json`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import results_json
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from equilibria import OuroCache, OuroConfig, OuroForCausalLM
from equilibria.evaluation import evaluation_data
from equilibria.loading import load_saved_model
from equilibria.modeling.compat import OUTPUT_CACHE_FIELD
from equilibria.tasks import addition_tokenizer, greedy_answers
from equilibria.tasks.tokenization import load_tokenizer


def greedy(model, ids, new_tokens, **kwargs):
    """Greedy decoding of exactly ``new_tokens`` tokens (no eos stop)."""
    with torch.no_grad():
        return model.generate(
            ids,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
            **kwargs,
        )


def timed_generate(model, ids, new_tokens, **kwargs) -> float:
    """Seconds of one greedy decode of ``new_tokens`` tokens (on a GPU, until its work is done)."""
    synchronize = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    synchronize()
    start = time.perf_counter()
    out = greedy(model, ids, new_tokens, **kwargs)
    synchronize()
    elapsed = time.perf_counter() - start
    assert out.shape[1] == ids.shape[1] + new_tokens
    return elapsed


def compare(contenders: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds per run for each contender, runs interleaved (A B A B ...), after one warm-up run each."""
    for run in contenders.values():
        run()
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            times[name].append(run())
    return times


def paired_ratio(times: dict[str, list[float]], a: str, b: str) -> tuple[float, float, float]:
    """Median, min and max of the ratios a/b of runs made back to back (robust to slow drifts of the machine)."""
    ratios = [x / y for x, y in zip(times[a], times[b])]
    return statistics.median(ratios), min(ratios), max(ratios)


def ouro_config(width, intermediate, heads, layers, loops, vocab) -> OuroConfig:
    return OuroConfig(
        vocab_size=vocab,
        hidden_size=width,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        max_position_embeddings=2048,
        total_ut_steps=loops,
    )


def llama_of_equal_depth(config: OuroConfig) -> LlamaConfig:
    """A Llama as deep as ``config``'s unrolled loop (``total_ut_steps x num_hidden_layers`` layers) and as wide
    (hidden, MLP, heads, key/value heads, head size, positions, vocabulary, RoPE, norm epsilon, tied embeddings)."""
    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers * config.total_ut_steps,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters=dict(config.rope_parameters),
        rms_norm_eps=config.rms_norm_eps,
        tie_word_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def bench_loop_overhead(args) -> dict:
    torch.manual_seed(0)
    ouro = OuroForCausalLM(ouro_config(args.width, args.intermediate, args.heads, args.layers, args.loops, args.vocab))
    llama = LlamaForCausalLM(llama_of_equal_depth(ouro.config))
    ouro.eval()
    llama.eval()
    ids = torch.randint(3, args.vocab, (1, args.prompt))
    times = compare(
        {
            "ouro": lambda: timed_generate(ouro, ids, args.new_tokens),
            "llama": lambda: timed_generate(llama, ids, args.new_tokens),
        },
        args.repeats,
    )
    ratio, low, high = paired_ratio(times, "ouro", "llama")
    return {
        "ouro_s": statistics.median(times["ouro"]),
        "llama_s": statistics.median(times["llama"]),
        "ratio": ratio,
        "ratio_range": [low, high],
        "ouro_params": sum(p.numel() for p in ouro.parameters()),
        "llama_params": sum(p.numel() for p in llama.parameters()),
    }


def mean_decode_exit_steps(model, ids, new_tokens, threshold) -> float:
    out = greedy(model, ids, new_tokens, exit_threshold=threshold, return_dict_in_generate=True, cache=OuroCache())
    steps = getattr(out, OUTPUT_CACHE_FIELD).exit_steps[:, ids.shape[1] :]  # the output's field: cache from 5.24
    return steps.float().mean().item()


def bench_early_exit(args) -> dict:
    torch.manual_seed(1)
    loops = args.exit_loops
    model = OuroForCausalLM(ouro_config(args.width, args.intermediate, args.heads, args.layers, loops, args.vocab))
    model.eval()
    ids = torch.randint(3, args.vocab, (1, args.prompt))
    # calibrate by bisection: the threshold whose decoded tokens exit after half of the loop steps on average
    # (the mean exit step grows with the threshold)
    target = loops / 2
    low, high = 0.5, 0.999
    tried = {}
    for _ in range(args.calibration_steps):
        middle = round((low + high) / 2, 4)
        tried[middle] = mean_decode_exit_steps(model, ids, args.new_tokens, middle)
        low, high = (middle, high) if tried[middle] < target else (low, middle)
    threshold = min(tried, key=lambda t: abs(tried[t] - target))
    times = compare(
        {
            "exit": lambda: timed_generate(model, ids, args.new_tokens, exit_threshold=threshold),
            "full": lambda: timed_generate(model, ids, args.new_tokens),
        },
        args.repeats,
    )
    ratio, low, high = paired_ratio(times, "exit", "full")
    measured_mean = mean_decode_exit_steps(model, ids, args.new_tokens, threshold)
    return {
        "loops": loops,
        "threshold": threshold,
        "calibration": tried,
        "mean_exit_steps": measured_mean,
        "exit_s": statistics.median(times["exit"]),
        "full_s": statistics.median(times["full"]),
        "ratio": ratio,
        "ratio_range": [low, high],
    }


def bench_cache(args) -> dict:
    torch.manual_seed(2)
    model = OuroForCausalLM(
        ouro_config(
            args.cache_width, 4 * args.cache_width, max(1, args.cache_width // 64), args.layers, args.loops, args.vocab
        )
    )
    model.eval()
    ids = torch.randint(3, args.vocab, (1, args.prompt))
    times = compare(
        {
            "cache": lambda: timed_generate(model, ids, args.cache_tokens, use_cache=True),
            "no_cache": lambda: timed_generate(model, ids, args.cache_tokens, use_cache=False),
        },
        args.repeats,
    )
    speedup, low, high = paired_ratio(times, "no_cache", "cache")
    return {
        "new_tokens": args.cache_tokens,
        "cache_s": statistics.median(times["cache"]),
        "no_cache_s": statistics.median(times["no_cache"]),
        "speedup": speedup,
        "speedup_range": [low, high],
    }


def bench_exit_at_one(args) -> dict:
    """Every token exits after step 1 of ``--loops`` (the gate's bias set high): the compute-saving readout in each
    cache mode (and with a static cache) against a one-loop run, the floor; the full run for scale."""
    torch.manual_seed(4)
    model = OuroForCausalLM(ouro_config(args.width, args.intermediate, args.heads, args.layers, args.loops, args.vocab))
    model.eval()
    with torch.no_grad():
        model.model.early_exit_gate.bias.fill_(30.0)  # exit probability 1 after the first step
    ids = torch.randint(3, args.vocab, (1, args.prompt))
    exit_run = partial(timed_generate, model, ids, args.new_tokens, exit_threshold=0.5)
    contenders = {
        "one_loop": partial(timed_generate, model, ids, args.new_tokens, num_loops=1),
        "exit_per_loop": exit_run,
        "exit_last_loop": partial(exit_run, recurrent_kv_cache_mode="last_loop"),
        "exit_static": partial(exit_run, cache_implementation="static"),
        "full": partial(timed_generate, model, ids, args.new_tokens),
    }
    times = compare(contenders, args.repeats)
    ratios = {name: paired_ratio(times, name, "one_loop") for name in contenders if name != "one_loop"}
    return {
        "loops": args.loops,
        "seconds": {name: statistics.median(t) for name, t in times.items()},
        "ratio_to_one_loop": {name: r[0] for name, r in ratios.items()},
        "ratio_range": {name: [r[1], r[2]] for name, r in ratios.items()},
    }


def exit_rows_at(args, batch: int) -> dict:
    """``exit_rows`` at one batch size."""
    torch.manual_seed(1)
    loops = args.exit_loops
    model = OuroForCausalLM(ouro_config(args.width, args.intermediate, args.heads, args.layers, loops, args.vocab))
    model.eval()
    ids = torch.randint(3, args.vocab, (batch, args.prompt))
    threshold = args.exit_rows_threshold
    steps = mean_decode_exit_steps(model, ids, args.new_tokens, threshold)

    def run(drop: bool, timed: bool = True):
        model.model.drop_exited_rows = drop
        try:
            return (timed_generate if timed else greedy)(model, ids, args.new_tokens, exit_threshold=threshold)
        finally:
            model.model.drop_exited_rows = True

    times = compare({"drop": partial(run, True), "all_rows": partial(run, False)}, args.repeats)
    ratio, low, high = paired_ratio(times, "drop", "all_rows")
    return {
        "loops": loops,
        "threshold": threshold,
        "mean_exit_steps": steps,
        "seconds": {name: statistics.median(t) for name, t in times.items()},
        "ratio": ratio,
        "ratio_range": [low, high],
        "same_tokens": bool(torch.equal(run(True, timed=False), run(False, timed=False))),
    }


def bench_exit_rows(args) -> dict:
    """Batches whose rows exit at different steps (random prompts, ``--exit-rows-threshold``), at each of
    ``--exit-batches``: single-token decoding that runs only the rows still looping against one that runs every row
    (exited ones frozen); both give the same tokens."""
    return {"batches": {str(batch): exit_rows_at(args, batch) for batch in args.exit_batches}}


def bench_compile(args) -> dict:
    """Greedy decoding with a compiled decoding step (a static cache, ``torch.compile`` through generate's compile
    config, whole graph) against eager decoding with the dynamic and with the static cache, on the loop-overhead
    model; the compile time of the first call, and how many graphs a sweep over ``--compile-loops`` compiles."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    torch.manual_seed(0)
    model = OuroForCausalLM(ouro_config(args.width, args.intermediate, args.heads, args.layers, args.loops, args.vocab))
    model.eval()
    ids = torch.randint(3, args.vocab, (1, args.prompt))
    config = CompileConfig(fullgraph=True, backend=args.compile_backend, mode=None)
    config._compile_all_devices = True  # transformers compiles by itself on accelerators only
    compiled = partial(
        timed_generate, model, ids, args.new_tokens, cache_implementation="static", compile_config=config
    )
    torch._dynamo.reset()
    counters["stats"].clear()
    first = compiled()  # compiles
    same = torch.equal(
        greedy(model, ids, args.new_tokens, cache_implementation="static", compile_config=config),
        greedy(model, ids, args.new_tokens),
    )
    contenders = {
        "compiled_static": compiled,
        "eager_dynamic": partial(timed_generate, model, ids, args.new_tokens),
        "eager_static": partial(timed_generate, model, ids, args.new_tokens, cache_implementation="static"),
    }
    times = compare(contenders, args.repeats)
    counters["stats"].clear()
    sweep = {}  # graphs compiled so far in the sweep, after each loop count (run twice, same lengths)
    for loops in args.compile_loops:
        for _ in range(2):
            compiled(num_loops=loops)
        sweep[str(loops)] = counters["stats"]["unique_graphs"]
    ratios = {name: paired_ratio(times, "compiled_static", name) for name in ("eager_dynamic", "eager_static")}
    return {
        "backend": args.compile_backend,
        "first_call_s": first,
        "seconds": {name: statistics.median(t) for name, t in times.items()},
        "ratio": {name: r[0] for name, r in ratios.items()},
        "ratio_range": {name: [r[1], r[2]] for name, r in ratios.items()},
        "same_tokens": bool(same),
        "graphs_after_loops": sweep,
    }


#: run in a fresh process per setting, so that its peak memory is its own: argv: dtype, mode, sizes as JSON, tokens
SCALE = r"""
import json, resource, sys, time
import torch
from equilibria import OuroConfig, OuroForCausalLM
dtype, mode, sizes, new_tokens = getattr(torch, sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
config = OuroConfig(**sizes, recurrent_kv_cache_mode=mode)
torch.set_default_dtype(dtype)  # built in the dtype: the peak memory is not a float32 model's
model = OuroForCausalLM(config).eval()
torch.set_default_dtype(torch.float32)
ids = torch.randint(3, config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0, eos_token_id=None)  # warm-up
    start = time.perf_counter()
    out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                         pad_token_id=0, eos_token_id=None, return_dict_in_generate=True)
    seconds = time.perf_counter() - start
held = sum(t.numel() * t.element_size() for layer in out.cache.layers for t in (layer.keys, layer.values))
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print("RESULT " + json.dumps({"tokens_per_s": new_tokens / seconds, "cache_bytes": held, "weight_bytes": weights,
                               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

#: the published Ouro-1.4B's sizes (its config.json)
OURO_1_4B = dict(
    vocab_size=49152,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_key_value_heads=16,
    head_dim=128,
    max_position_embeddings=65536,
    total_ut_steps=4,
    rms_norm_eps=1e-6,
)


def run_script(command: list[str], what: str, env: dict | None = None, timeout: int = 7200) -> dict:
    """Run ``command`` (a Python script in a process of its own) and return the JSON of the last line of its output
    that starts with ``RESULT ``; ``RuntimeError`` naming ``what``, with the output's tail, when there is none."""
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(
            f"{what} failed (exit {result.returncode}):\n{result.stdout[-1000:]}\n{result.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len("RESULT ") :])


def scale_run(dtype: str, mode: str, sizes: dict, new_tokens: int, threads: int | None) -> dict:
    """One setting of ``real_scale`` in a process of its own (its peak memory, tokens per second, cache bytes)."""
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    command = [sys.executable, "-c", SCALE, dtype, mode, json.dumps(sizes), str(new_tokens)]
    return run_script(command, f"real_scale {dtype} {mode}", env)


def logit_drift(sizes: dict, loops: list[int]) -> dict:
    """How far bfloat16 logits drift from float32 ones over deep loops: the same random weights and prompt in both
    dtypes, per loop count: the largest and the mean absolute difference of the logits, relative to the float32
    logits' standard deviation, and the share of positions whose top token agrees."""
    torch.manual_seed(0)
    model = OuroForCausalLM(OuroConfig(**sizes)).eval()
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    ids = torch.randint(3, sizes["vocab_size"], (1, 32), generator=torch.Generator().manual_seed(1))
    drift = {}
    with torch.no_grad():
        for n in loops:
            full = model(ids, num_loops=n, use_cache=False).logits.float()
            drift[str(n)] = drift_stats(full, bf16(ids, num_loops=n, use_cache=False).logits.float())
    return drift


def drift_stats(full: torch.Tensor, half: torch.Tensor) -> dict:
    """How far logits ``half`` are from ``full`` (float32, the same positions): the largest and the mean absolute
    difference relative to ``full``'s standard deviation, and the share of positions whose top token agrees."""
    half, scale = half.to(full.device), full.std().item()
    return {
        "max_abs_over_std": (half - full).abs().max().item() / scale,
        "mean_abs_over_std": (half - full).abs().mean().item() / scale,
        "top1_agreement": (half.argmax(-1) == full.argmax(-1)).float().mean().item(),
    }


def bench_real_scale(args) -> dict:
    """An Ouro-1.4B-shaped model with random weights on the CPU: per dtype (float32, bfloat16) and cache mode, the
    decode speed, peak memory and cache size (each in a process of its own), and the bfloat16 logits' drift from
    float32 at ``--drift-loops``."""
    sizes = (
        dict(OURO_1_4B)
        if not args.quick
        else dict(
            OURO_1_4B,
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            head_dim=16,
        )
    )
    runs = {
        f"{dtype}/{mode}": scale_run(dtype, mode, sizes, args.scale_tokens, args.threads)
        for dtype in ("float32", "bfloat16")
        for mode in MODES
    }
    return {
        "sizes": sizes,
        "new_tokens": args.scale_tokens,
        "runs": runs,
        "drift": logit_drift(sizes, args.drift_loops),
    }


MODES = ("per_loop", "last_loop")


def cache_bytes(cache) -> int:
    """The bytes of a KV cache's keys and values."""
    return sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values) if t is not None
    )


def paired_difference(a: list[bool], b: list[bool]) -> tuple[float, float]:
    """``(mean of b - a, its standard error)`` over paired rows (the same problems scored twice)."""
    diffs = [float(y) - float(x) for x, y in zip(a, b)]
    mean = statistics.fmean(diffs)
    spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
    return mean, spread / len(diffs) ** 0.5


def mode_decoding(model, tokenizer, prompts: list[str], new_tokens: int, loops: int, repeats: int) -> dict:
    """Per cache mode, decoding ``new_tokens`` for a batch of ``prompts``: the cache's bytes, and seconds (runs
    interleaved, median of paired ratios last_loop / per_loop)."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    run = dict(attention_mask=mask, num_loops=loops, return_dict_in_generate=True)
    held = {
        mode: cache_bytes(
            getattr(greedy(model, ids, new_tokens, recurrent_kv_cache_mode=mode, **run), OUTPUT_CACHE_FIELD)
        )
        for mode in MODES
    }
    times = compare(
        {
            mode: partial(
                timed_generate,
                model,
                ids,
                new_tokens,
                attention_mask=mask,
                num_loops=loops,
                recurrent_kv_cache_mode=mode,
            )
            for mode in MODES
        },
        repeats,
    )
    ratio, low, high = paired_ratio(times, "last_loop", "per_loop")
    return {
        "cache_bytes": held,
        "seconds": {m: statistics.median(t) for m, t in times.items()},
        "time_ratio": ratio,
        "time_ratio_range": [low, high],
        "batch": len(prompts),
        "new_tokens": new_tokens,
    }


def bench_cache_modes_on(folder: str, args) -> dict:
    """Per cache mode, on the saved model in ``folder``: exact match of its greedy answers to its held-out rows at
    each of ``--mode-loops`` (and the paired difference), how often the two modes answer alike, the cache's bytes and
    decode time."""
    model = load_saved_model(folder)
    data = evaluation_data(model, folder, num_examples=args.mode_examples, metric="exact_match")
    tokenizer = load_tokenizer(folder, "prompts")
    rows, result = data.rows, {"model": folder, "data": data.record, "loops": {}}
    new_tokens = max(len(a) for a in rows["answer"]) + 1  # greedy_answers' bound
    for loops in args.mode_loops:
        answers = {m: greedy_answers(model, tokenizer, rows, loops, recurrent_kv_cache_mode=m) for m in MODES}
        right = {m: [x.strip() == y.strip() for x, y in zip(answers[m], rows["answer"])] for m in MODES}
        difference, error = paired_difference(right["per_loop"], right["last_loop"])
        result["loops"][str(loops)] = {
            "exact_match": {m: statistics.fmean(right[m]) for m in MODES},
            "difference": difference,
            "difference_se": error,
            "same_answers": statistics.fmean(a == b for a, b in zip(answers["per_loop"], answers["last_loop"])),
            **mode_decoding(model, tokenizer, rows["prompt"][: args.mode_batch], new_tokens, loops, args.repeats),
        }
        print(f"{folder} at {loops} loops: {result['loops'][str(loops)]}", flush=True)
    return result


def quick_mode_model(folder: Path, seed: int = 3) -> str:
    """A tiny random Ouro saved with the addition tokenizer, its logits sharpened so that greedy choices are not
    decided by rounding noise (``--quick`` here and in ``bench_ouro_serving.py``)."""
    torch.manual_seed(seed)
    model = OuroForCausalLM(ouro_config(32, 64, 4, 2, 4, len(addition_tokenizer())))
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
        model.model.embed_tokens.weight.mul_(20.0)
    model.save_pretrained(folder)
    addition_tokenizer().save_pretrained(folder)
    return str(folder)


def bench_cache_modes(args) -> dict:
    """The cache modes on every model of ``--models`` (``--quick``: a tiny random one)."""
    models = args.models or ([quick_mode_model(args.output_dir / "quick_mode_model")] if args.quick else [])
    if not models:
        raise ValueError(
            "--sections cache_modes needs --models FOLDER[,FOLDER...] (saved Ouro models with a tokenizer)"
        )
    return {"models": [bench_cache_modes_on(folder, args) for folder in models]}


#: each section of the run: its name in --sections and the JSON, and its function
SECTIONS = {
    "loop_overhead": bench_loop_overhead,
    "early_exit": bench_early_exit,
    "cache": bench_cache,
    "cache_modes": bench_cache_modes,
    "exit_at_one": bench_exit_at_one,
    "exit_rows": bench_exit_rows,
    "compile": bench_compile,
    "real_scale": bench_real_scale,
}
DEFAULT_SECTIONS = ("loop_overhead", "early_exit", "cache")


def parse_args(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS), help=f"comma list of {list(SECTIONS)}")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2, help="L, distinct layers in the shared stack")
    parser.add_argument("--loops", type=int, default=4, help="k, loop steps (Llama gets k*L layers)")
    parser.add_argument("--exit-loops", type=int, default=8, help="loop steps for the early-exit benchmark")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--cache-width", type=int, default=512)
    parser.add_argument("--cache-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calibration-steps", type=int, default=7, help="bisection steps for the exit threshold")
    parser.add_argument("--scale-tokens", type=int, default=16, help="real_scale: tokens decoded per setting")
    parser.add_argument("--drift-loops", type=lambda t: [int(n) for n in t.split(",")], default=[4, 8, 16])
    parser.add_argument("--compile-backend", default="inductor", help="compile: torch.compile's backend")
    parser.add_argument("--compile-loops", type=lambda t: [int(n) for n in t.split(",")], default=[2, 4, 8])
    parser.add_argument(
        "--exit-batches", type=lambda t: [int(n) for n in t.split(",")], default=[8, 64], help="exit_rows: batch sizes"
    )
    parser.add_argument("--exit-rows-threshold", type=float, default=0.9, help="exit_rows: the exit threshold")
    parser.add_argument(
        "--models",
        type=lambda t: [m for m in t.split(",") if m],
        default=[],
        help="cache_modes: saved Ouro folders (with a tokenizer and held-out rows)",
    )
    parser.add_argument("--mode-loops", type=lambda t: [int(n) for n in t.split(",")], default=[4, 8])
    parser.add_argument("--mode-examples", type=int, default=None, help="cache_modes: at most this many held-out rows")
    parser.add_argument("--mode-batch", type=int, default=64, help="cache_modes: prompts in the timed batch")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--output-dir", type=Path, default=Path("docs/results"), help="where ouro_decode.json goes")
    args = parser.parse_args(argv)
    args.sections = [name for name in args.sections.split(",") if name]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {unknown}; choose from {list(SECTIONS)}")
    if args.quick:
        args.width, args.intermediate, args.heads, args.vocab = 64, 128, 4, 128
        args.prompt, args.new_tokens, args.cache_width, args.cache_tokens, args.repeats = 8, 8, 64, 16, 1
        args.calibration_steps, args.mode_examples, args.mode_batch = 3, args.mode_examples or 16, 8
        args.compile_backend = "eager"  # dynamo alone: the graph is whole without paying for code generation
        args.scale_tokens, args.drift_loops, args.exit_batches = 4, [2, 4], [4]
    return args


def print_table(results: dict, args) -> None:
    """The run's table of the loop overhead, early-exit and cache sections it ran."""
    overhead, early, cache = (results.get(name) for name in DEFAULT_SECTIONS)
    rows = []
    if overhead:
        rows.append(
            (
                "loop overhead",
                f"Ouro {args.layers} layers x {args.loops} loops vs Llama {args.layers * args.loops} layers",
                f"{overhead['ratio']:.3f} [{overhead['ratio_range'][0]:.3f}, {overhead['ratio_range'][1]:.3f}]",
                "<= 1.10",
            )
        )
    if early:
        rows.append(
            (
                "early exit",
                f"{early['loops']} loops, threshold {early['threshold']}, mean exit {early['mean_exit_steps']:.2f} steps",
                f"{early['ratio']:.3f} [{early['ratio_range'][0]:.3f}, {early['ratio_range'][1]:.3f}]",
                "<= 0.60",
            )
        )
    if cache:
        rows.append(
            (
                "KV cache",
                f"{cache['new_tokens']} new tokens, width {args.cache_width}",
                f"{cache['speedup']:.2f}x [{cache['speedup_range'][0]:.2f}, {cache['speedup_range'][1]:.2f}]",
                "> 1",
            )
        )
    header = ("measure", "setting", "paired ratio [min, max]", "target")
    for row in [header] + rows:
        print(
            "  ".join(
                str(c).ljust(w) for c, w in zip(row, [max(len(str(r[i])) for r in rows + [header]) for i in range(4)])
            )
        )


def main(argv=None) -> dict:
    """Run the chosen sections and write them into ``ouro_decode.json`` (the sections not run keep what the file
    held, so that long sections can run apart)."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; sections {args.sections}; sizes: width "
        f"{args.width}, intermediate {args.intermediate}, heads {args.heads}, L={args.layers}, k={args.loops}, "
        f"prompt {args.prompt}, new tokens {args.new_tokens}, repeats {args.repeats}",
        flush=True,
    )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / "ouro_decode.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    if any(name in DEFAULT_SECTIONS for name in args.sections):
        results["args"] = {k: str(v) for k, v in vars(args).items()}
    for name in args.sections:
        results[name] = SECTIONS[name](args)
        results.setdefault("commands", {})[name] = "python benchmarks/bench_ouro_decode.py " + " ".join(argv or [])
        results_json.save_results(path, results, indent=2)  # after each section: a killed run keeps what ended
    print_table(results, args)
    print(f"results: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
