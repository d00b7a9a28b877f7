"""JumpReLU and BatchTopK SAEs: the straight-through threshold estimator, the BatchTopK inference threshold,
recovery of a planted dictionary, and use in importance, interpretation and the concept browser."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.concepts import (
    BatchTopKSAE,
    ConceptModel,
    JumpReLUSAE,
    SparseAutoencoder,
    collect_activations,
    concept_importance,
    evaluate,
    interpret_concepts,
    matched_cosine,
    text_concepts,
)
from interp_widgets.concepts.sae import jumprelu, step
from interp_widgets.demo import corpus
from tests.conftest import model_fingerprint
from tests.concepts.test_decompositions import planted


def test_straight_through_estimator_gradients():
    pre = torch.tensor([[0.50, 0.31, 0.02, -1.0], [0.60, 0.28, 0.45, 0.90]], requires_grad=True)
    threshold = torch.tensor([0.52, 0.30, 0.30, 0.85], requires_grad=True)
    eps = 0.1
    out = jumprelu(pre, threshold, eps)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.31, 0.0, 0.0], [0.60, 0.0, 0.45, 0.90]]))
    weights = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    (out * weights).sum().backward()
    inside = ((pre - threshold).abs() < eps / 2).float()  # the rectangle kernel K((pre - θ)/ε)
    torch.testing.assert_close(pre.grad, weights * (pre > threshold).float())  # exact gradient to the input
    torch.testing.assert_close(threshold.grad, (-(threshold / eps) * inside * weights).sum(0).detach())
    assert threshold.grad.tolist()[2] == 0.0  # no pre-activation within ε/2 of θ₂

    threshold.grad = None
    count = step(pre.detach(), threshold, eps)
    torch.testing.assert_close(count, (pre > threshold).float().detach())
    count.sum().backward()
    torch.testing.assert_close(threshold.grad, (-inside / eps).sum(0).detach())


def test_jumprelu_threshold_learns_sparsity():
    X, D = planted(2500, 12, 24, 2, seed=7)
    fits = {
        c: JumpReLUSAE(12, l0_coefficient=c, lr=1e-2, max_epochs=15, batch_size=128, progress=False).fit(X)
        for c in (0.0, 0.1)
    }
    l0 = {c: evaluate(sae, X)["l0"] for c, sae in fits.items()}
    assert l0[0.1] < 0.6 * l0[0.0]  # the L0 penalty reaches the thresholds through the estimator
    thresholds = fits[0.1].weights_["threshold"]
    assert float(thresholds.min()) >= 0 and float(thresholds.mean()) > 0.1  # raised from their start (0.1)
    assert matched_cosine(fits[0.1].components_, D)[0] > 0.9  # and it still finds the planted directions
    assert evaluate(fits[0.1], X)["explained_variance"] > 0.8


def test_batchtopk_threshold_and_recovery():
    X, D = planted(3000, 12, 24, 2, seed=4)
    sae = BatchTopKSAE(12, k=2, lr=5e-3, max_epochs=12, batch_size=128, progress=False).fit(X)
    assert matched_cosine(sae.components_, D)[0] > 0.9
    info = sae.fit_info_
    assert info["monitor_l0"] == pytest.approx(2.0, abs=1e-9)  # the threshold is chosen to keep k per row on average
    per_row = (sae.transform(X) > 0).sum(1)
    assert per_row.mean() == pytest.approx(2.0, rel=0.1) and per_row.max() > per_row.min()  # varies by row
    torch.testing.assert_close(sae.weights_["threshold"], torch.full((12,), info["threshold"]))
    # training keeps the k × rows largest activations of the whole minibatch
    xn = torch.randn(50, 24)
    codes = sae._batch_topk(xn @ sae.weights_["W_enc"] + sae.weights_["b_enc"])
    assert int((codes > 0).sum()) == 100 and (codes > 0).sum(1).float().std() > 0
    with pytest.raises(ValueError, match="k must be > 0 and at most n_concepts=12"):
        BatchTopKSAE(12, k=13).fit(X)


def test_jumprelu_and_batchtopk_errors():
    X = np.random.default_rng(0).normal(size=(100, 6)).astype(np.float32)
    with pytest.raises(ValueError, match="bandwidth must be a number > 0"):
        JumpReLUSAE(4, bandwidth=0).fit(X)
    with pytest.raises(ValueError, match="l0_coefficient must be a number >= 0"):
        JumpReLUSAE(4, l0_coefficient=-1).fit(X)


@pytest.mark.parametrize("kind", ["jumprelu", "batchtopk"])
def test_in_importance_interpretation_and_browser(kind, gpt2_lm, tmp_path):
    model, tokenizer = gpt2_lm
    store = collect_activations(model, tokenizer, corpus()[:30], layer=1, progress=False)
    sae = (
        JumpReLUSAE(48, l0_coefficient=3e-2, lr=1e-2, max_epochs=4, batch_size=128, progress=False)
        if kind == "jumprelu"
        else BatchTopKSAE(48, k=6, max_epochs=4, batch_size=128, progress=False)
    ).fit(store)
    before = model_fingerprint(model, tokenizer)
    text = "The service was slow, but the soup was wonderful."
    imp = concept_importance(sae, model, tokenizer, text)
    assert imp.gradients.shape[1:] == (len(imp.tokens), 48) and np.isfinite(imp.gradients).all()
    ids = torch.as_tensor(tokenizer(text).input_ids)[None]
    with torch.no_grad():
        clean = model(input_ids=ids).logits[0, -1, imp.target_ids[0]]
    assert imp.target_scores[0] == pytest.approx(float(clean), rel=1e-5)  # the residual is kept: same output
    # coefficients and the sum of contributions: only active concepts contribute
    assert np.all(imp.contributions[0][imp.coefficients == 0] == 0)
    tc = text_concepts(sae, model, tokenizer, text)
    np.testing.assert_allclose(tc.coefficients, imp.coefficients, atol=1e-6)
    interp = interpret_concepts(sae, store, k=5, model=model, tokenizer=tokenizer, vocab_top=3, progress=False)
    assert interp.method == type(sae).__name__ and len(interp.labels) == 48
    browser = interp.widget(texts=[text], concept_model=sae, model=model, tokenizer=tokenizer)
    assert type(browser).__name__ == "ConceptBrowser"
    assert model_fingerprint(model, tokenizer) == before
    loaded = ConceptModel.load(sae.save(tmp_path / "sae.safetensors"))
    assert type(loaded) is type(sae)
    np.testing.assert_allclose(loaded.transform(store[:50]), sae.transform(store[:50]), atol=1e-6)


def test_plain_sae_files_from_before_the_preprocessing_field_load(tmp_path):
    from interp_widgets.concepts._io import load_bundle, save_bundle

    X = np.random.default_rng(1).normal(size=(200, 8)).astype(np.float32)
    sae = SparseAutoencoder(6, k=2, max_epochs=2, progress=False).fit(X)
    arrays, meta = load_bundle(sae.save(tmp_path / "new.safetensors"), "interp_widgets.ConceptModel")
    meta["extra"].pop("preprocessing")
    meta.pop("model_name")
    old = ConceptModel.load(save_bundle(tmp_path / "old.safetensors", "interp_widgets.ConceptModel", arrays, meta))
    assert old.preprocessing_ == {"center": False, "normalize_activations": "none", "apply_b_dec_to_input": True}
    assert old.model_name_ is None and not old.rowwise
    np.testing.assert_allclose(old.transform(X), sae.transform(X), atol=1e-6)
