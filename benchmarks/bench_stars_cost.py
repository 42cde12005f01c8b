"""What the JSRR penalty costs: a STARS training step against a plain one, side by side, and where the time goes.

One ``StarsTrainer.training_step`` (forward and backward, no optimizer step) on the same model and batch at a fixed
loop count: plain (``jsrr_weight=0``) and with the penalty at 1, 2 and 4 power iterations, for each estimator. The
contenders are interleaved and the table gives the median of the per-repeat ratios to the plain step. The
breakdown times the penalty's parts alone on the same state: the extra loop-step forward at ``h_T``, the power
iterations, and the backward of the penalty (a double backward through one loop step).

    python benchmarks/bench_stars_cost.py           # full run, a few minutes on 2 CPU cores
    python benchmarks/bench_stars_cost.py --quick   # seconds; a test runs this

Results: ``docs/results/stars_cost.json`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import results_json
import torch

from equilibria import OuroConfig, OuroForCausalLM
from equilibria.modeling.regularization import spectral_radius
from equilibria.trainers import StarsTrainer, StarsTrainingArguments


def make_model(width: int, layers: int, vocab: int) -> OuroForCausalLM:
    torch.manual_seed(0)
    config = OuroConfig(
        vocab_size=vocab,
        hidden_size=width,
        intermediate_size=4 * width,
        num_hidden_layers=layers,
        num_attention_heads=max(1, width // 32),
        total_ut_steps=4,
        exit_loss="final",
    )  # fmt: skip  (the last-step loss, as recorded: the cost of STARS' own parts, not of the exit loss)
    return OuroForCausalLM(config).train()


# the cheaper forms: (name, jsrr_probe, jsrr_sample_fraction), one vjp iteration each
CHEAPER = (("batch@1", "batch", 1.0), ("vjp@1 rows 1/4", "sequence", 0.25), ("batch@1 rows 1/4", "batch", 0.25))


def trainer_for(
    model,
    out: str,
    loops: int,
    weight: float,
    iters: int,
    estimator: str,
    probe: str = "sequence",
    fraction: float = 1.0,
) -> StarsTrainer:
    args = StarsTrainingArguments(
        output_dir=out, use_cpu=True, report_to=[], min_loops=loops, max_loops=loops, loop_log_std=0.0,
        jsrr_weight=weight, jsrr_power_iters=iters, jsrr_estimator=estimator, jsrr_probe=probe,
        jsrr_sample_fraction=fraction, disable_tqdm=True,
    )  # fmt: skip
    trainer = StarsTrainer(model=model, args=args)
    trainer.current_gradient_accumulation_steps = 1  # set by train(); training_step is called directly here
    return trainer


def step_times(model, batch: dict, loops: int, repeats: int) -> dict:
    """Median ratio of each contender's training step to the plain one (runs interleaved)."""
    with tempfile.TemporaryDirectory() as out:
        contenders = {"plain": trainer_for(model, out, loops, 0.0, 1, "vjp")}
        for estimator in ("vjp", "jvp"):
            for iters in (1, 2, 4):
                contenders[f"{estimator}@{iters}"] = trainer_for(model, out, loops, 0.1, iters, estimator)
        for name, probe, fraction in CHEAPER:
            contenders[name] = trainer_for(model, out, loops, 0.1, 1, "vjp", probe, fraction)
        times = {name: [] for name in contenders}
        for repeat in range(repeats + 1):
            for name, trainer in contenders.items():
                start = time.perf_counter()
                trainer.training_step(model, dict(batch))
                if repeat:  # the first round warms up
                    times[name].append(time.perf_counter() - start)
                model.zero_grad(set_to_none=True)
    plain = times.pop("plain")
    result = {"plain_seconds": statistics.median(plain)}
    for name, values in times.items():
        result[name] = statistics.median(t / p for t, p in zip(values, plain))
    return result


def breakdown(model, batch: dict, loops: int, repeats: int) -> dict:
    """Seconds of the penalty's parts at one vjp iteration: loop-step forward, product, penalty backward."""
    ids = batch["input_ids"]
    with torch.no_grad():
        h = model.model(ids, num_loops=loops).last_hidden_state
    parts = {"lm_forward_backward": [], "penalty_total": [], "penalty_forward_and_product": []}
    for _ in range(repeats + 1):
        start = time.perf_counter()
        model(**batch, num_loops=loops, use_cache=False).loss.backward()
        lm = time.perf_counter() - start
        start = time.perf_counter()
        rho = spectral_radius(model.model.loop_map(ids), h, num_iters=1)
        forward = time.perf_counter() - start
        (rho**2).mean().backward()
        total = time.perf_counter() - start
        model.zero_grad(set_to_none=True)
        for key, value in zip(parts, (lm, total, forward)):
            parts[key].append(value)
    out = {key: statistics.median(values[1:]) for key, values in parts.items()}
    out["penalty_backward"] = out["penalty_total"] - out["penalty_forward_and_product"]
    return out


