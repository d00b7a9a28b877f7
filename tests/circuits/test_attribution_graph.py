"""attribution_graph: closure and interventions checked against a local replacement model written here (plain torch
hooks for the recording, ``intervene`` with frozen attention and norms for the edited runs), the feature cap, the
batch size, the prompt's BOS, targets, bad input, and the model left untouched."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.circuits import CrossLayerTranscoderSet, TranscoderSet
from interp_widgets.circuits.attribution import _pass_bytes, attribution_graph, graph_prompt
from interp_widgets.concepts import Transcoder
from interp_widgets.demo import corpus
from interp_widgets.interventions import intervene
from tests import tiny_models
from tests.conftest import model_fingerprint

TEXTS = corpus()[:60]
PROMPT = "The cat sat on the mat because"


def mlp_of(model, layer):
    return model.model.layers[layer].mlp if hasattr(model, "model") else model.transformer.h[layer].mlp


class Reference:
    """The local replacement model of one prompt, written from the definition: the recording reads each MLP's input
    and output with plain hooks; a run holds every feature activation and error at a given value, recomputes the
    skip term from the live input, and reads every feature's pre-activation and the demeaned logits."""

    def __init__(self, model, ids, transcoders, live_skip=True):
        self.model, self.ids, self.n_layers, self.live_skip = model, ids, transcoders.n_layers, live_skip
        self.w = [transcoders[layer].folded() for layer in range(self.n_layers)]
        self.tcs = transcoders
        seen = {}
        handles = [
            mlp_of(model, layer).register_forward_hook(
                lambda m, a, out, layer=layer: seen.__setitem__(layer, out.detach()[0])
            )
            for layer in range(self.n_layers)
        ]
        try:
            self.read()  # the plain model, not frozen: it must equal the replacement model on its prompt
        finally:
            for handle in handles:
                handle.remove()
        x, y = self.inputs, [seen[layer] for layer in range(self.n_layers)]
        self.acts, self.errors, self.base = [], [], []
        for layer in range(self.n_layers):
            w = self.w[layer]
            tc = transcoders[layer]
            acts = tc._encode(x[layer] / tc.scale_, tc.weights_)  # the transcoder's own encoder
            acts[0] = 0.0
            skip = x[layer] @ w["W_skip"].T if "W_skip" in w and live_skip else torch.zeros_like(x[layer])
            error = y[layer] - (acts @ w["W_dec"] + w["b_dec"] + skip)
            error[0] = 0.0
            self.acts.append(acts)
            self.errors.append(error)
            # what position 0's MLP writes besides its skip term: a constant of the replacement model
            self.base.append(y[layer][0] - skip[0])

    def read(self, edits=None, freeze=False):
        """Run (with ``edits`` and frozen attention and norms if ``freeze``); keep each MLP's input and the final
        norm's output."""
        seen = {}
        handles = [
            mlp_of(self.model, layer).register_forward_pre_hook(
                lambda m, a, layer=layer: seen.__setitem__(layer, a[0].detach()[0])
            )
            for layer in range(len(self.tcs.layers))
        ]
        head = self.model.get_output_embeddings()
        handles.append(head.register_forward_pre_hook(lambda m, a: seen.__setitem__("final", a[0].detach()[0])))
        try:
            context = (
                intervene(self.model, edits or {}, freeze=("attention", "norms"), freeze_on=self.ids)
                if freeze
                else intervene(self.model, edits or {})
            )
            with context, torch.no_grad():
                self.model(input_ids=self.ids)
        finally:
            for handle in handles:
                handle.remove()
        self.inputs = [seen[layer] for layer in range(len(self.tcs.layers))]
        return seen

    def run(self, acts, errors, tokens_on=True):
        """The replacement model with the given activations and errors held, the token embeddings on or zeroed."""

        def mlp_edit(layer):
            w = self.w[layer]

            def edit(hidden):
                x = self.live[layer]
                out = acts[layer] @ w["W_dec"] + w["b_dec"] + errors[layer]
                out[0] = self.base[layer]
                if "W_skip" in w and self.live_skip:
                    out = out + x @ w["W_skip"].T
                return out[None].expand_as(hidden).clone()

            return edit

        self.live = {}
        handles = [
            mlp_of(self.model, layer).register_forward_pre_hook(
                lambda m, a, layer=layer: self.live.__setitem__(layer, a[0].detach()[0])
            )
            for layer in range(self.n_layers)
        ]
        edits = {f"layer:{layer}.mlp_out": mlp_edit(layer) for layer in range(self.n_layers)}
        if not tokens_on:
            edits["layer:0.resid_pre"] = torch.zeros_like
        try:
            seen = self.read(edits, freeze=True)
        finally:
            for handle in handles:
                handle.remove()
        return seen

    def values(self, seen, graph):
        """Every target's value in a run: feature pre-activations, then demeaned logits (graph order)."""
        out = []
        for layer, pos, feature in graph.features:
            w = self.w[layer]
            out.append(float(seen[layer][pos] @ w["W_enc"][feature] + w["b_enc"][feature]))
        unembed = self.model.get_output_embeddings().weight.detach()
        for token in graph.logits.ids:
            out.append(float(seen["final"][-1] @ (unembed[token] - unembed.mean(0))))
        return np.array(out)


