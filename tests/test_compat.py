"""The compatibility matrix's own check (benchmarks/compat_matrix.py --quick): every portable family's folder, run as
remote code in a fresh interpreter where ``import equilibria`` fails, gives the development version's logits and
greedy tokens (batched and left-padded, with and without the cache, at a loop count passed to generate), and so does
the folder of each looped LM transformers ships (its own classes, two loops set in the config); and the package's
smoke test (train one step from the CLI, load, generate) passes for every family."""

from __future__ import annotations

import json

import pytest
from conftest import load_benchmark

from tools.docs.pages import compatibility


@pytest.mark.slow
def test_every_portable_folder_runs_as_remote_code_with_the_same_numbers(tmp_path):
    compat_matrix = load_benchmark("compat_matrix")
    payload = compat_matrix.main(
        ["--quick", "--check", "--work", str(tmp_path / "work"), "--output-dir", str(tmp_path)]
    )
    assert json.loads((tmp_path / "compat_matrix.json").read_text()) == payload
    row = payload["releases"]["current"]
    ours = {"ouro", "attractor_lm", "attractor_lm-puzzles", "eqr", "phdeq"}
    assert set(row) == ours | {"dory", "hrm_text", "inkling2_loop_text"} == set(payload["families"])
    assert all(verdict["status"] == "ok" and verdict["max_logit_diff"] <= 1e-5 for verdict in row.values()), row
    assert {verdict["package"] for verdict in row.values()} == {"ok"}, row


def test_a_difference_or_an_error_is_reported_not_passed():
    compat_matrix = load_benchmark("compat_matrix")
    import torch

    reference = {"logits": torch.zeros(2, 3), "greedy_cache_True": torch.tensor([[1, 2]])}
    same = compat_matrix.compare(reference, {k: v.clone() for k, v in reference.items()}, atol=1e-5)
    assert same["status"] == "ok"
    other = {"logits": torch.zeros(2, 3) + 1e-3, "greedy_cache_True": torch.tensor([[1, 3]])}
    verdict = compat_matrix.compare(reference, other, atol=1e-5)
    assert verdict["status"] == "different" and verdict["greedy_differs"] == ["greedy_cache_True"]
    assert compat_matrix.compare(reference, {"error": "ImportError: x"}, atol=1e-5)["status"] == "error"
    absent = compat_matrix.compare(reference, {"absent": "transformers 5.4.0 has no DoryForCausalLM"}, atol=1e-5)
    assert absent["status"] == "absent"  # a looped LM transformers ships, on a release before it
    assert compat_matrix.passed({**absent, "package": "absent: transformers 5.4.0 has no dory model"})
    assert not compat_matrix.passed({**absent, "package": "RuntimeError: x"})
    assert not compat_matrix.passed({**verdict, "package": "ok"}) and compat_matrix.passed({**same, "package": "ok"})


