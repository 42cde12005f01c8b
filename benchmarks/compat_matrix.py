"""The compatibility matrix: does a folder this package writes load as remote code, and give the same numbers, on
other transformers releases?

For every portable family it writes a small seeded model with ``save_pretrained`` (weights, remote code,
``auto_map``), records its outputs here, under the development environment (:mod:`compat_check`: logits of a
left-padded batch, greedy tokens with and without the cache; a puzzle solver's and a classifier's logits), then for
each release installs transformers into a throwaway environment beside one pinned torch (``pip install --target``
on top of a venv holding ``torch==2.13.0``, the CPU wheel), runs the same check there without ``equilibria``
importable, and compares: logits within ``--atol``, greedy tokens equal.

    python benchmarks/compat_matrix.py --releases 5.12.0,5.18.0,5.24.0   # minutes: one install per release
    python benchmarks/compat_matrix.py --quick     # no install: the current environment, the package hidden; a test

Results: ``docs/results/compat_matrix.json`` (``--output-dir`` to change), one row per release and family:
``ok``, ``different`` (the largest logit difference, which greedy runs differ) or the error that stopped it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compat_check  # noqa: E402  (standalone: also runs in the throwaway environments)

TORCH = "torch==2.13.0"
DEFAULT_RELEASES = ("5.12.0", "5.18.0", "5.24.0")


def write_folders(folders: Path) -> None:
    """A small seeded model of every portable family, saved with its remote code into ``folders/<model_type>``."""
    from equilibria.families import FAMILIES
    from equilibria.tasks import addition_tokenizer, tokenizer_fields

    fields = {
        "ouro": tokenizer_fields(addition_tokenizer()),
        "attractor_lm": tokenizer_fields(addition_tokenizer()),
        "eqr": dict(vocab_size=11, max_seq_len=16),
        "phdeq": dict(input_size=12, num_labels=2),
    }
    for model_type, family in FAMILIES.items():
        torch.manual_seed(0)
        config = family.make_config(fields[model_type], 32, 2, 2, 3)
        model = family.heads[0].model_class(config).eval()
        model.save_pretrained(folders / model_type)


def environment(work: Path, release: str) -> tuple[str, dict]:
    """``(python, env)`` of a throwaway environment with ``transformers==release`` and the pinned torch (built on
    first use, kept in ``work`` for the next run)."""
    base = work / "base"
    if not (base / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
        subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "-q", TORCH], check=True)
    target = work / f"transformers-{release}"
    if not (target / "transformers").is_dir():
        pip = [str(base / "bin" / "python"), "-m", "pip", "install", "-q", "--target", str(target)]
        subprocess.run([*pip, f"transformers=={release}"], check=True)
    return str(base / "bin" / "python"), {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(work)}


def run_check(python: str, env: dict, folders: Path, out: Path) -> dict:
    """Run :mod:`compat_check` in that environment (its own working folder, so nothing of this checkout is
    importable) and read what it recorded."""
    done = subprocess.run(
        [python, str(HERE / "compat_check.py"), str(folders), str(out)],
        env={**env, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        cwd=out.parent,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return {"transformers": "?", "results": {"*": {"error": done.stderr.strip().splitlines()[-1][:400]}}}
    return torch.load(out)


def compare(reference: dict, other: dict, atol: float) -> dict:
    """One family's verdict: ``ok``, ``different`` (with the largest logit difference and the greedy runs that
    differ) or ``error``."""
    if "error" in other:
        return {"status": "error", "error": other["error"]}
    gap = max(float((reference[key] - other[key]).abs().max()) for key in reference if key.startswith("logits"))
    greedy = [key for key in reference if key.startswith("greedy") and not torch.equal(reference[key], other[key])]
    status = "ok" if gap <= atol and not greedy else "different"
    return {"status": status, "max_logit_diff": gap, "greedy_differs": greedy}


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", default=",".join(DEFAULT_RELEASES), help="comma-separated transformers releases")
    parser.add_argument("--work", default="/tmp/equilibria-compat", help="where the environments are kept")
    parser.add_argument("--atol", type=float, default=1e-5, help="the largest logit difference that counts as equal")
    parser.add_argument("--quick", action="store_true", help="the current environment only (no install)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every family is ok on every release")
    parser.add_argument("--output-dir", default=str(HERE.parent / "docs" / "results"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    work = Path(args.work)
    folders = work / "folders"
    write_folders(folders)
    reference = compat_check.check_all(folders, remote=False)  # the development version: the package's classes
    broken = {k: v["error"] for k, v in reference.items() if "error" in v}
    if broken:
        raise SystemExit(f"the development environment itself fails: {broken}")
    for model_type, ref in reference.items():  # else a release that ignored num_loops could pass unnoticed
        if "logits_2_loops" in ref and torch.allclose(ref["logits"], ref["logits_2_loops"]):
            raise SystemExit(f"{model_type}: num_loops=2 gives the default's logits; the check cannot see num_loops")
    releases = ["current"] if args.quick else [r.strip() for r in args.releases.split(",") if r.strip()]
    rows = {}
    for release in releases:
        python, env = (sys.executable, dict(os.environ)) if release == "current" else environment(work, release)
        got = run_check(python, env, folders, work / f"outputs-{release}.pt")
        errors = got["results"].get("*")
        rows[release] = {
            model_type: (
                {"status": "error", **errors} if errors else compare(ref, got["results"][model_type], args.atol)
            )
            for model_type, ref in reference.items()
        }
        print(release, {k: v["status"] for k, v in rows[release].items()})
    payload = {
        "command": "python benchmarks/compat_matrix.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "reference": {"transformers": transformers.__version__, "torch": torch.__version__},
        "atol": args.atol,
        "families": sorted(reference),
        "releases": rows,
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compat_matrix.json").write_text(json.dumps(payload, indent=2) + "\n")
    failed = [
        f"{r} {t}: {v.get('error') or v}" for r, row in rows.items() for t, v in row.items() if v["status"] != "ok"
    ]
    if args.check and failed:
        raise SystemExit("compatibility matrix failed:\n  " + "\n  ".join(failed))
    return payload


if __name__ == "__main__":
    main()
