"""The compute families added after the attributions, on bf16 and fp16 models: finite results held in float32 (the
attention patterns' float16 storage aside), the same answers as the float32 model within half-precision rounding,
and the half-precision model untouched (dtype, weights, mode). Attribution graphs refuse half precision with the fix
named (``tests/circuits/test_attribution_graph.py``); ``tests/attribution/test_ig_numerics.py`` covers attributions.
"""

import copy

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import model_fingerprint

PROMPT = "The room was clean and"
CORRUPT = "The room was cold and"
TEXTS = ["The room was clean.", "Slow service, cold food.", "The staff was kind and the food was good."] * 3


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def half(request, llama_lm):
    model, tokenizer = llama_lm
    return copy.deepcopy(model).to(request.param), tokenizer


@pytest.fixture
def untouched(half):
    """The half-precision model after the test: same dtype, weights and mode as before."""
    model, tokenizer = half
    dtype, before, training = next(model.parameters()).dtype, model_fingerprint(model, tokenizer), model.training
    yield model
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert model_fingerprint(model, tokenizer) == before and model.training == training


def finite_float32_frame(frame: pd.DataFrame, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every float column is float32 or float64 and finite, except where the float32 model's ``reference`` frame has
    a missing value by design (the lens has no next token after the last position)."""
    floats = frame.select_dtypes("floating")
    assert len(frame) > 0 and floats.shape[1] > 0
    assert all(dtype in (np.float32, np.float64) for dtype in floats.dtypes), floats.dtypes
    missing = np.zeros(floats.shape, bool)
    if reference is not None:
        missing = reference.select_dtypes("floating").isna().to_numpy()
        assert missing.shape == floats.shape and not missing.all()
        assert floats.isna().to_numpy()[missing].all()
    bad = ~np.isfinite(floats.to_numpy()) & ~missing
    assert not bad.any(), floats[bad.any(axis=1)]
    return frame


def test_logit_lens_and_attention_patterns(llama_lm, half, untouched):
    from interp_widgets.attribution.patterns import attention_patterns
    from interp_widgets.lens import logit_lens

    model, tokenizer = llama_lm
    got = logit_lens(untouched, tokenizer, PROMPT, progress=False)
    expected = logit_lens(model, tokenizer, PROMPT, progress=False)
    frame, reference = finite_float32_frame(got.to_dataframe(), expected.to_dataframe()), expected.to_dataframe()
    np.testing.assert_allclose(frame["top1_prob"], reference["top1_prob"], atol=0.02)
    patterns = attention_patterns(untouched, tokenizer, PROMPT, progress=False)
    reference = attention_patterns(model, tokenizer, PROMPT, progress=False)
    for a, b in zip(patterns.weights, reference.weights, strict=True):
        assert a.dtype == np.float16 and np.isfinite(a).all()
        np.testing.assert_allclose(a.astype(np.float32).sum(-1), 1, atol=2e-2)  # rows are distributions
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), atol=3e-2)


def test_activation_and_attribution_patching(llama_lm, half, untouched):
    from interp_widgets.interventions import activation_patching, attribution_patching

    model, tokenizer = llama_lm
    got = activation_patching(untouched, tokenizer, PROMPT, CORRUPT, points=("resid_pre", "head"), progress=False)
    expected = activation_patching(model, tokenizer, PROMPT, CORRUPT, points=("resid_pre", "head"), progress=False)
    frame = finite_float32_frame(got.to_dataframe())
    reference = expected.to_dataframe()
    assert len(frame) == len(reference)
    scale = np.abs(reference.select_dtypes("floating").to_numpy()).max()
    np.testing.assert_allclose(frame.select_dtypes("floating").to_numpy(),
                               reference.select_dtypes("floating").to_numpy(), atol=0.1 * scale)  # fmt: skip
    finite_float32_frame(attribution_patching(untouched, tokenizer, PROMPT, CORRUPT).to_dataframe())


def test_steering(llama_lm, half, untouched):
    from interp_widgets.interventions import steer

    model, tokenizer = llama_lm
    direction = torch.linspace(-1, 1, model.config.hidden_size)
    kwargs = dict(scales=(-4.0, 0.0, 4.0), max_new_tokens=3, damage_texts=["The staff was kind."], damage_tokens=6,
                  progress=False)  # fmt: skip
    got = steer(untouched, tokenizer, PROMPT, direction, "layer:1", **kwargs).to_dataframe()
    expected = steer(model, tokenizer, PROMPT, direction, "layer:1", **kwargs).to_dataframe()
    finite_float32_frame(got, expected)  # no metric was asked for: its columns are empty on both
    np.testing.assert_allclose(got["damage"], expected["damage"], atol=0.05)


def test_activations_sae_and_transcoders(half, untouched):
    from interp_widgets.circuits import TranscoderSet
    from interp_widgets.concepts import SparseAutoencoder, Transcoder, collect_activations

    _, tokenizer = half
    store = collect_activations(untouched, tokenizer, TEXTS, layer=1, progress=False)
    rows = store.to_numpy()
    assert rows.dtype == np.float32 and np.isfinite(rows).all() and np.abs(rows).max() > 0
    codes = SparseAutoencoder(16, k=4, max_epochs=2, progress=False).fit(store).transform(store)
    assert codes.dtype == np.float32 and np.isfinite(codes).all() and (codes > 0).any()
    transcoders = TranscoderSet.fit(untouched, tokenizer, TEXTS, transcoder=Transcoder(16, k=4, max_epochs=2,
                                                                                       progress=False))  # fmt: skip
    for layer in transcoders.layers:
        weights = transcoders.replacement_weights(layer)
        assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in weights.values()), layer


def test_monitor_replay(half, untouched):
    from interp_widgets.geometry import replay

    _, tokenizer = half
    frame = replay([untouched], TEXTS, ["layer:0", "layer:1"], model=None, tokenizer=tokenizer, rank=2, n_controls=5,
                   progress=False).to_dataframe()  # fmt: skip
    finite_float32_frame(frame[frame["metric"] != "monitor_ms"])
