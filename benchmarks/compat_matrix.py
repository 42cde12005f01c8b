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
    python benchmarks/compat_matrix.py --newest    # the newest release on the index (pip index versions)
    python benchmarks/compat_matrix.py --quick     # no install: the current environment; a test runs it

Where pip cannot install a release, its cells say so (``status``: ``install failed``, ``error``: pip's reason).
Where only a dependency of transformers is missing from the index (as ``kernels>=0.19.1`` was for 5.25.0), transformers
is installed with ``--no-deps`` beside its other requirements, the checks run with transformers' switch for doing
without it (:data:`SWITCHES`: ``USE_HUB_KERNELS=NO``), and the cells carry an ``install`` note saying so. A release
``pyproject.toml`` does not admit gets ``package``: ``not admitted`` with pip's refusal, and
``package_bound_lifted``: the smoke test with the package's wheel installed ``--no-deps`` beside that release and its
other dependencies (does it work there, were the bound raised?).

Results: ``docs/results/compat_matrix.json`` (``--output-dir`` to change; ``python -m tools.docs`` then rewrites
the table in ``docs/compatibility.md``), one row per release and family: ``status`` (``ok``, ``different`` with the largest
logit difference and the greedy runs that differ, or the error that stopped it) and ``package`` (``ok`` or the
error). ``--newest`` writes ``compat_newest.json`` instead, leaving the admitted range's matrix as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import transformers
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compat_check  # noqa: E402  (standalone: also runs in the throwaway environments)
import results_json  # noqa: E402

TORCH = "torch==2.13.0"
DEFAULT_RELEASES = ("5.4.0", "5.12.0", "5.25.0")  # the floor, one in the middle, the newest
RESULTS = HERE.parent / "docs" / "results"
# transformers' own switch for running without a requirement the index lacks: from 5.25 ``from_pretrained`` uses
# ``kernels`` by default and raises without it (any model, a plain Llama too); ``USE_HUB_KERNELS=NO`` turns that off
SWITCHES = {"kernels": {"USE_HUB_KERNELS": "NO"}}


def write_folders(folders: Path) -> None:
    """A small seeded model of every family, saved into ``folders/<model_type>``: the package's with their remote code,
    the looped LMs transformers ships (where this environment has them) as transformers' own models."""
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
        config = family.make_config(fields.get(model_type, fields["ouro"]), 32, 2, 2, 3)
        model = family.heads[0].model_class(config).eval()
        model.save_pretrained(folders / model_type)
    torch.manual_seed(0)  # the Attractor's second head: its puzzle model
    config = FAMILIES["attractor_lm"].make_config(dict(vocab_size=11, max_seq_len=16), 32, 2, 2, 3)
    FAMILIES["attractor_lm"].heads[1].model_class(config).eval().save_pretrained(folders / "attractor_lm-puzzles")


class InstallError(RuntimeError):
    """pip could not install what a row needs; the message is pip's reason (:func:`pip_error`)."""


def pip_error(stderr: str) -> str:
    """The line of pip's output that says why it failed: the conflict with its cause, the requirement with no
    matching distribution, or else pip's last error line (never its note on versions for other Pythons)."""
    lines = [line.strip() for line in stderr.splitlines()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    conflict = next((e for e in errors if e.startswith("Cannot install")), None)
    if conflict:
        causes = [line for line in lines if " depends on " in line]
        return "; ".join([conflict.split(" because ")[0] + ": conflicting dependencies", *causes])[:400]
    missing = next((e for e in errors if e.startswith("No matching distribution found")), None)
    useful = [e for e in errors if not e.startswith("Ignored the following versions")]
    return (missing or (useful or [line for line in lines if line] or ["pip failed"])[-1])[:400]


def run_pip(command: list[str]) -> subprocess.CompletedProcess:
    """Run a pip command, its output captured."""
    return subprocess.run(command, capture_output=True, text=True)


def missing_requirement(reason: str) -> str | None:
    """The project name of ``No matching distribution found for NAME...`` in pip's reason, if that is the reason."""
    match = re.match(r"No matching distribution found for (\S+)", reason)
    return canonicalize_name(Requirement(match.group(1)).name) if match else None


def requires_dist(wheel: Path) -> list[Requirement]:
    """What a ``wheel`` requires outside its extras (its ``Requires-Dist``), markers evaluated for this interpreter."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    requirements = [Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]


def release_requirements(work: Path, release: str) -> list[Requirement]:
    """What ``transformers==release`` requires (:func:`requires_dist` of its wheel, downloaded once into
    ``work/downloads``)."""
    folder = work / "downloads"
    wheel = next(folder.glob(f"transformers-{release}-*.whl"), None)
    if wheel is None:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(folder)]
        done = run_pip([*pip, f"transformers=={release}"])
        if done.returncode != 0:
            raise InstallError(pip_error(done.stderr))
        wheel = next(folder.glob(f"transformers-{release}-*.whl"))
    return requires_dist(wheel)


def install(pip: list[str], requirements: list[str], work: Path, release: str) -> list[str]:
    """``pip`` (a ``pip install`` command) on ``requirements``, one of them ``transformers==release``: ``[]`` when
    that works. When what stops it is a requirement of transformers that the index does not have, install the other
    requirements, then transformers with ``--no-deps``, and return the requirements left out (transformers imports
    ``kernels`` only when asked to use it; :data:`SWITCHES` says how to run without it). ``InstallError`` with pip's
    reason otherwise."""
    done = run_pip([*pip, *requirements])
    if done.returncode == 0:
        return []
    reason = pip_error(done.stderr)
    pinned = f"transformers=={release}"
    own: list[Requirement] = []
    left_out: list[Requirement] = []
    while True:
        name = missing_requirement(reason)
        if name in (None, "transformers"):
            raise InstallError(reason)
        own = own or release_requirements(work, release)
        dropped = next((r for r in own if canonicalize_name(r.name) == name and r not in left_out), None)
        if dropped is None:
            raise InstallError(reason)
        left_out.append(dropped)
        others = [r for r in requirements if r != pinned] + [str(r) for r in own if r not in left_out]
        done = run_pip([*pip, *others])
        if done.returncode == 0:
            done = run_pip([*pip, "--no-deps", pinned])
            if done.returncode == 0:
                return [str(r) for r in left_out]
        reason = pip_error(done.stderr)


def switches(left_out: list[str]) -> dict[str, str]:
    """The environment variables that let transformers run without the ``left_out`` requirements."""
    return {k: v for r in left_out for k, v in SWITCHES.get(canonicalize_name(Requirement(r).name), {}).items()}


def install_note(release: str, left_out: list[str]) -> str:
    """What a cell says about an install that left requirements out (``""`` for a plain one)."""
    if not left_out:
        return ""
    env = " ".join(f"{k}={v}" for k, v in switches(left_out).items())
    return (
        f"transformers {release} installed with --no-deps beside its other requirements: {', '.join(left_out)} "
        f"not on the index" + (f"; run with {env}" if env else "")
    )


def base_environment(work: Path) -> Path:
    """A venv holding the pinned torch, built on first use and kept in ``work``: its ``python``."""
    base = work / "base"
    if not (base / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
        done = run_pip([str(base / "bin" / "python"), "-m", "pip", "install", "-q", TORCH])
        if done.returncode != 0:
            shutil.rmtree(base, ignore_errors=True)
            raise SystemExit(f"the base environment: pip install {TORCH} failed: {pip_error(done.stderr)}")
    return base / "bin" / "python"


def environment(work: Path, release: str) -> tuple[str, dict, list[str]]:
    """``(python, env, left_out)`` of a throwaway environment with ``transformers==release`` and the pinned torch
    (built on first use, kept in ``work`` for the next run); ``left_out``: the requirements of transformers
    :func:`install` had to leave out (``env`` then holds their :func:`switches`). ``InstallError`` with pip's
    reason where transformers cannot be installed."""
    python = base_environment(work)
    target = work / f"transformers-{release}"
    record = target / ".equilibria-left-out.json"
    if not (target / "transformers").is_dir():
        shutil.rmtree(target, ignore_errors=True)
        try:
            left_out = install(
                [str(python), "-m", "pip", "install", "-q", "--target", str(target)],
                [f"transformers=={release}"],
                work,
                release,
            )
        except InstallError:
            shutil.rmtree(target, ignore_errors=True)
            raise
        record.write_text(json.dumps(left_out))
    left_out = json.loads(record.read_text()) if record.exists() else []
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(work), **switches(left_out)}
    return str(python), env, left_out


def build_wheel(work: Path) -> Path:
    """The package's wheel, built from this checkout into ``work/wheel``."""
    folder = work / "wheel"
    shutil.rmtree(folder, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(HERE.parent)]
    done = run_pip(pip)
    if done.returncode != 0:
        raise SystemExit(f"building the package's wheel failed: {pip_error(done.stderr)}")
    return next(folder.glob("equilibria-*.whl"))


def transformers_bound(wheel: Path) -> Requirement:
    """The package's ``transformers`` requirement, read from its ``wheel``."""
    return next(r for r in requires_dist(wheel) if canonicalize_name(r.name) == "transformers")


def package_venv(work: Path, name: str) -> Path:
    """A venv ``work/name`` that sees the base environment's torch through a ``.pth`` file: its ``python``."""
    venv = work / name
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        base_site = next((work / "base" / "lib").glob("python3*/site-packages"))
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "base-torch.pth").write_text(f"{base_site}\n")
    return python


def package_environment(work: Path, release: str, wheel: Path) -> str:
    """The ``python`` of a venv where ``pip`` installed the package's ``wheel`` with ``transformers==release`` and
    the package's other dependencies, resolved for that release (torch is the base environment's, seen through a
    ``.pth`` file). ``InstallError`` with pip's reason when pip cannot: the release is not admitted, or a
    dependency is not on the index."""
    python = package_venv(work, f"package-{release}")
    pip = [str(python), "-m", "pip", "install", "-q"]
    for extra in ([f"transformers=={release}", str(wheel)], ["--no-deps", "--force-reinstall", str(wheel)]):
        done = run_pip([*pip, *extra])
        if done.returncode != 0:
            raise InstallError(f"pip install transformers=={release} + the package: {pip_error(done.stderr)}")
    return str(python)


def unbounded_environment(work: Path, release: str, wheel: Path) -> tuple[str, list[str]]:
    """``(python, left_out)`` of a venv holding ``transformers==release`` (as :func:`install` manages; ``left_out``
    its requirements it left out), the package's other dependencies, and its ``wheel`` installed with
    ``--no-deps``: the package on a release its bound refuses."""
    python = package_venv(work, f"package-{release}-bound-lifted")
    pip = [str(python), "-m", "pip", "install", "-q"]
    others = [str(r) for r in requires_dist(wheel) if canonicalize_name(r.name) != "transformers"]
    left_out = install(pip, [*others, f"transformers=={release}"], work, release)
    done = run_pip([*pip, "--no-deps", "--force-reinstall", str(wheel)])
    if done.returncode != 0:
        raise InstallError(f"pip install --no-deps the package: {pip_error(done.stderr)}")
    return str(python), left_out


def run_smoke(python: str, work: Path, label: str, extra_env: dict | None = None) -> dict:
    """Run :mod:`compat_smoke` with that ``python`` (in ``work/smoke-<label>``, with ``extra_env`` set too):
    ``{family: "ok" or the error}``."""
    folder = work / f"smoke-{label}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.update(extra_env or {})
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


def package_check(work: Path, release: str, wheel: Path | None) -> tuple[dict, dict | None]:
    """The package's smoke test on ``release`` (``wheel=None``: this environment): ``{family: "ok" or the error}``,
    and for a release the package's bound refuses, the same with the bound lifted (else ``None``)."""
    if wheel is None:
        return run_smoke(sys.executable, work, release), None
    try:
        return run_smoke(package_environment(work, release, wheel), work, release), None
    except InstallError as err:
        refused = {"*": str(err)}
    bound = transformers_bound(wheel)
    if Version(release) in bound.specifier:
        return refused, None
    refused = {"*": f"not admitted ({bound}); {refused['*']}"}
    try:
        python, left_out = unbounded_environment(work, release, wheel)
        lifted = run_smoke(python, work, f"{release}-bound-lifted", switches(left_out))
    except InstallError as err:
        lifted = {"*": f"with the bound lifted: {err}"}
    return refused, lifted


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
    if "absent" in other:  # a looped LM transformers ships, on a release before it
        return {"status": "absent", "error": other["absent"]}
    gap = max(float((reference[key] - other[key]).abs().max()) for key in reference if key.startswith("logits"))
    greedy = [key for key in reference if key.startswith("greedy") and not torch.equal(reference[key], other[key])]
    status = "ok" if gap <= atol and not greedy else "different"
    return {"status": status, "max_logit_diff": gap, "greedy_differs": greedy}


def release_row(release: str, reference: dict, work: Path, wheel: Path | None, atol: float) -> dict:
    """One release's verdicts, per family: the folder as remote code (``status``, see :func:`compare`; ``install
    failed`` with pip's reason where transformers cannot be installed), the package's smoke test (``package``:
    ``ok`` or the error; ``package_bound_lifted`` where the package's bound refuses the release) and, where
    transformers was installed with ``--no-deps``, the ``install`` note. ``wheel=None``: the current environment."""
    left_out: list[str] = []
    try:
        python, env, left_out = (sys.executable, dict(os.environ), []) if wheel is None else environment(work, release)
    except InstallError as err:
        errors = {"status": "install failed", "error": f"pip install transformers=={release}: {err}"}
    else:
        got = run_check(python, env, work / "folders", work / f"outputs-{release}.pt")
        errors = {"status": "error", **got["results"]["*"]} if "*" in got["results"] else None
    package, lifted = package_check(work, release, wheel)
    row = {}
    for model_type, ref in reference.items():
        row[model_type] = errors or compare(ref, got["results"][model_type], atol)
        row[model_type] = {**row[model_type], "package": package.get("*") or package.get(model_type, "not run")}
        if lifted is not None:
            row[model_type]["package_bound_lifted"] = lifted.get("*") or lifted.get(model_type, "not run")
        if left_out:
            row[model_type]["install"] = install_note(release, left_out)
    return row


def passed(verdict: dict) -> bool:
    """Both checks ``ok``, or a looped LM transformers ships absent from a release before it (both say so)."""
    absent = verdict["status"] == "absent" and verdict["package"].startswith("absent")
    return absent or (verdict["status"] == "ok" and verdict["package"] == "ok")


def newest_release(text: str) -> str:
    """The newest final release in the output of ``pip index versions transformers``."""
    match = re.search(r"^Available versions: (.+)$", text, re.M)
    versions = [Version(v.strip()) for v in match.group(1).split(",")] if match else []
    final = [v for v in versions if not v.is_prerelease and not v.is_devrelease]
    if not final:
        raise SystemExit(f"--newest: no release of transformers in pip's answer: {text.strip()[:300]!r}")
    return str(max(final))


def find_newest() -> str:
    """The newest transformers release on the package index this environment's pip uses."""
    done = run_pip([sys.executable, "-m", "pip", "index", "versions", "transformers"])
    if done.returncode != 0:
        raise SystemExit(f"--newest: pip index versions transformers failed: {pip_error(done.stderr)}")
    return newest_release(done.stdout)


def releases_to_run(args) -> list[str]:
    """The releases a run covers: ``current`` (``--quick``), the newest on the index (``--newest``), or
    ``--releases``."""
    if args.quick:
        return ["current"]
    if args.newest:
        return [find_newest()]
    return [r.strip() for r in args.releases.split(",") if r.strip()]


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", default=",".join(DEFAULT_RELEASES), help="comma-separated transformers releases")
    parser.add_argument("--work", default="/tmp/equilibria-compat", help="where the environments are kept")
    parser.add_argument("--atol", type=float, default=1e-5, help="the largest logit difference that counts as equal")
    parser.add_argument("--quick", action="store_true", help="the current environment only (no install)")
    parser.add_argument(
        "--newest", action="store_true", help="instead of --releases: the newest release on the index (pip index)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 unless every family is ok on every release")
    parser.add_argument("--output-dir", default=str(RESULTS), help="where the JSON goes (the default: the docs too)")
    args = parser.parse_args(argv)
    if args.quick and args.newest:
        parser.error("--quick runs the current environment; --newest installs a release: choose one")
    return args


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
    releases = releases_to_run(args)
    wheel = None if args.quick else build_wheel(work)
    rows = {}
    for release in releases:
        rows[release] = release_row(release, reference, work, wheel, args.atol)
        print(release, {k: (v["status"], v["package"]) for k, v in rows[release].items()}, flush=True)
    payload = {
        "command": "python benchmarks/compat_matrix.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "reference": {"transformers": transformers.__version__, "torch": torch.__version__},
        "atol": args.atol,
        "families": sorted(reference),
        "releases": rows,
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_json.save_results(out / ("compat_newest.json" if args.newest else "compat_matrix.json"), payload, indent=2)
    failed = [
        f"{r} {t}: {v['status']}" + (f" ({v['error']})" if "error" in v else "") + f"; package: {v['package']}"
        for r, row in rows.items()
        for t, v in row.items()
        if not passed(v)
    ]
    if args.check and failed:
        raise SystemExit("compatibility matrix failed:\n  " + "\n  ".join(failed))
    return payload


if __name__ == "__main__":
    main()
