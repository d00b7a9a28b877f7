"""Geometry metric kernels against the exact fixtures of shared/reference/geometry-metrics.md §13 and against
reference implementations (IsoScore package, scikit-learn PCA, scipy subspace_angles)."""

import doctest
import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from IsoScore import IsoScore as isoscore_package
from sklearn.decomposition import PCA

from interp_widgets.geometry import cosine, isotropy, metrics, spectral, subspaces
from interp_widgets.geometry._kernels import bundles, eigen, inputs, isoscore_terms, products
from interp_widgets.geometry.metrics import (
    average_cosine,
    average_cosine_cross_sequence,
    cosine_contributions,
    drift_share,
    effective_rank_eigen,
    effective_rank_singular,
    explained_variance_ratio,
    isoscore,
    isoscore_star,
    linear_cka,
    orthonormalize,
    participation_ratio,
    partition_isotropy,
    principal_angles,
    projection_energy,
    representation_metrics,
    self_similarity,
    stable_rank,
)


def gaussian(n, d, seed=0, scale=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x if scale is None else x * scale


@pytest.fixture
def float64_default():
    """Run the IsoScore package at full precision.

    The package builds its constants with ``torch.sqrt(torch.tensor(d))`` and ``torch.ones``, which follow the
    default dtype; under float32 its own result is only good to ~2e-8. With a float64 default it agrees with
    the closed form to ~1e-16.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_docstring_examples_run():
    for module in (metrics, inputs, products, eigen, isoscore_terms, bundles, cosine, isotropy, spectral, subspaces):
        assert doctest.testmod(module, raise_on_error=False).failed == 0, module.__name__


# ---------------------------------------------------------------- fixture 1: H = [I; -I]


@pytest.mark.parametrize("d", [2, 7, 32])
def test_plus_minus_identity_fixture(d):
    H = torch.cat([torch.eye(d), -torch.eye(d)])
    assert average_cosine(H) == pytest.approx(-1 / (2 * d - 1), abs=1e-15)
    assert isoscore(H) == pytest.approx(1.0, abs=1e-12)
    for value in (participation_ratio(H), effective_rank_singular(H), effective_rank_eigen(H), stable_rank(H)):
        assert value == pytest.approx(d, rel=1e-12)
    ratios = explained_variance_ratio(H)
    for k in (1, d // 2, d):
        assert float(ratios[:k].sum()) == pytest.approx(k / d, rel=1e-12)
    assert partition_isotropy(H) == pytest.approx(1.0, abs=1e-12)
    assert drift_share(H) == pytest.approx(0.0, abs=1e-15)


# ---------------------------------------------------------------- fixture 2: k equal-variance dims


@pytest.mark.parametrize("k, expected", [(5, 0.0816), (25, 0.4898), (50, 1.0)])
def test_equal_variance_dims_fixture(k, expected):
    d = 50
    eye = torch.eye(d)[:k]
    H = torch.cat([eye, -eye])
    assert isoscore(H) == pytest.approx((k - 1) / (d - 1), abs=1e-12)
    assert isoscore(H) == pytest.approx(expected, abs=5e-5)
    for value in (participation_ratio(H), effective_rank_singular(H), effective_rank_eigen(H), stable_rank(H)):
        assert value == pytest.approx(k, rel=1e-12)
    assert float(explained_variance_ratio(H, k).sum()) == pytest.approx(1.0, abs=1e-12)


# ---------------------------------------------------------------- fixture 3: rank 1


def test_rank_one_fixture():
    a = torch.tensor([3.0, -1.0, 2.0, 0.5, -4.0, 1.5], dtype=torch.float64)
    v = torch.tensor([1.0, 2.0, -2.0, 0.5], dtype=torch.float64)
    H = torch.outer(a, v)
    for value in (participation_ratio(H), effective_rank_singular(H), effective_rank_eigen(H), stable_rank(H)):
        assert value == pytest.approx(1.0, abs=1e-9)
    assert isoscore(H) == pytest.approx(0.0, abs=1e-12)
    signs = torch.sign(a)
    n = a.numel()
    assert average_cosine(H) == pytest.approx(float((signs.sum() ** 2 - n) / (n * (n - 1))), abs=1e-12)


# ---------------------------------------------------------------- fixture 4: isotropic Gaussian


def test_isotropic_gaussian_reference_values():
    n, d = 4096, 768
    result = representation_metrics(gaussian(n, d, seed=1))
    big_n = n - 1
    a = math.sqrt(d / big_n)
    assert abs(result["avg_cosine"]) < 1e-3 and abs(result["avg_cosine_centered"]) < 1e-3
    assert result["participation_ratio"] == pytest.approx(d * big_n / (big_n + d + 1), rel=0.01)
    assert result["participation_ratio"] == pytest.approx(646.4, rel=0.01)  # §3.4 table
    assert result["isoscore"] == pytest.approx(0.841, abs=0.01)
    assert result["effective_rank_singular"] == pytest.approx(749, rel=0.01)  # §4, verified values
    assert result["effective_rank_eigen"] == pytest.approx(699, rel=0.01)
    assert result["stable_rank"] == pytest.approx(d / (1 + a) ** 2, rel=0.03)
    assert result["top1_explained_variance"] == pytest.approx((1 + a) ** 2 / d, rel=0.03)
    # Rényi chain: srank <= PR <= erank_eigen <= erank_singular <= rank
    chain = [
        result[key] for key in ("stable_rank", "participation_ratio", "effective_rank_eigen", "effective_rank_singular")
    ]
    assert chain == sorted(chain) and chain[-1] <= d


def test_bundle_equals_single_metric_functions():
    H = gaussian(300, 12, seed=2, scale=torch.linspace(0.2, 3.0, 12)) + 1.5
    ids = torch.arange(300) // 25
    bundle = representation_metrics(H, sequence_ids=ids)
    expected = {
        "avg_cosine": average_cosine(H),
        "avg_cosine_centered": average_cosine(H, center=True),
        "avg_cosine_cross_sequence": average_cosine_cross_sequence(H, ids),
        "isoscore": isoscore(H),
        "participation_ratio": participation_ratio(H),
        "effective_rank_singular": effective_rank_singular(H),
        "effective_rank_eigen": effective_rank_eigen(H),
        "stable_rank": stable_rank(H),
        "top1_explained_variance": float(explained_variance_ratio(H, 1)[0]),
        "drift_share": drift_share(H),
    }
    assert bundle["n_tokens"] == 300 and bundle["dim"] == 12
    assert set(bundle) == set(expected) | {"n_tokens", "dim"}
    for key, value in expected.items():
        assert bundle[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert "avg_cosine_cross_sequence" not in representation_metrics(H)


# ---------------------------------------------------------------- cosine family


def brute_force_cosines(H):
    u = H / H.norm(dim=1, keepdim=True)
    return u @ u.T


def test_average_cosine_matches_all_pairs_and_centring():
    H = gaussian(40, 6, seed=3) + torch.tensor([2.0, 0, 0, 0, 0, 0], dtype=torch.float64)
    cos = brute_force_cosines(H)
    off_diagonal = ~torch.eye(40, dtype=torch.bool)
    assert average_cosine(H) == pytest.approx(float(cos[off_diagonal].mean()), abs=1e-14)
    centred = brute_force_cosines(H - H.mean(0))
    assert average_cosine(H, center=True) == pytest.approx(float(centred[off_diagonal].mean()), abs=1e-14)
    assert average_cosine(H) > 0.3 > abs(average_cosine(H, center=True))


def test_cross_sequence_cosine_matches_brute_force():  # fixture 6
    H = gaussian(30, 5, seed=4) + 0.5
    ids = torch.tensor([3] * 7 + [9] * 11 + [4] * 12)  # arbitrary, unsorted labels
    cos = brute_force_cosines(H)
    cross = ids[:, None] != ids[None, :]
    assert average_cosine_cross_sequence(H, ids) == pytest.approx(float(cos[cross].mean()), abs=1e-14)
    centred_cos = brute_force_cosines(H - H.mean(0))
    assert average_cosine_cross_sequence(H, ids.numpy(), center=True) == pytest.approx(
        float(centred_cos[cross].mean()), abs=1e-14
    )


def test_self_similarity_matches_brute_force():  # fixture 7
    H = gaussian(60, 4, seed=5) + 1.0
    ids = torch.randint(0, 6, (60,), generator=torch.Generator().manual_seed(0)) * 11
    result = self_similarity(H, ids, min_count=2)
    cos = brute_force_cosines(H)
    for token, value, count in zip(result.token_ids.tolist(), result.values.tolist(), result.counts.tolist()):
        rows = (ids == token).nonzero().flatten()
        block = cos[rows][:, rows]
        mask = ~torch.eye(len(rows), dtype=torch.bool)
        assert count == len(rows)
        assert value == pytest.approx(float(block[mask].mean()), abs=1e-14)
    rare = self_similarity(H, ids, min_count=int(result.counts.max()) + 1)
    assert rare.token_ids.numel() == 0


def test_cosine_contributions_sum_and_rogue_dimension():  # fixture 5
    H = gaussian(2000, 16, seed=6)
    assert float(cosine_contributions(H).sum()) == pytest.approx(average_cosine(H), abs=1e-15)
    H[:, 5] += 20.0
    contributions = cosine_contributions(H)
    assert float(contributions.sum()) == pytest.approx(average_cosine(H), abs=1e-14)
    assert float(contributions[5] / contributions.sum()) == pytest.approx(1.0, abs=0.01)
    standardised = (H - H.mean(0)) / H.std(0)
    assert abs(average_cosine(standardised)) < 0.01


def test_drift_share_definition():
    H = gaussian(100, 3, seed=7) + torch.tensor([4.0, -1.0, 0.0], dtype=torch.float64)
    mean = H.mean(0)
    assert drift_share(H) == pytest.approx(float(mean @ mean / (H * H).sum(1).mean()), rel=1e-14)


# ---------------------------------------------------------------- IsoScore package parity (fixture 15)


@pytest.mark.parametrize("n, d", [(300, 10), (200, 37), (40, 64)])
def test_isoscore_matches_package(n, d, float64_default):
    X = gaussian(n, d, seed=n + d, scale=torch.linspace(0.1, 3.0, d)).numpy()
    assert isoscore(X) == pytest.approx(float(isoscore_package.IsoScore(X)), abs=1e-10)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy 2 deprecation inside the package
@pytest.mark.parametrize("zeta", [0.0, 0.2, 0.9])
def test_isoscore_star_matches_package(zeta, float64_default):
    n, d = 40, 64  # fewer points than dimensions: where shrinkage matters
    X = gaussian(n, d, seed=8, scale=torch.linspace(0.1, 3.0, d)).numpy()
    identity = np.eye(d)
    expected = float(isoscore_package.IsoScore_star(X, identity, zeta))
    assert isoscore_star(X, zeta, C0="identity") == pytest.approx(expected, abs=1e-10)
    larger = gaussian(500, d, seed=9, scale=torch.linspace(3.0, 0.1, d)).numpy()
    C0 = np.cov(larger.T)
    expected = float(isoscore_package.IsoScore_star(X, C0, zeta))
    assert isoscore_star(X, zeta, C0=torch.from_numpy(C0)) == pytest.approx(expected, abs=1e-10)
    scaled = np.trace(np.cov(X.T)) / d * identity
    expected = float(isoscore_package.IsoScore_star(X, scaled, zeta))
    assert isoscore_star(X, zeta) == pytest.approx(expected, abs=1e-10)


def test_isoscore_star_zeta_zero_is_isoscore_and_scaled_identity_is_scale_invariant():
    X = gaussian(30, 50, seed=10)
    assert isoscore_star(X, 0.0) == pytest.approx(isoscore(X), abs=1e-14)
    assert isoscore_star(1e-4 * X, 0.3) == pytest.approx(isoscore_star(X, 0.3), rel=1e-12)
    # raw identity swamps a tiny covariance (reference §3.3 pitfall)
    assert isoscore_star(1e-4 * X, 0.3, C0="identity") > 0.999 > isoscore_star(X, 0.3, C0="identity")


# ---------------------------------------------------------------- sklearn PCA and numerics


@pytest.mark.parametrize("n, d", [(200, 10), (8, 20)])
def test_explained_variance_matches_sklearn(n, d):
    X = gaussian(n, d, seed=11, scale=torch.linspace(0.1, 2.0, d)) + 5.0
    expected = PCA().fit(X.numpy()).explained_variance_ratio_
    ours = explained_variance_ratio(X)
    assert ours.shape[0] == min(n, d)
    np.testing.assert_allclose(ours.numpy()[: len(expected)], expected, atol=1e-12)
    np.testing.assert_allclose(explained_variance_ratio(X, 3).numpy(), expected[:3], atol=1e-12)


def test_mean_300_std_1_keeps_precision():  # fixture 14
    H32 = (300.0 + gaussian(20000, 64, seed=12) * torch.linspace(0.5, 1.5, 64)).float()
    exact = H32.double().numpy()
    centred = exact - exact.mean(0)
    cov = centred.T @ centred / (exact.shape[0] - 1)
    pr = np.trace(cov) ** 2 / (cov**2).sum()
    assert participation_ratio(H32) == pytest.approx(pr, rel=1e-10)
    assert isoscore(H32) == pytest.approx((pr - 1) / 63, rel=1e-10)
    eigenvalues = np.linalg.eigvalsh(cov)[::-1]
    assert stable_rank(H32) == pytest.approx(eigenvalues.sum() / eigenvalues[0], rel=1e-10)
    np.testing.assert_allclose(
        explained_variance_ratio(H32, 5).numpy(), (eigenvalues / eigenvalues.sum())[:5], rtol=1e-10
    )
    units = centred / np.linalg.norm(centred, axis=1, keepdims=True)
    total = units.sum(0)
    n = exact.shape[0]
    assert average_cosine(H32, center=True) == pytest.approx((total @ total - n) / (n * (n - 1)), abs=1e-12)
    # a one-pass float32 covariance is off by far more than this on the same data (reference: 227 %)
    one_pass = (H32.T @ H32) / 20000 - torch.outer(H32.mean(0), H32.mean(0))
    assert float((one_pass.double().numpy() - cov * (n - 1) / n).__abs__().max()) > 1e-2


# ---------------------------------------------------------------- partition isotropy


def test_partition_isotropy_matches_direct_sums_and_survives_large_norms():
    V = gaussian(200, 5, seed=13, scale=torch.tensor([0.3, 0.5, 0.2, 0.4, 0.1])) + 0.05
    directions = np.linalg.eigh(V.numpy().T @ V.numpy())[1]
    z_plus = np.exp(V.numpy() @ directions).sum(0)
    z_minus = np.exp(-V.numpy() @ directions).sum(0)
    both = np.concatenate([z_plus, z_minus])
    assert partition_isotropy(V) == pytest.approx(both.min() / both.max(), rel=1e-12)
    assert partition_isotropy(V, both_signs=False) == pytest.approx(z_plus.min() / z_plus.max(), rel=1e-12)
    assert partition_isotropy(V) <= partition_isotropy(V, both_signs=False)
    huge = partition_isotropy(V * 1000)  # exp(1000·…) overflows without logsumexp
    assert 0.0 <= huge < partition_isotropy(V) and math.isfinite(huge)


def test_partition_isotropy_reference_values():
    # §6: isotropic Gaussian σ = 0.1, d = 100 → 0.99; ×3 → 0.97; ×10 → 0.75; shift 0.05/coord → 0.37; centred → 0.997
    V = gaussian(5000, 100, seed=14) * 0.1
    assert partition_isotropy(V) == pytest.approx(0.99, abs=0.01)
    assert partition_isotropy(3 * V) == pytest.approx(0.97, abs=0.015)
    assert partition_isotropy(10 * V) == pytest.approx(0.75, abs=0.03)
    shifted = V + 0.05
    assert partition_isotropy(shifted) == pytest.approx(0.37, abs=0.02)
    assert partition_isotropy(shifted - shifted.mean(0)) == pytest.approx(0.997, abs=0.003)


# ---------------------------------------------------------------- subspaces


def test_principal_angles_fixtures_and_scipy():  # fixture 9
    hadamard = torch.tensor(scipy.linalg.hadamard(4), dtype=torch.float64)
    np.testing.assert_allclose(
        principal_angles(hadamard[:, :2], hadamard[:, 2:]).numpy(), [math.pi / 2] * 2, atol=1e-12
    )
    A = gaussian(30, 4, seed=15)
    np.testing.assert_allclose(principal_angles(A, A @ gaussian(4, 4, seed=16)).numpy(), 0.0, atol=1e-12)
    for p, q in [(3, 5), (5, 3), (4, 4)]:
        A, B = gaussian(30, p, seed=p), gaussian(30, q, seed=10 + q)
        expected = scipy.linalg.subspace_angles(A.numpy(), B.numpy())[::-1]
        np.testing.assert_allclose(principal_angles(A, B).numpy(), expected, atol=1e-13)
    # tiny angles stay accurate (sine branch)
    B = A[:, :3] + 1e-9 * gaussian(30, 3, seed=17)
    expected = scipy.linalg.subspace_angles(A[:, :3].numpy(), B.numpy())[::-1]
    np.testing.assert_allclose(principal_angles(A[:, :3], B).numpy(), expected, rtol=1e-6, atol=1e-16)
    assert float(principal_angles(A[:, :3], B).max()) < 1e-8


def naive_cka(X, Y):
    X, Y = X - X.mean(0), Y - Y.mean(0)
    K, L = X @ X.T, Y @ Y.T
    return float((K * L).sum() / (np.linalg.norm(K) * np.linalg.norm(L)))


@pytest.mark.parametrize("n, p1, p2", [(200, 5, 7), (10, 30, 40)])  # feature form, Gram form
def test_linear_cka_both_forms_match_definition(n, p1, p2):  # fixture 10
    X = gaussian(n, p1, seed=18, scale=torch.linspace(0.5, 2.0, p1))
    Y = torch.cat([X[:, :3], gaussian(n, p2 - 3, seed=19)], dim=1)
    assert linear_cka(X, Y) == pytest.approx(naive_cka(X.numpy(), Y.numpy()), rel=1e-12)
    Q = torch.linalg.qr(gaussian(p1, p1, seed=20)).Q
    assert linear_cka(X, 3.5 * X @ Q) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)


def test_projection_energy_fixtures():  # fixture 8
    d, k = 64, 8
    U = gaussian(d, k, seed=21)
    g = U @ gaussian(k, 1, seed=22)
    assert projection_energy(g.flatten(), U) == pytest.approx(1.0, abs=1e-12)
    Q = orthonormalize(U)
    orthogonal = gaussian(d, 1, seed=23).flatten()
    orthogonal = orthogonal - Q @ (Q.T @ orthogonal)
    assert projection_energy(orthogonal, U) == pytest.approx(0.0, abs=1e-12)
    G = gaussian(50, d, seed=24)
    assert projection_energy(G, U) == pytest.approx(float(((G @ Q) ** 2).sum() / (G**2).sum()), rel=1e-12)
    # Haar-random subspaces: mean k/d, vector variance 2k(d − k)/(d²(d + 2))
    vector = gaussian(1, d, seed=25).flatten()
    draws = torch.tensor([projection_energy(vector, gaussian(d, k, seed=100 + i)) for i in range(300)])
    variance = 2 * k * (d - k) / (d * d * (d + 2))
    assert float(draws.mean()) == pytest.approx(k / d, abs=4 * math.sqrt(variance / 300))
    assert float(draws.var()) == pytest.approx(variance, rel=0.35)


def test_orthonormalize_keeps_span_and_order():
    B = gaussian(10, 3, seed=26)
    Q = orthonormalize(B)
    np.testing.assert_allclose((Q.T @ Q).numpy(), np.eye(3), atol=1e-14)
    assert float(principal_angles(Q, B).max()) < 1e-12
    first = B[:, 0] / B[:, 0].norm()
    assert abs(float(Q[:, 0] @ first)) == pytest.approx(1.0, abs=1e-14)


# ---------------------------------------------------------------- invariances (hypothesis)


def clouds(min_rows=4, max_rows=14, max_dim=6):
    shapes = st.tuples(st.integers(min_rows, max_rows), st.integers(2, max_dim))
    return shapes.flatmap(
        lambda shape: arrays(
            np.float64, shape, elements=st.floats(-100, 100, allow_nan=False, allow_subnormal=False, width=64)
        )
    )


def random_rotation(d, seed):
    return torch.linalg.qr(gaussian(d, d, seed=seed)).Q


def well_conditioned(X):
    centred = X - X.mean(0)
    singular = np.linalg.svd(centred, compute_uv=False)
    return (
        singular[0] > 1e-3
        and singular[-1] > 1e-6 * singular[0]
        and np.linalg.norm(X, axis=1).min() > 1e-3
        and (np.linalg.norm(centred, axis=1).min() > 1e-3)
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(clouds(), st.integers(0, 2**16), st.floats(0.01, 100.0))
def test_metrics_invariant_to_rotation_and_scale(X, seed, scale):
    assume(X.shape[0] > X.shape[1] and well_conditioned(X))
    H = torch.from_numpy(X)
    moved = scale * H @ random_rotation(H.shape[1], seed)
    for metric in (
        average_cosine,
        isoscore,
        participation_ratio,
        effective_rank_singular,
        effective_rank_eigen,
        stable_rank,
        drift_share,
        lambda x: average_cosine(x, center=True),
    ):
        assert metric(moved) == pytest.approx(metric(H), rel=1e-7, abs=1e-9)
    np.testing.assert_allclose(
        explained_variance_ratio(moved).numpy(), explained_variance_ratio(H).numpy(), rtol=1e-6, atol=1e-9
    )
    assert linear_cka(H, moved) == pytest.approx(1.0, abs=1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(clouds(), st.floats(-1000, 1000))
def test_spectral_metrics_invariant_to_translation(X, shift):
    assume(X.shape[0] > X.shape[1] and well_conditioned(X))
    H = torch.from_numpy(X)
    for metric in (isoscore, participation_ratio, stable_rank, lambda x: isoscore_star(x, 0.4)):
        assert metric(H + shift) == pytest.approx(metric(H), rel=1e-7)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**16))
def test_principal_angles_rotation_invariant_and_match_scipy(p, q, seed):
    d = 8
    A, B = gaussian(d, p, seed=seed), gaussian(d, q, seed=seed + 1)
    R = random_rotation(d, seed + 2)
    np.testing.assert_allclose(principal_angles(R @ A, R @ B).numpy(), principal_angles(A, B).numpy(), atol=1e-12)
    expected = scipy.linalg.subspace_angles(A.numpy(), B.numpy())[::-1]
    np.testing.assert_allclose(principal_angles(A, B).numpy(), expected, atol=1e-12)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.randn(2, 3, 4), "must be 2-D"),
        (torch.randn(1, 4), "at least 2 points"),
        (torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), "NaN/inf"),
        (torch.tensor([[1.0, float("inf")], [0.0, 1.0]]), "NaN/inf"),
        (torch.ones(5, 3), "zero variance"),
    ],
)
def test_bad_points_raise_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        representation_metrics(bad)


def test_other_bad_inputs():
    with pytest.raises(TypeError, match="torch.Tensor or numpy"):
        isoscore([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match="all-zero row"):
        average_cosine(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="single sequence"):
        average_cosine_cross_sequence(torch.randn(4, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="one id per row"):
        average_cosine_cross_sequence(torch.randn(4, 2), torch.arange(3))
    with pytest.raises(ValueError, match="min_count"):
        self_similarity(torch.randn(4, 2), torch.arange(4), min_count=1)
    with pytest.raises(ValueError, match="zeta"):
        isoscore_star(torch.randn(5, 3), 1.5)
    with pytest.raises(ValueError, match="3 × 3"):
        isoscore_star(torch.randn(5, 3), 0.1, C0=torch.eye(4))
    with pytest.raises(ValueError, match="symmetric"):
        isoscore_star(torch.randn(5, 3), 0.1, C0=torch.triu(torch.ones(3, 3)))
    with pytest.raises(ValueError, match="C0 must be"):
        isoscore_star(torch.randn(5, 3), 0.1, C0="eye")
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        isoscore(torch.randn(5, 1))
    with pytest.raises(ValueError, match="k must be"):
        explained_variance_ratio(torch.randn(5, 3), 4)
    with pytest.raises(ValueError, match="transpose"):
        orthonormalize(torch.randn(3, 10))
    with pytest.raises(ValueError, match="linearly dependent"):
        orthonormalize(torch.tensor([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="same space"):
        principal_angles(torch.randn(5, 2), torch.randn(6, 2))
    with pytest.raises(ValueError, match="same rows"):
        linear_cka(torch.randn(5, 2), torch.randn(6, 2))
    with pytest.raises(ValueError, match="all zeros"):
        projection_energy(torch.zeros(4), torch.eye(4)[:, :1])