def fitted(model, tokenizer, **settings):
    settings = {"activation": "jumprelu", "skip": True, "max_epochs": 3, "progress": False, **settings}
    return TranscoderSet.fit(model, tokenizer, TEXTS, transcoder=Transcoder(48, **settings))


def target_rows(graph):
    n_feat = len(graph.features)
    return np.r_[np.arange(n_feat), np.arange(graph.n_nodes - len(graph.logits), graph.n_nodes)]


def assert_zeroing_moves_by_minus_column(ref, graph, full, s) -> None:
    """Zero feature ``s`` in the reference replacement model, every other node held: each target moves by -A[t, s]."""
    layer, pos, feature = graph.features[s]
    acts = [a.clone() for a in ref.acts]
    acts[layer][pos, feature] = 0.0
    change = ref.values(ref.run(acts, ref.errors), graph) - full
    column = graph.adjacency[target_rows(graph), s]
    assert np.abs(change + column).max() <= 1e-4 * np.abs(column).max() + 1e-5, (s, np.abs(change + column).max())


@pytest.mark.parametrize(
    "build, settings, skip_in_errors",
    [
        (tiny_models.llama_lm, {}, False),
        (tiny_models.llama_lm, {}, True),
        (tiny_models.llama_lm, {"activation": "topk", "k": 6, "skip": False}, False),
        (tiny_models.gpt2_lm, {}, False),
    ],
    ids=["llama-jumprelu-skip", "llama-skip-in-errors", "llama-topk", "gpt2-jumprelu-skip"],
)
def test_direct_effects_close_and_predict_constrained_interventions(build, settings, skip_in_errors):
    model, tokenizer = build()
    tcs = fitted(model, tokenizer, **settings)
    before = model_fingerprint(model, tokenizer)
    graph = attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=16, skip_in_errors=skip_in_errors,
                              progress=False)  # fmt: skip
    assert model_fingerprint(model, tokenizer) == before
    ids = torch.as_tensor(graph.token_ids)[None]
    ref = Reference(model, ids, tcs, live_skip=not skip_in_errors)
    n_feat = len(graph.features)
    # the graph's active features are the reference's, with the same activations
    found = [(layer, pos, f) for layer in range(tcs.n_layers) for pos, f in torch.nonzero(ref.acts[layer]).tolist()]
    assert [tuple(row) for row in graph.features.tolist()] == found and n_feat > 20
    np.testing.assert_allclose(graph.activations, [float(ref.acts[l][p, f]) for l, p, f in found], rtol=1e-5)

    full = ref.values(ref.run(ref.acts, ref.errors), graph)
    real = ref.values(ref.read(), graph)
    np.testing.assert_allclose(full, real, atol=1e-4)  # the replacement reproduces the model on its prompt
    zeros = [torch.zeros_like(a) for a in ref.acts]
    constant = ref.values(ref.run(zeros, [torch.zeros_like(e) for e in ref.errors], tokens_on=False), graph)
    rows = graph.adjacency[target_rows(graph)]
    closure = rows.sum(1) + constant - full
    assert np.abs(closure).max() <= 1e-4 * max(1.0, np.abs(full).max()), np.abs(closure).max()

    # zero the most influential features one at a time, every other node held: each target moves by -A[t, s]
    influence = np.abs(graph.adjacency[n_feat:]).sum(0)[:n_feat] + np.abs(graph.adjacency[:n_feat, :n_feat]).sum(0)
    for s in np.argsort(-influence)[:3]:
        assert_zeroing_moves_by_minus_column(ref, graph, full, s)
    assert model_fingerprint(model, tokenizer) == before


