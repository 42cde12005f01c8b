"""A saved Ouro served by an existing engine: greedy answers on the model's held-out rows against the package's.

The engine runs in an environment of its own (``--engine-python``), since none admits the transformers release
this package needs: OpenVINO through optimum-intel 2.2.0 requires transformers < 5.6 and huggingface-hub < 1.22,
and its Ouro export caps transformers at 4.57.6 ("remote modeling code incompatible with transformers v5"). The
folder carries its remote code, so that environment needs only the engine, not this package:

    python -m venv ov && ov/bin/pip install torch==2.13.0 transformers==5.5.4 "huggingface-hub<1.22" \\
        optimum-intel==2.2.0 openvino==2026.4.1
    ov/bin/pip uninstall -y torchvision   # pulled in, built for another torch: transformers then fails to import
    python benchmarks/bench_ouro_serving.py --model out --engine-python ov/bin/python

The export's version cap is lifted in that process only (``OuroOpenVINOConfig.MAX_TRANSFORMERS_VERSION``), and the
result says whether the export answers as the package does. The engine runs a fixed loop count, the config's
``total_ut_steps`` at export (``--loops`` re-saves the folder with another), with the published cache layout (one
entry per loop step and layer) and without the exit gate (no early exit, no per-call loops).

    python benchmarks/bench_ouro_serving.py --quick   # the plumbing only: transformers' remote-code loading as
                                                      # the "engine", a tiny random model; a test runs this

Results: ``docs/results/ouro_serving.json`` (``ouro_serving_PRECISION.json`` for another ``--precision``;
``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import results_json
from bench_ouro_decode import quick_mode_model, run_script

from equilibria import OuroForCausalLM
from equilibria.evaluation import evaluation_data
from equilibria.tasks import greedy_answers
from equilibria.tasks.tokenization import load_tokenizer

#: run in the engine's environment: ``argv``: engine, folder, a JSON file of prompts, new tokens, the engine's inference
#: precision (OpenVINO's ``INFERENCE_PRECISION_HINT``, or ``default``); prints one JSON line
ENGINE = r"""
import json, sys, time
import torch, transformers
from transformers import AutoTokenizer
engine, folder, prompts_file, new_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.modules["equilibria"] = None  # the folder's own code only
versions = {"torch": torch.__version__, "transformers": transformers.__version__}
start = time.perf_counter()
if engine == "openvino":
    from importlib.metadata import version
    from optimum.exporters.openvino import model_configs
    from optimum.intel import OVModelForCausalLM
    versions.update({name: version(name) for name in ("openvino", "optimum-intel", "optimum", "huggingface-hub")})
    model_configs.OuroOpenVINOConfig.MAX_TRANSFORMERS_VERSION = transformers.__version__  # the cap, lifted here
    hint = {"INFERENCE_PRECISION_HINT": sys.argv[5]} if sys.argv[5] != "default" else {}
    model = OVModelForCausalLM.from_pretrained(folder, export=True, trust_remote_code=True, compile=True,
                                               ov_config=hint)
    versions["inference_precision"] = str(model.request.get_compiled_model().get_property("INFERENCE_PRECISION_HINT"))
    versions["cache_in_export"] = bool(model.use_cache)
else:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
load_seconds = time.perf_counter() - start
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
tokenizer.padding_side = "left"
prompts = json.load(open(prompts_file))
enc = tokenizer(prompts, return_tensors="pt", padding=True)
answers, start = [], time.perf_counter()
with torch.no_grad():
    for row in range(len(prompts)):  # one prompt at a time: the engines' common case, and no padding question
        ids = enc["input_ids"][row : row + 1][:, enc["attention_mask"][row].bool()]
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
        answers.append(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
seconds = time.perf_counter() - start
print("RESULT " + json.dumps({"answers": answers, "seconds": seconds, "load_seconds": load_seconds,
                               "versions": versions}))
"""


def run_engine(python: str, engine: str, folder: str, prompts: list[str], new_tokens: int, precision: str) -> dict:
    """The engine's answers to ``prompts`` (greedy, one at a time), its time and versions, from ``python``."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(prompts, file)
        file.flush()
        command = [python, "-c", ENGINE, engine, folder, file.name, str(new_tokens), precision]
        return run_script(command, f"the {engine} engine", timeout=3600)


def package_answers(model, tokenizer, rows, loops: int, new_tokens: int) -> dict:
    """The package's greedy answers, one prompt at a time as the engine runs them, and their time."""
    start = time.perf_counter()
    answers = [
        greedy_answers(model, tokenizer, rows.select([i]), loops, max_new_tokens=new_tokens)[0]
        for i in range(len(rows))
    ]
    return {"answers": answers, "seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a saved Ouro folder with its tokenizer and held-out rows")
    parser.add_argument("--engine", choices=["openvino", "remote_code"], default="openvino")
    parser.add_argument("--engine-python", default=sys.executable, help="the engine environment's python")
    parser.add_argument("--loops", type=int, default=None, help="loop count to export (default: the config's)")
    parser.add_argument(
        "--precision", default="f32", help="the engine's inference precision (OpenVINO: f32, bf16, f16 or default)"
    )
    parser.add_argument("--examples", type=int, default=200, help="held-out rows to answer")
    parser.add_argument("--quick", action="store_true", help="remote code as the engine, a tiny model, 8 rows")
    parser.add_argument("--output-dir", type=Path, default=Path("docs/results"), help="where ouro_serving.json goes")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ouro_serving_"))
    if args.quick:
        args.engine, args.examples, args.model = (
            "remote_code",
            8,
            args.model or quick_mode_model(work / "quick", seed=5),
        )
    if not args.model:
        parser.error("--model FOLDER is needed (a saved Ouro with its tokenizer)")
    model = OuroForCausalLM.from_pretrained(args.model).eval()
    loops = args.loops or model.config.total_ut_steps
    folder = args.model
    if loops != model.config.total_ut_steps:  # the engine runs the config's loop count: re-save with this one
        model.config.total_ut_steps, folder = loops, str(work / "export")
        model.save_pretrained(folder)
        load_tokenizer(args.model, "prompts").save_pretrained(folder)
    tokenizer = load_tokenizer(args.model, "prompts")
    data = evaluation_data(model, args.model, num_examples=args.examples, metric="exact_match")
    rows = data.rows
    new_tokens = max(len(a) for a in rows["answer"]) + 1  # greedy_answers' bound for the whole rows
    ours = package_answers(model, tokenizer, rows, loops, new_tokens)
    theirs = run_engine(args.engine_python, args.engine, folder, list(rows["prompt"]), new_tokens, args.precision)
    same = [a == b for a, b in zip(ours["answers"], theirs["answers"])]
    right = lambda answers: sum(a.strip() == b.strip() for a, b in zip(answers, rows["answer"])) / len(rows)  # noqa: E731
    results = {
        "engine": args.engine,
        "precision": args.precision,
        "versions": theirs["versions"],
        "command": "python benchmarks/bench_ouro_serving.py " + " ".join(argv or []),
        "model": args.model,
        "data": data.record,
        "loops": loops,
        "new_tokens": new_tokens,
        "tokens_equal": all(same),
        "answers_equal": sum(same) / len(same),
        "exact_match": {"package": right(ours["answers"]), "engine": right(theirs["answers"])},
        "seconds": {"package": ours["seconds"], "engine": theirs["seconds"], "engine_load": theirs["load_seconds"]},
        "differing": [
            {"prompt": p, "package": a, "engine": b}
            for p, a, b, s in zip(rows["prompt"], ours["answers"], theirs["answers"], same)
            if not s
        ][:10],
    }
    print(json.dumps({k: v for k, v in results.items() if k != "differing"}, indent=1))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    name = "ouro_serving.json" if args.precision == "f32" else f"ouro_serving_{args.precision}.json"
    results_json.save_results(args.output_dir / name, results, indent=2)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