PIP_NO_DISTRIBUTION = """\
ERROR: Ignored the following versions that require a different python version: 2.5.0 Requires-Python >=3.12
ERROR: Could not find a version that satisfies the requirement kernels<0.20,>=0.19.1 (from transformers) (from versions: 0.17.2)
ERROR: No matching distribution found for kernels<0.20,>=0.19.1 (from transformers)
"""
PIP_CONFLICT = """\
ERROR: Cannot install equilibria==0.2.0 and transformers==5.25.0 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested transformers==5.25.0
    equilibria 0.2.0 depends on transformers<5.25 and >=5.4

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def fake_pip(monkeypatch, compat_matrix, answers):
    """Replace the matrix's pip calls: each call takes the next ``(returncode, stderr)``; the commands are
    recorded."""
    import subprocess

    calls = []

    def run_pip(command):
        calls.append(command)
        code, stderr = answers.pop(0)
        return subprocess.CompletedProcess(command, code, "", stderr)

    monkeypatch.setattr(compat_matrix, "run_pip", run_pip)
    return calls


def test_pip_failures_are_reported_by_their_reason():
    compat_matrix = load_benchmark("compat_matrix")
    assert compat_matrix.pip_error(PIP_NO_DISTRIBUTION) == (
        "No matching distribution found for kernels<0.20,>=0.19.1 (from transformers)"
    )
    assert compat_matrix.pip_error(PIP_CONFLICT) == (
        "Cannot install equilibria==0.2.0 and transformers==5.25.0: conflicting dependencies; "
        "equilibria 0.2.0 depends on transformers<5.25 and >=5.4"
    )
    assert compat_matrix.pip_error("") == "pip failed"


def test_a_release_pip_cannot_install_is_a_row_of_cells_with_the_reason(tmp_path, monkeypatch):
    """No pip error escapes the matrix: a release whose transformers cannot be installed gets an ``install failed``
    cell per family, with pip's reason, and the package's verdict beside it (no install is run here)."""
    compat_matrix = load_benchmark("compat_matrix")
    (tmp_path / "base" / "bin").mkdir(parents=True)
    (tmp_path / "base" / "bin" / "python").touch()  # the base environment exists
    missing = "ERROR: No matching distribution found for transformers==9.9.9\n"
    calls = fake_pip(monkeypatch, compat_matrix, [(1, missing)])
    monkeypatch.setattr(compat_matrix, "package_check", lambda *a: ({"*": "pip install ...: refused"}, None))
    row = compat_matrix.release_row("9.9.9", {"ouro": {}, "eqr": {}}, tmp_path, tmp_path / "x.whl", atol=1e-5)
    assert len(calls) == 1 and calls[0][-1] == "transformers==9.9.9"
    reason = "pip install transformers==9.9.9: No matching distribution found for transformers==9.9.9"
    cell = {"status": "install failed", "error": reason, "package": "pip install ...: refused"}
    assert row == {"ouro": cell, "eqr": cell}
    assert not (tmp_path / "transformers-9.9.9").exists()  # the next run tries again


def test_a_missing_dependency_of_transformers_is_left_out_and_named(tmp_path, monkeypatch):
    """When only a requirement of transformers is missing from the index (5.25.0's ``kernels``), its other
    requirements are installed, then transformers with ``--no-deps``, and the note says what was left out and which
    of transformers' switches the checks run with (5.25's ``from_pretrained`` needs ``kernels`` unless told not to)."""
    from packaging.requirements import Requirement

    compat_matrix = load_benchmark("compat_matrix")
    own = [Requirement("huggingface-hub<3.0,>=2.4.0"), Requirement("kernels<0.20,>=0.19.1")]
    monkeypatch.setattr(compat_matrix, "release_requirements", lambda work, release: own)
    calls = fake_pip(monkeypatch, compat_matrix, [(1, PIP_NO_DISTRIBUTION), (0, ""), (0, "")])
    left_out = compat_matrix.install(["pip", "install"], ["transformers==5.25.0"], tmp_path, "5.25.0")
    assert calls == [
        ["pip", "install", "transformers==5.25.0"],
        ["pip", "install", "huggingface-hub<3.0,>=2.4.0"],
        ["pip", "install", "--no-deps", "transformers==5.25.0"],
    ]
    assert left_out == ["kernels<0.20,>=0.19.1"] and compat_matrix.switches(left_out) == {"USE_HUB_KERNELS": "NO"}
    note = compat_matrix.install_note("5.25.0", left_out)
    assert note.startswith("transformers 5.25.0 installed with --no-deps") and note.endswith("USE_HUB_KERNELS=NO")
    fake_pip(monkeypatch, compat_matrix, [(1, PIP_CONFLICT)])  # anything else is the install's failure
    with pytest.raises(compat_matrix.InstallError, match="conflicting dependencies"):
        compat_matrix.install(["pip", "install"], ["transformers==5.25.0"], tmp_path, "5.25.0")


def test_newest_runs_the_newest_final_release_on_the_index(monkeypatch):
    compat_matrix = load_benchmark("compat_matrix")
    answer = "transformers (5.26.0rc1)\nAvailable versions: 5.26.0rc1, 5.25.0, 5.24.0, 4.57.6\n  INSTALLED: 5.24.0\n"
    assert compat_matrix.newest_release(answer) == "5.25.0"
    with pytest.raises(SystemExit, match="no release of transformers"):
        compat_matrix.newest_release("WARNING: nothing here")
    import subprocess

    monkeypatch.setattr(compat_matrix, "run_pip", lambda command: subprocess.CompletedProcess(command, 0, answer, ""))
    args = compat_matrix.parse_args(["--releases", "5.4.0,5.24.0", "--check", "--newest"])  # ./run compat --newest
    assert compat_matrix.releases_to_run(args) == ["5.25.0"]
    assert compat_matrix.releases_to_run(compat_matrix.parse_args(["--releases", "5.4.0, 5.24.0"])) == [
        "5.4.0",
        "5.24.0",
    ]
    with pytest.raises(SystemExit):
        compat_matrix.parse_args(["--quick", "--newest"])


def test_the_docs_table_is_the_recorded_matrix_over_the_admitted_range():
    """The page shows the recorded JSON (and its command); every family passes both checks on every recorded
    release; and ``pyproject.toml`` admits exactly the recorded range (its minor releases)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    payload = json.loads((root / "docs" / "results" / "compat_matrix.json").read_text())
    page = (root / "docs" / "compatibility.md").read_text()
    assert "<!-- table: compat-matrix -->\n" + compatibility.compat_matrix() + "\n<!-- /table -->" in page
    assert payload["command"].split("--work")[0].strip() in page.replace("`", "")
    cells = {(r, f): (v["status"], v["package"]) for r, row in payload["releases"].items() for f, v in row.items()}
    assert len(cells) == len(payload["families"]) * len(payload["releases"])
    first = {"dory": (5, 24), "inkling2_loop_text": (5, 24), "hrm_text": (5, 9)}  # transformers' looped LMs
    assert set(first) <= set(payload["families"])
    for (release, family), (status, package) in cells.items():
        absent = tuple(int(x) for x in release.split(".")[:2]) < first.get(family, (0, 0))
        expected = ("absent", True) if absent else ("ok", True)
        assert (status, package.startswith("absent") if absent else package == "ok") == expected, (release, family)
    minors = sorted(tuple(int(x) for x in release.split(".")[:2]) for release in payload["releases"])
    (major, low), (_, high) = minors[0], minors[-1]
    assert f'"transformers>={major}.{low},<{major}.{high + 1}"' in (root / "pyproject.toml").read_text()


