"""Gradient–subspace alignment: tangent proxies against matched-rank normal controls (arXiv 2604.08764).

Pure functions and small classes, no hooks. The measurement (``shared/reference/anisotropy-paper.md`` §3):

1. fit a rank-k **tangent proxy** ``Q_T`` (d × k, orthonormal) to activations — PCA by default
   (:class:`TangentProxy`), on a schedule (:class:`ProxySchedule`);
2. draw ``R`` seeded random k-dim **normal controls** orthogonal to it (:func:`normal_controls`);
3. measure how much of the gradient cloud ``G`` (N × d; rows are per-token ``dL/dh`` or the rows of a linear
   layer's weight gradient) lies in each subspace, and how much of the gradient's anisotropy each subspace
   carries (:func:`gradient_alignment`).

Everything is computed in float64 from the moments ``(n, μ, M2)`` of ``G`` (:class:`Moments`), which merge
exactly across micro-batches, ranks and steps.

Best readings of the reference's ambiguities (anisotropy-paper §7) used here:

* A1/A2: the proxy is mean-centred PCA; other dictionaries are QR-orthonormalised.
* A5: ``early`` = fit once on the first 30 % of steps, then freeze; ``refit`` and ``fixed`` are options.
* A6: energies use the **uncentred** gradient (``center=False``); the ratio divides by the **mean** of the
  controls; the p-value is one-sided ``(1 + #{E_N ≥ E_T})/(1 + R)``.
* A7: IsoScore* after removal is evaluated in the **full d** dimensions by default (removal leaves k zero
  eigenvalues, which penalise proxy and controls alike); ``coordinates="complement"`` uses ``d − k``.
  ``zeta = 0`` by default.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np
import torch

from .metrics import (
    ArrayLike,
    ShrinkageTarget,
    _as_points,
    _check_shrinkage,
    _float64,
    _gram,
    _named_target_terms,
    _shrunk_isoscore,
    _to_tensor,
    orthonormalize,
)

__all__ = [
    "Moments",
    "TangentProxy",
    "normal_controls",
    "AlignmentResult",
    "gradient_alignment",
    "ProxySchedule",
]

_ORTHO_TOL = 1e-6


# ----------------------------------------------------------------------------------------------------------
# moments
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Moments:
    """Count, mean and centred second moment ``M2 = Σ (x − μ)(x − μ)ᵀ`` of a point cloud, in float64.

    Built two-pass (centre first), so large common offsets keep their precision; merged exactly with the
    Chan–Golub–LeVeque update, so moments of micro-batches, ranks or steps combine into those of the union.

    Example:
        >>> import torch
        >>> X = torch.randn(100, 4)
        >>> merged = Moments.from_rows(X[:30]).merge(Moments.from_rows(X[30:]))
        >>> torch.allclose(merged.covariance(), torch.cov(X.T.double()))
        True
    """

    count: int
    mean: torch.Tensor
    m2: torch.Tensor

    @classmethod
    def from_rows(cls, X: ArrayLike, name: str = "X") -> "Moments":
        """Moments of the rows of an ``n × d`` cloud (n ≥ 1).

        Example:
            >>> import torch
            >>> Moments.from_rows(torch.ones(3, 2)).count
            3
        """
        return cls._of(_as_points(X, name, min_rows=1))

    @classmethod
    def _of(cls, x: torch.Tensor) -> "Moments":
        """Moments of a validated float64 cloud (from ``_as_points``)."""
        mean = x.mean(dim=0)
        centred = x - mean
        return cls(count=x.shape[0], mean=mean, m2=_gram(centred))

    @property
    def dim(self) -> int:
        """Dimension d of the points.

        Example:
            >>> import torch
            >>> Moments.from_rows(torch.ones(3, 2)).dim
            2
        """
        return self.mean.shape[0]

    def merge(self, other: "Moments") -> "Moments":
        """Moments of the union of both clouds (exact).

        Example:
            >>> import torch
            >>> a, b = Moments.from_rows(torch.zeros(1, 2)), Moments.from_rows(torch.ones(1, 2))
            >>> a.merge(b).mean.tolist()
            [0.5, 0.5]
        """
        if not isinstance(other, Moments):
            raise TypeError(f"can only merge Moments with Moments, got {type(other).__name__}")
        if other.dim != self.dim:
            raise ValueError(f"cannot merge moments of dimension {self.dim} and {other.dim}")
        count = self.count + other.count
        delta = other.mean.to(self.mean.device) - self.mean
        mean = self.mean + delta * (other.count / count)
        m2 = self.m2 + other.m2.to(self.m2.device) + torch.outer(delta, delta) * (self.count * other.count / count)
        return Moments(count=count, mean=mean, m2=m2)

    def covariance(self) -> torch.Tensor:
        """Sample covariance ``M2/(n − 1)`` (ddof = 1, like ``torch.cov``).

        Example:
            >>> import torch
            >>> Moments.from_rows(torch.tensor([[0.0], [2.0]])).covariance().tolist()
            [[2.0]]
        """
        if self.count < 2:
            raise ValueError(f"a covariance needs at least 2 points, these moments hold {self.count}")
        return self.m2 / (self.count - 1)

    def second_moment(self) -> torch.Tensor:
        """Uncentred scatter ``Σ x xᵀ = M2 + n μμᵀ`` (computed without cancellation).

        Example:
            >>> import torch
            >>> Moments.from_rows(torch.tensor([[1.0], [3.0]])).second_moment().tolist()
            [[10.0]]
        """
        return self.m2 + self.count * torch.outer(self.mean, self.mean)


# ----------------------------------------------------------------------------------------------------------
# tangent proxy and controls
# ----------------------------------------------------------------------------------------------------------


def _check_rank(rank, d: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank < d:
        raise ValueError(f"rank must be an integer with 1 <= rank < d = {d}, got {rank!r}")
    return rank


@dataclass(frozen=True, eq=False)
class TangentProxy:
    """A rank-k orthonormal basis standing in for the tangent space of the activations at one layer.

    Attributes:
        basis: ``d × k`` float64 tensor with orthonormal columns.
        method: how it was obtained: ``"pca"``, ``"fixed"`` or the name of a custom fitting function.
        mean: activation mean of the fitted data (``None`` for a supplied basis). PCA centres, so the mean
            direction — the classic anisotropy carrier — is *not* in the proxy; :func:`gradient_alignment`
            reports the gradient energy along it separately.
        explained_variance: fraction of the fitted activations' variance inside the proxy (``None`` for a
            supplied basis).

    Example:
        >>> import torch
        >>> proxy = TangentProxy.fit(torch.randn(200, 10), rank=3)
        >>> proxy.basis.shape, proxy.method
        (torch.Size([10, 3]), 'pca')
    """

    basis: torch.Tensor
    method: str
    mean: torch.Tensor | None = None
    explained_variance: float | None = None

    @property
    def rank(self) -> int:
        """Number of directions k.

        Example:
            >>> import torch
            >>> TangentProxy.from_basis(torch.eye(4)[:, :2]).rank
            2
        """
        return self.basis.shape[1]

    @property
    def dim(self) -> int:
        """Ambient dimension d.

        Example:
            >>> import torch
            >>> TangentProxy.from_basis(torch.eye(4)[:, :2]).dim
            4
        """
        return self.basis.shape[0]

    @classmethod
    def fit(
        cls,
        H: ArrayLike,
        rank: int,
        method: Union[str, Callable[[torch.Tensor, int], ArrayLike]] = "pca",
    ) -> "TangentProxy":
        """Fit a proxy to activations ``H`` (n × d).

        Args:
            H: activations, rows are tokens.
            rank: number of directions k (``1 <= k < d``; PCA also needs ``k <= n − 1``).
            method: ``"pca"`` (default): the top-k right singular vectors of the centred ``H`` (torch SVD,
                float64). Or a function ``(H, rank) -> d × k`` dictionary (e.g. an NMF or SAE fit; called with
                the float64 activations); its columns are orthonormalised by QR.

        Example:
            >>> import torch
            >>> H = torch.randn(500, 6) * torch.tensor([10.0, 3.0, 1.0, 1.0, 1.0, 1.0])
            >>> proxy = TangentProxy.fit(H, rank=2)
            >>> torch.allclose(proxy.basis.abs()[:2], torch.eye(2, dtype=torch.float64), atol=0.1)
            True
        """
        x = _as_points(H)
        n, d = x.shape
        _check_rank(rank, d)
        mean = x.mean(dim=0)
        centred = x - mean
        if method == "pca":
            if rank > n - 1:
                raise ValueError(f"PCA of {n} points spans at most {n - 1} directions; pass rank <= {n - 1}")
            basis = torch.linalg.svd(centred, full_matrices=False).Vh[:rank].T
            name = "pca"
        elif callable(method):
            basis = orthonormalize(method(x, rank), "the dictionary returned by method").to(x.device)
            if basis.shape != (d, rank):
                raise ValueError(f"method must return a {d} × {rank} dictionary (directions as columns), "
                                 f"got shape {tuple(basis.shape)}")
            name = getattr(method, "__name__", type(method).__name__)
        else:
            raise ValueError(f"method must be 'pca' or a function (H, rank) -> d × k basis, got {method!r}")
        inside = centred @ basis
        explained = float((inside * inside).sum() / (centred * centred).sum())
        return cls(basis=basis, method=name, mean=mean, explained_variance=explained)

    @classmethod
    def from_moments(cls, moments: Moments, rank: int) -> "TangentProxy":
        """PCA proxy from pooled activation moments (eigenvectors of the covariance), e.g. a streamed fit window.

        Same subspace as :meth:`fit` on the pooled rows, without storing them.

        Example:
            >>> import torch
            >>> H = torch.randn(300, 5) * torch.tensor([4.0, 1.0, 1.0, 1.0, 1.0])
            >>> proxy = TangentProxy.from_moments(Moments.from_rows(H), rank=1)
            >>> float(proxy.basis[0, 0].abs()) > 0.95
            True
        """
        if not isinstance(moments, Moments):
            raise TypeError(f"moments must be a Moments instance, got {type(moments).__name__}")
        _check_rank(rank, moments.dim)
        if rank > moments.count - 1:
            raise ValueError(
                f"PCA of {moments.count} points spans at most {moments.count - 1} directions; "
                f"pass rank <= {moments.count - 1} or observe more activations"
            )
        eigenvalues, eigenvectors = torch.linalg.eigh(moments.m2)
        basis = eigenvectors.flip(1)[:, :rank]
        explained = float(eigenvalues.flip(0)[:rank].sum() / eigenvalues.sum())
        return cls(basis=basis, method="pca", mean=moments.mean, explained_variance=explained)

    @classmethod
    def from_basis(cls, basis: ArrayLike, method: str = "fixed") -> "TangentProxy":
        """Wrap a user-supplied ``d × k`` basis (any dictionary; orthonormalised by QR).

        Example:
            >>> import torch
            >>> proxy = TangentProxy.from_basis(torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))
            >>> torch.allclose(proxy.basis.T @ proxy.basis, torch.eye(2, dtype=torch.float64))
            True
        """
        q = orthonormalize(basis)
        _check_rank(q.shape[1], q.shape[0])
        return cls(basis=q, method=method)


def _basis_of(proxy: Union[TangentProxy, ArrayLike]) -> torch.Tensor:
    """The orthonormal d × k basis of a proxy or of a tensor that must already be orthonormal."""
    if isinstance(proxy, TangentProxy):
        return proxy.basis
    basis = _to_tensor(proxy, "proxy")
    if basis.ndim != 2 or not 1 <= basis.shape[1] < basis.shape[0]:
        raise ValueError(f"proxy basis must be d × k with 1 <= k < d, got shape {tuple(basis.shape)}")
    basis = _float64(basis)
    error = (basis.T @ basis - torch.eye(basis.shape[1], dtype=basis.dtype, device=basis.device)).abs().max()
    if not float(error) < _ORTHO_TOL:
        raise ValueError(
            f"proxy basis is not orthonormal (max |QᵀQ − I| = {float(error):.2e}); "
            f"wrap it with TangentProxy.from_basis(basis), which orthonormalises it by QR"
        )
    return basis


def normal_controls(
    proxy: Union[TangentProxy, ArrayLike], n_controls: int = 20, seed: int = 0
) -> torch.Tensor:
    """Seeded random k-dim orthonormal subspaces orthogonal to the proxy ("matched-rank normal controls").

    Each control is Haar-random inside the (d − k)-dim orthogonal complement of the proxy: a Gaussian
    ``d × k`` matrix, projected off the proxy twice, then QR. Draw ``r`` uses its own generator seeded from
    ``numpy.random.SeedSequence(seed, spawn_key=(r,))``, so it depends only on ``(seed, r)``: the first m
    controls of a larger set equal a set of m. Controls are not orthogonal to each other.

    Args:
        proxy: a :class:`TangentProxy` or an orthonormal ``d × k`` basis.
        n_controls: number of draws R (≥ 1; the paper uses 20, giving a minimum p-value of 1/21).
        seed: non-negative integer.

    Returns:
        float64 tensor of shape ``(n_controls, d, k)``.

    Raises:
        ValueError: if ``2k > d`` (no k-dim subspace fits in the complement).

    Example:
        >>> import torch
        >>> proxy = TangentProxy.from_basis(torch.eye(10)[:, :3])
        >>> controls = normal_controls(proxy, n_controls=5, seed=1)
        >>> controls.shape, float((proxy.basis.T @ controls).abs().max()) < 1e-12
        (torch.Size([5, 10, 3]), True)
    """
    basis = _basis_of(proxy)
    d, k = basis.shape
    if isinstance(n_controls, bool) or not isinstance(n_controls, int) or n_controls < 1:
        raise ValueError(f"n_controls must be a positive integer, got {n_controls!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if 2 * k > d:
        raise ValueError(
            f"a rank-{k} control orthogonal to a rank-{k} proxy needs 2k <= d, but d = {d}; lower the rank"
        )
    gaussians = []
    for r in range(n_controls):
        draw_seed = int(np.random.SeedSequence(seed, spawn_key=(r,)).generate_state(1, dtype=np.uint64)[0])
        generator = torch.Generator().manual_seed(draw_seed)
        gaussians.append(torch.randn(d, k, generator=generator, dtype=torch.float64))
    z = torch.stack(gaussians).to(basis.device)
    for _ in range(2):  # projecting twice removes the round-off left by one pass
        z = z - basis @ (basis.T @ z)
    controls = torch.linalg.qr(z).Q
    leak = float((basis.T @ controls).abs().max())
    if not leak < _ORTHO_TOL:
        raise RuntimeError(f"a control is not orthogonal to the proxy (max |Q_TᵀQ_N| = {leak:.2e})")
    return controls


# ----------------------------------------------------------------------------------------------------------
# the measurement
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class AlignmentResult:
    """Outcome of :func:`gradient_alignment` for one gradient cloud (one step, one layer).

    Attributes:
        rank, dim, n_rows: k, d and the number of gradient rows N.
        energy_proxy: ``E_T = ‖G Q_T‖²/‖G‖²``.
        energy_controls: ``E_N`` for every control, shape ``(R,)``.
        ratio: ``E_T / mean(E_N)`` (``inf`` if every control has zero energy).
        enrichment: ``E_T / (k/d)``, against a random subspace of the whole space.
        null_mean, null_sd: analytic mean and standard deviation of ``E_N`` for Haar-random controls in the
            complement (see :func:`gradient_alignment`).
        z_analytic: ``(E_T − null_mean)/null_sd``.
        p_value: ``(1 + #{r: E_N[r] ≥ E_T})/(1 + R)``, in ``[1/(R + 1), 1]``.
        energy_mean_direction: energy of ``G`` along the activation mean (``None`` without a fitted mean).
        iso_G: IsoScore* of ``G``; ``iso_minus_proxy``: of ``G`` with the proxy removed;
            ``iso_minus_controls``: with each control removed, ``(R,)``. ``nan`` where the removal leaves no
            variance (``G`` entirely inside the removed subspace).
        delta_iso_proxy, delta_iso_controls: the same minus ``iso_G``.
        share_proxy, share_controls: the deltas divided by the anisotropy deficit ``1 − iso_G`` — the "share of
            gradient anisotropy" carried by each subspace.
        centered, zeta, coordinates: settings used.

    Example:
        >>> import torch
        >>> proxy = TangentProxy.from_basis(torch.eye(8)[:, :2])
        >>> result = gradient_alignment(torch.randn(100, 8), proxy, normal_controls(proxy, 5))
        >>> sorted(result.to_dict())[:3]
        ['E_N', 'E_T', 'E_mean_dir']
    """

    rank: int
    dim: int
    n_rows: int
    energy_proxy: float
    energy_controls: torch.Tensor
    ratio: float
    enrichment: float
    null_mean: float
    null_sd: float
    z_analytic: float
    p_value: float
    energy_mean_direction: float | None
    iso_G: float
    iso_minus_proxy: float
    iso_minus_controls: torch.Tensor
    delta_iso_proxy: float
    delta_iso_controls: torch.Tensor
    share_proxy: float
    share_controls: torch.Tensor
    centered: bool
    zeta: float
    coordinates: str

    @property
    def log10_ratio(self) -> float:
        """``log10(ratio)``; 0 means the proxy captures no more energy than the controls.

        Example:
            >>> import torch
            >>> proxy = TangentProxy.from_basis(torch.eye(6)[:, :1])
            >>> G = torch.zeros(10, 6); G[:, 0] = torch.randn(10); G[:, 1:] = 0.01 * torch.randn(10, 5)
            >>> gradient_alignment(G, proxy, normal_controls(proxy, 3)).log10_ratio > 2
            True
        """
        return math.log10(self.ratio) if self.ratio > 0 else -math.inf

    def to_dict(self) -> dict:
        """Flat dict with the field names of the reference's logging table (anisotropy-paper §5).

        Vectors become lists. Keys: ``k, d, n_tokens, E_T, E_N, ratio, log10_ratio, enrichment, p_value,
        z_analytic, null_mean, null_sd, E_mean_dir, iso_G, iso_G_minus_T, iso_G_minus_N, dIso_T, dIso_N,
        dIso_N_mean, dIso_N_sd, share_T, share_N_mean, centered, zeta, coordinates``. ``dIso_N_sd`` uses
        ddof = 1 (``nan`` for a single control).

        Example:
            >>> import torch
            >>> proxy = TangentProxy.from_basis(torch.eye(8)[:, :2])
            >>> row = gradient_alignment(torch.randn(100, 8), proxy, normal_controls(proxy, 4)).to_dict()
            >>> row["k"], row["d"], len(row["E_N"])
            (2, 8, 4)
        """
        deltas = self.delta_iso_controls
        return {
            "k": self.rank,
            "d": self.dim,
            "n_tokens": self.n_rows,
            "E_T": self.energy_proxy,
            "E_N": self.energy_controls.tolist(),
            "ratio": self.ratio,
            "log10_ratio": self.log10_ratio,
            "enrichment": self.enrichment,
            "p_value": self.p_value,
            "z_analytic": self.z_analytic,
            "null_mean": self.null_mean,
            "null_sd": self.null_sd,
            "E_mean_dir": self.energy_mean_direction,
            "iso_G": self.iso_G,
            "iso_G_minus_T": self.iso_minus_proxy,
            "iso_G_minus_N": self.iso_minus_controls.tolist(),
            "dIso_T": self.delta_iso_proxy,
            "dIso_N": deltas.tolist(),
            "dIso_N_mean": float(deltas.mean()),
            "dIso_N_sd": float(deltas.std()) if deltas.numel() > 1 else math.nan,
            "share_T": self.share_proxy,
            "share_N_mean": float(self.share_controls.mean()),
            "centered": self.centered,
            "zeta": self.zeta,
            "coordinates": self.coordinates,
        }


def _check_controls(controls: ArrayLike, basis: torch.Tensor) -> torch.Tensor:
    c = _float64(_to_tensor(controls, "controls")).to(basis.device)
    d, k = basis.shape
    if c.ndim != 3 or c.shape[1:] != (d, k) or c.shape[0] < 1:
        raise ValueError(
            f"controls must have shape (n_controls >= 1, {d}, {k}) to match the proxy, got {tuple(c.shape)}; "
            f"build them with normal_controls(proxy, n_controls, seed)"
        )
    eye = torch.eye(k, dtype=c.dtype, device=c.device)
    if not float((c.transpose(1, 2) @ c - eye).abs().max()) < _ORTHO_TOL:
        raise ValueError("controls are not orthonormal; build them with normal_controls(proxy, n_controls, seed)")
    if not float((basis.T @ c).abs().max()) < _ORTHO_TOL:
        raise ValueError(
            "controls are not orthogonal to this proxy (stale controls from an earlier fit?); "
            "redraw them with normal_controls(proxy, n_controls, seed) after every (re)fit"
        )
    return c


def _removal_traces(
    trace: torch.Tensor, frob2: torch.Tensor, aq: torch.Tensor, qaq: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """tr(PAP) and ‖PAP‖_F² for P = I − QQᵀ and each Q of a batch (b, d, k), from ``tr A``, ``‖A‖_F²``, the
    products ``AQ`` (b, d, k) and ``QᵀAQ`` (b, k, k): ``tr A − tr(QᵀAQ)`` and ``‖A‖² − 2‖AQ‖² + ‖QᵀAQ‖²``."""
    removed_trace = trace - qaq.diagonal(dim1=1, dim2=2).sum(dim=1)
    return removed_trace, frob2 - 2 * (aq * aq).sum(dim=(1, 2)) + (qaq * qaq).sum(dim=(1, 2))


def _stacked_bases(basis: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
    """The proxy and its controls side by side, ``[Q_T, Q_1, …, Q_R]`` (``d × (1 + R)k``), so that one matrix
    product serves every subspace."""
    return torch.cat([basis[:, None], controls.transpose(0, 1)], dim=1).reshape(basis.shape[0], -1)


def gradient_alignment(
    G: Union[ArrayLike, Moments],
    proxy: Union[TangentProxy, ArrayLike],
    controls: ArrayLike,
    *,
    center: bool = False,
    zeta: float = 0.0,
    C0: ShrinkageTarget = "scaled_identity",
    coordinates: str = "full",
) -> AlignmentResult:
    """The paper's measurement for one gradient cloud: energy in the proxy vs controls, and anisotropy share.

    **Energy.** ``E(Q) = ‖GQ‖_F²/‖G‖_F² = tr(QᵀSQ)/tr(S)`` with ``S = GᵀG`` (``center=False``, default) or the
    centred scatter (``center=True``). ``ratio = E_T/mean_r E_N[r]``, ``enrichment = E_T/(k/d)``,
    ``p = (1 + #{r: E_N[r] ≥ E_T})/(1 + R)``.

    **Analytic null and z-score** (derived in anisotropy-paper §3.5 and geometry-metrics §7.3). A Haar-random
    k-subspace of the (d' = d − k)-dim complement captures a fraction of the complement's energy
    ``(1 − E_T)·tr S`` whose mean is ``k/d'`` and whose variance is
    ``2k(d' − k)/(d'(d' − 1)(d' + 2))·(1/r' − 1/d')`` with ``r' = tr(PSP)²/‖PSP‖_F²`` the participation ratio of
    the gradient inside the complement (``P = I − Q_TQ_Tᵀ``). Hence ``null_mean = k(1 − E_T)/d'``,
    ``null_sd = (1 − E_T)·√variance`` and ``z_analytic = (E_T − null_mean)/null_sd`` — exact moments, no
    sampling; the empirical p-value over the drawn controls stays the reported statistic. (The cruder null
    ``k/d`` of an unconstrained random subspace is what ``enrichment`` compares against.)

    **Anisotropy share.** ``iso_G = IsoScore*(G)`` (centred covariance, like the ``IsoScore`` package,
    whatever ``center`` says). Removing a subspace ``Q`` means the cloud ``G(I − QQᵀ)``; its IsoScore* comes
    from ``tr(PCP) = tr C − tr(QᵀCQ)`` and ``‖PCP‖² = ‖C‖² − 2‖CQ‖² + ‖QᵀCQ‖²`` in O(d²k), and equals
    :func:`~interp_widgets.geometry.metrics.isoscore_star` of ``G(I − QQᵀ)`` with the same ``zeta``/``C0``.
    ``delta = iso(removed) − iso_G``; ``share = delta/(1 − iso_G)``. The proxy carries a larger share of the
    gradient anisotropy than matched controls when ``delta_iso_proxy > delta_iso_controls``.

    Args:
        G: ``N × d`` gradients (rows in the proxy's space; for ``nn.Linear`` weight gradients of shape
            ``(out, in)`` the rows are input-side vectors), or their :class:`Moments` (e.g. merged across
            micro-batches or ranks).
        proxy: a :class:`TangentProxy` (its ``mean``, if any, gives ``energy_mean_direction``) or an orthonormal
            ``d × k`` basis.
        controls: ``(R, d, k)`` from :func:`normal_controls` for this proxy.
        center: centre ``G`` before the energies (reference A6: unknown in the paper; default uncentred).
        zeta: IsoScore* shrinkage in ``[0, 1]`` (default 0: plain IsoScore).
        C0: shrinkage target, as in :func:`~interp_widgets.geometry.metrics.isoscore_star`.
        coordinates: ``"full"`` (default): removed clouds scored in d dimensions; ``"complement"``: in the
            ``d − k`` dimensions left after removal (then near-isotropic gradients give deltas ≈ 0 instead of
            ≈ −k/(d − 1)); a matrix ``C0`` is only defined in full coordinates.

    Example:
        >>> import torch
        >>> proxy = TangentProxy.from_basis(torch.eye(16)[:, :2])
        >>> G = torch.randn(2000, 16); G[:, :2] *= 10  # gradients concentrated in the proxy
        >>> result = gradient_alignment(G, proxy, normal_controls(proxy, 20, seed=0))
        >>> result.ratio > 10, result.p_value == 1 / 21, result.delta_iso_proxy > 0
        (True, True, True)
    """
    basis = _basis_of(proxy)
    d, k = basis.shape
    moments = G if isinstance(G, Moments) else Moments.from_rows(G, "G")
    if moments.dim != d:
        raise ValueError(f"G has {moments.dim} columns but the proxy lives in d = {d}; use the same layer")
    n = moments.count
    if n < 2:
        raise ValueError(f"G has {n} row(s); IsoScore* needs at least 2 gradient rows")
    controls = _check_controls(controls, basis)
    if coordinates not in ("full", "complement"):
        raise ValueError(f"coordinates must be 'full' or 'complement', got {coordinates!r}")
    target = _check_shrinkage(zeta, C0, d, moments.m2.device)
    if coordinates == "complement" and not isinstance(target, str):
        raise ValueError("a matrix C0 is defined in full coordinates only; use coordinates='full'")
    mean = proxy.mean if isinstance(proxy, TangentProxy) else None
    return _alignment(moments, _stacked_bases(basis, controls).to(moments.m2.device), k, mean, center=center,
                      zeta=float(zeta), target=target, coordinates=coordinates)


def _alignment(
    moments: Moments,
    stacked: torch.Tensor,
    k: int,
    mean_direction: torch.Tensor | None,
    *,
    center: bool,
    zeta: float,
    target: ShrinkageTarget,
    coordinates: str,
) -> AlignmentResult:
    """:func:`gradient_alignment` on validated input: ``stacked`` from :func:`_stacked_bases` (proxy first).

    Every quantity comes from ``M2·[Q_T, Q_1, …, Q_R]`` (one ``d × d × (1 + R)k`` product) and ``O(d²)`` terms of
    ``M2`` and ``μ``; the uncentred scatter ``S = M2 + nμμᵀ`` is never formed.
    """
    d, n = moments.dim, moments.count
    m2, mu = moments.m2, moments.mean
    b = stacked.shape[1] // k
    bases = stacked.reshape(d, b, k).transpose(0, 1)  # (b, d, k) views: subspace r is bases[r]
    m2_q = (m2 @ stacked).reshape(d, b, k).transpose(0, 1)
    qm2q = bases.transpose(1, 2) @ m2_q
    trace_m2, frob_m2 = m2.trace(), (m2 * m2).sum()
    inside_m2 = qm2q.diagonal(dim1=1, dim2=2).sum(dim=1)

    # energies tr(QᵀSQ)/tr S, S = M2 (centred) or M2 + nμμᵀ (uncentred)
    if center:
        total, inside, frob_s, s_q, qsq = trace_m2, inside_m2, frob_m2, m2_q[0], qm2q[0]
    else:
        mu_q = (mu @ stacked).reshape(b, k)
        mu2 = mu @ mu
        total = trace_m2 + n * mu2
        inside = inside_m2 + n * (mu_q * mu_q).sum(dim=1)
        frob_s = frob_m2 + 2 * n * (mu @ m2 @ mu) + (n * mu2) ** 2
        s_q = m2_q[0] + n * torch.outer(mu, mu_q[0])
        qsq = qm2q[0] + n * torch.outer(mu_q[0], mu_q[0])
    if not float(total) > 0:
        raise ValueError("G is all zeros (no gradient reached this layer?); energy fractions are undefined")
    energies = inside / total
    energy_proxy, energy_controls = energies[0], energies[1:]
    mean_controls = energy_controls.mean()
    ratio = energy_proxy / mean_controls if float(mean_controls) > 0 else torch.tensor(math.inf)

    # analytic null of E_N for Haar-random controls inside the complement: PR of PSP, P = I − Q_TQ_Tᵀ
    complement_dim = d - k
    if complement_dim == k:  # the single control is the whole complement: E_N is deterministic
        null_var = torch.zeros((), dtype=torch.float64, device=m2.device)
    else:
        trace_p, frob_p = _removal_traces(total, frob_s, s_q[None], qsq[None])
        pr_complement = trace_p[0] ** 2 / frob_p[0]
        factor = 2 * k * (complement_dim - k) / (complement_dim * (complement_dim - 1) * (complement_dim + 2))
        null_var = (factor * (1 / pr_complement - 1 / complement_dim)).clamp(min=0) * (1 - energy_proxy) ** 2
    null_mean = k * (1 - energy_proxy) / complement_dim
    null_sd = null_var.sqrt()
    z_analytic = (energy_proxy - null_mean) / null_sd

    # IsoScore* of G and of G with each subspace removed, from the covariance C = M2/(n − 1)
    scale = 1.0 / (n - 1)
    trace_c, frob_c = trace_m2 * scale, frob_m2 * scale**2
    if not float(trace_c) > 0:
        raise ValueError("G has zero variance (all rows identical); IsoScore* is undefined")
    removed_trace, removed_frob = _removal_traces(trace_m2, frob_m2, m2_q, qm2q)
    removed_trace, removed_frob = removed_trace * scale, removed_frob * scale**2
    removed_dim = d if coordinates == "full" else d - k
    if isinstance(target, str):
        iso_G = _shrunk_isoscore(trace_c, frob_c, d, zeta, *_named_target_terms(target, trace_c, d))
        iso_removed = _shrunk_isoscore(
            removed_trace, removed_frob, removed_dim, zeta, *_named_target_terms(target, removed_trace, removed_dim)
        )
    else:
        inner = (m2 * target).sum() * scale
        iso_G = _shrunk_isoscore(trace_c, frob_c, d, zeta, inner, target.trace(), (target * target).sum())
        t_q = (target @ stacked).reshape(d, b, k).transpose(0, 1)
        qtq = bases.transpose(1, 2) @ t_q
        removed_inner = inner - 2 * scale * (m2_q * t_q).sum(dim=(1, 2)) + scale * (qm2q * qtq).sum(dim=(1, 2))
        iso_removed = _shrunk_isoscore(
            removed_trace, removed_frob, d, zeta, removed_inner, target.trace(), (target * target).sum()
        )
    empty = removed_trace <= trace_c * 1e-12  # nothing left after removal: IsoScore* undefined
    iso_removed = torch.where(empty, torch.full_like(iso_removed, math.nan), iso_removed)
    deltas = iso_removed - iso_G
    shares = deltas / (1 - iso_G)

    p_value = (1 + int((energy_controls >= energy_proxy).sum())) / (1 + energy_controls.shape[0])
    energy_mean_direction = None
    if mean_direction is not None:
        direction = mean_direction.to(m2.device)
        norm2 = direction @ direction
        if float(norm2) > 0:
            along = direction @ m2 @ direction
            if not center:
                along = along + n * (mu @ direction) ** 2
            energy_mean_direction = float(along / norm2 / total)

    scalars = torch.stack([
        energy_proxy, ratio.to(energy_proxy), energy_proxy * d / k, null_mean, null_sd, z_analytic,
        iso_G, iso_removed[0], deltas[0], shares[0],
    ]).tolist()
    cpu = torch.device("cpu")
    return AlignmentResult(
        rank=k,
        dim=d,
        n_rows=n,
        energy_proxy=scalars[0],
        energy_controls=energy_controls.to(cpu),
        ratio=scalars[1],
        enrichment=scalars[2],
        null_mean=scalars[3],
        null_sd=scalars[4],
        z_analytic=scalars[5],
        p_value=p_value,
        energy_mean_direction=energy_mean_direction,
        iso_G=scalars[6],
        iso_minus_proxy=scalars[7],
        iso_minus_controls=iso_removed[1:].to(cpu),
        delta_iso_proxy=scalars[8],
        delta_iso_controls=deltas[1:].to(cpu),
        share_proxy=scalars[9],
        share_controls=shares[1:].to(cpu),
        centered=center,
        zeta=zeta,
        coordinates=coordinates,
    )


# ----------------------------------------------------------------------------------------------------------
# fit schedule
# ----------------------------------------------------------------------------------------------------------


class ProxySchedule:
    """When to (re)fit the tangent proxy during training: ``early``, ``refit`` or ``fixed``.

    * ``"early"`` (the paper's protocol): pool the activations of steps ``0 … ceil(fit_fraction·total_steps) − 1``
      (moments only, so memory is O(d²) whatever the window length), fit PCA once at the first observed step
      past the window, then freeze.
    * ``"refit"``: windows ``[w·refit_every, (w + 1)·refit_every)``; at the first observed step of a new
      window the proxy is refitted on the previous window's activations (kept if that window saw none).
    * ``"fixed"``: a user-supplied basis, available from the start; activations are ignored.

    ``observe(step, H)`` returns True when the proxy changed; ``version`` counts fits (redraw the controls
    whenever it changes). ``fit_now()`` fits at once when no later step will come (``fit_fraction=1``, end of
    a replay). ``phase(step)`` is ``"early"`` for steps in the first fit window (in-sample, or before
    any proxy exists) and ``"late"`` after it.

    Args:
        mode: ``"early"``, ``"refit"`` or ``"fixed"``.
        rank: proxy rank k (early/refit; inferred from ``basis`` for fixed).
        total_steps: length of the run in steps (early only; count checkpoints when replaying).
        fit_fraction: share of ``total_steps`` in the fit window, in ``(0, 1]`` (early only; None = 0.3).
        refit_every: window length in steps (refit only).
        basis: ``d × k`` basis or :class:`TangentProxy` (fixed only).

    Example:
        >>> import torch
        >>> schedule = ProxySchedule("early", rank=2, total_steps=10)
        >>> [schedule.observe(step, torch.randn(64, 8)) for step in range(5)]
        [False, False, False, True, False]
        >>> schedule.basis.shape, schedule.phase(2), schedule.phase(3), schedule.version
        (torch.Size([8, 2]), 'early', 'late', 1)
    """

    def __init__(
        self,
        mode: str = "early",
        rank: int | None = None,
        *,
        total_steps: int | None = None,
        fit_fraction: float | None = None,
        refit_every: int | None = None,
        basis: Union[TangentProxy, ArrayLike, None] = None,
    ) -> None:
        if mode not in ("early", "refit", "fixed"):
            raise ValueError(f"mode must be 'early', 'refit' or 'fixed', got {mode!r}")
        misplaced = [name for name, value, owner in (
            ("total_steps", total_steps, "early"), ("fit_fraction", fit_fraction, "early"),
            ("refit_every", refit_every, "refit"), ("basis", basis, "fixed"),
        ) if value is not None and owner != mode]
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)} do(es) not apply to mode={mode!r}")
        self.mode = mode
        self._proxy: TangentProxy | None = None
        self._pending: Moments | None = None
        self._window = 0
        self._last_step = -1
        self.version = 0
        if mode == "fixed":
            if basis is None:
                raise ValueError("mode='fixed' needs basis= (a d × k matrix or a TangentProxy)")
            self._proxy = basis if isinstance(basis, TangentProxy) else TangentProxy.from_basis(basis)
            if rank is not None and rank != self._proxy.rank:
                raise ValueError(f"rank={rank} does not match the supplied basis of rank {self._proxy.rank}")
            self.rank = self._proxy.rank
            self.version = 1
            return
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"mode={mode!r} needs rank= a positive integer, got {rank!r}")
        self.rank = rank
        if mode == "early":
            fit_fraction = 0.3 if fit_fraction is None else fit_fraction
            if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
                raise ValueError(f"mode='early' needs total_steps= a positive integer, got {total_steps!r}")
            if isinstance(fit_fraction, bool) or not isinstance(fit_fraction, numbers.Real) or not (
                0 < fit_fraction <= 1
            ):
                raise ValueError(f"fit_fraction must be in (0, 1], got {fit_fraction!r}")
            # round() guards against 0.3 * 10 = 3.0000000000000004 adding a step
            self._window_length = max(1, math.ceil(round(fit_fraction * total_steps, 9)))
        else:
            if isinstance(refit_every, bool) or not isinstance(refit_every, int) or refit_every < 1:
                raise ValueError(f"mode='refit' needs refit_every= a positive integer, got {refit_every!r}")
            self._window_length = refit_every

    @property
    def proxy(self) -> TangentProxy | None:
        """The current :class:`TangentProxy`, or None before the first fit.

        Example:
            >>> ProxySchedule("refit", rank=2, refit_every=5).proxy is None
            True
        """
        return self._proxy

    @property
    def basis(self) -> torch.Tensor | None:
        """The current orthonormal ``d × k`` basis, or None before the first fit.

        Example:
            >>> import torch
            >>> ProxySchedule("fixed", basis=torch.eye(4)[:, :1]).basis.shape
            torch.Size([4, 1])
        """
        return None if self._proxy is None else self._proxy.basis

    @property
    def fit_window(self) -> tuple[int, int] | None:
        """Steps ``[start, stop)`` whose activations are pooled for a fit: the early window, or the current
        refit window; None for ``fixed``.

        Example:
            >>> ProxySchedule("early", rank=4, total_steps=1000).fit_window
            (0, 300)
        """
        if self.mode == "fixed":
            return None
        if self.mode == "early":
            return (0, self._window_length)
        start = self._window * self._window_length
        return (start, start + self._window_length)

    def phase(self, step: int) -> str:
        """``"early"`` inside the first fit window, ``"late"`` after it (always ``"late"`` for ``fixed``).

        Example:
            >>> ProxySchedule("refit", rank=2, refit_every=100).phase(99)
            'early'
        """
        if self.mode == "fixed":
            return "late"
        return "early" if step < self._window_length else "late"

    def needs_activations(self, step: int) -> bool:
        """Whether :meth:`observe` at ``step`` would use the activations (callers may skip capturing them).

        Example:
            >>> s = ProxySchedule("early", rank=2, total_steps=10)
            >>> s.needs_activations(2), s.needs_activations(3)
            (True, False)
        """
        if self.mode == "fixed":
            return False
        return self.mode == "refit" or step < self._window_length

    def observe(self, step: int, H: Union[ArrayLike, Moments]) -> bool:
        """Feed the activations (n × d, or their :class:`Moments`) seen at ``step``; True if the proxy changed.

        Steps must not decrease; several observations of one step (micro-batches) are pooled.

        Example:
            >>> import torch
            >>> s = ProxySchedule("refit", rank=1, refit_every=2)
            >>> [s.observe(step, torch.randn(16, 4)) for step in range(5)], s.version
            ([False, False, True, False, True], 2)
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        if step < self._last_step:
            raise ValueError(f"steps must not decrease: got step {step} after step {self._last_step}")
        self._last_step = step
        if self.mode == "fixed":
            return False
        changed = False
        window = step // self._window_length if self.mode == "refit" else min(step // self._window_length, 1)
        if window > self._window:
            changed = self._fit_pending()
            self._window = window
        if self.needs_activations(step):
            moments = H if isinstance(H, Moments) else Moments.from_rows(H, "H")
            self._pending = moments if self._pending is None else self._pending.merge(moments)
        return changed

    def fit_now(self) -> bool:
        """Fit on the activations pooled so far instead of waiting for the first step past the window.

        Needed when no later step will come, e.g. ``fit_fraction=1.0`` or the end of a replay. In ``early`` mode
        this closes the window (the proxy is then frozen); a second call, or a call in ``fixed`` mode, does
        nothing and returns False.

        Example:
            >>> import torch
            >>> s = ProxySchedule("early", rank=2, total_steps=3, fit_fraction=1.0)
            >>> [s.observe(step, torch.randn(32, 6)) for step in range(3)], s.fit_now(), s.fit_now()
            ([False, False, False], True, False)
        """
        if self.mode == "fixed" or (self.mode == "early" and self._window > 0):
            return False
        changed = self._fit_pending()
        if self.mode == "early":
            self._window = 1
            self._window_length = min(self._window_length, self._last_step + 1)
        return changed

    def _fit_pending(self) -> bool:
        if self._pending is None:
            if self.mode == "early":
                raise ValueError("the early fit window saw no activations; observe steps inside fit_window")
            return False
        if self._pending.count - 1 < self.rank:
            raise ValueError(
                f"the fit window pooled {self._pending.count} activation rows, too few for a rank-{self.rank} "
                f"PCA; pass more tokens per step or lower the rank"
            )
        self._proxy = TangentProxy.from_moments(self._pending, self.rank)
        self._pending = None
        self.version += 1
        return True
