"""Which weights and which data a result was computed on.

Every result a model folder holds (``loop_scaling.json``, ``audit.json``, ``lm_eval.json``, the training record
``training_data.json``) carries ``"weights"``: the :func:`weights_fingerprint` of the weights it was computed on (or,
for the training record, produced); the evaluation results also carry ``"data"``, with the :func:`data_fingerprint`
of the rows. A result whose fingerprint is not the folder's weights' was computed on other weights (the base model
of a fine-tuning, an earlier run into the same folder) and is never shown as this model's: ``equilibria train``
removes such files from its output folder, the model card leaves them out and says so
(:func:`folder_results`).

The weights' fingerprint reads the tensors of the folder's safetensors files (names, dtypes, shapes and bytes), not
the files' bytes, so the same weights saved again (another transformers release, another shard size) keep it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

# result file -> the files that belong to it (its plot)
RESULTS = {
    "loop_scaling.json": ("loop_scaling.png",),
    "eval_loop_scaling.json": ("eval_loop_scaling.png",),
    "audit.json": ("audit.png",),
    "lm_eval.json": ("lm_eval.png",),
    "training_data.json": (),
}
WEIGHT_FILES = ("model*.safetensors", "adapter_model.safetensors")
# the loop-scaling results by the command that writes them; a card shows the first one a folder holds
LOOP_SCALING_FILES = {"equilibria eval": "eval_loop_scaling.json", "equilibria train": "loop_scaling.json"}


def shown_loop_scaling(results: dict) -> str | None:
    """The loop-scaling file among ``results`` (file name -> content) that a card shows: ``equilibria eval``'s,
    run on purpose after training, when there is one, else ``equilibria train``'s (``None`` without either)."""
    return next((name for name in LOOP_SCALING_FILES.values() if name in results), None)


def weights_fingerprint(folder: str | Path) -> str | None:
    """A 128-bit BLAKE2b fingerprint (hex) of the weights saved in ``folder`` (every tensor of its
    ``model*.safetensors`` or ``adapter_model.safetensors`` files, by name; an adapter's base model's name too), or
    ``None`` when it holds none. Kept for files whose size and modification time have not changed."""
    folder = Path(folder)
    files = sorted({path for pattern in WEIGHT_FILES for path in folder.glob(pattern)})
    if not files:
        return None
    adapter = folder / "adapter_config.json"
    base = str(json.loads(adapter.read_text()).get("base_model_name_or_path")) if adapter.is_file() else ""
    stamps = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _tensors_digest(stamps, base)


@functools.lru_cache(maxsize=64)
def _tensors_digest(stamps: tuple, base: str) -> str:
    """The fingerprint of the files in ``stamps`` (path, size, modification time: the cache key)."""
    import torch
    from safetensors import safe_open

    files = [Path(stamp[0]) for stamp in stamps]

    parts = {}  # tensor name -> the digest of its dtype, shape and bytes
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                tensor = f.get_tensor(name).contiguous()
                part = hashlib.blake2b(f"{tensor.dtype}|{tuple(tensor.shape)}|".encode(), digest_size=16)
                part.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
                parts[name] = part.hexdigest()
    text = "\n".join(f"{k}={v}" for k, v in sorted(parts.items())) + base
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def data_fingerprint(keys: Iterable[str]) -> str:
    """A 128-bit BLAKE2b fingerprint (hex) of a set of rows, from their question fingerprints (order and repeats
    do not matter)."""
    return hashlib.blake2b("\n".join(sorted(set(keys))).encode(), digest_size=16).hexdigest()


def read_result(path: str | Path) -> dict | None:
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else None


def describe_weights(result: dict, weights: str | None) -> str:
    """``"current"`` (computed on ``weights``), ``"other"`` (on other weights) or ``"unrecorded"`` (the result does
    not say; written before equilibria recorded it)."""
    recorded = result.get("weights") if isinstance(result, dict) else None
    if recorded is None or weights is None:
        return "unrecorded"
    return "current" if recorded == weights else "other"


def folder_results(folder: str | Path) -> tuple[dict, dict]:
    """``(current, other)``: the folder's results (file name -> content) computed on its own weights (or not saying
    which: written before equilibria recorded it), and those computed on other weights."""
    folder = Path(folder)
    weights = weights_fingerprint(folder)
    current, other = {}, {}
    for name in RESULTS:
        result = read_result(folder / name)
        if result is not None:
            (other if describe_weights(result, weights) == "other" else current)[name] = result
    return current, other


def remove_results_of_other_weights(folder: str | Path) -> list[str]:
    """Delete the result files (and their plots) of ``folder`` that do not record the weights it now holds (computed
    on other weights, or not saying which); return their names. For a folder that was just trained into."""
    folder = Path(folder)
    weights = weights_fingerprint(folder)
    stale = [name for name in RESULTS if (folder / name).is_file()]
    stale = [name for name in stale if describe_weights(read_result(folder / name), weights) != "current"]
    for name in stale:
        for file in (name, *RESULTS[name]):
            (folder / file).unlink(missing_ok=True)
    return stale


def other_weights_note(name: str, result: dict) -> str:
    """What a card or command says of a result computed on other weights."""
    what = (result.get("data") or {}).get("name") or result.get("description") or "its data"
    return f"{name} (on {what}) was computed on other weights than this folder's, so it is not shown as this model's"


def replacement_note(path: str | Path, new: dict) -> str | None:
    """What to say when writing ``new`` to ``path`` replaces a result computed on other data or other weights, or
    one that does not say which (``None`` when there is nothing there, or it was computed on the same data and
    weights)."""
    old = read_result(path)
    if old is None:
        return None
    old_data, new_data = old.get("data") or {}, new.get("data") or {}
    differs = []
    if old_data.get("fingerprint") != new_data.get("fingerprint") or old_data.get("name") != new_data.get("name"):
        differs.append(f"other data ({old_data['name']})" if old_data.get("name") else "data it does not record")
    if old.get("weights") is None:
        differs.append("weights it does not record")
    elif old["weights"] != new.get("weights"):
        differs.append("other weights")
    return f"replaced {path}, computed on {' and '.join(differs)}" if differs else None


__all__ = [
    "LOOP_SCALING_FILES",
    "RESULTS",
    "shown_loop_scaling",
    "data_fingerprint",
    "describe_weights",
    "folder_results",
    "other_weights_note",
    "read_result",
    "remove_results_of_other_weights",
    "replacement_note",
    "weights_fingerprint",
]