def test_the_page_says_what_the_newest_release_gave():
    """docs/compatibility.md's account of the newest release is ``compat_newest.json``'s: the release and every folder
    ``ok`` as remote code. Installed with all its requirements and the package ``ok`` there, the bound in
    ``pyproject.toml`` admits it and the page says so; measured with a requirement left out, the bound stays below
    it and the page names the switch the checks ran with."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    payload = json.loads((root / "docs" / "results" / "compat_newest.json").read_text())
    page = (root / "docs" / "compatibility.md").read_text()
    ((release, row),) = payload["releases"].items()
    assert f"### The newest release: transformers {release}" in page and len(row) == len(payload["families"])
    assert {v["status"] for v in row.values()} == {"ok"} and {v["max_logit_diff"] for v in row.values()} == {0.0}
    assert "largest logit difference 0.0" in page
    major, minor = (int(x) for x in release.split(".")[:2])
    bound = (root / "pyproject.toml").read_text().split('"transformers>=')[1].split('"')[0]
    notes = {v.get("install") for v in row.values()}
    if notes == {None}:  # a plain install: admitted
        assert {v["package"] for v in row.values()} == {"ok"} and f"<{major}.{minor + 1}" in bound
        assert f"### The newest release: transformers {release}, admitted" in page
    else:
        (note,) = notes
        assert note.endswith("USE_HUB_KERNELS=NO") and "USE_HUB_KERNELS=NO" in page
        assert all(v["package"].startswith("not admitted") for v in row.values()) and f"<{major}.{minor}" in bound


def test_cropping_the_cache_keeps_its_telemetry_in_step():
    """``crop(-n)`` (what assisted decoding calls after rejected drafts) cuts the per-position telemetry with the
    keys and values (Ouro's exit steps, the Attractor's solver steps)."""
    import torch
    from conftest import tiny_attractor, tiny_ouro

    for model, telemetry in ((tiny_ouro(), "exit_steps"), (tiny_attractor(), "solver_steps")):
        ids = torch.randint(3, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            cache = model(ids, use_cache=True).cache
        cache.crop(-2)
        assert cache.get_seq_length() == 3 and getattr(cache, telemetry).shape == (2, 3), type(cache).__name__


def test_cropping_keeps_the_telemetry_in_step_under_the_old_meaning_of_crop(monkeypatch):
    """Before transformers 5.18 ``crop(n)`` with ``n > 0`` kept the first ``n`` positions (assisted decoding called
    it so); the telemetry follows that meaning too (simulated here on the installed release)."""
    import torch
    from conftest import tiny_ouro
    from transformers import DynamicCache

    current = DynamicCache.crop

    def legacy_crop(self, max_length: int) -> None:
        current(self, max_length - self.get_seq_length() if max_length >= 0 else max_length)

    monkeypatch.setattr(DynamicCache, "crop", legacy_crop)
    model = tiny_ouro()
    ids = torch.randint(3, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
    cache.crop(4)
    assert cache.get_seq_length() == 4 and cache.exit_steps.shape == (2, 4)
