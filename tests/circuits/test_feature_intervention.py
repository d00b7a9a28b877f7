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


def assert_constrained_zeroing_moves_by_minus_column(model, tokenizer, graph, transcoders, rows, s) -> None:
    """Zero feature ``s`` with every other node held (constrained): each node of ``rows`` moves by -A[t, s]."""
    layer, pos, feature = graph.features[s]
    outcome = feature_intervention(model, tokenizer, graph, transcoders, [(layer, pos, feature, 0.0)], constrained=True)
    change, column = outcome.node_change[rows], graph.adjacency[rows, s]
    assert np.abs(change + column).max() <= 1e-4 * np.abs(column).max() + 1e-5


def test_constrained_ablation_moves_every_node_by_minus_its_direct_effect(setup):
    model, tokenizer, tcs, graph = setup
    before = model_fingerprint(model, tokenizer)
    n_feat = len(graph.features)
    rows = np.r_[np.arange(n_feat), np.arange(graph.n_nodes - len(graph.logits), graph.n_nodes)]
    out_degree = np.abs(graph.adjacency[rows, :n_feat]).sum(0)
    for s in np.argsort(-out_degree)[:3]:
        assert_constrained_zeroing_moves_by_minus_column(model, tokenizer, graph, tcs, rows, s)
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


def _greedy_with_hook(model, ids, steps, layer, edit):
    """Greedy continuation of ``ids`` with ``edit(mlp_input, mlp_output)`` applied to block ``layer``'s MLP."""
    handle = model.model.layers[layer].mlp.register_forward_hook(lambda m, args, out: edit(args[0], out))
    tokens, sequence = [], ids
    try:
        with torch.no_grad():
            for _ in range(steps):
                tokens.append(int(model(input_ids=sequence).logits[0, -1].argmax()))
                sequence = torch.cat([sequence, torch.tensor([[tokens[-1]]])], 1)
    finally:
        handle.remove()
    return tokens


@pytest.mark.parametrize("scale", [0.0, 25.0])
def test_generated_tokens_are_intervened_on_only_when_asked(setup, scale):
    model, tokenizer, tcs, graph = setup
    before = model_fingerprint(model, tokenizer)
    ids = torch.as_tensor(graph.token_ids)[None]
    n_pos = ids.shape[1]
    (layer, pos, feature), value = graph.features[-1], graph.activations[-1]
    assert layer == tcs.n_layers - 1  # no later MLP reads it: plain hooks are the exact reference
    W_dec = torch.as_tensor(tcs[layer].folded()["W_dec"][feature])

    def edit(at_generated):
        def apply(x, out):
            acts = torch.as_tensor(tcs[layer].transform(x[0].numpy())[:, feature])
            out = out.clone()
            out[0, pos] += (scale * value - acts[pos]) * W_dec
            if at_generated:
                out[0, n_pos:] += (scale - 1) * acts[n_pos:, None] * W_dec
            return out

        return apply

    steps = 6
    expected_prompt_only = _greedy_with_hook(model, ids, steps, layer, edit(False))
    expected_everywhere = _greedy_with_hook(model, ids, steps, layer, edit(True))
    if scale == 25.0:  # a large scale at the generated tokens changes the continuation: the test can tell them apart
        assert expected_everywhere != expected_prompt_only
    prompt_only = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, scale * value)],
                                       freeze_attention=False, max_new_tokens=steps)  # fmt: skip
    everywhere = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, scale * value)],
                                      freeze_attention=False, max_new_tokens=steps, generated_scale=scale)  # fmt: skip
    assert prompt_only.continuation == expected_prompt_only and prompt_only.settings["generated_scale"] is None
    assert everywhere.continuation == expected_everywhere and everywhere.settings["generated_scale"] == scale
    assert model_fingerprint(model, tokenizer) == before


def test_generated_scale_one_changes_nothing_and_bad_scales_are_refused(setup):
    model, tokenizer, tcs, graph = setup
    (layer, pos, feature), value = graph.features[0], graph.activations[0]
    plain = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, 0.0)], max_new_tokens=4)
    same = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, 0.0)], max_new_tokens=4,
                                generated_scale=1.0)  # fmt: skip
    assert same.continuation == plain.continuation and np.array_equal(same.logits, plain.logits)
    with pytest.raises(ValueError, match="generated_scale"):
        feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, 0.0)], generated_scale=float("nan"))


# ---------------------------------------------------------------------------------------------- cross-layer transcoders
@pytest.fixture(scope="module")
def clt_setup():
    from tests.circuits.test_attribution_graph import random_clt

    model, tokenizer = tiny_models.llama_lm()
    clt = random_clt(model)
    return model, tokenizer, clt, attribution_graph(model, tokenizer, PROMPT, clt, batch_size=16, progress=False)


def test_cross_layer_constrained_ablation_moves_every_node_by_minus_its_direct_effect(clt_setup):
    model, tokenizer, clt, graph = clt_setup
    before = model_fingerprint(model, tokenizer)
    n_feat = len(graph.features)
    rows = np.r_[np.arange(n_feat), np.arange(graph.n_nodes - len(graph.logits), graph.n_nodes)]
    out_degree = np.abs(graph.adjacency[rows, :n_feat]).sum(0)
    # layer-0 features write to both layers' MLP outputs; in two blocks, a layer-1 write reaches the logits only from
    # the last position
    last = len(graph.token_ids) - 1
    layer0 = np.flatnonzero((graph.features[:, 0] == 0) & (graph.features[:, 1] == last))
    assert len(layer0) >= 3
    for s in [*layer0[np.argsort(-out_degree[layer0])[:3]], int(np.argmax(out_degree))]:
        assert_constrained_zeroing_moves_by_minus_column(model, tokenizer, graph, clt, rows, s)
    assert model_fingerprint(model, tokenizer) == before


def test_cross_layer_free_intervention_writes_to_every_later_layer(clt_setup):
    model, tokenizer, clt, graph = clt_setup
    ids = torch.as_tensor(graph.token_ids)[None]
    s = int(np.flatnonzero(graph.features[:, 0] == 0)[-1])
    assert graph.features[s, 1] == len(graph.token_ids) - 1  # its layer-1 write reaches the logits
    (layer, pos, feature), value = graph.features[s], float(graph.activations[s])
    W_dec = clt.replacement_weights(0)["W_dec"][feature]  # (2, d): to layer 0 and to layer 1
    # layer 0's input does not depend on its own MLP: the feature stays at `value`, so plain hooks adding
    # value · W_dec[:, j] at layer j's MLP output are exact
    handles = [
        model.model.layers[j].mlp.register_forward_hook(
            lambda m, a, out, j=j: (
                out + torch.nn.functional.one_hot(torch.tensor(pos), ids.shape[1])[None, :, None] * (value * W_dec[j])
            )
        )
        for j in range(2)
    ]
    try:
        with torch.no_grad():
            expected = model(input_ids=ids).logits[0, -1]
    finally:
        for handle in handles:
            handle.remove()
    doubled = feature_intervention(model, tokenizer, graph, clt, [(layer, pos, feature, 2 * value)],
                                   freeze_attention=False)  # fmt: skip
    np.testing.assert_allclose(doubled.logits, expected.numpy(), atol=1e-4)
    assert np.abs(doubled.logits - doubled.base_logits).max() > 1e-3
