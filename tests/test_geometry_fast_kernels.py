"""The monitor's fast kernels (float32 Gram over row blocks, float32 eigensolver) stay within their stated bounds
of the float64 reference, and the monitor's recorded values stay within the bounds that follow."""

import math

import torch

from interp_widgets.geometry import AnisotropyMonitor, TangentProxy, gradient_alignment, normal_controls
from interp_widgets.geometry._kernels import (
    FAST_EIGENVALUE_BOUND,
    GRAM_BLOCK,
    U32,
    blocked_gram32,
    eigenvalues_from_gram,
    fast_eigenvalues,
    representation_bundle,
)
from interp_widgets.geometry.moments import moments_of_points


def cloud(n, d, seed=0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(0, -3, d, dtype=torch.float64)  # anisotropic, decaying spectrum
    return torch.randn(n, d, generator=g, dtype=torch.float64) * scales + offset


def test_blocked_gram32_within_its_bound_for_many_rows():
    for n, d in ((4096, 64), (1000, 130), (300, 7)):
        x = cloud(n, d, seed=n)
        x = x - x.mean(0)
        exact = x.T @ x
        fast = blocked_gram32(x)
        assert fast.dtype == torch.float64
        bound = (GRAM_BLOCK + 2) * U32 * (x.abs().T @ x.abs())
        assert bool(((fast - exact).abs() <= bound).all())
        assert float((fast - exact).norm() / exact.trace()) <= (GRAM_BLOCK + 2) * U32
        assert float((fast - exact).norm() / exact.trace()) > 0  # really float32: not the exact product


def test_fast_eigenvalues_within_weyl_bound():
    for n, d in ((2000, 96), (64, 200)):
        x = cloud(n, d, seed=d)
        x = x - x.mean(0)
        gram = x.T @ x if n >= d else x @ x.T
        exact = eigenvalues_from_gram(gram, n, d)
        fast = fast_eigenvalues(gram, n, d)
        assert bool(((fast - exact).abs() <= FAST_EIGENVALUE_BOUND(gram.shape[0]) * exact[0]).all())


def test_fast_representation_bundle_close_to_exact():
    x = cloud(1500, 80, offset=3.0)
    exact, fast = representation_bundle(x), representation_bundle(x, fast=True)
    assert exact.keys() == fast.keys()
    for key in exact:
        if not key.startswith("effective_rank"):
            assert abs(fast[key] - exact[key]) <= 1e-4 * max(1.0, abs(exact[key])), key
    # singular values are square roots: each moves by at most sqrt(bound · λ_max), so the weights p_i = s_i/Σs
    # move by at most t = 2·d·sqrt(bound·λ_max)/Σs in L1, and the entropy by at most t·log(d − 1) + h(t)
    # (Fannes–Audenaert); the effective rank is exp(entropy).
    d = x.shape[1]
    c = x - x.mean(0)
    eig = eigenvalues_from_gram(c.T @ c, x.shape[0], d)
    eps = FAST_EIGENVALUE_BOUND(d) * eig[0]
    for key, weights, move in (("effective_rank_singular", eig.sqrt(), eps.sqrt()), ("effective_rank_eigen", eig, eps)):
        t = 2 * d * float(move / weights.sum())
        assert 0 < t < 1
        entropy_bound = t * math.log(d - 1) - t * math.log(t) - (1 - t) * math.log(1 - t)
        assert abs(math.log(fast[key] / exact[key])) <= entropy_bound, key


def test_alignment_from_fast_moments_within_bound():
    G = cloud(3000, 64, seed=3)
    G[:, :4] *= 5
    proxy = TangentProxy.from_basis(torch.linalg.qr(torch.randn(64, 4, dtype=torch.float64))[0])
    controls = normal_controls(proxy, 20, seed=0)
    exact = gradient_alignment(G, proxy, controls)
    fast = gradient_alignment(moments_of_points(G, fast=True), proxy, controls)
    # energies are ratios of traces of M2 pieces, each within (block + 2)·u·tr(M2)
    tol = 4 * (GRAM_BLOCK + 2) * U32
    assert abs(fast.energy_proxy - exact.energy_proxy) <= tol
    assert float((fast.energy_controls - exact.energy_controls).abs().max()) <= tol
    assert abs(fast.delta_iso_proxy - exact.delta_iso_proxy) <= 10 * tol
    assert fast.p_value == exact.p_value


def test_monitor_losses_unchanged_by_fast_kernels():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    state = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.randn(300, 32)

    def run(monitored):
        net.load_state_dict(state)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        monitor = AnisotropyMonitor(net, ["0"], rank=2, n_controls=5, total_steps=6, optimizer=opt,
                                    spectrum_every=1)
        losses = []
        with monitor if monitored else torch.enable_grad():
            for _ in range(6):
                loss = net(x).pow(2).mean()
                loss.backward(); opt.step(); opt.zero_grad(); losses.append(loss.item())
        return losses, monitor

    plain, _ = run(False)
    monitored, monitor = run(True)
    assert plain == monitored
    ranks = monitor.series("effective_rank|0")[1]
    assert bool((ranks[~torch.as_tensor(ranks).isnan().numpy()] > 0).all())
