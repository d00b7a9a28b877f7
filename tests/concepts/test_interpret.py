"""Interpretation against brute force over the store; importance against finite differences; model untouched."""

from __future__ import annotations

import copy
import json
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.layers import capture, hooks
from interp_widgets.concepts import (
    ConceptImportance,
    ConceptInterpretation,
    NMFConcepts,
    PCAConcepts,
    SparseAutoencoder,
    TextConcepts,
    collect_activations,
    concept_importance,
    interpret_concepts,
    label_from_tokens,
    mean_concept_importance,
    text_concepts,
    vocabulary_projection,
)
from interp_widgets.concepts.interpret import FLAT_ATTRIBUTES
from interp_widgets.demo import corpus
from tests.conftest import model_fingerprint

TEXTS = corpus()[:60]


pytestmark = pytest.mark.usefixtures("quiet_single_thread")  # tests/concepts/conftest.py


@pytest.fixture(scope="module")
def lm_concepts(gpt2_lm):
    model, tokenizer = gpt2_lm
    store = collect_activations(model, tokenizer, TEXTS, layer=1, progress=False)
    concepts = NMFConcepts(6, nonnegative="shift", estimator_params={"random_state": 0, "max_iter": 300}).fit(store)
    return store, concepts


def test_interpretation_matches_brute_force(gpt2_lm, lm_concepts, tmp_path):
    model, tokenizer = gpt2_lm
    store, concepts = lm_concepts
    before = model_fingerprint(model, tokenizer)
    interp = interpret_concepts(
        concepts, store, k=4, window=3, bins=12, model=model, tokenizer=tokenizer, rows_per_chunk=500, progress=False
    )
    assert model_fingerprint(model, tokenizer) == before
    C = concepts.transform(store[:]).astype(np.float64)
    for c in range(concepts.n_concepts):
        best = np.sort(C[:, c])[::-1][:4]  # compare values: identical contexts tie (GPT-2 at position 0)
        np.testing.assert_allclose(interp.top_values[c], best, rtol=1e-6)
        np.testing.assert_allclose(C[interp.top_rows[c], c], best, rtol=1e-6)
        assert len(set(interp.top_rows[c].tolist())) == 4
        assert interp.hist_counts[c].sum() == (C[:, c] != 0).sum()
        assert interp.hist_edges[c][0] == pytest.approx(C[:, c].min()) and interp.hist_edges[c][-1] == pytest.approx(
            C[:, c].max()
        )
        per_text = pd.Series(C[:, c]).groupby(store.text_ids).max().sort_values(ascending=False, kind="stable")
        np.testing.assert_allclose(interp.top_text_values[c], per_text.values[:4], rtol=1e-6)
        np.testing.assert_allclose(per_text.loc[interp.top_texts[c]].values, per_text.values[:4], rtol=1e-6)
        for example in interp.examples[c]:
            text = store.texts[example["text_id"]]
            spanless = set(store.info["spanless_tokens"].values())  # e.g. GPT-2's lone "Ġ" with an empty span
            assert "".join(p for p in example["context"] if p not in spanless) in text
            assert example["context_activations"][example["center"]] == pytest.approx(example["activation"], rel=1e-5)
            assert example["token"] == store.tokens([example["row"]])[0]
        assert interp.labels[c] == label_from_tokens(interp.top_tokens(c))
    np.testing.assert_allclose(interp.density, (C != 0).mean(0))
    np.testing.assert_allclose(interp.mean, C.mean(0), rtol=1e-5, atol=1e-7)
    # vocabulary projection through GPT-2's (tied) output embedding, against a direct matrix product
    logits = concepts.components_ @ model.get_output_embeddings().weight.detach().numpy().T
    top = np.argsort(-logits, axis=1)[:, :10]
    assert interp.vocab_tokens == [[tokenizer.decode([i]) for i in row.tolist()] for row in top]
    assert not any("Ġ" in t for row in interp.vocab_tokens for t in row)  # decoded text, not byte-level BPE
    np.testing.assert_allclose(interp.vocab_logits, np.take_along_axis(logits, top, 1), rtol=1e-5)

    frame = interp.to_dataframe()
    assert list(frame.columns) == [
        "concept",
        "label",
        "density",
        "dead",
        "mean",
        "max",
        "min",
        "top_tokens",
        "vocabulary",
    ]
    examples = interp.examples_dataframe(2)
    assert len(examples) == 4 and (examples["concept"] == 2).all()
    assert interp.top_texts_dataframe(1)["text"].tolist() == [TEXTS[i] for i in interp.top_texts[1]]
    assert interp.histogram(0)["count"].sum() == interp.hist_counts[0].sum()
    assert interp.chart(0).to_dict()["mark"]["type"] == "bar"
    assert interp.chart().to_dict()["data"]
    detail = json.loads(json.dumps(interp.detail(3)))  # JSON-ready
    assert detail["label"] == interp.labels[3] and detail["examples"] == interp.examples[3]
    assert detail["histogram"]["counts"] == interp.hist_counts[3].tolist()
    assert [v["token"] for v in detail["vocabulary"]] == interp.vocab_tokens[3]
    assert [t["text_id"] for t in detail["top_texts"]] == interp.top_texts[3].tolist()
    loaded = ConceptInterpretation.load(interp.save(tmp_path / "interp.safetensors"))
    assert loaded.labels == interp.labels and loaded.examples == interp.examples
    np.testing.assert_array_equal(loaded.hist_counts, interp.hist_counts)
    assert loaded.vocab_tokens == interp.vocab_tokens

    interp.relabel(lambda c, examples: f"concept {c}: {examples[0]['token']}", source="test")
    assert interp.labels[0] == f"concept 0: {interp.examples[0][0]['token']}" and interp.label_source == "test"
    with pytest.raises(TypeError, match="must return a str"):
        interp.relabel(lambda c, examples: 3)


