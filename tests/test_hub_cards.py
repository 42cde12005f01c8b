"""Model cards: metadata that parses back, model-index results per loop count, the sections, for every family."""

import pytest
import torch
from huggingface_hub import ModelCard

from equilibria import EqRConfig, EqRForPuzzleSolving, PHDEQConfig, PHDEQForSequenceClassification
from equilibria.hub_cards import build_model_card, card_metadata_round_trips


def tiny_models():
    from conftest import tiny_attractor, tiny_ouro

    torch.manual_seed(0)
    return {
        "ouro": tiny_ouro(),
        "attractor_lm": tiny_attractor(),
        "eqr": EqRForPuzzleSolving(
            EqRConfig(max_seq_len=16, hidden_size=32, intermediate_size=64, num_attention_heads=2)
        ),
        "phdeq": PHDEQForSequenceClassification(PHDEQConfig(input_size=6, hidden_size=8, intermediate_size=16)),
    }


@pytest.mark.parametrize("family", ["ouro", "attractor_lm", "eqr", "phdeq"])
def test_cards_for_every_family_validate_and_carry_results(family):
    model = tiny_models()[family]
    evaluated = {"name": "someone/data (test split)", "dataset": "someone/data", "note": "no training row among them"}
    audit = {
        "verdict": "computing",
        "reasons": ["substituting z0 for h* costs 40.00 points"],
        "accuracy": 0.9,
        "num_units": 200,
        "family": {"unit": "sequence"},
        "chance": {"majority": 0.1, "margin_se": 37.7},
        "substitution": {"change_points": -40.0, "se_points": 3.5},
        "displacement": {"median": 3.2},
        "data": evaluated,
    }
    card = build_model_card(
        model,
        repo_id="someone/tiny",
        datasets=["someone/data"],
        task_name="a task",
        loop_scaling={"data": evaluated, "accuracy": {1: 0.25, 4: 0.5, 8: 0.75}},
        loop_scaling_plot="loop_scaling.png",
        audit=audit,
        base_model="someone/base",
    )
    assert card_metadata_round_trips(card)
    data = ModelCard(str(card)).data
    assert data.library_name == "transformers" and family in data.tags and "equilibria" in data.tags
    assert data.base_model == "someone/base" and data.datasets == ["someone/data"]
    assert [r.metric_value for r in data.eval_results] == [0.25, 0.5, 0.75]
    assert [r.metric_config for r in data.eval_results] == ["num_loops=1", "num_loops=4", "num_loops=8"]
    text = card.text
    for section in (
        "## How to load it",
        "trust_remote_code=True",
        "## Loop scaling",
        "| 8 | 75.0% |",
        "![loop scaling](loop_scaling.png)",
        "## Computation audit",
        "**computing**, on 200 sequences of someone/data (test split) (no training row among them)",
        "against a majority-class baseline of 10.00% (+37.7 binomial standard errors)",
        "changes it by -40.00 +/- 3.50 points",
        "## Limitations",
    ):
        assert section in text, section
    assert data.eval_results[0].dataset_type == "someone/data"
    with pytest.raises(ValueError, match="the card's results were computed on someone/data"):
        build_model_card(model, datasets=["someone/other"], loop_scaling={"data": evaluated, "accuracy": {1: 0.5}})


def test_bad_card_inputs_are_clear_errors():
    model = tiny_models()["phdeq"]
    with pytest.raises(ValueError, match="fractions in \\[0, 1\\]"):
        build_model_card(model, loop_scaling={4: 75.0})
    with pytest.raises(ValueError, match="no model card template for model_type"):
        build_model_card(torch.nn.Linear(2, 2))


