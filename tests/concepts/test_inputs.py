"""Inputs to concepts: attribution of a concept's activation to the input tokens.

Checked against Captum's integrated gradients on a reference concept score written from scikit-learn's PCA
parameters, against brute-force occlusion (every token replaced by the pad embedding, the concept re-read with the
concept model's numpy ``transform``), and by IG's completeness axiom; plus the untouched model and the errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.attr import IntegratedGradients as CaptumIG

from interp_widgets.attribution import METHODS, list_methods
from interp_widgets.concepts import (
    ConceptInputAttributions,
    DirectionConcepts,
    InputsToConceptsForSequenceClassification,
    NMFConcepts,
    PCAConcepts,
    SparseAutoencoder,
    collect_activations,
    concept_attribution,
    gradient_support,
    text_concepts,
)
from tests.conftest import model_fingerprint

TEXTS = [f"{'a good' if i % 2 else 'a bad'} film number {i} for the {'night' if i % 3 else 'day'}" for i in range(30)]
TEXT = "Not bad at all, the food was lovely."


@pytest.fixture(scope="module")
def bert_store(bert_classifier):
    model, tokenizer = bert_classifier
    return collect_activations(model, tokenizer, TEXTS, layer="layer:0", progress=False)


@pytest.fixture(scope="module")
def gpt2_store(gpt2_lm):
    model, tokenizer = gpt2_lm
    return collect_activations(model, tokenizer, TEXTS, layer="layer:0", progress=False)


@pytest.fixture(scope="module")
def pca(bert_store):
    return PCAConcepts(6).fit(bert_store)


@pytest.fixture(scope="module")
def relu_sae(bert_store):
    return SparseAutoencoder(
        24, activation="relu", l1_coefficient=1e-3, max_epochs=3, batch_size=64, progress=False
    ).fit(bert_store)


def _hidden_reference(model, tokenizer, layer_module, embeds):
    """Hidden states of ``layer_module`` for ``embeds``, read with a plain torch hook (no interp_widgets code)."""
    seen = {}
    handle = layer_module.register_forward_hook(
        lambda m, i, o: seen.__setitem__("h", o[0] if isinstance(o, tuple) else o)
    )
    try:
        model(inputs_embeds=embeds)
    finally:
        handle.remove()
    return seen["h"]


def _embeds(model, tokenizer, text):
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    special = torch.tensor(tokenizer(text, return_special_tokens_mask=True)["special_tokens_mask"], dtype=torch.bool)
    return model.get_input_embeddings()(ids).detach(), special


def test_integrated_gradients_match_captum_on_a_pca_concept(bert_classifier, pca):
    model, tokenizer = bert_classifier
    concept = 2
    mean = torch.tensor(pca.estimator_.mean_, dtype=torch.float32)
    components = torch.tensor(pca.estimator_.components_, dtype=torch.float32)
    x, special = _embeds(model, tokenizer, TEXT)
    pad = model.get_input_embeddings()(torch.tensor([tokenizer.pad_token_id]))[0].detach()
    baseline = torch.where(special[None, :, None], x, pad)

    def score(embeds):  # concept 2 of sklearn's PCA, summed over the non-special tokens
        h = _hidden_reference(model, tokenizer, model.bert.encoder.layer[0], embeds)
        return (((h - mean) @ components.T)[..., concept] * (~special).float()).sum(-1)

    expected = CaptumIG(score).attribute(x, baselines=baseline, n_steps=32, method="gausslegendre").sum(-1)[0]
    ours = concept_attribution(
        pca,
        model,
        tokenizer,
        TEXT,
        concept=concept,
        method_params={"n_steps": 32, "method": "gausslegendre", "progress": False},
    )
    assert len(ours.tokens) == x.shape[1] and ours.tokens[1] == "Not"
    np.testing.assert_allclose(ours.scores[0], expected.detach().numpy(), atol=2e-5, rtol=1e-4)
    with torch.no_grad():
        assert ours.params["concept_activation"][0] == pytest.approx(float(score(x)[0]), abs=1e-4)
    assert np.isnan(ours.target_probs).all() and ours.target_labels == ["concept 2"]


@pytest.mark.parametrize("family", ["bert", "gpt2"])
@pytest.mark.parametrize("kind", ["pca", "direction", "relu_sae"])
def test_integrated_gradients_are_complete_for_continuous_encoders(
    family, kind, bert_classifier, gpt2_lm, bert_store, gpt2_store
):
    model, tokenizer = bert_classifier if family == "bert" else gpt2_lm
    store = bert_store if family == "bert" else gpt2_store
    rng = np.random.default_rng(0)
    if kind == "pca":
        cm = PCAConcepts(4).fit(store)
    elif kind == "direction":
        cm = DirectionConcepts(2, directions=rng.normal(size=(2, store.dim)).astype(np.float32)).fit(store)
    else:
        cm = SparseAutoencoder(16, activation="relu", max_epochs=2, batch_size=64, progress=False).fit(store)
    # the adaptive path mesh refines where the integrand bends (the kinks of a ReLU SAE)
    result = concept_attribution(
        cm, model, tokenizer, TEXT, concept=[0, 1], method_params={"tolerance": 1e-3, "progress": False}
    )
    assert result.scores.shape == (2, len(result.tokens))
    delta = np.abs(result.score_delta)
    assert (delta > 1e-3).all(), delta  # a real change to attribute
    assert (result.relative_completeness_error <= 1.5e-3).all(), result.relative_completeness_error
    np.testing.assert_allclose(np.nansum(result.scores, axis=1), result.score_delta, rtol=1.5e-3)


def test_occlusion_matches_brute_force_for_a_non_differentiable_model(bert_classifier, bert_store):
    """NMF has no torch encoder: occlusion goes through ``transform``; the reference re-reads every masked input."""
    model, tokenizer = bert_classifier
    nmf = NMFConcepts(5, nonnegative="shift", estimator_params={"random_state": 0, "max_iter": 300}).fit(bert_store)
    concept = 3
    x, special = _embeds(model, tokenizer, TEXT)
    pad = model.get_input_embeddings()(torch.tensor([tokenizer.pad_token_id]))[0].detach()

    def score(embeds):
        with torch.no_grad():
            h = _hidden_reference(model, tokenizer, model.bert.encoder.layer[0], embeds)[0]
        return float(nmf.transform(h.numpy())[~special.numpy(), concept].sum())

    full = score(x)
    expected = []
    for i in np.flatnonzero(~special.numpy()):
        occluded = x.clone()
        occluded[0, i] = pad
        expected.append(full - score(occluded))
    ours = concept_attribution(nmf, model, tokenizer, TEXT, concept=concept, method="occlusion")
    # NMF's transform is an iterative solver whose stopping rule looks at the whole batch of rows: batches of
    # different sizes agree to about 1e-4, not to float precision
    np.testing.assert_allclose(ours.scores[0], expected, rtol=1e-3, atol=2e-4)
    assert ours.params["concept_activation"][0] == pytest.approx(full, abs=2e-4)


def test_one_position_is_scored_alone(bert_classifier, pca):
    model, tokenizer = bert_classifier
    tc = text_concepts(pca, model, tokenizer, TEXT)
    at = concept_attribution(
        pca, model, tokenizer, TEXT, concept=1, position=3, method_params={"n_steps": 64, "progress": False}
    )
    assert at.params["concept_activation"][0] == pytest.approx(float(tc.coefficients[3, 1]), abs=1e-4)
    assert at.params["concept_score"] == f"activation of concept 1 at position 3 ({tc.tokens[3]!r})"
    assert abs(at.completeness_error[0]) < 1e-3 * max(1.0, abs(at.score_delta[0]))
    # a BERT encoder attends both ways, so later tokens move the activation at position 3 too
    assert np.abs(at.scores[0, 4:-1]).max() > 0
    last = concept_attribution(pca, model, tokenizer, TEXT, concept=1, position=-1, method="occlusion")
    assert last.params["concept_position"] == len(tc.tokens) - 1


def test_causal_lm_position_sees_only_its_past(gpt2_lm, gpt2_store):
    model, tokenizer = gpt2_lm
    cm = PCAConcepts(3).fit(gpt2_store)
    r = concept_attribution(cm, model, tokenizer, TEXT, concept=0, position=4, method="occlusion")
    assert np.abs(r.scores[0, :5]).max() > 0
    np.testing.assert_array_equal(r.scores[0, 5:], 0.0)  # later tokens cannot change an earlier position


def test_default_concept_is_the_most_active(bert_classifier, pca):
    model, tokenizer = bert_classifier
    tc = text_concepts(pca, model, tokenizer, TEXT)
    sums = tc.coefficients[~tc.special_mask].sum(0)
    r = concept_attribution(pca, model, tokenizer, TEXT, method="occlusion")
    assert r.target_labels == [f"concept {int(sums.argmax())}"]
    assert r.params["concept_activation"][0] == pytest.approx(float(sums.max()), abs=1e-4)


def test_every_gradient_and_perturbation_method_runs_on_sae_concepts(bert_classifier, relu_sae):
    model, tokenizer = bert_classifier
    small = {
        "integrated_gradients": {"n_steps": 8},
        "smooth_grad": {"n_samples": 4},
        "var_grad": {"n_samples": 4},
        "square_grad": {"n_samples": 4},
        "gradient_shap": {"n_samples": 4},
        "lime": {"n_samples": 16},
        "kernel_shap": {"n_samples": 16},
        "sobol": {"n_samples": 4},
    }
    names = [m.name for m in list_methods() if m.family in ("gradient", "perturbation")]
    assert {"integrated_gradients", "saliency", "occlusion", "kernel_shap"} <= set(names)
    for name in names:
        params = {**small.get(name, {}), "progress": False}
        params = {k: v for k, v in params.items() if k in METHODS[name].__init__.__code__.co_varnames}
        r = concept_attribution(relu_sae, model, tokenizer, "Good food.", concept=0, method=name, method_params=params)
        assert r.scores.shape[0] == 1 and np.isfinite(r.scores).all(), name
        assert r.method == name


def test_model_is_untouched(bert_classifier, relu_sae):
    model, tokenizer = bert_classifier
    model.train()
    try:
        before = model_fingerprint(model, tokenizer)
        concept_attribution(
            relu_sae, model, tokenizer, TEXT, concept=[0, 3], method_params={"n_steps": 8, "progress": False}
        )
        concept_attribution(relu_sae, model, tokenizer, TEXT, concept=1, method="occlusion")
        with pytest.raises(ValueError):  # hooks are removed on errors too
            concept_attribution(relu_sae, model, tokenizer, TEXT, concept=1, position=99, method="occlusion")
        assert model_fingerprint(model, tokenizer) == before
    finally:
        model.eval()


def test_wrapper_is_a_classifier_for_the_adapter(bert_classifier, pca):
    from interp_widgets.adapter import ModelAdapter
    from interp_widgets.tasks import task_for

    model, tokenizer = bert_classifier
    wrapper = InputsToConceptsForSequenceClassification(pca, model)
    adapter = ModelAdapter(wrapper, tokenizer)
    assert task_for(adapter).name == "sequence-classification" and task_for(adapter).labels == [
        f"concept {i}" for i in range(6)
    ]
    assert model.config.num_labels == 3  # the user's config is copied, not edited
    short = tokenizer("Not bad.")["input_ids"]
    ids = torch.tensor([short + [tokenizer.pad_token_id] * 4])
    mask = torch.tensor([[1] * len(short) + [0] * 4])  # padding does not count
    tc = text_concepts(pca, model, tokenizer, "Not bad.")
    with torch.no_grad():
        padded = wrapper(input_ids=ids, attention_mask=mask).logits[0].numpy()
    np.testing.assert_allclose(padded, tc.coefficients.sum(0), atol=1e-4)


def test_errors_name_the_problem_and_the_fix(bert_classifier, pca, bert_store):
    model, tokenizer = bert_classifier
    nmf = NMFConcepts(3, nonnegative="shift", estimator_params={"random_state": 0, "max_iter": 400}).fit(bert_store)
    with pytest.raises(TypeError, match="gradient method and NMFConcepts has no differentiable encoder.*occlusion"):
        concept_attribution(nmf, model, tokenizer, TEXT, concept=0, method="integrated_gradients")
    with pytest.raises(ValueError, match="attention weights and scores no target"):
        concept_attribution(pca, model, tokenizer, TEXT, concept=0, method="raw_attention")
    with pytest.raises(ValueError, match="concept 6 out of range; there are 6 concepts"):
        concept_attribution(pca, model, tokenizer, TEXT, concept=6, method="occlusion")
    with pytest.raises(TypeError, match="by index"):
        concept_attribution(pca, model, tokenizer, TEXT, concept="food", method="occlusion")
    with pytest.raises(ValueError, match="position.*tokens"):
        concept_attribution(pca, model, tokenizer, TEXT, concept=0, position=50, method="occlusion")
    with pytest.raises(ValueError, match="fitted on layer layer:0, not layer:1"):
        concept_attribution(pca, model, tokenizer, TEXT, concept=0, layer=1, method="occlusion")
    with pytest.raises(TypeError, match="one string"):
        concept_attribution(pca, model, tokenizer, [TEXT], concept=0, method="occlusion")
    assert gradient_support(nmf) == "NMFConcepts: perturbation methods only (no differentiable encoder)"


def test_width_mismatch_is_refused(bert_classifier):
    model, _ = bert_classifier
    wide = PCAConcepts(2).fit(np.random.default_rng(0).normal(size=(50, 48)).astype(np.float32))
    with pytest.raises(ValueError, match="reads 48 features but layer:1 of this model has 32"):
        InputsToConceptsForSequenceClassification(wide, model, layer=1)


@pytest.mark.parametrize("kind", ["pca", "ica", "svd", "incremental_pca", "direction"])
def test_affine_torch_encoders_agree_with_transform(kind, bert_store):
    from interp_widgets.concepts import ICAConcepts, IncrementalPCAConcepts, SVDConcepts

    rng = np.random.default_rng(1)
    make = {
        "pca": lambda: PCAConcepts(5, estimator_params={"whiten": True}),
        "ica": lambda: ICAConcepts(4, estimator_params={"random_state": 0, "max_iter": 400}),
        "svd": lambda: SVDConcepts(4, estimator_params={"random_state": 0}),
        "incremental_pca": lambda: IncrementalPCAConcepts(4),
        "direction": lambda: DirectionConcepts(3, directions=rng.normal(size=(3, 32)).astype(np.float32)),
    }[kind]
    cm = make().fit(bert_store)
    X = bert_store[:40]
    assert cm.differentiable_encoder and cm.affine_encoder
    codes = cm.encode_torch(torch.tensor(X))
    np.testing.assert_allclose(codes.numpy(), cm.transform(X), atol=2e-4, rtol=1e-4)


def test_which_models_have_a_differentiable_encoder():
    from interp_widgets.concepts import CONCEPT_MODELS, ConceptModel

    differentiable = {
        name
        for name, cls in CONCEPT_MODELS.items()
        if cls.affine_encoder or cls.encode_torch is not ConceptModel.encode_torch
    }
    assert {"pca", "incremental_pca", "ica", "svd", "direction", "sae"} <= differentiable
    assert (
        not {
            "nmf",
            "minibatch_nmf",
            "semi_nmf",
            "kmeans",
            "minibatch_kmeans",
            "dictionary_learning",
            "minibatch_dictionary_learning",
        }
        & differentiable
    )


def test_cached_attributions_for_the_browser(bert_classifier, pca):
    model, tokenizer = bert_classifier
    attributions = ConceptInputAttributions(pca, model, tokenizer, method_params={"n_steps": 8, "progress": False})
    assert attributions.method == "integrated_gradients"
    first = attributions.scores(TEXT, 2)
    assert attributions.scores(TEXT, 2) is first and attributions.cached == [(TEXT, 2)]
    assert attributions.scores(TEXT, 3, compute=False) is None
    direct = concept_attribution(
        pca, model, tokenizer, TEXT, concept=2, method_params={"n_steps": 8, "progress": False}
    )
    np.testing.assert_allclose(first.scores, direct.scores)