def test_an_interpretation_is_a_few_parts_read_through_flat_names(lm_concepts):
    store, concepts = lm_concepts
    interp = interpret_concepts(concepts, store, k=3, window=1, bins=4, progress=False)
    assert len(fields(ConceptInterpretation)) <= 12
    flat = {name: getattr(interp, name) for name in FLAT_ATTRIBUTES}
    again = ConceptInterpretation.from_flat(**flat)
    assert again.labels == interp.labels and again.examples == interp.examples and again.vocabulary is None
    np.testing.assert_array_equal(again.hist_counts, interp.hist_counts)
    assert interp.density is interp.stats.density and interp.top_rows is interp.top_examples.rows
    with pytest.raises(AttributeError):
        interp.labels = ["x"] * interp.n_concepts  # read-only: relabel() or replace() change labels

    live = int(np.flatnonzero(~interp.dead)[0])
    lazy = interp.relabel(lambda c, examples: f"c{c}", source="lazy", lazy=True)
    changed = lazy.replace(params={"k": 99})
    assert changed.params == {"k": 99} and interp.params["k"] == 3
    assert changed.unlabelled == lazy.unlabelled and live in lazy.unlabelled  # untouched parts are kept, labeller too
    assert changed.ensure_label(live) == f"c{live}" and live not in changed.unlabelled and live in lazy.unlabelled
    renamed = lazy.replace(labels=["by hand"] * interp.n_concepts, label_source="hand")
    assert renamed.unlabelled == [] and renamed.label_source == "hand" and renamed.ensure_label(live) == "by hand"

    with pytest.raises(ValueError, match="one entry per concept"):
        interp.replace(labels=["x"])
    with pytest.raises(TypeError, match="unknown concept interpretation values"):
        ConceptInterpretation.from_flat(**flat, colour="red")
    with pytest.raises(TypeError, match=r"missing concept interpretation values \['density'\]"):
        ConceptInterpretation.from_flat(**{k: v for k, v in flat.items() if k != "density"})
    with pytest.raises(ValueError, match="go together"):
        ConceptInterpretation.from_flat(**{**flat, "vocab_tokens": [["a"]] * interp.n_concepts})


