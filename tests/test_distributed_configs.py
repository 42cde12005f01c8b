"""The shipped multi-GPU configs parse with the libraries that read them: `examples/fsdp_config.yaml` (accelerate,
FSDP2) and `examples/deepspeed_zero2.yaml` + `.json` (accelerate, transformers' "auto" filling, DeepSpeed's own
config model). They are not run here (no GPUs); the FSDP2 path of the JSRR penalty is run on two CPU processes in
test_stars."""

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


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
