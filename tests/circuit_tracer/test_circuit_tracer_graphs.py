"""interp_widgets' pruning, scores and graph JSON against circuit-tracer 0.5.0's own, on graphs it wrote.

circuit-tracer's ``prune_graph``, ``compute_graph_scores`` and ``create_graph_files`` ran in its own venv
(``generate.py``); here ``AttributionGraph`` reads the same graphs and must keep the same nodes and edges, with the
same influence, and give the same scores to 1e-6.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from interp_widgets.circuits import AttributionGraph, load_graph
from tests.circuit_tracer.conftest import COLLIDING, N_CASES, TOPK_CASE, read_case
from tests.circuits.test_graph_json import NEURONPEDIA_SCHEMA

CASES = [*range(N_CASES), TOPK_CASE]


def ours(ct_files, i):
    graph, arrays, meta, graph_json = read_case(ct_files, i)
    return AttributionGraph.from_circuit_tracer(graph, prompt_tokens=meta["prompt_tokens"]), arrays, meta, graph_json


def legacy_id(node: dict) -> str:
    """circuit-tracer 0.5.0 writes error ids as 0_{layer}_{pos}; interp_widgets as {layer}_-1_{pos}."""
    if node["feature_type"] == "mlp reconstruction error":
        return f"{node['layer']}_-1_{node['ctx_idx']}"
    return node["node_id"]


@pytest.mark.parametrize("i", CASES)
def test_scores_equal_compute_graph_scores(ct_files, i):
    graph, arrays, _, _ = ours(ct_files, i)
    scores = graph.scores()
    np.testing.assert_allclose([scores.replacement, scores.completeness], arrays["scores"], rtol=0, atol=1e-6)
    assert 0 < scores.replacement < 1 and 0 < scores.completeness < 1  # a graph with error influence: not trivial
    n_dropped = len(arrays["active_features"]) - len(arrays["selected_features"])
    assert scores.n_dropped_features == n_dropped and scores.lost_influence is None


@pytest.mark.parametrize("i", CASES)
def test_prune_keeps_what_circuit_tracer_keeps(ct_files, i):
    graph, arrays, meta, graph_json = ours(ct_files, i)
    pruned = graph.prune(meta["node_threshold"], meta["edge_threshold"])
    assert pruned.node_ids == [legacy_id(node) for node in graph_json["nodes"]]
    index = {legacy_id(node): k for k, node in enumerate(graph_json["nodes"])}
    theirs = {}
    for link in graph_json["links"]:
        # circuit-tracer's links name nodes by their 0.5.0 ids; these cases have no layer-0 feature below n_layers
        by_id = {node["node_id"]: legacy_id(node) for node in graph_json["nodes"]}
        theirs[(index[by_id[link["target"]]], index[by_id[link["source"]]])] = link["weight"]
    rows, cols = np.nonzero(pruned.adjacency)
    mine = {(int(r), int(c)): float(pruned.adjacency[r, c]) for r, c in zip(rows, cols)}
    assert mine == theirs
    assert len(mine) < np.count_nonzero(graph.adjacency)  # pruning dropped edges
    influence = [node["influence"] for node in graph_json["nodes"]]
    n_logits = len(pruned.logits)  # circuit-tracer writes no influence for logit nodes
    assert pruned.pruning.influence.tolist()[:-n_logits] == influence[:-n_logits]
    assert influence[-n_logits:] == [None] * n_logits
    # the masks themselves, before create_graph_files drops the unconnected nodes
    kept = np.isin(graph.node_ids, pruned.node_ids)
    assert not (kept & ~arrays["node_mask"]).any()


@pytest.mark.parametrize("i", CASES)
def test_to_json_writes_what_create_graph_files_writes(ct_files, i, tmp_path):
    graph, _, meta, graph_json = ours(ct_files, i)
    path = graph.to_json(
        tmp_path,
        slug=meta["slug"],
        node_threshold=meta["node_threshold"],
        edge_threshold=meta["edge_threshold"],
        error_ids="legacy",
    )
    mine = json.loads(path.read_text())
    jsonschema.validate(graph_json, NEURONPEDIA_SCHEMA)  # the restated schema accepts circuit-tracer's own file
    jsonschema.validate(mine, NEURONPEDIA_SCHEMA)
    assert mine["nodes"] == graph_json["nodes"]
    assert mine["links"] == graph_json["links"]
    assert mine["qParams"] == graph_json["qParams"]
    assert {k: mine["metadata"][k] for k in graph_json["metadata"]} == graph_json["metadata"]
    index = json.loads((tmp_path / "graph-metadata.json").read_text())
    theirs = json.loads((ct_files / f"case{i}" / "graph-metadata.json").read_text())
    assert [{k: g[k] for k in theirs["graphs"][0]} for g in index["graphs"]] == theirs["graphs"]


@pytest.mark.parametrize("i", CASES)
def test_load_graph_reads_circuit_tracer_json(ct_files, i):
    graph, _, meta, _ = ours(ct_files, i)
    pruned = graph.prune(meta["node_threshold"], meta["edge_threshold"])
    loaded = load_graph(ct_files / f"case{i}" / f"case{i}.json")
    assert loaded.node_ids == pruned.node_ids
    for name in ("adjacency", "features", "activations", "errors", "token_ids"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(pruned, name))
    assert loaded.logits.labels == pruned.logits.labels and loaded.logits.ids.tolist() == pruned.logits.ids.tolist()
    np.testing.assert_array_equal(loaded.logits.probs, pruned.logits.probs)
    n_logits = len(pruned.logits)
    np.testing.assert_array_equal(loaded.pruning.influence[:-n_logits], pruned.pruning.influence[:-n_logits])
    assert loaded.prompt_tokens == meta["prompt_tokens"] and loaded.prompt == meta["input_string"]
    assert loaded.n_layers == meta["n_layers"] and loaded.scan == meta["scan"]
    np.testing.assert_allclose(
        [loaded.scores().replacement, loaded.scores().completeness],
        [pruned.scores().replacement, pruned.scores().completeness],
        atol=1e-7,
    )


def test_attributed_graphs_are_real(ct_files):
    """Cases 8 and 9 come from circuit-tracer's attribute() (nnsight backend) on a tiny Llama and transcoders."""
    full, arrays, meta, _ = ours(ct_files, 8)
    capped, capped_arrays, _, _ = ours(ct_files, 9)
    assert meta["versions"]["circuit-tracer"] == "0.5.0" and meta["versions"]["transformers"] == "4.57.3"
    assert (
        full.prompt_tokens[0] in ("<s>", "<unk>") and full.n_layers == 2
    )  # ensure_tokenized prepends one and len(full.features) > 100
    assert full.cap is None and capped.cap.n_active == len(full.features) and len(capped.features) == 40
    assert capped.scores().n_dropped_features == len(full.features) - 40
    assert np.count_nonzero(full.adjacency[: len(full.features)]) > 0  # feature rows were attributed


