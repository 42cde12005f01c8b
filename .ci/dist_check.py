"""The release stage: build the wheel and the sdist from this checkout and check what a user would install.

``python -m build`` makes the sdist, then the wheel from the sdist (an isolated build environment, setuptools from
the index). The check then asserts, and lists every problem it finds:

- metadata: the name; one version in ``pyproject.toml``, the wheel, ``equilibria.__version__`` and the top release
  of ``CHANGELOG.md``; ``License-Expression: Apache-2.0`` with ``LICENSE`` as its license file; ``Requires-Python``,
  the dependencies, the extras, the classifiers and the entry points as ``pyproject.toml`` declares them; the README
  as the long description;
- the wheel: every module of ``src/equilibria`` (by name, the remote-code files a saved folder copies listed on
  their own: each module named in a ``_remote_auto_map`` and every module it imports with ``from .x import``), the
  ``LICENSE``; nothing but the package and its ``dist-info`` (no ``tests/``, ``docs/``, ``benchmarks/``,
  ``examples/``), no compiled ``.pyc``;
- the sdist: ``LICENSE``, ``README.md``, ``pyproject.toml``, ``PKG-INFO`` and the package's sources, and no
  ``tests/``, ``benchmarks/`` or ``docs/`` (``MANIFEST.in``).

    python .ci/dist_check.py [--outdir DIR] [--no-isolation]
"""

from __future__ import annotations

import argparse
import ast
import configparser
import email.message
import email.parser
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "equilibria"
LICENSE = "Apache-2.0"
FORBIDDEN = ("tests/", "docs/", "benchmarks/", "examples/", ".ci/")  # wheel paths that are not the package