def test_push_to_hub_sends_weights_remote_code_and_the_card(tmp_path, monkeypatch):
    """The upload boundary: the commit operations huggingface_hub would send for trainer.push_to_hub()."""
    import huggingface_hub.hf_api
    import transformers.trainer
    from conftest import training_args
    from datasets import Dataset
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import CommitInfo, RepoUrl

    from equilibria.trainers import EquilibriaTrainer

    api = HfApi(token="hf_fake")
    sent = {}

    def create_repo(repo_id, **kwargs):
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def create_commit(repo_id, operations, **kwargs):
        sent["repo_id"] = repo_id
        sent["files"] = {op.path_in_repo: op.path_or_fileobj for op in operations}
        return CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/0",
            commit_message="",
            commit_description="",
            oid="0" * 40,
            pr_url=None,
        )

    def validate_yaml(content, **kwargs):  # the Hub validates the metadata server-side; here: it parses back
        sent["validated"] = card_metadata_round_trips(ModelCard(content))

    monkeypatch.setattr(api, "_validate_yaml", validate_yaml)
    monkeypatch.setattr(huggingface_hub.hf_api, "is_xet_available", lambda: False)  # one commit, captured below
    monkeypatch.setattr(api, "create_repo", create_repo)
    monkeypatch.setattr(api, "create_commit", create_commit)
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: api)
    model = tiny_models()["phdeq"]
    data = Dataset.from_dict({"inputs": torch.randn(16, 6).tolist(), "labels": [0, 1] * 8})
    args = training_args(
        tmp_path / "out",
        max_steps=2,
        per_device_train_batch_size=8,
        hub_model_id="someone/phdeq-tiny",
        hub_token="hf_fake",
        seed=42,  # transformers' default, the seed this test has always trained with
    )
    trainer = EquilibriaTrainer(model=model, args=args, train_dataset=data)
    trainer.train()
    trainer.loop_scaling = {10: 0.5, 300: 0.75}
    trainer.push_to_hub()
    assert sent["repo_id"] == "someone/phdeq-tiny" and sent["validated"]
    files = set(sent["files"])
    assert {
        "README.md",
        "config.json",
        "model.safetensors",
        "modeling_phdeq.py",
        "configuration_phdeq.py",
        "solvers.py",
        "checkpoints.py",
        "loop_map.py",
        "looped_lm.py",
        "config_checks.py",
    } <= files, files
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.eval_results[1].metric_value == 0.75 and "## Training" in card.text
    assert 'from_pretrained("someone/phdeq-tiny", trust_remote_code=True)' in card.text


@pytest.mark.parametrize(
    "family, article",
    [("ouro", "An Ouro"), ("attractor_lm", "An Attractor"), ("eqr", "An Equilibrium"), ("phdeq", "A Port")],
)
def test_every_card_has_its_paper_citation_and_the_right_article(family, article):
    from equilibria.hub_cards import FAMILY_TEXTS

    text = build_model_card(tiny_models()[family]).text
    assert f"\n{article}" in text
    assert "## Citation" in text and FAMILY_TEXTS[family].citation in text and "@misc{" in text


def test_a_compared_curve_is_in_the_table_as_in_the_plot():
    scaling = {
        "accuracy": {"1": 0.5, "4": 0.9},
        "compared": {"plain": {"1": 0.6, "4": 0.1}, "STARS": {"1": 0.5, "4": 0.9}},
    }
    card = build_model_card(tiny_models()["ouro"], loop_scaling=scaling)
    assert "| num_loops | plain | STARS |" in card.text and "| 4 | 10.0% | 90.0% |" in card.text
    assert [r.metric_value for r in card.data.eval_results] == [0.5, 0.9]  # model-index: the model's own curve


class FakeHub:
    """Captures what huggingface_hub would upload: every commit's files (their text for README.md)."""

    def __init__(self, monkeypatch):
        import huggingface_hub.hf_api
        import transformers.trainer
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import CommitInfo, RepoUrl

        self.commits = []
        api = HfApi(token="hf_fake")

        def create_commit(repo_id, operations, commit_message=None, **kwargs):
            files = {}
            for op in operations:
                if hasattr(op, "path_or_fileobj"):
                    source = op.path_or_fileobj
                    files[op.path_in_repo] = open(source).read() if op.path_in_repo == "README.md" else source
            self.commits.append({"repo_id": repo_id, "message": commit_message, "files": files})
            return CommitInfo(f"https://huggingface.co/{repo_id}/commit/0", commit_message, "", "0" * 40, None)

        for target in (api, HfApi):
            monkeypatch.setattr(
                target,
                "create_repo",
                lambda self_or_id, *a, **k: RepoUrl(
                    f"https://huggingface.co/{k.get('repo_id') or (a[0] if a else self_or_id)}"
                ),
            )
            monkeypatch.setattr(
                target,
                "create_commit",
                create_commit
                if target is api
                else (lambda _self, repo_id, operations, **k: create_commit(repo_id, operations, **k)),
            )
        # the Hub validates the card's metadata server-side; here: it must parse back to itself
        monkeypatch.setattr(HfApi, "_validate_yaml", lambda _self, content, **k: self._validate(content))
        monkeypatch.setattr(huggingface_hub.hf_api, "is_xet_available", lambda: False)
        monkeypatch.setattr(transformers.trainer, "hf_api", lambda: api)

    @staticmethod
    def _validate(content):
        assert card_metadata_round_trips(ModelCard(content))