def test_batch_size_and_cap():
    model, tokenizer = tiny_models.llama_lm()
    tcs = fitted(model, tokenizer)
    one = attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=1, progress=False)
    many = attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=32, progress=False)
    np.testing.assert_allclose(one.adjacency, many.adjacency, atol=1e-6)
    assert one.cap is None and one.provenance.settings["n_active_features"] == len(one.features)

    capped = attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=8, max_feature_nodes=40,
                               update_interval=1, progress=False)  # fmt: skip
    assert len(capped.features) == 40 and capped.cap.n_active == len(one.features)
    assert 0 < capped.cap.lost_influence < 1
    # the kept features' rows and columns are those of the full graph
    position = {tuple(f): i for i, f in enumerate(one.features.tolist())}
    n_feat = len(one.features)
    keep = [position[tuple(f)] for f in capped.features.tolist()] + list(range(n_feat, one.n_nodes))
    np.testing.assert_allclose(capped.adjacency, one.adjacency[np.ix_(keep, keep)], atol=1e-6)
    # they are the most influential by the full graph's logit influence, on the whole
    weights = np.r_[np.zeros(one.n_nodes - len(one.logits)), one.logits.probs]
    a = np.abs(one.adjacency)
    a = a / np.maximum(a.sum(1, keepdims=True), 1e-10)
    influence, current = np.zeros(one.n_nodes), weights
    for _ in range(10):
        current = current @ a
        influence += current
    kept = {tuple(f) for f in capped.features.tolist()}
    mask = np.array([tuple(f) in kept for f in one.features.tolist()])
    feature_influence = influence[: len(one.features)]
    assert feature_influence[mask].mean() > 2 * feature_influence[~mask].mean()


def test_prompt_bos_targets_and_contrast():
    model, tokenizer = tiny_models.llama_lm()
    tcs = fitted(model, tokenizer)
    ids, added = graph_prompt(tokenizer, PROMPT)
    assert added and ids[0, 0] == tokenizer.bos_token_id
    again, added_again = graph_prompt(tokenizer, ids[0])
    assert not added_again and torch.equal(again, ids)

    salient = attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=16, desired_logit_prob=0.3,
                                max_n_logits=5, progress=False)  # fmt: skip
    probs = torch.softmax(model(input_ids=ids).logits[0, -1].detach(), -1)
    top = torch.argsort(probs, descending=True)[:5]
    assert salient.logits.ids.tolist() == top[: len(salient.logits)].tolist()
    assert salient.logits.probs[:-1].sum() < 0.3 or len(salient.logits) == 1
    np.testing.assert_allclose(salient.logits.probs, probs[salient.logits.ids].numpy(), rtol=1e-5)

    a, b = int(top[0]), int(top[1])
    given = attribution_graph(model, tokenizer, ids[0], tcs, targets=[a, b], batch_size=16, progress=False)
    pair = attribution_graph(model, tokenizer, ids[0], tcs, contrast=(a, b), batch_size=16, progress=False)
    assert pair.logits.ids.tolist() == [len(tokenizer)] or pair.logits.ids[0] >= model.config.vocab_size
    n = given.n_nodes
    np.testing.assert_allclose(pair.adjacency[-1, : n - 2], given.adjacency[-2, : n - 2] - given.adjacency[-1, : n - 2],
                               atol=1e-5)  # fmt: skip


