"""The package's smoke test on one transformers release: what the compatibility matrix (:mod:`compat_matrix`) runs in
an environment where ``equilibria`` is installed from its wheel beside that release.

For every family (transformers' looped LMs where the release has them): ``equilibria train`` runs one optimiser step of the family's Trainer on its default task (tiny
sizes) and writes its folder; the folder loads back through the head's Auto class as the package's own class; a
language model generates at ``num_loops=2`` with the cache and without, the same tokens (Ouro also with a cache
of the caller's, ``cache=OuroCache()``).

    python benchmarks/compat_smoke.py WORK_DIR OUT.json

``OUT.json``: ``{"transformers": version, "families": {family: "ok" or the error's last line}}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from pathlib import Path

TRAIN_FLAGS = [
    "--max_steps", "1", "--train_size", "16", "--test_size", "4", "--hidden_size", "16", "--num_layers", "1",
    "--num_loops", "2", "--eval_loops", "1,2", "--per_device_train_batch_size", "4", "--use_cpu",
    "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true",
]  # fmt: skip


SMOKES = {  # folder -> (family, extra flags): every family's first head, and the Attractor's puzzle head
    "ouro": ("ouro", []),
    "attractor_lm": ("attractor_lm", []),
    "attractor_lm-puzzles": ("attractor_lm", ["--task", "sudoku"]),
    "eqr": ("eqr", []),
    "phdeq": ("phdeq", []),
    "dory": ("dory", []),  # transformers' own looped LMs, from 5.24 (HRM-text from 5.9)
    "hrm_text": ("hrm_text", []),
    "inkling2_loop_text": ("inkling2_loop_text", []),
}


def smoke(family: str, folder: Path, extra: list[str] | None = None) -> None:
    """Train one step into ``folder``, load it back and (a language model) generate; raise on any failure."""
    import torch
    import transformers

    from equilibria.cli import main
    from equilibria.families import FAMILIES

    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "--family", family, "--output_dir", str(folder), *TRAIN_FLAGS, *(extra or [])])
    if code != 0:
        raise RuntimeError(f"equilibria train exited with {code}")
    record = FAMILIES[family]
    head = record.head_of_config(transformers.AutoConfig.from_pretrained(folder))
    model = record.protocol.prepare(getattr(transformers, head.auto_class).from_pretrained(folder).eval())
    if not isinstance(model, head.model_class):
        raise RuntimeError(f"the folder loaded {type(model).__module__}.{type(model).__name__}, not the package's")
    if not model.can_generate():
        return
    ids = torch.tensor([[5, 6, 7, 8]])
    tokens = [
        model.generate(ids, max_new_tokens=4, do_sample=False, num_loops=2, use_cache=cached, pad_token_id=0)
        for cached in (True, False)
    ]
    if not torch.equal(*tokens):
        raise RuntimeError(
            f"num_loops=2: greedy tokens with the cache {tokens[0].tolist()} != without {tokens[1].tolist()}"
        )
    if family == "ouro":
        own_cache(model, ids, tokens[0])


def own_cache(model, ids, expected) -> None:
    """``generate(cache=OuroCache())`` (a cache of the caller's, as docs/ouro.md shows) gives the same tokens, and the
    returned cache holds the exit step of every position run (all but the last token, which no forward read; the
    output's cache field: ``cache`` from 5.24, else ``past_key_values``)."""
    import torch

    from equilibria import OuroCache
    from equilibria.modeling.compat import OUTPUT_CACHE_FIELD

    out = model.generate(
        ids, max_new_tokens=4, do_sample=False, num_loops=2, cache=OuroCache(), return_dict_in_generate=True,
        pad_token_id=0,
    )  # fmt: skip
    steps = getattr(out, OUTPUT_CACHE_FIELD).exit_steps
    if not torch.equal(out.sequences, expected) or tuple(steps.shape) != (expected.shape[0], expected.shape[1] - 1):
        raise RuntimeError(f"generate(cache=OuroCache()): {out.sequences.tolist()}, exit steps {tuple(steps.shape)}")


def main(argv: list[str]) -> int:
    import transformers

    from equilibria.families import FAMILIES

    work, out = Path(argv[0]), Path(argv[1])
    results = {}
    missing = sorted(set(FAMILIES) - set(SMOKES))
    if missing:
        raise SystemExit(f"compat_smoke: no smoke run for the families {missing}")
    for name, (family, extra) in SMOKES.items():
        if family not in FAMILIES:  # a looped LM transformers ships, on a release before it
            results[name] = f"absent: transformers {transformers.__version__} has no {family} model"
            continue
        try:
            smoke(family, work / name, extra)
            results[name] = "ok"
        except Exception as err:  # noqa: BLE001  (any failure is the result: it is recorded, not raised)
            results[name] = traceback.format_exception_only(type(err), err)[-1].strip()[:400]
    out.write_text(json.dumps({"transformers": transformers.__version__, "families": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
