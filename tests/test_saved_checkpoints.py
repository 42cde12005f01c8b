"""Folders saved by every release keep loading: ``tests/data/saved-<version>`` holds a tiny saved folder of each
family and head that release had, as its ``save_pretrained`` wrote them, with ``logits.json`` (the inputs and the
logits they gave). ``tests/scripts/make_saved_folders.py`` writes them (see docs/development.md, "Saved folders of
every release").

``saved-0.1``'s ``attractor_lm``, ``eqr_attention`` and ``eqr_mlp`` were written when the Attractor and EqR bodies
were built from ``transformers.models.llama``, without their remote code; its ``ouro`` and ``phdeq`` and every
folder of ``saved-0.2`` were written by the script, with the release's own code, remote code included.

Each folder must load with the package strictly (no missing, unexpected or reshaped weights) and give the logits it
gave then; a folder that carries its remote code must also load from that code alone, in an interpreter without the
package (``conftest.remote_code_run``). Both sides run eager attention and short loops (a fixed number of solver
steps where there is a solver), so the logits agree across CPUs (``ATEN_CPU_CAPABILITY=default`` and ``avx2``)
well within the tolerance."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from conftest import remote_code_run
from transformers import AutoConfig
from transformers.utils import ModelOutput

import equilibria  # noqa: F401  (registers the Auto classes)
from equilibria.families import FAMILIES, family_record

DATA = Path(__file__).resolve().parent / "data"
_spec = importlib.util.spec_from_file_location("make_saved_folders", DATA.parent / "scripts" / "make_saved_folders.py")
make_saved_folders = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_saved_folders)

REFERENCES = {path.parent.name: json.loads(path.read_text()) for path in sorted(DATA.glob("saved-*/logits.json"))}
CASES = [(version, name) for version, folders in REFERENCES.items() for name in folders]
WITH_REMOTE_CODE = [case for case in CASES if any((DATA / case[0] / case[1]).glob("*.py"))]


def load(version: str, name: str):
    """The folder loaded with the package, eager attention as when it was saved: ``(model, loading info, Auto
    class name, inputs, reference logits)``; the Auto class is the one the family's record gives its saved head."""
    folder = DATA / version / name
    config = AutoConfig.from_pretrained(folder)
    auto_class = family_record(config).head_of_config(config).auto_class
    model, info = getattr(transformers, auto_class).from_pretrained(
        folder, output_loading_info=True, attn_implementation="eager"
    )
    entry = REFERENCES[version][name]
    inputs = torch.tensor(entry["input_ids"] if "input_ids" in entry else entry["inputs"])
    return model.eval(), info, auto_class, inputs, torch.tensor(entry["logits"])


def test_the_script_saves_every_head_and_every_release_has_its_folders():
    """The script writes a folder of every head of every family (so the next release's folders cover them all);
    0.2 has them all, 0.1 every one it had (no Attractor puzzle head yet)."""
    heads = {head.model_class.__name__ for family in FAMILIES.values() for head in family.heads if head.remote_code}
    assert heads <= {needs[-1] for needs, _ in make_saved_folders.FOLDERS.values()}
    assert set(REFERENCES["saved-0.2"]) == set(make_saved_folders.FOLDERS)
    assert set(REFERENCES["saved-0.1"]) == set(make_saved_folders.FOLDERS) - {"attractor_puzzle"}
    for version, folders in REFERENCES.items():
        assert all((DATA / version / name / "model.safetensors").is_file() for name in folders), version


@pytest.mark.parametrize(("version", "name"), CASES, ids=[f"{v}/{n}" for v, n in CASES])
def test_a_folder_saved_by_a_release_loads_strictly_with_the_same_logits(version, name):
    model, info, auto_class, inputs, reference = load(version, name)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    logits = make_saved_folders.forward_logits(model, auto_class, inputs)
    torch.testing.assert_close(logits, reference, rtol=1e-5, atol=1e-5)


def package_logits(model, auto_class: str, inputs: torch.Tensor) -> torch.Tensor:
    """The logits the package gives for a folder on this machine, called as ``remote_code_run`` calls the remote
    code (unseeded: the folders with remote code draw no noise; a language model without its KV cache, which
    changes nothing in the logits)."""
    with torch.no_grad():
        return model(inputs, **({"use_cache": False} if auto_class == "AutoModelForCausalLM" else {})).logits


class _SavedFolder:
    """What ``remote_code_run`` takes for a model: "saving" copies a release's folder as it is, and the logits it
    holds the remote code to are the package's on this machine (the same computation, so exactly equal; the test
    above holds those to the release's)."""

    def __init__(self, folder: Path, model, auto_class: str):
        self.folder, self.model, self.auto_class = folder, model, auto_class

    def save_pretrained(self, path):
        shutil.copytree(self.folder, path)

    def __call__(self, inputs, **loops):
        return ModelOutput(logits=package_logits(self.model, self.auto_class, inputs))


@pytest.mark.slow
def test_every_folder_that_carries_remote_code_loads_from_it_without_the_package(tmp_path):
    """One interpreter without the package for all of them (an interpreter takes seconds to import transformers):
    ``remote_code_run`` checks the first; its ``then`` the others the same way, each copied under a name of its
    own (the remote code's module is named after its folder)."""
    assert WITH_REMOTE_CODE  # every folder the script writes carries its remote code
    (first, *others) = [(case, *load(*case)) for case in WITH_REMOTE_CODE]
    checks = []
    for (version, name), model, _, auto_class, inputs, _ in others:
        copy = tmp_path / "others" / f"{version}_{name}".replace("-", "_").replace(".", "_")
        shutil.copytree(DATA / version / name, copy)
        checks.append(
            dict(
                folder=str(copy),
                auto_class=auto_class,
                inputs=inputs,
                expected=package_logits(model, auto_class, inputs),
            )
        )
    torch.save(checks, tmp_path / "others.pt")
    then = f"""
        import transformers
        for check in torch.load({str(tmp_path / "others.pt")!r}):
            auto = getattr(transformers, check["auto_class"])
            other = auto.from_pretrained(check["folder"], trust_remote_code=True, attn_implementation="eager").eval()
            assert type(other).__module__.startswith("transformers_modules"), (check["folder"], type(other).__module__)
            with torch.no_grad():
                got = other(check["inputs"]).logits
            assert torch.equal(got, check["expected"]), (check["folder"], (got - check["expected"]).abs().max())
            print("REMOTE_OK", check["folder"], type(other).__name__)
    """
    (version, name), model, _, auto_class, inputs, _ = first
    stdout = remote_code_run(
        _SavedFolder(DATA / version / name, model, auto_class),
        inputs,
        auto_class,
        tmp_path,
        load=', attn_implementation="eager"',
        then=then,
    )
    assert stdout.count("REMOTE_OK") == len(others), stdout
