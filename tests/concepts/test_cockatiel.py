"""COCKATIEL: per-class NMF of excerpt activations, total Sobol indices through the head, occlusion."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.concepts import (
    CockatielResult,
    NeuronsAsConcepts,
    NMFConcepts,
    cockatiel,
    sobol_concept_importance,
)
from interp_widgets.concepts.cockatiel import excerpt_spans
from interp_widgets.demo import corpus
from tests.conftest import model_fingerprint

TEXTS = corpus()[:40]


@pytest.fixture(scope="module")
def classifier(bert_classifier):
    return bert_classifier


@pytest.fixture(scope="module")
def result(classifier):
    model, tokenizer = classifier
    return cockatiel(model, tokenizer, TEXTS, n_concepts=3, n_samples=256, progress=False)


def pooler_output(model, tokenizer, texts) -> np.ndarray:
    """The input of the tiny BERT's classifier layer (the tanh pooler output), computed here without the pipeline."""
    with torch.no_grad():
        enc = tokenizer(list(texts), padding=True, return_tensors="pt")
        return model.bert(**enc).pooler_output.numpy()


def test_sobol_linear_head_matches_known_shares():
    # a linear head on the decoded activations: score = Σ c_i M_i + const with c_i = u_i (W_i · w), independent
    # uniform masks, so the total index of concept i is exactly c_i² / Σ c_j²
    rng = np.random.default_rng(0)
    nmf = NMFConcepts(4, estimator_params={"random_state": 0, "max_iter": 500}).fit(rng.random((50, 6)))
    head = torch.nn.Linear(6, 2)
    with torch.no_grad():
        head.weight.copy_(torch.tensor(rng.normal(size=(2, 6)), dtype=torch.float32))
    u = nmf.transform(rng.random((5, 6)))
    indices = sobol_concept_importance(nmf, u, head, 1, n_samples=1024, seed=3)
    c = u * (nmf.components_ @ head.weight[1].detach().numpy())
    expected = c**2 / (c**2).sum(axis=1, keepdims=True)
    assert np.abs(indices - expected).max() < 0.01
    # the index ordering is not that of the coefficients: a concept that the head ignores has index 0
    with torch.no_grad():
        head.weight[1] = 0.0
    assert np.isnan(sobol_concept_importance(nmf, u, head, 1, n_samples=64)).all()  # a constant score: no shares


def test_sobol_interaction_head_matches_analytic_indices():
    # neurons as concepts with unit coefficients: the decoded activation is the mask itself; the head multiplies
    # concepts 0 and 1 and ignores 2. For M ~ U(0, 1): Var(M0 M1) = 1/9 - 1/16 = 7/144 and
    # E[Var(f | M1)] = E[M1²] Var(M0) = 1/36, so S_T0 = S_T1 = 4/7 (they sum past 1: an interaction) and S_T2 = 0
    neurons = NeuronsAsConcepts(3).fit(np.ones((1, 3), dtype=np.float32))
    indices = sobol_concept_importance(
        neurons, np.ones((1, 3)), lambda a: (a[..., 0] * a[..., 1])[..., None], 0, n_samples=4096
    )[0]
    assert indices == pytest.approx([4 / 7, 4 / 7, 0.0], abs=0.01)


def test_pipeline_sobol_equals_the_linear_head_shares(result, classifier):
    model, _ = classifier
    for part in result.classes:
        w = model.classifier.weight[part.class_id].detach().numpy()
        c = part.coefficients * (part.concept_model.components_ @ w)
        expected = c**2 / (c**2).sum(axis=1, keepdims=True)
        assert np.abs(part.sobol_per_excerpt - expected).max() < 0.01
        assert part.sobol == pytest.approx(expected.mean(axis=0), abs=0.01)
        assert part.top_concepts() == [int(i) for i in np.argsort(-part.sobol, kind="stable")]


def test_each_class_nmf_sees_only_its_predicted_excerpts(result, classifier):
    model, tokenizer = classifier
    predictions = pooler_output(model, tokenizer, TEXTS) @ model.classifier.weight.detach().numpy().T
    predictions = (predictions + model.classifier.bias.detach().numpy()).argmax(axis=1)
    assert result.predictions.tolist() == predictions.tolist()
    assert [c.label for c in result.classes] == ["neutral", "positive"]  # the tiny model never predicts negative
    for part in result.classes:
        own = np.flatnonzero(predictions == part.class_id)
        assert set(part.text_ids.tolist()) == set(own.tolist())
        expected = [TEXTS[i][a:b] for i in own for a, b in excerpt_spans(TEXTS[i], "clause")]
        assert part.excerpts == expected
        assert part.concept_model.fit_info_["rows"] == len(expected)
        # the excerpts run through the model alone: their penultimate activations are the pooler outputs
        direct = pooler_output(model, tokenizer, part.excerpts)
        np.testing.assert_allclose(part.activations, direct, atol=1e-5)
        # the shift is the minimum over this class's excerpts only
        np.testing.assert_allclose(part.concept_model.shift_, np.minimum(direct.min(axis=0), 0), atol=1e-5)
    assert sum(len(c.excerpts) for c in result.classes) == sum(len(excerpt_spans(t)) for t in TEXTS)


