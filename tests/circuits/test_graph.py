"""AttributionGraph: node order and ids, pruning and scores checked against independent computations, files, bad
input. (tests/circuit_tracer compares the same against circuit-tracer 0.5.0 itself.)"""

from __future__ import annotations

import numpy as np
import pytest

from interp_widgets.circuits import AttributionGraph, FeatureCap, example_graph
from interp_widgets.targets import Targets


def random_graph(seed: int, n_layers: int = 3, n_pos: int = 4, legacy_collision: bool = False) -> AttributionGraph:
    """A random acyclic graph in circuit-tracer's layout (features read earlier layers at earlier positions)."""
    rng = np.random.default_rng(seed)
    features = [
        (layer, pos, int(f))
        for layer in range(n_layers)
        for pos in range(n_pos)
        for f in sorted(rng.choice(np.arange(n_layers, 50), size=rng.integers(0, 4), replace=False))
    ]
    if legacy_collision:  # feature 1 of layer 0 at position 2: circuit-tracer 0.5.0 gives error (1, 2) its id
        features = sorted({*features, (0, 2, 1)})
    n_f, n_e = len(features), n_layers * n_pos
    n = n_f + n_e + n_pos + 2
    A = np.zeros((n, n), np.float32)
    for t, (layer, pos, _) in enumerate(features):
        for s, (sl, sp, _) in enumerate(features):
            if sl < layer and sp <= pos and rng.random() < 0.5:
                A[t, s] = rng.normal()
        for el in range(layer):
            for ep in range(pos + 1):
                if rng.random() < 0.4:
                    A[t, n_f + el * n_pos + ep] = rng.normal()
        for tp in range(pos + 1):
            if rng.random() < 0.6:
                A[t, n_f + n_e + tp] = rng.normal() * 2
    A[n - 2 :, : n - 2] = rng.normal(size=(2, n - 2)) * (rng.random((2, n - 2)) < 0.6)
    return AttributionGraph.from_flat(
        A,
        features=features,
        activations=rng.random(n_f) + 0.1,
        logits=Targets(["x", "y<"], ids=[5, 9], probs=[0.6, 0.3]),
        prompt="p",
        prompt_tokens=[f"<t{i}>" for i in range(n_pos)],
        token_ids=np.arange(n_pos) + 20,
        n_layers=n_layers,
        scan="random",
    )


def test_node_order_and_ids():
    graph = random_graph(0)
    n_f = len(graph.features)
    kinds = graph.node_kinds
    assert kinds == ["feature"] * n_f + ["error"] * 12 + ["token"] * 4 + ["logit"] * 2
    ids = graph.node_ids
    layer, pos, f = graph.features[0].tolist()
    assert ids[0] == f"{layer}_{f}_{pos}"
    assert ids[n_f : n_f + 2] == ["0_-1_0", "0_-1_1"] and ids[n_f + 4] == "1_-1_0"  # error index: layer * n_pos + pos
    assert ids[-6:] == ["E_20_0", "E_21_1", "E_22_2", "E_23_3", "4_5_3", "4_9_3"]
    assert graph.features.dtype == np.int64
    frame = graph.to_dataframe()
    assert frame.node_id.tolist() == ids and frame.kind.tolist() == kinds
    assert frame.probability.iloc[-2:].tolist() == [0.6, 0.3] and frame.token.iloc[-2:].tolist() == ["x", "y<"]


def test_feature_ids_are_int64():
    graph = AttributionGraph.from_flat(
        np.zeros((4, 4), np.float32),
        features=[[29, 0, 73727]],
        activations=[1.0],
        logits=Targets(["a"], ids=[3], probs=[1.0]),
        prompt="a",
        prompt_tokens=["a"],
        token_ids=[1],
        n_layers=30,
        errors=[[29, 0]],
    )
    assert graph.features.dtype == np.int64 and graph.node_ids[0] == "29_73727_0"


def test_influence_is_the_neumann_series():
    graph = random_graph(1)
    import torch

    from interp_widgets.circuits.graph import _influence, _row_normalised

    A = np.abs(graph.adjacency.astype(np.float64))
    norm = A / np.maximum(A.sum(1, keepdims=True), 1e-10)
    w = np.zeros(graph.n_nodes)
    w[-2:] = [0.6, 0.3]
    expected = w @ (np.linalg.inv(np.eye(graph.n_nodes) - norm) - np.eye(graph.n_nodes))
    ours = _influence(_row_normalised(torch.as_tensor(graph.adjacency)), torch.tensor(w, dtype=torch.float32))
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-4, atol=1e-6)


