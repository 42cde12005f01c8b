"""The peer stage: transformers' own common model tests (``../shared/peer-tests``) against Ouro and the Attractor LM,
judged against the accepted exceptions in ``.ci/peer-exceptions.txt``.

It fails on any failure or error outside that list, and on a listed exception that now passes (so the list
shrinks as things are fixed). The suites are copied to a temporary folder first: ``run_peer.sh`` writes into its
own folder, and CI's copy of ``shared/`` is read-only. An exception whose reason starts ``flaky:`` may pass or fail.

    python .ci/peer.py [--python .venv/bin/python] [--peer-tests ../shared/peer-tests] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = {"ouro": "test_modeling_ouro_peer", "attractor": "test_modeling_attractor_peer"}


def read_exceptions(path: Path) -> dict[str, str]:
    """``family::TestClass::test_name`` -> reason, from lines ``ID  reason`` (``#`` starts a comment)."""
    exceptions: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line:
            continue
        test, _, reason = line.partition(" ")
        if test.count("::") != 2 or not reason.strip():
            raise SystemExit(f"{path}:{number}: expected 'family::TestClass::test_name  reason', got {line!r}")
        if test in exceptions:
            raise SystemExit(f"{path}:{number}: {test} is listed twice")
        exceptions[test] = reason.strip()
    return exceptions


def outcomes(xml: Path, family: str) -> dict[str, str]:
    """``family::TestClass::test_name`` -> ``passed`` / ``failed`` / ``error`` / ``skipped``, from a junit file."""
    result = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        tags = [child.tag for child in case]
        outcome = next((t for t in ("failure", "error", "skipped") if t in tags), "passed")
        outcome = {"failure": "failed"}.get(outcome, outcome)
        test = f"{family}::{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if result.get(test) in ("failed", "error"):  # a teardown error after a failure keeps the failure
            continue
        result[test] = outcome
    return result


def run_suites(python: str, peer_tests: Path, work: Path) -> dict[str, str]:
    """Copy the peer suites to ``work``, run both families, return every test's outcome."""
    copy = work / "peer-tests"
    shutil.copytree(peer_tests, copy, symlinks=True, ignore=shutil.ignore_patterns("results", "src", "__pycache__"))
    (copy / "results").mkdir()
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # CI's shared/ has no write bits; the copy must be writable
    env = {**os.environ, "PY": str(Path(python).absolute())}
    proc = subprocess.run(["bash", str(copy / "run_peer.sh"), "all"], env=env, cwd=copy, text=True)
    found: dict[str, str] = {}
    for family, name in FAMILIES.items():
        xml = copy / "results" / f"{name}.xml"
        if not xml.is_file():
            log = copy / "results" / f"{name}.log"
            tail = log.read_text()[-3000:] if log.is_file() else "(no log)"
            raise SystemExit(f"peer stage: {family} wrote no junit file (run_peer.sh exit {proc.returncode}):\n{tail}")
        found.update(outcomes(xml, family))
    return found


def judge(found: dict[str, str], exceptions: dict[str, str]) -> list[str]:
    """The problems: failures outside the list, listed tests that pass now, listed tests that no longer exist."""
    problems = []
    for test, outcome in sorted(found.items()):
        if outcome in ("failed", "error") and test not in exceptions:
            problems.append(f"{outcome.upper()} {test}: not an accepted exception (.ci/peer-exceptions.txt)")
        elif outcome == "passed" and test in exceptions and not exceptions[test].startswith("flaky:"):
            problems.append(f"PASSES NOW {test}: remove it from .ci/peer-exceptions.txt ({exceptions[test]})")
    for test in sorted(set(exceptions) - set(found)):
        problems.append(f"NOT RUN {test}: listed in .ci/peer-exceptions.txt but not in the peer suites")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--peer-tests", type=Path, default=ROOT.parent / "shared" / "peer-tests")
    parser.add_argument("--exceptions", type=Path, default=ROOT / ".ci" / "peer-exceptions.txt")
    parser.add_argument("--keep", type=Path, help="run in this folder (kept: logs and junit files in results/)")
    args = parser.parse_args(argv)
    if not (args.peer_tests / "run_peer.sh").is_file():
        raise SystemExit(f"--peer-tests {args.peer_tests}: no run_peer.sh there (the shared/ peer suites)")
    exceptions = read_exceptions(args.exceptions)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        found = run_suites(args.python, args.peer_tests, args.keep)
    else:
        with tempfile.TemporaryDirectory() as work:
            found = run_suites(args.python, args.peer_tests, Path(work))
    counts = {o: sum(v == o for v in found.values()) for o in ("passed", "failed", "error", "skipped")}
    print("peer stage: " + ", ".join(f"{n} {o}" for o, n in counts.items()) + f"; {len(exceptions)} accepted exceptions")
    problems = judge(found, exceptions)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
