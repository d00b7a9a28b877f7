"""Interpreto 0.5.2's remaining concept methods, against the installed interpreto: NeuronsAsConcepts (the identity),
SparsePCAConcepts (scikit-learn's SparsePCA), ConvexNMFConcepts (Overcomplete's ConvexNMF) and MatchingPursuitSAE
(Overcomplete's MpSAE). Interpreto's explainers need a split model; they wrap the Overcomplete objects used here
directly (``concept_model_class`` is checked to be the same class), built with the arguments the explainers pass."""

from __future__ import annotations

import interpreto.concepts as interpreto_concepts
import numpy as np
import pytest
import torch
from interpreto._vendor.overcomplete.optimization import ConvexNMF, SkSparsePCA
from interpreto._vendor.overcomplete.sae import MpSAE
from interpreto.concepts.methods.neurons_as_concepts import IdentityConceptModel

from interp_widgets.concepts import (
    ConceptModel,
    ConvexNMFConcepts,
    MatchingPursuitSAE,
    NeuronsAsConcepts,
    SparsePCAConcepts,
    collect_activations,
    concept_importance,
    interpret_concepts,
    relative_reconstruction_error,
    save_sae,
)
from interp_widgets.demo import corpus
from tests.concepts.test_decompositions import planted

RNG = np.random.default_rng(0)
X = (RNG.normal(size=(200, 16)) + 0.5).astype(np.float32)


pytestmark = pytest.mark.usefixtures("quiet_single_thread")  # tests/concepts/conftest.py


def wrapped(explainer) -> type:
    return explainer.concept_model_class.fget(None)


def close(ours, theirs, rel=1e-5):
    """Largest difference at most ``rel`` times the largest magnitude."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= rel * max(np.abs(theirs).max(), 1e-12)


# ---------------------------------------------------------------------- neurons
def test_neurons_are_interpretos_identity(tmp_path):
    neurons = NeuronsAsConcepts(16).fit(X[:5])  # fewer rows than concepts: nothing is learnt from them
    theirs = IdentityConceptModel(16)
    np.testing.assert_array_equal(neurons.transform(X), theirs.encode(torch.from_numpy(X)).numpy())
    np.testing.assert_array_equal(neurons.components_, theirs.get_dictionary().numpy())
    np.testing.assert_array_equal(neurons.inverse_transform(X), X)
    x = torch.from_numpy(X[:3]).requires_grad_(True)
    neurons.encode_torch(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((3, 16)))
    loaded = ConceptModel.load(neurons.save(tmp_path / "neurons.safetensors"))
    assert type(loaded) is NeuronsAsConcepts and np.array_equal(loaded.components_, np.eye(16))
    with pytest.raises(
        ValueError,
        match=r"n_concepts must be the layer width: got n_concepts=8 for 16 features; use NeuronsAsConcepts\(16\)",
    ):
        NeuronsAsConcepts(8).fit(X)


# ---------------------------------------------------------------------- sparse PCA
@pytest.mark.parametrize("alpha", [0.3, 2.0])
def test_sparse_pca_equals_interpreto(alpha, tmp_path):
    assert wrapped(interpreto_concepts.SparsePCAConcepts) is SkSparsePCA
    theirs = SkSparsePCA(5, device="cpu", sparsity=alpha, random_state=0)  # Interpreto's defaults: cd, tol 1e-3
    theirs.fit(torch.from_numpy(X))
    params = {"alpha": alpha, "method": "cd", "tol": 1e-3, "random_state": 0}
    ours = SparsePCAConcepts(5, estimator_params=params).fit(X)
    codes = theirs.encode(torch.from_numpy(X)).numpy()
    close(ours.transform(X), codes)
    close(ours.components_, theirs.get_dictionary().numpy())
    close(ours.inverse_transform(codes), theirs.decode(torch.from_numpy(codes)).numpy())
    assert (ours.components_ == 0).mean() > (0.5 if alpha == 2.0 else 0.0)
    loaded = ConceptModel.load(ours.save(tmp_path / "spca.safetensors"))
    np.testing.assert_allclose(loaded.transform(X), ours.transform(X), atol=1e-6)


# ---------------------------------------------------------------------- convex NMF
@pytest.mark.parametrize(("strict_convex", "iterations"), [(False, 30), (True, 30), (True, 500)])
def test_convex_nmf_with_overcompletes_update_equals_interpreto(strict_convex, iterations):
    """Same seed, same random initialisation, same multiplicative updates: the dictionaries agree to 1e-5 of their
    largest entry (our products are ordered differently, rows² × k instead of rows³, so rounding differs a little).
    Without strict_convex Overcomplete's rule diverges (NaN by 500 iterations), so that case stops at 30."""
    assert wrapped(interpreto_concepts.ConvexNMFConcepts) is ConvexNMF
    torch.manual_seed(3)
    theirs = ConvexNMF(5, device="cpu", solver="mu", strict_convex=strict_convex)  # the explainer forces "mu"
    _, dictionary = theirs.fit(torch.from_numpy(X), max_iter=iterations)
    ours = ConvexNMFConcepts(
        5, max_iter=iterations, random_state=3, strict_convex=strict_convex, update="interpreto"
    ).fit(X)
    close(ours.components_, dictionary.numpy())
    close(ours.W_, theirs.W.numpy())


