"""A looped architecture of a user's own, registered with one call (``examples/register_family.py``): it loads with
the Auto classes, is scored at several loop counts and audited through its protocol; bad records are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from equilibria.diagnostics.verdict_rules import VERDICTS
from equilibria.families import FAMILIES, Family, Head, register_family
from equilibria.loops import OuroLoop

EXAMPLE = Path(__file__).parents[1] / "examples" / "register_family.py"


def ouro_under(model_type: str) -> type:
    """Ouro's base model under another model type (a config and base class of its own): a record's model type is
    its config's."""
    from equilibria.modeling import OuroConfig, OuroModel

    config_class = type(f"{model_type}Config", (OuroConfig,), {"model_type": model_type})
    return type(f"{model_type}Model", (OuroModel,), {"config_class": config_class})


@pytest.mark.slow
def test_the_example_registers_trains_scores_and_audits_its_own_architecture(tmp_path):
    """In its own process (registering changes the process's Auto classes): a few StarsTrainer steps at sampled
    loop counts, then the reload through AutoModelForCausalLM, the loop scaling at 1-8 loops and the audit's
    verdict, through the protocol."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--output_dir", str(tmp_path), "--max_steps", "20"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert sorted(int(k) for k in result["accuracy"]) == [1, 2, 4, 8]
    assert all(0.0 <= v <= 1.0 for v in result["accuracy"].values())
    assert result["verdict"] in VERDICTS
    assert len(set(result["mean_loops_logged"])) > 1  # StarsTrainer drew the loop count per step (2-6)
    assert all(2 <= n <= 6 for n in result["mean_loops_logged"])
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "looped_llama"
    assert "audit: " in run.stdout
    card = (tmp_path / "README.md").read_text()  # the card derived from its record
    assert "LoopedLlama looped model" in card and "looped_llama" in card and "passes of the looped Llama layer" in card
    assert "ships in transformers" not in card and "trust_remote_code" not in card
    assert "register_family" in card and result["verdict"] in card


def test_the_development_page_gives_the_examples_line_counts():
    """docs/development.md's counts of the example's lines: the model, and the protocol, the small-config factory
    and the registration."""
    import ast

    tree = ast.parse(EXAMPLE.read_text())
    size = {getattr(n, "name", None) or n.targets[0].id: n.end_lineno - n.lineno + 1 for n in tree.body
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.Assign))}  # fmt: skip
    model = size["LoopedLlamaConfig"] + size["LoopedLlamaModel"] + size["LoopedLlamaForCausalLM"]
    parts = (size["LoopedLlamaLoop"], size["small_config"], size["FAMILY"])
    page = " ".join((Path(__file__).parents[1] / "docs" / "development.md").read_text().split())
    assert f"the model is {model} lines), in {sum(parts)} lines: the protocol ({parts[0]}," in page
    assert f"the record's small-config factory ({parts[1]}) and the `register_family` call ({parts[2]})" in page


def test_a_records_config_class_and_model_type_are_its_base_models_and_one_that_differs_is_refused():
    ouro = FAMILIES["ouro"]
    assert ouro.config_class is ouro.base_class.config_class
    assert ouro.model_type == ouro.config_class.model_type
    fields = {k: getattr(ouro, k) for k in ("loop_meaning", "protocol", "heads", "make_config")}
    base = ouro_under("my_loop")
    mine = Family(base_class=base, **fields)
    assert mine.config_class is base.config_class and mine.model_type == "my_loop"
    assert Family(base_class=base, config_class=base.config_class, model_type="my_loop", **fields) == mine
    with pytest.raises(ValueError, match=r"^Family\(model_type='other'\) differs from config_class.model_type "
                       r"\('my_loop'\): leave it out \(or None\)$"):  # fmt: skip
        Family(base_class=base, model_type="other", **fields)
    with pytest.raises(
        ValueError, match=r"^Family\(config_class=.*OuroConfig'>\) differs from base_class.config_class"
    ):
        Family(base_class=base, config_class=ouro.config_class, **fields)
    with pytest.raises(ValueError, match=r"^Family needs config_class: base_class \(<class 'object'>\) has none"):
        Family(base_class=object, **fields)
    with pytest.raises(TypeError):  # keywords only
        Family(ouro.loop_meaning, ouro.protocol, base, ouro.heads, ouro.make_config)


def test_a_record_that_takes_a_known_model_type_or_whose_protocol_does_not_name_it_is_refused():
    ouro = FAMILIES["ouro"]
    fields = {k: getattr(ouro, k) for k in ("loop_meaning", "heads", "make_config")}
    with pytest.raises(ValueError, match="model_type 'ouro' is already a family"):
        register_family(Family(protocol=OuroLoop(), base_class=ouro.base_class, **fields))
    with pytest.raises(ValueError, match=r"OuroLoop.model_types is \('ouro',\): it must name 'my_loop'"):
        register_family(Family(protocol=OuroLoop(), base_class=ouro_under("my_loop"), **fields))
    assert "my_loop" not in FAMILIES
    assert register_family(ouro) is ouro  # the same record again: nothing changes


@pytest.mark.slow
def test_a_registered_family_trains_with_stars_and_is_refused_the_penalty_its_forward_lacks(tmp_path):
    """In its own process, the example imported as a user would: StarsTrainer serves its model (sampled counts),
    and jsrr_weight > 0, which needs the stars_penalty capability its record does not declare, is refused in one
    line naming the capability and the family."""
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("register_family", {str(EXAMPLE)!r})
example = importlib.util.module_from_spec(spec); spec.loader.exec_module(example)
from equilibria.trainers import StarsTrainer, StarsTrainingArguments
model = example.LoopedLlamaForCausalLM(example.small_config({{"vocab_size": 16}}, 32, 1, 2, 2))
assert "looped_llama" in StarsTrainer.model_types
args = StarsTrainingArguments({str(tmp_path)!r}, min_loops=1, max_loops=4, jsrr_weight=0.1, use_cpu=True, report_to=[])
try:
    StarsTrainer(model=model, args=args)
except ValueError as error:
    print(error)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    line = run.stdout.strip().splitlines()[-1]
    assert line.startswith("StarsTrainer with jsrr_weight > 0 (set it 0 to train without) needs stars_penalty"), line
    assert "which the looped_llama family lacks" in line


def test_the_audit_takes_the_adapter_a_record_names_and_says_so_when_none_fits(monkeypatch):
    """A head kind and loop form no adapter of the package declares (a classifier over a fixed-step loop) is refused
    in one line that says how to name one; the record's ``audit_adapter`` is then the one the audit uses."""
    import dataclasses

    from conftest import tiny_ouro

    from equilibria.diagnostics import LoopAdapter, adapter_for

    model = tiny_ouro()
    model.config.model_type = "odd_loop"  # a family of its own whose only head is read as a classifier
    ouro = FAMILIES["ouro"]
    odd = dataclasses.replace(
        ouro,
        base_class=ouro_under("odd_loop"),
        config_class=None,
        model_type="",
        heads=(Head(type(model), kind="classifier", tasks=("addition",)),),
    )
    monkeypatch.setitem(FAMILIES, "odd_loop", odd)
    with pytest.raises(ValueError, match="no audit adapter fits the odd_loop family's classifier head with a fixed "
                       r"number of steps: name one in its record \(Family\(audit_adapter=YourAdapter\)"):  # fmt: skip
        adapter_for(model)

    class OddAdapter(LoopAdapter):
        head_kinds = ("classifier",)

    monkeypatch.setitem(FAMILIES, "odd_loop", dataclasses.replace(odd, audit_adapter=OddAdapter))
    adapter = adapter_for(model, num_loops=2)
    assert type(adapter) is OddAdapter and adapter.max_iter == 2 and adapter.family == "odd_loop"

    class OtherHeadsAdapter(LoopAdapter):  # declares another head kind: not this head's
        head_kinds = ("puzzle_cells",)

    monkeypatch.setitem(FAMILIES, "odd_loop", dataclasses.replace(odd, audit_adapter=OtherHeadsAdapter))
    with pytest.raises(ValueError, match="no audit adapter fits the odd_loop family's classifier head"):
        adapter_for(model)


