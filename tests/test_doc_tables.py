"""The results tables of the docs are their JSON's: ``benchmarks/doc_tables.py`` renders every one of them from
``docs/results/``, and the committed pages equal its output. So are the numbers of their prose that restate a JSON
number: each is marked with its field, and the committed text equals the field's value."""

from __future__ import annotations

import json
import re
import runpy
import shutil
from pathlib import Path

import pytest

from tools.docs import engine, pages
from tools.docs import results as docs_results
from tools.docs.pages import attractor_internalization, attractor_puzzles, common, eqr_halting

ROOT = Path(__file__).resolve().parents[1]
# benchmark pages whose tables were measured before the benchmarks wrote JSON; each says so until it is rerun
BEFORE_JSON: set[str] = set()


def test_every_committed_table_equals_its_json():
    assert engine.stale_tables() == [], "run: python benchmarks/doc_tables.py"


def test_every_marked_number_of_the_docs_and_the_readme_equals_its_json():
    assert engine.stale_numbers() == [], "run: python benchmarks/doc_tables.py, then reread each sentence"
    marked = {engine.page_name(p): len(engine.NUMBER.findall(p.read_text())) for p in engine.pages()}
    for name in ("benchmarks/stars_cost.md", "benchmarks/solvers.md", "experiments.md", "demo.md"):
        name = f"docs/{name}"
        assert marked[name] > 0, f"{name}: its prose restates JSON numbers, marked"


def test_a_wrong_marked_number_fails_the_check_naming_page_line_field_and_values(tmp_path, monkeypatch, capsys):
    page = tmp_path / "stars_cost.md"
    text = (ROOT / "docs" / "benchmarks" / "stars_cost.md").read_text()
    marker = "<!-- num: stars_cost.json:by_loops.4.breakdown.penalty_backward fmt=.2f -->"
    assert marker + "0.22<!-- /num -->" in text
    page.write_text(text.replace(marker + "0.22<!-- /num -->", marker + "0.27<!-- /num -->"))
    line = next(n for n, row in enumerate(page.read_text().split("\n"), 1) if marker in row)
    monkeypatch.setattr(engine, "pages", lambda: [page])
    assert engine.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert f"{page}:{line}: " in out and "by_loops.4.breakdown.penalty_backward" in out
    assert "the JSON gives '0.22', the page says '0.27'" in out
    assert engine.main([]) == 0  # rewriting puts the JSON's number back, and says so
    assert marker + "0.22<!-- /num -->" in page.read_text() and "number: " in capsys.readouterr().out
    assert engine.main(["--check"]) == 0


def test_a_marked_number_whose_field_is_missing_is_reported_not_guessed():
    text = "a\nit costs <!-- num: stars_cost.json:by_loops.5.plain_seconds fmt=.2f -->0.71<!-- /num --> s"
    new, found = engine.numbers(text, "page.md")
    assert new == text and len(found) == 1
    assert found[0].startswith("page.md:2: stars_cost.json:by_loops.5.plain_seconds") and "no key '5'" in found[0]
    for spec in ("nofile.json:x", "{stars_cost.json:args} + 1", "__import__('os')"):
        assert "cannot read it" in engine.numbers(f"<!-- num: {spec} fmt=.2f -->1<!-- /num -->")[1][0]


def test_marked_numbers_evaluate_fields_lists_and_seed_files(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_results, "RESULTS", tmp_path)
    for seed, (a, b) in enumerate([(1.0, 0.5), (2.0, 1.0), (3.0, 1.5)]):
        (tmp_path / "runs").mkdir(exist_ok=True)
        (tmp_path / "runs" / f"a{seed}.json").write_text(json.dumps({"x": a, "rows": [{"y": a}, {"y": b}], "n": "300"}))
        (tmp_path / "runs" / f"b{seed}.json").write_text(json.dumps({"x": b, "k": {"0.5": b}}))
    number = engine.number
    assert number("runs/a0.json:rows.-1.y", ".2f") == "0.50"
    assert number('runs/b1.json:k["0.5"]', ".1%") == "100.0%"
    assert number("{runs/a0.json:n} / 3", "d") == "100"  # the benchmarks' string arguments read as numbers
    assert number("min({runs/a2.json:rows.*.y})", ".1f") == "1.5"
    assert number("mean({runs/a*.json:x} - {runs/b*.json:x})", ".2f") == "1.00"  # per-seed differences
    assert number("se({runs/a*.json:x} - {runs/b*.json:x})", ".2f") == "0.29"
    assert number("count({runs/a*.json:x})", "d") == "3"
    assert number("{runs/a0.json:x} / 1e7", ".0e") == "1e-7"  # a short exponent