def test_convex_nmf_paper_update_is_stable_where_overcompletes_diverges():
    """Overcomplete's W update (W Z Zᵀ for the paper's Zᵀ Z W) lets W grow without bound when rows of W are not
    normalised; the paper's update decreases the error and stays finite."""
    paper = ConvexNMFConcepts(5, max_iter=300, tol=0).fit(X)
    overcomplete = ConvexNMFConcepts(5, max_iter=300, tol=0, update="interpreto").fit(X)
    assert np.isfinite(paper.components_).all() and paper.fit_info_["relative_error"] < 0.75
    assert not np.isfinite(overcomplete.fit_info_["relative_error"]) or np.abs(overcomplete.W_).max() > 1e6
    short = ConvexNMFConcepts(5, max_iter=30, tol=0).fit(X)
    assert paper.fit_info_["relative_error"] < short.fit_info_["relative_error"]


def test_convex_nmf_transform_against_interpretos_encoder(tmp_path):
    """Interpreto's encoder starts from random codes (the global torch generator) and runs up to 300 updates with a
    stop on the relative change of the codes, so its codes depend on the seed and on the batch; ours start from the
    clipped least-squares codes and run a fixed number of updates, so they cannot be equal. Both solve the same
    non-negative least-squares problem for the fitted dictionary: on the training rows (the only rows Interpreto's
    encoder handles, since it reuses the rows it encodes as the basis of the dictionary) our reconstruction error is
    at most Interpreto's plus 1e-3."""
    torch.manual_seed(0)
    theirs = ConvexNMF(5, device="cpu", solver="mu", strict_convex=True)
    theirs.fit(torch.from_numpy(X), max_iter=100)
    ours = ConvexNMFConcepts(5, max_iter=100, random_state=0, strict_convex=True, update="interpreto").fit(X)
    torch.manual_seed(1)
    their_codes = theirs.encode(torch.from_numpy(X)).numpy()
    their_error = relative_reconstruction_error(X, their_codes @ theirs.D.numpy())
    our_error = relative_reconstruction_error(X, ours.inverse_transform(ours.transform(X)))
    assert our_error <= their_error + 1e-3
    with pytest.raises(RuntimeError):  # Interpreto cannot encode a batch of another size
        theirs.encode(torch.from_numpy(X[:50]))
    np.testing.assert_allclose(ours.transform(X[:7]), ours.transform(X)[:7], atol=1e-6)  # rows are independent
    assert (ours.transform(X) >= 0).all()
    loaded = ConceptModel.load(ours.save(tmp_path / "cnmf.safetensors"))
    np.testing.assert_allclose(loaded.transform(X[:20]), ours.transform(X[:20]), atol=1e-6)
    np.testing.assert_array_equal(loaded.W_, ours.W_)


def test_convex_nmf_refuses_rows_beyond_its_cap():
    with pytest.raises(
        ValueError, match=r"refuses more than max_rows=150 rows; fit it on a random subsample \(store\.sample\(150\)"
    ):
        ConvexNMFConcepts(3, max_rows=150).fit(X)
    assert ConvexNMFConcepts(3).max_rows == 10_000
    with pytest.raises(ValueError, match=r"unknown update .fast.; use one of \(.paper., .interpreto.\)"):
        ConvexNMFConcepts(3, update="fast").fit(X)


