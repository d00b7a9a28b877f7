"""A seeded attribution graph for the circuit view's benchmark (and tests that need a big graph): 30 layers x 24
positions, 5,000 nodes (24 tokens, 10 logits, every layer x position error node, the rest features), 50,000 edges
from lower to higher layers at the same or a later position (acyclic, as a real graph), and a 40-character label
per feature.

Example:
    >>> graph, labels = circuit_graph(n_nodes=200, n_edges=1000, n_layers=4, n_pos=6)
    >>> graph.n_nodes, int((graph.adjacency != 0).sum()), len(next(iter(labels.values())))
    (200, 1000, 40)
"""

from __future__ import annotations

import numpy as np

from interp_widgets.circuits import AttributionGraph
from interp_widgets.targets import Targets

LABEL_WORDS = ["plural", "noun", "city", "capital", "Texas", "say", "Austin", "quote", "number", "verb", "past",
               "tense", "French", "rhyme", "end", "line", "<img src=x onerror=alert(1)>", "code", "dash", "name"]  # fmt: skip


def _label(rng: np.random.Generator) -> str:
    words = []
    while len(" ".join(words)) < 40:
        words.append(str(rng.choice(LABEL_WORDS)))
    return " ".join(words)[:40]


def circuit_graph(
    n_nodes: int = 5000,
    n_edges: int = 50000,
    n_layers: int = 30,
    n_pos: int = 24,
    n_logits: int = 10,
    seed: int = 0,
) -> tuple[AttributionGraph, dict[str, str]]:
    """The graph and ``{node id: label}`` of its features (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    n_errors = n_layers * n_pos
    n_features = n_nodes - n_errors - n_pos - n_logits
    if n_features < 1:
        raise ValueError("n_nodes is too small for the errors, tokens and logits")
    layer = rng.integers(0, n_layers, n_features)
    pos = rng.integers(0, n_pos, n_features)
    index = rng.choice(16384, n_features, replace=True)
    features = np.unique(np.stack([layer, pos, index], axis=1), axis=0)
    while len(features) < n_features:  # repeats removed: draw more
        extra = np.stack([rng.integers(0, n_layers, 64), rng.integers(0, n_pos, 64), rng.choice(16384, 64)], axis=1)
        features = np.unique(np.concatenate([features, extra]), axis=0)
    features = features[:n_features]
    e_layer, e_pos = np.divmod(np.arange(n_errors), n_pos)
    # every node's (layer rank, position): tokens below layer 0, logits above the last layer, at the last position
    node_layer = np.concatenate([features[:, 0], e_layer, np.full(n_pos, -1), np.full(n_logits, n_layers)])
    node_pos = np.concatenate([features[:, 1], e_pos, np.arange(n_pos), np.full(n_logits, n_pos - 1)])
    n = len(node_layer)
    adjacency = np.zeros((n, n), np.float32)
    targets_allowed = np.flatnonzero(np.concatenate([np.ones(n_features, bool), np.zeros(n_errors + n_pos, bool),
                                                     np.ones(n_logits, bool)]))  # fmt: skip
    made = 0
    while made < n_edges:
        need = n_edges - made
        dst = rng.choice(targets_allowed, 2 * need)
        src = rng.integers(0, n, 2 * need)
        ok = (node_layer[src] < node_layer[dst]) & (node_pos[src] <= node_pos[dst]) & (adjacency[dst, src] == 0)
        dst, src = dst[ok], src[ok]
        pairs = np.unique(np.stack([dst, src], axis=1), axis=0)[:need]
        rng.shuffle(pairs)
        adjacency[pairs[:, 0], pairs[:, 1]] = rng.standard_normal(len(pairs)) * rng.exponential(1.0, len(pairs))
        made = int((adjacency != 0).sum())
    probs = np.sort(rng.dirichlet(np.ones(n_logits)))[::-1].astype(np.float32)
    token_ids = rng.integers(100, 30000, n_pos)
    graph = AttributionGraph.from_flat(
        adjacency,
        features=features,
        activations=rng.exponential(2.0, n_features).astype(np.float32),
        logits=Targets([f"tok{i}" if i else 'say "Austin"' for i in range(n_logits)],
                       ids=np.arange(n_logits) + 40000, probs=probs),
        prompt="",
        prompt_tokens=[f" w{p}" if p else "<bos>" for p in range(n_pos)],
        token_ids=token_ids,
        n_layers=n_layers,
        scan="bench",
    )  # fmt: skip
    ids = graph.node_ids
    labels = {ids[k]: _label(rng) for k in range(n_features)}
    return graph, labels
