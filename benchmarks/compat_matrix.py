"""The compatibility matrix: does a folder this package writes load as remote code, and give the same numbers, on
other transformers releases? And does the package itself install and work there?

For every portable family it writes a small seeded model with ``save_pretrained`` (weights, remote code,
``auto_map``), records its outputs here, under the development environment (:mod:`compat_check`: logits of a
left-padded batch, greedy tokens with and without the cache; a puzzle solver's and a classifier's logits), then for
each release installs transformers into a throwaway environment beside one pinned torch (``pip install --target``
on top of a venv holding ``torch==2.13.0``, the CPU wheel), runs the same check there without ``equilibria``
importable, and compares: logits within ``--atol``, greedy tokens equal. Then it ``pip install``s the package's
wheel (built from this checkout) with that release into a venv of its own, which fails for a release
``pyproject.toml`` does not admit, and runs :mod:`compat_smoke` there (train one step, load, generate).

    python benchmarks/compat_matrix.py --releases 5.4.0,5.12.0,5.24.0   # minutes: installs per release
    python benchmarks/compat_matrix.py --quick     # no install: the current environment; a test runs it

Results: ``docs/results/compat_matrix.json`` (``--output-dir`` to change; the default also rewrites the table in
``docs/compatibility.md``, through ``doc_tables.save_results``), one row per release and family: ``status`` (``ok``, ``different`` with the largest
logit difference and the greedy runs that differ, or the error that stopped it) and ``package`` (``ok`` or the
error).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compat_check  # noqa: E402  (standalone: also runs in the throwaway environments)
import doc_tables  # noqa: E402

TORCH = "torch==2.13.0"
DEFAULT_RELEASES = ("5.4.0", "5.12.0", "5.24.0")  # the floor, one in the middle, the newest
RESULTS = HERE.parent / "docs" / "results"


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
    torch.manual_seed(0)  # the Attractor's second head: its puzzle model
    config = FAMILIES["attractor_lm"].make_config(dict(vocab_size=11, max_seq_len=16), 32, 2, 2, 3)
    FAMILIES["attractor_lm"].heads[1].model_class(config).eval().save_pretrained(folders / "attractor_lm-puzzles")


def base_environment(work: Path) -> Path:
    """A venv holding the pinned torch, built on first use and kept in ``work``: its ``python``."""
    base = work / "base"
    if not (base / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
        subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "-q", TORCH], check=True)
    return base / "bin" / "python"


def environment(work: Path, release: str) -> tuple[str, dict]:
    """``(python, env)`` of a throwaway environment with ``transformers==release`` and the pinned torch (built on
    first use, kept in ``work`` for the next run)."""
    python = base_environment(work)
    target = work / f"transformers-{release}"
    if not (target / "transformers").is_dir():
        pip = [str(python), "-m", "pip", "install", "-q", "--target", str(target)]
        subprocess.run([*pip, f"transformers=={release}"], check=True)
    return str(python), {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(work)}


def build_wheel(work: Path) -> Path:
    """The package's wheel, built from this checkout into ``work/wheel``."""
    folder = work / "wheel"
    shutil.rmtree(folder, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(HERE.parent)]
    subprocess.run(pip, check=True, capture_output=True)
    return next(folder.glob("equilibria-*.whl"))


def package_environment(work: Path, release: str, wheel: Path) -> str:
    """The ``python`` of a venv where ``pip`` installed the package's ``wheel`` with ``transformers==release`` and
    the package's other dependencies, resolved for that release (torch is the base environment's, seen through a
    ``.pth`` file). ``RuntimeError`` with pip's last line when pip cannot: the release is not admitted."""
    venv = work / f"package-{release}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        base_site = next((work / "base" / "lib").glob("python3*/site-packages"))
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "base-torch.pth").write_text(f"{base_site}\n")
    pip = [str(python), "-m", "pip", "install", "-q"]
    for extra in ([f"transformers=={release}", str(wheel)], ["--no-deps", "--force-reinstall", str(wheel)]):
        done = subprocess.run([*pip, *extra], capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or ["pip failed"]
            raise RuntimeError(f"pip install transformers=={release} + the package: {errors[0][:300]}")
    return str(python)


def run_smoke(python: str, work: Path, release: str) -> dict:
    """Run :mod:`compat_smoke` with that ``python``: ``{family: "ok" or the error}``."""
    folder = work / f"smoke-{release}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out = folder / "smoke.json"
    done = subprocess.run(
        [python, str(HERE / "compat_smoke.py"), str(folder), str(out)],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not out.exists():
        return {"*": (done.stderr.strip().splitlines() or ["no output"])[-1][:400]}
    return json.loads(out.read_text())["families"]


def package_check(work: Path, release: str, wheel: Path | None) -> dict:
    """``{family: "ok" or the error}`` of the package's smoke test on ``release`` (``current``: this environment)."""
    try:
        python = sys.executable if wheel is None else package_environment(work, release, wheel)
    except RuntimeError as err:
        return {"*": str(err)}
    return run_smoke(python, work, release)


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


def release_row(release: str, reference: dict, work: Path, wheel: Path | None, atol: float) -> dict:
    """One release's verdicts, per family: the folder as remote code (``status``, see :func:`compare`) and the
    package's smoke test (``package``: ``ok`` or the error). ``wheel=None``: the current environment."""
    python, env = (sys.executable, dict(os.environ)) if wheel is None else environment(work, release)
    got = run_check(python, env, work / "folders", work / f"outputs-{release}.pt")
    errors = got["results"].get("*")
    package = package_check(work, release, wheel)
    return {
        model_type: {
            **({"status": "error", **errors} if errors else compare(ref, got["results"][model_type], atol)),
            "package": package.get("*") or package.get(model_type, "not run"),
        }
        for model_type, ref in reference.items()
    }


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", default=",".join(DEFAULT_RELEASES), help="comma-separated transformers releases")
    parser.add_argument("--work", default="/tmp/equilibria-compat", help="where the environments are kept")
    parser.add_argument("--atol", type=float, default=1e-5, help="the largest logit difference that counts as equal")
    parser.add_argument("--quick", action="store_true", help="the current environment only (no install)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every family is ok on every release")
    parser.add_argument("--output-dir", default=str(RESULTS), help="where the JSON goes (the default: the docs too)")
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
    wheel = None if args.quick else build_wheel(work)
    rows = {}
    for release in releases:
        rows[release] = release_row(release, reference, work, wheel, args.atol)
        print(release, {k: (v["status"], v["package"]) for k, v in rows[release].items()})
    payload = {
        "command": "python benchmarks/compat_matrix.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "reference": {"transformers": transformers.__version__, "torch": torch.__version__},
        "atol": args.atol,
        "families": sorted(reference),
        "releases": rows,
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc_tables.save_results((out / "compat_matrix.json"), payload, indent=2)
    failed = [
        f"{r} {t}: {v.get('error') or v}"
        for r, row in rows.items()
        for t, v in row.items()
        if v["status"] != "ok" or v["package"] != "ok"
    ]
    if args.check and failed:
        raise SystemExit("compatibility matrix failed:\n  " + "\n  ".join(failed))
    return payload


if __name__ == "__main__":
    main()
