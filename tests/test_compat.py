"""The compatibility matrix's own check (benchmarks/compat_matrix.py --quick): every portable family's folder, run as
remote code in a fresh interpreter where ``import equilibria`` fails, gives the development version's logits and
greedy tokens (batched and left-padded, with and without the cache, at a loop count passed to generate); and the
package's smoke test (train one step from the CLI, load, generate) passes for every family."""

from __future__ import annotations

import json

from conftest import load_benchmark


def test_every_portable_folder_runs_as_remote_code_with_the_same_numbers(tmp_path):
    compat_matrix = load_benchmark("compat_matrix")
    payload = compat_matrix.main(
        ["--quick", "--check", "--work", str(tmp_path / "work"), "--output-dir", str(tmp_path)]
    )
    assert json.loads((tmp_path / "compat_matrix.json").read_text()) == payload
    row = payload["releases"]["current"]
    assert set(row) == {"ouro", "attractor_lm", "attractor_lm-puzzles", "eqr", "phdeq"} == set(payload["families"])
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


def test_the_docs_table_is_the_recorded_matrix_over_the_admitted_range():
    """The page shows the recorded JSON (and its command); every family passes both checks on every recorded
    release; and ``pyproject.toml`` admits exactly the recorded range (its minor releases)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc_tables = load_benchmark("doc_tables")
    payload = json.loads((root / "docs" / "results" / "compat_matrix.json").read_text())
    page = (root / "docs" / "compatibility.md").read_text()
    assert "<!-- table: compat-matrix -->\n" + doc_tables.compat_matrix() + "\n<!-- /table -->" in page
    assert payload["command"].split("--work")[0].strip() in page.replace("`", "")
    cells = {(r, f): (v["status"], v["package"]) for r, row in payload["releases"].items() for f, v in row.items()}
    assert set(cells.values()) == {("ok", "ok")} and len(cells) == len(payload["families"]) * len(payload["releases"])
    minors = sorted(tuple(int(x) for x in release.split(".")[:2]) for release in payload["releases"])
    (major, low), (_, high) = minors[0], minors[-1]
    assert f'"transformers>={major}.{low},<{major}.{high + 1}"' in (root / "pyproject.toml").read_text()


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