def test_marked_numbers_take_the_items_of_a_list_a_filter_names(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_results, "RESULTS", tmp_path)
    runs = [{"seed": s, "acc": a} for s, a in ((0, 1.0), (1, 0.99), (100, 0.93), (101, 0.97), (109, 0.96))]
    (tmp_path / "r.json").write_text(json.dumps({"runs": runs}))
    number = engine.number
    assert number("min({r.json:runs[seed>=100].acc})", ".1%") == "93.0%"  # the seeds 0-2 runs left out
    assert number("max({r.json:runs[seed<100].acc})", ".1%") == "100.0%"
    assert number("count({r.json:runs[seed>=100].acc})", "d") == "3"
    assert number("atleast(0.95, {r.json:runs[seed>=100].acc})", "d") == "2"
    assert number("count({r.json:runs[seed==1].acc})", "d") == "1"
    found = engine.numbers("<!-- num: min({r.json:runs[seed>=200].acc}) fmt=.1% -->1<!-- /num -->")[1]
    assert len(found) == 1 and "cannot read it" in found[0]  # no run on those seeds: not a number


def test_every_table_is_on_a_page_once():
    names = [m.group(2) for page in engine.pages() for m in engine.MARKED.finditer(page.read_text())]
    assert sorted(names) == sorted(pages.TABLES), "a table is on no page, or on two"


def test_a_changed_json_makes_its_table_stale(tmp_path, monkeypatch):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results", results, ignore=shutil.ignore_patterns("*.png", "model"))
    path = results / "stars_cost.json"
    data = json.loads(path.read_text())
    data["by_loops"]["4"]["vjp@1"] = 9.99
    path.write_text(json.dumps(data))
    monkeypatch.setattr(docs_results, "RESULTS", results)
    assert engine.stale_tables() == [
        "README.md: readme-results",
        "docs/benchmarks/stars_cost.md: stars-cost",
        "docs/benchmarks/stars_cost.md: stars-cost-cheaper",
    ]
    assert "9.99x" in engine.render((ROOT / "docs" / "benchmarks" / "stars_cost.md").read_text())
    changed = engine.stale_numbers()  # the prose that restates it: the estimator page, the experiments, ...
    assert any(line.startswith("docs/benchmarks/jsrr_estimator.md:") and "'9.99'" in line for line in changed)
    assert any(line.startswith("docs/experiments.md:") for line in changed)


def test_every_results_table_of_a_benchmark_page_is_generated_or_labelled():
    """A table of a benchmark page is inside a generated block, or the page says it was measured before the
    benchmarks wrote JSON."""
    for page in sorted((ROOT / "docs" / "benchmarks").glob("*.md")):
        if page.name == "README.md":
            continue
        text = engine.MARKED.sub("", page.read_text())
        tables = re.findall(r"^\| .* \|\n\|( --- \|)+$", text, re.MULTILINE)
        if page.name in BEFORE_JSON:
            assert "before the benchmarks wrote JSON" in " ".join(text.split()), page.name
        else:
            assert not tables, f"{page.name} has a table no JSON generates"


def test_the_attractor_setting_is_chosen_on_validation_not_test(tmp_path, monkeypatch):
    """The search's choice reads the validation split only (a setting best on test but not on validation is not
    chosen), waits for every setting, and breaks ties towards the smaller budget."""
    monkeypatch.setattr(docs_results, "RESULTS", tmp_path)
    scores = {  # setting: (validation, test) at depth 64
        "split1-budget16": (0.3, 0.9),
        "split2-budget16": (0.8, 0.5),
        "split1-budget30": (0.6, 1.0),
        "split2-budget30": (0.8, 0.6),
    }
    for n, (name, (valid, test)) in enumerate(scores.items()):
        if n == 3:
            assert common.chosen_attractor_setting() is None  # not every setting has been run
        run = {
            "parameters": 1000,
            "log": [{"converged_rate": 0.5, "solver_steps": 9.0}],
            "validation_accuracy_by_depth": {d: valid for d in ("16", "32", "64")},
            "accuracy_by_depth": {"64": test},
        }
        folder = tmp_path / "attractor_puzzles_select" / name / "attractor"
        folder.mkdir(parents=True)
        (folder / "eqr_sudoku.json").write_text(json.dumps({"attractor": run}))
    assert common.chosen_attractor_setting() == "split2-budget16"
    assert "**2 + 2 layers (MLP 171), budget 16** (chosen)" in attractor_puzzles.attractor_puzzles_select()
    shutil.copy(ROOT / "docs" / "results" / "run_sets.json", tmp_path)  # seeds 1 and 2: their run set
    assert common.attractor_chosen_runs()[0] == "attractor_puzzles_select/split2-budget16"


