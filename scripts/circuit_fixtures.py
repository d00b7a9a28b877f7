"""Write js/tests/fixtures/circuit_math.json: seeded attribution graphs with the float16-rounded weights the circuit
view stores, and what Python's ``AttributionGraph.prune`` keeps and ``.scores(pinned=...)`` gives on them, for the
vitest tests of the view's in-browser maths (js/tests/circuit_math.test.js). tests/circuits/test_circuit_fixtures.py
builds them again and fails when the file is stale.

Python prunes in float32 and the browser in float64 (rounded to float32 where Python compares), so a kept set can
differ where two scores lie within float32 rounding of each other at a threshold. Each fixture's thresholds are
checked to be far from that (``margin``: the least relative distance, in a float64 recomputation, between the
threshold's cumulative share and the fraction, and between the threshold score and any other score; at least
``MIN_MARGIN``), and the float64 recomputation must keep the same nodes and edges as Python.

Usage: python scripts/circuit_fixtures.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from interp_widgets.circuits import AttributionGraph
from interp_widgets.targets import Targets

TARGET = Path(__file__).resolve().parent.parent / "js" / "tests" / "fixtures" / "circuit_math.json"
MIN_MARGIN = 1e-5
KIND_CODES = {"feature": 0, "error": 1, "token": 2, "logit": 3}

#: (name, seed, layers, positions, features per (layer, position) at most, logits, sources per target, prune settings)
GRAPHS = [
    ("small", 7, 3, 4, 3, 2, 6, [(0.8, 0.98), (0.5, 0.9), (0.95, 0.8)]),
    ("medium", 11, 6, 8, 6, 3, 14, [(0.8, 0.98), (0.6, 0.95), (0.9, 0.99), (0.7, 0.85)]),
]


def seeded_graph(seed: int, n_layers: int, n_pos: int, max_features: int, n_logits: int, fan_in: int):
    """A random attribution graph in circuit-tracer's node order: features at random (layer, position) cells,
    every error node, the tokens and ``n_logits`` logits; each feature reads from ``fan_in`` random earlier nodes
    (tokens, and features and errors of lower layers at the same or earlier positions) and each logit from
    ``3 * fan_in`` of all of them, with heavy-tailed signed weights rounded to float16 as the view stores them.

    Example:
        >>> seeded_graph(0, 2, 3, 2, 1, 3).n_layers
        2
    """
    rng = np.random.default_rng(seed)
    features = [
        (layer, pos, int(f))
        for layer in range(n_layers)
        for pos in range(n_pos)
        for f in sorted(rng.choice(1000, size=rng.integers(0, max_features + 1), replace=False))
    ]
    n_f, n_e = len(features), n_layers * n_pos
    n = n_f + n_e + n_pos + n_logits
    layer = np.array([f[0] for f in features] + [i // n_pos for i in range(n_e)] + [-1] * n_pos + [n_layers] * n_logits)
    pos = np.array(
        [f[1] for f in features] + [i % n_pos for i in range(n_e)] + list(range(n_pos)) + [n_pos - 1] * n_logits
    )
    adjacency = np.zeros((n, n), np.float32)
    for target in list(range(n_f)) + list(range(n - n_logits, n)):
        eligible = np.flatnonzero((layer < layer[target]) & (pos <= pos[target]) & (np.arange(n) < n - n_logits))
        count = min(len(eligible), fan_in if target < n_f else 3 * fan_in)
        sources = rng.choice(eligible, size=count, replace=False)
        magnitude = rng.lognormal(mean=0.0, sigma=1.2, size=count)
        sign = np.where(rng.random(count) < 0.75, 1.0, -1.0)
        adjacency[target, sources] = magnitude * sign
    adjacency = adjacency.astype(np.float16).astype(np.float32)
    probs = np.sort(rng.dirichlet(np.ones(n_logits + 1)))[::-1][:n_logits].astype(np.float32)
    return AttributionGraph.from_flat(
        adjacency,
        features=np.array(features, dtype=np.int64).reshape(-1, 3),
        activations=rng.random(n_f).astype(np.float32) + 0.5,
        logits=Targets([f"t{k}" for k in range(n_logits)], ids=list(range(500, 500 + n_logits)), probs=probs),
        prompt=" ".join(f"w{p}" for p in range(n_pos)),
        prompt_tokens=[f"w{p}" for p in range(n_pos)],
        token_ids=list(range(100, 100 + n_pos)),
        n_layers=n_layers,
        scan="fixture",
    )


def cascade_graph() -> AttributionGraph:
    """An eight-node graph whose pruning at (0.99, 0.85) drops in two rounds: feature ``f0`` (layer 1) keeps its
    input from feature ``fp`` (layer 0) but loses both its outputs to the edge threshold, so it goes in the first
    round, and ``fp``, whose only output was ``f0``, in the second.

    Example:
        >>> cascade_graph().prune(0.99, 0.85).node_ids
        ['2_13_0', 'E_5_0', '4_9_0']
    """
    adjacency = np.zeros((8, 8), np.float32)
    fp, f0, f1, _, e1, _, token, logit = range(8)
    adjacency[fp, token], adjacency[f0, fp], adjacency[f1, f0], adjacency[f1, token] = 1, 1, 1, 3
    adjacency[f1, e1], adjacency[logit, f1], adjacency[logit, token], adjacency[logit, f0] = 0.5, 1, 1, 0.1
    return AttributionGraph.from_flat(
        adjacency.astype(np.float16).astype(np.float32),
        features=[[0, 0, 11], [1, 0, 12], [2, 0, 13]],
        activations=[1.0, 1.0, 1.0],
        logits=Targets(["x"], ids=[9], probs=[0.75]),
        prompt="a",
        prompt_tokens=["a"],
        token_ids=[5],
        n_layers=3,
        scan="fixture",
    )


def _influence64(adjacency: np.ndarray, weights: np.ndarray) -> np.ndarray:
    absolute = np.abs(adjacency.astype(np.float64))
    normalised = absolute / np.maximum(absolute.sum(axis=1, keepdims=True), 1e-10)
    step, total = weights @ normalised, np.zeros(len(weights))
    while step.any():
        total += step
        step = step @ normalised
    return total, normalised


def _threshold64(scores: np.ndarray, fraction: float) -> tuple[float, float]:
    """circuit-tracer's threshold in float64, and its margin: the least relative distance between the fraction and
    the cumulative shares either side of the threshold, and between the threshold score and any different score."""
    ordered = np.sort(scores)[::-1]
    cumulative = np.cumsum(ordered) / ordered.sum()
    at = min(int(np.searchsorted(cumulative, fraction)), len(ordered) - 1)
    near = [abs(cumulative[at] - fraction)] + ([abs(cumulative[at - 1] - fraction)] if at else [])
    value = ordered[at]
    others = np.unique(scores[scores != value])
    gaps = np.abs(others - value) / max(value, others.max(initial=0))
    return value, float(min(min(near) / fraction, gaps.min(initial=1.0)))


def _prune64(graph: AttributionGraph, node_threshold: float, edge_threshold: float):
    """The pruning rule in float64 numpy (an independent recomputation): kept nodes, kept (target, source) pairs and
    the smaller of the two thresholds' margins."""
    kinds = np.asarray(graph.node_kinds)
    always = (kinds == "token") | (kinds == "logit")
    weights = np.zeros(graph.n_nodes)
    weights[kinds == "logit"] = graph.logits.probs
    influence, _ = _influence64(graph.adjacency, weights)
    node_value, node_margin = _threshold64(influence, node_threshold)
    nodes = (influence >= node_value) | always
    pruned = np.where(nodes[:, None] & nodes[None, :], graph.adjacency, 0)
    pruned_influence, normalised = _influence64(pruned, weights)
    scores = normalised * (pruned_influence + weights)[:, None]
    edge_value, edge_margin = _threshold64(scores.ravel(), edge_threshold)
    edges = scores >= edge_value
    features, inner = kinds == "feature", ~always
    while True:
        edges &= nodes[:, None] & nodes[None, :]
        keep = nodes & ~(inner & ~edges.any(0)) & ~(features & ~edges.any(1))
        if (keep == nodes).all():
            break
        nodes = keep
    edges &= graph.adjacency != 0
    return nodes, edges, min(node_margin, edge_margin)


