"""The results tables of the docs are their JSON's: ``benchmarks/doc_tables.py`` renders every one of them from
``docs/results/``, and the committed pages equal its output."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
# benchmark pages whose tables were measured before the benchmarks wrote JSON; each says so until it is rerun
BEFORE_JSON: set[str] = set()


def test_every_committed_table_equals_its_json():
    doc_tables = load_benchmark("doc_tables")
    assert doc_tables.stale() == [], "run: python benchmarks/doc_tables.py"


def test_every_table_is_on_a_page_once():
    doc_tables = load_benchmark("doc_tables")
    names = [m.group(2) for page in doc_tables.pages() for m in doc_tables.MARKED.finditer(page.read_text())]
    assert sorted(names) == sorted(doc_tables.TABLES), "a table is on no page, or on two"


def test_a_changed_json_makes_its_table_stale(tmp_path, monkeypatch):
    doc_tables = load_benchmark("doc_tables")
    results = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results", results, ignore=shutil.ignore_patterns("*.png", "model"))
    path = results / "stars_cost.json"
    data = json.loads(path.read_text())
    data["by_loops"]["4"]["vjp@1"] = 9.99
    path.write_text(json.dumps(data))
    monkeypatch.setattr(doc_tables, "RESULTS", results)
    assert doc_tables.stale() == ["docs/benchmarks/stars_cost.md: stars-cost"]
    assert "9.99x" in doc_tables.render((ROOT / "docs" / "benchmarks" / "stars_cost.md").read_text())


def test_every_results_table_of_a_benchmark_page_is_generated_or_labelled():
    """A table of a benchmark page is inside a generated block, or the page says it was measured before the
    benchmarks wrote JSON."""
    doc_tables = load_benchmark("doc_tables")
    for page in sorted((ROOT / "docs" / "benchmarks").glob("*.md")):
        if page.name == "README.md":
            continue
        text = doc_tables.MARKED.sub("", page.read_text())
        tables = re.findall(r"^\| .* \|\n\|( --- \|)+$", text, re.MULTILINE)
        if page.name in BEFORE_JSON:
            assert "before the benchmarks wrote JSON" in " ".join(text.split()), page.name
        else:
            assert not tables, f"{page.name} has a table no JSON generates"


def test_the_attractor_setting_is_chosen_on_validation_not_test(tmp_path, monkeypatch):
    """The search's choice reads the validation split only (a setting best on test but not on validation is not
    chosen), waits for every setting, and breaks ties towards the smaller budget."""
    doc_tables = load_benchmark("doc_tables")
    monkeypatch.setattr(doc_tables, "RESULTS", tmp_path)
    scores = {  # setting: (validation, test) at depth 64
        "split1-budget16": (0.3, 0.9),
        "split2-budget16": (0.8, 0.5),
        "split1-budget30": (0.6, 1.0),
        "split2-budget30": (0.8, 0.6),
    }
    for n, (name, (valid, test)) in enumerate(scores.items()):
        if n == 3:
            assert doc_tables.chosen_attractor_setting() is None  # not every setting has been run
        run = {
            "parameters": 1000,
            "log": [{"converged_rate": 0.5, "solver_steps": 9.0}],
            "validation_accuracy_by_depth": {d: valid for d in ("16", "32", "64")},
            "accuracy_by_depth": {"64": test},
        }
        folder = tmp_path / "attractor_puzzles_select" / name / "attractor"
        folder.mkdir(parents=True)
        (folder / "eqr_sudoku.json").write_text(json.dumps({"attractor": run}))
    assert doc_tables.chosen_attractor_setting() == "split2-budget16"
    assert "**2 + 2 layers (MLP 171), budget 16** (chosen)" in doc_tables.attractor_puzzles_select()
    assert doc_tables.attractor_chosen_runs()[0] == "attractor_puzzles_select/split2-budget16"
