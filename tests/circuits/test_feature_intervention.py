"""feature_intervention: constrained runs measure the graph's direct effects; free runs in the real model; bad input;
the model untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.circuits import TranscoderSet, attribution_graph
from interp_widgets.circuits.feature_intervention import feature_intervention
from interp_widgets.concepts import Transcoder
from interp_widgets.demo import corpus
from tests import tiny_models
from tests.conftest import model_fingerprint

PROMPT = "The cat sat on the mat because"


@pytest.fixture(scope="module")
def setup():
    model, tokenizer = tiny_models.llama_lm()
    tcs = TranscoderSet.fit(model, tokenizer, corpus()[:60], transcoder=Transcoder(48, activation="jumprelu",
                            skip=True, max_epochs=3, progress=False))  # fmt: skip
    return model, tokenizer, tcs, attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=16, progress=False)


def test_constrained_ablation_moves_every_node_by_minus_its_direct_effect(setup):
    model, tokenizer, tcs, graph = setup
    before = model_fingerprint(model, tokenizer)
    n_feat = len(graph.features)
    rows = np.r_[np.arange(n_feat), np.arange(graph.n_nodes - len(graph.logits), graph.n_nodes)]
    out_degree = np.abs(graph.adjacency[rows, :n_feat]).sum(0)
    for s in np.argsort(-out_degree)[:3]:
        layer, pos, feature = graph.features[s]
        outcome = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, 0.0)], constrained=True)
        change, column = outcome.node_change[rows], graph.adjacency[rows, s]
        assert np.abs(change + column).max() <= 1e-4 * np.abs(column).max() + 1e-5
    assert model_fingerprint(model, tokenizer) == before


def test_free_intervention_in_the_real_model(setup):
    model, tokenizer, tcs, graph = setup
    ids = torch.as_tensor(graph.token_ids)[None]
    with torch.no_grad():
        real = model(input_ids=ids).logits[0, -1]
    (layer, pos, feature), value = graph.features[-1], graph.activations[-1]
    same = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, value)], freeze_attention=False)
    np.testing.assert_allclose(same.base_logits, real.numpy(), atol=1e-5)
    np.testing.assert_allclose(same.logits, real.numpy(), atol=1e-5)
    # doubling a feature in the real model is the model with (value) * W_dec added at its MLP output (a hook here)
    w = tcs[layer].folded()
    handle = model.model.layers[layer].mlp.register_forward_hook(
        lambda m, a, out: (
            out
            + torch.nn.functional.one_hot(torch.tensor(pos), ids.shape[1])[None, :, None]
            * (value * w["W_dec"][feature])
        )
    )
    try:
        with torch.no_grad():
            expected = model(input_ids=ids).logits[0, -1]
    finally:
        handle.remove()
    assert layer == tcs.n_layers - 1  # no later MLP reads it: the plain hook is exact
    doubled = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, 2 * value)],
                                   freeze_attention=False, max_new_tokens=2)  # fmt: skip
    np.testing.assert_allclose(doubled.logits, expected.numpy(), atol=1e-4)
    assert len(doubled.continuation) == 2 and doubled.top(3)["p_after"].is_monotonic_decreasing


def test_bad_interventions_are_refused(setup):
    model, tokenizer, tcs, graph = setup
    with pytest.raises(ValueError, match="not error or token nodes"):
        feature_intervention(model, tokenizer, graph, tcs, [(0, 0, 1, 0.0)])
    with pytest.raises(ValueError, match="outside layer 0"):
        feature_intervention(model, tokenizer, graph, tcs, [(0, 1, 10_000, 0.0)])
    with pytest.raises(ValueError, match="empty"):
        feature_intervention(model, tokenizer, graph, tcs, [])
    with pytest.raises(TypeError, match="layer, position, feature, value"):
        feature_intervention(model, tokenizer, graph, tcs, [(0, 1, 2)])