def test_published_runs_pick_exact_choices_at_the_published_rate_and_the_same_machines_baseline(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_results, "RESULTS", tmp_path)

    def write(folder: str, choices: list[str], seed: int, t0: float, lr_given: bool = False, device: str = "cpu"):
        run = {
            "rows": [{"step": 0, "iterations": 3.0, "accuracy": {"0": 0.0, "1": 0.0, "30": 0.0}}]
            + [{"step": 200, "iterations": 5.0, "accuracy": {"0": t0, "1": t0, "30": 0.9}}],
            "args": {"task": "sudoku", "seed": str(seed), "budget": "30", "steps": "200", "test_size": "300"},
            "published": {"choices": choices, "config": {}, "training": {"learning_rate": 8e-3}},
            "train_seconds": 60.0,
            "device": device,
        }
        run["args"]["lr_given"] = str(lr_given)
        (tmp_path / "attractor_internalization" / folder).mkdir(parents=True)
        (tmp_path / "attractor_internalization" / folder / "internalization.json").write_text(json.dumps(run))
        return run

    every = list(common.PUBLISHED_CHOICES)
    write("published-all-sudoku-seed0", every, 0, 0.1)
    write("published-all-sudoku-seed0-lr0.002", every, 0, 0.9, lr_given=True)
    write("published-gates+batch-stop+optimizer-sudoku-seed1", ["gates", "batch_stop", "optimizer"], 1, 0.2)
    write("published-gates-sudoku-seed0", ["gates"], 0, 0.5, device="NVIDIA H200")
    write("sudoku-paper-one-step", [], 0, 0.0)
    gpu_base = write("sudoku-paper-one-step-cuda", [], 0, 0.3, device="NVIDIA H200")
    assert {s: r["rows"][-1]["accuracy"]["0"] for s, r in common.published_runs("sudoku", "all").items()} == {0: 0.1}
    assert list(common.published_runs("sudoku", "gates+batch_stop+optimizer")) == [1]
    assert common.published_runs("sudoku", "gates+optimizer") == {}
    assert attractor_internalization.paper_baseline("sudoku", "NVIDIA H200") == gpu_base  # not the CPU run beside it
    singles = attractor_internalization.attractor_published_singles("sudoku")
    assert "| `gates` alone | 50.0% |" in singles and "+20.0" in singles  # against the H200 run's 30%, not 0%
    table = attractor_internalization.attractor_published()
    assert "all four at lr 0.008" in table and "`gates` + `batch_stop` + `optimizer`" in table
    assert "1 min on an H200" in table
    assert (
        engine.number(
            "{attractor_internalization/published-gates+batch-stop+optimizer-sudoku-seed1/internalization.json:rows.-1.accuracy.0}",
            ".1f",
        )
        == "0.2"
    )


def test_the_depth_breadth_table_reads_each_seeds_grid_and_says_what_is_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_results, "RESULTS", tmp_path)
    grid = {"3x1": {"residual": 0.5, "vote": 0.5, "halt": 0.25}, "3x4": {"residual": 0.75, "vote": 1.0, "halt": 0.5}}
    (tmp_path / "runs" / "seed1" / "eqr").mkdir(parents=True)
    (tmp_path / "runs" / "seed1" / "eqr" / "eqr_sudoku.json").write_text(json.dumps({"eqr": {"grid": grid}}))
    table = eqr_halting.eqr_depth_breadth("runs", (0, 1))
    assert "| seed 0 | not run yet | | |" in table
    assert "| seed 1 | 3 | 50.0% / 50.0% / 25.0% | 75.0% / 100.0% / 50.0% |" in table
    assert "| seed | depth (iterations) | breadth 1 | breadth 4 |" in table


def test_the_page_builders_name_their_runs_through_the_run_sets():
    """No builder holds a list of run folders or a commit: a multi-run table reads its folders from
    ``docs/results/run_sets.json`` (by name), and every folder a set names exists."""
    sets = json.loads((ROOT / "docs" / "results" / "run_sets.json").read_text())
    for name, entry in sets.items():
        if name == "about":
            continue
        folders = entry["runs"] if isinstance(entry["runs"], list) else entry["runs"].values()
        base = ROOT / "docs" / "results" / ("attractor_internalization" if name == "attractor_internalization" else "")
        assert all((base / folder).is_dir() for folder in folders), name
    for path in (ROOT / "tools" / "docs" / "pages").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\b[0-9a-f]{7,40}\b", text.replace("0x", "")), f"{path.name} names a commit"
        assert not re.search(r"^[A-Z0-9_]*RUNS\s*=", text, re.M), f"{path.name} holds a list of run folders"
    assert common.run_set("eqr_6x6_seeds") == {
        0: "eqr_ablation_6x6",
        1: "eqr_6x6_seeds/seed1",
        2: "eqr_6x6_seeds/seed2",
    }


def test_the_documented_command_checks_every_page(monkeypatch, capsys):
    """``python benchmarks/doc_tables.py --check``, the command the pages name (run here in process: without
    ``--check`` it rewrites the checkout's pages), finds nothing stale."""
    monkeypatch.setattr("sys.argv", ["benchmarks/doc_tables.py", "--check"])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(ROOT / "benchmarks" / "doc_tables.py"), run_name="__main__")
    assert ended.value.code == 0, capsys.readouterr().out