# ---------------------------------------------------------------------- matching-pursuit SAE
def test_matching_pursuit_encodes_as_interpretos_mp_sae():
    """Interpreto's trained weights in ours, and ours in Interpreto's MpSAE: the codes agree to 1e-5."""
    assert wrapped(interpreto_concepts.MpSAEConcepts) is MpSAE
    torch.manual_seed(0)
    theirs = MpSAE(16, 24, k=4)
    optimiser = torch.optim.Adam(theirs.parameters(), lr=1e-2)
    data = torch.from_numpy(X)
    for _ in range(30):  # a few of Overcomplete's own training steps (MSE of the reconstruction)
        _, _, x_hat = theirs(data)
        loss = (data - x_hat).square().mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    theirs.eval()
    ours = MatchingPursuitSAE.from_dictionary(theirs.get_dictionary().detach(), k=4)
    with torch.no_grad():
        _, their_codes = theirs.encode(data)
    close(ours.transform(X), their_codes.numpy())
    close(ours.inverse_transform(their_codes.numpy()), theirs.decode(their_codes).detach().numpy())

    trained = MatchingPursuitSAE(24, k=4, max_epochs=3, batch_size=64, progress=False).fit(X)
    other = MpSAE(16, 24, k=4)
    other.dictionary._weights.data = trained.weights_["W_dec"].clone()
    other.eval()
    xn = (data - trained.weights_["b_dec"]) / trained.scale_  # our input convention: centred on b_dec, scaled
    with torch.no_grad():
        close(trained.transform(X), other.encode(xn)[1].numpy())


def test_matching_pursuit_sae_trains_with_the_one_loop(tmp_path):
    Xp, _ = planted(3000, 12, 16, 2, seed=1)
    mp = MatchingPursuitSAE(12, k=2, max_epochs=30, batch_size=128, lr=1e-2, progress=False).fit(Xp)
    assert mp.fit_info_["monitor"] == "held-out rows" and len(mp.fit_info_["history"]) >= 3  # train_dictionary's
    assert sorted(mp.weights_) == ["W_dec", "b_dec"]
    assert np.allclose(np.linalg.norm(mp.weights_["W_dec"].numpy(), axis=1), 1, atol=1e-5)
    C = mp.transform(Xp)
    assert (C != 0).sum(1).max() <= 2
    assert relative_reconstruction_error(Xp, mp.inverse_transform(C)) < 0.5
    loaded = ConceptModel.load(mp.save(tmp_path / "mp.safetensors"))
    assert type(loaded) is MatchingPursuitSAE and loaded.k_ == 2
    np.testing.assert_array_equal(loaded.transform(Xp[:50]), C[:50])
    with pytest.raises(TypeError, match="encodes by matching pursuit over its decoder.*save it with .save"):
        save_sae(mp, tmp_path / "folder", hook_name="blocks.0.hook_resid_post")
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        MatchingPursuitSAE(8, k=0).fit(Xp)
    with pytest.raises(ValueError, match="dictionary must be 2-D"):
        MatchingPursuitSAE.from_dictionary(np.ones(4), k=1)


# ---------------------------------------------------------------------- in importance and interpretation
@pytest.mark.parametrize("kind", ["neurons", "sparse_pca", "convex_nmf", "mp_sae"])
def test_in_concept_importance_interpretation_and_browser(kind, gpt2_lm):
    model, tokenizer = gpt2_lm
    store = collect_activations(model, tokenizer, corpus()[:20], layer=1, progress=False)
    concepts = {
        "neurons": lambda: NeuronsAsConcepts(store.dim),
        "sparse_pca": lambda: SparsePCAConcepts(6, estimator_params={"method": "cd", "tol": 1e-3, "random_state": 0}),
        "convex_nmf": lambda: ConvexNMFConcepts(6, max_iter=50, strict_convex=True),
        "mp_sae": lambda: MatchingPursuitSAE(24, k=3, max_epochs=3, batch_size=128, progress=False),
    }[kind]().fit(store)
    text = "The service was slow, but the soup was wonderful."
    imp = concept_importance(concepts, model, tokenizer, text)
    assert imp.gradients.shape[1:] == (len(imp.tokens), concepts.n_concepts) and np.isfinite(imp.gradients).all()
    ids = torch.as_tensor(tokenizer(text).input_ids)[None]
    with torch.no_grad():
        clean = model(input_ids=ids).logits[0, -1, imp.target_ids[0]]
    assert imp.target_scores[0] == pytest.approx(float(clean), rel=1e-5)  # the residual is kept: same output
    interp = interpret_concepts(concepts, store, k=3, model=model, tokenizer=tokenizer, vocab_top=3, progress=False)
    assert interp.method == type(concepts).__name__ and len(interp.labels) == concepts.n_concepts
    browser = interp.widget(texts=[text], concept_model=concepts, model=model, tokenizer=tokenizer)
    assert type(browser).__name__ == "ConceptBrowser"
