"""Cached decoding with this checkout's Ouro against an earlier commit's, side by side in one run.

One model, two codes: the earlier commit (``--base``, default ``5b3a9ec``, the last commit before issue #41's
redesign) saves a seeded Ouro with its own remote code; this process loads that folder twice, with the installed
package's classes and with the folder's remote code (the earlier code, as ``trust_remote_code=True`` loads it), checks that both
decode the same tokens, and times greedy decoding with the KV cache, runs interleaved (new, old, new, old ...).
The sizes are ``bench_ouro_decode.py``'s loop-overhead ones. Target: the median of the paired new/old ratios at
most 1.03 (the redesign costs no decode speed).

    python benchmarks/bench_decode_against_release.py            # a few minutes on 2 CPU cores
    python benchmarks/bench_decode_against_release.py --quick    # tiny sizes, seconds; a test runs this

Results: ``docs/results/decode_against_release.json`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import results_json
import torch
from bench_ouro_decode import compare, greedy, paired_ratio, timed_generate
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from equilibria import OuroForCausalLM

SAVE = """
import sys, torch
from equilibria import OuroConfig, OuroForCausalLM
width, intermediate, heads, layers, loops, vocab = (int(v) for v in sys.argv[2:8])
torch.manual_seed(0)
config = OuroConfig(vocab_size=vocab, hidden_size=width, intermediate_size=intermediate, num_hidden_layers=layers,
                    num_attention_heads=heads, max_position_embeddings=2048, total_ut_steps=loops)
OuroForCausalLM(config).save_pretrained(sys.argv[1])
"""


def save_with_base_code(base: str, folder: Path, sizes: list[int]) -> None:
    """Save a seeded Ouro of ``sizes`` into ``folder`` with the code of commit ``base`` (its ``src`` unpacked from
    git into a temporary folder, ahead of the installed package on the path)."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "archive", base, "src"], cwd=root, check=True, capture_output=True).stdout
    with tempfile.TemporaryDirectory() as code:
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(code, filter="data")
        env = {"PYTHONPATH": str(Path(code) / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
        subprocess.run(
            [sys.executable, "-c", SAVE, str(folder), *map(str, sizes)], check=True, env=env, capture_output=True
        )


def load_both(folder: Path) -> dict[str, torch.nn.Module]:
    """The folder loaded with this checkout's classes (``new``) and with its remote code (``old``)."""
    new = OuroForCausalLM.from_pretrained(folder).eval()
    remote = get_class_from_dynamic_module("modeling_ouro.OuroForCausalLM", str(folder))  # the folder's own code
    old = remote.from_pretrained(folder).eval()
    if not type(old).__module__.startswith("transformers_modules"):
        raise RuntimeError(f"the folder's remote code did not load (got {type(old).__module__})")
    return {"new": new, "old": old}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="5b3a9ec", help="the earlier commit (default: before issue #41)")
    parser.add_argument(
        "--base-folder",
        type=Path,
        default=None,
        help="instead of --base: a saved Ouro folder carrying its remote code (its weights and sizes are used)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved runs per code")
    parser.add_argument("--output-dir", type=Path, default=results_json.RESULTS)
    parser.add_argument(
        "--results-name", default="decode_against_release.json", help="the JSON file's name in --output-dir"
    )
    args = parser.parse_args(argv)
    # width, intermediate, heads, layers, loops, vocab; then prompt and new tokens
    sizes = [64, 128, 4, 2, 4, 256] if args.quick else [1024, 2816, 16, 2, 4, 4096]
    prompt, new_tokens = (8, 8) if args.quick else (32, 64)
    repeats = 2 if args.quick else args.repeats
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        if args.base_folder is None:
            save_with_base_code(args.base, Path(folder), sizes)
        models = load_both(Path(folder) if args.base_folder is None else args.base_folder)
        config = models["new"].config
        sizes = [config.hidden_size, config.intermediate_size, config.num_attention_heads]
        sizes += [config.num_hidden_layers, config.total_ut_steps, config.vocab_size]
        prompt = min(prompt, config.max_position_embeddings - new_tokens)
        ids = torch.randint(3, sizes[-1], (1, prompt), generator=torch.Generator().manual_seed(0))
        same = torch.equal(greedy(models["new"], ids, new_tokens), greedy(models["old"], ids, new_tokens))
        times = compare({k: (lambda m=m: timed_generate(m, ids, new_tokens)) for k, m in models.items()}, repeats)
    ratio, low, high = paired_ratio(times, "new", "old")
    data = dict(
        command=" ".join(
            ["python benchmarks/bench_decode_against_release.py"]
            + (["--quick"] if args.quick else [])
            + ([f"--base {args.base}"] if args.base != "5b3a9ec" and args.base_folder is None else [])
            + ([f"--results-name {args.results_name}"] if args.results_name != "decode_against_release.json" else [])
        ),
        args={key: str(value) for key, value in vars(args).items()},
        sizes=dict(zip(["width", "intermediate", "heads", "layers", "loops", "vocab"], sizes)),
        prompt=prompt,
        new_tokens=new_tokens,
        torch_threads=torch.get_num_threads(),
        same_tokens=same,
        new_s=statistics.median(times["new"]),
        old_s=statistics.median(times["old"]),
        ratio=ratio,
        ratio_range=[low, high],
        ratios=[a / b for a, b in zip(times["new"], times["old"])],
        target=1.03,
    )
    print(f"new/old decode time: median {ratio:.3f} (range {low:.3f}-{high:.3f}) over {repeats} paired runs")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results_json.save_results(args.output_dir / args.results_name, data, indent=1)
    return data


if __name__ == "__main__":
    main()