def brute_scores(A: np.ndarray, kinds: list[str], probs: np.ndarray) -> tuple[float, float]:
    """The two scores straight from their definitions, with a matrix inverse (float64)."""
    A = np.abs(A.astype(np.float64))
    norm = A / np.maximum(A.sum(1, keepdims=True), 1e-10)
    w = np.zeros(len(A))
    w[np.asarray(kinds) == "logit"] = probs
    influence = w @ (np.linalg.inv(np.eye(len(A)) - norm) - np.eye(len(A)))
    kinds = np.asarray(kinds)
    tok, err = influence[kinds == "token"].sum(), influence[kinds == "error"].sum()
    complete = 1 - norm[:, kinds == "error"].sum(1)
    return tok / (tok + err), (complete * (influence + w)).sum() / (influence + w).sum()


@pytest.mark.parametrize("seed", range(4))
def test_scores_match_their_definitions(seed):
    graph = random_graph(seed)
    scores = graph.scores()
    expected = brute_scores(graph.adjacency, graph.node_kinds, graph.logits.probs)
    np.testing.assert_allclose([scores.replacement, scores.completeness], expected, rtol=1e-5)
    assert 0 < scores.replacement < 1


def neuronpedia_pinned_scores(graph: AttributionGraph, pinned: list[str]) -> tuple[float, float]:
    """score.worker.ts's steps, one feature at a time, on lists (an independent reading of the same rules)."""
    A = graph.adjacency.astype(np.float64).tolist()
    ids, kinds = graph.node_ids, graph.node_kinds
    where = {}
    for k, kind in enumerate(kinds):
        if kind == "error":
            where[tuple(graph.errors[k - len(graph.features)])] = k
    for k, kind in enumerate(kinds):
        if kind != "feature" or ids[k] in pinned:
            continue
        e = where.get(tuple(graph.features[k][:2]))
        if e is not None:
            for r in range(len(A)):
                A[r][e] += A[r][k]
        for c in range(len(A)):
            A[k][c] = 0.0
        for r in range(len(A)):
            A[r][k] = 0.0
    return brute_scores(np.array(A), kinds, graph.logits.probs)


@pytest.mark.parametrize("seed", range(3))
def test_pinned_scores_follow_neuronpedia(seed):
    graph = random_graph(seed).prune(0.9, 0.99)
    features = [i for i, kind in zip(graph.node_ids, graph.node_kinds) if kind == "feature"]
    pinned = features[::2] + ["E_20_0"]
    scores = graph.scores(pinned=pinned)
    np.testing.assert_allclose(
        [scores.replacement, scores.completeness], neuronpedia_pinned_scores(graph, pinned), rtol=1e-9
    )
    full = graph.scores(pinned=features)  # every feature pinned: the graph itself
    np.testing.assert_allclose(
        [full.replacement, full.completeness],
        list(brute_scores(graph.adjacency, graph.node_kinds, graph.logits.probs)),
        rtol=1e-9,
    )
    assert scores.replacement < full.replacement  # unpinned features count as error


def test_prune_invariants():
    graph = random_graph(3)
    pruned = graph.prune()
    assert pruned.pruning.node_threshold == 0.8 and pruned.pruning.edge_threshold == 0.98
    assert len(pruned.features) < len(graph.features) and np.count_nonzero(pruned.adjacency) < np.count_nonzero(
        graph.adjacency
    )
    kinds = np.asarray(pruned.node_kinds)
    A = pruned.adjacency != 0
    assert (A[:, kinds == "feature"].any(0) & A[kinds == "feature"].any(1)).all()  # in and out edges
    assert A[:, kinds == "error"].any(0).all()
    assert (kinds == "token").sum() == 4 and (kinds == "logit").sum() == 2
    rows = [graph.node_ids.index(i) for i in pruned.node_ids]  # kept edges keep their weights
    kept = pruned.adjacency != 0
    np.testing.assert_array_equal(pruned.adjacency[kept], graph.adjacency[np.ix_(rows, rows)][kept])
    loose = graph.prune(0.99, 0.999)
    assert len(loose.features) >= len(pruned.features)


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, float("nan")])
def test_thresholds_outside_0_1(bad):
    with pytest.raises(ValueError, match=r"node_threshold must be a number in \(0, 1\]"):
        example_graph().prune(node_threshold=bad)
    with pytest.raises(ValueError, match=r"edge_threshold must be a number in \(0, 1\]"):
        example_graph().prune(edge_threshold=bad)


def test_threshold_one_keeps_every_influential_node():
    pruned = random_graph(2).prune(1.0, 1.0)
    assert pruned.pruning.node_threshold == 1.0


def test_unknown_pinned_id():
    with pytest.raises(ValueError, match=r"pinned id '9_9_9' is not a node of this graph"):
        example_graph().scores(pinned=["9_9_9"])
    with pytest.raises(TypeError, match="list of node ids"):
        example_graph().scores(pinned="0_7_1")


def test_legacy_error_ids():
    graph = random_graph(4, legacy_collision=True)
    n_f = len(graph.features)
    assert graph.node_index("1_-1_2") == n_f + 1 * 4 + 2
    assert graph.node_index("0_2_3") == n_f + 2 * 4 + 3  # the old form, where it names no feature
    with pytest.raises(ValueError, match="names both a feature of layer 0 and an error node"):
        graph.node_index("0_1_2")