def flat_gradient(value: torch.Tensor, params: list) -> torch.Tensor:
    grads = torch.autograd.grad(value, params, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).flatten() for g, p in zip(grads, params)])


def sampling_error(model, batch: dict, loops: int, fraction: float, draws: int) -> dict:
    """How far the penalty on a ``fraction`` of the sequences is from the full one on the same states: over
    ``draws`` steps (each its own probes and rows), the relative bias and the mean relative error of the penalty's
    value, and the mean cosine between its gradient and the full penalty's (one vjp iteration, per-sequence probes)."""
    from equilibria.trainers.stars import penalty_rows, row_probes

    inputs = {"input_ids": batch["input_ids"]}
    rows = batch["input_ids"].shape[0]
    params = [p for p in model.parameters() if p.requires_grad]
    values, errors, cosines = [], [], []
    for step in range(draws):
        start = row_probes(inputs, model.config.hidden_size, seed=0, step=step)
        picked = penalty_rows(inputs, fraction, seed=0, step=step)
        common = dict(num_loops=loops, spectral_radius_iters=1, spectral_radius_start=start, use_cache=False)
        full = (model(**inputs, **common).spectral_radius ** 2).mean()
        part = (model(**inputs, **common, spectral_radius_rows=picked).spectral_radius ** 2).sum() / (fraction * rows)
        g_full = flat_gradient(full, params)
        g_part = flat_gradient(part, params) if picked.numel() else torch.zeros_like(g_full)
        values.append((full.item(), part.item()))
        errors.append(abs(part.item() - full.item()) / full.item())
        cosines.append(torch.nn.functional.cosine_similarity(g_full, g_part, dim=0).item())
    mean_full = statistics.fmean(v[0] for v in values)
    return {
        "fraction": fraction,
        "draws": draws,
        "relative_bias": statistics.fmean(v[1] - v[0] for v in values) / mean_full,
        "mean_relative_error": statistics.fmean(errors),
        "gradient_cosine": statistics.fmean(cosines),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--loops", default="4,8", help="loop counts (the issue measures 4 and 8)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--draws", type=int, default=32, help="steps over which the sampled penalty's error is measured"
    )
    parser.add_argument("--output-dir", type=Path, default=Path("docs/results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.batch, args.seq_len, args.vocab, args.repeats, args.loops = 32, 4, 8, 64, 1, "2"
        args.draws = 3
    model = make_model(args.width, args.layers, args.vocab)
    ids = torch.randint(3, args.vocab, (args.batch, args.seq_len), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids.clone()}
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "by_loops": {}}
    print(
        f"width {args.width}, {args.layers} layers, batch {args.batch} x {args.seq_len} tokens, {args.repeats} repeats"
    )
    for loops in (int(x) for x in args.loops.split(",")):
        row = step_times(model, batch, loops, args.repeats)
        row["breakdown"] = breakdown(model, batch, loops, args.repeats)
        row["sampling_error"] = sampling_error(model, batch, loops, 0.25, args.draws)
        results["by_loops"][str(loops)] = row
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in row.items() if "@" in k)
        e = row["sampling_error"]
        print(
            f"  penalty on 1/4 of the sequences against all: bias {e['relative_bias']:+.1%}, mean |error| "
            f"{e['mean_relative_error']:.1%} of the value, gradient cosine {e['gradient_cosine']:.2f} ({e['draws']} draws)"
        )
        print(f"{loops} loops: plain step {row['plain_seconds']:.3f} s; STARS step / plain: {ratios}")
        b = row["breakdown"]
        print(
            f"  where the vjp@1 penalty's time goes: loop-step forward + product {b['penalty_forward_and_product']:.3f}"
            f" s, penalty backward {b['penalty_backward']:.3f} s (LM forward + backward {b['lm_forward_backward']:.3f} s)"
        )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results_json.save_results((args.output_dir / "stars_cost.json"), results, indent=1)
    print(f"results: {args.output_dir / 'stars_cost.json'}")
    return results


if __name__ == "__main__":
    main()