def test_bad_input_gets_clear_errors():
    model, tokenizer = tiny_models.llama_lm()
    tcs = fitted(model, tokenizer)
    with pytest.raises(ValueError, match="float32"):
        attribution_graph(copy.deepcopy(model).to(torch.bfloat16), tokenizer, PROMPT, tcs, progress=False)
    with pytest.raises(ValueError, match="lower batch_size"):
        attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=10**6, progress=False)
    # room for the backward pass of one row, not for the rows kept: the cap on feature rows is what to lower
    n_pos = graph_prompt(tokenizer, PROMPT)[0].shape[1]
    room = _pass_bytes(model, n_pos, 1, tcs.d_model, tcs.n_layers) / 2**30 * 1.001
    with pytest.raises(ValueError, match="lower max_feature_nodes to 0 or less"):
        attribution_graph(model, tokenizer, PROMPT, tcs, batch_size=1, max_memory_gb=room, progress=False)
    with pytest.raises(ValueError, match="not one"):
        attribution_graph(model, tokenizer, PROMPT, tcs, targets=["the cat sat"], progress=False)
    data = np.random.default_rng(0).normal(size=(200, 16)).astype(np.float32)
    narrow = Transcoder(8, k=2, max_epochs=1, progress=False).fit(data, data)
    with pytest.raises(ValueError, match="reads width 16"):
        attribution_graph(model, tokenizer, PROMPT, TranscoderSet({0: narrow, 1: narrow}), progress=False)
    with pytest.raises(ValueError, match="made for a model of 3 blocks"):
        attribution_graph(model, tokenizer, PROMPT, TranscoderSet(dict(tcs.transcoders), n_layers=3), progress=False)
    partial = TranscoderSet({0: tcs[0]}, n_layers=2, input_point="mlp_in")
    with pytest.raises(ValueError, match="no transcoder for layers"):
        attribution_graph(model, tokenizer, PROMPT, partial, progress=False)
    before = model_fingerprint(model, tokenizer)
    with pytest.raises(TypeError, match="TranscoderSet"):
        attribution_graph(model, tokenizer, PROMPT, {0: tcs[0]}, progress=False)
    assert model_fingerprint(model, tokenizer) == before


