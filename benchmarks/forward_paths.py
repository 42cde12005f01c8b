"""How far a reader follows one forward: the package's functions a forward of a tiny model runs, and their files.

For each path (Ouro's default forward, with early exit, with the JSRR penalty; the Attractor LM's forward with its
Anderson solve; the puzzle heads of EqR and the Attractor and the PH-DEQ classifier for comparison), ``sys.setprofile``
records the distinct (module, qualified name) pairs of the package's functions that one forward calls (no grad,
except the JSRR path, whose penalty needs a graph). Comprehensions and the ``__init__`` a dataclass generates are not
counted: a reader does not open them. The targets (issue #41): Ouro's default path at most 20 functions, the
Attractor's at most 30, each in at most 4 files.

    python benchmarks/forward_paths.py            # prints the table, writes docs/results/forward_paths.json
    python benchmarks/forward_paths.py --list     # also lists every function of every path
    python benchmarks/forward_paths.py --quick    # the same (it takes seconds); a test runs it

Results: ``docs/results/forward_paths.json`` (``--output-dir`` to change).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import results_json
import torch

import equilibria
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

TARGETS = {"ouro": (20, 4), "attractor_lm": (30, 4)}  # path: (at most this many functions, in at most these files)
PACKAGE = Path(equilibria.__file__).resolve().parent


def traced_functions(run: Callable[[], object]) -> dict[tuple[str, str], str]:
    """``{(module, qualified name): file}`` of the package's functions that ``run()`` calls."""
    seen: dict[tuple[str, str], str] = {}

    def profile(frame, event, _arg) -> None:
        code = frame.f_code
        if event != "call" or code.co_filename.startswith("<") or code.co_name.startswith("<"):
            return
        if Path(code.co_filename).resolve().is_relative_to(PACKAGE):
            seen.setdefault((frame.f_globals.get("__name__", ""), code.co_qualname), code.co_filename)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen


def tiny_models() -> dict[str, torch.nn.Module]:
    """Seeded tiny models of every head the paths run (eval mode)."""
    torch.manual_seed(0)
    lm = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    attractor = dict(lm, num_backbone_layers=1, num_attractor_layers=1)
    models = {
        "ouro": OuroForCausalLM(OuroConfig(**lm, num_hidden_layers=2, total_ut_steps=3)),
        "attractor_lm": AttractorForCausalLM(AttractorConfig(**attractor)),
        "attractor_puzzle": AttractorForPuzzleSolving(AttractorConfig(**attractor, max_position_embeddings=16)),
        "eqr": EqRForPuzzleSolving(
            EqRConfig(vocab_size=11, max_seq_len=16, hidden_size=32, intermediate_size=64, num_loops=4)
        ),
        "phdeq": PHDEQForSequenceClassification(PHDEQConfig(input_size=8, hidden_size=16, num_labels=3)),
    }
    return {name: model.eval() for name, model in models.items()}


def paths(models: dict[str, torch.nn.Module]) -> dict[str, Callable[[], object]]:
    """One forward per path, on fixed inputs."""
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    cells = torch.randint(1, 11, (2, 16), generator=torch.Generator().manual_seed(0))
    features = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    ouro = models["ouro"]

    def jsrr():
        with torch.enable_grad():
            return ouro(ids, spectral_radius_iters=2)

    return {
        "ouro": lambda: ouro(ids),
        "ouro_early_exit": lambda: ouro(ids, exit_threshold=0.5),
        "ouro_jsrr": jsrr,
        "attractor_lm": lambda: models["attractor_lm"](ids),
        "attractor_puzzle": lambda: models["attractor_puzzle"](cells),
        "eqr": lambda: models["eqr"](cells),
        "phdeq": lambda: models["phdeq"](features),
    }


def measure() -> dict[str, dict]:
    """Per path: the functions (``module:qualname``), their count, the files and their count."""
    runs = paths(tiny_models())
    results = {}
    with torch.no_grad():
        for name, run in runs.items():
            run()  # once first: lazy initialisation is not the path
            seen = traced_functions(run)
            files = sorted({Path(file).name for file in seen.values()})
            functions = sorted(f"{module}:{qualname}" for module, qualname in seen)
            results[name] = dict(functions=len(functions), files=len(files), file_names=files, names=functions)
    return results


def missed_targets(results: dict[str, dict]) -> list[str]:
    """The paths over their target, each as a sentence."""
    missed = []
    for name, (most_functions, most_files) in TARGETS.items():
        got = results[name]
        if got["functions"] > most_functions or got["files"] > most_files:
            missed.append(
                f"{name}: {got['functions']} functions in {got['files']} files, target at most {most_functions} in "
                f"{most_files}"
            )
    return missed


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the same run (it takes seconds); for the test")
    parser.add_argument("--list", action="store_true", help="also print every function of every path")
    parser.add_argument("--output-dir", type=Path, default=results_json.RESULTS)
    args = parser.parse_args(argv)
    results = measure()
    for name, got in results.items():
        print(f"{name:17s} {got['functions']:3d} functions in {got['files']} files: {', '.join(got['file_names'])}")
        if args.list:
            print("".join(f"    {function}\n" for function in got["names"]), end="")
    data = dict(
        command="python benchmarks/forward_paths.py" + (" --quick" if args.quick else ""),
        targets={name: dict(functions=f, files=n) for name, (f, n) in TARGETS.items()},
        paths=results,
        missed=missed_targets(results),
    )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results_json.save_results(args.output_dir / "forward_paths.json", data, indent=1)
    for line in data["missed"]:
        print(f"over target: {line}")
    return data


if __name__ == "__main__":
    sys.exit(1 if main()["missed"] else 0)
