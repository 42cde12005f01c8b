"""The prepared GPU run (``benchmarks/gpu_run.py``): its quick mode on the CPU, its budget, the runs already measured,
its bad input, and the page's tables from its JSON."""

import json

import pytest
from conftest import load_benchmark

from tools.docs import results as docs_results
from tools.docs.pages import gpu

pytestmark = pytest.mark.slow  # every test here runs the GPU run's quick mode (or reads what it wrote)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick run of every section (a few seconds), its folder and what ``main`` returned."""
    folder = tmp_path_factory.mktemp("gpu_quick")
    gpu_run = load_benchmark("gpu_run")
    return folder, gpu_run.main(["--quick", "--output-dir", str(folder)])


def test_quick_mode_writes_every_section_and_the_merged_file(quick):
    folder, returned = quick
    merged = json.loads((folder / "gpu_run.json").read_text())
    assert {"device", "torch", "transformers", "smoke", "stars_reference", "ouro_real_size"} <= set(merged)
    assert merged["device"] == "cpu" and merged["sections"]["stars_reference"]["settings"]["quick"] is True
    smoke = merged["smoke"]
    assert smoke["bf16_matmul_finite"] and smoke["stars_reference_step_s"] > 0 and smoke["ouro_real_size_step_s"] > 0
    pipeline = smoke["stars_reference_pipeline"]  # the runs' whole path, 2 steps (at 1 and 100 loops on a GPU)
    assert pipeline["seconds"] > 0 and set(pipeline["accuracy"]) == {"1", "2", "4"}
    reference = merged["stars_reference"]
    assert set(reference["runs"]) == {"plain", "sampling", "stars"} and reference["skipped"] == []
    for arm, seeds in reference["runs"].items():
        run = seeds["0"]
        assert run["kind"] == arm and set(run["accuracy"]) == {"1", "2", "4"} and run["wall_s"] > 0
    assert reference["summary"]["accuracy"]["stars"]["4"]["n"] == 1
    real = merged["ouro_real_size"]
    assert real["skipped"] == [] and set(real["decode"]) == {"1", "8"}
    assert real["decode"]["8"]["tokens_per_s"]["llama"] > 0 and real["compiled_decode"]["same_tokens"]
    assert real["training_step"]["lora"]["jsrr"]["step_s"] > 0 and real["training_step"]["full"]["jsrr_over_plain"] > 0
    assert real["logits_bf16_vs_cpu_fp32"]["4"]["top1_agreement"] > 0.5  # bf16 against float32, the same weights
    assert json.loads(json.dumps(returned["stars_reference"]["runs"], default=str)) == reference["runs"]


def test_a_spent_budget_skips_the_runs_and_says_why(tmp_path):
    gpu_run = load_benchmark("gpu_run")
    argv = ["--sections", "stars_reference,ouro_real_size", "--budget-s", "0", "--output-dir", str(tmp_path)]
    done = gpu_run.main([*argv, "--quick"])
    assert done["stars_reference"]["runs"] == {} and done["stars_reference"]["summary"] is None
    assert {(s["arm"], s["seed"]) for s in done["stars_reference"]["skipped"]} == {
        ("plain", 0),
        ("sampling", 0),
        ("stars", 0),
    }
    assert "a run takes ~150 s" in done["stars_reference"]["skipped"][0]["why"]
    assert [s["part"] for s in done["ouro_real_size"]["skipped"]][0] == "decode"


def test_a_failing_pipeline_skips_the_runs_and_a_failing_part_the_part_alone(tmp_path, monkeypatch):
    gpu_run = load_benchmark("gpu_run")

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(gpu_run.stars, "train_one", boom)
    monkeypatch.setattr(gpu_run, "early_exit_decode", boom)
    done = gpu_run.main(["--quick", "--output-dir", str(tmp_path)])
    assert done["smoke"]["stars_reference_pipeline"]["error"] == "RuntimeError: boom"
    assert done["stars_reference"]["runs"] == {} and len(done["stars_reference"]["skipped"]) == 3
    assert all("pipeline check failed: RuntimeError: boom" in s["why"] for s in done["stars_reference"]["skipped"])
    real = json.loads((tmp_path / "ouro_real_size.json").read_text())["ouro_real_size"]
    assert real["early_exit"]["error"] == "RuntimeError: boom" and "tokens_per_s" in real["decode"]["1"]
    assert "jsrr_over_plain" in real["training_step"]["full"]


