"""Shared fixtures: tiny seeded Ouro models and a character tokenizer, all built locally (no Hub access)."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback, TrainingArguments

import equilibria  # noqa: F401  (registers the Auto classes)
from equilibria import (
    AttractorConfig,
    AttractorForCausalLM,
    AttractorForPuzzleSolving,
    EqRConfig,
    EqRForPuzzleSolving,
    OuroConfig,
    OuroForCausalLM,
    PHDEQConfig,
    PHDEQForSequenceClassification,
)

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # the repository: the docs tool (tools.docs)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: one thread each, for their subprocesses too
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(min(2, torch.get_num_threads()))

OURO_REFERENCE = Path(__file__).resolve().parent / "data" / "ouro-reference-tiny"  # see its README.md

CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 .,+=?!")


def tiny_ouro_config(**overrides) -> OuroConfig:
    kwargs = dict(
        vocab_size=len(CHARS) + 3,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        total_ut_steps=3,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    kwargs.update(overrides)
    return OuroConfig(**kwargs)


def tiny_ouro(seed: int = 0, **overrides) -> OuroForCausalLM:
    torch.manual_seed(seed)
    model = OuroForCausalLM(tiny_ouro_config(**overrides)).eval()
    # random init gives near-uniform logits; sharpen them so greedy decoding is not decided by rounding noise
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
        model.model.embed_tokens.weight.mul_(20.0)
    return model


def recording(model, seen: list):
    """``model`` with its forward wrapped to append each training call's ``num_loops`` to ``seen``."""
    original = model.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        if model.training:
            seen.append(kwargs["num_loops"])
        return original(*args, **kwargs)

    model.forward = forward
    return model