def test_saved_graph_keeps_its_settings(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    graph = attribution_graph(model, tokenizer, PROMPT, fitted(model, tokenizer), batch_size=16, progress=False)
    again = type(graph).load(graph.save(tmp_path / "graph.safetensors"))
    assert again.provenance.settings == graph.provenance.settings and again.provenance.settings["bos_added"] is True
    np.testing.assert_array_equal(again.adjacency, graph.adjacency)


def test_every_node_of_a_smollm2_graph_closes(smollm2):
    """SmolLM2 (30 layers, grouped-query attention, RoPE, RMSNorm, tied embeddings) with random TopK transcoders:
    closure is algebra, so it holds whatever the transcoders' quality."""
    model, tokenizer = smollm2
    generator = torch.Generator().manual_seed(0)
    width, n = model.config.hidden_size, 128
    transcoders = {
        layer: Transcoder.from_weights(
            W_enc=torch.randn(n, width, generator=generator) / width**0.5,
            b_enc=torch.zeros(n),
            W_dec=torch.randn(n, width, generator=generator) / n**0.5,
            b_dec=torch.randn(width, generator=generator) * 0.01,
            W_skip=torch.randn(width, width, generator=generator) / width,
            activation="topk",
            k=2,
        )
        for layer in range(model.config.num_hidden_layers)
    }
    tcs = TranscoderSet(transcoders, input_point="mlp_in")
    before = model_fingerprint(model, tokenizer)
    graph = attribution_graph(model, tokenizer, "The capital of France is", tcs, batch_size=64,
                              max_n_logits=3, progress=False)  # fmt: skip
    assert model_fingerprint(model, tokenizer) == before
    ref = Reference(model, torch.as_tensor(graph.token_ids)[None], tcs)
    full = ref.values(ref.run(ref.acts, ref.errors), graph)
    np.testing.assert_allclose(full, ref.values(ref.read(), graph), atol=1e-3, rtol=1e-4)
    zeros = [torch.zeros_like(a) for a in ref.acts]
    constant = ref.values(ref.run(zeros, [torch.zeros_like(e) for e in ref.errors], tokens_on=False), graph)
    closure = graph.adjacency[target_rows(graph)].sum(1) + constant - full
    scale = np.abs(graph.adjacency[target_rows(graph)]).sum(1) + np.abs(full)
    assert len(graph.features) == 30 * 2 * (len(graph.token_ids) - 1)
    assert (np.abs(closure) <= 1e-4 * scale + 1e-4).all(), np.abs(closure / scale).max()


def test_a_computed_graph_opens_in_the_view_and_round_trips_its_json(tmp_path):
    from interp_widgets.circuits import load_graph

    model, tokenizer = tiny_models.llama_lm()
    graph = attribution_graph(model, tokenizer, PROMPT, fitted(model, tokenizer), batch_size=16, scan="tiny",
                              progress=False)  # fmt: skip
    pruned = graph.prune()
    again = load_graph(pruned.to_json(tmp_path, slug="tiny"))
    assert again.node_ids == pruned.node_ids and again.prompt_tokens == graph.prompt_tokens
    np.testing.assert_allclose(again.adjacency, pruned.adjacency, atol=1e-6)
    view = graph.widget()
    assert type(view).__name__ == "CircuitView"


# ---------------------------------------------------------------------------------------------- cross-layer transcoders
def random_clt(model, n=48, seed=0, cross=True):
    """A random JumpReLU cross-layer transcoder for ``model`` (read at mlp_in); without ``cross`` its features write
    only to their own layer."""
    g = torch.Generator().manual_seed(seed)
    d, n_layers = model.config.hidden_size, model.config.num_hidden_layers
    W_dec = [torch.randn(n, n_layers - i, d, generator=g) / 6 for i in range(n_layers)]
    if not cross:
        for W in W_dec:
            W[:, 1:] = 0.0
    return CrossLayerTranscoderSet.from_weights(
        W_enc=[torch.randn(n, d, generator=g) / 4 for _ in range(n_layers)],
        b_enc=[torch.randn(n, generator=g) * 0.1 for _ in range(n_layers)],
        W_dec=W_dec,
        b_dec=[torch.randn(d, generator=g) * 0.05 for _ in range(n_layers)],
        threshold=[torch.rand(n, generator=g) * 0.3 for _ in range(n_layers)],
    )


class CLTReference(Reference):
    """The local replacement model of a cross-layer transcoder, written from the definition: layer l's MLP output is
    Σ_{s ≤ l} a[s] W_dec[s][:, l − s] + b_dec[l] + error[l] (no skip term); the recording, the frozen runs' reads and
    the node values are Reference's."""

    def __init__(self, model, ids, clt):
        self.model, self.ids, self.n_layers, self.live_skip, self.tcs = model, ids, clt.n_layers, False, clt
        self.clt_w = [{k: v.clone() for k, v in clt.replacement_weights(layer).items()} for layer in clt.layers]
        self.w = self.clt_w  # values() reads W_enc and b_enc
        seen = {}
        handles = [
            mlp_of(model, layer).register_forward_hook(
                lambda m, a, out, layer=layer: seen.__setitem__(layer, out.detach()[0])
            )
            for layer in range(self.n_layers)
        ]
        try:
            self.read()
        finally:
            for handle in handles:
                handle.remove()
        self.acts = []
        for layer, w in enumerate(self.clt_w):
            pre = self.inputs[layer] @ w["W_enc"].T + w["b_enc"]
            acts = pre * (pre > w["threshold"])
            acts[0] = 0.0
            self.acts.append(acts)
        self.errors, self.base = [], []
        for layer in range(self.n_layers):
            error = seen[layer] - self.predict(self.acts, layer)
            error[0] = 0.0
            self.errors.append(error)
            self.base.append(seen[layer][0])

    def predict(self, acts, layer):
        out = self.clt_w[layer]["b_dec"].clone()
        for source in range(layer + 1):
            out = out + acts[source] @ self.clt_w[source]["W_dec"][:, layer - source]
        return out

    def run(self, acts, errors, tokens_on=True):
        def mlp_edit(layer):
            def edit(hidden):
                out = self.predict(acts, layer) + errors[layer]
                out[0] = self.base[layer]
                return out[None].expand_as(hidden).clone()

            return edit

        edits = {f"layer:{layer}.mlp_out": mlp_edit(layer) for layer in range(self.n_layers)}
        if not tokens_on:
            edits["layer:0.resid_pre"] = torch.zeros_like
        return self.read(edits, freeze=True)


def test_cross_layer_direct_effects_close_and_predict_constrained_interventions():
    model, tokenizer = tiny_models.llama_lm()
    clt = random_clt(model)
    before = model_fingerprint(model, tokenizer)
    graph = attribution_graph(model, tokenizer, PROMPT, clt, batch_size=16, progress=False)
    assert model_fingerprint(model, tokenizer) == before and graph.provenance.settings["cross_layer"]
    ref = CLTReference(model, torch.as_tensor(graph.token_ids)[None], clt)
    found = [(layer, pos, f) for layer in range(clt.n_layers) for pos, f in torch.nonzero(ref.acts[layer]).tolist()]
    assert [tuple(row) for row in graph.features.tolist()] == found and len(found) > 20
    np.testing.assert_allclose(graph.activations, [float(ref.acts[l][p, f]) for l, p, f in found], rtol=1e-5)
    full = ref.values(ref.run(ref.acts, ref.errors), graph)
    np.testing.assert_allclose(full, ref.values(ref.read(), graph), atol=1e-4)
    zeros = [torch.zeros_like(a) for a in ref.acts]
    constant = ref.values(ref.run(zeros, [torch.zeros_like(e) for e in ref.errors], tokens_on=False), graph)
    closure = graph.adjacency[target_rows(graph)].sum(1) + constant - full
    assert np.abs(closure).max() <= 1e-4 * max(1.0, np.abs(full).max()), np.abs(closure).max()
    # layer-0 features write to both MLP outputs: zeroing one moves every target by -A[t, s] (both writes gone); in
    # two blocks, a layer-1 write reaches the logits only from the last position
    n_feat = len(graph.features)
    last = len(graph.token_ids) - 1
    layer0 = np.flatnonzero((graph.features[:, 0] == 0) & (graph.features[:, 1] == last))
    assert len(layer0) >= 3
    influence = np.abs(graph.adjacency[:, :n_feat]).sum(0)
    for s in [*layer0[np.argsort(-influence[layer0])[:3]], int(np.argmax(influence))]:
        assert_zeroing_moves_by_minus_column(ref, graph, full, s)
    assert model_fingerprint(model, tokenizer) == before


def test_a_cross_layer_transcoder_writing_to_its_own_layer_only_is_a_per_layer_set():
    model, tokenizer = tiny_models.llama_lm()
    clt = random_clt(model, cross=False)
    plt = TranscoderSet({layer: clt[layer] for layer in clt.layers}, input_point="mlp_in")
    ours = attribution_graph(model, tokenizer, PROMPT, clt, batch_size=16, progress=False)
    per_layer = attribution_graph(model, tokenizer, PROMPT, plt, batch_size=16, progress=False)
    assert ours.features.tolist() == per_layer.features.tolist()
    np.testing.assert_allclose(ours.adjacency, per_layer.adjacency, atol=1e-5)
    crossing = attribution_graph(model, tokenizer, PROMPT, random_clt(model), batch_size=16, progress=False)
    assert ours.features.tolist() == crossing.features.tolist()  # same encoders: the writes to layer 1 differ
    assert not np.allclose(ours.adjacency, crossing.adjacency, atol=1e-3)
