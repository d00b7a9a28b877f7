"""Tangent-proxy gradient alignment against the known answers of shared/reference/anisotropy-paper.md §10 and
geometry-metrics.md §13 (fixtures 13, 16, 17), the IsoScore package and scikit-learn PCA."""

import dataclasses
import doctest
import math

import numpy as np
import pytest
import torch
from IsoScore import IsoScore as isoscore_package
from sklearn.decomposition import PCA

from interp_widgets.geometry import moments
from interp_widgets.geometry.alignment import controls, proxy, schedule
from interp_widgets.geometry.alignment import measure as alignment
from interp_widgets.geometry.alignment.measure import (
    Moments,
    ProxySchedule,
    TangentProxy,
    removal_traces,
    gradient_alignment,
    normal_controls,
)
from interp_widgets.geometry.metrics import isoscore, isoscore_star, principal_angles, projection_energy


def gaussian(n, d, seed=0, scale=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x if scale is None else x * scale


def coordinate_proxy(d, k):
    return TangentProxy.from_basis(torch.eye(d, dtype=torch.float64)[:, :k])


def complement_basis(basis):
    d, k = basis.shape
    full = torch.linalg.qr(torch.cat([basis, gaussian(d, d - k, seed=99)], dim=1)).Q
    return full[:, k:]


@pytest.fixture
def float64_default():
    """Run the IsoScore package at full precision (its constants follow the default dtype)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_docstring_examples_run():
    for module in (alignment, controls, moments, proxy, schedule):
        assert doctest.testmod(module, raise_on_error=False).failed == 0, module.__name__


# ---------------------------------------------------------------- moments (fixture 13)


def test_moments_merge_over_random_chunks_equals_one_shot():
    X = 300.0 + gaussian(1000, 6, seed=1)  # large offset: merge must not lose precision
    cuts = [0, 1, 7, 130, 131, 600, 1000]
    merged = Moments.from_rows(X[:1])
    for start, stop in zip(cuts[1:-1], cuts[2:]):
        merged = merged.merge(Moments.from_rows(X[start:stop]))
    exact = X.numpy() - X.numpy().mean(0)
    assert merged.count == 1000
    np.testing.assert_allclose(merged.mean.numpy(), X.numpy().mean(0), rtol=1e-14)
    np.testing.assert_allclose(merged.covariance().numpy(), np.cov(X.numpy().T), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(merged.second_moment().numpy(), X.numpy().T @ X.numpy(), rtol=1e-12)
    np.testing.assert_allclose(Moments.from_rows(X).m2.numpy(), exact.T @ exact, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="dimension"):
        merged.merge(Moments.from_rows(torch.randn(3, 5)))
    with pytest.raises(ValueError, match="at least 2 points"):
        Moments.from_rows(torch.randn(1, 3)).covariance()


# ---------------------------------------------------------------- tangent proxy


def test_pca_proxy_matches_sklearn():
    d, k = 12, 4
    H = 50.0 + gaussian(400, d, seed=2, scale=torch.linspace(4.0, 0.2, d)) @ torch.linalg.qr(gaussian(d, d, 3)).Q
    proxy = TangentProxy.fit(H, rank=k)
    pca = PCA(n_components=k).fit(H.numpy())
    assert proxy.method == "pca" and proxy.rank == k and proxy.dim == d
    np.testing.assert_allclose((proxy.basis.T @ proxy.basis).numpy(), np.eye(k), atol=1e-13)
    assert float(principal_angles(proxy.basis, torch.from_numpy(pca.components_.T)).max()) < 1e-8
    assert proxy.explained_variance == pytest.approx(pca.explained_variance_ratio_.sum(), rel=1e-10)
    np.testing.assert_allclose(proxy.mean.numpy(), H.numpy().mean(0), rtol=1e-14)
    streamed = TangentProxy.from_moments(Moments.from_rows(H[:150]).merge(Moments.from_rows(H[150:])), rank=k)
    assert float(principal_angles(proxy.basis, streamed.basis).max()) < 1e-8
    assert streamed.explained_variance == pytest.approx(proxy.explained_variance, rel=1e-10)


def test_custom_dictionary_is_orthonormalised_by_qr():
    d, k = 10, 3
    dictionary = torch.rand(d, k, generator=torch.Generator().manual_seed(4), dtype=torch.float64)  # NMF-like

    calls = []

    def nonnegative_atoms(H, rank):
        calls.append((H.dtype, rank))
        return dictionary

    proxy = TangentProxy.fit(gaussian(50, d, seed=5), rank=k, method=nonnegative_atoms)
    assert proxy.method == "nonnegative_atoms" and calls == [(torch.float64, k)]
    np.testing.assert_allclose((proxy.basis.T @ proxy.basis).numpy(), np.eye(k), atol=1e-13)
    assert float(principal_angles(proxy.basis, dictionary).max()) < 1e-10
    fixed = TangentProxy.from_basis(dictionary)
    assert fixed.method == "fixed" and fixed.mean is None
    assert float(principal_angles(fixed.basis, dictionary).max()) < 1e-10
    with pytest.raises(ValueError, match="10 × 2"):
        TangentProxy.fit(gaussian(50, d, seed=5), rank=2, method=nonnegative_atoms)


def test_proxy_bad_input():
    H = gaussian(5, 8, seed=6)
    with pytest.raises(ValueError, match="rank must be"):
        TangentProxy.fit(H, rank=8)
    with pytest.raises(ValueError, match="rank must be"):
        TangentProxy.fit(H, rank=True)
    with pytest.raises(ValueError, match="at most 4 directions"):
        TangentProxy.fit(H, rank=5)
    with pytest.raises(ValueError, match="'pca' or a function"):
        TangentProxy.fit(H, rank=2, method="nmf")
    with pytest.raises(ValueError, match="transpose"):
        TangentProxy.from_basis(torch.randn(3, 8))  # sklearn-style k × d components_
    with pytest.raises(ValueError, match="linearly dependent"):
        TangentProxy.from_basis(torch.ones(8, 2))


# ---------------------------------------------------------------- normal controls


def test_controls_are_orthonormal_orthogonal_and_seeded():
    d, k = 40, 6
    proxy = TangentProxy.fit(gaussian(200, d, seed=7), rank=k)
    controls = normal_controls(proxy, n_controls=20, seed=3)
    assert controls.shape == (20, d, k) and controls.dtype == torch.float64
    gram = controls.transpose(1, 2) @ controls
    np.testing.assert_allclose(gram.numpy(), np.broadcast_to(np.eye(k), gram.shape), atol=1e-13)
    assert float((proxy.basis.T @ controls).abs().max()) < 1e-13  # reference bound: 1e-6
    assert torch.equal(controls, normal_controls(proxy.basis, n_controls=20, seed=3))
    assert torch.equal(controls[:5], normal_controls(proxy, n_controls=5, seed=3))  # draw r depends on (seed, r)
    other = normal_controls(proxy, n_controls=20, seed=4)
    assert float(principal_angles(controls[0], other[0]).min()) > 0.01
    distinct = [float(principal_angles(controls[0], controls[r]).max()) for r in range(1, 20)]
    assert min(distinct) > 0.01


def test_controls_stay_orthogonal_when_the_proxy_is_the_draw_itself():
    # reference pitfall: a proxy built from the very Gaussian a control draws leaves ~0 residual
    d, k, seed = 12, 3, 0
    draw_seed = int(np.random.SeedSequence(seed, spawn_key=(0,)).generate_state(1, dtype=np.uint64)[0])
    z = torch.randn(d, k, generator=torch.Generator().manual_seed(draw_seed), dtype=torch.float64)
    proxy = TangentProxy.from_basis(z)
    controls = normal_controls(proxy, n_controls=2, seed=seed)
    assert float((proxy.basis.T @ controls).abs().max()) < 1e-6


def test_control_bad_input():
    proxy = coordinate_proxy(10, 3)
    with pytest.raises(ValueError, match="2k <= d"):
        normal_controls(coordinate_proxy(10, 6))
    with pytest.raises(ValueError, match="n_controls"):
        normal_controls(proxy, n_controls=0)
    with pytest.raises(ValueError, match="seed"):
        normal_controls(proxy, seed=-1)
    with pytest.raises(ValueError, match="not orthonormal"):
        normal_controls(torch.ones(10, 2))
    half = normal_controls(coordinate_proxy(10, 5), n_controls=3)  # 2k = d: the control is the complement
    assert float(principal_angles(half[0], torch.eye(10, dtype=torch.float64)[:, 5:]).max()) < 1e-7


# ---------------------------------------------------------------- the measurement: known answers


def test_planted_subspace_reference_values():
    # anisotropy-paper §10: k-dim subspace with 10× std, Q_T = that subspace, d = 64, k = 8
    d, k = 64, 8
    G = gaussian(20000, d, seed=8)
    G[:, :k] *= 10
    proxy = coordinate_proxy(d, k)
    result = gradient_alignment(G, proxy, normal_controls(proxy, 20, seed=0))
    assert result.energy_proxy == pytest.approx(800 / 856, abs=0.005)  # ≈ 0.94
    assert float(result.energy_controls.mean()) == pytest.approx(0.009, abs=0.001)
    assert result.ratio == pytest.approx(101, rel=0.05)
    assert result.p_value == pytest.approx(1 / 21)
    assert result.enrichment == pytest.approx(result.energy_proxy * d / k)
    assert result.delta_iso_proxy == pytest.approx(0.74, abs=0.01)
    assert float(result.delta_iso_controls.mean()) == pytest.approx(-0.003, abs=0.002)
    assert result.share_proxy == pytest.approx(result.delta_iso_proxy / (1 - result.iso_G))
    assert result.z_analytic > 100


def test_isotropic_gradients_reference_values():
    d, k = 64, 8
    G = gaussian(20000, d, seed=9)
    proxy = coordinate_proxy(d, k)
    controls = normal_controls(proxy, 20, seed=0)
    result = gradient_alignment(G, proxy, controls)
    assert result.iso_G == pytest.approx(0.997, abs=0.002)
    assert result.ratio == pytest.approx(1.0, abs=0.05)
    assert result.energy_proxy == pytest.approx(k / d, rel=0.05)
    assert result.enrichment == pytest.approx(1.0, abs=0.05)
    assert result.delta_iso_proxy == pytest.approx(-k / (d - 1), abs=0.005)  # full-d penalty ≈ −0.126
    assert float(result.delta_iso_controls.mean()) == pytest.approx(-k / (d - 1), abs=0.005)
    complement = gradient_alignment(G, proxy, controls, coordinates="complement")
    assert complement.delta_iso_proxy == pytest.approx(0.0, abs=0.005)
    assert float(complement.delta_iso_controls.abs().max()) < 0.005
    assert complement.energy_proxy == result.energy_proxy


def test_gradients_inside_and_orthogonal_to_the_proxy():
    d, k = 32, 4
    proxy = TangentProxy.from_basis(gaussian(d, k, seed=10))
    controls = normal_controls(proxy, 20, seed=1)
    inside = gaussian(100, k, seed=11) @ proxy.basis.T
    result = gradient_alignment(inside, proxy, controls)
    assert result.energy_proxy == pytest.approx(1.0, abs=1e-12)
    assert result.ratio > 1e6 and result.p_value == pytest.approx(1 / 21)
    assert math.isnan(result.iso_minus_proxy)  # nothing left after removing the proxy
    outside = gaussian(100, d, seed=12)
    outside = outside - outside @ proxy.basis @ proxy.basis.T
    result = gradient_alignment(outside, proxy, controls)
    assert result.energy_proxy == pytest.approx(0.0, abs=1e-12)
    assert result.p_value == 1.0 and result.z_analytic < 0


def test_energies_match_direct_projection():
    d, k = 24, 3
    G = gaussian(80, d, seed=13, scale=torch.linspace(0.1, 2.0, d)) + 0.7
    proxy = TangentProxy.fit(gaussian(300, d, seed=14, scale=torch.linspace(2.0, 0.1, d)), rank=k)
    controls = normal_controls(proxy, 6, seed=2)
    for center, cloud in ((False, G), (True, G - G.mean(0))):
        result = gradient_alignment(G, proxy, controls, center=center)
        assert result.energy_proxy == pytest.approx(projection_energy(cloud, proxy.basis), rel=1e-12)
        expected = [projection_energy(cloud, c) for c in controls]
        np.testing.assert_allclose(result.energy_controls.numpy(), expected, rtol=1e-12)
        expected_p = (1 + sum(e >= result.energy_proxy for e in expected)) / 7
        assert result.p_value == pytest.approx(expected_p)
        assert result.ratio == pytest.approx(result.energy_proxy / np.mean(expected), rel=1e-12)
        mean_direction = proxy.mean / proxy.mean.norm()
        assert result.energy_mean_direction == pytest.approx(
            projection_energy(cloud, mean_direction[:, None]), rel=1e-12
        )


def test_weight_gradient_rows_are_input_side_vectors():
    # reading 2: ∇W = ΔᵀX of nn.Linear lies in the span of its inputs, so inputs inside the proxy give E_T = 1
    d_in, d_out, k = 16, 5, 3
    proxy = TangentProxy.from_basis(gaussian(d_in, k, seed=15))
    layer = torch.nn.Linear(d_in, d_out).double()
    inputs = gaussian(40, k, seed=16) @ proxy.basis.T
    layer(inputs).pow(2).sum().backward()
    result = gradient_alignment(layer.weight.grad, proxy, normal_controls(proxy, 5, seed=0))
    assert result.n_rows == d_out and result.energy_proxy == pytest.approx(1.0, abs=1e-12)


def test_p_value_bounds_and_reproducibility():
    d, k = 20, 2
    G = gaussian(200, d, seed=17, scale=torch.linspace(0.5, 2.0, d))
    proxy = TangentProxy.from_basis(gaussian(d, k, seed=18))
    for n_controls in (1, 5, 20):
        result = gradient_alignment(G, proxy, normal_controls(proxy, n_controls, seed=5))
        assert 1 / (n_controls + 1) <= result.p_value <= 1.0
        again = gradient_alignment(G, proxy, normal_controls(proxy, n_controls, seed=5))
        assert again.to_dict() == result.to_dict() or math.isnan(result.to_dict()["dIso_N_sd"])
    row = gradient_alignment(G, proxy, normal_controls(proxy, 1, seed=5)).to_dict()
    assert math.isnan(row["dIso_N_sd"]) and len(row["E_N"]) == 1


# ---------------------------------------------------------------- analytic null (fixture 17) and z-score


def test_orthogonal_control_null_mean_and_variance():
    d, k = 48, 4
    spectrum = torch.linspace(0.2, 3.0, d)[torch.randperm(d, generator=torch.Generator().manual_seed(19))]
    G = gaussian(3000, d, seed=20, scale=spectrum)
    proxy = TangentProxy.from_basis(gaussian(d, k, seed=21))
    result = gradient_alignment(G, proxy, normal_controls(proxy, 4000, seed=7))
    draws = result.energy_controls
    assert result.null_mean == pytest.approx(k * (1 - result.energy_proxy) / (d - k), rel=1e-12)
    assert float(draws.mean()) == pytest.approx(result.null_mean, rel=0.01)
    assert float(draws.std()) == pytest.approx(result.null_sd, rel=0.08)
    assert result.z_analytic == pytest.approx((result.energy_proxy - result.null_mean) / result.null_sd)


def test_z_score_is_roughly_standard_for_random_proxies():
    d, k = 32, 4
    G = Moments.from_rows(gaussian(2000, d, seed=22, scale=torch.linspace(0.5, 2.0, d)))
    z = []
    for seed in range(40):
        proxy = TangentProxy.from_basis(gaussian(d, k, seed=1000 + seed))
        z.append(gradient_alignment(G, proxy, normal_controls(proxy, 1, seed=seed)).z_analytic)
    z = torch.tensor(z)
    assert abs(float(z.mean())) < 0.55 and 0.55 < float(z.std()) < 1.6


# ---------------------------------------------------------------- IsoScore* removal (fixture 16)


def test_removal_identities_match_direct_projection():
    d, k = 20, 3
    C = torch.cov(gaussian(100, d, seed=23, scale=torch.linspace(0.1, 3.0, d)).T)
    bases = normal_controls(coordinate_proxy(d, k), 4, seed=8)
    aq = C @ bases
    trace, frob2 = removal_traces(C.trace(), (C * C).sum(), aq, bases.transpose(1, 2) @ aq)
    for b in range(4):
        P = torch.eye(d, dtype=torch.float64) - bases[b] @ bases[b].T
        removed = P @ C @ P
        assert float(trace[b]) == pytest.approx(float(removed.trace()), rel=1e-10)
        assert float(frob2[b]) == pytest.approx(float((removed * removed).sum()), rel=1e-10)


@pytest.mark.parametrize(
    "zeta, C0", [(0.0, "scaled_identity"), (0.3, "scaled_identity"), (0.3, "identity"), (0.3, "matrix")]
)
def test_removed_isoscore_star_equals_metric_on_projected_cloud(zeta, C0):
    d, k = 30, 4
    G = gaussian(25, d, seed=24, scale=torch.linspace(0.1, 3.0, d))  # N < d: where shrinkage matters
    target = torch.cov(gaussian(400, d, seed=25, scale=torch.linspace(2.0, 0.5, d)).T) if C0 == "matrix" else C0
    proxy = TangentProxy.from_basis(gaussian(d, k, seed=26))
    controls = normal_controls(proxy, 5, seed=9)
    result = gradient_alignment(G, proxy, controls, zeta=zeta, C0=target)
    assert result.iso_G == pytest.approx(isoscore_star(G, zeta, target), abs=1e-10)
    for basis, value in [(proxy.basis, result.iso_minus_proxy), *zip(controls, result.iso_minus_controls.tolist())]:
        projected = G - G @ basis @ basis.T
        assert value == pytest.approx(isoscore_star(projected, zeta, target), abs=1e-10)
    np.testing.assert_allclose(result.delta_iso_controls.numpy(), result.iso_minus_controls.numpy() - result.iso_G)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy 2 deprecation inside the package
def test_isoscore_star_values_match_package_in_both_coordinate_systems(float64_default):
    d, k, zeta = 24, 4, 0.25
    G = gaussian(30, d, seed=27, scale=torch.linspace(0.2, 2.0, d))
    proxy = TangentProxy.from_basis(gaussian(d, k, seed=28))
    controls = normal_controls(proxy, 3, seed=10)
    full = gradient_alignment(G, proxy, controls, zeta=zeta, C0="identity")
    assert full.iso_G == pytest.approx(float(isoscore_package.IsoScore_star(G.numpy(), np.eye(d), zeta)), abs=1e-10)
    projected = (G - G @ proxy.basis @ proxy.basis.T).numpy()
    expected = float(isoscore_package.IsoScore_star(projected, np.eye(d), zeta))
    assert full.iso_minus_proxy == pytest.approx(expected, abs=1e-10)
    # complement coordinates: the cloud expressed in a basis of the (d − k)-dim complement
    complement = gradient_alignment(G, proxy, controls, zeta=zeta, C0="identity", coordinates="complement")
    inside = (G @ complement_basis(proxy.basis)).numpy()
    expected = float(isoscore_package.IsoScore_star(inside, np.eye(d - k), zeta))
    assert complement.iso_minus_proxy == pytest.approx(expected, abs=1e-10)
    plain = gradient_alignment(G, proxy, controls, coordinates="complement")
    assert plain.iso_minus_proxy == pytest.approx(isoscore(G @ complement_basis(proxy.basis)), abs=1e-10)


# ---------------------------------------------------------------- inputs


def test_moments_input_equals_rows_input():
    d, k = 16, 2
    G = gaussian(120, d, seed=29) + 3.0
    proxy = TangentProxy.fit(gaussian(200, d, seed=30), rank=k)
    controls = normal_controls(proxy, 5, seed=11)
    merged = Moments.from_rows(G[:50]).merge(Moments.from_rows(G[50:]))
    a, b = gradient_alignment(G, proxy, controls), gradient_alignment(merged, proxy, controls)
    for key, value in a.to_dict().items():
        if isinstance(value, str):
            assert b.to_dict()[key] == value
        else:
            assert b.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_alignment_bad_input():
    d, k = 12, 2
    proxy = coordinate_proxy(d, k)
    controls = normal_controls(proxy, 3, seed=0)
    G = gaussian(30, d, seed=31)
    with pytest.raises(ValueError, match="NaN/inf"):
        gradient_alignment(torch.full((30, d), float("nan")), proxy, controls)
    with pytest.raises(ValueError, match="all zeros"):
        gradient_alignment(torch.zeros(30, d), proxy, controls)
    with pytest.raises(ValueError, match="zero variance"):
        gradient_alignment(torch.ones(30, d), proxy, controls)
    with pytest.raises(ValueError, match="d = 12"):
        gradient_alignment(gaussian(30, d + 1), proxy, controls)
    with pytest.raises(ValueError, match="at least 2"):
        gradient_alignment(G[:1], proxy, controls)
    with pytest.raises(ValueError, match="stale"):
        refitted = TangentProxy.fit(gaussian(50, d, seed=32), rank=k)
        gradient_alignment(G, refitted, controls)
    with pytest.raises(ValueError, match="shape"):
        gradient_alignment(G, proxy, controls[:, :, :1])
    with pytest.raises(ValueError, match="not orthonormal"):
        gradient_alignment(G, proxy, 2 * controls)
    with pytest.raises(ValueError, match="coordinates"):
        gradient_alignment(G, proxy, controls, coordinates="local")
    with pytest.raises(ValueError, match="full coordinates"):
        gradient_alignment(G, proxy, controls, zeta=0.1, C0=torch.eye(d), coordinates="complement")


# ---------------------------------------------------------------- fit schedule


def steps_of_activations(n_steps, d=8, rows=32):
    return [gaussian(rows, d, seed=100 + step, scale=torch.linspace(3.0, 0.5, d)) for step in range(n_steps)]


def test_early_schedule_fits_once_on_the_window_then_freezes():
    H = steps_of_activations(10)
    schedule = ProxySchedule("early", rank=2, total_steps=10)  # 0.3 · 10 = 3 steps, not 4
    assert schedule.fit_window == (0, 3) and schedule.basis is None
    changed = [schedule.observe(step, H[step]) for step in range(3)]
    assert changed == [False] * 3 and schedule.basis is None and schedule.version == 0
    assert schedule.observe(3, H[3]) is True and schedule.version == 1
    expected = TangentProxy.fit(torch.cat(H[:3]), rank=2)
    assert float(principal_angles(schedule.basis, expected.basis).max()) < 1e-8
    frozen = schedule.basis
    assert not any(schedule.observe(step, H[step]) for step in range(4, 10))
    assert schedule.basis is frozen and schedule.version == 1
    assert [schedule.phase(s) for s in (0, 2, 3, 9)] == ["early", "early", "late", "late"]
    assert [schedule.needs_activations(s) for s in (2, 3)] == [True, False]


def test_early_schedule_with_sparse_steps_and_moments_input():
    H = steps_of_activations(2)
    schedule = ProxySchedule("early", rank=2, total_steps=100, fit_fraction=0.5)
    schedule.observe(10, Moments.from_rows(H[0]))
    schedule.observe(10, H[1])  # a second micro-batch of the same step is pooled
    assert schedule.observe(70, H[0]) is True
    expected = TangentProxy.fit(torch.cat(H), rank=2)
    assert float(principal_angles(schedule.basis, expected.basis).max()) < 1e-8


def test_fit_now_closes_the_window_early():
    H = steps_of_activations(5)
    schedule = ProxySchedule("early", rank=2, total_steps=5, fit_fraction=1.0)  # no step past the window
    assert not any(schedule.observe(step, H[step]) for step in range(5)) and schedule.basis is None
    assert schedule.fit_now() is True and schedule.version == 1
    expected = TangentProxy.fit(torch.cat(H), rank=2)
    assert float(principal_angles(schedule.basis, expected.basis).max()) < 1e-8
    assert schedule.fit_now() is False and schedule.observe(5, H[0]) is False and schedule.version == 1
    stopped = ProxySchedule("early", rank=2, total_steps=100)
    stopped.observe(0, H[0])
    stopped.observe(4, H[1])
    assert stopped.fit_now() is True and stopped.fit_window == (0, 5)
    assert stopped.phase(5) == "late" and not stopped.needs_activations(5)
    assert ProxySchedule("fixed", basis=torch.eye(4)[:, :1]).fit_now() is False


def test_refit_schedule_uses_the_previous_window():
    H = steps_of_activations(8)
    schedule = ProxySchedule("refit", rank=2, refit_every=3)
    changed = [schedule.observe(step, H[step]) for step in range(8)]
    assert changed == [False, False, False, True, False, False, True, False] and schedule.version == 2
    expected = TangentProxy.fit(torch.cat(H[3:6]), rank=2)
    assert float(principal_angles(schedule.basis, expected.basis).max()) < 1e-8
    assert schedule.fit_window == (6, 9)
    assert schedule.phase(2) == "early" and schedule.phase(3) == "late"
    # a window without observations keeps the proxy
    assert schedule.observe(20, H[0]) is True  # fits window [6, 9) (steps 6, 7)
    basis = schedule.basis
    assert schedule.observe(40, H[1]) is True  # window [18, 21) held step 20
    assert schedule.observe(60, H[2]) is True and schedule.basis is not basis
    sparse = ProxySchedule("refit", rank=2, refit_every=3)
    sparse.observe(0, H[0])
    sparse.observe(3, H[1])
    assert sparse.observe(12, H[2]) is True  # window [3, 6) → fit
    assert sparse.version == 2


def test_fixed_schedule():
    basis = torch.eye(6)[:, :2] + 0.1
    schedule = ProxySchedule("fixed", basis=basis)
    assert schedule.version == 1 and schedule.rank == 2 and schedule.fit_window is None
    assert float(principal_angles(schedule.basis, basis).max()) < 1e-12
    assert schedule.observe(0, torch.randn(4, 6)) is False and schedule.phase(0) == "late"
    assert schedule.needs_activations(0) is False


def test_schedule_bad_input():
    with pytest.raises(ValueError, match="mode must be"):
        ProxySchedule("late", rank=2)
    with pytest.raises(ValueError, match="needs rank"):
        ProxySchedule("refit", refit_every=2)
    with pytest.raises(ValueError, match="total_steps"):
        ProxySchedule("early", rank=2)
    with pytest.raises(ValueError, match="refit_every"):
        ProxySchedule("refit", rank=2)
    with pytest.raises(ValueError, match="do\\(es\\) not apply"):
        ProxySchedule("refit", rank=2, refit_every=2, fit_fraction=0.5)
    with pytest.raises(ValueError, match="fit_fraction"):
        ProxySchedule("early", rank=2, total_steps=10, fit_fraction=1.5)
    with pytest.raises(ValueError, match="needs basis"):
        ProxySchedule("fixed")
    with pytest.raises(ValueError, match="does not match"):
        ProxySchedule("fixed", rank=3, basis=torch.eye(6)[:, :2])
    schedule = ProxySchedule("early", rank=4, total_steps=10)
    schedule.observe(1, torch.randn(3, 8))
    with pytest.raises(ValueError, match="must not decrease"):
        schedule.observe(0, torch.randn(3, 8))
    with pytest.raises(ValueError, match="too few"):
        schedule.observe(5, torch.randn(3, 8))
    with pytest.raises(ValueError, match="saw no activations"):
        ProxySchedule("early", rank=2, total_steps=10).observe(5, torch.randn(3, 8))


# a matrix C0 is defined in full coordinates only (a ValueError, tested elsewhere)
@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize(
    ("coordinates", "target"),
    [("full", "scaled_identity"), ("complement", "scaled_identity"), ("full", "identity"), ("full", "matrix")],
)
def test_batched_alignments_equal_one_call_per_cloud(center, coordinates, target):
    from interp_widgets.geometry.alignment.measure import (
        SubspaceBatch,
        alignment_from_moments,
        alignments_from_moments,
        stacked_bases,
    )

    d, k = 24, 3
    g = torch.Generator().manual_seed(1)
    if target == "matrix":
        a = torch.randn(d, d, generator=g, dtype=torch.float64)
        target = a @ a.T / d
    clouds, stacks, means = [], [], []
    for layer in range(4):  # different data, proxies, controls and row counts per cloud
        G = torch.randn(200 + 50 * layer, d, generator=g, dtype=torch.float64) * torch.logspace(
            0, -1, d, dtype=torch.float64
        )
        G[:, :k] *= 3 + layer
        basis = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0]
        proxy = TangentProxy.from_basis(basis)
        clouds.append(Moments.from_rows(G, "G"))
        stacks.append(stacked_bases(proxy.basis, normal_controls(proxy, 6, seed=layer)))
        means.append(None if layer % 2 else torch.randn(d, generator=g, dtype=torch.float64))
    settings = dict(center=center, zeta=0.3, target=target, coordinates=coordinates)
    for fast, rel in ((False, 1e-12), (True, 1e-5)):
        batch = alignments_from_moments(
            clouds, SubspaceBatch.from_stacked(torch.stack(stacks), k), k, means, fast=fast, **settings
        )
        for cloud, stacked, mean, got in zip(clouds, stacks, means, batch):
            want = alignment_from_moments(cloud, stacked, k, mean, fast=fast, **settings)
            for key, value in want.to_dict().items():
                if isinstance(value, list):
                    np.testing.assert_allclose(got.to_dict()[key], value, rtol=rel, atol=1e-14, err_msg=key)
                elif isinstance(value, float):
                    assert got.to_dict()[key] == pytest.approx(value, rel=rel, abs=1e-14, nan_ok=True), key
                else:
                    assert got.to_dict()[key] == value, key
            if mean is None:
                assert got.energy_mean_direction is None
            else:
                assert got.energy_mean_direction == pytest.approx(want.energy_mean_direction, rel=rel)


def test_batched_alignment_names_the_degenerate_cloud():
    from interp_widgets.geometry.alignment.measure import SubspaceBatch, alignments_from_moments, stacked_bases

    proxy = TangentProxy.from_basis(torch.eye(8, dtype=torch.float64)[:, :2])
    stacked = stacked_bases(proxy.basis, normal_controls(proxy, 4, seed=0))
    clouds = [Moments.from_rows(torch.randn(30, 8), "G"), Moments.from_rows(torch.zeros(30, 8), "G")]
    with pytest.raises(ValueError, match=r"all zeros .*\(cloud 1 of 2\)"):
        alignments_from_moments(
            clouds,
            SubspaceBatch.from_stacked(torch.stack([stacked] * 2), 2),
            2,
            [None, None],
            center=False,
            zeta=0.0,
            target="scaled_identity",
            coordinates="full",
        )


# ---------------------------------------------------------------- the result's parts and the one rank check


def test_alignment_result_is_made_of_parts_and_keeps_every_flat_name():
    from interp_widgets.geometry.alignment.result import FLAT_ATTRIBUTES, AlignmentResult

    proxy = coordinate_proxy(12, 3)
    result = gradient_alignment(gaussian(200, 12, seed=3), proxy, normal_controls(proxy, 4, seed=0))
    parts = [f.name for f in dataclasses.fields(result)]
    assert parts == ["setting", "energy", "null", "removal", "share"]
    old_names = (
        "rank dim n_rows energy_proxy energy_controls ratio enrichment null_mean null_sd z_analytic p_value "
        "energy_mean_direction iso_G iso_minus_proxy iso_minus_controls delta_iso_proxy delta_iso_controls "
        "share_proxy share_controls centered zeta coordinates"
    ).split()
    assert sorted(FLAT_ATTRIBUTES) == sorted(old_names)
    for name, (part, attribute) in FLAT_ATTRIBUTES.items():
        assert getattr(result, name) is getattr(getattr(result, part), attribute), name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(result, name, 0)
    assert (result.rank, result.dim, result.n_rows, result.coordinates) == (3, 12, 200, "full")
    assert result.share_proxy == result.delta_iso_proxy / (1 - result.iso_G)
    copy = AlignmentResult.from_flat(**{name: getattr(result, name) for name in old_names})
    assert copy.to_dict() == result.to_dict()
    with pytest.raises(TypeError, match=r"unknown alignment result values \['rnak'\]"):
        AlignmentResult.from_flat(**{name: getattr(result, name) for name in old_names}, rnak=3)
    with pytest.raises(TypeError, match=r"missing: \['zeta'\]"):
        AlignmentResult.from_flat(**{name: getattr(result, name) for name in old_names if name != "zeta"})


def test_one_rank_check_names_the_limit_and_the_layer():
    assert proxy.check_rank(4, 8) == 4 and proxy.check_rank(np.int64(7), 8, controls=False) == 7
    with pytest.raises(ValueError, match=r"^rank must be <= 4 at layer 'layer:1', got 5: d = 8, .* 2k <= d; choose"):
        proxy.check_rank(5, 8, layer="layer:1")
    with pytest.raises(
        ValueError, match=r"^rank must be <= 7, got 8: d = 8, and a proxy needs k < d; choose rank <= 7"
    ):
        TangentProxy.fit(gaussian(50, 8), rank=8)
    with pytest.raises(ValueError, match=r"^rank must be <= 5, got 6: d = 10"):
        normal_controls(coordinate_proxy(10, 6))
    with pytest.raises(ValueError, match=r"^no rank fits: d = 1"):
        proxy.check_rank(1, 1)
    for bad in (0, 2.0, True, None):
        with pytest.raises(ValueError, match=r"^rank must be an integer >= 1, got .*; the tangent proxy needs rank="):
            ProxySchedule("refit", rank=bad, refit_every=2)