def tiny_attractor_config(**overrides) -> AttractorConfig:
    kwargs = dict(
        vocab_size=len(CHARS) + 3,
        hidden_size=32,
        intermediate_size=64,
        num_backbone_layers=1,
        num_attractor_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        num_loops=60,
        solver_tol=1e-6,
        attractor_gate_init=1.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    kwargs.update(overrides)
    return AttractorConfig(**kwargs)


def tiny_attractor(seed: int = 0, strength: float | None = None, **overrides) -> AttractorForCausalLM:
    """A tiny seeded Attractor LM whose attractor really iterates: the attractor layers' output weights are
    scaled by ``strength`` (random init alone makes T nearly constant, solved in one or two steps; default 4 for
    the paper's form, which then takes 10-12 iterations, 10 for the gated form, whose gate bounds the step), and
    the logits are sharpened so greedy decoding is not decided by rounding noise."""
    torch.manual_seed(seed)
    return strengthened(AttractorForCausalLM(tiny_attractor_config(**overrides)).eval(), strength)


def tiny_attractor_puzzle_config(**overrides) -> AttractorConfig:
    """A tiny Attractor config for 4x4 boards (16 cells, the Sudoku vocabulary of 11 tokens)."""
    kwargs = dict(
        vocab_size=11,
        hidden_size=32,
        intermediate_size=64,
        num_backbone_layers=1,
        num_attractor_layers=2,
        num_attention_heads=4,
        max_position_embeddings=16,
        num_loops=60,
        solver_tol=1e-6,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    return AttractorConfig(**{**kwargs, **overrides})


def tiny_attractor_puzzle(form: str = "paper", seed: int = 0, strength=None, **overrides) -> AttractorForPuzzleSolving:
    """A tiny seeded Attractor puzzle model whose attractor really iterates (see :func:`strengthened`)."""
    torch.manual_seed(seed)
    config = tiny_attractor_puzzle_config(residual_form=form, **overrides)
    return strengthened(AttractorForPuzzleSolving(config).eval(), strength)


def saved_bytes_of_step(model, inputs, labels, mode: str, num_loops: int) -> int:
    """What autograd keeps for one training step of an Attractor (either head) with gradient ``mode`` and exactly
    ``num_loops`` solver iterations (a tolerance never reached)."""
    from equilibria.diagnostics import saved_for_backward

    def step():
        model(inputs, labels=labels, gradient_mode=mode, num_loops=num_loops, solver_tol=1e-12).loss.backward()

    model.train()
    try:
        return saved_for_backward(step)
    finally:
        model.eval()


def strengthened(model, strength: float | None = None):
    """``model`` (an Attractor with either head) with its attractor layers' output weights scaled by ``strength``
    (default 4 for the paper's form, 10 for the gated one) and its logits sharpened (see :func:`tiny_attractor`)."""
    if strength is None:
        strength = 10.0 if model.config.residual_form == "gated" else 4.0
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
        for layer in model.model.attractor.layers:
            for weight in (layer.self_attn.v_proj, layer.self_attn.o_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                weight.weight.mul_(strength)
    return model


def ragged_lm_rows(n: int = 16, width: int = 12, seed: int = 0) -> dict[str, list]:
    """``n`` causal-LM rows of different lengths (3 to ``width`` real tokens), right-padded to ``width`` with
    ``attention_mask`` 0 and label -100 at the padding, and each row's first 1 to 3 tokens (a "prompt") also
    labelled -100: rows and micro-batches thus hold different numbers of labelled tokens, so a loss averaged per
    micro-batch differs from one averaged over the labelled tokens of the whole accumulated batch."""
    g = torch.Generator().manual_seed(seed)
    rows = {"input_ids": [], "attention_mask": [], "labels": []}
    for _ in range(n):
        length = int(torch.randint(3, width + 1, (), generator=g))
        prompt = int(torch.randint(1, min(3, length - 1) + 1, (), generator=g))
        ids = torch.randint(3, 40, (length,), generator=g).tolist()
        pad = width - length
        rows["input_ids"].append(ids + [0] * pad)
        rows["attention_mask"].append([1] * length + [0] * pad)
        rows["labels"].append([-100] * prompt + ids[prompt:] + [-100] * pad)
    return rows


def greedy(model, input_ids, use_cache, max_new_tokens=10, **kwargs):
    """Greedy generation of ``max_new_tokens`` (no end token, pad 0): ``(sequences, the logits of every new token
    stacked along dim 1, generate's output)``."""
    out = model.generate(
        input_ids,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        use_cache=use_cache,
        return_dict_in_generate=True,
        output_logits=True,
        pad_token_id=0,
        eos_token_id=None,
        **kwargs,
    )
    return out.sequences, torch.stack(out.logits, dim=1), out


def training_args(folder, arguments_class: type = TrainingArguments, **values):
    """``arguments_class`` (``TrainingArguments`` or a trainer's subclass) for a test's short run in ``folder``:
    on the CPU, reporting to no tracker, saving nothing, seed 0 and no progress bars, with the test's own
    ``values`` (which may change any of these)."""
    common = dict(output_dir=str(folder), use_cpu=True, report_to="none", save_strategy="no", seed=0, disable_tqdm=True)
    return arguments_class(**{**common, **values})


def load_benchmark(name: str):
    """The module ``benchmarks/<name>.py`` (benchmarks are scripts, not a package)."""
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def read_benchmark_json(path: Path, returned=None) -> dict:
    """The JSON a benchmark wrote to ``path``, read back and checked: every number in it is finite (``json`` writes
    and reads NaN and Infinity without complaint), and, given ``returned`` (what the benchmark's ``main`` returned),
    it holds exactly that, as JSON writes it (string keys, ``str`` of paths)."""
    import json
    import math

    saved = json.loads(Path(path).read_text())

    def check(value, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                check(item, f"{where}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                check(item, f"{where}[{index}]")
        elif isinstance(value, float):
            assert math.isfinite(value), f"{Path(path).name}: {where} is {value}"

    check(saved, "")
    if returned is not None:
        assert saved == json.loads(json.dumps(returned, default=str))
    return saved


SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_two_processes(names: list[str], root: Path, timeout: float = 600, teardown_grace: float = 60):
    """Run the two-process scripts ``tests/scripts/<name>.py`` in turn under one ``torchrun --nproc_per_node 2``
    (gloo on CPU, ``ddp_batch.py``), each with ``root/<name>`` as its folder, after calling the script's
    ``prepare(folder)`` here where it has one. Returns ``(exit code, log)``; the exit code is ``None`` when the run
    was stopped.

    Each rank saves before the next script starts. Gloo's ``destroy_process_group`` now and then hangs at the end
    although every rank reached it (pytorch/pytorch#75097): when every script's files are written and the run has
    not exited ``teardown_grace`` seconds later, it is stopped with a warning. A run that takes more than
    ``timeout`` seconds is stopped too; the tests of the scripts that did not save then fail on the log."""
    import importlib
    import signal
    import socket
    import subprocess
    import time
    import warnings

    sys.path.insert(0, str(SCRIPTS))
    try:
        for name in names:
            (root / name).mkdir(parents=True, exist_ok=True)
            getattr(importlib.import_module(name), "prepare", lambda folder: None)(root / name)
    finally:
        sys.path.remove(str(SCRIPTS))
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    cmd += ["--master_port", str(port), str(SCRIPTS / "ddp_batch.py"), str(root), *names]
    files = [root / name / f"rank{rank}.pt" for name in names for rank in (0, 1)]
    log = root / "torchrun.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        start, saved = time.monotonic(), None
        while proc.poll() is None and time.monotonic() - start < timeout:
            saved = saved or (time.monotonic() if all(f.exists() for f in files) else None)
            if saved and time.monotonic() - saved > teardown_grace:
                break
            time.sleep(0.5)
        if proc.poll() is None:
            proc.terminate()  # torchrun's agent stops its workers (each in a session of its own) on SIGTERM
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if saved:
                warnings.warn(
                    "every two-process script saved, but the process group hung at teardown; stopped", stacklevel=2
                )
            return None, log.read_text()
    return proc.returncode, log.read_text()


@pytest.fixture(scope="session")
def two_process_runs(request, tmp_path_factory) -> tuple[Path, int | None, str]:
    """One torchrun launch for the scripts every selected test marked ``two_process(NAME)`` needs (those tests run
    on one xdist worker, see ``pytest_collection_modifyitems``): ``(root, exit code, log)``."""
    marks = (item.get_closest_marker("two_process") for item in request.session.items)
    names = sorted({mark.args[0] for mark in marks if mark})
    root = tmp_path_factory.mktemp("two_process")
    return root, *run_two_processes(names, root)


@pytest.fixture
def two_process_run(request, two_process_runs) -> tuple[dict, dict, Path]:
    """What ranks 0 and 1 of the test's ``two_process(NAME)`` script saved, and its folder: ``(r0, r1, folder)``.
    Fails with the run's log when the script did not save on both ranks."""
    root, code, log = two_process_runs
    folder = root / request.node.get_closest_marker("two_process").args[0]
    files = [folder / "rank0.pt", folder / "rank1.pt"]
    if not all(f.exists() for f in files):
        pytest.fail(f"{folder.name} did not save on both ranks (torchrun: {code}):\n{log[-4000:]}", pytrace=False)
    return torch.load(files[0]), torch.load(files[1]), folder


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    """The tests of the two-process scripts run on one xdist worker, which launches torchrun once for them all."""
    for item in items:
        if item.get_closest_marker("two_process"):
            item.add_marker(pytest.mark.xdist_group("two_process"))


def char_tokenizer():
    """A real PreTrainedTokenizerFast over single characters (pad=0, bos=1, eos=2)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    vocab.update({c: i + 3 for i, c in enumerate(CHARS)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", padding_side="left"
    )


@pytest.fixture
def model() -> OuroForCausalLM:
    return tiny_ouro()


@pytest.fixture
def tokenizer():
    return char_tokenizer()


class StopAt(TrainerCallback):
    """Stops training after optimizer step ``step``: a run "killed" right after its checkpoint, to resume."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def remote_code_run(
    model,
    inputs,
    auto_class: str,
    tmp_path,
    num_loops: int | tuple[int, ...] | None = None,
    load: str = "",
    then: str = "",
    saved: dict | None = None,
) -> str:
    """Save ``model``, then in a fresh interpreter where ``import equilibria`` fails, load the folder through
    ``transformers.<auto_class>`` with ``trust_remote_code=True`` (and the ``load`` keyword text) and check that
    it gives ``model``'s logits on ``inputs`` exactly (at each of ``num_loops``: one count or several; ``None``:
    the config's); ``then`` runs after that, with ``model`` and ``data`` in scope (``data``: ``inputs``, the
    expected logits and the entries of ``saved``). Returns the interpreter's stdout."""
    import subprocess
    import sys
    import textwrap

    model.save_pretrained(tmp_path / "ckpt")
    counts = num_loops if isinstance(num_loops, tuple) else (num_loops,)
    with torch.no_grad():
        expected = {loops: model(inputs, **_loops_keyword(loops)).logits for loops in counts}
    torch.save({**(saved or {}), "inputs": inputs, "expected": expected}, tmp_path / "expected.pt")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["equilibria"] = None  # any `import equilibria` now raises ImportError
        try:
            import equilibria  # noqa
            raise SystemExit("equilibria should not be importable here")
        except ImportError:
            pass
        import torch
        from transformers import {auto_class}
        data = torch.load({str(tmp_path / "expected.pt")!r})
        model = {auto_class}.from_pretrained({str(tmp_path / "ckpt")!r}, trust_remote_code=True{load}).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        with torch.no_grad():
            for loops, expected in data["expected"].items():
                got = model(data["inputs"], **({{}} if loops is None else {{"num_loops": loops}})).logits
                assert torch.equal(got, expected), (loops, (got - expected).abs().max())
        """
    ) + textwrap.dedent(then)
    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _loops_keyword(num_loops: int | None) -> dict:
    return {} if num_loops is None else {"num_loops": num_loops}


def tiny_native(model_type: str, seed: int = 0, num_loops: int = 3, hidden_size: int = 32, **overrides):
    """A tiny random transformers looped LM (``dory``, ``hrm_text``, ``inkling2_loop_text``) from its family
    record's small config (two looped layers, the CHARS vocabulary, eager attention), with sharpened logits as
    :func:`tiny_ouro`'s."""
    from equilibria.families import FAMILIES

    family = FAMILIES[model_type]
    fields = dict(vocab_size=len(CHARS) + 3, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    config = family.make_config(fields, hidden_size, 2, 4, num_loops)
    config._attn_implementation = overrides.pop("attn_implementation", "eager")
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    model = family.heads[0].model_class(config).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(20.0)
    return model


# ---- helpers several test files share -------------------------------------------------------------------------


def tiny_eqr(seed: int = 0, **overrides) -> EqRForPuzzleSolving:
    torch.manual_seed(seed)
    kwargs = dict(
        max_seq_len=16,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_layers=2,
        num_loops=4,
        attn_implementation="eager",
    )
    kwargs.update(overrides)
    return EqRForPuzzleSolving(EqRConfig(**kwargs)).eval()


X = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))


def tiny_phdeq(seed: int = 0, **overrides) -> PHDEQForSequenceClassification:
    torch.manual_seed(seed)
    kwargs = dict(input_size=6, hidden_size=8, intermediate_size=16, num_labels=3, solver_tol=1e-6, num_loops=200)
    kwargs.update(overrides)
    return PHDEQForSequenceClassification(PHDEQConfig(**kwargs)).eval()


def fine_tune(base, rows, out, *extra):
    argv = ["train", "--model_name_or_path", str(base), "--dataset_name", rows, "--output_dir", str(out)]
    argv += ["--max_steps", "6", "--save_steps", "3", "--logging_steps", "1", "--per_device_train_batch_size", "8"]
    argv += ["--keep_checkpoints", "true"]  # the resume test reads them
    argv += ["--min_loops", "1", "--max_loops", "4", "--eval_loops", "1,2", "--learning_rate", "3e-3"]
    from equilibria.cli import main

    return main([*argv, *extra, *QUIET])


def addition_rows() -> list[dict]:
    """Prompt-completion rows of one-digit sums (45)."""
    return [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(9) for b in range(5)]


def tiny_trained_ouro(out: Path) -> Path:
    """A tiny Ouro trained 2 steps on generated addition by ``equilibria train``, saved in ``out``."""
    from equilibria.cli import main

    argv = ["train", "--output_dir", str(out), "--max_steps", "2", "--train_size", "32", "--test_size", "4"]
    assert main([*argv, "--hidden_size", "16", "--eval_loops", "2", "--save_strategy", "no", *QUIET]) == 0
    return out


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


QUIET = ["--report_to", "none", "--use_cpu", "--disable_tqdm", "true"]


def lm_data(model, n: int = 12, width: int = 9) -> datasets.Dataset:  # noqa: F821
    """Random token sequences labelled with the model's own greedy next tokens (labels[t] = answer after t - 1),
    the first 3 positions unlabelled: the model is right on every sequence by construction."""
    from datasets import Dataset

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (n, width), generator=g)
    with torch.no_grad():
        predicted = model(ids).logits.argmax(-1)
    labels = torch.full_like(ids, -100)
    labels[:, 4:] = predicted[:, 3:-1]
    return Dataset.from_dict({"input_ids": ids.tolist(), "labels": labels.tolist()})


def exit_model(seed=0, total_ut_steps=6):
    """A tiny model whose exit gate is strong enough that tokens exit at different steps."""
    model = tiny_ouro(seed=seed, total_ut_steps=total_ut_steps)
    with torch.no_grad():
        torch.manual_seed(seed + 100)
        model.model.early_exit_gate.weight.normal_(0, 0.2)
        model.model.early_exit_gate.bias.fill_(-2.5)
    return model


PROMPT = torch.tensor([[5, 9, 14, 3, 22, 7]])


def launch_environment(config_file: Path) -> dict:
    """The environment `accelerate launch --config_file CONFIG script.py` gives its processes."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(config_file), "script.py"])
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = list(defaults.deepspeed_config) if defaults else []
        return prepare_deepspeed_cmd_env(args)[1]
    return prepare_multi_gpu_env(args)