def build(outdir: Path, isolation: bool = True) -> tuple[Path, Path]:
    """Build the sdist and the wheel (from the sdist) into ``outdir``: ``(wheel, sdist)``."""
    command = [sys.executable, "-m", "build", "--outdir", str(outdir), *([] if isolation else ["--no-isolation"])]
    done = subprocess.run([*command, str(ROOT)], capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise SystemExit(f"dist check: `{' '.join(command)}` failed (exit {done.returncode}):\n{tail}")
    wheels, sdists = sorted(outdir.glob("equilibria-*.whl")), sorted(outdir.glob("equilibria-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"dist check: expected one wheel and one sdist in {outdir}, found {wheels + sdists}")
    return wheels[0], sdists[0]


def changelog_release(text: str) -> str:
    """The version of the first ``## X.Y.Z`` heading of a changelog (``""`` when there is none); a ``## Unreleased``
    section above it (what is merged since that release) is not a release."""
    match = re.search(r"^## (?!Unreleased\b)(\S+)", text, re.M)
    return match.group(1) if match else ""


def package_version() -> str:
    """``equilibria.__version__`` of the installed package (what ``equilibria --version`` prints)."""
    import equilibria

    return equilibria.__version__


def remote_code_files(modeling: Path = PACKAGE / "modeling") -> set[str]:
    """The files of ``modeling`` a saved folder carries: the modules a ``_remote_auto_map`` names (``"module.Class"``)
    and, transitively, every sibling they import with a single-dot relative import (transformers'
    ``custom_object_save`` copies exactly those)."""
    todo = []
    for path in sorted(modeling.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_remote_auto_map" for t in node.targets):
                todo += [target.split(".")[0] + ".py" for target in ast.literal_eval(node.value).values()]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        path = modeling / name
        if not path.exists():
            continue  # reported by the caller as missing from the source tree
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [f"{node.module}.py"] if node.module else [f"{alias.name}.py" for alias in node.names]
    return found


def metadata_problems(meta: email.message.Message, project: dict, versions: dict[str, str]) -> list[str]:
    """What in the wheel's ``METADATA`` disagrees with ``pyproject.toml``'s ``[project]`` (and the other
    ``versions``: where each says the release is)."""
    problems = []
    if meta["Name"] != project["name"]:
        problems.append(f"Name is {meta['Name']!r}, pyproject says {project['name']!r}")
    versions = {"pyproject.toml": project["version"], "the wheel": meta["Version"], **versions}
    if len(set(versions.values())) != 1:
        problems.append(
            "the versions differ: " + ", ".join(f"{where} {v or '(none)'}" for where, v in versions.items())
        )
    if project.get("license") != LICENSE or meta["License-Expression"] != LICENSE:
        problems.append(
            f"License-Expression is {meta['License-Expression']!r} (pyproject: {project.get('license')!r}), "
            f"expected {LICENSE!r}"
        )
    if "LICENSE" not in (meta.get_all("License-File") or []):
        problems.append(f"License-File does not name LICENSE: {meta.get_all('License-File')}")
    if meta["Requires-Python"] != project["requires-python"]:
        problems.append(
            f"Requires-Python is {meta['Requires-Python']!r}, pyproject says {project['requires-python']!r}"
        )
    python = SpecifierSet(project["requires-python"])
    for classifier in project.get("classifiers", []):
        minor = re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier)
        if minor and f"{minor.group(1)}.0" not in python:
            problems.append(f"classifier {classifier!r} is outside Requires-Python {project['requires-python']}")
    if sorted(meta.get_all("Classifier") or []) != sorted(project.get("classifiers", [])):
        problems.append(f"Classifier: {meta.get_all('Classifier')}, pyproject says {project.get('classifiers')}")
    declared = {str(Requirement(r)) for r in project["dependencies"]}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        declared |= {str(Requirement(f'{r}; extra == "{extra}"')) for r in requirements}
    shipped = {str(Requirement(r)) for r in meta.get_all("Requires-Dist") or []}
    if declared != shipped:
        problems.append(
            f"Requires-Dist differs from pyproject: missing {sorted(declared - shipped)}, "
            f"unexpected {sorted(shipped - declared)}"
        )
    if sorted(meta.get_all("Provides-Extra") or []) != sorted(project.get("optional-dependencies", {})):
        problems.append(
            f"Provides-Extra: {meta.get_all('Provides-Extra')}, pyproject: {list(project['optional-dependencies'])}"
        )
    readme = (ROOT / project["readme"]).read_text()
    if meta["Description-Content-Type"] != "text/markdown" or meta.get_payload().strip() != readme.strip():
        problems.append(
            f"the long description is not {project['readme']} as markdown "
            f"(Description-Content-Type {meta['Description-Content-Type']!r})"
        )
    return problems


def entry_point_problems(text: str, project: dict) -> list[str]:
    """What in the wheel's ``entry_points.txt`` differs from the scripts and entry points ``pyproject.toml``
    declares."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # names are case-sensitive
    parser.read_string(text)
    shipped = {group: dict(parser[group]) for group in parser.sections()}
    declared = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    return [
        f"entry points [{group}] in the wheel: {shipped.get(group, {})}, pyproject declares {declared.get(group, {})}"
        for group in sorted(set(shipped) | set(declared))
        if shipped.get(group, {}) != declared.get(group, {})
    ]


def wheel_problems(wheel: Path, project: dict, versions: dict[str, str]) -> list[str]:
    """Everything wrong with the wheel: its metadata (:func:`metadata_problems`), entry points and files."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"equilibria-{project['version']}.dist-info"
        if f"{info}/METADATA" not in names:
            return [
                f"no {info}/METADATA in {wheel.name} (its dist-info: {sorted(n for n in names if '.dist-info/' in n)})"
            ]
        meta = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode() if f"{info}/entry_points.txt" in names else ""
        license_text = archive.read(f"{info}/licenses/LICENSE") if f"{info}/licenses/LICENSE" in names else None
    problems = metadata_problems(meta, project, versions) + entry_point_problems(entry_points, project)
    remote = remote_code_files()
    if not remote:
        problems.append("found no _remote_auto_map under src/equilibria/modeling: the remote-code files are unknown")
    absent = sorted(name for name in remote if not (PACKAGE / "modeling" / name).exists())
    if absent:
        problems.append(f"a _remote_auto_map or a relative import names modules that do not exist: {absent}")
    missing = sorted(
        f"equilibria/modeling/{name}" for name in remote - set(absent) if f"equilibria/modeling/{name}" not in names
    )
    if missing:
        problems.append(f"remote-code files a saved folder needs are missing from the wheel: {missing}")
    sources = {
        f"equilibria/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts
    }
    if sources - names:
        problems.append(f"modules of src/equilibria missing from the wheel: {sorted(sources - names)}")
    if license_text is None:
        problems.append(f"the wheel has no {info}/licenses/LICENSE")
    elif (ROOT / "LICENSE").read_bytes() != license_text:
        problems.append("the wheel's LICENSE differs from the checkout's")
    strays = sorted(n for n in names if not n.startswith(("equilibria/", f"{info}/")) or n.startswith(FORBIDDEN))
    if strays:
        problems.append(f"the wheel holds files outside the package (tests, docs, benchmarks, ...): {strays[:20]}")
    compiled = sorted(n for n in names if n.endswith(".pyc") or "__pycache__/" in n)
    if compiled:
        problems.append(f"the wheel holds compiled files: {compiled[:10]}")
    return problems


def sdist_problems(sdist: Path, version: str) -> list[str]:
    """What the sdist lacks of what a build from it needs (and a redistributor must ship)."""
    top = f"equilibria-{version}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    required = ["LICENSE", "README.md", "pyproject.toml", "PKG-INFO", "src/equilibria/__init__.py"]
    required += [f"src/equilibria/modeling/{name}" for name in sorted(remote_code_files())]
    missing = [name for name in required if f"{top}/{name}" not in names]
    problems = [f"the sdist {sdist.name} lacks {missing}"] if missing else []
    strays = sorted(n for n in names if n.split("/")[1:2] in (["tests"], ["benchmarks"], ["docs"]))
    if strays:  # a part of the suite without its conftest and data cannot run: MANIFEST.in prunes them
        problems.append(f"the sdist holds tests, benchmarks or docs (see MANIFEST.in): {strays[:10]}")
    return problems


def check(wheel: Path, sdist: Path) -> list[str]:
    """Every problem of the built ``wheel`` and ``sdist`` against this checkout."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    versions = {
        "equilibria.__version__": package_version(),
        "CHANGELOG.md's top release": changelog_release((ROOT / "CHANGELOG.md").read_text()),
    }
    return wheel_problems(wheel, project, versions) + sdist_problems(sdist, project["version"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outdir", help="where the wheel and the sdist go (default: a temporary folder)")
    parser.add_argument("--no-isolation", action="store_true", help="build in this environment (its setuptools)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        outdir = Path(args.outdir or scratch)
        outdir.mkdir(parents=True, exist_ok=True)
        wheel, sdist = build(outdir, isolation=not args.no_isolation)
        problems = check(wheel, sdist)
        if problems:
            print(f"dist check failed ({wheel.name}, {sdist.name}):\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        print(
            f"dist check passed: {wheel.name} ({len(zipfile.ZipFile(wheel).namelist())} files), {sdist.name}; "
            f"remote-code files: {', '.join(sorted(remote_code_files()))}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
