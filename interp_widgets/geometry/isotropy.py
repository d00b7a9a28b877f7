"""IsoScore family (geometry-metrics §3): participation ratio, IsoScore and IsoScore*, in closed form from the trace
and Frobenius norm of the covariance (no eigensolver). Conventions as in :mod:`interp_widgets.geometry.metrics`.

Example:
    >>> import torch
    >>> participation_ratio(torch.cat([torch.eye(4), -torch.eye(4)]))
    4.0
"""

from __future__ import annotations

from interp_widgets.geometry._kernels.eigen import covariance_moments
from interp_widgets.geometry._kernels.inputs import ArrayLike, ShrinkageTarget, as_points, centre, check_variance
from interp_widgets.geometry._kernels.isoscore_terms import (
    check_dim_for_isoscore,
    check_shrinkage,
    isoscore_from_pr,
    named_target_terms,
    pr_from_moments,
    shrunk_isoscore,
)

__all__ = ["participation_ratio", "isoscore", "isoscore_star"]


def participation_ratio(H: ArrayLike) -> float:
    """Participation ratio of the covariance: ``PR = (Σλ)² / Σλ² = tr(C)² / ‖C‖_F²``, without an eigensolver.

    In ``[1, d]``: the number of dimensions the cloud effectively spreads over. Biased low for few points:
    isotropic Gaussian data gives ``E[PR] ≈ dN/(N + d + 1)`` with ``N = n − 1`` (§3.4), so compare runs at a
    fixed number of points.

    Example:
        >>> import torch
        >>> participation_ratio(torch.cat([torch.eye(4), -torch.eye(4)]))
        4.0
    """
    x = centre(as_points(H))
    trace, frob2, _ = covariance_moments(x)
    check_variance(trace, "H")
    return float(pr_from_moments(trace, frob2))


def isoscore(H: ArrayLike) -> float:
    """IsoScore (Rudman et al., Findings ACL 2022; package ``IsoScore`` 2.0.1) in closed form.

    The package's seven steps (covariance eigenvalues, normalise, isotropy defect, rescale) reduce exactly to
    ``IsoScore = (PR − 1)/(d − 1)`` with the participation ratio ``PR = tr(C)²/‖C‖_F²`` (§3.2), so no
    eigendecomposition is needed. 1 for isotropic data, 0 for a line; ``k`` equal-variance dimensions give
    ``(k − 1)/(d − 1)``. Uses ``(num_samples, dim)`` orientation like package version 2.

    Example:
        >>> import torch
        >>> round(isoscore(torch.cat([torch.eye(5), -torch.eye(5), torch.zeros(1, 5)])), 6)
        1.0
    """
    x = centre(as_points(H))
    check_dim_for_isoscore(x.shape[1], "H")
    trace, frob2, _ = covariance_moments(x)
    check_variance(trace, "H")
    return float(isoscore_from_pr(pr_from_moments(trace, frob2), x.shape[1]))


def isoscore_star(H: ArrayLike, zeta: float, C0: ShrinkageTarget = "scaled_identity") -> float:
    """IsoScore* (Rudman & Eickhoff, ICLR 2024): IsoScore of the shrunk covariance ``(1 − ζ)C + ζC₀``.

    Closed form ``(PR(C_ζ) − 1)/(d − 1)`` (§3.3), from ``tr`` and ``‖·‖_F`` of ``C`` and ``C₀`` only; ``ζ = 0``
    recovers :func:`isoscore`. Shrinkage stabilises the covariance when there are fewer points than
    dimensions.

    Args:
        H: ``n × d`` points.
        zeta: shrinkage weight in ``[0, 1]``.
        C0: shrinkage target.
            ``"scaled_identity"`` (default): ``(tr C/d)·I``, which keeps IsoScore* scale-invariant. The reference
            recommends it because tiny covariances (gradients) are swamped by a raw identity.
            ``"identity"``: ``I``, what the ``IsoScore`` package's README suggests; *not* scale-invariant.
            A symmetric positive semi-definite ``d × d`` matrix, e.g. the covariance of a larger sample.

    Example:
        >>> import torch
        >>> H = torch.randn(50, 100)  # fewer points than dimensions
        >>> isoscore(H) < isoscore_star(H, zeta=0.5) < 1.0
        True
    """
    x = centre(as_points(H))
    n, d = x.shape
    check_dim_for_isoscore(d, "H")
    target = check_shrinkage(zeta, C0, d, x.device)
    trace, frob2, _ = covariance_moments(x)
    check_variance(trace, "H")
    if isinstance(target, str):
        terms = named_target_terms(target, trace, d)
    else:
        inner = ((x @ target) * x).sum() / (n - 1)
        terms = (inner, target.trace(), (target * target).sum())
    return float(shrunk_isoscore(trace, frob2, d, float(zeta), *terms))
