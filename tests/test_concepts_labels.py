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
    interpret_concepts,
    label_auroc,
)
from interp_widgets.concepts.labels import clean_label, marked_context
from interp_widgets.widgets import ConceptBrowser

TEXTS = ["The soup was delicious and the bread was fresh.", "Heavy rain is expected in London tomorrow.",
         "The pasta tasted wonderful.", "Snow and wind will hit the north tonight.",
         "Dessert was sweet and creamy.", "Storms are coming this weekend."]


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