def test_label_from_tokens_counts_then_ranks():
    assert label_from_tokens(["bad", " Bad", "awful", "bad", "dull"]) == "bad / awful / dull"
    assert label_from_tokens(["x", "y", "y"], n=1) == "y"
    assert label_from_tokens([" ", ""]) == "(no tokens)"


def test_interpretation_errors_and_classifier_without_vocabulary(bert_classifier):
    model, tokenizer = bert_classifier
    store = collect_activations(model, tokenizer, TEXTS[:20], layer=0, progress=False)
    concepts = PCAConcepts(4).fit(store)
    interp = interpret_concepts(concepts, store, k=3, model=model, tokenizer=tokenizer, progress=False)
    assert interp.vocab_tokens is None  # a classifier has no output embedding
    with pytest.raises(ValueError, match="no output embedding"):
        vocabulary_projection(concepts, model, tokenizer)
    with pytest.raises(ValueError, match="fitted on 4 features"):
        interpret_concepts(PCAConcepts(2).fit(np.random.default_rng(0).normal(size=(10, 4))), store, progress=False)
    with pytest.raises(TypeError, match="ActivationStore"):
        interpret_concepts(concepts, store[:], progress=False)
    with pytest.raises(ValueError, match="not fitted"):
        interpret_concepts(PCAConcepts(2), store, progress=False)
    with pytest.raises(ValueError, match="out of range"):
        interp.examples_dataframe(9)


def test_text_concepts_match_store_rows(gpt2_lm, lm_concepts, tmp_path):
    model, tokenizer = gpt2_lm
    store, concepts = lm_concepts
    result = text_concepts(concepts, model, tokenizer, TEXTS[5])
    rows = store.text_rows(5)
    np.testing.assert_allclose(result.coefficients, concepts.transform(store[rows]), rtol=1e-4, atol=1e-5)
    assert result.tokens == store.tokens(rows)
    top = result.active_concepts(2, top=3)
    assert [c for c, _ in top] == [
        int(i) for i in np.argsort(-result.coefficients[2])[:3] if result.coefficients[2, i] != 0
    ]
    assert len(result.to_dataframe()) == len(rows) * concepts.n_concepts
    assert result.chart([0, 1]).to_dict()["mark"]["type"] == "rect"
    loaded = TextConcepts.load(result.save(tmp_path / "tc.safetensors"))
    np.testing.assert_array_equal(loaded.coefficients, result.coefficients)


def patched_scores(model, adapter, layer, ids, decode, coefficients, residual):
    """Logits with the layer output replaced by decode(coefficients) + residual."""

    def hook(module, inputs, output):
        hidden = decode(coefficients)[None] + residual
        return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

    with torch.no_grad(), hooks(adapter.model, {layer: hook}):
        return model(input_ids=ids).logits


