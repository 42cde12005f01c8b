"""Run a saved folder of each portable family as remote code and record its outputs: what the compatibility matrix
(:mod:`compat_matrix`) compares across transformers releases.

Standalone on purpose: it imports only the standard library, torch and transformers, so that it runs in a throwaway
environment holding some release of transformers and no ``equilibria`` (the folders carry their own modeling code).

    python benchmarks/compat_check.py FOLDERS_DIR OUT.pt    # FOLDERS_DIR/<family>/ as written by compat_matrix.py

For a language model: the logits of a left-padded batch (without the cache, and at ``num_loops=2``), and greedy
tokens with and without the cache, at ``num_loops=2`` passed to ``generate``, and with prompt-lookup decoding (which
crops the cache); for a puzzle solver and a classifier: the logits of a fixed batch. A family that fails to load or run is
recorded with the error's last line instead.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch

NEW_TOKENS = 6
HEADS = {  # folder -> the Auto class of its head (a family's second head: "<model_type>-<task kind>")
    "ouro": "AutoModelForCausalLM",
    "attractor_lm": "AutoModelForCausalLM",
    "attractor_lm-puzzles": "AutoModelForTokenClassification",
    "eqr": "AutoModelForTokenClassification",
    "phdeq": "AutoModelForSequenceClassification",
    "dory": "AutoModelForCausalLM",
    "hrm_text": "AutoModelForCausalLM",
    "inkling2_loop_text": "AutoModelForCausalLM",
}
#: the looped LMs transformers ships: no remote code (the folder is transformers' own model), the class a release may
#: lack, and the config values of a two-loop model (without ``equilibria`` there is no ``num_loops`` per call)
TRANSFORMERS_LMS = {
    "dory": ("DoryForCausalLM", lambda config: {"n_recurrent_loops": 2}),
    "hrm_text": (
        "HrmTextForCausalLM",
        lambda config: {"H_cycles": 2, "num_hidden_layers": config.num_layers_per_stack * 2 * (config.L_cycles + 1)},
    ),
    "inkling2_loop_text": ("Inkling2LoopForCausalLM", lambda config: {"loop_num_passes": 2}),
}


def lm_batch(config) -> dict:
    """Two prompts of 5 and 3 tokens, the shorter left-padded (ids 3.. of the vocabulary, seeded)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, config.vocab_size, (2, 5), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = config.pad_token_id or 0, 0
    return {"input_ids": ids, "attention_mask": mask}


def lm_outputs(model, two_loops=None) -> dict:
    """``two_loops``: the same model at two loops (transformers' looped LMs, which take no ``num_loops``); else
    ``num_loops=2`` per call, and prompt-lookup decoding too."""
    batch = lm_batch(model.config)
    pad = model.config.pad_token_id or 0
    at_two = (lambda **kw: two_loops(**kw)) if two_loops is not None else (lambda **kw: model(**kw, num_loops=2))
    out = {"logits": model(**batch, use_cache=False).logits, "logits_2_loops": at_two(**batch).logits}
    for cached, loops in ((True, None), (False, None), (True, 2)):
        extra = {} if loops is None or two_loops is not None else {"num_loops": loops}
        generator = two_loops if loops is not None and two_loops is not None else model
        tokens = generator.generate(
            **batch, max_new_tokens=NEW_TOKENS, do_sample=False, use_cache=cached, pad_token_id=pad, **extra
        )
        out[f"greedy_cache_{cached}" + (f"_{loops}_loops" if loops else "")] = tokens[:, batch["input_ids"].shape[1] :]
    if two_loops is not None:
        return out
    repeated = batch["input_ids"][:1].repeat(1, 3)  # prompt-lookup decoding: drafts are accepted and rejected, so
    tokens = model.generate(  # the cache is cropped back (transformers' assisted generation)
        repeated, max_new_tokens=NEW_TOKENS, do_sample=False, prompt_lookup_num_tokens=3, pad_token_id=pad
    )
    # the first NEW_TOKENS: transformers 5.4-5.12 generate one token too many here, plain LlamaForCausalLM too
    out["greedy_prompt_lookup"] = tokens[:, repeated.shape[1] : repeated.shape[1] + NEW_TOKENS]
    return out


def solver_outputs(model) -> dict:
    g = torch.Generator().manual_seed(0)
    cells = getattr(model.config, "max_seq_len", None) or model.config.max_position_embeddings
    puzzles = torch.randint(1, model.config.vocab_size, (2, cells), generator=g)
    return {"logits": model(puzzles).logits}


def classifier_outputs(model) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"logits": model(torch.randn(3, model.config.input_size, generator=g)).logits}


def outputs(folder: Path, model_type: str, remote: bool = True) -> dict:
    """The outputs of the folder's model, loaded with ``trust_remote_code=True`` through its head's Auto class
    (``remote``: it must be the folder's own code; else the development version, registered by the package)."""
    import transformers

    auto = getattr(transformers, HEADS[model_type])
    if model_type in TRANSFORMERS_LMS:
        return transformers_lm_outputs(auto, folder, model_type)
    model = auto.from_pretrained(folder, trust_remote_code=True).eval()
    if remote and not type(model).__module__.startswith("transformers_modules"):
        raise RuntimeError(f"{folder} loaded {type(model).__module__}, not the folder's own remote code")
    torch.manual_seed(0)
    with torch.no_grad():
        if HEADS[model_type] == "AutoModelForTokenClassification":
            return solver_outputs(model)
        if model_type == "phdeq":
            return classifier_outputs(model)
        return lm_outputs(model)


def transformers_lm_outputs(auto, folder: Path, model_type: str) -> dict:
    """A looped LM transformers ships, saved by the development environment: its outputs on this release, at the
    config's loop count and (reloaded) at two; ``{"absent": ...}`` where this release lacks the class."""
    import transformers

    head_class, two = TRANSFORMERS_LMS[model_type]
    if not hasattr(transformers, head_class):
        return {"absent": f"transformers {transformers.__version__} has no {head_class}"}
    model = auto.from_pretrained(folder).eval()
    two_loops = auto.from_pretrained(folder, **two(model.config)).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        return lm_outputs(model, two_loops)


def check_all(folders: Path, remote: bool = True) -> dict:
    """``{model_type: outputs or {"error": last line}}`` for every ``folders/<model_type>``."""
    results = {}
    for model_type in HEADS:
        if not (folders / model_type).is_dir():
            continue
        try:
            results[model_type] = outputs(folders / model_type, model_type, remote)
        except Exception as err:  # noqa: BLE001  (any failure is the result: it is recorded, not raised)
            line = traceback.format_exception_only(type(err), err)[-1].strip()
            results[model_type] = {"error": line[:400]}
    return results


def main(argv: list[str]) -> int:
    sys.modules["equilibria"] = None  # the package is unavailable: only the folders' own remote code can load
    import transformers

    folders, out = Path(argv[0]), Path(argv[1])
    torch.save({"transformers": transformers.__version__, "results": check_all(folders)}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
