"""The package surface: CLI, tasks, tokenizer, benchmark and demo smoke runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import load_benchmark, read_benchmark_json
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

import equilibria
import equilibria.demo
from equilibria.cli import main as cli_main
from equilibria.tasks import addition_tokenizer, build_addition_dataset, char_tokenizer, tokenize_for_training

ROOT = Path(__file__).resolve().parents[1]


def test_cli_help_and_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"equilibria {equilibria.__version__}"
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    out = capsys.readouterr().out
    assert "demo" in out and "usage: equilibria" in out


@pytest.mark.slow
def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "equilibria"
    result = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("equilibria ")


def test_cli_errors_are_one_line(capsys):
    assert cli_main(["demo", "--steps", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "equilibria demo: error: steps and stars_steps must be >= 1, got 0 and 600"


def test_char_tokenizer_round_trips_and_saves(tmp_path):
    tok = char_tokenizer("abc+=")
    ids = tok("ab+c=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tok.decode(ids) == "ab+c="
    assert tok.pad_token_id == 0 and tok.bos_token_id == 1 and tok.eos_token_id == 2
    assert tok("z", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("ab+c=", add_special_tokens=False)["input_ids"] == ids
    with pytest.raises(ValueError, match="single characters"):
        char_tokenizer(["ab"])


def test_addition_splits_share_no_problem_and_are_correct():
    data = build_addition_dataset(num_digits=2, num_train=300, num_test=100, seed=3)
    assert set(data["train"]["prompt"]).isdisjoint(data["test"]["prompt"])
    for row in data["test"]:
        a, b = row["prompt"][:-1].split("+")
        assert int(row["answer"]) == int(a) + int(b) and row["text"] == row["prompt"] + row["answer"]
    again = build_addition_dataset(num_digits=2, num_train=300, num_test=100, seed=3)
    assert again["train"]["prompt"] == data["train"]["prompt"]
    with pytest.raises(ValueError, match="distinct problems"):
        build_addition_dataset(num_digits=1, num_train=90, num_test=20)


def test_training_labels_mask_the_prompt():
    tok = addition_tokenizer()
    data = build_addition_dataset(num_digits=1, num_train=5, num_test=0)
    row = tokenize_for_training(data["train"], tok)[0]
    prompt_len = len(data["train"][0]["prompt"])
    assert row["labels"][:prompt_len] == [-100] * prompt_len
    assert row["labels"][prompt_len:] == row["input_ids"][prompt_len:]
    assert row["input_ids"][-1] == tok.eos_token_id


@pytest.mark.slow
def test_decode_benchmark_quick_mode_runs(tmp_path):
    bench_ouro_decode = load_benchmark("bench_ouro_decode")
    results = bench_ouro_decode.main(["--quick", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "ouro_decode.json", results)
    args = saved["args"]
    assert args["quick"] == "True" and (args["width"], args["new_tokens"], args["repeats"]) == ("64", "8", "1")
    assert set(saved) == {"args", "commands", "loop_overhead", "early_exit", "cache"}

    overhead = saved["loop_overhead"]  # Ouro 2 layers x 4 loops against Llama with 8 layers of the same width
    assert overhead["ouro_s"] > 0 and overhead["llama_s"] > 0
    assert overhead["ratio_range"][0] <= overhead["ratio"] <= overhead["ratio_range"][1]
    assert overhead["ratio"] == pytest.approx(overhead["ouro_s"] / overhead["llama_s"])  # one repeat: one pair
    assert 0 < overhead["ouro_params"] < overhead["llama_params"]  # the loop shares its layers

    early = saved["early_exit"]  # the threshold calibrated so that decoded tokens exit after about half the steps
    assert early["loops"] == 8 and len(early["calibration"]) == 3  # --calibration-steps in --quick
    tried = sorted((float(t), steps) for t, steps in early["calibration"].items())
    assert all(0.5 <= t <= 0.999 and 1 <= steps <= early["loops"] for t, steps in tried)
    assert [steps for _, steps in tried] == sorted(steps for _, steps in tried)  # a higher threshold exits later
    assert str(early["threshold"]) in early["calibration"]
    assert early["threshold"] == min(tried, key=lambda point: abs(point[1] - early["loops"] / 2))[0]
    assert early["mean_exit_steps"] == early["calibration"][str(early["threshold"])]  # measured again: the same
    assert early["exit_s"] > 0 and early["full_s"] > 0
    assert early["ratio_range"][0] <= early["ratio"] <= early["ratio_range"][1]

    cache = saved["cache"]
    assert cache["new_tokens"] == 16 and cache["cache_s"] > 0 and cache["no_cache_s"] > 0
    assert cache["speedup"] == pytest.approx(cache["no_cache_s"] / cache["cache_s"])
    assert cache["speedup_range"][0] <= cache["speedup"] <= cache["speedup_range"][1]


@pytest.mark.slow
def test_decode_benchmark_runs_its_sections_apart_and_keeps_the_others(tmp_path):
    """``--sections``: the cache modes on a saved model, the early exit at step 1 and exited rows dropped or not,
    each written into the same JSON beside what an earlier run left there."""
    bench_ouro_decode = load_benchmark("bench_ouro_decode")
    bench_ouro_decode.main(["--quick", "--sections", "cache", "--output-dir", str(tmp_path)])
    argv = [
        "--quick",
        "--sections",
        "cache_modes,exit_at_one,exit_rows,compile,real_scale",
        "--output-dir",
        str(tmp_path),
    ]
    results = bench_ouro_decode.main(argv)
    saved = read_benchmark_json(tmp_path / "ouro_decode.json", results)
    assert {"cache", "cache_modes", "exit_at_one", "exit_rows", "compile", "real_scale"} <= set(saved)
    assert saved["commands"]["exit_rows"].endswith(" ".join(argv))

    (model,) = saved["cache_modes"]["models"]  # --quick: a tiny random model with the addition tokenizer
    assert model["data"]["units"] == 16
    for loops, row in model["loops"].items():
        assert row["cache_bytes"]["per_loop"] == int(loops) * row["cache_bytes"]["last_loop"]  # one entry per layer
        assert set(row["exact_match"]) == {"per_loop", "last_loop"} and 0 <= row["same_answers"] <= 1
        difference = row["exact_match"]["last_loop"] - row["exact_match"]["per_loop"]
        assert row["difference"] == pytest.approx(difference)

    at_one = saved["exit_at_one"]
    assert set(at_one["ratio_to_one_loop"]) == {"exit_per_loop", "exit_last_loop", "exit_static", "full"}
    (rows,) = saved["exit_rows"]["batches"].values()
    assert rows["same_tokens"] is True and 1 <= rows["mean_exit_steps"] <= rows["loops"]

    compiled = saved["compile"]  # --quick: dynamo alone; one graph per loop count of the sweep
    assert compiled["same_tokens"] is True and list(compiled["graphs_after_loops"].values()) == [1, 2, 3]
    scale = saved["real_scale"]
    runs = scale["runs"]
    assert runs["float32/per_loop"]["weight_bytes"] == 2 * runs["bfloat16/per_loop"]["weight_bytes"]
    for dtype in ("float32", "bfloat16"):
        per, last = runs[f"{dtype}/per_loop"], runs[f"{dtype}/last_loop"]
        assert per["cache_bytes"] == scale["sizes"]["total_ut_steps"] * last["cache_bytes"] > 0
        assert per["peak_rss_bytes"] > per["weight_bytes"] and per["tokens_per_s"] > 0
    assert set(scale["drift"]) == {"2", "4"} and all(0 <= d["top1_agreement"] <= 1 for d in scale["drift"].values())


@pytest.mark.slow
def test_demo_quick_mode_writes_and_reloads_a_hub_folder(tmp_path):
    results = equilibria.demo.run_demo(output_dir=tmp_path, quick=True)
    folder = Path(results["model_dir"])
    names = {p.name for p in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "configuration_ouro.py",
        "modeling_ouro.py",
        "README.md",
        "loop_scaling.png",
        "audit.json",
        "audit.png",
        "training_data.json",
    } <= names
    assert set(results["accuracy_by_loops"]) == set(results["stars_accuracy_by_loops"]) == {"1", "2", "4", "8"}
    assert results["continuation_steps"] == 6  # the plain baseline got as many extra steps as STARS
    card = ModelCard.load(folder / "README.md")
    assert [r.metric_config for r in card.data.eval_results][-1] == "num_loops=8"
    stars_audit = results["audit"]["STARS"]
    assert set(results["audit"]) == {"plain", "STARS"} and stars_audit["verdict"] in card.text
    assert "majority-class baseline" in card.text and "held-out" in card.text
    # the folder's own card command reads what the demo wrote (both curves in loop_scaling.json)
    from equilibria.cli import main

    main(["card", str(folder)])
    text = (folder / "README.md").read_text()
    assert stars_audit["verdict"] in text
    # the whole history (the plain pre-training and the STARS continuation), the table as the plot (both curves)
    assert (
        "**Stage 1 of 2**: 20 steps with `Trainer`" in text and "**Stage 2 of 2**: 6 steps with `StarsTrainer`" in text
    )
    assert "| jsrr_weight | 0.1 |" in text and "| num_loops | plain, 20 + 6 steps | STARS |" in text
    assert "An Ouro looped language model" in text and "arXiv" in text
    assert len(results["samples"]) == 4 and any(k.startswith("remote code") for k in results["samples"])
    assert json.loads((tmp_path / "demo_results.json").read_text())["steps"] == results["steps"]
    assert torch.isfinite(torch.tensor(results["final_train_loss"]))


def test_reversed_answers_and_the_loop_scaling_evaluator(model, tokenizer):
    data = build_addition_dataset(num_digits=3, num_train=20, num_test=8, seed=1, reverse_answer=True)
    for row in data["train"]:
        a, b = row["prompt"][:-1].split("+")
        assert row["answer"] == str(int(a) + int(b))[::-1]
    from equilibria.tasks import evaluate_loop_scaling

    tok = addition_tokenizer()
    accuracy = evaluate_loop_scaling(model, tok, data["test"], loops=[1, 3])
    assert set(accuracy) == {1, 3} and all(0.0 <= v <= 1.0 for v in accuracy.values())


class _Oracle(torch.nn.Module):
    """A stand-in 'model' whose generate writes the right answer: exact_match must score it 100%."""

    def __init__(self, tokenizer, answers):
        super().__init__()
        self.tok, self.answers, self.device = tokenizer, answers, torch.device("cpu")

    def generate(self, input_ids, attention_mask, max_new_tokens, num_loops, **kwargs):
        prompts = self.tok.batch_decode(input_ids, skip_special_tokens=True)
        rows = [
            self.tok(self.answers[p], add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id] for p in prompts
        ]
        width = max(map(len, rows))
        rows = [r + [self.tok.pad_token_id] * (width - len(r)) for r in rows]
        return torch.cat([input_ids, torch.tensor(rows)], dim=1)


def test_exact_match_scores_right_and_wrong_answers():
    from equilibria.tasks import exact_match

    tok = addition_tokenizer()
    data = build_addition_dataset(num_digits=2, num_train=5, num_test=10, seed=2)
    truth = dict(zip(data["test"]["prompt"], data["test"]["answer"]))
    assert exact_match(_Oracle(tok, truth), tok, data["test"], num_loops=2, batch_size=4) == 1.0
    wrong = {p: str(int(a) + 1) for p, a in truth.items()}
    wrong[data["test"][0]["prompt"]] = truth[data["test"][0]["prompt"]]
    assert exact_match(_Oracle(tok, wrong), tok, data["test"], num_loops=2, batch_size=4) == 0.1


@pytest.mark.slow
def test_stars_benchmark_quick_mode_runs_and_resumes(tmp_path):
    bench_stars_addition = load_benchmark("bench_stars_addition")
    results = bench_stars_addition.main(["--quick", "--output-dir", str(tmp_path)])
    assert (tmp_path / "stars_addition.png").stat().st_size > 1000
    saved = read_benchmark_json(tmp_path / "results.json")
    assert saved["command"] == f"python benchmarks/bench_stars_addition.py --quick --output-dir {tmp_path}"
    assert saved["args"]["quick"] == "True" and (saved["args"]["steps"], saved["args"]["test_size"]) == ("4", "16")
    assert saved == json.loads(json.dumps(results, default=str))  # the file holds what main returned
    assert saved["preset"] == "equilibria" and saved["recipe_overrides"]["max_steps"] == 4
    assert set(saved["runs"]) == {"plain", "sampling", "jsrr", "stars"}
    for kind, seeds in saved["runs"].items():
        assert set(seeds) == {"0", "1"}
        for run in seeds.values():
            assert set(run["accuracy"]) == {"1", "2", "4"}
            assert all(16 * a == round(16 * a) and 0 <= a <= 1 for a in run["accuracy"].values())  # shares of 16
            steps = run["dynamics"]["relative_step"]  # one per loop step up to the largest count scored (4)
            assert len(steps) == 4 and all(r > 0 for r in steps)
            assert run["recipe"]["preset"] == "equilibria"
        rows = saved["summary"]["accuracy"][kind]
        for n, row in rows.items():  # the mean and standard error over the two seeds
            values = [seeds[s]["accuracy"][n] for s in ("0", "1")]
            assert row["mean"] == pytest.approx(sum(values) / 2) and row["n"] == 2
            assert row["se"] == pytest.approx(abs(values[0] - values[1]) / 2)
    assert saved["runs"]["stars"]["0"]["recipe"]["overrides"].get("jsrr_weight") is None  # stars keeps the penalty
    assert saved["runs"]["plain"]["0"]["recipe"]["overrides"]["jsrr_weight"] == 0.0
    # started again, finished runs are not trained again; a run whose JSON is gone resumes from its checkpoint
    (tmp_path / "runs" / "stars_seed1.json").unlink()
    again = bench_stars_addition.main(["--quick", "--output-dir", str(tmp_path)])
    assert again["runs"]["stars"]["1"]["resumed_from"] == "checkpoint-4"
    assert again["runs"]["plain"] == saved["runs"]["plain"]


@pytest.mark.slow
def test_norm_placement_comparison_reads_each_placements_runs(tmp_path):
    """``stars_norm_placement.py`` puts side by side the trajectories of runs that differ only in norm placement."""
    bench_stars_addition = load_benchmark("bench_stars_addition")
    folders = {p: tmp_path / p for p in ("sandwich", "pre")}
    for placement, folder in folders.items():
        flags = ["--quick", "--kinds", "plain,stars", "--norm-placement", placement, "--output-dir", str(folder)]
        bench_stars_addition.main(flags)
    compare = load_benchmark("stars_norm_placement")
    runs = [f"{p}={folder}" for p, folder in folders.items()]
    out = compare.main(["--runs", *runs, "--output-dir", str(tmp_path / "out")])
    assert (tmp_path / "out" / "trajectories.png").stat().st_size > 1000
    assert read_benchmark_json(tmp_path / "out" / "results.json") == json.loads(json.dumps(out, default=str))
    assert set(out["placements"]) == {"sandwich", "pre"}
    for placement, by_kind in out["placements"].items():
        assert set(by_kind) == {"plain", "stars"}
        for kind, row in by_kind.items():
            run = json.loads((folders[placement] / "runs" / f"{kind}_seed0.json").read_text())
            assert row["state_norm"]["4"] == run["dynamics"]["state_norm"][3]  # loop step 4, the quick runs' last
            assert row["state_norm"]["16"] is None and row["accuracy"]["4"] == run["accuracy"]["4"]
    # the two placements' models differ (pre-norm carries the raw residual stream; sandwich a normalised state)
    assert out["placements"]["pre"]["plain"]["state_norm"] != out["placements"]["sandwich"]["plain"]["state_norm"]
    with pytest.raises(SystemExit, match="norm_placement='sandwich'"):  # a folder of another placement is refused
        compare.main(["--runs", f"post={folders['sandwich']}", "--output-dir", str(tmp_path / "bad")])
    with pytest.raises(SystemExit):
        compare.main(["--runs", f"middle={folders['pre']}"])


@pytest.mark.slow
def test_exit_gate_benchmark_quick_mode_runs(tmp_path):
    results = load_benchmark("bench_exit_gate").main(["--quick", "--output-dir", str(tmp_path)])
    assert (tmp_path / "exit_gate.png").stat().st_size > 1000
    saved = read_benchmark_json(tmp_path / "exit_gate.json", results)
    assert saved["command"] == "python benchmarks/bench_exit_gate.py --quick"
    assert set(saved["losses"]) == {"expected_logits", "expected", "final"}
    for kinds in saved["losses"].values():
        assert set(kinds) == {"fixed", "frozen", "reference", "train_seconds"} and kinds["train_seconds"] > 0
        assert set(kinds["fixed"]) == {"1", "2", "3", "4"}
        for loops, point in kinds["fixed"].items():  # a fixed loop count runs exactly that many steps
            assert point["mean_steps"] == float(loops)
        for readout in ("frozen", "reference"):
            assert set(kinds[readout]) == {"0.5", "0.9"}  # the thresholds of --quick
            assert all(1 <= point["mean_steps"] <= 4 for point in kinds[readout].values())
            # a lower threshold exits earlier
            assert kinds[readout]["0.5"]["mean_steps"] <= kinds[readout]["0.9"]["mean_steps"]
        points = [point for kind in ("fixed", "frozen", "reference") for point in kinds[kind].values()]
        assert all(0 <= p["accuracy"] <= 1 and 16 * p["accuracy"] == round(16 * p["accuracy"]) for p in points)
    assert (
        results["losses"]["expected"]["frozen"]["0.5"]["mean_steps"]
        < results["losses"]["expected"]["frozen"]["0.9"]["mean_steps"]
    )


def test_padded_operands_have_a_fixed_width():
    data = build_addition_dataset(
        num_digits=4, num_train=50, num_test=10, seed=5, pad_operands=True, reverse_answer=True
    )
    for row in data["train"]:
        a, b = row["prompt"][:-1].split("+")
        assert len(a) == len(b) == 4 and len(row["answer"]) == 5
        assert int(row["answer"][::-1]) == int(a) + int(b)


def load_dist_check():
    """``.ci/dist_check.py`` as a module (a CI script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dist_check", ROOT / ".ci" / "dist_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_release_check_knows_every_file_a_saved_folder_carries(tmp_path):
    """The remote-code files ``.ci/dist_check.py`` requires in the wheel are exactly the ``.py`` files that
    ``save_pretrained`` writes into the folders of every family and head."""
    from equilibria.families import FAMILIES

    load_benchmark("compat_matrix").write_folders(tmp_path)
    saved = {path.name for path in tmp_path.glob("*/*.py")}  # transformers' looped LMs' folders carry none
    heads = sum(len(family.heads) for family in FAMILIES.values())  # every head of every family (Attractor: two)
    assert len(list(tmp_path.iterdir())) == heads and saved == load_dist_check().remote_code_files()


def test_the_release_check_names_what_is_wrong_with_a_wheel(tmp_path):
    """A wheel with the wrong license, a dropped dependency, a stale changelog, a missing remote-code file and the
    tests inside is refused with each of those named."""
    import tomllib
    import zipfile

    dist_check = load_dist_check()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = f"equilibria-{project['version']}.dist-info"
    requires = [f"Requires-Dist: {r}" for r in project["dependencies"] if not r.startswith("torch")]
    metadata = "\n".join([
        "Metadata-Version: 2.4", "Name: equilibria", f"Version: {project['version']}", "License-Expression: MIT",
        "License-File: LICENSE", f"Requires-Python: {project['requires-python']}", *requires,
    ])  # fmt: skip
    wheel = tmp_path / f"equilibria-{project['version']}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{info}/METADATA", metadata + "\n\n")
        archive.writestr("equilibria/__init__.py", "")
        archive.writestr("tests/test_core.py", "")
    problems = dist_check.wheel_problems(wheel, project, {"CHANGELOG.md's top release": "0.0.1"})
    text = "\n".join(problems)
    for expected in ("License-Expression is 'MIT'", "'torch>=2.4'", "CHANGELOG.md's top release 0.0.1",
                     "equilibria/modeling/modeling_ouro.py", "tests/test_core.py", "licenses/LICENSE"):  # fmt: skip
        assert expected in text, (expected, problems)
    assert dist_check.changelog_release((ROOT / "CHANGELOG.md").read_text()) == equilibria.__version__


