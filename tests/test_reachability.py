"""Graph reachability: labels and difficulty checked against an independent computation, encoding, splits."""

import random

import pytest
import torch

from equilibria.tasks import (
    bfs_distances,
    build_reachability_dataset,
    encode_reachability,
    generate_graph,
    reachability_input_size,
)


def hops_by_matrix_powers(edges, n: int, source: int, target: int) -> int:
    """Shortest hop count by boolean matrix powers (not BFS): the first k with (A^k)[s, t] > 0, or -1."""
    adjacency = torch.zeros(n, n)
    for u, v in edges:
        adjacency[u, v] = 1.0
    reach = torch.eye(n)
    for k in range(1, n):
        reach = (reach @ adjacency).clamp(max=1.0)
        if reach[source, target] > 0:
            return k
    return -1


def decode(features, n: int):
    flat = torch.tensor(features)
    adjacency = flat[: n * n].view(n, n)
    edges = [tuple(e) for e in adjacency.nonzero().tolist()]
    source = int(flat[n * n : n * n + n].argmax())
    target = int(flat[n * n + n : n * n + 2 * n].argmax())
    hops = int(flat[n * n + 2 * n :].argmax()) + 1
    return edges, source, target, hops


def test_labels_and_difficulty_agree_with_matrix_powers():
    data = build_reachability_dataset(300, 100, num_nodes=10, edge_prob=0.2, max_hops=5, seed=3)
    for row in list(data["train"]) + list(data["test"]):
        distance = hops_by_matrix_powers(row["edges"], 10, row["source"], row["target"])
        assert row["distance"] == distance
        assert row["labels"] == int(0 < distance <= row["max_hops"])
        assert row["difficulty"] == (distance if distance > 0 else 10)


def test_the_encoding_round_trips_and_has_the_documented_size():
    data = build_reachability_dataset(50, 0, num_nodes=16, seed=1)
    assert reachability_input_size(16) == 304
    for row in data["train"]:
        assert len(row["inputs"]) == 304
        edges, source, target, hops = decode(row["inputs"], 16)
        assert sorted(edges) == sorted(tuple(e) for e in row["edges"])
        assert (source, target, hops) == (row["source"], row["target"], row["max_hops"])


def test_splits_are_balanced_seeded_and_share_no_question():
    data = build_reachability_dataset(400, 100, seed=0)
    again = build_reachability_dataset(400, 100, seed=0)
    assert list(data["train"]["inputs"]) == list(again["train"]["inputs"])
    assert list(data["train"]["inputs"]) != list(build_reachability_dataset(400, 100, seed=1)["train"]["inputs"])
    labels = list(data["train"]["labels"]) + list(data["test"]["labels"])
    assert sum(labels) == 250
    key = lambda row: (str(row["edges"]), row["source"], row["target"], row["max_hops"])  # noqa: E731
    assert not {key(r) for r in data["train"]} & {key(r) for r in data["test"]}
    # both kinds of "no": unreachable, and reachable only beyond the hop budget
    negatives = [r for r in data["train"] if r["labels"] == 0]
    assert any(r["distance"] < 0 for r in negatives) and any(r["distance"] > r["max_hops"] for r in negatives)


def test_bfs_on_a_known_graph():
    edges = [(0, 1), (1, 2), (2, 3), (0, 4), (4, 3)]
    assert bfs_distances(edges, 6, 0) == [0, 1, 2, 2, 1, -1]
    assert all(u != v for u, v in generate_graph(8, 0.9, random.Random(0)))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: build_reachability_dataset(10, 5, num_nodes=1), "num_nodes must be an integer >= 2"),
        (lambda: build_reachability_dataset(10, 5, max_hops=0), "max_hops must be an integer in"),
        (lambda: build_reachability_dataset(0, 5), "num_train must be >= 1"),
        (lambda: build_reachability_dataset(10, 5, num_nodes=6, edge_prob=1.0), "could not draw"),
        (lambda: generate_graph(5, 0.0, random.Random(0)), "edge_prob must be in"),
        (lambda: encode_reachability([], 5, 0, 7, 1), "target must be a node in"),
        (lambda: bfs_distances([(0, 9)], 5, 0), "edge end must be a node in"),
    ],
)
def test_bad_arguments_are_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
