"""The shipped multi-GPU configs parse with the libraries that read them: `examples/fsdp_config.yaml` (accelerate,
FSDP2) and `examples/deepspeed_zero2.yaml` + `.json` (accelerate, transformers' "auto" filling, DeepSpeed's own
config model). They are not run here (no GPUs); the FSDP2 path of the JSRR penalty is run on two CPU processes in
test_stars. DeepSpeed ZeRO-3 itself runs here on the CPU: an Ouro whose loop count changes every step trains, and
the penalty's double backward, which ZeRO-3 cannot do, is refused."""

from pathlib import Path

import pytest
from conftest import launch_environment

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_fsdp_config_is_fsdp2_wrapping_a_layer_class_the_model_has(monkeypatch):
    from accelerate.utils import FullyShardedDataParallelPlugin
    from conftest import tiny_ouro

    env = launch_environment(EXAMPLES / "fsdp_config.yaml")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    classes = {type(module).__name__ for module in tiny_ouro().modules()}
    assert plugin.transformer_cls_names_to_wrap and set(plugin.transformer_cls_names_to_wrap) <= classes
    # per-layer units need the forward-mode estimator (the vjp one is refused there): the config's command says so
    assert "--jsrr_estimator jvp" in (EXAMPLES / "fsdp_config.yaml").read_text().splitlines()[0]


DEEPSPEED_CHECK = """
import json, os, sys
from accelerate.utils import DeepSpeedPlugin
from transformers import TrainingArguments
from deepspeed.runtime.config import DeepSpeedConfig
sys.path.insert(0, "tests")
from conftest import tiny_ouro

env = json.loads(sys.argv[1])
os.environ.update(env)
assert DeepSpeedPlugin().zero_stage == 2
args = TrainingArguments(output_dir=sys.argv[2], deepspeed=env["ACCELERATE_DEEPSPEED_CONFIG_FILE"],
                         per_device_train_batch_size=4, gradient_accumulation_steps=2, use_cpu=True, report_to="none")
ds = args.hf_deepspeed_config
ds.trainer_config_process(args)
ds.trainer_config_finalize(args, tiny_ouro(), num_training_steps=10)  # the "auto" values from args and model
parsed = DeepSpeedConfig(ds.config)  # DeepSpeed's own (pydantic) validation
try:
    DeepSpeedConfig({**ds.config, "zero_optimization": {**ds.config["zero_optimization"], "stagee": 2}})
    misspelt = "accepted"
except Exception as err:
    misspelt = str(err)
print(json.dumps({"auto_left": "auto" in str(ds.config), "stage": parsed.zero_optimization_stage,
                  "micro_batch": parsed.train_micro_batch_size_per_gpu, "misspelt": misspelt}))
"""


