"""Interventions from the circuit view: the widget's message handler runs feature_intervention on the graph's model
and transcoders and answers the same numbers; what it refuses (no model, error and token nodes, another model's
graph) comes back as a message; the model, tokenizer and transcoders never travel with the view's data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from interp_widgets.circuits import TranscoderSet, attribution_graph, circuit_view
from interp_widgets.circuits.feature_intervention import feature_intervention
from interp_widgets.concepts import Transcoder
from interp_widgets.demo import corpus
from tests import tiny_models
from tests.conftest import model_fingerprint

PROMPT = "The cat sat on the mat because"


@pytest.fixture(scope="module")
def setup():
    model, tokenizer = tiny_models.llama_lm()
    tcs = TranscoderSet.fit(model, tokenizer, corpus()[:40], transcoder=Transcoder(32, k=4, max_epochs=2,
                            progress=False))  # fmt: skip
    return model, tokenizer, tcs, attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=16, progress=False)


@pytest.mark.parametrize("factor, freeze, at_generated", [(0.0, True, False), (2.0, False, False), (5.0, True, True)])
def test_the_handler_answers_what_feature_intervention_computes(setup, factor, freeze, at_generated):
    model, tokenizer, tcs, graph = setup
    before = model_fingerprint(model, tokenizer)
    view = graph.widget(model=model, tokenizer=tokenizer, transcoders=tcs)
    rows = [0, 1]
    nodes = [graph.node_ids[r] for r in rows]
    answer = view.reply({"type": "intervene", "id": 7, "nodes": nodes, "factor": factor, "freeze_attention": freeze,
                         "at_generated": at_generated, "max_new_tokens": 4, "top_k": 5})  # fmt: skip
    assert "error" not in answer, answer.get("error")
    assert answer["id"] == 7 and answer["nodes"] == nodes and answer["freeze_attention"] is freeze
    assert answer["at_generated"] is at_generated
    plan = [(*graph.features[r].tolist(), factor * float(graph.activations[r])) for r in rows]
    direct = feature_intervention(model, tokenizer, graph, tcs, plan, freeze_attention=freeze, max_new_tokens=4,
                                  generated_scale=factor if at_generated else None)  # fmt: skip
    top = direct.top(5)
    assert [row["id"] for row in answer["top"]] == top["id"].tolist()
    assert [row["token"] for row in answer["top"]] == top["token"].tolist()
    for key in ("p_before", "p_after", "logit_change"):
        np.testing.assert_allclose([row[key] for row in answer["top"]], top[key].to_numpy(), rtol=1e-6, atol=1e-7)
    assert answer["continuation"] == tokenizer.decode(direct.continuation)
    assert answer["base_continuation"] == tokenizer.decode(direct.base_continuation)
    json.dumps(answer)  # it travels as a custom message
    assert model_fingerprint(model, tokenizer) == before


def test_a_scaled_feature_changes_the_logits(setup):
    model, tokenizer, tcs, graph = setup
    view = graph.widget(model=model, tokenizer=tokenizer, transcoders=tcs)
    last = graph.features[:, 1] == graph.features[:, 1].max()  # at the last position: it reaches the logits
    strongest = int(np.flatnonzero(last)[np.argmax(np.abs(graph.activations[last]))])
    answer = view.reply({"type": "intervene", "nodes": [graph.node_ids[strongest]], "factor": 10.0})
    assert max(abs(row["logit_change"]) for row in answer["top"]) > 0


def test_what_the_handler_refuses(setup):
    model, tokenizer, tcs, graph = setup
    n_f = len(graph.features)
    error, token = graph.node_ids[n_f], graph.node_ids[n_f + len(graph.errors)]
    view = graph.widget(model=model, tokenizer=tokenizer, transcoders=tcs)
    for node, kind in ((error, "an error"), (token, "a token")):
        message = view.reply({"type": "intervene", "nodes": [graph.node_ids[0], node]})["error"]
        assert f"{node!r} is {kind} node: interventions act on feature nodes" in message
    message = view.reply({"type": "intervene", "nodes": [graph.node_ids[0]], "factor": "nan"})["error"]
    assert "factor must be a finite number" in message
    for missing, kwargs in (
        ("model", {"tokenizer": tokenizer, "transcoders": tcs}),
        ("model, tokenizer, transcoders", {}),
    ):
        bare = graph.widget(**kwargs)
        message = bare.reply({"type": "intervene", "nodes": [graph.node_ids[0]]})["error"]
        assert f"opened without {missing}:" in message
        assert "need the kernel and the graph's model, tokenizer and transcoders" in message


def test_the_kernel_objects_never_travel(setup, tmp_path):
    model, tokenizer, tcs, graph = setup
    view = graph.widget(model=model, tokenizer=tokenizer, transcoders=tcs)
    assert not {"model", "tokenizer", "transcoders"} & set(view.keys)
    plain = graph.widget()
    assert json.dumps(view.mime_payload()["data"], default=str) == json.dumps(plain.mime_payload()["data"], default=str)
    path = graph.to_json(tmp_path, slug="g")
    opened = circuit_view(path, model=model, tokenizer=tokenizer, transcoders=tcs)
    answer = opened.reply({"type": "intervene", "nodes": [opened._ids[0]], "factor": 0.0, "max_new_tokens": 1})
    assert "error" not in answer and len(answer["top"]) == 10


def test_another_models_graph_is_refused_with_the_reason(setup):
    from tests.circuits.test_graph import random_graph

    model, tokenizer, tcs, _ = setup
    other = random_graph(0)
    assert other.n_layers != tcs.n_layers
    view = other.widget(model=model, tokenizer=tokenizer, transcoders=tcs)
    message = view.reply({"type": "intervene", "nodes": [other.node_ids[0]]})["error"]
    assert "this graph comes from another model" in message and "view-only" in message


def test_the_handler_runs_a_cross_layer_transcoders_intervention():
    from tests.circuits.test_attribution_graph import random_clt

    model, tokenizer = tiny_models.llama_lm()
    clt = random_clt(model)
    graph = attribution_graph(model, tokenizer, PROMPT, clt, batch_size=16, progress=False)
    view = graph.widget(model=model, tokenizer=tokenizer, transcoders=clt)
    row = int(np.flatnonzero(graph.features[:, 0] == 0)[-1])  # a layer-0 feature: it writes to both MLP outputs
    answer = view.reply({"type": "intervene", "nodes": [graph.node_ids[row]], "factor": 3.0, "top_k": 5})
    assert "error" not in answer, answer.get("error")
    direct = feature_intervention(model, tokenizer, graph, clt, [(*graph.features[row].tolist(),
                                  3.0 * float(graph.activations[row]))])  # fmt: skip
    np.testing.assert_allclose([r["logit_change"] for r in answer["top"]], direct.top(5)["logit_change"].to_numpy(),
                               rtol=1e-6, atol=1e-7)  # fmt: skip
