"""Write the saved folders of a release: one tiny seeded model of every family and head, each as
``save_pretrained`` writes it (config, weights, generation config where written, the remote code), and
``logits.json`` with the inputs and the logits they gave. ``tests/test_saved_checkpoints.py`` checks that every
release's folders keep loading strictly, with the same logits, with and without the package.

Make the next release's folders from a clean checkout of the release, with its own code (a worktree if the
package has moved on; ``PYTHONPATH`` puts its ``src`` ahead of the editable install)::

    OMP_NUM_THREADS=1 python tests/scripts/make_saved_folders.py --version-dir tests/data/saved-0.3

``--families`` writes only some (a release folder that lacks them); entries of ``logits.json`` for other
folders are kept. An existing folder is refused unless ``--overwrite``: a release's folders are frozen once
committed. Deterministic: every model and input is seeded; the logits are those of an eager-attention forward
with ``torch.manual_seed(0)`` just before it (the test does the same).

Version-tolerant: a family or head the code being run does not have (the Attractor puzzle head before 0.2) is
skipped with a note, so the same script writes the folders of 0.1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

import equilibria

SEED = 0


def _ouro(eq):
    config = eq.OuroConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        total_ut_steps=2,
        initializer_range=0.2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    return eq.OuroForCausalLM(config), "AutoModelForCausalLM", _token_ids(16, (2, 5))


def _attractor_lm(eq):
    config = eq.AttractorConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=32,
        num_backbone_layers=1,
        num_attractor_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
        num_loops=2,
        initializer_range=0.2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    return eq.AttractorForCausalLM(config), "AutoModelForCausalLM", _token_ids(16, (2, 5))


def _attractor_puzzle(eq):
    config = eq.AttractorConfig(
        vocab_size=11,
        hidden_size=16,
        intermediate_size=32,
        num_backbone_layers=1,
        num_attractor_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        num_loops=2,
        initializer_range=0.2,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    return eq.AttractorForPuzzleSolving(config), "AutoModelForTokenClassification", _token_ids(11, (2, 16))


def _eqr(block_type):
    def make(eq):
        config = eq.EqRConfig(
            vocab_size=11,
            max_seq_len=16,
            hidden_size=16,
            intermediate_size=32,
            num_layers=1,
            num_attention_heads=2,
            block_type=block_type,
            num_loops=2,
            random_init=False,  # a learned start: the forward draws no noise (the remote-code check is unseeded)
            initializer_range=0.2,
            attn_implementation="eager",
        )
        return eq.EqRForPuzzleSolving(config), "AutoModelForTokenClassification", _token_ids(11, (2, 16))

    return make


def _phdeq(eq):
    config = eq.PHDEQConfig(
        input_size=8,
        hidden_size=8,
        intermediate_size=16,
        num_labels=3,
        num_loops=3,
        solver_tol=1e-12,  # never reached: always the same number of solver steps, on any CPU
    )
    inputs = torch.randn((2, 8), generator=torch.Generator().manual_seed(SEED + 1))
    return eq.PHDEQForSequenceClassification(config), "AutoModelForSequenceClassification", inputs


# folder name -> (the classes it needs, builder); the folder names are the keys of logits.json
FOLDERS = {
    "ouro": (("OuroConfig", "OuroForCausalLM"), _ouro),
    "attractor_lm": (("AttractorConfig", "AttractorForCausalLM"), _attractor_lm),
    "attractor_puzzle": (("AttractorConfig", "AttractorForPuzzleSolving"), _attractor_puzzle),
    "eqr_attention": (("EqRConfig", "EqRForPuzzleSolving"), _eqr("attention")),
    "eqr_mlp": (("EqRConfig", "EqRForPuzzleSolving"), _eqr("mlp")),
    "phdeq": (("PHDEQConfig", "PHDEQForSequenceClassification"), _phdeq),
}


def _token_ids(vocab_size: int, shape: tuple[int, int]) -> torch.Tensor:
    return torch.randint(3, vocab_size, shape, generator=torch.Generator().manual_seed(SEED + 1))


def forward_logits(model, auto_class: str, inputs: torch.Tensor) -> torch.Tensor:
    """The logits the folder is checked against: eval mode, no grad, seeded just before the forward, no KV cache
    for a language model (the test calls this same function)."""
    torch.manual_seed(SEED)
    with torch.no_grad():
        if auto_class == "AutoModelForCausalLM":
            return model.eval()(inputs, use_cache=False).logits
        return model.eval()(inputs).logits


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version-dir", type=Path, required=True, help="e.g. tests/data/saved-0.3")
    parser.add_argument("--families", nargs="+", choices=sorted(FOLDERS), help="only these folders (default: all)")
    parser.add_argument("--overwrite", action="store_true", help="replace folders that exist")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    out: Path = args.version_dir
    out.mkdir(parents=True, exist_ok=True)
    print(f"equilibria from {equilibria.__file__}")
    logits_path = out / "logits.json"
    reference = json.loads(logits_path.read_text()) if logits_path.exists() else {}
    for name in args.families or list(FOLDERS):
        needs, build = FOLDERS[name]
        if not all(hasattr(equilibria, cls) for cls in needs):
            print(f"skip {name}: this equilibria has no {', '.join(c for c in needs if not hasattr(equilibria, c))}")
            continue
        folder = out / name
        if folder.exists():
            if not args.overwrite:
                print(f"refuse {folder}: it exists (--overwrite replaces it)", file=sys.stderr)
                return 1
            shutil.rmtree(folder)
        torch.manual_seed(SEED)
        model, auto_class, inputs = build(equilibria)
        model.eval().save_pretrained(folder)
        logits = forward_logits(model, auto_class, inputs)
        key = "input_ids" if auto_class != "AutoModelForSequenceClassification" else "inputs"  # PH-DEQ: vectors
        reference[name] = {key: inputs.tolist(), "logits": logits.tolist()}
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"wrote {folder} ({size / 1024:.0f} KiB: {', '.join(sorted(f.name for f in folder.iterdir()))})")
    logits_path.write_text(json.dumps(dict(sorted(reference.items()))))  # one line, as 0.1's was written
    return 0


if __name__ == "__main__":
    sys.exit(main())
