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
    from datasets import Dataset
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import CommitInfo, RepoUrl
    from transformers import TrainingArguments

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
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        hub_model_id="someone/phdeq-tiny",
        hub_token="hf_fake",
        disable_tqdm=True,
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
        "loop_utils.py",
        "config_checks.py",
    } <= files, files
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.eval_results[1].metric_value == 0.75 and "## Training" in card.text
    assert 'from_pretrained("someone/phdeq-tiny", trust_remote_code=True)' in card.text
