"""Labellers without a network: token statistics, a local LM (SmolLM2), lazy labelling in the browser, and the
embedding AUROC that scores labels."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from interp_widgets.concepts import (
    LMLabeler,
    PCAConcepts,
    TokenLabeler,
    collect_activations,
    compare_labelers,
    context_windows,
    interpret_concepts,
    label_auroc,
)
from interp_widgets.concepts.labels import clean_label, marked_context
from interp_widgets.widgets import ConceptBrowser

TEXTS = [
    "The soup was delicious and the bread was fresh.",
    "Heavy rain is expected in London tomorrow.",
    "The pasta tasted wonderful.",
    "Snow and wind will hit the north tonight.",
    "Dessert was sweet and creamy.",
    "Storms are coming this weekend.",
]


@pytest.fixture(scope="module")
def interp_and_store(smollm2):
    model, tokenizer = smollm2
    store = collect_activations(model, tokenizer, TEXTS, layer="layer:15", progress=False)
    concepts = PCAConcepts(3).fit(store)
    return interpret_concepts(concepts, store, k=4, progress=False), store, concepts


def test_lm_labeller_is_lazy_and_cached_and_shown_with_its_source(interp_and_store, smollm2):
    interp, _, _ = interp_and_store
    calls = []
    labeler = LMLabeler(*smollm2, n_examples=3, max_new_tokens=8)

    def counting(concept, examples):
        calls.append(concept)
        return labeler(concept, examples)

    counting.name = labeler.name
    interp.relabel(counting, lazy=True)
    assert calls == [] and interp.unlabelled == [0, 1, 2]
    browser = ConceptBrowser(interp, page_size=1)  # the first page holds concept 0 only
    assert calls == [0] and interp.unlabelled == [1, 2]
    detail = browser.details["0"]
    assert detail["label"] == interp.labels[0] and detail["label_source"] == labeler.name
    assert 0 < len(detail["label"].split()) <= labeler.max_words
    browser.selected_concept = 0
    assert calls == [0]  # cached: asked once
    browser.selected_concept = 2
    assert calls == [0, 2] and interp.unlabelled == [1]


def test_lm_prompt_marks_the_firing_token_and_uses_the_chat_template(interp_and_store, smollm2):
    interp, _, _ = interp_and_store
    labeler = LMLabeler(*smollm2, n_examples=2)
    prompt = labeler.prompt(interp.examples[0])
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    assert prompt.count("[[") == 1 + 2 and marked_context(interp.examples[0][0]) in prompt


def test_token_labeller_and_answer_cleaning():
    assert TokenLabeler(2)(0, [{"token": " Rain"}, {"token": "rain"}, {"token": "snow"}]) == "rain / snow"
    assert clean_label("Label: 'Weather forecasts.'\nExplanation: ...") == "Weather forecasts"
    assert clean_label("The feature is: food and drink words here today", max_words=3) == "food and drink"
    with pytest.raises(TypeError, match="needs a causal LM with generate"):
        LMLabeler(object(), None)


def test_label_auroc_matches_sklearn_on_real_embeddings(interp_and_store):
    from interp_widgets.demo import sentence_embedder

    embed = sentence_embedder()
    held_out = ["Fresh bread and hot soup.", "A tasty dinner.", "Rain and wind tonight.", "Thunder storms ahead."]
    coefficients = np.array([[1.0, 0.0], [0.7, 0.0], [0.0, 0.9], [0.0, 0.4]])
    scores = label_auroc(["food", "weather"], coefficients, held_out, embed)
    vectors = embed(held_out + ["food", "weather"])
    for c in range(2):
        expected = roc_auc_score(coefficients[:, c] > 0, vectors[:4] @ vectors[4 + c])
        assert scores[c] == pytest.approx(expected)
    assert (scores > 0.5).all()
    assert np.isnan(label_auroc(["", "x"], coefficients, held_out, embed)[0])
    with pytest.raises(ValueError, match=r"coefficients must be \(contexts, concepts\) = \(4, 3\)"):
        label_auroc(["a", "b", "c"], coefficients, held_out, embed)


HELD_OUT = [
    "Fresh bread and a hot bowl of soup for lunch.",
    "Thunder and heavy rain are forecast for Friday.",
    "The cake was rich, sweet and very good.",
    "Cold wind and snow over the hills tonight.",
    "We ordered noodles, rice and green tea.",
    "Fog will clear by noon, then sunshine.",
]


def test_lm_against_token_labels_on_held_out_contexts(interp_and_store, smollm2):
    """The benchmark's LM-versus-token comparison at small size: the same concepts, labels and held-out contexts
    scored by label_auroc with MiniLM; the attention sinks do not count as firing."""
    from interp_widgets.demo import sentence_embedder

    interp, _, concepts = interp_and_store
    model, tokenizer = smollm2
    held = collect_activations(model, tokenizer, HELD_OUT, layer="layer:15", progress=False)
    embed = sentence_embedder()
    token, lm = TokenLabeler(), LMLabeler(model, tokenizer, n_examples=2, max_new_tokens=6)
    assert lm.name == "LM (HuggingFaceTB/SmolLM2-135M-Instruct)"
    result = compare_labelers([token, lm], concepts, interp, held, embed, n_concepts=3, window=4, min_contexts=2)

    contexts, bounds = context_windows(held, window=4)
    X = held.to_numpy()
    norms = np.linalg.norm(X, axis=1)
    ordinary = norms < 10 * np.median(norms)
    assert not ordinary[[held.text_rows(t)[0] for t in range(len(HELD_OUT))]].any()  # the sinks: left out
    coefficients = np.stack([concepts.transform(X[a:b][ordinary[a:b]]).max(0) for a, b in bounds])
    fires = (coefficients > 0).sum(0)
    eligible = [c for c in range(3) if 2 <= fires[c] <= 0.5 * len(contexts)]
    assert result["contexts"] == len(contexts) and result["eligible"] == len(eligible) > 0
    assert set(result["concepts"]) <= set(eligible) and len(result["concepts"]) == len(eligible)
    chosen = result["concepts"]
    assert result[token.name]["labels"] == [token(c, interp.examples[c]) for c in chosen]
    for name in (token.name, lm.name):
        labels = result[name]["labels"]
        assert all(isinstance(label, str) and label.strip() for label in labels)
        expected = label_auroc(labels, coefficients[:, chosen], contexts, embed)
        np.testing.assert_allclose(result[name]["auroc"], expected)
        assert result[name]["mean"] == pytest.approx(np.nanmean(expected))
    difference = result[lm.name]["auroc"] - result[token.name]["auroc"]
    np.testing.assert_allclose(result["difference"], difference[np.isfinite(difference)])
    assert result["difference_ci"][0] <= result["difference_mean"] <= result["difference_ci"][1]
    assert result["higher"] == {token.name: int((difference < 0).sum()), lm.name: int((difference > 0).sum())}

    with pytest.raises(ValueError, match="no live concept fires in 40 to"):
        compare_labelers([token], concepts, interp, held, embed, window=4, min_contexts=40)
    with pytest.raises(ValueError, match="distinct names"):
        compare_labelers([token, TokenLabeler(2)], concepts, interp, held, embed, window=4, min_contexts=2)
    with pytest.raises(TypeError, match="returned a NoneType; a labeller returns a str"):
        compare_labelers([lambda c, examples: None], concepts, interp, held, embed, window=4, min_contexts=2)