def test_a_registered_record_brings_its_recipes_named_after_its_model_type(monkeypatch):
    """``register_family`` adds the record's recipes (each named by its task) to ``equilibria train``'s recipes."""
    import dataclasses

    from equilibria.families import record
    from equilibria.tasks import recipes
    from equilibria.tasks.recipes import recipe_for, scratch_recipe

    class MyLoop(OuroLoop):
        model_types = ("my_loop",)

    monkeypatch.setattr(record, "FAMILIES", dict(FAMILIES))
    monkeypatch.setattr(recipes, "RECIPES", dict(recipes.RECIPES))
    monkeypatch.setattr(record, "_register", lambda family: None)  # no Auto classes: this process keeps its own
    mine = scratch_recipe("addition", "my loop on sums", max_steps=300)
    base = ouro_under("my_loop")
    register_family(
        dataclasses.replace(
            FAMILIES["ouro"], base_class=base, config_class=None, model_type="", protocol=MyLoop(), recipes=(mine,)
        )
    )
    got = recipe_for("my_loop", "addition")
    assert got.name == "my_loop/addition" and got.settings["max_steps"] == 300
    assert recipe_for("ouro", "addition").name == "ouro/addition"


def test_the_development_page_gives_the_records_line_counts():
    """docs/development.md's counts of two family records' modules (all lines, and their BibTeX's)."""
    families = Path(__file__).parents[1] / "src" / "equilibria" / "families"

    def counts(name):
        lines = (families / f"{name}.py").read_text().splitlines()
        start = next(i for i, line in enumerate(lines) if 'BIBTEX = """' in line)
        end = next(i for i in range(start, len(lines)) if lines[i].startswith('}"""'))
        return len(lines), end - start + 1

    (phdeq, phdeq_bib), (ouro, ouro_bib) = counts("phdeq"), counts("ouro")
    page = " ".join((Path(__file__).parents[1] / "docs" / "development.md").read_text().split())
    assert (
        f"`families/phdeq.py`, the PH-DEQ's record, is {phdeq} lines (its BibTeX {phdeq_bib} of them), and "
        f"`families/ouro.py`, Ouro's, {ouro} (its BibTeX {ouro_bib})" in page
    )


def test_a_head_or_recipe_that_contradicts_its_record_is_refused():
    """A head's Auto class and pipeline tag are its kind's (a positional kind in the Auto class's place is caught);
    a recipe is named by one of the family's tasks."""
    import dataclasses

    from equilibria.modeling import OuroForCausalLM
    from equilibria.tasks.recipes import scratch_recipe

    head = Head(OuroForCausalLM, kind="causal_lm", tasks=("addition",))
    assert (head.auto_class, head.pipeline_tag) == ("AutoModelForCausalLM", "text-generation")
    with pytest.raises(ValueError, match="a causal_lm head's auto_class is 'AutoModelForCausalLM', not 'causal_lm'"):
        Head(OuroForCausalLM, "causal_lm", tasks=("addition",))
    with pytest.raises(ValueError, match="a classifier head's auto_class is 'AutoModelForSequenceClassification'"):
        dataclasses.replace(head, kind="classifier")  # the Auto class is not left behind silently
    with pytest.raises(
        ValueError, match=r"recipes are named by the task they train, one of its heads' \('addition',\)"
    ):
        dataclasses.replace(FAMILIES["ouro"], recipes=(scratch_recipe("ouro/addition", "named the old way"),))
