"""Integrated gradients on RMSNorm decoders: zero baselines, half precision, and Captum at equal nodes."""

from __future__ import annotations

import copy

import numpy as np
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import IntegratedGradients, Saliency
from interp_widgets.attribution.gradient import baseline_embeddings
from tests.conftest import model_fingerprint

PROMPT = "The room was clean and the food"
BF16_SMOLLM2_TOLERANCE = 0.25


def _visible(result) -> np.ndarray:
    return result.scores[~np.isnan(result.scores)]


def _captum_ig(model, x, base, position, target_id, n_steps):
    """Captum's IG of log p(target) at ``position`` on the input embeddings (per-token sums)."""
    from captum.attr import IntegratedGradients as CaptumIG

    def forward(embeds):
        return torch.log_softmax(model(inputs_embeds=embeds).logits[:, position].float(), dim=-1)[:, target_id]

    attributions, delta = CaptumIG(forward).attribute(
        x[None], baselines=base[None], n_steps=n_steps, method="gausslegendre", return_convergence_delta=True
    )
    return attributions[0].sum(-1).detach().double().numpy(), float(delta)


def test_zero_baseline_matches_captum_at_equal_nodes_on_a_tiny_llama(llama_lm):
    # Gauss-Legendre never evaluates the baseline itself, neither in Captum nor here: at exactly zero embeddings an
    # RMSNorm model's gradient is not finite, and neither result may carry it
    model, tokenizer = llama_lm
    adapter = ModelAdapter(model, tokenizer)
    for keep_first in (False, True):
        ours = IntegratedGradients(n_steps=16, baseline="zero", keep_first=keep_first, progress=False).attribute(
            model, tokenizer, PROMPT, continuation=" was"
        )
        enc = adapter.encode(PROMPT + " was")
        with torch.no_grad():
            x = adapter.embed(torch.as_tensor(enc.input_ids)[None])[0]
        base = baseline_embeddings(adapter, enc, "zero", keep_first=keep_first)
        assert (base[1:].abs().sum() == 0) and bool(base[0].abs().sum() > 0) == keep_first
        theirs, delta = _captum_ig(model, x, base, int(ours.target_positions[0]), int(ours.target_ids[0]), 16)
        visible = ~np.isnan(ours.scores[0])
        np.testing.assert_allclose(ours.scores[0][visible], theirs[visible], rtol=1e-4, atol=1e-6)
        # Captum's delta is Σattr − Δf, our completeness error
        np.testing.assert_allclose(ours.completeness_error[0], delta, rtol=1e-3, atol=1e-5)


def test_adaptive_zero_baseline_meets_completeness_without_the_baseline_gradient(llama_lm):
    model, tokenizer = llama_lm
    result = IntegratedGradients(baseline="zero", keep_first=False, progress=False).attribute(
        model, tokenizer, PROMPT, continuation=" was good"
    )
    assert np.isfinite(_visible(result)).all()
    assert (result.relative_completeness_error <= 0.01).all()
    np.testing.assert_allclose(
        np.nansum(result.scores, axis=1), result.score_delta, atol=0.0101 * np.abs(result.score_delta).max()
    )


def test_zero_baseline_on_smollm2_gives_finite_complete_attributions(smollm2):
    model, tokenizer = smollm2
    before = model_fingerprint(model, tokenizer)
    result = IntegratedGradients(baseline="zero", progress=False).attribute(
        model, tokenizer, "The capital of France is", continuation=" Paris"
    )
    assert np.isfinite(_visible(result)).all()
    assert np.isfinite(result.completeness_error).all()
    assert (result.relative_completeness_error <= 0.01).all(), result.relative_completeness_error
    assert result.params["mesh_nodes"][0] <= 257
    assert model_fingerprint(model, tokenizer) == before


def test_bfloat16_tiny_llama_is_finite_complete_and_close_to_float32(llama_lm):
    model, tokenizer = llama_lm
    half = copy.deepcopy(model).to(torch.bfloat16)
    before = model_fingerprint(half, tokenizer)
    reference = IntegratedGradients(progress=False).attribute(model, tokenizer, PROMPT, continuation=" was good")
    result = IntegratedGradients(progress=False).attribute(half, tokenizer, PROMPT, continuation=" was good")
    assert result.scores.dtype == np.float64 and np.isfinite(_visible(result)).all()
    assert np.isfinite(result.completeness_error).all()
    # the bf16 scores carry rounding noise of ~2^-8 relative; completeness is still within a few percent
    assert (result.relative_completeness_error <= 0.05).all(), result.relative_completeness_error
    assert np.corrcoef(_visible(result), _visible(reference))[0, 1] > 0.95
    fixed = IntegratedGradients(n_steps=16, progress=False).attribute(half, tokenizer, PROMPT, continuation=" was")
    assert np.isfinite(_visible(fixed)).all() and np.isfinite(fixed.completeness_error).all()
    assert next(half.parameters()).dtype == torch.bfloat16
    assert model_fingerprint(half, tokenizer) == before


def test_bfloat16_smollm2_gives_finite_attributions_with_completeness():
    # kept cheap for CI (bf16 matmuls are slow on CPU): a 6-token input, 4 Gauss-Legendre nodes, one target
    from interp_widgets.demo import load_lm

    model, tokenizer = load_lm(progress=False, dtype=torch.bfloat16)
    before = model_fingerprint(model, tokenizer)
    ig = IntegratedGradients(n_steps=4, progress=False).attribute(
        model, tokenizer, "The capital of France is", continuation=" Paris"
    )
    assert ig.scores.shape == (1, 6) and np.isfinite(_visible(ig)).all()
    assert np.isfinite(ig.completeness_error).all() and np.isfinite(ig.score_delta).all()
    assert (ig.relative_completeness_error <= BF16_SMOLLM2_TOLERANCE).all(), ig.relative_completeness_error
    saliency = Saliency(progress=False).attribute(model, tokenizer, "The capital of France is", continuation=" Paris")
    assert np.isfinite(_visible(saliency)).all()
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model_fingerprint(model, tokenizer) == before
