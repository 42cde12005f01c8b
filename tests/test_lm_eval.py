"""`equilibria eval --lm-eval-tasks`: lm-evaluation-harness at several loop counts, offline on tiny local tasks (a
multiple-choice task scored by loglikelihood and a generation task), with the loop count reaching both paths."""

import json
import random

import pytest
import torch
from huggingface_hub import ModelCard

pytest.importorskip("lm_eval", reason="lm-eval is the optional extra `equilibria[eval]`")

from equilibria.cli import main  # noqa: E402
from equilibria.families import running_loops  # noqa: E402
from equilibria.lm_eval_loops import lm_eval_at_loops  # noqa: E402

TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
target_delimiter: ""
"""
MULTIPLE_CHOICE = """output_type: multiple_choice
doc_to_text: "{{prompt}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
"""
GENERATION = """output_type: generate_until
doc_to_text: "{{prompt}}"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["."]
  max_gen_toks: 3
  do_sample: false
metric_list:
  - metric: exact_match
"""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """A folder with two lm-eval tasks over 6 local addition problems: tiny_mc (pick the right sum of two) and
    tiny_gen (generate it)."""
    folder = tmp_path_factory.mktemp("lm_eval_tasks")
    rng = random.Random(0)
    rows = []
    for _ in range(6):
        a, b = rng.randrange(20), rng.randrange(20)
        choices = [str(a + b), str(a + b + 1)]
        rng.shuffle(choices)
        rows.append(
            {"prompt": f"{a}+{b}=", "answer": str(a + b), "choices": choices, "label": choices.index(str(a + b))}
        )
    data = folder / "sums.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "tiny_mc.yaml").write_text(TASK.format(name="tiny_mc", data=data) + MULTIPLE_CHOICE)
    (folder / "tiny_gen.yaml").write_text(TASK.format(name="tiny_gen", data=data) + GENERATION)
    return folder


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from conftest import char_tokenizer, tiny_ouro

    folder = tmp_path_factory.mktemp("model") / "ouro"
    tiny_ouro().save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


@pytest.mark.parametrize("task", ["tiny_mc", "tiny_gen"])
def test_the_loop_count_reaches_every_forward_of_both_request_kinds(saved, tasks, task):
    """Each forward the harness makes (loglikelihood batches; every decoding step of generation) runs the stack
    exactly `num_loops` times, for each loop count asked for; the model's own default is restored afterwards."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(saved).eval(), AutoTokenizer.from_pretrained(saved)
    calls = {"forward": 0, "layer": 0}
    model.register_forward_pre_hook(lambda *_: calls.__setitem__("forward", calls["forward"] + 1))
    model.model.layers[0].register_forward_pre_hook(lambda *_: calls.__setitem__("layer", calls["layer"] + 1))
    for n in (1, 3):
        calls.update(forward=0, layer=0)
        result = lm_eval_at_loops(model, tokenizer, [task], [n], include_path=str(tasks), batch_size=4)
        assert calls["forward"] > 0 and calls["layer"] == n * calls["forward"], (n, calls)
        assert set(next(iter(result["tasks"][task].values()))) == {str(n)}
    assert model.config.total_ut_steps == 3  # tiny_ouro's default, put back


def test_a_transformers_looped_lm_runs_each_request_at_each_loop_count(tasks, tmp_path):
    """HRM-text (transformers' class), whose cache has a slot per attention call: generation at more H-cycles than
    its config's runs (the cache is built for the count) and every forward runs the count; its config is restored."""
    from conftest import char_tokenizer, tiny_native
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tiny_native("hrm_text", num_loops=2).save_pretrained(tmp_path)
    char_tokenizer().save_pretrained(tmp_path)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tmp_path).eval(), AutoTokenizer.from_pretrained(tmp_path)
    calls = {"forward": 0, "cycle": 0}
    model.register_forward_pre_hook(lambda *_: calls.__setitem__("forward", calls["forward"] + 1))
    model.model.H_module.register_forward_pre_hook(lambda *_: calls.__setitem__("cycle", calls["cycle"] + 1))
    for task in ("tiny_mc", "tiny_gen"):
        calls.update(forward=0, cycle=0)
        lm_eval_at_loops(model, tokenizer, [task], [4], include_path=str(tasks), batch_size=4)
        assert calls["forward"] > 0 and calls["cycle"] == 4 * calls["forward"], (task, calls)
    assert model.config.H_cycles == 2 and model.config.num_hidden_layers == 2 * 2 * 3  # put back


def test_eval_writes_the_table_json_plot_and_card_entries(saved, tasks, tmp_path, capsys):
    argv = ["eval", str(saved), "--lm-eval-tasks", "tiny_mc,tiny_gen", "--lm-eval-include", str(tasks)]
    assert main([*argv, "--loops", "1,2", "--output-dir", str(saved), "--batch-size", "4"]) == 0
    printed = capsys.readouterr().out
    assert "num_loops | tiny_mc acc | tiny_gen exact_match" in printed
    result = json.loads((saved / "lm_eval.json").read_text())
    assert set(result["tasks"]) == {"tiny_mc", "tiny_gen"} and (saved / "lm_eval.png").is_file()
    for curve in (result["tasks"]["tiny_mc"]["acc"], result["tasks"]["tiny_gen"]["exact_match"]):
        assert set(curve) == {"1", "2"} and all(v in {i / 6 for i in range(7)} for v in curve.values())
    assert main(["card", str(saved)]) == 0
    card = ModelCard.load(saved / "README.md")
    assert "## lm-evaluation-harness" in card.text and "| num_loops | tiny_mc acc | tiny_gen exact_match |" in card.text
    entries = {(r.dataset_type, r.metric_type, r.metric_config) for r in card.data.eval_results}
    assert {("tiny_mc", "acc", "num_loops=2"), ("tiny_gen", "exact_match", "num_loops=1")} <= entries


@pytest.mark.slow
def test_lm_eval_errors_are_one_line(saved, tasks, capsys):
    assert main(["eval", str(saved), "--lm-eval-tasks", "tiny_nope", "--lm-eval-include", str(tasks)]) == 2
    assert "--lm_eval_tasks ['tiny_nope']: no such lm-eval task or in" in capsys.readouterr().err


def test_loop_count_sets_and_restores_the_default(saved):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(saved)
    ids = torch.tensor([[4, 5, 6]])
    with running_loops(model, 2):
        assert model.config.total_ut_steps == 2
        assert torch.equal(model(ids).logits, model(ids, num_loops=2).logits)
        generated = model.generate(ids, max_new_tokens=3, do_sample=False)
        assert torch.equal(generated, model.generate(ids, max_new_tokens=3, do_sample=False, num_loops=2))
    assert model.config.total_ut_steps == 3