@pytest.mark.slow
def test_the_deepspeed_zero2_config_is_accepted_by_deepspeed(tmp_path):
    """In a child process that sees DeepSpeed (./run installs it in .venv/deepspeed, off the environment's path:
    transformers imports an installed DeepSpeed in every process that builds a Trainer): accelerate's plugin,
    transformers' "auto" filling and DeepSpeed's own config model accept the config, and refuse a misspelt key."""
    import json
    import os
    import subprocess
    import sys

    deepspeed = Path(sys.prefix) / "deepspeed"  # the virtual environment's folder
    if not (deepspeed / "deepspeed").is_dir():
        pytest.skip(f"DeepSpeed is not installed in {deepspeed} (./run installs it there)")
    root = EXAMPLES.parent
    env = launch_environment(EXAMPLES / "deepspeed_zero2.yaml")
    child = dict(os.environ, PYTHONPATH=os.pathsep.join([str(deepspeed), str(root / "src")]))
    result = subprocess.run(
        [sys.executable, "-c", DEEPSPEED_CHECK, json.dumps(env), str(tmp_path)],
        cwd=root,
        env=child,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checked = json.loads(result.stdout.strip().splitlines()[-1])
    assert (checked["auto_left"], checked["stage"], checked["micro_batch"]) == (False, 2, 4)
    assert "stagee" in checked["misspelt"]


ZERO3_LOOPS = r"""
import json, random, sys, torch, deepspeed
from equilibria import OuroForCausalLM
from equilibria.families import small_ouro_config
penalty = sys.argv[1] == "jsrr"
# one process all-reduces nothing: leave out the CPU shared-memory all-reduce op, whose C++ build took 22-36 s of
# the test from a cold cache (the losses are the same to the last digit)
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
torch.manual_seed(0)
model = OuroForCausalLM(small_ouro_config(32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2))
config = {"train_micro_batch_size_per_gpu": 4, "zero_allow_untested_optimizer": True,
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
ids = torch.randint(3, 32, (4, 12), generator=torch.Generator().manual_seed(1))
draws, loops, losses = random.Random(0), [], []
estimate = {"spectral_radius_iters": 1, "spectral_radius_estimator": "vjp", "spectral_radius_probe": "batch"}
for step in range(8):
    loops.append(draws.randint(1, 6))  # the count changes from step to step, 1 included (the gate unused)
    out = engine(input_ids=ids, labels=ids, num_loops=loops[-1], use_cache=False, **(estimate if penalty else {}))
    engine.backward(out.loss + (0.1 * out.spectral_radius.pow(2).sum() if penalty else 0.0))
    engine.step()
    losses.append(float(out.loss))
print(json.dumps({"loops": loops, "losses": losses}))
"""


def zero3_run(tmp_path, kind: str):
    """:data:`ZERO3_LOOPS` in a child process that sees DeepSpeed (one process, gloo on the CPU)."""
    import os
    import socket
    import subprocess
    import sys

    deepspeed = Path(sys.prefix) / "deepspeed"
    if not (deepspeed / "deepspeed").is_dir():
        pytest.skip(f"DeepSpeed is not installed in {deepspeed} (./run installs it there)")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env["PYTHONPATH"] = os.pathsep.join([str(deepspeed), str(EXAMPLES.parent / "src")])
    return subprocess.run(
        [sys.executable, "-c", ZERO3_LOOPS, kind], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_zero3_trains_an_ouro_whose_loop_count_changes_every_step(tmp_path):
    """DeepSpeed ZeRO-3 (the installed 0.19.8, on the CPU) with a loop count drawn in [1, 6] per step: it trains.
    At one step the exit gate is joined to the graph through its own forward, which ZeRO-3 gathers its weights for
    (touching the weights directly failed: "0 != 1 Cannot reduce scatter gradients")."""
    import json

    result = zero3_run(tmp_path, "plain")
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert 1 in run["loops"] and len(set(run["loops"])) > 2 and run["losses"][-1] < run["losses"][0]


@pytest.mark.slow
def test_zero3_cannot_double_backward_so_stars_refuses_the_penalty_under_it(tmp_path, monkeypatch):
    """The JSRR penalty differentiates through a gradient of the loop map; ZeRO-3 frees the weights that backward
    needs (the raw engine fails), so StarsTrainer refuses the penalty under ZeRO-3 in one line, and not without it."""
    from conftest import tiny_ouro, training_args

    from equilibria.trainers import StarsTrainer, StarsTrainingArguments, common

    result = zero3_run(tmp_path, "jsrr")
    assert result.returncode != 0 and "must match the size of tensor b (0)" in result.stderr
    monkeypatch.setattr(common, "is_deepspeed_zero3_enabled", lambda: True)
    args = training_args(tmp_path, StarsTrainingArguments, jsrr_weight=0.1, max_steps=1)
    with pytest.raises(
        ValueError, match=r"^StarsTrainer: the JSRR penalty \(jsrr_weight > 0\) needs double backward .* ZeRO stage 3 "
    ):
        StarsTrainer(model=tiny_ouro(), args=args)
    StarsTrainer(model=tiny_ouro(), args=training_args(tmp_path, StarsTrainingArguments, jsrr_weight=0.0))