def test_the_penalty_arm_is_the_penalty_alone_at_the_fixed_count(tmp_path):
    gpu_run = load_benchmark("gpu_run")
    argv = ["--quick", "--sections", "stars_reference", "--arms", "penalty", "--output-dir", str(tmp_path)]
    run = gpu_run.main(argv)["stars_reference"]["runs"]["penalty"]["0"]
    overrides = run["recipe"]["overrides"]
    assert run["kind"] == "jsrr" and overrides["min_loops"] == overrides["max_loops"] and "jsrr_weight" not in overrides


def test_a_later_call_adds_its_runs_to_those_read_back(quick, tmp_path, monkeypatch):
    """Runs read back from the committed JSON (string loop counts) and a new run summarize together."""
    folder, _ = quick
    gpu_run = load_benchmark("gpu_run")
    earlier = json.loads((folder / "stars_reference.json").read_text())["stars_reference"]["runs"]
    monkeypatch.setattr(gpu_run, "previous_runs", lambda args: {"plain": earlier["plain"]})
    argv = ["--quick", "--sections", "stars_reference", "--arms", "plain,sampling", "--output-dir", str(tmp_path)]
    done = gpu_run.main(argv)["stars_reference"]
    assert done["runs"]["plain"] == earlier["plain"] and set(done["runs"]) == {"plain", "sampling"}
    assert done["summary"]["differences"]["sampling - plain"]["4"]["n"] == 1


def test_runs_already_measured_are_not_run_again(quick, tmp_path):
    folder, _ = quick
    gpu_run = load_benchmark("gpu_run")
    args = gpu_run.parse(["--previous", str(folder), "--output-dir", str(tmp_path), "--arms", "plain,stars", "--cpu"])
    assert set(gpu_run.previous_runs(args)) == {"plain", "sampling", "stars"}  # read from the earlier section
    args.quick = True  # a quick run never reads earlier runs
    assert gpu_run.previous_runs(args) == {}


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--sections", "smoke,warp"], "--sections takes a comma-separated list of smoke, stars_reference"),
        (["--arms", "plain,jsrr"], "--arms takes a comma-separated list of plain, sampling, stars, penalty; got"),
    ],
)
def test_bad_sections_or_arms_are_one_line(flags, message, tmp_path, capsys):
    gpu_run = load_benchmark("gpu_run")
    with pytest.raises(SystemExit) as exit_:
        gpu_run.parse([*flags, "--output-dir", str(tmp_path)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_without_a_gpu_or_quick_it_stops_at_once_naming_quick_and_cpu_and_writes_nowhere_by_default(
    tmp_path, capsys, monkeypatch
):
    import time

    gpu_run = load_benchmark("gpu_run")
    monkeypatch.setattr(gpu_run.torch.cuda, "is_available", lambda: False)
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_:
        gpu_run.main([])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and time.perf_counter() - start < 5
    assert (
        "no CUDA GPU is visible to torch: --quick runs every section tiny" in err and "--cpu runs the full-size" in err
    )
    with pytest.raises(SystemExit) as exit_:
        gpu_run.main(["--quick"])  # no --output-dir: docs/results/gpu is written only when named
    assert exit_.value.code == 2 and "--output-dir is required" in capsys.readouterr().err
    assert gpu_run.parse(["--cpu", "--output-dir", str(tmp_path)]).cpu  # forced: it would run the full size


def test_the_page_tables_come_from_the_sections(quick, monkeypatch, tmp_path):
    folder, _ = quick
    (tmp_path / "gpu").mkdir()
    monkeypatch.setattr(docs_results, "RESULTS", tmp_path)
    assert gpu.gpu_stars_reference() == gpu.GPU_NOT_RUN
    for name in ("stars_reference", "ouro_real_size"):
        (tmp_path / "gpu" / f"{name}.json").write_text((folder / f"{name}.json").read_text())
    table = gpu.gpu_stars_reference()
    assert table.startswith("| arm | seeds | 1 loops | 2 loops | 4 loops |") and "| stars | 0 |" in table
    assert "Ran on cpu, torch" in table
    real = gpu.gpu_ouro_real_size()
    assert "| decode, batch 8, `last_loop` |" in real and "STARS step, lora, penalty on" in real
    assert "skipped: none." in real
