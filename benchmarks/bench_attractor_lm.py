"""Attractor language models against a parameter-matched transformer and an unrolled looped baseline, on real text.

The text every machine has: the Python standard library's own source files (tests excluded), split by file into
training and validation files (a file's SHA-1 of its relative path decides, about 1 in 20 to validation), with a
byte-level BPE tokenizer (``tokenizers``) trained on the training files only. One run trains one model (``--kind``)
on the same tokens in the same order (``--steps`` x ``--batch-size`` blocks of ``--seq-len`` tokens):

* ``llama``: ``LlamaForCausalLM`` with ``backbone + attractor`` layers (the same parameter count);
* ``attractor-paper`` / ``attractor-gated``: ``AttractorForCausalLM`` with the paper's map or the gated one, the
  one-step gradient, Anderson within ``--budget`` iterations to ``--tol``;
* ``looped``: the same blocks looped a fixed ``--loops`` times, backpropagating through every loop (the paper's map,
  Picard iteration at a tolerance never reached, ``gradient_mode="unrolled"``): how looped models such as Parcae
  train. ``parcae-lm`` 0.1.0 on PyPI installs but holds no code, so this stands in for it.

Recorded: validation perplexity (every validation token, ``--val-tokens`` at most), training FLOPs counted with
``torch.utils.flop_counter.FlopCounterMode`` on every ``--flop-every``-th step (the solver's iterations as they ran)
and scaled to all steps, wall time, the bytes autograd saves for one training step and the peak resident-memory
increase over training. Parameter-matched means equal parameters: the looped and Attractor models spend more FLOPs per token.

    for seed in 0 1 2; do for kind in llama attractor-paper attractor-gated looped; do
      python benchmarks/bench_attractor_lm.py --kind $kind --seed $seed; done; done
    python benchmarks/bench_attractor_lm.py --plot    # perplexity against FLOPs and memory, from every run
    python benchmarks/bench_attractor_lm.py --quick --kind attractor-paper    # seconds; a test runs this
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import resource
import sys
import sysconfig
import time
from pathlib import Path

import results_json
import torch
from bench_attractor_memory import rss_bytes
from bench_stars_addition import common_training_args
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments, set_seed

from equilibria import AttractorConfig, AttractorForCausalLM
from equilibria.diagnostics import saved_for_backward
from equilibria.trainers import AttractorTrainer, AttractorTrainingArguments

KINDS = ("llama", "attractor-paper", "attractor-gated", "looped")
RESULTS = Path("docs/results/attractor_lm")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--plot", action="store_true", help="plot every saved run (perplexity vs FLOPs and memory)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny run for a smoke test")
    p.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary size")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--width", type=int, default=192)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--backbone-layers", type=int, default=2)
    p.add_argument("--attractor-layers", type=int, default=2)
    p.add_argument("--budget", type=int, default=8, help="Attractor: solver iterations at most")
    p.add_argument("--tol", type=float, default=1e-2, help="Attractor: the solver's relative-residual tolerance")
    p.add_argument("--loops", type=int, default=4, help="looped: loops of the attractor blocks (backprop through all)")
    p.add_argument("--val-tokens", type=int, default=65536)
    p.add_argument("--flop-every", type=int, default=25)
    p.add_argument("--output-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if not args.plot and args.kind is None:
        p.error("--kind is required (or --plot)")
    if args.quick:
        args.vocab, args.seq_len, args.batch_size, args.steps, args.width = 300, 32, 4, 4, 32
        args.budget, args.loops, args.val_tokens, args.flop_every, args.max_files = 4, 2, 512, 2, 12
    else:
        args.max_files = None
    return args


def stdlib_split(max_files: int | None = None) -> tuple[list[Path], list[Path]]:
    """The standard library's ``.py`` files without tests and installed packages, split by file: ``(train, val)``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test"}
    files = sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))
    to_val = [int(hashlib.sha1(str(p.relative_to(root)).encode()).hexdigest(), 16) % 20 == 0 for p in files]
    train, val = [p for p, v in zip(files, to_val) if not v], [p for p, v in zip(files, to_val) if v]
    return (train[:max_files], val[: max(1, max_files // 4)]) if max_files else (train, val)


def load_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(files: list[Path], vocab: int):
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator((load_text(p) for p in files), vocab_size=vocab, special_tokens=["<|file|>"])
    return tokenizer


def token_blocks(tokenizer, files: list[Path], seq_len: int, limit: int | None = None) -> torch.Tensor:
    """The files' tokens, each file followed by the separator, cut into ``(n, seq_len)`` blocks (``limit``: at most
    that many tokens)."""
    separator = tokenizer.token_to_id("<|file|>")
    ids: list[int] = []
    for path in files:
        ids += tokenizer.encode(load_text(path)).ids + [separator]
        if limit is not None and len(ids) >= limit:
            break
    ids = ids[:limit] if limit is not None else ids
    n = len(ids) // seq_len
    return torch.tensor(ids[: n * seq_len]).view(n, seq_len)


def build_data(args) -> dict:
    """Tokenizer, training blocks and validation blocks, cached under the output folder (not committed)."""
    cache = (
        args.output_dir / "cache" / f"stdlib-{sys.version_info[0]}.{sys.version_info[1]}-{args.vocab}-{args.seq_len}"
    )
    cache = cache.with_name(cache.name + ("-quick" if args.quick else "") + ".pt")
    if cache.exists():
        return torch.load(cache)
    train_files, val_files = stdlib_split(args.max_files)
    tokenizer = train_tokenizer(train_files, args.vocab)
    data = {
        "train": token_blocks(tokenizer, train_files, args.seq_len),
        "val": token_blocks(tokenizer, val_files, args.seq_len, args.val_tokens),
        "files": {"train": len(train_files), "val": len(val_files)},
        "vocab": tokenizer.get_vocab_size(),
        "python": sysconfig.get_python_version(),
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, cache)
    return data


def build_model(args, vocab: int):
    """The run's model (seeded), all kinds with the same embedding, layer sizes and layer count."""
    set_seed(args.seed)
    sizes = dict(
        vocab_size=vocab,
        hidden_size=args.width,
        intermediate_size=round(8 * args.width / 3),
        num_attention_heads=args.heads,
        max_position_embeddings=args.seq_len,
        tie_word_embeddings=True,
    )
    if args.kind == "llama":
        return LlamaForCausalLM(LlamaConfig(num_hidden_layers=args.backbone_layers + args.attractor_layers, **sizes))
    layers = dict(num_backbone_layers=args.backbone_layers, num_attractor_layers=args.attractor_layers, **sizes)
    if args.kind == "looped":
        solve = dict(num_loops=args.loops, solver="picard", solver_tol=1e-30, gradient_mode="unrolled")
        return AttractorForCausalLM(AttractorConfig(residual_form="paper", **solve, **layers))
    solve = dict(num_loops=args.budget, solver_tol=args.tol, gradient_mode="one_step")
    return AttractorForCausalLM(AttractorConfig(residual_form=args.kind.split("-")[1], **solve, **layers))


class FlopSampler(TrainerCallback):
    """Counts the FLOPs of every ``every``-th training step (forward, backward and the solver's iterations as they
    ran) with ``FlopCounterMode``; ``per_step`` is their mean."""

    def __init__(self, every: int):
        self.every, self.counts, self.mode = every, [], None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            from torch.utils.flop_counter import FlopCounterMode

            self.mode = FlopCounterMode(display=False)
            self.mode.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.counts.append(self.mode.get_total_flops())
            self.mode = None

    @property
    def per_step(self) -> float:
        return sum(self.counts) / max(1, len(self.counts))


class Blocks(torch.utils.data.Dataset):
    def __init__(self, blocks: torch.Tensor):
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


@torch.no_grad()
def perplexity(model, blocks: torch.Tensor, batch_size: int = 16) -> float:
    """exp of the mean next-token loss over every validation token."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(blocks), batch_size):
        ids = blocks[start : start + batch_size]
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        n = ids.numel() - ids.shape[0]
        total, count = total + float(loss) * n, count + n
    return math.exp(total / count)


def saved_bytes(model, ids: torch.Tensor) -> int:
    """Bytes of the distinct tensors autograd keeps for one training step's backward pass."""
    model.train()
    saved = saved_for_backward(lambda: model(input_ids=ids, labels=ids, use_cache=False).loss.backward())
    model.zero_grad()
    return saved


def training_arguments(args):
    """The shared benchmark recipe (cosine schedule, 5% warm-up, clipping at 1), with a weight decay of 0.1."""
    common = {**common_training_args(args, "run"), "weight_decay": 0.1}
    return TrainingArguments(**common) if args.kind == "llama" else AttractorTrainingArguments(**common)


def plot(folder: Path) -> Path:
    """Validation perplexity against training FLOPs and against saved-for-backward memory, one point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for kind, marker in zip(KINDS, "osx^"):
        runs = [json.loads(p.read_text()) for p in sorted((folder / kind).glob("seed*.json"))]
        if not runs:
            continue
        ppl = [r["val_perplexity"] for r in runs]
        axes[0].scatter([r["train_flops"] / 1e12 for r in runs], ppl, marker=marker, label=kind)
        axes[1].scatter([r["saved_bytes"] / 2**20 for r in runs], ppl, marker=marker, label=kind)
    axes[0].set_xlabel("training TFLOPs (counted)")
    axes[1].set_xlabel("saved for backward, one step (MiB)")
    for ax in axes:
        ax.set_ylabel("validation perplexity")
        ax.legend(fontsize=8)
    fig.suptitle("Attractor LMs vs a transformer and a looped baseline (one point per seed)")
    fig.tight_layout()
    path = folder / "lm.png"
    fig.savefig(path, dpi=120)
    return path


def main(argv=None) -> dict:
    args = parse(argv)
    if args.plot:
        print(f"wrote {plot(args.output_dir)}")
        return {}
    data = build_data(args)
    model = build_model(args, data["vocab"])
    params = sum(p.numel() for p in model.parameters())
    tokens = args.steps * args.batch_size * args.seq_len
    print(
        f"{args.kind}, seed {args.seed}: {params:,} parameters; {tokens:,} training tokens of {data['train'].numel():,}"
    )
    flops = FlopSampler(args.flop_every)
    trainer_class = Trainer if args.kind == "llama" else AttractorTrainer
    trainer = trainer_class(
        model=model, args=training_arguments(args), train_dataset=Blocks(data["train"]), callbacks=[flops]
    )
    rss_before = max(rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    started = time.time()
    trainer.train()
    seconds = time.time() - started
    peak_increase = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    result = {
        "kind": args.kind,
        "seed": args.seed,
        "parameters": params,
        "training_tokens": tokens,
        "val_perplexity": perplexity(model, data["val"]),
        "val_tokens": data["val"].numel(),
        "train_flops": flops.per_step * args.steps,
        "train_seconds": seconds,
        "saved_bytes": saved_bytes(model, data["train"][: args.batch_size]),
        "peak_rss_increase_bytes": max(peak_increase, 0),  # over training (0: the data build peaked higher)
        "solver_steps": [h.get("solver_steps") for h in trainer.state.log_history if "solver_steps" in h],
        "data": {"files": data["files"], "vocab": data["vocab"], "python": data["python"]},
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print(
        f"validation perplexity {result['val_perplexity']:.2f}; {result['train_flops'] / 1e12:.2f} TFLOPs; "
        f"{seconds / 60:.1f} min; saved for backward {result['saved_bytes'] / 2**20:.1f} MiB"
    )
    out = args.output_dir / args.kind
    out.mkdir(parents=True, exist_ok=True)
    results_json.save_results(out / f"seed{args.seed}.json", result, indent=2)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