def test_the_installed_metadata_declares_the_license_and_the_tested_python():
    from importlib.metadata import metadata

    meta = metadata("equilibria")
    assert meta["License-Expression"] == "Apache-2.0" and meta["Requires-Python"] == ">=3.11"
    assert (ROOT / "LICENSE").read_text().split()[:3] == ["Apache", "License", "Version"]


@pytest.mark.slow
def test_serving_benchmark_quick_mode_compares_an_engines_answers_with_the_packages(tmp_path):
    """``bench_ouro_serving.py --quick``: the plumbing, with transformers' remote-code loading (without the package)
    as the engine: the answers to the same held-out prompts are compared row by row."""
    bench = load_benchmark("bench_ouro_serving")
    results = bench.main(["--quick", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "ouro_serving.json", results)
    assert saved["engine"] == "remote_code" and saved["data"]["units"] == 8 and saved["loops"] == 4
    assert saved["tokens_equal"] is True and saved["answers_equal"] == 1.0 and saved["differing"] == []
    assert saved["exact_match"]["engine"] == saved["exact_match"]["package"]


@pytest.mark.slow
def test_vllm_serving_benchmark_quick_mode_runs_every_section(tmp_path):
    """``bench_vllm_serving.py --quick``: every section's plumbing (held-out answers against the package's, speeds at
    each concurrency, the Llama of equal depth, the ratios, the exit gate and the cache layout), the package answering
    in vLLM's place; its answers then equal the package's, and the JSON holds what the page's tables read."""
    bench = load_benchmark("bench_vllm_serving")
    results = bench.main(["--quick", "--output-dir", str(tmp_path)])
    saved = read_benchmark_json(tmp_path / "vllm_serving.json", results)
    assert saved["quick"] is True and saved["data"]["units"] == 8 and saved["loops"] == 4
    assert saved["depth"] == {"layers": 2, "llama_layers": 8}
    for section in (saved["held_out"], saved["last_loop"], saved["exit_gate"]):
        assert section["equal_to_package"] == {"rows": 1.0, "tokens": 1.0}
    assert saved["held_out"]["exact_match"]["vllm"] == saved["held_out"]["exact_match"]["package"]
    speed = saved["speed"]["by_concurrency"]
    assert set(speed) == {"1", "2"} and set(saved["exit_gate"]["speed_up"]) == {"1", "2"}
    for cell in speed.values():
        assert set(cell["seconds"]) == {"ouro_vllm", "llama_vllm", "package"}
        assert all(len(rounds) == 1 for rounds in cell["seconds"].values())
        for ratio in cell["ratios"].values():
            assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]


def test_vllm_serving_benchmark_refuses_bad_flags_in_one_line(capsys):
    bench = load_benchmark("bench_vllm_serving")
    for flags, named in (
        (["--concurrency", "1,x"], "--concurrency"),
        (["--exit-threshold", "1.5"], "--exit-threshold"),
        ([], "--model"),
    ):
        with pytest.raises(SystemExit):
            bench.main(flags)
        assert named in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_small_configs_take_a_tokenizer_or_a_vocabulary_size():
    from equilibria.families import small_attractor_config, small_ouro_config
    from equilibria.tasks import addition_tokenizer

    tokenizer = addition_tokenizer()
    for make in (small_ouro_config, small_attractor_config):
        sized, from_tokenizer = make(16), make(tokenizer)
        assert (sized.vocab_size, sized.max_position_embeddings) == (16, 512)
        assert (from_tokenizer.vocab_size, from_tokenizer.pad_token_id) == (len(tokenizer), tokenizer.pad_token_id)
        with pytest.raises(ValueError, match="the vocabulary size must be >= 1, got 0"):
            make(0)
        with pytest.raises(TypeError, match="pass a tokenizer or a vocabulary size \\(an int\\), got str"):
            make("gpt2")
