"""Eigenvalues and top eigenvectors of covariance Grams: the float64 path and the fast float32 eigensolves with their bounds."""

from __future__ import annotations

import math

import torch

from interp_widgets.geometry._kernels.inputs import EPS64
from interp_widgets.geometry._kernels.products import U32, gram_matrix


def fast_eigenvalues(gram: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """:func:`eigenvalues_from_gram` with the eigensolver in float32 (on the Gram scaled by its trace): several
    times faster than float64 for d in the hundreds.

    Error bound: a backward-stable symmetric eigensolver returns the exact eigenvalues of ``A + E`` with
    ``‖E‖₂ ≤ c·d·u·‖A‖₂`` (u = 2⁻²⁴), so by Weyl's inequality every eigenvalue is off by at most
    ``c·d·u·λ_max``; :data:`FAST_EIGENVALUE_BOUND` (``c = 4``, with the rounding of the cast) is the bound the
    tests check. Values below that bound are set to 0, like the float64 path's noise floor.

    Example:
        >>> x = torch.randn(500, 6, dtype=torch.float64); x = x - x.mean(0)
        >>> exact = eigenvalues_from_gram(x.T @ x, 500, 6)
        >>> bool(((fast_eigenvalues(x.T @ x, 500, 6) - exact).abs() <= FAST_EIGENVALUE_BOUND(6) * exact[0]).all())
        True
    """
    scale = gram.diagonal().sum()
    if not float(scale) > 0:
        return eigenvalues_from_gram(gram, n, d)
    single = (gram / scale).to(torch.float32)
    eigenvalues = torch.linalg.eigvalsh(single).flip(0).to(torch.float64)
    tolerance = eigenvalues[0] * FAST_EIGENVALUE_BOUND(gram.shape[0])
    eigenvalues = torch.where(eigenvalues > tolerance, eigenvalues, torch.zeros_like(eigenvalues))
    return eigenvalues * (scale / (n - 1))


def FAST_EIGENVALUE_BOUND(size: int) -> float:  # noqa: N802 (a constant of the bound, as a function of the size)
    """The tested bound of :func:`fast_eigenvalues`: absolute eigenvalue error ≤ this × λ_max.

    Example:
        >>> FAST_EIGENVALUE_BOUND(384) < 1e-4
        True
    """
    return 4 * (size + 2) * U32


#: Directions beyond the rank that :func:`fast_top_eigenvectors` keeps from its float32 eigensolve.
RITZ_EXTRA = 16


#: :func:`fast_top_eigenvectors` falls back to the float64 ``eigh`` when its bound on the subspace angle exceeds this.
FIT_ANGLE_TOL = 1e-4


#: Float64 subspace iterations :func:`fast_top_eigenvectors` may take before falling back.
RITZ_ITERATIONS = 2


def fast_top_eigenvectors(m2: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The top-``rank`` eigenpairs of a symmetric positive semi-definite float64 matrix (e.g. a scatter ``M2``),
    as ``(eigenvalues descending, d × rank orthonormal basis, angle bound)``, from a float32 eigensolve refined
    in float64.

    The float32 ``eigh`` (on ``m2`` scaled by its trace) gives ``rank + RITZ_EXTRA`` approximate top
    eigenvectors; float64 subspace iterations (``Q = qr(m2·V)``) each followed by a Rayleigh–Ritz step
    (eigenpairs of ``Qᵀ·m2·Q``) refine them. The returned Ritz basis ``V`` comes with a bound on its distance to
    the exact top-``rank`` eigenspace ``U`` (Davis–Kahan sin θ theorem, residual form):
    ``‖sin Θ(V, U)‖_F ≤ ‖m2·V − V·diag(θ)‖_F / δ``, where ``δ = θ_rank − λ_{rank+1}`` and ``λ_{rank+1}`` is
    bounded above by the float32 eigenvalue plus its Weyl bound (:data:`FAST_EIGENVALUE_BOUND`). Iterations stop
    once the bound is below :data:`FIT_ANGLE_TOL`; after :data:`RITZ_ITERATIONS` without it (no gap, or a slow
    one), the exact float64 ``eigh`` is used (bound 0). So the returned basis is always within
    :data:`FIT_ANGLE_TOL` of the float64 eigenvectors' subspace, and every energy ``tr(QᵀSQ)/tr S`` measured with
    it within ``√2·FIT_ANGLE_TOL`` of the exact one (``‖VVᵀ − UUᵀ‖_F = √2‖sin Θ‖_F``).

    Example:
        >>> x = torch.randn(2000, 40, dtype=torch.float64) * torch.logspace(0, -1, 40, dtype=torch.float64)
        >>> m2 = x.T @ x
        >>> values, basis, bound = fast_top_eigenvectors(m2, 4)
        >>> exact = torch.linalg.eigh(m2).eigenvectors[:, -4:]
        >>> sines = torch.linalg.svdvals(basis - exact @ (exact.T @ basis))  # sines of the principal angles
        >>> bool(sines.norm() <= bound <= FIT_ANGLE_TOL)
        True
    """
    d = m2.shape[0]
    scale = m2.diagonal().sum()
    m = min(d, rank + RITZ_EXTRA)
    if m <= rank or not float(scale) > 0:
        return _exact_top_eigenvectors(m2, rank)
    values32, vectors32 = torch.linalg.eigh((m2 / scale).to(torch.float32))  # ascending
    # Weyl: λ_{rank+1}(m2) ≤ scale·(λ̂_{rank+1} + bound·λ̂_max) for the float32 eigenvalues λ̂ of m2/scale
    upper = float(scale * (values32[d - 1 - rank].double() + FAST_EIGENVALUE_BOUND(d) * values32[-1].double()))
    basis = vectors32[:, d - m :].to(torch.float64)
    rounding = 4 * d * EPS64 * float(scale) * math.sqrt(rank)  # float64 error of the residual itself
    for _ in range(RITZ_ITERATIONS):
        q = torch.linalg.qr(m2 @ basis).Q
        mq = m2 @ q
        small = q.T @ mq
        theta, w = torch.linalg.eigh((small + small.T) / 2)
        theta, w = theta.flip(0), w.flip(1)
        basis = q @ w
        residual = mq @ w[:, :rank] - basis[:, :rank] * theta[:rank]
        gap = float(theta[rank - 1]) - upper
        if gap > 0:
            bound = (float(residual.norm()) + rounding) / gap
            if bound <= FIT_ANGLE_TOL:
                return theta[:rank].clone(), basis[:, :rank].contiguous(), bound
    return _exact_top_eigenvectors(m2, rank)


def _exact_top_eigenvectors(m2: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    values, vectors = torch.linalg.eigh(m2)
    return values.flip(0)[:rank], vectors.flip(1)[:, :rank], 0.0


def covariance_moments(
    centred: torch.Tensor, gram: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tr C, ‖C‖_F², smaller Gram) of the covariance of an already centred cloud (``gram``: that Gram, if
    already computed)."""
    n, d = centred.shape
    if gram is None:
        gram = gram_matrix(centred if n >= d else centred.T)
    trace = gram.diagonal().sum() / (n - 1)
    frob2 = (gram * gram).sum() / (n - 1) ** 2
    return trace, frob2, gram


def eigenvalues_from_gram(gram: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """Covariance eigenvalues, descending, with numerical noise (below max(n, d)·eps·λ_max) set to 0."""
    eigenvalues = torch.linalg.eigvalsh(gram).flip(0) / (n - 1)
    tolerance = eigenvalues[0] * max(n, d) * EPS64
    return torch.where(eigenvalues > tolerance, eigenvalues, torch.zeros_like(eigenvalues))
