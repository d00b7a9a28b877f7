"""Spectral dimension (geometry-metrics §4, §6): effective ranks in both conventions, stable rank, explained
variance and partition-function isotropy, from the exact spectrum of the smaller Gram. Conventions as in
:mod:`interp_widgets.geometry.metrics`.

Example:
    >>> import torch
    >>> round(effective_rank_singular(torch.cat([torch.eye(6), -torch.eye(6)])), 6)
    6.0
"""

from __future__ import annotations

import torch

from interp_widgets.geometry._kernels.eigen import covariance_moments, eigenvalues_from_gram
from interp_widgets.geometry._kernels.inputs import ArrayLike, as_points, centre, check_variance
from interp_widgets.geometry._kernels.isoscore_terms import exp_entropy
from interp_widgets.validation import check_int

__all__ = [
    "effective_rank_singular",
    "effective_rank_eigen",
    "stable_rank",
    "explained_variance_ratio",
    "partition_isotropy",
]


def _spectrum(H: ArrayLike) -> torch.Tensor:
    x = centre(as_points(H))
    n, d = x.shape
    trace, _, gram = covariance_moments(x)
    check_variance(trace, "H")
    return eigenvalues_from_gram(gram, n, d)


def effective_rank_singular(H: ArrayLike) -> float:
    """Effective rank (Roy & Vetterli 2007) in the **singular-value** convention: ``exp(H(σ/Σσ))``.

    ``σ`` are the singular values of the centred cloud; this is the convention of RankMe (Garrido et al. 2023).
    In ``[1, rank]``. It is larger than :func:`effective_rank_eigen` (isotropic n = 4096, d = 768: 749 vs 699);
    never mix the two (§4). Cost ``O(nd·min(n, d) + min(n, d)³)``.

    Example:
        >>> import torch
        >>> round(effective_rank_singular(torch.cat([torch.eye(6), -torch.eye(6)])), 6)
        6.0
    """
    return float(exp_entropy(_spectrum(H).sqrt()))


def effective_rank_eigen(H: ArrayLike) -> float:
    """Effective rank in the **eigenvalue** convention: ``exp(H(λ/Σλ))``, λ = covariance eigenvalues.

    This is ``exp`` of the Shannon entropy of the explained-variance distribution, so
    ``stable_rank ≤ participation_ratio ≤ effective_rank_eigen ≤ rank`` (Rényi orders ∞, 2, 1; §4).
    Compare :func:`effective_rank_singular`.

    Example:
        >>> import torch
        >>> from interp_widgets.geometry import participation_ratio
        >>> H = torch.randn(400, 10) * torch.linspace(0.1, 2.0, 10)
        >>> participation_ratio(H) <= effective_rank_eigen(H) <= effective_rank_singular(H)
        True
    """
    return float(exp_entropy(_spectrum(H)))


def stable_rank(H: ArrayLike) -> float:
    """Stable rank ``Σλ/λ_max = ‖H_c‖_F² / ‖H_c‖₂²`` of the centred cloud (squared singular values; §4).

    In ``[1, rank]``; robust to tiny singular values. λ_max comes from the exact spectrum of the smaller Gram.

    Example:
        >>> import torch
        >>> stable_rank(torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]]))  # (4 + 1) / 4
        1.25
    """
    eigenvalues = _spectrum(H)
    return float(eigenvalues.sum() / eigenvalues[0])


def explained_variance_ratio(H: ArrayLike, k: int | None = None) -> torch.Tensor:
    """Fraction of variance along each principal component, descending (as sklearn's ``PCA``).

    Returns the first ``k`` ratios ``λ_i/Σλ`` (all ``min(n, d)`` if ``k`` is None); the top-k explained
    variance is ``explained_variance_ratio(H, k).sum()`` (isotropic value ``k/d``). Razzhigaev et al. (2024)
    call the first ratio "anisotropy". Computed exactly from the smaller Gram.

    Example:
        >>> import torch
        >>> explained_variance_ratio(torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])).tolist()
        [0.8, 0.2]
    """
    eigenvalues = _spectrum(H)
    if k is not None:
        check_int("k", k, minimum=1, maximum=eigenvalues.shape[0], hint="k is at most min(n, d)")
    return (eigenvalues / eigenvalues.sum())[:k]


def partition_isotropy(V: ArrayLike, *, both_signs: bool = True) -> float:
    """Partition-function isotropy (Mu & Viswanath, ICLR 2018): ``min_c Z(c) / max_c Z(c)``.

    ``Z(c) = Σ_i exp(cᵀv_i)`` over the eigenvectors ``c`` of ``VᵀV`` (uncentred), evaluated with logsumexp so
    large norms do not overflow (§6). Eigenvector signs are arbitrary and ``Z(c) ≠ Z(−c)``, so by default both
    ``±c`` are used (2d directions), which makes the value deterministic; ``both_signs=False`` evaluates
    ``+c`` only, as in the paper. In ``(0, 1]``, 1 when isotropic. **Not scale-invariant**: choose and record
    a normalisation (e.g. centring, or dividing by the mean norm) before comparing values.

    Example:
        >>> import torch
        >>> round(partition_isotropy(torch.cat([torch.eye(3), -torch.eye(3)])), 6)
        1.0
    """
    if not isinstance(both_signs, bool):
        raise TypeError(f"both_signs must be True or False, got {both_signs!r}")
    x = as_points(V, "V")
    directions = torch.linalg.eigh(x.T @ x).eigenvectors
    logits = x @ directions
    log_z = torch.logsumexp(logits, dim=0)
    if both_signs:
        log_z = torch.cat([log_z, torch.logsumexp(-logits, dim=0)])
    return float(torch.exp(log_z.min() - log_z.max()))
