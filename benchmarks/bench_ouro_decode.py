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
import statistics
import sys
import time
from pathlib import Path

import doc_tables
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from equilibria import OuroCache, OuroConfig, OuroForCausalLM


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
    start = time.perf_counter()
    out = greedy(model, ids, new_tokens, **kwargs)
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


def bench_loop_overhead(args) -> dict:
    torch.manual_seed(0)
    ouro = OuroForCausalLM(ouro_config(args.width, args.intermediate, args.heads, args.layers, args.loops, args.vocab))
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=args.width,
            intermediate_size=args.intermediate,
            num_hidden_layers=args.layers * args.loops,
            num_attention_heads=args.heads,
            max_position_embeddings=2048,
        )
    )
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
    steps = out.cache.exit_steps[:, ids.shape[1] :]
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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
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
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--output-dir", type=Path, default=Path("docs/results"), help="where ouro_decode.json goes")
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.intermediate, args.heads, args.vocab = 64, 128, 4, 128
        args.prompt, args.new_tokens, args.cache_width, args.cache_tokens, args.repeats = 8, 8, 64, 16, 1
        args.calibration_steps = 3
    if args.threads:
        torch.set_num_threads(args.threads)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; sizes: width {args.width}, "
        f"intermediate {args.intermediate}, heads {args.heads}, L={args.layers}, k={args.loops}, "
        f"prompt {args.prompt}, new tokens {args.new_tokens}, repeats {args.repeats}",
        flush=True,
    )
    results = {"args": {k: str(v) for k, v in vars(args).items()}}
    results["loop_overhead"] = overhead = bench_loop_overhead(args)
    results["early_exit"] = early = bench_early_exit(args)
    results["cache"] = cache = bench_cache(args)

    rows = [
        (
            "loop overhead",
            f"Ouro {args.layers} layers x {args.loops} loops vs Llama {args.layers * args.loops} layers",
            f"{overhead['ouro_s']:.3f} s vs {overhead['llama_s']:.3f} s",
            f"{overhead['ratio']:.3f} [{overhead['ratio_range'][0]:.3f}, {overhead['ratio_range'][1]:.3f}]",
            "<= 1.10",
        ),
        (
            "early exit",
            f"{early['loops']} loops, threshold {early['threshold']}, mean exit {early['mean_exit_steps']:.2f} steps",
            f"{early['exit_s']:.3f} s vs {early['full_s']:.3f} s",
            f"{early['ratio']:.3f} [{early['ratio_range'][0]:.3f}, {early['ratio_range'][1]:.3f}]",
            "<= 0.60",
        ),
        (
            "KV cache",
            f"{cache['new_tokens']} new tokens, width {args.cache_width}",
            f"{cache['no_cache_s']:.3f} s vs {cache['cache_s']:.3f} s",
            f"{cache['speedup']:.2f}x [{cache['speedup_range'][0]:.2f}, {cache['speedup_range'][1]:.2f}]",
            "> 1",
        ),
    ]
    header = ("measure", "setting", "median times", "paired ratio [min, max]", "target")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(5)]
    for row in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    doc_tables.save_results((args.output_dir / "ouro_decode.json"), results, indent=2)
    print(f"results: {args.output_dir / 'ouro_decode.json'}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