def test_model_push_to_hub_publishes_the_equilibria_card_with_the_folders_results(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM as Auto  # the families are registered by importing equilibria

    saved = tmp_path / "model"
    tiny_models()["ouro"].save_pretrained(saved)
    (saved / "loop_scaling.json").write_text('{"accuracy": {"1": 0.25, "4": 0.75}}')
    (saved / "loop_scaling.png").write_bytes(b"\x89PNG fake")
    hub = FakeHub(monkeypatch)
    Auto.from_pretrained(saved).push_to_hub("someone/tiny-ouro", tags=["mine"])
    (commit,) = hub.commits
    files = commit["files"]
    assert {"README.md", "config.json", "model.safetensors", "modeling_ouro.py", "loop_scaling.png"} <= set(files)
    card = ModelCard(files["README.md"])
    assert "Model Card for Model ID" not in card.text and "# someone/tiny-ouro" in card.text
    assert "mine" in card.data.tags and [r.metric_value for r in card.data.eval_results] == [0.25, 0.75]
    assert "![loop scaling](loop_scaling.png)" in card.text and "## Citation" in card.text


def test_intermediate_pushes_carry_the_remote_code_and_the_card_and_the_history_has_every_stage(tmp_path, monkeypatch):
    from conftest import training_args
    from datasets import Dataset

    from equilibria.trainers import EquilibriaTrainer

    hub = FakeHub(monkeypatch)
    data = Dataset.from_dict({"inputs": torch.randn(16, 6).tolist(), "labels": [0, 1] * 8})

    def run(model, out, steps):
        args = training_args(
            out,
            max_steps=steps,
            per_device_train_batch_size=8,
            save_strategy="steps",
            save_steps=1,
            push_to_hub=True,
            hub_model_id="someone/phdeq",
            hub_token="hf_fake",
            hub_strategy="every_save",
            hub_always_push=True,
            logging_steps=1,
            seed=42,  # transformers' default, the seed this test has always trained with
        )
        trainer = EquilibriaTrainer(model=model, args=args, train_dataset=data)
        trainer.train()
        trainer.push_to_hub()
        trainer.save_model()
        return trainer

    run(tiny_models()["phdeq"], tmp_path / "first", 2)
    pushes = [c for c in hub.commits if "Training in progress" in (c["message"] or "")]
    assert pushes, [c["message"] for c in hub.commits]
    for push in pushes:
        assert {"config.json", "modeling_phdeq.py", "configuration_phdeq.py", "checkpoints.py", "README.md"} <= set(
            push["files"]
        ), push["files"].keys()
        assert "## Training" in push["files"]["README.md"]
    # a second stage, from the saved folder: the card lists both
    again = PHDEQForSequenceClassification.from_pretrained(tmp_path / "first")
    run(again, tmp_path / "second", 3)
    card = ModelCard.load(tmp_path / "second" / "README.md")
    assert "**Stage 1 of 2**: 2 steps with `EquilibriaTrainer`" in card.text
    assert "**Stage 2 of 2**: 3 steps with `EquilibriaTrainer`" in card.text


@pytest.fixture(scope="module")
def adder(tmp_path_factory):
    """A tiny Ouro trained 2 steps on generated addition (its config's task: addition)."""
    from conftest import QUIET

    from equilibria.cli import main

    out = tmp_path_factory.mktemp("adder") / "ouro"
    argv = ["train", "--output_dir", str(out), "--max_steps", "2", "--train_size", "32", "--test_size", "4"]
    assert main([*argv, "--hidden_size", "16", "--eval_loops", "2", "--save_strategy", "no", *QUIET]) == 0
    return out


def test_a_model_last_trained_on_rows_of_its_own_is_not_scored_on_the_task_before_them(adder, tmp_path, capsys):
    """Fine-tuned on rows that reverse numbers with none held out: the folder says its last task was those rows,
    eval and audit refuse to score generated addition unless --task asks for it, and the card's usage snippet does
    not show an addition prompt."""
    import json

    from conftest import fine_tune, write_jsonl

    from equilibria.cli import main

    rows = write_jsonl(
        tmp_path / "reverse.jsonl", [{"prompt": f"{n}=", "completion": str(n)[::-1]} for n in range(10, 70)]
    )
    out = tmp_path / "reverser"
    assert fine_tune(adder, rows, out, "--max_steps", "1", "--save_strategy", "no", "--test_size", "0") == 0
    assert json.loads((out / "config.json").read_text())["equilibria_task"] == "rows"
    capsys.readouterr()
    for command in (["eval", str(out), "--loops", "1"], ["audit", str(out), "--num-examples", "8"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "was last trained on rows of your own (54 prompt/completion rows of reverse.jsonl" in err  # 6 validate
        assert "--dataset_name FILE" in err and "--task addition" in err
    assert main(["eval", str(out), "--task", "addition", "--loops", "1", "--num-examples", "4"]) == 0
    assert "4 generated addition problems (seed 1234)" in capsys.readouterr().out
    card = (out / "README.md").read_text()
    assert 'tokenizer("<a prompt like those of reverse.jsonl>", return_tensors="pt")' in card
    assert "12+34=" not in card


def test_the_card_names_the_split_of_rows_held_out_of_training_and_what_card_wrote(adder, tmp_path, capsys):
    """Rows held out of the train split are not called the test split in model-index; `equilibria card` lists
    every result it put in the card, lm-eval's too; one row or sequence is not "1 rows"."""
    import json

    from conftest import fine_tune, write_jsonl

    from equilibria.cli import main
    from equilibria.provenance import weights_fingerprint

    rows = write_jsonl(tmp_path / "sums.jsonl", [{"prompt": f"{a}+1=", "completion": str(a + 1)} for a in range(11)])
    out = tmp_path / "tuned"
    assert fine_tune(adder, rows, out, "--max_steps", "1", "--save_strategy", "no", "--test_size", "1") == 0
    card = ModelCard.load(out / "README.md")
    assert {r.dataset_split for r in card.data.eval_results} == {"train, held out before training"}
    assert {r.dataset_name for r in card.data.eval_results} == {"1 held-out row of sums.jsonl"}
    assert main(["audit", str(out), "--output-dir", str(out)]) == 0
    lm_eval = {"tasks": {"tiny": {"acc": {"1": 0.5}}}, "weights": weights_fingerprint(out)}
    (out / "lm_eval.json").write_text(json.dumps(lm_eval))
    capsys.readouterr()
    assert main(["card", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith("(with loop scaling, audit, lm-eval)")
    card = ModelCard.load(out / "README.md")
    assert {r.dataset_split for r in card.data.eval_results if r.source_name is None} == {
        "train, held out before training"
    }
    assert "on 1 sequence of 1 held-out row of sums.jsonl" in card.text


def test_the_usage_example_runs_the_loop_count_where_the_model_scores():
    """Not a fixed 8: the count of the best accuracy in the card's own loop scaling (the fewest loops among equals),
    else the config's count."""
    model = tiny_models()["ouro"]
    card = build_model_card(model, loop_scaling={"accuracy": {1: 0.0, 2: 0.4, 4: 0.9, 8: 0.9, 16: 0.01}}).text
    assert "model.generate(**inputs, num_loops=4, max_new_tokens=8)  # 90.0% at 4 loops in the loop scaling" in card
    plain = build_model_card(model).text
    configured = model.config.total_ut_steps
    assert f"num_loops={configured}, max_new_tokens=8)  # the count saved in its config" in plain


def test_eval_into_the_model_folder_updates_its_card_and_elsewhere_says_how(adder, tmp_path, capsys):
    import shutil

    from matplotlib.figure import Figure

    from equilibria.cli import main

    folder = tmp_path / "model"
    shutil.copytree(adder, folder)
    argv = ["eval", str(folder), "--loops", "1,2", "--num-examples", "4"]
    assert main([*argv, "--output-dir", str(folder)]) == 0
    assert f"updated the model card {folder / 'README.md'} with these results" in capsys.readouterr().out
    assert "From `eval_loop_scaling.json`" in (folder / "README.md").read_text()
    elsewhere = tmp_path / "elsewhere"
    legends, save = [], Figure.savefig
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", lambda fig, *a, **k: legends.append(
            [t.get_text() for t in fig.axes[0].get_legend().get_texts()]) or save(fig, *a, **k))  # fmt: skip
        assert main([*argv, "--output-dir", str(elsewhere)]) == 0
    assert (
        f"`equilibria card {folder} --loop_scaling {elsewhere / 'eval_loop_scaling.json'}`" in capsys.readouterr().out
    )
    assert legends == [["ouro", "trained at (its config's count): 4 loops"]]  # trained at its config's 4 loops


def test_the_plot_of_a_model_trained_at_sampled_counts_shows_the_range_and_the_config_count():
    from equilibria.scaling import plot_labels

    model = tiny_models()["ouro"]
    labels = plot_labels(model, "exact match", (2, 8))
    assert labels["trained"] == [2, 8] and labels["mark_label"] == "its config's count, a plain call's"
    assert plot_labels(model, "x", None)["mark_label"] == "its config's count"
