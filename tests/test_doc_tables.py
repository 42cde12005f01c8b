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