def test_colliding_node_ids():
    with pytest.raises(ValueError, match="colliding node ids"):
        AttributionGraph.from_flat(
            np.zeros((5, 5), np.float32),
            features=np.zeros((0, 3)),
            activations=[],
            logits=Targets(["a", "a"], ids=[3, 3], probs=[0.5, 0.4]),
            prompt="a",
            prompt_tokens=["a"],
            token_ids=[1],
            n_layers=2,
        )


def test_unsorted_features_and_bad_shapes():
    kw = dict(logits=Targets(["a"], ids=[3], probs=[1.0]), prompt="ab", prompt_tokens=["a", "b"], token_ids=[1, 2])
    with pytest.raises(ValueError, match=r"sorted by \(layer, pos, feature\)"):
        AttributionGraph.from_flat(
            np.zeros((7, 7)), features=[[0, 1, 5], [0, 0, 5]], activations=[1, 1], n_layers=1, **kw
        )
    with pytest.raises(ValueError, match=r"adjacency must be \(6, 6\)"):
        AttributionGraph.from_flat(np.zeros((5, 5)), features=[[0, 1, 5]], activations=[1], n_layers=1, **kw)
    with pytest.raises(ValueError, match="layer outside 0..0"):
        AttributionGraph.from_flat(np.zeros((6, 6)), features=[[1, 1, 5]], activations=[1], n_layers=1, **kw)


def test_save_load_round_trip(tmp_path):
    graph = random_graph(5)
    graph = graph.replace(cap=FeatureCap(99, 0.125), view={"pinnedIds": ["E_20_0"]})
    for g in (graph, graph.prune()):
        again = AttributionGraph.load(g.save(tmp_path / "g.safetensors"))
        for name in ("adjacency", "features", "activations", "errors", "token_ids"):
            np.testing.assert_array_equal(getattr(again, name), getattr(g, name))
        assert again.node_ids == g.node_ids and again.prompt_tokens == g.prompt_tokens
        assert again.logits.labels == g.logits.labels and again.logits.probs.tolist() == g.logits.probs.tolist()
        assert again.cap == g.cap and again.view == g.view and again.scan == g.scan
        assert again.scores() == g.scores()
    assert again.pruning.influence.tolist() == graph.prune().pruning.influence.tolist()
    assert graph.scores().n_dropped_features == 99 - len(graph.features)
    assert graph.scores().lost_influence == 0.125


def test_unknown_schema_version(tmp_path):
    import json

    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open

    path = example_graph().save(tmp_path / "g.safetensors")
    with safe_open(str(path), framework="numpy") as handle:
        meta = json.loads(handle.metadata()["interp_widgets"])
    save_file(load_file(str(path)), str(path), metadata={"interp_widgets": json.dumps({**meta, "version": 7})})
    with pytest.raises(ValueError, match="schema version 7, which this interp_widgets does not know"):
        AttributionGraph.load(path)


def test_html_escapes_token_text():
    graph = random_graph(6)
    graph = graph.replace(prompt_tokens=["<script>", "&", "b", "c"])
    page = graph._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page and "&amp;" in page
    assert "y&lt;" in page and "AttributionGraph" in page
    A = np.abs(graph.adjacency.astype(np.float64))
    norm = A / np.maximum(A.sum(1, keepdims=True), 1e-10)
    w = np.zeros(graph.n_nodes)
    w[-2:] = graph.logits.probs
    influence = w @ (np.linalg.inv(np.eye(graph.n_nodes) - norm) - np.eye(graph.n_nodes))
    strongest = graph.node_ids[int(np.argmax(influence[: len(graph.features)]))]
    assert page.count("<tr>") == 1 + 2 + 1 + min(8, len(graph.features))  # headers, logits, the top features
    assert f"<td>{strongest}</td>" in page.split("logit influence")[1].split("</tr>")[1]  # the first feature row


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_total_effects_are_every_path_summed(seed):
    graph = random_graph(seed)
    A, n_f, n = graph.adjacency.astype(np.float64), len(graph.features), graph.n_nodes
    act = graph.activations.astype(np.float64)
    # every path s -> f1 -> ... -> fk -> logit: A[f1, s] × Π (A[f_{i+1}, f_i] / a_{f_i}) × A[logit, fk] / a_fk
    step = A[:n_f, :n_f] / act[None]
    expected, reach = A[n - 2 :].copy(), A[:n_f].copy()  # reach: paths ending at a feature's pre-activation
    for _ in range(n_f):
        expected += (A[n - 2 :, :n_f] / act[None]) @ reach
        reach = step @ reach
    assert not reach.any()  # no path longer than the number of features: the graph has no cycles
    np.testing.assert_allclose(graph.total_effects(), expected, rtol=1e-9, atol=1e-12)
    assert np.abs(graph.total_effects() - A[n - 2 :]).max() > 0.1  # the indirect paths count
