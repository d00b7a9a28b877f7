"""The circuit view's data and Python side: compact nodes and edges that equal the graph's, the size cap, escaping
(static SVG and export), the mime payload, the view state's round trip, subgraph(), the details on request and the
intervention messages, and the graph JSON files it opens (both error-id forms, lorsa nodes, a quoted logit)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from interp_widgets.circuits import AttributionGraph, circuit_view, example_graph, load_graph
from interp_widgets.targets import Targets
from interp_widgets.widgets import CircuitView, set_output_cap
from interp_widgets.widgets._mime import MIME_TYPE, compact_json
from interp_widgets.widgets.view_data import CircuitData
from tests.circuits.test_graph import random_graph

HOSTILE = "<img src=x onerror=alert(1)>"
ROOT = Path(__file__).resolve().parents[2]


def test_nodes_and_edges_equal_the_graph():
    graph = random_graph(0)
    view = graph.widget()
    assert view.node_kind.tolist() == [("feature", "error", "token", "logit").index(k) for k in graph.node_kinds]
    frame = graph.to_dataframe()
    assert view.node_layer.tolist() == frame.layer.tolist() and view.node_pos.tolist() == frame.pos.tolist()
    assert view._ids == graph.node_ids  # ids made from the arrays, as the JS makes them
    dst, src = np.nonzero(graph.adjacency)
    assert view.edge_src.tolist() == src.tolist() and view.edge_dst.tolist() == dst.tolist()
    assert view.edge_src.dtype.itemsize <= 2  # narrow indices for a small graph
    weights = np.frombuffer(bytes(view.edge_weights), "<f2")
    np.testing.assert_array_equal(weights, graph.adjacency[dst, src].astype(np.float16))
    activation = np.asarray(view.node_activation)
    np.testing.assert_allclose(activation[: len(graph.features)], graph.activations)
    assert np.isnan(activation[len(graph.features) :]).all()
    assert view.logit_tokens == ["x", "y<"] and view.logit_probs == pytest.approx([0.6, 0.3])
    scores = graph.scores()
    assert view.graph_info["replacement"] == pytest.approx(scores.replacement)
    assert view.graph_info["scores_of"] == "the unpruned graph in Python"


def test_node_influence_is_circuit_tracers_plus_the_logit_weights():
    graph = random_graph(1)
    # an independent reference: the Neumann series of the row-normalised |A| summed densely in float64
    A = np.abs(graph.adjacency.astype(np.float64))
    normalised = A / np.maximum(A.sum(1, keepdims=True), 1e-10)
    w = np.zeros(graph.n_nodes)
    w[-2:] = graph.logits.probs
    reference = w @ np.linalg.inv(np.eye(graph.n_nodes) - normalised)  # w (I + Â + Â² + ...)
    np.testing.assert_allclose(graph.widget().node_influence, reference, rtol=1e-4, atol=1e-6)


def test_details_travel_for_pinned_and_top_features_only(monkeypatch):
    import interp_widgets.circuits._view as view_module

    graph = random_graph(0)
    influence = graph._node_influence()[: len(graph.features)]
    weakest = graph.node_ids[int(np.argmin(influence))]
    monkeypatch.setattr(view_module, "DETAIL_TOP", 3)
    view = graph.widget(pinned=[weakest])
    top = {graph.node_ids[i] for i in np.argsort(-influence, kind="stable")[:3]}
    assert set(view.details) == top | {weakest}
    other = next(i for i in graph.node_ids[: len(graph.features)] if i not in view.details)
    answer = view.reply({"type": "detail", "id": 7, "node": other})  # the others come from the kernel
    assert answer["id"] == 7 and answer["detail"]["contexts"][0]["tokens"] == graph.prompt_tokens
    assert view.reply({"type": "detail", "node": "E_20_0"})["detail"] is None  # tokens have no feature details


def test_feature_details_from_detail_files(tmp_path):
    graph = random_graph(0).replace(scan="s")
    graph.to_json(tmp_path)
    layer, pos, feature = graph.features[0].tolist()
    from interp_widgets.circuits import cantor_pair

    path = tmp_path / "features" / "s" / f"{cantor_pair(layer, feature)}.json"
    detail = json.loads(path.read_text())
    detail["examples_quantiles"] = [{"quantile_name": "top", "examples": [
        {"tokens": [f"t{i}" for i in range(40)], "tokens_acts_list": [0.0] * 30 + [5.0] + [0.0] * 9}]}]  # fmt: skip
    detail["top_logits"], detail["bottom_logits"] = [HOSTILE] + [f"v{i}" for i in range(12)], ["-a"]
    path.write_text(json.dumps(detail))
    view = graph.widget(features=tmp_path, labels={graph.node_ids[0]: "forty"}, pinned=[graph.node_ids[0]])
    shown = view.details[graph.node_ids[0]]
    assert shown["label"] == "forty" and shown["source"] == path.name
    assert shown["contexts"][0]["tokens"] == [f"t{i}" for i in range(18, 40)]  # 12 tokens either side of the peak
    assert shown["contexts"][0]["acts"][12] == 5.0
    assert shown["top_logits"] == [HOSTILE] + [f"v{i}" for i in range(7)] and shown["bottom_logits"] == ["-a"]


def test_the_benchmark_graph_fits_the_cap_and_a_bigger_one_is_refused():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _circuit_graph import circuit_graph

    graph, labels = circuit_graph()
    assert graph.n_nodes == 5000 and int(np.count_nonzero(graph.adjacency)) == 50000
    view = graph.widget(labels=labels)
    payload = view.mime_payload()
    assert "omitted" not in payload and len(compact_json(payload).encode()) <= 1024 * 1024
    assert len(view.details) == 300 and len(view.node_labels[0]) == 40
    previous = set_output_cap(200_000)
    try:
        with pytest.raises(ValueError, match=r"over the output cap of 200,000 bytes .* prune it first"):
            graph.widget(labels=labels)
    finally:
        set_output_cap(previous)


def test_hostile_text_stays_escaped_in_the_picture_and_the_export(tmp_path):
    graph = example_graph().replace(prompt_tokens=[HOSTILE, "b"], logits=Targets([HOSTILE], ids=[12], probs=[0.9]))
    view = graph.widget(labels={"0_7_1": HOSTILE}, pinned=["0_7_1"])
    svg = view.static_svg()
    assert HOSTILE not in svg and "&lt;img src=x onerror=alert(1)&gt;" in svg
    page = view.to_html()
    assert HOSTILE not in page  # the data travel as escaped JSON; the view writes text only through textContent
    data, _ = view._repr_mimebundle_()
    assert HOSTILE not in data["image/svg+xml"]
    assert data[MIME_TYPE]["data"]["node_labels"][0] == HOSTILE  # kept as data, never as markup


def test_mime_payload_round_trips_the_view_state():
    graph = random_graph(3)
    view = graph.widget()
    features = graph.node_ids[:3]
    view.pin(*features)
    view.group("say y", features[:2])
    view.node_threshold, view.edge_threshold, view.selected = 0.7, 0.9, features[2]
    payload = json.loads(json.dumps(view.mime_payload()))
    assert payload["view"] == "circuit" and payload["widget"] == "CircuitView"
    state = payload["state"]
    assert state["pinned"] == features and state["groups"] == [{"name": "say y", "members": features[:2]}]
    again = CircuitView(CircuitData.from_json(payload), **{k: state[k] for k in ("pinned", "groups", "node_threshold",
                                                                                "edge_threshold", "selected")})  # fmt: skip
    assert again.subgraph() == view.subgraph() and again.selected == features[2] and again.node_threshold == 0.7
    np.testing.assert_array_equal(again.edge_src, view.edge_src)
    assert bytes(again.edge_weights) == bytes(view.edge_weights)
    # with no graph behind it, the view says so instead of answering
    assert "no graph in the kernel" in again.reply({"type": "detail", "node": features[0]})["error"]


def test_subgraph_reads_the_view_state(tmp_path):
    graph = random_graph(2).prune(1.0, 1.0)  # pruned: to_json writes it as it is
    with pytest.raises(ValueError, match="no circuit view of this graph yet"):
        graph.subgraph()
    view = graph.widget()
    pins = [graph.node_ids[0], graph.node_ids[len(graph.features)]]  # a feature and an error
    view.group("g", pins)
    assert graph.subgraph(ids=True) == pins
    sub = graph.subgraph()
    assert sub.node_ids == pins + graph.node_ids[-6:]  # every token and logit stays
    assert sub.pruning.influence.tolist() == [graph.pruning.influence[graph.node_index(i)] for i in sub.node_ids]
    rows = [graph.node_index(i) for i in sub.node_ids]
    np.testing.assert_array_equal(sub.adjacency, graph.adjacency[np.ix_(rows, rows)])
    written = load_graph(sub.to_json(tmp_path, slug="sub"))  # pins and supernodes travel in qParams
    assert written.view["pinnedIds"] == pins and written.view["supernodes"] == [["g", *pins]]
    reopened = circuit_view(tmp_path / "sub.json")
    assert reopened.pinned == pins and reopened.groups == [{"name": "g", "members": pins}]


def test_bad_state_is_refused():
    graph = example_graph()
    with pytest.raises(ValueError, match=r"pinned id '9_9_9' is not a node of this graph"):
        graph.widget(pinned=["9_9_9"])
    with pytest.raises(ValueError, match="node_threshold must be in"):
        graph.widget(node_threshold=0)
    with pytest.raises(ValueError, match="that are no nodes of the graph"):
        CircuitView(graph.widget().view_data(), groups=[{"name": "x", "members": ["nope"]}])
    with pytest.raises(TypeError, match="data must be a CircuitData"):
        CircuitView({})


def test_interventions_say_what_they_need():
    graph = random_graph(0)
    view = graph.widget()
    error = graph.node_ids[len(graph.features)]
    token = graph.node_ids[-3]
    for node, kind in ((error, "an error"), (token, "a token")):
        message = view.reply({"type": "intervene", "id": 1, "nodes": [node]})["error"]
        assert f"is {kind} node: interventions act on feature nodes" in message
    message = view.reply({"type": "intervene", "id": 2, "nodes": [graph.node_ids[0]]})["error"]
    assert "need the kernel and the graph's model, tokenizer and transcoders" in message
    assert "graph.widget(model=model, tokenizer=tokenizer, transcoders=transcoders)" in message


def _document(graph: AttributionGraph, folder: Path, **kw) -> tuple[Path, dict]:
    path = graph.to_json(folder, slug="g", **kw)
    return path, json.loads(path.read_text())


def test_a_json_with_new_error_ids_and_a_quoted_logit(tmp_path):
    graph = random_graph(1).replace(logits=Targets(['say "hi"', "y"], ids=[5, 9], probs=[0.6, 0.3]))
    path, doc = _document(graph, tmp_path)
    assert any("_-1_" in n["node_id"] for n in doc["nodes"])
    for node in doc["nodes"]:
        if node["feature_type"] == "cross layer transcoder":
            node["clerp"] = "feature label"
    path.write_text(json.dumps(doc))
    view = circuit_view(path)
    pruned = load_graph(path)
    assert view._ids == pruned.node_ids and view.logit_tokens == ['say "hi"', "y"]
    assert view.node_labels[0] == "feature label"
    assert set(view.details) and next(iter(view.details.values()))["source"].endswith(".json")  # the features/ folder
    assert 'say "hi"' not in view.static_svg() and "say &quot;hi&quot;" in view.static_svg()
    legacy_path, _ = _document(graph, tmp_path / "legacy", error_ids="legacy")
    assert circuit_view(legacy_path)._ids == view._ids  # the old error ids read as the new ones


def test_a_neuronpedia_json_with_lorsa_nodes_opens_view_only(tmp_path):
    graph = random_graph(0)
    path, doc = _document(graph, tmp_path)
    feature = next(n for n in doc["nodes"] if n["feature_type"] == "cross layer transcoder")
    lorsa = {**feature, "node_id": "1_77_2", "feature_type": "lorsa", "layer": "1", "ctx_idx": 2, "clerp": HOSTILE}
    doc["nodes"].append(lorsa)
    doc["links"].append({"source": "1_77_2", "target": doc["nodes"][-2]["node_id"], "weight": 0.25})
    doc["qParams"]["pinnedIds"] = ["1_77_2", feature["node_id"]]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not lorsa"):
        load_graph(path)  # the graph cannot hold it
    view = circuit_view(path)
    assert view.scores_note.startswith("the graph has lorsa nodes") and view.graph_info["replacement"] is None
    assert view.graph_info["scores_of"] == "not computable"
    k = view._ids.index("1_77_2")
    assert view.node_kind[k] == 4 and view.node_labels[k] == HOSTILE and view.pinned == ["1_77_2", feature["node_id"]]
    assert HOSTILE not in view.static_svg()
    assert "view-only" in view.reply({"type": "intervene", "nodes": ["1_77_2"]})["error"]
    assert view.mime_payload()["data"]["node_ids"][k] == "1_77_2"


def test_an_unknown_schema_or_no_graph_is_refused(tmp_path):
    path, doc = _document(example_graph(), tmp_path)
    doc["metadata"]["schema_version"] = 9
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="graph JSON schema version 9 is unknown"):
        circuit_view(path)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"nodes": []}))
    with pytest.raises(ValueError, match="is not a graph JSON"):
        circuit_view(other)


def test_the_static_picture_is_the_pruned_graph_at_the_view_thresholds():
    graph = random_graph(3)
    view = graph.widget()
    full = view.static_svg()
    assert "the graph: " in full
    view.node_threshold, view.edge_threshold = 0.5, 0.9
    pruned = graph.prune(0.5, 0.9)
    svg = view.static_svg()
    assert "pruned at node threshold 0.5, edge threshold 0.9" in svg
    shown = len(set(pruned.node_ids) | set(graph.node_ids[-6:]))  # kept nodes (tokens and logits always)
    assert f": {shown} of {graph.n_nodes} nodes" in svg
    assert f"of their {int(np.count_nonzero(pruned.adjacency))} edges" in svg


def test_state_written_by_the_browser_is_checked():
    view = example_graph().widget()
    with pytest.raises(ValueError, match=r"edge_threshold must be in \(0, 1\]"):
        view.edge_threshold = 1.5
    with pytest.raises(ValueError, match="each group must be"):
        view.groups = [{"members": ["0_7_1"]}]
    with pytest.raises(ValueError, match="that are no nodes of the graph"):
        view.groups = [{"name": "x", "members": ["nope"]}]
    view.groups = [{"name": "x", "members": ["0_7_1"]}]
    assert view.subgraph()["groups"] == [{"name": "x", "members": ["0_7_1"]}]
