"""Concept models against scikit-learn itself, planted dictionaries, sparse autoencoders, metrics and persistence."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sklearn import cluster, decomposition

from interp_widgets.concepts import (
    ActivationStore,
    ConceptModel,
    DictionaryLearningConcepts,
    ICAConcepts,
    IncrementalPCAConcepts,
    KMeansConcepts,
    MiniBatchDictionaryLearningConcepts,
    MiniBatchKMeansConcepts,
    MiniBatchNMFConcepts,
    NMFConcepts,
    PCAConcepts,
    SemiNMFConcepts,
    SparseAutoencoder,
    SVDConcepts,
    dead_concepts,
    evaluate,
    explained_variance,
    l0_sparsity,
    matched_cosine,
    relative_reconstruction_error,
    stability,
)

pytestmark = pytest.mark.usefixtures("quiet_single_thread")  # tests/concepts/conftest.py


def planted(n, m, d, active, *, nonnegative_dictionary=False, seed=0):
    """Rows that are sparse non-negative combinations of ``m`` known unit directions in ``d`` dimensions."""
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(m, d))
    if nonnegative_dictionary:
        D = np.abs(D)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    C = np.zeros((n, m))
    for i in range(n):
        idx = rng.choice(m, active, replace=False)
        C[i, idx] = rng.exponential(1.0, active) + 0.5
    return (C @ D).astype(np.float32), D


def store_of(X, layer="encoder.layer.1"):
    """An in-memory ActivationStore over a plain matrix (one text per row)."""
    n = len(X)
    meta = {
        "text_id": np.arange(n),
        "position": np.zeros(n),
        "start": np.zeros(n),
        "end": np.ones(n),
        "token_id": np.zeros(n),
    }
    return ActivationStore([np.asarray(X, np.float32)], meta, ["x"] * n, {"layer": layer})


RNG = np.random.default_rng(0)
SIGNED = RNG.normal(size=(300, 12)).astype(np.float32)
POSITIVE = np.abs(SIGNED)

CASES = [
    (PCAConcepts, decomposition.PCA, {"random_state": 0}, SIGNED),
    (IncrementalPCAConcepts, decomposition.IncrementalPCA, {}, SIGNED),
    (SVDConcepts, decomposition.TruncatedSVD, {"random_state": 0}, SIGNED),
    (ICAConcepts, decomposition.FastICA, {"random_state": 0}, SIGNED),
    (NMFConcepts, decomposition.NMF, {"random_state": 0, "max_iter": 300}, POSITIVE),
    (MiniBatchNMFConcepts, decomposition.MiniBatchNMF, {"random_state": 0}, POSITIVE),
    (
        DictionaryLearningConcepts,
        decomposition.DictionaryLearning,
        {"random_state": 0, "max_iter": 5, "fit_algorithm": "cd", "transform_algorithm": "lasso_cd"},
        SIGNED[:120],
    ),
    (
        MiniBatchDictionaryLearningConcepts,
        decomposition.MiniBatchDictionaryLearning,
        {"random_state": 0, "max_iter": 3, "batch_size": 64},
        SIGNED[:120],
    ),
]


@pytest.mark.parametrize("ours, theirs, params, X", CASES, ids=[c[0].__name__ for c in CASES])
def test_wrapped_estimator_equals_sklearn(ours, theirs, params, X, tmp_path):
    model = ours(5, estimator_params=params).fit(X)
    reference = theirs(n_components=5, **params).fit(X)
    C = model.transform(X)
    np.testing.assert_allclose(C, reference.transform(X), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(model.inverse_transform(C), reference.inverse_transform(C), rtol=1e-4, atol=1e-4)
    assert model.components_.shape == (5, X.shape[1])
    loaded = ConceptModel.load(model.save(tmp_path / "model.safetensors"))
    assert type(loaded) is ours and loaded.get_params() == model.get_params()
    np.testing.assert_allclose(loaded.transform(X), C, atol=1e-6)
    np.testing.assert_allclose(loaded.inverse_transform(C), model.inverse_transform(C), atol=1e-6)


@pytest.mark.parametrize(
    "ours, theirs", [(KMeansConcepts, cluster.KMeans), (MiniBatchKMeansConcepts, cluster.MiniBatchKMeans)]
)
def test_kmeans_concepts_are_one_hot_assignments(ours, theirs, tmp_path):
    model = ours(4, estimator_params={"random_state": 0, "n_init": 2}).fit(SIGNED)
    reference = theirs(n_clusters=4, random_state=0, n_init=2).fit(SIGNED)
    labels = reference.predict(SIGNED)
    np.testing.assert_array_equal(model.transform(SIGNED), np.eye(4)[labels])
    np.testing.assert_allclose(model.components_, reference.cluster_centers_, atol=1e-5)
    np.testing.assert_allclose(
        model.inverse_transform(model.transform(SIGNED)), reference.cluster_centers_[labels], atol=1e-5
    )
    np.testing.assert_allclose(model.distances(SIGNED[:5]), reference.transform(SIGNED[:5]), atol=1e-4)
    loaded = ConceptModel.load(model.save(tmp_path / "k.safetensors"))
    np.testing.assert_array_equal(loaded.transform(SIGNED), model.transform(SIGNED))


def test_nmf_sign_policies():
    with pytest.raises(ValueError, match="nonnegative='shift'"):
        NMFConcepts(4).fit(SIGNED)
    with pytest.raises(ValueError, match="unknown nonnegative"):
        NMFConcepts(4, nonnegative="abs").fit(POSITIVE)
    shift = NMFConcepts(12, nonnegative="shift", estimator_params={"random_state": 0, "max_iter": 1000}).fit(SIGNED)
    assert shift.fit_info_["nonnegative"] == "shift"
    np.testing.assert_allclose(shift.shift_, np.minimum(SIGNED.min(0), 0))
    # with as many concepts as features the shifted data is reconstructed closely, negatives included
    shift_error = relative_reconstruction_error(SIGNED, shift.inverse_transform(shift.transform(SIGNED)))
    assert shift_error < 0.1
    reference = decomposition.NMF(12, random_state=0, max_iter=1000).fit(SIGNED - shift.shift_)
    np.testing.assert_allclose(shift.transform(SIGNED), reference.transform(SIGNED - shift.shift_), atol=1e-4)
    relu = NMFConcepts(12, nonnegative="relu", estimator_params={"random_state": 0, "max_iter": 1000}).fit(SIGNED)
    np.testing.assert_allclose(
        relu.transform(SIGNED),
        decomposition.NMF(12, random_state=0, max_iter=1000)
        .fit(np.maximum(SIGNED, 0))
        .transform(np.maximum(SIGNED, 0)),
        atol=1e-4,
    )
    assert relu.offset_.tolist() == [0.0] * 12  # the negative part is gone for good
    assert relative_reconstruction_error(SIGNED, relu.inverse_transform(relu.transform(SIGNED))) > 5 * shift_error
    plain = NMFConcepts(3, estimator_params={"random_state": 0}).fit(POSITIVE)
    with pytest.raises(ValueError, match="negative values"):
        plain.transform(SIGNED)


def test_planted_dictionary_recovered_by_nmf_ica_semi_nmf_and_sae():
    X, D = planted(1500, 6, 16, 2, nonnegative_dictionary=True, seed=1)
    nmf = NMFConcepts(6, estimator_params={"random_state": 0, "max_iter": 1000, "init": "nndsvda"}).fit(X)
    assert matched_cosine(nmf.components_, D)[0] > 0.9

    rng = np.random.default_rng(2)
    sources = rng.laplace(size=(2000, 6))
    mixing = rng.normal(size=(6, 16))
    ica = ICAConcepts(6, estimator_params={"random_state": 0, "max_iter": 1000}).fit(
        (sources @ mixing).astype(np.float32)
    )
    assert matched_cosine(ica.components_, mixing, absolute=True)[0] > 0.9

    X_signed, D_signed = planted(1500, 6, 16, 2, seed=3)
    semi = SemiNMFConcepts(6, max_iter=300).fit(X_signed)
    assert (semi.transform(X_signed[:50]) >= 0).all()
    assert matched_cosine(semi.components_, D_signed)[0] > 0.9

    X_sae, D_sae = planted(6000, 12, 24, 2, seed=4)
    sae = SparseAutoencoder(12, k=2, batch_size=128, lr=3e-3, max_epochs=15, progress=False).fit(X_sae)
    assert matched_cosine(sae.components_, D_sae)[0] > 0.9
    # PCA cannot: its orthogonal directions mix the planted ones
    assert matched_cosine(PCAConcepts(12).fit(X_sae).components_, D_sae, absolute=True)[0] < 0.8


def test_sae_early_stopping_keeps_best_and_resamples_dead(tmp_path):
    X, _ = planted(3000, 8, 16, 2, seed=5)
    sae = SparseAutoencoder(
        8, k=2, batch_size=128, lr=3e-3, max_epochs=40, patience=1, min_delta=0.05, progress=False
    ).fit(X)
    history = sae.fit_info_["history"]
    assert sae.fit_info_["stopped_early"] and len(history) < 40
    assert sae.fit_info_["best_monitor_loss"] == min(h["monitor_loss"] for h in history)
    report = evaluate(sae, X)
    assert report["l0"] <= 2 and report["explained_variance"] > 0.5

    # a strong L1 weight silences units; resampling resets them, and fewer are dead at the end than without it
    settings = dict(
        activation="relu", l1_coefficient=0.3, lr=1e-2, batch_size=256, max_epochs=6, patience=6, progress=False
    )
    relu = SparseAutoencoder(64, **settings).fit(X)
    without = SparseAutoencoder(64, resample_dead=False, **settings).fit(X)
    assert sum(h["resampled"] for h in relu.fit_info_["history"]) > 0
    assert sum(h["resampled"] for h in without.fit_info_["history"]) == 0
    assert relu.fit_info_["history"][-1]["dead"] < without.fit_info_["history"][-1]["dead"]
    topk = dict(k=2, batch_size=256, max_epochs=6, patience=6, progress=False)
    resampled = SparseAutoencoder(64, **topk).fit(X).fit_info_["history"]
    kept_dead = SparseAutoencoder(64, resample_dead=False, **topk).fit(X).fit_info_["history"]
    assert sum(h["resampled"] for h in resampled) > 0
    assert resampled[-1]["dead"] < kept_dead[-1]["dead"] and resampled[-1]["monitor_fvu"] < kept_dead[-1]["monitor_fvu"]
    loaded = ConceptModel.load(relu.save(tmp_path / "sae.safetensors"))
    np.testing.assert_array_equal(loaded.transform(X[:20]), relu.transform(X[:20]))
    np.testing.assert_allclose(
        loaded.inverse_transform(loaded.transform(X[:20])), relu.inverse_transform(relu.transform(X[:20]))
    )
    codes = relu.encode_torch(torch.from_numpy(X[:20]))
    np.testing.assert_allclose(codes.numpy(), relu.transform(X[:20]), atol=1e-6)


def test_sae_trains_from_a_disk_store(tmp_path):
    X, D = planted(4000, 10, 16, 2, seed=6)
    store = store_of(X)
    on_disk = ActivationStore.open(store.save(tmp_path / "store"))
    assert not on_disk.in_memory
    sae = SparseAutoencoder(10, k=2, batch_size=128, lr=3e-3, max_epochs=12, progress=False).fit(on_disk)
    assert sae.layer_ == "encoder.layer.1" and sae.fit_info_["monitor"].startswith("random sample")
    assert matched_cosine(sae.components_, D)[0] > 0.85


def test_large_stores_are_streamed_or_sampled():
    X = RNG.normal(size=(3000, 8)).astype(np.float32) * np.arange(1, 9, dtype=np.float32)
    store = store_of(X)
    streamed = IncrementalPCAConcepts(3, max_fit_rows=1000).fit(store)
    assert streamed.fit_info_["mode"] == "streamed"
    full = PCAConcepts(3).fit(X)
    assert matched_cosine(streamed.components_, full.components_, absolute=True)[0] > 0.99
    sampled = PCAConcepts(3, max_fit_rows=1000).fit(store)
    assert sampled.fit_info_ == {"rows": 3000, "mode": "sample", "sampled_rows": 1000}
    nmf = MiniBatchNMFConcepts(3, nonnegative="shift", max_fit_rows=1000, estimator_params={"random_state": 0}).fit(
        store
    )
    assert nmf.fit_info_["mode"] == "streamed"
    np.testing.assert_allclose(nmf.shift_, X.min(0))  # the shift comes from a full pass over the store


def test_concept_model_errors(tmp_path):
    with pytest.raises(ValueError, match="n_concepts must be an integer >= 1"):
        PCAConcepts(0).fit(SIGNED)
    with pytest.raises(ValueError, match="n_concepts, not n_components"):
        PCAConcepts(3, estimator_params={"n_components": 4}).fit(SIGNED)
    with pytest.raises(ValueError, match="split_sign"):
        DictionaryLearningConcepts(3, estimator_params={"split_sign": True}).fit(SIGNED)
    with pytest.raises(ValueError, match="more than the 5 samples"):
        NMFConcepts(6).fit(POSITIVE[:5])
    with pytest.raises(ValueError, match="at most as many concepts as features"):
        PCAConcepts(13).fit(SIGNED)
    with pytest.raises(ValueError, match="n_concepts < features"):
        SVDConcepts(12).fit(SIGNED)
    with pytest.raises(ValueError, match="not fitted"):
        PCAConcepts(3).transform(SIGNED)
    with pytest.raises(ValueError, match="not fitted"):
        SparseAutoencoder(3).save(tmp_path / "x.safetensors")
    model = PCAConcepts(3).fit(store_of(SIGNED, layer="bert.encoder.layer.2"))
    with pytest.raises(ValueError, match=r"fitted on 12 features \(layer bert.encoder.layer.2\) but got 7"):
        model.transform(SIGNED[:, :7])
    with pytest.raises(ValueError, match="3 concepts"):
        model.inverse_transform(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="NaN"):
        PCAConcepts(2).fit(np.full((4, 3), np.nan))
    with pytest.raises(ValueError, match="zero rows"):
        PCAConcepts(2).fit(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="unknown activation"):
        SparseAutoencoder(8, activation="gelu").fit(SIGNED)
    with pytest.raises(ValueError, match="k must be"):
        SparseAutoencoder(8, k=9).fit(SIGNED)
    path = model.save(tmp_path / "pca.safetensors")
    with pytest.raises(ValueError, match="PCAConcepts, not a SparseAutoencoder"):
        SparseAutoencoder.load(path)


# ---------------------------------------------------------------------- metrics
def test_metrics_match_hand_computations():
    X = np.array([[1.0, 2.0], [3.0, 0.0], [-1.0, 2.0]])
    X_hat = np.array([[1.0, 1.0], [2.0, 0.0], [-1.0, 2.0]])
    assert relative_reconstruction_error(X, X_hat) == pytest.approx(np.sqrt(2) / np.sqrt(1 + 4 + 9 + 1 + 4))
    centred = ((X - X.mean(0)) ** 2).sum()  # (1+4+4) + (2/3·…) computed by hand below
    assert centred == pytest.approx(8 + 8 / 3)
    assert explained_variance(X, X_hat) == pytest.approx(1 - 2 / (8 + 8 / 3))
    C = np.array([[0.0, 1.0, 0.0, 0.0], [2.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 1e-9]])
    assert l0_sparsity(C) == pytest.approx(4 / 3)
    assert l0_sparsity(C, eps=1e-6) == pytest.approx(1.0)
    assert dead_concepts(C).tolist() == [2]
    assert dead_concepts(C, eps=1e-6).tolist() == [2, 3]


def test_matched_cosine_equals_brute_force():
    rng = np.random.default_rng(7)
    A, B = rng.normal(size=(5, 6)), rng.normal(size=(5, 6))
    cos = (A / np.linalg.norm(A, axis=1, keepdims=True)) @ (B / np.linalg.norm(B, axis=1, keepdims=True)).T
    best = max(np.mean([cos[i, p[i]] for i in range(5)]) for p in itertools.permutations(range(5)))
    mean, per_row, index = matched_cosine(A, B)
    assert mean == pytest.approx(best)
    np.testing.assert_allclose(per_row, cos[np.arange(5), index])
    best_abs = max(np.mean([abs(cos[i, p[i]]) for i in range(5)]) for p in itertools.permutations(range(5)))
    assert matched_cosine(A, -B, absolute=True)[0] == pytest.approx(best_abs)
    mean, per_row, index = matched_cosine(A, B[:3])  # more rows than partners: the rest score 0
    assert (index == -1).sum() == 2 and per_row[index == -1].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="same number of columns"):
        matched_cosine(A, B[:, :4])


def test_evaluate_streams_like_direct_computation():
    X, _ = planted(2000, 6, 12, 2, nonnegative_dictionary=True, seed=8)
    model = NMFConcepts(6, estimator_params={"random_state": 0, "max_iter": 400}).fit(X)
    streamed = evaluate(model, store_of(X), rows_per_chunk=300)
    C = model.transform(X)
    X_hat = model.inverse_transform(C)
    assert streamed["rows"] == 2000
    assert streamed["relative_reconstruction_error"] == pytest.approx(relative_reconstruction_error(X, X_hat), rel=1e-5)
    assert streamed["explained_variance"] == pytest.approx(explained_variance(X, X_hat), rel=1e-5)
    assert streamed["l0"] == pytest.approx(l0_sparsity(C))
    assert streamed["dead"].tolist() == dead_concepts(C).tolist()
    np.testing.assert_allclose(streamed["density"], (C > 0).mean(0))


def test_stability_across_seeds():
    X, _ = planted(1200, 5, 12, 2, nonnegative_dictionary=True, seed=9)
    result = stability(
        lambda seed: NMFConcepts(5, estimator_params={"init": "random", "random_state": seed, "max_iter": 1000}),
        X,
        seeds=[0, 1, 2],
    )
    assert set(result["pairs"]) == {(0, 1), (0, 2), (1, 2)}
    assert result["mean"] > 0.95 and result["per_concept"].shape == (5,)
    noise = RNG.normal(size=(400, 12)).astype(np.float32)
    unstable = stability(
        lambda seed: KMeansConcepts(8, estimator_params={"random_state": seed, "n_init": 1}), noise, seeds=[0, 1]
    )
    assert unstable["mean"] < result["mean"]
    with pytest.raises(ValueError, match="two seeds"):
        stability(lambda seed: PCAConcepts(2), X, seeds=[0])