@pytest.mark.parametrize("case", ["pca_bert_classifier", "sae_gpt2_lm"])
def test_importance_matches_finite_differences(case, bert_classifier, gpt2_lm):
    base, tokenizer = bert_classifier if case.endswith("classifier") else gpt2_lm
    model = copy.deepcopy(base).double()  # float64 so finite differences resolve 1e-3 relative errors
    store = collect_activations(model, tokenizer, TEXTS[:30], layer=1, progress=False)
    if case.startswith("pca"):
        concepts = PCAConcepts(8).fit(store)
        target = "positive"
    else:
        concepts = SparseAutoencoder(48, k=6, max_epochs=3, progress=False).fit(store)
        target = None
    text = "The service was slow, but the soup was wonderful."
    before = model_fingerprint(model, tokenizer)
    result = concept_importance(concepts, model, tokenizer, text, target=target)
    assert model_fingerprint(model, tokenizer) == before
    adapter = ModelAdapter(model, tokenizer)
    ids = torch.as_tensor(adapter.encode(text).input_ids)[None]
    with torch.no_grad(), capture(adapter.model, [store.layer]) as captured:
        logits = model(input_ids=ids).logits
    hidden = captured[store.layer][0][0]
    C = torch.as_tensor(concepts.transform(hidden.float().numpy()), dtype=torch.float64)
    residual = (hidden - concepts.decode_torch(C))[None]
    np.testing.assert_allclose(result.coefficients, C.numpy(), rtol=1e-6)
    score = (
        (lambda out: out[0, result.target_ids[0]])
        if case.endswith("classifier")
        else (lambda out: out[0, -1, result.target_ids[0]])
    )
    assert result.target_scores[0] == pytest.approx(float(score(logits)), rel=1e-9)  # residual kept: same output
    gradients = result.gradients[0]
    picks = np.dstack(np.unravel_index(np.argsort(-np.abs(gradients), axis=None)[:6], gradients.shape))[0]
    eps = 1e-5
    for t, j in picks:
        up, down = C.clone(), C.clone()
        up[t, j] += eps
        down[t, j] -= eps
        f_up = score(patched_scores(model, adapter, store.layer, ids, concepts.decode_torch, up, residual))
        f_down = score(patched_scores(model, adapter, store.layer, ids, concepts.decode_torch, down, residual))
        numeric = float(f_up - f_down) / (2 * eps)
        assert abs(numeric - gradients[t, j]) <= 1e-3 * abs(gradients[t, j]), (t, j, numeric, gradients[t, j])
    per_concept = result.per_concept()
    np.testing.assert_allclose(per_concept, (gradients * result.coefficients).sum(0))
    np.testing.assert_allclose(
        result.per_concept(include_special=False), (gradients * result.coefficients)[~result.special_mask].sum(0)
    )
    ranking = result.ranking()
    assert np.all(np.diff(np.abs(ranking["contribution"].to_numpy())) <= 1e-12)
    assert result.chart().to_dict()["mark"]["type"] == "bar"


def test_importance_several_targets_persistence_and_errors(bert_classifier, bert_masked_lm, gpt2_lm, tmp_path):
    model, tokenizer = bert_classifier
    store = collect_activations(model, tokenizer, TEXTS[:20], layer=1, progress=False)
    concepts = PCAConcepts(5).fit(store)
    result = concept_importance(concepts, model, tokenizer, "Not bad at all.", target=["negative", 2])
    assert result.gradients.shape == (2, len(result.tokens), 5) and result.target_labels == ["negative", "positive"]
    assert not np.allclose(result.per_concept("negative"), result.per_concept("positive"))
    frame = result.to_dataframe()
    assert set(frame["target"]) == {"negative", "positive"} and len(frame) == 2 * len(result.tokens) * 5
    loaded = ConceptImportance.load(result.save(tmp_path / "imp.safetensors"))
    np.testing.assert_array_equal(loaded.gradients, result.gradients)
    assert loaded.target_labels == result.target_labels
    texts = ["Not bad at all.", "Awful food.", "Lovely staff and a quiet room."]
    mean = mean_concept_importance(concepts, model, tokenizer, texts, target="positive", progress=False)
    expected = np.mean(
        [concept_importance(concepts, model, tokenizer, t, target="positive").per_concept() for t in texts], axis=0
    )
    np.testing.assert_allclose(mean.set_index("concept").loc[np.arange(5), "mean_contribution"], expected)
    assert np.all(np.diff(mean["mean_abs_contribution"].to_numpy()) <= 0)
    with pytest.raises(ValueError, match="one target"):
        mean_concept_importance(concepts, model, tokenizer, texts, target=[0, 1], progress=False)
    with pytest.raises(ValueError, match="fitted on layer layer:1, not layer:0"):
        concept_importance(concepts, model, tokenizer, "Fine.", layer=0)
    with pytest.raises(ValueError, match="pass layer="):
        concept_importance(PCAConcepts(3).fit(store[:]), model, tokenizer, "Fine.")
    with pytest.raises(ValueError, match="unknown label"):
        concept_importance(concepts, model, tokenizer, "Fine.", target="great")
    with pytest.raises(TypeError, match="fitted ConceptModel"):
        concept_importance("pca", model, tokenizer, "Fine.")
    masked, masked_tokenizer = bert_masked_lm
    with pytest.raises(ValueError, match="classifiers and causal LMs"):
        concept_importance(concepts, masked, masked_tokenizer, "Fine.")
    lm, lm_tokenizer = gpt2_lm
    lm_concepts = PCAConcepts(4).fit(collect_activations(lm, lm_tokenizer, TEXTS[:10], layer=0, progress=False))
    with pytest.raises(ValueError, match="single token"):
        concept_importance(lm_concepts, lm, lm_tokenizer, "The food", target=" wonderful soup")
    with pytest.raises(ValueError, match="not a token id"):
        concept_importance(lm_concepts, lm, lm_tokenizer, "The food", target=10**6)