def _pin_sets(graph: AttributionGraph, rng) -> list[list[int]]:
    kinds = np.asarray(graph.node_kinds)
    features = np.flatnonzero(kinds == "feature")
    tokens, logits, errors = (np.flatnonzero(kinds == k) for k in ("token", "logit", "error"))
    some = sorted(rng.choice(features, size=max(1, len(features) // 3), replace=False).tolist())
    return [
        [],
        some + tokens.tolist() + logits.tolist(),
        sorted(rng.choice(features, size=2, replace=False).tolist()),
        features.tolist(),
        [int(errors[0]), int(logits[0])],
        some,
    ]


def graph_fixture(name: str, graph: AttributionGraph, settings, seed: int) -> dict:
    """One graph's fixture: its nodes and edges as the view holds them (float16 bits), Python's kept nodes and edges
    for each ``(node_threshold, edge_threshold)`` (with the kept nodes' cumulative influence, ``pruning.influence``) and its scores for a
    few pin sets.

    Example:
        >>> sorted(graph_fixture("g", seeded_graph(0, 2, 3, 2, 1, 3), [(0.8, 0.98)], 0))[:3]
        ['edges', 'full_scores', 'kind']
    """
    targets, sources = np.nonzero(graph.adjacency)
    order = np.lexsort((sources, targets))
    targets, sources = targets[order], sources[order]
    edge_of = {(int(t), int(s)): e for e, (t, s) in enumerate(zip(targets, sources))}
    frame = graph.to_dataframe()
    ids = graph.node_ids
    weights = graph.adjacency[targets, sources].astype(np.float16)
    if not np.array_equal(weights.astype(np.float32), graph.adjacency[targets, sources]):
        raise ValueError(f"{name}: the weights are not float16-exact")
    prune = []
    for node_threshold, edge_threshold in settings:
        pruned = graph.prune(node_threshold, edge_threshold)
        index = {node_id: i for i, node_id in enumerate(ids)}
        kept = [index[node_id] for node_id in pruned.node_ids]
        kept_targets, kept_sources = np.nonzero(pruned.adjacency)
        kept_edges = sorted(edge_of[(kept[t], kept[s])] for t, s in zip(kept_targets.tolist(), kept_sources.tolist()))
        nodes64, edges64, margin = _prune64(graph, node_threshold, edge_threshold)
        if margin < MIN_MARGIN:
            raise ValueError(f"{name} at {node_threshold}/{edge_threshold}: margin {margin:.2e} < {MIN_MARGIN}")
        if (
            np.flatnonzero(nodes64).tolist() != sorted(kept)
            or sorted(edge_of[(int(t), int(s))] for t, s in zip(*np.nonzero(edges64))) != kept_edges
        ):
            raise ValueError(f"{name} at {node_threshold}/{edge_threshold}: float64 pruning differs from Python's")
        prune.append(
            {
                "node_threshold": node_threshold,
                "edge_threshold": edge_threshold,
                "nodes": sorted(kept),
                "edges": kept_edges,
                "cumulative": [float(x) for x in pruned.pruning.influence],
                "margin": float(f"{margin:.3g}"),
            }
        )
    scores = []
    for pinned in _pin_sets(graph, np.random.default_rng(seed)):
        result = graph.scores(pinned=[ids[i] for i in pinned])
        scores.append({"pinned": pinned, "replacement": result.replacement, "completeness": result.completeness})
    full = graph.scores()
    kinds = [KIND_CODES[k] for k in graph.node_kinds]
    return {
        "name": name,
        "seed": seed,
        "node_ids": ids,
        "kind": kinds,
        "layer": frame["layer"].tolist(),
        "position": frame["pos"].tolist(),
        "logit_probs": [float(p) if k == 3 else 0.0 for k, p in zip(kinds, frame["probability"].fillna(0))],
        "edges": {
            "src": sources.tolist(),
            "dst": targets.tolist(),
            "weight_f16": weights.view(np.uint16).tolist(),
        },
        "prune": prune,
        "scores": scores,
        "full_scores": {"replacement": full.replacement, "completeness": full.completeness},
    }


def build() -> dict:
    """Every fixture: the seeded graphs of :data:`GRAPHS`, the medium one pruned (a graph whose error nodes are
    only some of the (layer, position) cells, as in a graph JSON) and :func:`cascade_graph`.

    Example:
        >>> [g["name"] for g in build()["graphs"]]
        ['small', 'medium', 'medium_pruned', 'cascade']
    """
    graphs = []
    for name, seed, n_layers, n_pos, max_features, n_logits, fan_in, settings in GRAPHS:
        graph = seeded_graph(seed, n_layers, n_pos, max_features, n_logits, fan_in)
        graphs.append(graph_fixture(name, graph, settings, seed))
        if name == "medium":
            pruned = graph.prune(0.9, 0.99).replace(pruning=None)
            graphs.append(graph_fixture("medium_pruned", pruned, [(0.7, 0.98), (0.5, 0.95)], seed + 1))
    graphs.append(graph_fixture("cascade", cascade_graph(), [(0.99, 0.85), (0.99, 0.9)], 5))
    return {
        "format": "circuit_math_fixtures",
        "version": 1,
        "generator": "scripts/circuit_fixtures.py",
        "kinds": KIND_CODES,
        "graphs": graphs,
    }


def render() -> str:
    """The fixture file's text.

    Example:
        >>> render().startswith('{"format": "circuit_math_fixtures"')
        True
    """
    return json.dumps(build(), separators=(", ", ": ")) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            sys.exit(f"{TARGET} is out of date; run python scripts/circuit_fixtures.py")
    else:
        TARGET.write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {TARGET} ({len(text) // 1024} KiB)")