def test_occlusion_is_the_drop_of_each_concept_coefficient(result, classifier):
    model, tokenizer = classifier
    text = "Great food, slow service, and the staff were lovely."
    for granularity, units in (("clause", ["Great food,", "slow service,", "and the staff were lovely."]),
                               ("word", None)):  # fmt: skip
        occ = result.explain(text, granularity=granularity)
        if units is not None:
            assert occ.units == units
        variants = [text] + [(text[:a].rstrip() + " " + text[b:].lstrip()).strip() for a, b in occ.spans]
        part = result[occ.label]
        coefficients = part.concept_model.transform(pooler_output(model, tokenizer, variants))
        np.testing.assert_allclose(occ.importance, coefficients[0][None] - coefficients[1:], atol=1e-4)
        frame = occ.to_dataframe()
        assert len(frame) == len(occ.units) * part.n_concepts
        sums = frame.groupby("concept")["importance"].sum().to_numpy()
        np.testing.assert_allclose(sums, occ.importance.sum(axis=0), atol=1e-9)
    neutral = result.explain(text, target="neutral", granularity="clause")
    assert neutral.label == "neutral" and neutral.importance.shape == (3, 3)
    # deleting a text's only clause leaves its special tokens: [CLS] [SEP]
    alone = result.explain("Great food.", granularity="clause", target="positive")
    with torch.no_grad():
        empty = model.bert(input_ids=torch.tensor([[tokenizer.cls_token_id, tokenizer.sep_token_id]])).pooler_output
    expected = result["positive"].concept_model.transform(empty.numpy())[0]
    np.testing.assert_allclose(alone.occluded[0], expected, atol=1e-4)


def test_save_load_round_trip(result, classifier, tmp_path):
    model, tokenizer = classifier
    path = result.save(tmp_path / "cockatiel.safetensors")
    assert path.read_bytes()[:8]  # one safetensors file
    again = CockatielResult.load(path)
    assert again.texts == result.texts and again.labels == result.labels and again.head == result.head
    assert again.params == result.params and again.predictions.tolist() == result.predictions.tolist()
    for old, new in zip(result.classes, again.classes):
        assert (new.label, new.class_id, new.excerpts) == (old.label, old.class_id, old.excerpts)
        for name in ("text_ids", "activations", "coefficients", "sobol", "sobol_per_excerpt"):
            np.testing.assert_array_equal(getattr(new, name), getattr(old, name))
        np.testing.assert_array_equal(new.concept_model.transform(old.activations), old.coefficients)
    frame_old, frame_new = result.to_dataframe(), again.to_dataframe()
    assert frame_new.equals(frame_old)
    with pytest.raises(ValueError, match="pass model= and tokenizer="):
        again.explain("Slow service.")
    occ = again.explain("Slow service.", model=model, tokenizer=tokenizer)
    np.testing.assert_allclose(occ.importance, result.explain("Slow service.").importance, atol=1e-6)


def test_views_table_and_browser(result):
    frame = result.to_dataframe()
    assert frame.groupby("class")["rank"].max().tolist() == [2, 2]
    assert "<table" in result._repr_mimebundle_()["text/html"]
    assert result.chart(top=2).mark == "bar"
    browser = result.widget("positive")
    assert browser.visible_order() == result["positive"].top_concepts()
    np.testing.assert_allclose(np.asarray(browser.importance, dtype=float), result["positive"].sobol)
    top = browser.concept_detail(result["positive"].top_concepts(1)[0])["examples"][0]
    assert "".join(top["tokens"]).strip() in result["positive"].excerpts  # a top context is an excerpt


def test_model_untouched_and_other_settings(classifier):
    model, tokenizer = classifier
    before = model_fingerprint(model, tokenizer)
    model.train()  # a mode the pipeline must restore
    probability = cockatiel(model, tokenizer, TEXTS[:20], n_concepts=2, excerpts="sentence", score="probability",
                            nonnegative="relu", n_samples=16, progress=False)  # fmt: skip
    probability.explain("Not bad at all.")
    assert all(m.training for m in model.modules())
    model.eval()
    assert model_fingerprint(model, tokenizer) == before
    assert probability.params["score"] == "probability" and probability.params["n_samples"] == 16
    part = probability.classes[-1]
    assert part.concept_model.shift_ is None and np.isfinite(part.sobol).all()


def test_decoder_classifier_reads_the_last_token(gpt2_classifier):
    model, tokenizer = gpt2_classifier
    texts = ["Great food, slow service.", "Not bad at all, really.", "The staff were lovely; we will return."]
    result = cockatiel(model, tokenizer, texts * 2, n_concepts=2, n_samples=16, progress=False)
    assert result.head == "score" and len(result.classes) >= 1


def test_bad_inputs_are_refused(classifier, gpt2_lm):
    model, tokenizer = classifier
    with pytest.raises(ValueError, match="explains sequence classifiers.*causal-lm"):
        cockatiel(*gpt2_lm, TEXTS[:4], progress=False)
    with pytest.raises(ValueError, match="no input is predicted as 'negative'"):
        cockatiel(model, tokenizer, TEXTS, classes=["negative"], n_concepts=2, progress=False)
    with pytest.raises(ValueError, match="has 8 excerpts, fewer than n_concepts=9"):
        cockatiel(model, tokenizer, TEXTS, classes="neutral", n_concepts=9, progress=False)
    with pytest.raises(ValueError, match="does not give the model's logits"):
        cockatiel(model, tokenizer, TEXTS[:4], head="bert.pooler.dense", progress=False)
    with pytest.raises(ValueError, match="no module 'nope'"):
        cockatiel(model, tokenizer, TEXTS[:4], head="nope", progress=False)
    with pytest.raises(ValueError, match="unknown nonnegative"):
        cockatiel(model, tokenizer, TEXTS[:4], nonnegative="abs", progress=False)
    with pytest.raises(ValueError, match="unknown class 'nonsense'|unknown class"):
        cockatiel(model, tokenizer, TEXTS[:4], classes=["nonsense"], progress=False)
