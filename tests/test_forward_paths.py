"""A forward reads in a few files: from input ids to logits, each family's forward runs a bounded number of the
package's functions, in at most four files (``benchmarks/forward_paths.py``, issue #41's targets)."""

from __future__ import annotations

import json

import pytest
from conftest import load_benchmark

ROOT_RESULTS = load_benchmark("results_json").RESULTS


@pytest.mark.slow
def test_the_forward_paths_meet_their_targets(tmp_path):
    forward_paths = load_benchmark("forward_paths")
    data = forward_paths.main(["--quick", "--output-dir", str(tmp_path)])
    assert data["missed"] == [], data["missed"]
    paths = data["paths"]
    assert paths["ouro"]["functions"] <= 20 and paths["ouro"]["files"] <= 4
    assert paths["attractor_lm"]["functions"] <= 30 and paths["attractor_lm"]["files"] <= 4
    assert "equilibria.modeling.modeling_ouro:OuroModel.forward" in paths["ouro"]["names"]  # the path is traced
    assert json.loads((tmp_path / "forward_paths.json").read_text())["paths"] == paths


def test_the_target_check_fails_on_the_paths_of_release_0_2():
    """The check can fail: the paths release 0.2 had (41 functions in 8 files for Ouro) are over target."""
    forward_paths = load_benchmark("forward_paths")
    before = json.loads((ROOT_RESULTS / "forward_paths_0.2.json").read_text())["paths"]
    missed = forward_paths.missed_targets(before)
    assert [line.split(":")[0] for line in missed] == ["ouro", "attractor_lm"]


@pytest.mark.slow
def test_the_decode_comparison_with_earlier_code_runs_and_decodes_alike(tmp_path):
    """``bench_decode_against_release.py --quick``: the 0.2 folder loaded with its own remote code (the earlier code)
    and with this checkout's classes decodes the same tokens, and both are timed in one interleaved run."""
    bench = load_benchmark("bench_decode_against_release")
    saved = ROOT_RESULTS.parents[1] / "tests" / "data" / "saved-0.2" / "ouro"
    data = bench.main(["--quick", "--base-folder", str(saved), "--output-dir", str(tmp_path)])
    assert data["same_tokens"] is True
    assert len(data["ratios"]) == 2 and all(r > 0 for r in data["ratios"])
    assert json.loads((tmp_path / "decode_against_release.json").read_text())["ratio"] == data["ratio"]