def node_key(node: dict) -> tuple:
    """A node by its fields, never by its id alone (circuit-tracer issue #78)."""
    kind = node["feature_type"]
    index = int(node["node_id"].split("_")[1]) if kind == "cross layer transcoder" else node["feature"]
    return kind, str(node["layer"]), node["ctx_idx"], index


def test_colliding_ids_from_circuit_tracer(ct_files, tmp_path):
    """Case 10: circuit-tracer 0.5.0 writes error (1, p) and feature 1 of layer 0 at p both as 0_1_{p}."""
    graph, arrays, meta, graph_json = ours(ct_files, COLLIDING)
    ids = [node["node_id"] for node in graph_json["nodes"]]
    assert len(set(ids)) < len(ids)
    with pytest.raises(ValueError, match="node ids collide"):
        load_graph(ct_files / f"case{COLLIDING}" / f"case{COLLIDING}.json")
    np.testing.assert_allclose([graph.scores().replacement, graph.scores().completeness], arrays["scores"], atol=1e-6)
    with pytest.raises(ValueError, match="would equal a layer-0 feature's id"):
        graph.to_json(
            tmp_path, node_threshold=meta["node_threshold"], edge_threshold=meta["edge_threshold"], error_ids="legacy"
        )
    path = graph.to_json(tmp_path, node_threshold=meta["node_threshold"], edge_threshold=meta["edge_threshold"])
    mine = json.loads(path.read_text())
    assert [node_key(n) for n in mine["nodes"]] == [node_key(n) for n in graph_json["nodes"]]
    loaded = load_graph(path)
    assert loaded.node_ids == graph.prune(meta["node_threshold"], meta["edge_threshold"]).node_ids


@pytest.mark.parametrize("i", CASES)
def test_the_circuit_view_opens_circuit_tracers_json(ct_files, i):
    from interp_widgets.circuits import circuit_view

    path = ct_files / f"case{i}" / f"case{i}.json"
    loaded = load_graph(path)
    view = circuit_view(path)
    assert view._ids == loaded.node_ids  # circuit-tracer 0.5.0's error ids 0_{l}_{p} read as {l}_-1_{p}
    dst, src = np.nonzero(loaded.adjacency)
    assert view.edge_src.tolist() == src.tolist() and view.edge_dst.tolist() == dst.tolist()
    assert view.logit_tokens == loaded.logits.labels and view.tokens == loaded.prompt_tokens
    payload = view.mime_payload()
    assert "omitted" not in payload and payload["data"]["graph_info"]["pruned"] is True
    assert view.static_svg().startswith("<svg")