def test_dead_concepts_have_no_contexts_no_label_and_are_hidden(bert_classifier):
    """A concept that never fires is not labelled from the first rows of a tie at zero (found on SmolLM2)."""
    from interp_widgets.concepts import DirectionConcepts, collect_activations, interpret_concepts
    from interp_widgets.widgets import ConceptBrowser

    model, tokenizer = bert_classifier
    store = collect_activations(
        model, tokenizer, ["tomorrow in london", "a good film", "rain again"], layer=1, progress=False
    )

    class HalfDead(DirectionConcepts):  # concept 1 is ReLU-clipped to zero everywhere
        name = "test_half_dead"

        def _transform(self, X):
            C = super()._transform(X)
            C[:, 1] = 0.0
            return C

    directions = np.random.default_rng(0).normal(size=(2, store.dim)).astype(np.float32)
    concepts = HalfDead(2, directions=directions).fit(store)
    interp = interpret_concepts(concepts, store, k=4, progress=False)
    assert interp.dead.tolist() == [False, True]
    assert interp.labels[1] == "" and interp.examples[1] == [] and (interp.top_rows[1] == -1).all()
    assert (interp.top_texts[1] == -1).all() and interp.labels[0]
    assert interp.relabel(lambda c, ex: "x").labels == ["x", ""]  # a labeller is never asked about a dead concept
    with pytest.raises(ValueError, match="labeler returned no text for concept 0"):
        interp.relabel(lambda c, ex: "  ")
    browser = ConceptBrowser(interp)
    assert browser.hide_dead and browser.visible_order() == [0]
    assert interp.to_dataframe()["dead"].tolist() == [False, True]


def test_early_stopped_sae_bar_finishes(bert_classifier):
    from tqdm.auto import tqdm

    from interp_widgets.concepts import SparseAutoencoder, collect_activations

    model, tokenizer = bert_classifier
    store = collect_activations(model, tokenizer, ["a good film", "a bad film", "fine"] * 4, layer=1, progress=False)
    seen = []
    original = tqdm.close

    def close(bar):
        seen.append((bar.n, bar.total, str(bar.postfix)))
        return original(bar)

    tqdm.close = close
    try:
        sae = SparseAutoencoder(8, max_epochs=200, patience=1, min_delta=0.5, batch_size=16, progress=True).fit(store)
    finally:
        tqdm.close = original
    assert sae.fit_info_["stopped_early"]
    n, total, postfix = next(item for item in seen if "stopped early" in item[2])
    assert n == total == sae.fit_info_["epochs"] < 200
