"""The TopK SAE's sparse training step (only the k active concepts of each row are gathered and scattered, fused
Adam) gives the results of the dense formulation ``scatter(relu(topk)) @ W_dec`` with a plain Adam, up to float
rounding: one step's loss and gradients to 1e-12 in float64, and a whole fit's weights and history in float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.concepts import SparseAutoencoder, training
from interp_widgets.concepts.sae import _SparseAutoencoderBase, topk_reconstruct


def _dense_reconstruct(xn, W_enc, b_enc, W_dec, k):
    pre = xn @ W_enc + b_enc
    values, indices = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, torch.relu(values)) @ W_dec


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("transposed", [False, True])  # W_enc stored as (d, n), or as the transpose of an (n, d)
def test_sparse_step_matches_the_dense_formulation(dtype, tolerance, transposed):
    g = torch.Generator().manual_seed(3)
    n_rows, d, n, k = 37, 12, 50, 5
    x = torch.randn(n_rows, d, generator=g, dtype=dtype)
    target = torch.randn(n_rows, d, generator=g, dtype=dtype)
    W_dec0 = torch.randn(n, d, generator=g, dtype=dtype)
    W_enc0 = W_dec0.T.clone() if transposed else torch.randn(d, n, generator=g, dtype=dtype)
    assert W_enc0.is_contiguous() != transposed
    b_enc0 = torch.randn(n, generator=g, dtype=dtype) * 0.1
    b_dec0 = torch.randn(d, generator=g, dtype=dtype)
    results = []
    for fn in (topk_reconstruct, _dense_reconstruct):
        W_enc, b_enc, W_dec, b_dec = (t.clone().requires_grad_(True) for t in (W_enc0, b_enc0, W_dec0, b_dec0))
        xn = (x - b_dec) / 1.7  # as in training: the input depends on b_dec, so its gradient flows through xn
        out = fn(xn, W_enc, b_enc, W_dec, k)
        x_hat = out[0] if isinstance(out, tuple) else out
        loss = ((xn - x_hat - target) ** 2).mean()
        loss.backward()
        results.append((x_hat.detach(), loss.detach(), W_enc.grad, b_enc.grad, W_dec.grad, b_dec.grad))
    for ours, dense in zip(*results):
        assert ours.shape == dense.shape
        torch.testing.assert_close(ours, dense, atol=tolerance, rtol=tolerance)
    assert float(results[1][3].abs().sum()) > 0 and float(results[1][2].abs().sum()) > 0  # the gradients are not zero
    x_hat, values, indices = topk_reconstruct(x, W_enc0, b_enc0, W_dec0, k)
    top = (x @ W_enc0 + b_enc0).topk(k, dim=-1)
    torch.testing.assert_close(values, torch.relu(top.values), atol=0, rtol=0)  # the very same selection
    assert torch.equal(indices, top.indices)


class _DenseTopK(SparseAutoencoder):
    """The TopK SAE as it was trained before the sparse step: dense codes, then codes @ W_dec."""

    def _loss(self, xn, w):
        return _SparseAutoencoderBase._loss(self, xn, w)


def test_fit_matches_the_dense_step_with_plain_adam(monkeypatch):
    rng = np.random.default_rng(0)
    atoms = rng.normal(size=(40, 16))
    codes = rng.exponential(size=(800, 40)) * (rng.random((800, 40)) < 0.1)
    X = (codes @ atoms + 0.05 * rng.normal(size=(800, 16))).astype(np.float32)
    params = dict(activation="topk", k=4, max_epochs=3, batch_size=128, monitor_rows=100, lr=3e-3, progress=False)
    ours = SparseAutoencoder(64, **params).fit(X)
    monkeypatch.setattr(training, "_adam", lambda parameters, lr: torch.optim.Adam(list(parameters), lr=lr))
    reference = _DenseTopK(64, **params).fit(X)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        torch.testing.assert_close(ours.weights_[name], reference.weights_[name], atol=1e-4, rtol=1e-4)
    for mine, theirs in zip(ours.fit_info_["history"], reference.fit_info_["history"]):
        assert mine["dead"] == theirs["dead"] and mine["resampled"] == theirs["resampled"]
        assert mine["monitor_loss"] == pytest.approx(theirs["monitor_loss"], rel=1e-4)
    np.testing.assert_allclose(ours.transform(X[:50]), reference.transform(X[:50]), atol=1e-4)


def test_adam_is_fused_on_cpu_and_falls_back(monkeypatch):
    parameter = torch.zeros(3, requires_grad=True)
    assert training._adam([parameter], 1e-3).defaults["fused"] is True
    plain = torch.optim.Adam

    def no_fused_kernel(params, lr, fused=None):  # what torch raises on a device without a fused kernel
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return plain(params, lr=lr)

    monkeypatch.setattr(torch.optim, "Adam", no_fused_kernel)
    fallback = training._adam(iter([parameter]), 1e-3)  # a generator of parameters is read once
    assert not fallback.defaults["fused"] and fallback.param_groups[0]["params"] == [parameter]
