"""Gradient–subspace alignment: tangent proxies against matched-rank normal controls (arXiv 2604.08764).

Pure functions, no hooks. The measurement (``shared/reference/anisotropy-paper.md`` §3):

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

The pieces live in their own modules and are importable from here as well: :class:`Moments`
(:mod:`~interp_widgets.geometry.moments`), :class:`TangentProxy` (:mod:`~interp_widgets.geometry.alignment.proxy`),
:func:`normal_controls` (:mod:`~interp_widgets.geometry.alignment.controls`), :class:`ProxySchedule`
(:mod:`~interp_widgets.geometry.alignment.schedule`) and :class:`AlignmentResult`
(:mod:`~interp_widgets.geometry.alignment.result`); this module holds the measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from interp_widgets.geometry._kernels.inputs import ArrayLike, ShrinkageTarget
from interp_widgets.geometry._kernels.isoscore_terms import check_shrinkage, named_target_terms, shrunk_isoscore
from interp_widgets.geometry.alignment.controls import check_controls, normal_controls
from interp_widgets.geometry.moments import Moments
from interp_widgets.geometry.alignment.proxy import TangentProxy, basis_of
from interp_widgets.geometry.alignment.result import (
    AlignmentResult,
    AlignmentSetting,
    AnalyticNull,
    AnisotropyShare,
    GradientEnergy,
    IsoScoreRemoval,
)
from interp_widgets.geometry.alignment.schedule import ProxySchedule

__all__ = [
    "Moments",
    "TangentProxy",
    "normal_controls",
    "AlignmentResult",
    "gradient_alignment",
    "ProxySchedule",
]


def fast_energy_bound(k: int, d: int) -> float:
    """The bound on how far ``alignment_from_moments(..., fast=True)`` moves any energy fraction (proxy or
    control) from its float64 value: ``k·(d + 2)·2⁻²⁴``.

    Example:
        >>> round(fast_energy_bound(16, 384), 6)  # at most 0.04 % of the total energy
        0.000368
    """
    return k * (d + 2) * 2.0**-24


def removal_traces(
    trace: torch.Tensor, frob2: torch.Tensor, aq: torch.Tensor, qaq: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """tr(PAP) and ‖PAP‖_F² for P = I − QQᵀ and each Q of a batch (…, d, k), from ``tr A``, ``‖A‖_F²`` (shaped
    like the batch, or broadcasting), the products ``AQ`` (…, d, k) and ``QᵀAQ`` (…, k, k): ``tr A − tr(QᵀAQ)`` and
    ``‖A‖² − 2‖AQ‖² + ‖QᵀAQ‖²``."""
    removed_trace = trace - qaq.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    return removed_trace, frob2 - 2 * squared_norms(aq) + squared_norms(qaq)


def squared_norms(x: torch.Tensor) -> torch.Tensor:
    """Squared Frobenius norms of the trailing two axes, in one pass (no squared copy)."""
    return torch.linalg.vector_norm(x, dim=(-2, -1)) ** 2


def stacked_bases(basis: torch.Tensor, controls: torch.Tensor) -> torch.Tensor:
    """The proxy and its controls side by side, ``[Q_T, Q_1, …, Q_R]`` (``d × (1 + R)k``), so that one matrix
    product serves every subspace."""
    return torch.cat([basis[:, None], controls.transpose(0, 1)], dim=1).reshape(basis.shape[0], -1)


def gradient_alignment(
    G: ArrayLike | Moments,
    proxy: TangentProxy | ArrayLike,
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
    basis = basis_of(proxy)
    d, k = basis.shape
    moments = G if isinstance(G, Moments) else Moments.from_rows(G, "G")
    if moments.dim != d:
        raise ValueError(f"G has {moments.dim} columns but the proxy lives in d = {d}; use the same layer")
    n = moments.count
    if n < 2:
        raise ValueError(f"G has {n} row(s); IsoScore* needs at least 2 gradient rows")
    controls = check_controls(controls, basis)
    if coordinates not in ("full", "complement"):
        raise ValueError(f"coordinates must be 'full' or 'complement', got {coordinates!r}")
    target = check_shrinkage(zeta, C0, d, moments.m2.device)
    if coordinates == "complement" and not isinstance(target, str):
        raise ValueError("a matrix C0 is defined in full coordinates only; use coordinates='full'")
    mean = proxy.mean if isinstance(proxy, TangentProxy) else None
    return alignment_from_moments(
        moments,
        stacked_bases(basis, controls).to(moments.m2.device),
        k,
        mean,
        center=center,
        zeta=float(zeta),
        target=target,
        coordinates=coordinates,
    )


def alignment_from_moments(
    moments: Moments,
    stacked: torch.Tensor,
    k: int,
    mean_direction: torch.Tensor | None,
    *,
    center: bool,
    zeta: float,
    target: ShrinkageTarget,
    coordinates: str,
    fast: bool = False,
) -> AlignmentResult:
    """:func:`gradient_alignment` on validated input: ``stacked`` from :func:`stacked_bases` (proxy first).

    Every quantity comes from ``M2·[Q_T, Q_1, …, Q_R]`` (one ``d × d × (1 + R)k`` product) and ``O(d²)`` terms of
    ``M2`` and ``μ``; the uncentred scatter ``S = M2 + nμμᵀ`` is never formed.

    ``fast`` (the live monitor's setting): that product in float32, about twice as fast on CPU; everything else
    stays float64. Error bound (standard dot-product analysis, the casts of ``M2`` and ``Q`` included): each
    column ``q`` of ``M2·Q`` is off by at most ``(d + 2)·u·|M2|·|q|`` entrywise (``u = 2⁻²⁴``), so
    ``|qᵀ(M2q)^ − qᵀM2q| ≤ (d + 2)·u·‖M2‖_F ≤ (d + 2)·u·tr M2``, and every energy (proxy and controls) moves by at
    most :func:`fast_energy_bound` ``= k·(d + 2)·u``. Tested against the float64 product.
    """
    return alignments_from_moments(
        [moments],
        SubspaceBatch.from_stacked(stacked, k),
        k,
        [mean_direction],
        center=center,
        zeta=zeta,
        target=target,
        coordinates=coordinates,
        fast=fast,
    )[0]


@dataclass(frozen=True, eq=False)
class SubspaceBatch:
    """The proxy and control bases of ``L`` clouds (from :func:`stacked_bases`) in the layouts the batched products
    of :func:`alignments_from_moments` read without copying; built once per proxy, e.g. by the live monitor.

    ``rows`` is ``(L, (1 + R)k, d)``: every basis vector as a row (``Qᵀ``), also in float32 as ``rows32``;
    ``columns`` is ``(L, 1 + R, d, k)``: each subspace's basis as a ``d × k`` matrix.

    Example:
        >>> import torch
        >>> proxy = TangentProxy.from_basis(torch.eye(6, dtype=torch.float64)[:, :2])
        >>> batch = SubspaceBatch.from_stacked(stacked_bases(proxy.basis, normal_controls(proxy, 3, seed=0)), 2)
        >>> tuple(batch.rows.shape), tuple(batch.columns.shape), batch.rows32.dtype
        ((1, 8, 6), (1, 4, 6, 2), torch.float32)
    """

    rows: torch.Tensor
    rows32: torch.Tensor
    columns: torch.Tensor

    @classmethod
    def from_stacked(cls, stacked: torch.Tensor, k: int) -> "SubspaceBatch":
        """From one ``d × (1 + R)k`` stacked basis or ``L`` of them as ``(L, d, (1 + R)k)``."""
        stacked = stacked[None] if stacked.ndim == 2 else stacked
        count, d, width = stacked.shape
        rows = stacked.transpose(1, 2).contiguous()
        columns = rows.reshape(count, width // k, k, d).transpose(-1, -2).contiguous()
        return cls(rows, rows.to(torch.float32), columns)


def alignments_from_moments(
    moments: list[Moments],
    bases: SubspaceBatch,
    k: int,
    mean_directions: list[torch.Tensor | None],
    *,
    center: bool,
    zeta: float,
    target: ShrinkageTarget,
    coordinates: str,
    fast: bool = False,
) -> list[AlignmentResult]:
    """:func:`alignment_from_moments` for several gradient clouds of the same width at once (e.g. every layer of
    a monitored step), as one batch of products: ``bases`` holds one stacked basis per cloud
    (:class:`SubspaceBatch`). Each result equals the single call's up to the rounding of a batched product; the
    work of the small ``O(d²)`` and ``O(Rk²)`` terms is shared by the batch. Every product reads ``Qᵀ`` by rows:
    ``QᵀM2 = (M2Q)ᵀ`` as ``M2`` is symmetric, so the fast bound of :func:`alignment_from_moments` holds as stated.

    Example:
        >>> import torch
        >>> from interp_widgets.geometry import Moments
        >>> proxy = TangentProxy.from_basis(torch.eye(8, dtype=torch.float64)[:, :2])
        >>> stacked = stacked_bases(proxy.basis, normal_controls(proxy, 4, seed=0))
        >>> clouds = [Moments.from_rows(torch.randn(50, 8), "G") for _ in range(3)]
        >>> bases = SubspaceBatch.from_stacked(torch.stack([stacked] * 3), 2)
        >>> batch = alignments_from_moments(clouds, bases, 2, [None] * 3, center=False, zeta=0.0,
        ...                                 target="scaled_identity", coordinates="full")
        >>> one = alignment_from_moments(clouds[2], stacked, 2, None, center=False, zeta=0.0,
        ...                              target="scaled_identity", coordinates="full")
        >>> len(batch), abs(batch[2].ratio - one.ratio) < 1e-12
        (3, True)
    """
    count, d = len(moments), moments[0].dim
    m2 = torch.stack([m.m2 for m in moments])  # (L, d, d)
    mu = torch.stack([m.mean for m in moments])  # (L, d)
    n = torch.tensor([float(m.count) for m in moments], dtype=m2.dtype, device=m2.device)  # (L,)
    b = bases.columns.shape[1]
    # (M2Q)ᵀ = QᵀM2 for every subspace, as rows: (L, b, k, d); cloud l, subspace r is [l, r]
    if fast:
        m2_q = (bases.rows32 @ m2.to(torch.float32)).to(torch.float64)
    else:
        m2_q = bases.rows @ m2
    m2_q = m2_q.reshape(count, b, k, d)
    qm2q = m2_q @ bases.columns  # QᵀM2Q: (L, b, k, k)
    trace_m2, frob_m2 = m2.diagonal(dim1=-2, dim2=-1).sum(-1), squared_norms(m2)
    inside_m2 = qm2q.diagonal(dim1=-2, dim2=-1).sum(-1)  # (L, b)
    # energies tr(QᵀSQ)/tr S, S = M2 (centred) or M2 + nμμᵀ (uncentred)
    if center:
        total, inside, frob_s, s_q, qsq = trace_m2, inside_m2, frob_m2, m2_q[:, 0], qm2q[:, 0]
    else:
        mu_q = (bases.rows @ mu[:, :, None]).reshape(count, b, k)
        mu2 = (mu * mu).sum(-1)
        total = trace_m2 + n * mu2
        inside = inside_m2 + n[:, None] * (mu_q * mu_q).sum(-1)
        frob_s = frob_m2 + 2 * n * (mu[:, None] @ m2 @ mu[:, :, None]).reshape(count) + (n * mu2) ** 2
        s_q = m2_q[:, 0] + n[:, None, None] * mu_q[:, 0, :, None] * mu[:, None, :]  # (M2Q_T + nμ(μᵀQ_T))ᵀ
        qsq = qm2q[:, 0] + n[:, None, None] * mu_q[:, 0, :, None] * mu_q[:, 0, None, :]
    # IsoScore* of G and of G with each subspace removed, from the covariance C = M2/(n − 1)
    scale = 1.0 / (n - 1)
    trace_c, frob_c = trace_m2 * scale, frob_m2 * scale**2
    flags = torch.stack([total > 0, trace_c > 0]).tolist()  # one sync for every check
    for l in range(count):
        where = "" if count == 1 else f" (cloud {l} of {count})"
        if not flags[0][l]:
            raise ValueError(f"G is all zeros (no gradient reached this layer?){where}; energy fractions are undefined")
        if not flags[1][l]:
            raise ValueError(f"G has zero variance (all rows identical){where}; IsoScore* is undefined")
    energies = inside / total[:, None]
    energy_proxy, energy_controls = energies[:, 0], energies[:, 1:]
    mean_controls = energy_controls.mean(-1)
    ratio = torch.where(mean_controls > 0, energy_proxy / mean_controls, torch.full_like(energy_proxy, math.inf))
    # analytic null of E_N for Haar-random controls inside the complement: PR of PSP, P = I − Q_TQ_Tᵀ
    complement_dim = d - k
    if complement_dim == k:  # the single control is the whole complement: E_N is deterministic
        null_var = torch.zeros_like(energy_proxy)
    else:
        trace_p, frob_p = removal_traces(total, frob_s, s_q, qsq)
        factor = 2 * k * (complement_dim - k) / (complement_dim * (complement_dim - 1) * (complement_dim + 2))
        pr_complement = trace_p**2 / frob_p
        null_var = (factor * (1 / pr_complement - 1 / complement_dim)).clamp(min=0) * (1 - energy_proxy) ** 2
    null_mean = k * (1 - energy_proxy) / complement_dim
    null_sd = null_var.sqrt()
    z_analytic = (energy_proxy - null_mean) / null_sd
    removed_trace, removed_frob = removal_traces(trace_m2[:, None], frob_m2[:, None], m2_q, qm2q)
    removed_trace, removed_frob = removed_trace * scale[:, None], removed_frob * scale[:, None] ** 2
    removed_dim = d if coordinates == "full" else d - k
    if isinstance(target, str):
        iso_G = shrunk_isoscore(trace_c, frob_c, d, zeta, *named_target_terms(target, trace_c, d))
        iso_removed = shrunk_isoscore(
            removed_trace, removed_frob, removed_dim, zeta, *named_target_terms(target, removed_trace, removed_dim)
        )
    else:
        inner = (m2 * target).sum(dim=(-2, -1)) * scale
        iso_G = shrunk_isoscore(trace_c, frob_c, d, zeta, inner, target.trace(), (target * target).sum())
        t_q = (bases.rows @ target).reshape(count, b, k, d)  # (C0Q)ᵀ: C0 is symmetric
        qtq = t_q @ bases.columns
        removed_inner = (
            inner[:, None]
            - 2 * scale[:, None] * (m2_q * t_q).sum(dim=(-2, -1))
            + scale[:, None] * (qm2q * qtq).sum(dim=(-2, -1))
        )
        iso_removed = shrunk_isoscore(
            removed_trace, removed_frob, d, zeta, removed_inner, target.trace(), (target * target).sum()
        )
    empty = removed_trace <= trace_c[:, None] * 1e-12  # nothing left after removal: IsoScore* undefined
    iso_removed = torch.where(empty, torch.full_like(iso_removed, math.nan), iso_removed)
    deltas = iso_removed - iso_G[:, None]
    shares = deltas / (1 - iso_G[:, None])
    beaten = (energy_controls >= energy_proxy[:, None]).sum(-1).to(energy_proxy)
    # the energy along each cloud's mean direction (e.g. its proxy's mean; a missing one is a zero row, dropped below)
    directions = torch.stack(
        [
            torch.zeros(d, dtype=m2.dtype, device=m2.device) if v is None else v.to(device=m2.device, dtype=m2.dtype)
            for v in mean_directions
        ]
    )
    direction_norm2 = (directions * directions).sum(-1)
    along = (directions[:, None] @ m2 @ directions[:, :, None]).reshape(count)
    if not center:
        along = along + n * (mu * directions).sum(-1) ** 2
    scalars = torch.stack(
        [
            energy_proxy,
            ratio.to(energy_proxy),
            energy_proxy * d / k,
            null_mean,
            null_sd,
            z_analytic,
            iso_G,
            iso_removed[:, 0],
            deltas[:, 0],
            shares[:, 0],
            beaten,
            direction_norm2,
            along / direction_norm2 / total,
        ],
        dim=1,
    ).tolist()
    cpu = torch.device("cpu")
    energy_controls, iso_removed, deltas, shares = (t.to(cpu) for t in (energy_controls, iso_removed, deltas, shares))
    results = []
    for l, values in enumerate(scalars):
        energy_mean_direction = values[12] if values[11] > 0 else None
        results.append(
            AlignmentResult(
                setting=AlignmentSetting(
                    rank=k, dim=d, n_rows=moments[l].count, centered=center, zeta=zeta, coordinates=coordinates
                ),
                energy=GradientEnergy(
                    proxy=values[0],
                    controls=energy_controls[l],
                    ratio=values[1],
                    enrichment=values[2],
                    p_value=(1 + int(values[10])) / (1 + energy_controls.shape[1]),
                    mean_direction=energy_mean_direction,
                ),
                null=AnalyticNull(mean=values[3], sd=values[4], z=values[5]),
                removal=IsoScoreRemoval(
                    iso_G=values[6],
                    minus_proxy=values[7],
                    minus_controls=iso_removed[l, 1:],
                    delta_proxy=values[8],
                    delta_controls=deltas[l, 1:],
                ),
                share=AnisotropyShare(proxy=values[9], controls=shares[l, 1:]),
            )
        )
    return results
