"""Linear probes: grouped cross-validation (checked against scikit-learn), honest controls, directions as concepts."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, cross_val_score

from interp_widgets.concepts import (
    ConceptModel,
    DirectionConcepts,
    LinearProbe,
    collect_activations,
    concept_importance,
    interpret_concepts,
    probe_layers,
)

TEXTS = [f"{'a good' if i % 2 else 'a bad'} film number {i} for the {'night' if i % 3 else 'day'}" for i in range(30)]
LABELS = [i % 2 for i in range(30)]


@pytest.fixture(scope="module")
def store(bert_classifier):
    model, tokenizer = bert_classifier
    return collect_activations(model, tokenizer, TEXTS, layer="layer:1", progress=False)


def test_logistic_probe_matches_sklearn_grouped_cross_validation(store):
    probe = LinearProbe("logistic", cv=5).fit(store, LABELS)
    y = np.asarray(LABELS)[store.text_ids]
    expected = cross_val_score(
        LogisticRegression(max_iter=2000), store.to_numpy(), y, groups=store.text_ids, cv=GroupKFold(5)
    )
    assert probe.report_["cv_accuracy"] == pytest.approx(expected.mean(), abs=1e-12)
    assert probe.report_["groups"] == 30 and probe.report_["rows"] == len(store) == len(y)
    assert probe.report_["majority_baseline"] == pytest.approx(max(np.bincount(y)) / len(y))
    for train, test in GroupKFold(5).split(store.to_numpy(), y, groups=store.text_ids):  # no text on both sides
        assert not set(store.text_ids[train]) & set(store.text_ids[test])


@pytest.mark.parametrize("kind", ["logistic", "svm", "mean_difference"])
def test_planted_direction_is_found_and_controls_stay_at_chance(kind):
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(60), 5)
    y_text = rng.integers(0, 2, 60)
    y = y_text[groups]
    planted = rng.normal(size=16)
    planted /= np.linalg.norm(planted)
    X = rng.normal(size=(300, 16)) + 1.5 * np.outer(2 * y - 1, planted)
    probe = LinearProbe(kind, cv=5).fit(X, y, groups=groups)
    assert probe.report_["cv_accuracy"] > 0.9
    assert abs(probe.report_["random_label_accuracy"] - 0.5) < 0.15  # shuffled across texts: chance
    cosine = abs(float(probe.direction_[0] @ planted))
    assert cosine > 0.9, cosine


def test_probe_direction_works_as_a_concept(store, bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    probe = LinearProbe("mean_difference", cv=3).fit(store, LABELS)
    concepts = probe.as_concepts(store)
    assert isinstance(concepts, DirectionConcepts) and concepts.layer_ == "layer:1"
    coefficient = concepts.transform(store[:4])[:, 0]
    expected = (store[:4] - store.to_numpy().mean(0)) @ probe.direction_[0]
    np.testing.assert_allclose(coefficient, expected, atol=1e-4)
    interpretation = interpret_concepts(concepts, store, progress=False)
    assert interpretation.n_concepts == 1 and interpretation.to_dataframe().shape[0] == 1
    importance = concept_importance(concepts, model, tokenizer, "a good film", layer="layer:1")
    assert np.isfinite(importance.to_dataframe().select_dtypes("number").to_numpy()).all()
    again = ConceptModel.load(concepts.save(tmp_path / "probe.safetensors"))
    np.testing.assert_array_equal(again.transform(store[:4]), concepts.transform(store[:4]))
    browser = interpretation.widget(texts=TEXTS[:2], concept_model=concepts, model=model, tokenizer=tokenizer)
    assert type(browser).__name__ == "ConceptBrowser"  # the browser takes it


def test_layer_sweep_table_and_chart(bert_classifier):
    model, tokenizer = bert_classifier
    sweep = probe_layers(model, tokenizer, TEXTS, LABELS, layers=[0, 1], kind="logistic", cv=3)
    frame = sweep.to_dataframe()
    assert frame.layer.tolist() == ["layer:0", "layer:1"]
    assert ((frame.cv_accuracy >= 0) & (frame.cv_accuracy <= 1)).all()
    assert sweep.chart().to_dict()["mark"]["type"] == "line"
    assert "<table" in sweep._repr_html_()


@pytest.mark.parametrize(
    "labels, message",
    [
        ([0, 1, 0], r"3 labels for \d+ rows from 30 texts; give one label per row or one per text"),
        ([1] * 30, r"one class only"),
        ([i % 3 for i in range(30)], None),
    ],
)
def test_bad_labels(store, labels, message):
    if message is None:  # three classes: mean_difference refuses and says what to use
        with pytest.raises(ValueError, match="kind='mean_difference' needs two classes.*kind='logistic'"):
            LinearProbe("mean_difference").fit(store, labels)
        return
    with pytest.raises(ValueError, match=message):
        LinearProbe().fit(store, labels)


def test_unknown_kind_and_bad_directions(store):
    with pytest.raises(ValueError, match="kind"):
        LinearProbe("forest").fit(store, LABELS)
    with pytest.raises(ValueError, match="the directions have 5 features but the activations have 32"):
        DirectionConcepts(1, directions=np.ones((1, 5))).fit(store)
