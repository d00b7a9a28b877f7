"""Multi-label centroid and regression probes: scores equal Interpreto 0.5.2's on the same data, targets, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreto.concepts import (
    CosineCentroidProbe,
    DiagonalMahalanobisCentroidProbe,
    DotProductCentroidProbe,
    SqL2CentroidProbe,
    SVDDCentroidProbe,
)
from interpreto.concepts import LinearRegressionProbe as InterpretoRegression
from interpreto.concepts.probes import Standardization, Whitening, bias_calibrators
from sklearn.base import clone

from interp_widgets.concepts import CentroidProbe, DirectionConcepts, LinearProbe, LinearRegressionProbe

INTERPRETO = {
    "dot": DotProductCentroidProbe,
    "cosine": CosineCentroidProbe,
    "sql2": SqL2CentroidProbe,
    "diag_mahalanobis": DiagonalMahalanobisCentroidProbe,
}
CALIBRATORS = {
    None: None,
    "prevalence": bias_calibrators.prevalence_bias,
    "midpoint": bias_calibrators.midpoint_bias,
    "fpr": bias_calibrators.fpr_bias,
    "bce": bias_calibrators.bce_bias,
    "lda": bias_calibrators.lda_shared_var_bias,
}
NORMALIZATIONS = {None: lambda: None, "standardization": Standardization, "whitening": Whitening}


def _data(seed=0, n=90, d=12, c=3):
    """Three overlapping concepts (a row may hold several, or none), each shifting its own features."""
    rng = np.random.default_rng(seed)
    y = (rng.random((n, c)) < [0.3, 0.5, 0.2]).astype(np.float32)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d) + 0.7
    X[:, :c] += 2.5 * y
    return X.astype(np.float32), y, rng.normal(size=(25, d)).astype(np.float32) * 2


def _ours(probe, X, y, X_new):
    return probe.fit(X, y).decision_function(X_new)


def _theirs(probe, X, y, X_new):
    probe.fit(torch.from_numpy(X), torch.from_numpy(y))
    with torch.no_grad():
        return probe.encode(torch.from_numpy(X_new)).numpy()


@pytest.mark.parametrize("kind", list(INTERPRETO))
@pytest.mark.parametrize("normalization", list(NORMALIZATIONS))
@pytest.mark.parametrize("calibrator", list(CALIBRATORS))
def test_centroid_scores_equal_interpreto(kind, normalization, calibrator):
    X, y, X_new = _data()
    if kind == "diag_mahalanobis" and normalization is None:
        normalization = "standardization"  # Interpreto replaces None by Standardization for this probe
    ours = _ours(CentroidProbe(kind, normalization=normalization, bias_calibrator=calibrator, cv=3), X, y, X_new)
    theirs = _theirs(
        INTERPRETO[kind](normalization=NORMALIZATIONS[normalization](), bias_calibrator=CALIBRATORS[calibrator]),
        X,
        y,
        X_new,
    )
    assert ours.shape == (25, 3)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shrinkage", [0.0, 0.3, 1.0])
def test_diag_mahalanobis_shrinkage_and_default_normalisation_equal_interpreto(shrinkage):
    X, y, X_new = _data(1)
    probe = CentroidProbe("diag_mahalanobis", shrinkage=shrinkage, bias_calibrator=None, cv=3)  # standardised
    ours = _ours(probe, X, y, X_new)
    theirs = _theirs(DiagonalMahalanobisCentroidProbe(shrinkage=shrinkage), X, y, X_new)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"shrinkage must be a number in \[0, 1\]"):
        CentroidProbe("diag_mahalanobis", shrinkage=1.5).fit(X, y)


def test_whitening_rank_equals_interpreto():
    X, y, X_new = _data(2)
    ours = _ours(CentroidProbe("sql2", normalization="whitening", rank=5, bias_calibrator="lda", cv=3), X, y, X_new)
    theirs = _theirs(SqL2CentroidProbe(Whitening(rank=5), bias_calibrators.lda_shared_var_bias), X, y, X_new)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("normalization", list(NORMALIZATIONS))
@pytest.mark.parametrize("settings", [{}, {"lr": 0.01, "max_iter": 60, "C": 2.0, "l2": 0.1}])
def test_svdd_equals_interpreto_under_the_same_adam_settings(normalization, settings):
    """SVDD is deterministic on a CPU: the centres start at the positive means and ``log r²`` at the inverse softplus
    of the mean positive squared distance (no random draw, so no seed), and Adam's steps are plain float32 tensor
    arithmetic. Our loop performs the same operations in the same order, so the scores agree to rounding."""
    X, y, X_new = _data(3)
    X_new = np.r_[X[:20], X_new]  # training rows (some inside a sphere) and new ones
    ours = _ours(CentroidProbe("svdd", normalization=normalization, cv=3, **settings), X, y, X_new)
    theirs = _theirs(SVDDCentroidProbe(normalization=NORMALIZATIONS[normalization](), **settings), X, y, X_new)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    inside = ours > 0  # positive margin: inside the concept's sphere
    assert inside.any() and not inside.all()


def test_svdd_stays_finite_where_interpreto_overflows():
    """With squared distances above ~88, Interpreto's inverse softplus ``log(expm1(r²))`` overflows in float32 (inf,
    then NaN scores); ours uses the stable form there and gives finite scores."""
    X, y, X_new = _data(4)
    ours = _ours(CentroidProbe("svdd", cv=3), X * 10, y, X_new * 10)
    assert np.isfinite(ours).all()


@pytest.mark.parametrize("l2", [0.0, 0.5])
@pytest.mark.parametrize("normalization", list(NORMALIZATIONS))
@pytest.mark.parametrize("calibrator", list(CALIBRATORS))
def test_regression_closed_form_equals_interpreto(l2, normalization, calibrator):
    X, y, X_new = _data(5)
    probe = LinearRegressionProbe(l2, normalization=normalization, bias_calibrator=calibrator, cv=3)
    ours = _ours(probe, X, y, X_new)
    theirs = _theirs(InterpretoRegression(l2, CALIBRATORS[calibrator], NORMALIZATIONS[normalization]()), X, y, X_new)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert probe.threshold_ == (0.5 if calibrator is None else 0.0)


@pytest.mark.parametrize(
    "probe",
    [CentroidProbe("dot"), CentroidProbe("cosine", normalization="standardization"), LinearRegressionProbe(0.1)],
    ids=["dot", "cosine", "regression"],
)
def test_linear_kinds_give_input_space_directions(probe):
    X, y, X_new = _data(6)
    probe = clone(probe).set_params(cv=3, normalization="whitening", bias_calibrator=None).fit(X, y)
    if probe.kind == "cosine":
        probe.set_params(normalization="standardization").fit(X, y)
    state = probe.model_.state_
    mean = state["mean"].numpy()
    numerators = (X_new - mean) @ probe.coef_.T  # the score numerator is a dot product with coef_ in input space
    scores = probe.decision_function(X_new) - state["bias"].numpy()
    if probe.kind == "cosine":
        scores = scores * np.linalg.norm((X_new - mean) / state["std"].numpy(), axis=1, keepdims=True)
    np.testing.assert_allclose(numerators, scores, rtol=1e-4, atol=1e-4)
    concepts = probe.as_concepts()
    assert isinstance(concepts, DirectionConcepts) and concepts.n_concepts == 3
    np.testing.assert_allclose(concepts.transform(X_new[:4]), X_new[:4] @ np.linalg.pinv(probe.direction_), atol=1e-4)


@pytest.mark.parametrize(
    "kind, why", [("sql2", "squared distance"), ("diag_mahalanobis", "variance-weighted"), ("svdd", "radius")]
)
def test_as_concepts_refuses_non_linear_kinds(kind, why):
    X, y, _ = _data(7)
    probe = CentroidProbe(kind, cv=3).fit(X, y)
    with pytest.raises(
        ValueError, match=rf"kind='{kind}' scores are not linear in x \(.*{why}.*use kind='dot' or 'cosine'"
    ):
        probe.as_concepts()
    assert not hasattr(probe, "direction_")


@pytest.mark.parametrize("kind", CentroidProbe._kinds)
def test_every_kind_beats_the_majority_baseline(kind):
    rng = np.random.default_rng(8)
    y = (rng.random((120, 3)) < [0.3, 0.5, 0.2]).astype(np.float32)
    X = rng.normal(size=(120, 6)) + np.c_[4 * y, np.zeros((120, 3))]
    report = CentroidProbe(kind, cv=4).fit(X, y, groups=np.arange(120) // 4).report_
    assert report["cv_accuracy"] > report["majority_baseline"] + 0.03, report
    assert report["cv_accuracy"] > report["random_label_accuracy"] + 0.15, report


def test_multi_label_targets_and_report():
    rng = np.random.default_rng(8)
    y = (rng.random((120, 3)) < [0.3, 0.5, 0.2]).astype(np.float32)
    X = rng.normal(size=(120, 6)) + np.c_[4 * y, np.zeros((120, 3))]
    groups = np.arange(120) // 4  # four rows per text
    probe = CentroidProbe("dot", normalization="standardization", cv=4).fit(X, y, groups=groups)
    predicted = probe.predict(X)
    assert predicted.shape == (120, 3) and set(np.unique(predicted)) <= {0, 1}
    assert (predicted.sum(1) > 1).any()  # several concepts on one row: multi-label, not one class per row
    assert probe.classes_ is None and probe.n_concepts_ == 3
    report = probe.report_
    assert sorted(report) == sorted(LinearProbe(cv=2).fit(X, y[:, 0], groups=groups).report_)
    assert report["folds"] == 4 and report["groups"] == 30 and report["rows"] == 120
    assert report["majority_baseline"] == pytest.approx(np.maximum(y.mean(0), 1 - y.mean(0)).mean())
    assert report["cv_accuracy"] > 0.85 > report["random_label_accuracy"]
    assert probe.score(X, y) == pytest.approx((predicted == y).mean())


def test_one_dimensional_labels_become_one_hot_columns():
    X, y, X_new = _data(9)
    labels = np.array(["neg", "pos", "mixed"])[y[:, 0].astype(int) + y[:, 1].astype(int)]
    probe = CentroidProbe("cosine", cv=3).fit(X, labels)
    assert probe.classes_.tolist() == ["mixed", "neg", "pos"]
    one_hot = (labels[:, None] == probe.classes_[None, :]).astype(np.float32)
    np.testing.assert_array_equal(
        probe.decision_function(X_new), CentroidProbe("cosine", cv=3).fit(X, one_hot).decision_function(X_new)
    )
    assert probe.score(X, labels) == probe.score(X, one_hot)
    # per-text labels broadcast to the rows of each text, as for LinearProbe
    per_text, groups = np.arange(30) % 2, np.arange(90) // 3
    by_text = CentroidProbe("dot", cv=3).fit(X, per_text, groups=groups)
    by_row = CentroidProbe("dot", cv=3).fit(X, per_text[groups], groups=groups)
    assert by_text.n_concepts_ == 2 and by_text.classes_.tolist() == [0, 1] and by_text.report_ == by_row.report_
    np.testing.assert_array_equal(by_text.decision_function(X_new), by_row.decision_function(X_new))


@pytest.mark.parametrize(
    "y, message",
    [
        (np.zeros((90, 2, 2)), r"y must be rows × concepts \(0/1\) or a 1-D label vector.*reshape"),
        (np.ones((7, 3)), r"y has 7 rows for 90 activation rows.*one target row per activation row or one per text"),
        (np.full((90, 2), 2.0), r"must hold 0/1 \(or booleans\), found \[2.0\]; pass class labels as a 1-D vector"),
        (np.c_[np.ones(90), np.r_[np.ones(45), np.zeros(45)]], r"concept column\(s\) \[0\] are all 0 or all 1.*drop"),
        (np.ones(90), r"one class only"),
    ],
    ids=["3-D", "rows", "non-binary", "constant column", "one class"],
)
def test_bad_targets(y, message):
    X, _, _ = _data()
    with pytest.raises(ValueError, match=message):
        CentroidProbe("dot", cv=3).fit(X, y)


def test_bad_parameters_name_the_fix():
    X, y, _ = _data()
    with pytest.raises(ValueError, match=r"unknown kind 'euclid'; use one of \('dot', 'cosine', 'sql2'"):
        CentroidProbe("euclid").fit(X, y)
    with pytest.raises(ValueError, match="unknown normalization 'zscore'"):
        CentroidProbe("dot", normalization="zscore").fit(X, y)
    with pytest.raises(ValueError, match="unknown bias_calibrator 'platt'"):
        CentroidProbe("dot", bias_calibrator="platt").fit(X, y)
    with pytest.raises(ValueError, match=r"kind='svdd' has its own bias.*leave bias_calibrator='default' or None"):
        CentroidProbe("svdd", bias_calibrator="midpoint").fit(X, y)
    with pytest.raises(ValueError, match="rank applies to normalization='whitening' only"):
        CentroidProbe("dot", rank=3).fit(X, y)
    probe = CentroidProbe("dot", cv=3).fit(X, y)
    with pytest.raises(ValueError, match="X has 5 features but the probe was fitted on 12"):
        probe.decision_function(np.ones((2, 5)))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        CentroidProbe().predict(X)


def test_torch_inputs_and_clone():
    X, y, X_new = _data(10)
    probe = CentroidProbe("sql2", bias_calibrator="fpr", cv=3)
    from_torch = clone(probe).fit(torch.from_numpy(X), torch.from_numpy(y)).decision_function(torch.from_numpy(X_new))
    np.testing.assert_array_equal(from_torch, clone(probe).fit(X, y).decision_function(X_new))
    assert clone(probe).get_params() == probe.get_params()


def test_store_with_per_text_targets(bert_classifier):
    from interp_widgets.concepts import collect_activations

    model, tokenizer = bert_classifier
    texts = [f"{'a good' if i % 2 else 'a bad'} film number {i}" for i in range(12)]
    store = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False)
    per_text = np.stack([np.arange(12) % 2, np.arange(12) % 3 == 0], axis=1).astype(int)  # two concepts per text
    probe = CentroidProbe("cosine", cv=3).fit(store, per_text)
    assert probe.layer_ == "layer:1" and probe.report_["groups"] == 12 and probe.report_["rows"] == len(store)
    assert probe.decision_function(store).shape == (len(store), 2)
    concepts = probe.as_concepts(store)
    assert concepts.layer_ == "layer:1" and concepts.n_concepts == 2
