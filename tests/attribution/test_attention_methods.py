"""Attention methods checked against numpy computations on ``output_attentions`` of an eager copy of the model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.attribution import AttentionRollout, GradientWeightedAttention, RawAttention, attribute
from tests.conftest import model_fingerprint
from tests.attribution.test_perturbation import bert, gpt2  # noqa: F401  (wide-initialised fixtures: sharp attention patterns)

TEXTS = ["Not bad at all, honestly.", "Dull."]


_TWINS: dict[int, torch.nn.Module] = {}


def eager_attentions(model, ids, *, target=None, position=None):
    """Attention maps ``(layers, heads, T, T)`` of an eager deep copy of ``model`` and, with ``target``, the gradient
    of the target logit (at ``position`` for language models) with respect to them."""
    if id(model) not in _TWINS:
        _TWINS[id(model)] = copy.deepcopy(model).eval()
        _TWINS[id(model)].set_attn_implementation("eager")
    out = _TWINS[id(model)](input_ids=torch.as_tensor(ids)[None], output_attentions=True)
    attentions = out.attentions
    grads = None
    if target is not None:
        logits = out.logits[0] if position is None else out.logits[0, position]
        grads = torch.autograd.grad(logits[target], attentions)
        grads = np.stack([g[0].double().numpy() for g in grads])
    return np.stack([a[0].detach().double().numpy() for a in attentions]), grads


def numpy_rollout(attentions):
    result = np.eye(attentions.shape[-1])
    for layer in attentions:
        mixed = 0.5 * layer.mean(0) + 0.5 * np.eye(len(result))
        result = (mixed / mixed.sum(-1, keepdims=True)) @ result
    return result


def numpy_chefer(attentions, grads):
    relevance = np.eye(attentions.shape[-1])
    for a, g in zip(attentions, grads):
        relevance = relevance + np.maximum(a * g, 0).mean(0) @ relevance
    return relevance


def test_raw_attention_is_the_cls_row_of_the_last_layer_and_sums_to_one(bert):
    model, tokenizer = bert
    results = RawAttention(progress=False).attribute(model, tokenizer, TEXTS, target=[0, 2])
    for text, result in zip(TEXTS, results):
        attentions, _ = eager_attentions(model, tokenizer(text)["input_ids"])
        assert result.tokens[0] == "[CLS]" and result.special_mask[[0, -1]].all()
        np.testing.assert_allclose(result.scores, np.tile(attentions[-1].mean(0)[0], (2, 1)), atol=1e-6)
        np.testing.assert_allclose(result.scores.sum(1), 1.0, atol=1e-6)
        assert not result.signed and "unsigned" in result.score_meaning
    first = RawAttention(layer=0, progress=False).attribute(model, tokenizer, TEXTS[0])
    np.testing.assert_allclose(
        first.scores[0], eager_attentions(model, tokenizer(TEXTS[0])["input_ids"])[0][0].mean(0)[0], atol=1e-6
    )


def test_rollout_equals_numpy_rollout_for_encoders_and_generation(bert, gpt2):
    model, tokenizer = bert
    results = AttentionRollout(progress=False).attribute(model, tokenizer, TEXTS)
    for text, result in zip(TEXTS, results):
        attentions, _ = eager_attentions(model, tokenizer(text)["input_ids"])
        np.testing.assert_allclose(result.scores[0], numpy_rollout(attentions)[0], atol=1e-6)
    model, tokenizer = gpt2
    result = AttentionRollout(progress=False).attribute(
        model, tokenizer, "The room was", continuation=" quiet and warm"
    )
    attentions, _ = eager_attentions(model, np.concatenate([tokenizer("The room was")["input_ids"], result.target_ids]))
    rollout = numpy_rollout(attentions)
    for t, position in enumerate(result.target_positions):
        np.testing.assert_allclose(result.scores[t, : position + 1], rollout[position, : position + 1], atol=1e-6)
        assert np.isnan(result.scores[t, position + 1 :]).all()


def test_gradient_weighted_attention_equals_chefer_rule_on_manual_gradients(bert, gpt2):
    model, tokenizer = bert
    results = GradientWeightedAttention(progress=False).attribute(model, tokenizer, TEXTS, target=[0, 2])
    for text, result in zip(TEXTS, results):
        for row, target in enumerate((0, 2)):
            attentions, grads = eager_attentions(model, tokenizer(text)["input_ids"], target=target)
            np.testing.assert_allclose(result.scores[row], numpy_chefer(attentions, grads)[0], atol=1e-6)
        assert not np.allclose(result.scores[0], result.scores[1])
    model, tokenizer = gpt2
    result = GradientWeightedAttention(score="logit", progress=False).attribute(
        model, tokenizer, "The room was", continuation=" quiet"
    )
    ids = np.concatenate([tokenizer("The room was")["input_ids"], result.target_ids])
    for t, position in enumerate(result.target_positions):
        attentions, grads = eager_attentions(model, ids, target=int(result.target_ids[t]), position=int(position))
        np.testing.assert_allclose(
            result.scores[t, : position + 1], numpy_chefer(attentions, grads)[position, : position + 1], atol=1e-6
        )


def test_decoder_classifier_and_masked_lm_read_the_scored_position(gpt2_classifier, bert_masked_lm):
    model, tokenizer = gpt2_classifier
    result = RawAttention(progress=False).attribute(model, tokenizer, "Good film.")
    attentions, _ = eager_attentions(model, tokenizer("Good film.")["input_ids"])
    np.testing.assert_allclose(result.scores[0], attentions[-1].mean(0)[-1], atol=1e-6)
    model, tokenizer = bert_masked_lm
    result = RawAttention(progress=False).attribute(model, tokenizer, "The room was [MASK] today.")
    ids = tokenizer("The room was [MASK] today.")["input_ids"]
    attentions, _ = eager_attentions(model, ids)
    np.testing.assert_allclose(result.scores[0], attentions[-1].mean(0)[ids.index(tokenizer.mask_token_id)], atol=1e-6)


@pytest.mark.parametrize(
    "method",
    [RawAttention(progress=False), AttentionRollout(progress=False), GradientWeightedAttention(progress=False)],
)
def test_generation_rows_ignore_later_tokens(gpt2, method):
    model, tokenizer = gpt2
    warm, cold = (
        method.attribute(model, tokenizer, "The room was", continuation=c)
        for c in (" quiet and warm", " quiet and cold")
    )
    n_prompt = len(tokenizer("The room was")["input_ids"])
    for t in range(2):  # the first two targets see the same sources in both continuations
        np.testing.assert_allclose(warm.scores[t, : n_prompt + t], cold.scores[t, : n_prompt + t], atol=1e-6)
        assert np.isnan(warm.scores[t, n_prompt + t :]).all() and np.isnan(cold.scores[t, n_prompt + t :]).all()


def test_llama_generation(llama_lm):
    result = attribute(*llama_lm, "The room was", method="attention_rollout", max_new_tokens=3, granularity="word")
    assert result.scores.shape[0] == 3 and np.isnan(result.scores[0, -1]) and np.isfinite(result.scores[-1, :-1]).all()


def test_word_granularity_sums_token_scores(bert):
    model, tokenizer = bert
    tokens = AttentionRollout(progress=False).attribute(model, tokenizer, "An unbelievably dull film.")
    words = AttentionRollout(progress=False).attribute(
        model, tokenizer, "An unbelievably dull film.", granularity="word"
    )
    assert words.tokens == ["An", "unbelievably", "dull", "film", "."]
    assert words.scores[0, 1] == pytest.approx(tokens.scores[0, tokens.word_ids == 1].sum())


def test_the_model_is_left_untouched_and_its_attention_still_works(bert, gpt2):
    for (model, tokenizer), kwargs in ((bert, {"target": [0, 1]}), (gpt2, {"max_new_tokens": 2})):
        model.train()
        implementation = model.config._attn_implementation
        before = model_fingerprint(model, tokenizer)
        for method in (
            RawAttention(progress=False),
            AttentionRollout(progress=False),
            GradientWeightedAttention(progress=False),
        ):
            method.attribute(model, tokenizer, "Not bad.", **kwargs)
        assert model_fingerprint(model, tokenizer) == before
        assert model.config._attn_implementation == implementation == "sdpa"
        assert not hasattr(model, "_output_capturing_hooks_installed")
        model.eval()
    model, tokenizer = bert
    twin = copy.deepcopy(model)
    twin.set_attn_implementation("eager")
    assert len(twin(**tokenizer("Good.", return_tensors="pt"), output_attentions=True).attentions) == 2


def test_bad_layers_get_clear_errors_and_restore_the_model(bert):
    model, tokenizer = bert
    with pytest.raises(ValueError, match="layer must be an integer"):
        RawAttention(layer="last")
    before = model_fingerprint(model, tokenizer)
    with pytest.raises(ValueError, match="layer 5 is out of range; the model has 2 attention layers"):
        RawAttention(layer=5, progress=False).attribute(model, tokenizer, "Good.")
    assert model_fingerprint(model, tokenizer) == before and model.config._attn_implementation == "sdpa"
