"""The graph JSON: what to_json writes (Neuronpedia's schema, circuit-tracer's node fields, feature detail files)
and what load_graph reads back (both error-id forms, pins and supernodes, int64 feature ids, bad files)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from interp_widgets.circuits import AttributionGraph, cantor_pair, load_graph
from interp_widgets.targets import Targets
from tests.circuits.test_graph import random_graph

# Neuronpedia's apps/webapp/app/api/graph/graph-schema.json at commit b8efe8435ea59592690f3d39dc3479b0d4e337c0
# (the schema uploads are validated against), restated in full: every type and every required field it declares;
# only its descriptions and examples are left out.
_STRING, _INT, _NUMBER = {"type": "string"}, {"type": "integer"}, {"type": "number"}
NEURONPEDIA_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["metadata", "qParams", "nodes", "links"],
    "properties": {
        "metadata": {
            "type": "object",
            "required": ["slug", "scan", "prompt_tokens", "prompt"],
            "properties": {
                "slug": _STRING,
                "scan": _STRING,
                "prompt_tokens": {"type": "array", "items": _STRING},
                "prompt": _STRING,
                "node_threshold": _NUMBER,
                "feature_details": {
                    "type": "object",
                    "properties": {
                        "feature_json_base_url": _STRING,
                        "neuronpedia_source_set": _STRING,
                        "neuronpedia_lorsa_source_set": _STRING,
                    },
                },
                "info": {
                    "type": "object",
                    "properties": {
                        "description": _STRING,
                        "creator_name": _STRING,
                        "creator_url": _STRING,
                        "source_urls": {"type": "array"},
                        "generator": {
                            "type": "object",
                            "properties": {"name": _STRING, "version": _STRING, "url": _STRING, "email": _STRING},
                        },
                        "create_time_ms": _NUMBER,
                    },
                },
                "generation_settings": {
                    "type": "object",
                    "properties": {
                        "max_n_logits": _INT,
                        "desired_logit_prob": _NUMBER,
                        "batch_size": _INT,
                        "max_feature_nodes": _INT,
                    },
                },
                "pruning_settings": {
                    "type": "object",
                    "properties": {"node_threshold": _NUMBER, "edge_threshold": _NUMBER},
                },
            },
        },
        "qParams": {
            "type": "object",
            "properties": {
                "pinnedIds": {"type": "array", "items": _STRING},
                "supernodes": {"type": "array"},
                "linkType": _STRING,
                "clickedId": _STRING,
                "sg_pos": _STRING,
            },
        },
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["node_id", "feature", "layer", "ctx_idx", "feature_type", "jsNodeId", "clerp"],
                "properties": {
                    "node_id": _STRING,
                    "feature": {"type": ["integer", "null"]},
                    "layer": {"type": ["string", "integer"]},
                    "ctx_idx": _INT,
                    "feature_type": _STRING,
                    "jsNodeId": _STRING,
                    "clerp": _STRING,
                    "influence": {"type": ["number", "null"]},
                    "activation": {"type": ["number", "null"]},
                },
            },
        },
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["source", "target", "weight"],
                "properties": {"source": _STRING, "target": _STRING, "weight": _NUMBER},
            },
        },
    },
}
# circuit-tracer 0.5.0's frontend/feature_models.py fields of a feature detail file
FEATURE_FIELDS = [
    "transcoder_id",
    "index",
    "examples_quantiles",
    "top_logits",
    "bottom_logits",
    "act_min",
    "act_max",
    "quantile_values",
    "histogram",
    "activation_frequency",
]


def write(graph, folder, **kw):
    path = graph.to_json(folder, slug="g", **kw)
    return path, json.loads(path.read_text())


def test_to_json_follows_the_schema_and_round_trips(tmp_path):
    graph = random_graph(0)
    path, doc = write(graph, tmp_path, feature_json_base_url="https://example.invalid/features")
    jsonschema.validate(doc, NEURONPEDIA_SCHEMA)
    pruned = graph.prune()
    assert [n["node_id"] for n in doc["nodes"]] == pruned.node_ids
    kinds = {n["feature_type"] for n in doc["nodes"]}
    assert kinds == {"cross layer transcoder", "mlp reconstruction error", "embedding", "logit"}
    logit = doc["nodes"][-2]
    assert logit["clerp"] == 'Output "x" (p=0.600)' and logit["is_target_logit"] and logit["layer"] == "4"
    assert not doc["nodes"][-1]["is_target_logit"] and doc["nodes"][-1]["clerp"] == 'Output "y<" (p=0.300)'
    assert doc["metadata"]["feature_details"] == {"feature_json_base_url": "https://example.invalid/features"}
    assert doc["metadata"]["pruning_settings"] == {"node_threshold": 0.8, "edge_threshold": 0.98}
    loaded = load_graph(path)
    for name in ("adjacency", "features", "activations", "errors", "token_ids"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(pruned, name))
    assert loaded.logits.labels == ["x", "y<"] and loaded.logits.ids.tolist() == [5, 9]
    assert loaded.pruning.edge_threshold == 0.98
    np.testing.assert_array_equal(loaded.pruning.influence[:-2], pruned.pruning.influence[:-2])
    assert np.isnan(loaded.pruning.influence[-2:]).all()  # circuit-tracer writes none for logits
    assert loaded.scores() == pruned.scores()
    # a loaded (pruned) graph is written as it is
    again = json.loads(loaded.to_json(tmp_path / "again", slug="g").read_text())
    assert again["nodes"] == doc["nodes"] and again["links"] == doc["links"]


def test_feature_detail_files(tmp_path):
    graph = random_graph(1)
    write(graph, tmp_path)
    pruned = graph.prune()
    folder = tmp_path / "features" / "random"
    expected = sorted({cantor_pair(l, f) for l, _, f in pruned.features.tolist()})
    assert sorted(int(p.stem) for p in folder.iterdir()) == expected
    layer, pos, f = pruned.features[0].tolist()
    detail = json.loads((folder / f"{cantor_pair(layer, f)}.json").read_text())
    assert list(detail) == FEATURE_FIELDS
    example = detail["examples_quantiles"][0]["examples"][0]
    assert example["tokens"] == graph.prompt_tokens
    rows = (graph.features[:, 0] == layer) & (graph.features[:, 2] == f)
    acts = np.zeros(4)
    acts[graph.features[rows, 1]] = graph.activations[rows]
    assert example["tokens_acts_list"] == acts.tolist() and example["tokens_acts_list"][pos] > 0
    assert detail["act_max"] == acts.max() and detail["index"] == cantor_pair(layer, f)
    index = json.loads((tmp_path / "graph-metadata.json").read_text())
    assert [g["slug"] for g in index["graphs"]] == ["g"]
    write(graph, tmp_path)  # the same slug again replaces its entry
    assert len(json.loads((tmp_path / "graph-metadata.json").read_text())["graphs"]) == 1


def test_both_error_id_forms_load_the_same_graph(tmp_path):
    graph = random_graph(2)
    _, new = write(graph, tmp_path / "new")
    old_path, old = write(graph, tmp_path / "old", error_ids="legacy")
    errors_new = [n["node_id"] for n in new["nodes"] if n["feature_type"] == "mlp reconstruction error"]
    errors_old = [n["node_id"] for n in old["nodes"] if n["feature_type"] == "mlp reconstruction error"]
    assert errors_new and all("_-1_" in i for i in errors_new)
    assert [f"0_{i.split('_')[0]}_{i.split('_')[2]}" for i in errors_new] == errors_old
    a, b = load_graph(tmp_path / "new" / "g.json"), load_graph(old_path)
    np.testing.assert_array_equal(a.adjacency, b.adjacency)
    assert a.node_ids == b.node_ids


def test_legacy_ids_that_would_collide_are_refused(tmp_path):
    graph = random_graph(4, legacy_collision=True).prune(1.0, 1.0)
    assert "0_1_2" in graph.node_ids and "1_-1_2" in graph.node_ids  # feature 1 of layer 0 at position 2
    with pytest.raises(ValueError, match="would equal a layer-0 feature's id"):
        graph.to_json(tmp_path, error_ids="legacy")
    path, _ = write(graph, tmp_path)  # the default form never collides
    assert load_graph(path).node_ids == graph.node_ids


def test_colliding_node_ids_in_a_file(tmp_path):
    graph = random_graph(4, legacy_collision=True).prune(1.0, 1.0)
    path, doc = write(graph, tmp_path)
    for node in doc["nodes"]:  # what circuit-tracer 0.5.0 writes for this graph
        if node["feature_type"] == "mlp reconstruction error":
            node["node_id"] = f"0_{node['layer']}_{node['ctx_idx']}"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"node ids collide: '0_1_2' names cross layer transcoder \(layer 0"):
        load_graph(path)


def test_pins_and_supernodes(tmp_path):
    graph = random_graph(3)
    path, doc = write(graph, tmp_path)
    features = [n["node_id"] for n in doc["nodes"] if n["feature_type"] == "cross layer transcoder"]
    error = next(n for n in doc["nodes"] if n["feature_type"] == "mlp reconstruction error")
    legacy_error = f"0_{error['layer']}_{error['ctx_idx']}"
    doc["qParams"] = {
        "pinnedIds": features[:2] + [legacy_error],
        "supernodes": [["group", features[0], features[1]]],
        "linkType": "both",
        "clickedId": features[0],
        "sg_pos": "",
    }
    path.write_text(json.dumps(doc))
    loaded = load_graph(path)
    assert loaded.view["pinnedIds"] == features[:2] + [legacy_error]
    assert loaded.view["supernodes"] == [["group", features[0], features[1]]]
    scores = loaded.scores(pinned=loaded.view["pinnedIds"])
    assert scores.replacement < loaded.scores(pinned=features).replacement
    again = json.loads(loaded.to_json(tmp_path / "again", slug="g").read_text())
    assert again["qParams"] == doc["qParams"]  # the saved view survives
    doc["qParams"]["supernodes"] = [["group", features[0], "5_99999_0"]]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"supernode 'group' member '5_99999_0' is not a node of this graph"):
        load_graph(path)


def test_wide_transcoder_ids_stay_int64(tmp_path):
    A = np.zeros((4, 4), np.float32)  # feature, error, token, logit
    A[3, 0], A[0, 2], A[3, 1] = 1.0, 1.0, 0.5
    graph = AttributionGraph.from_flat(
        A,
        features=[[29, 0, 73727]],
        activations=[3.0],
        errors=[[29, 0]],
        logits=Targets(["z"], ids=[49151], probs=[0.5]),
        prompt="q",
        prompt_tokens=["q"],
        token_ids=[7],
        n_layers=30,
        scan="smollm2-transcoders",
    )
    path, doc = write(graph, tmp_path)
    assert doc["nodes"][0]["feature"] == 2720084373 > 2**31
    assert (tmp_path / "features" / "smollm2-transcoders" / "2720084373.json").is_file()
    loaded = load_graph(path)
    assert loaded.features.dtype == np.int64 and loaded.features.tolist() == [[29, 0, 73727]]


def test_bad_files(tmp_path):
    path, doc = write(random_graph(5), tmp_path)
    bad = tmp_path / "bad.json"
    for change, message in [
        (lambda d: d["metadata"].update(schema_version=2), "graph JSON schema version 2 is unknown"),
        (lambda d: d["nodes"][0].update(feature_type="lorsa"), "feature_type 'lorsa'"),
        (lambda d: d["links"][0].update(source="7_7_7"), "a link's source '7_7_7' is no node of the file"),
        (lambda d: d["nodes"][0].update(feature=1), r"has feature 1, not cantor"),
        (lambda d: d["qParams"].update(pinnedIds=["E_1_99"]), "pinned id 'E_1_99' is not a node of this graph"),
        (lambda d: d.pop("links"), "it needs 'metadata', 'nodes' and 'links'"),
    ]:
        changed = json.loads(json.dumps(doc))
        change(changed)
        bad.write_text(json.dumps(changed))
        with pytest.raises(ValueError, match=message):
            load_graph(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        load_graph(bad)
    with pytest.raises(FileNotFoundError):
        load_graph(tmp_path / "missing.json")


def test_files_without_a_schema_version(tmp_path):
    """circuit-tracer before schema version 1 wrote feature = index (+ a layer offset); the index is in the id."""
    path, doc = write(random_graph(6), tmp_path)
    doc["metadata"].pop("schema_version")
    for node in doc["nodes"]:
        if node["feature_type"] == "cross layer transcoder":
            node["feature"] = int(node["node_id"].split("_")[1])
    path.write_text(json.dumps(doc))
    assert load_graph(path).node_ids == random_graph(6).prune().node_ids


def test_save_and_load_graph_of_safetensors(tmp_path):
    graph = random_graph(7)
    assert load_graph(graph.save(tmp_path / "g.safetensors")).node_ids == graph.node_ids


def test_to_json_bad_arguments(tmp_path):

    graph = random_graph(8)
    with pytest.raises(ValueError, match="unknown error_ids 'old'; use one of"):
        graph.to_json(tmp_path, error_ids="old")
    with pytest.raises(ValueError, match="the graph JSON needs a scan"):
        graph.replace(scan=None).to_json(tmp_path)
    with pytest.raises(ValueError, match=r"edge_threshold must be a number in \(0, 1\]"):
        graph.to_json(tmp_path, edge_threshold=0)
