"""Graph reachability: "is node ``t`` reachable from node ``s`` within ``k`` hops?" on random directed graphs,
labelled by breadth-first search, with the BFS distance as the difficulty.

A question is encoded as one feature vector of ``n * n + 3 * n`` floats (``n`` nodes): the adjacency matrix
(row-major, ``A[u, v] = 1`` for an edge ``u -> v``), then one-hot ``s``, one-hot ``t`` and one-hot ``k``
(position ``k - 1``). That is the ``inputs`` column; ``labels`` is 1 for "reachable within ``k`` hops".
"""

from __future__ import annotations

import random
from collections import deque

from datasets import Dataset, DatasetDict

Edges = list[tuple[int, int]]


def generate_graph(num_nodes: int, edge_prob: float, rng: random.Random) -> Edges:
    """A random directed graph without self-loops: each ordered pair ``(u, v)``, ``u != v``, is an edge with
    probability ``edge_prob``. Returned as a sorted edge list."""
    _check_nodes(num_nodes)
    if not 0.0 < edge_prob <= 1.0:
        raise ValueError(f"edge_prob must be in (0, 1], got {edge_prob!r}")
    return [(u, v) for u in range(num_nodes) for v in range(num_nodes) if u != v and rng.random() < edge_prob]


def bfs_distances(edges: Edges, num_nodes: int, source: int) -> list[int]:
    """Hops from ``source`` to every node by breadth-first search (``-1`` where unreachable; 0 at ``source``)."""
    _check_node(source, num_nodes, "source")
    out: list[list[int]] = [[] for _ in range(num_nodes)]
    for u, v in edges:
        _check_node(u, num_nodes, "edge start")
        _check_node(v, num_nodes, "edge end")
        out[u].append(v)
    dist = [-1] * num_nodes
    dist[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in out[u]:
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def encode_reachability(edges: Edges, num_nodes: int, source: int, target: int, max_hops: int) -> list[float]:
    """The ``n * n + 3 * n`` feature vector of a question (see the module docstring)."""
    _check_node(source, num_nodes, "source")
    _check_node(target, num_nodes, "target")
    if isinstance(max_hops, bool) or not isinstance(max_hops, int) or not 1 <= max_hops <= num_nodes:
        raise ValueError(f"max_hops must be an integer in [1, {num_nodes}], got {max_hops!r}")
    n = num_nodes
    features = [0.0] * (n * n + 3 * n)
    for u, v in edges:
        features[u * n + v] = 1.0
    features[n * n + source] = 1.0
    features[n * n + n + target] = 1.0
    features[n * n + 2 * n + max_hops - 1] = 1.0
    return features


def reachability_input_size(num_nodes: int) -> int:
    """Length of the encoded question for graphs of ``num_nodes`` nodes."""
    return num_nodes * num_nodes + 3 * num_nodes


def build_reachability_dataset(
    num_train: int = 2000,
    num_test: int = 500,
    num_nodes: int = 16,
    edge_prob: float = 0.15,
    max_hops: int = 6,
    seed: int = 0,
) -> DatasetDict:
    """Seeded train/test splits of reachability questions that share no (graph, s, t, k) question, half of them
    positive. Each row draws a graph, a source, a target ``!= s`` and a hop budget ``k`` uniform in
    ``[1, max_hops]``; rows are drawn until each label has its half.

    Columns: ``edges`` (list of ``[u, v]``), ``num_nodes``, ``source``, ``target``, ``max_hops`` (the row's
    ``k``), ``distance`` (BFS hops from ``s`` to ``t``, ``-1`` if unreachable), ``difficulty`` (the distance, or
    ``num_nodes`` when unreachable), ``labels`` (1: reachable within ``k``), ``inputs`` (the feature vector).
    """
    _check_nodes(num_nodes)
    if num_train < 1 or num_test < 0:
        raise ValueError(f"num_train must be >= 1 and num_test >= 0, got {num_train}, {num_test}")
    if isinstance(max_hops, bool) or not isinstance(max_hops, int) or not 1 <= max_hops <= num_nodes:
        raise ValueError(f"max_hops must be an integer in [1, num_nodes={num_nodes}], got {max_hops!r}")
    rng = random.Random(f"reachability-{num_nodes}-{edge_prob}-{max_hops}-{seed}")
    total = num_train + num_test
    want = {1: (total + 1) // 2, 0: total // 2}
    rows, seen = [], set()
    attempts = 0
    while want[0] + want[1] > 0:
        attempts += 1
        if attempts > 200 * total + 1000:
            raise ValueError(
                f"could not draw {total} balanced questions with num_nodes={num_nodes}, edge_prob={edge_prob}, "
                f"max_hops={max_hops}: make positives and negatives both likely (edge_prob between about "
                f"0.5/num_nodes and 3/num_nodes)"
            )
        edges = generate_graph(num_nodes, edge_prob, rng)
        source, target = rng.sample(range(num_nodes), 2)
        hops = rng.randint(1, max_hops)
        distance = bfs_distances(edges, num_nodes, source)[target]
        label = int(0 < distance <= hops)
        key = (tuple(edges), source, target, hops)
        if want[label] == 0 or key in seen:
            continue
        seen.add(key)
        want[label] -= 1
        rows.append(
            {
                "edges": [list(e) for e in edges],
                "num_nodes": num_nodes,
                "source": source,
                "target": target,
                "max_hops": hops,
                "distance": distance,
                "difficulty": distance if distance > 0 else num_nodes,
                "labels": label,
                "inputs": encode_reachability(edges, num_nodes, source, target, hops),
            }
        )
    rng.shuffle(rows)
    return DatasetDict(
        train=Dataset.from_list(rows[:num_train]),
        test=Dataset.from_list(rows[num_train:]) if num_test else Dataset.from_list(rows[:0]),
    )


def _check_nodes(num_nodes: int) -> None:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 2:
        raise ValueError(f"num_nodes must be an integer >= 2, got {num_nodes!r}")


def _check_node(node: int, num_nodes: int, what: str) -> None:
    if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < num_nodes:
        raise ValueError(f"{what} must be a node in [0, {num_nodes}), got {node!r}")


__all__ = [
    "bfs_distances",
    "build_reachability_dataset",
    "encode_reachability",
    "generate_graph",
    "reachability_input_size",
]
