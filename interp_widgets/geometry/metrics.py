"""Geometry metrics on point clouds of activations or gradients.

Every function takes an ``n × d`` point cloud (rows are points: tokens, or per-token gradients), as a
``torch.Tensor`` or a numpy array, and computes in **float64** on the input's device (Apple ``mps`` has no
float64, so it falls back to the CPU). Inputs are centred *before* any squaring, so data with a large common
offset (mean 300, std 1) keeps full precision; float64 also sidesteps TF32 matmuls that training code often
enables globally.

Scalar metrics return Python floats, vector metrics return float64 tensors. Formulas, fixtures and the
literature are in ``shared/reference/geometry-metrics.md``; section numbers below refer to it.

Conventions:

* **Centred vs uncentred.** ``average_cosine`` and ``drift_share`` work on the raw cloud ``H`` (they measure a
  common direction); the spectral metrics (participation ratio, IsoScore, effective and stable rank, explained
  variance) work on the covariance ``C = H_cᵀH_c/(n − 1)`` of the centred cloud (they measure spread).
* Spectral metrics use the smaller of the two Grams ``H_cᵀH_c`` (d × d) or ``H_cH_cᵀ`` (n × n).
* Bad input (wrong number of dimensions, fewer than two points, NaN/inf, all-zero rows where a direction is
  needed, zero variance) raises ``ValueError`` or ``TypeError`` saying what is wrong and how to fix it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Union

import numpy as np
import torch

ArrayLike = Union[torch.Tensor, np.ndarray]

__all__ = [
    "SelfSimilarity",
    "average_cosine",
    "average_cosine_cross_sequence",
    "self_similarity",
    "cosine_contributions",
    "drift_share",
    "participation_ratio",
    "isoscore",
    "isoscore_star",
    "effective_rank_singular",
    "effective_rank_eigen",
    "stable_rank",
    "explained_variance_ratio",
    "partition_isotropy",
    "orthonormalize",
    "principal_angles",
    "linear_cka",
    "projection_energy",
    "representation_metrics",
]

_EPS64 = torch.finfo(torch.float64).eps


# ----------------------------------------------------------------------------------------------------------
# input handling
# ----------------------------------------------------------------------------------------------------------


def _to_tensor(x: ArrayLike, name: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    return x


def _float64(x: torch.Tensor) -> torch.Tensor:
    """Detached float64 copy on a device that supports float64."""
    device = torch.device("cpu") if x.device.type == "mps" else x.device
    return x.detach().to(device=device, dtype=torch.float64)


def _check_finite(x: torch.Tensor, name: str) -> None:
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        raise ValueError(
            f"{name} contains {int(bad.sum())} NaN/inf value(s); drop or mask those rows before measuring "
            f"(e.g. {name}[torch.isfinite({name}).all(dim=1)])"
        )


def _check_rows(n: int, name: str, min_rows: int) -> None:
    if n < min_rows:
        raise ValueError(f"{name} has {n} row(s) but this metric needs at least {min_rows} points; pass more tokens")


def _as_points(x: ArrayLike, name: str = "H", *, min_rows: int = 2, finite: bool = False) -> torch.Tensor:
    """Validate an n × d point cloud and return it as a detached float64 tensor (``finite=True``: the caller
    has already checked that every value is finite)."""
    x = _to_tensor(x, name)
    if x.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n points × d dimensions), got shape {tuple(x.shape)}; "
            f"flatten batch and sequence axes first, e.g. {name}.reshape(-1, {name}.shape[-1])"
        )
    n, d = x.shape
    _check_rows(n, name, min_rows)
    if d < 1:
        raise ValueError(f"{name} has no columns (shape {tuple(x.shape)}); pass points with at least one dimension")
    if not finite:
        _check_finite(x, name)
    return _float64(x)


def _as_labels(labels, n: int, name: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate per-row integer labels; return (unique labels, inverse indices)."""
    if isinstance(labels, (list, tuple)):
        labels = torch.as_tensor(labels)
    labels = _to_tensor(labels, name)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"{name} must be a 1-D tensor with one id per row ({n}), got shape {tuple(labels.shape)}")
    if labels.is_floating_point():
        raise TypeError(f"{name} must hold integer ids, got dtype {labels.dtype}")
    unique, inverse = torch.unique(labels.to(device), return_inverse=True)
    return unique, inverse


def _inverse_row_norms(x: torch.Tensor, name: str, hint: str) -> torch.Tensor:
    norms = torch.linalg.vector_norm(x, dim=1)
    zero = norms == 0
    if bool(zero.any()):
        raise ValueError(f"{name} has {int(zero.sum())} all-zero row(s){hint}; cosines are undefined for them")
    return 1.0 / norms


def _unit_rows(x: torch.Tensor, name: str, hint: str) -> torch.Tensor:
    return x * _inverse_row_norms(x, name, hint)[:, None]


_ZERO_ROW_HINT = " (padding?); remove them first, e.g. H[H.norm(dim=1) > 0]"
_MEAN_ROW_HINT = " after centring (rows equal to the mean); drop duplicates of the mean or use center=False"


def _centre(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(dim=0)


def _check_variance(trace: torch.Tensor, name: str) -> None:
    if not float(trace) > 0:
        raise ValueError(f"{name} has zero variance (all rows identical); spectral metrics are undefined for it")


# ----------------------------------------------------------------------------------------------------------
# tensor kernels shared by the public functions and the per-step bundle
# ----------------------------------------------------------------------------------------------------------


def _average_cosine(x: torch.Tensor, inverse_norms: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    total = x.T @ inverse_norms  # Σ_i û_i without materialising the unit rows
    return (total @ total - n) / (n * (n - 1))


def _cross_sequence_cosine(x: torch.Tensor, inverse_norms: torch.Tensor, inverse: torch.Tensor,
                           n_groups: int) -> torch.Tensor:
    n = x.shape[0]
    units = x * inverse_norms[:, None]
    sums = torch.zeros(n_groups, units.shape[1], dtype=units.dtype, device=units.device)
    sums.index_add_(0, inverse, units)
    counts = torch.bincount(inverse, minlength=n_groups).to(units.dtype)
    total = sums.sum(dim=0)
    numerator = total @ total - (sums * sums).sum()
    denominator = n * n - (counts * counts).sum()
    return numerator / denominator


def _gram(x: torch.Tensor, blocks: int = 4) -> torch.Tensor:
    """``xᵀx`` from its upper block triangle, mirrored: 5/8 of the multiply-adds of one product (torch has no
    symmetric rank-k update)."""
    d = x.shape[1]
    if d < 32 * blocks:  # small: one product beats several
        return x.T @ x
    cuts = [d * i // blocks for i in range(blocks + 1)]
    gram = x.new_empty(d, d)
    for start, stop in zip(cuts[:-1], cuts[1:]):
        rows = x[:, start:stop].T @ x[:, start:]
        gram[start:stop, start:] = rows
        gram[stop:, start:stop] = rows[:, stop - start:].T
    return gram


def _covariance_moments(
    centred: torch.Tensor, gram: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tr C, ‖C‖_F², smaller Gram) of the covariance of an already centred cloud (``gram``: that Gram, if
    already computed)."""
    n, d = centred.shape
    if gram is None:
        gram = _gram(centred if n >= d else centred.T)
    trace = gram.diagonal().sum() / (n - 1)
    frob2 = (gram * gram).sum() / (n - 1) ** 2
    return trace, frob2, gram


def _eigenvalues_from_gram(gram: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """Covariance eigenvalues, descending, with numerical noise (below max(n, d)·eps·λ_max) set to 0."""
    eigenvalues = torch.linalg.eigvalsh(gram).flip(0) / (n - 1)
    tolerance = eigenvalues[0] * max(n, d) * _EPS64
    return torch.where(eigenvalues > tolerance, eigenvalues, torch.zeros_like(eigenvalues))


def _participation_ratio(trace: torch.Tensor, frob2: torch.Tensor) -> torch.Tensor:
    return trace * trace / frob2


def _isoscore_from_pr(pr: torch.Tensor, dim: int) -> torch.Tensor:
    return (pr - 1) / (dim - 1)


def _exp_entropy(weights: torch.Tensor) -> torch.Tensor:
    p = weights / weights.sum()
    return torch.exp(torch.special.entr(p).sum())


def _drift_share(mean: torch.Tensor, centred_square_sum: torch.Tensor, n: int) -> torch.Tensor:
    """‖μ‖²/mean‖h_i‖², using mean‖h_i‖² = Σ‖h_i − μ‖²/n + ‖μ‖² (exact, no cancellation)."""
    mean_square = mean @ mean
    return mean_square / (centred_square_sum / n + mean_square)


def _check_dim_for_isoscore(d: int, name: str) -> None:
    if d < 2:
        raise ValueError(f"{name} has d = {d}; IsoScore needs at least 2 dimensions")


# ----------------------------------------------------------------------------------------------------------
# cosine family (§2)
# ----------------------------------------------------------------------------------------------------------


def average_cosine(H: ArrayLike, *, center: bool = False) -> float:
    """Mean cosine similarity over all ordered pairs of distinct rows, exactly, in O(nd).

    ``AvgCos = (‖Σ_i û_i‖² − n) / (n(n − 1))`` with unit rows ``û_i`` (Ethayarajh 2019; §2.1). With
    ``center=True`` the rows are centred first, which removes the common-direction part of anisotropy
    (Cai et al. 2021). Range ``[−1/(n − 1), 1]``; about 0 for isotropic data.

    Example:
        >>> import torch
        >>> H = torch.cat([torch.eye(3), -torch.eye(3)])
        >>> round(average_cosine(H), 6)  # -1/(2d - 1)
        -0.2
    """
    x = _as_points(H)
    x, hint = (_centre(x), _MEAN_ROW_HINT) if center else (x, _ZERO_ROW_HINT)
    return float(_average_cosine(x, _inverse_row_norms(x, "H", hint)))


def average_cosine_cross_sequence(H: ArrayLike, sequence_ids: ArrayLike, *, center: bool = False) -> float:
    """Mean cosine over pairs of rows from *different* sequences (Ethayarajh's baseline), exactly, in O(nd).

    Ethayarajh (2019) estimates anisotropy from random words of different sentences, because tokens of one
    sentence are contextualised towards each other. The exact in-batch version (§2.1) is
    ``(‖S‖² − Σ_b ‖S_b‖²) / (n² − Σ_b n_b²)`` where ``S_b`` sums the unit rows of sequence ``b``.

    Args:
        H: ``n × d`` points.
        sequence_ids: one integer id per row (e.g. the batch index of each token); at least two distinct ids.
        center: centre the rows first.

    Example:
        >>> import torch
        >>> H = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])  # two sequences
        >>> round(average_cosine(H), 4), average_cosine_cross_sequence(H, torch.tensor([0, 0, 1, 1]))
        (0.3333, 0.0)
    """
    x = _as_points(H)
    _, inverse = _as_labels(sequence_ids, x.shape[0], "sequence_ids", x.device)
    n_groups = int(inverse.max()) + 1
    if n_groups < 2:
        raise ValueError("sequence_ids holds a single sequence; cross-sequence pairs need at least two sequences")
    x, hint = (_centre(x), _MEAN_ROW_HINT) if center else (x, _ZERO_ROW_HINT)
    return float(_cross_sequence_cosine(x, _inverse_row_norms(x, "H", hint), inverse, n_groups))


@dataclass(frozen=True, eq=False)
class SelfSimilarity:
    """Per-token-type self-similarity (see :func:`self_similarity`).

    Attributes:
        token_ids: the token types that occur at least ``min_count`` times, ascending.
        values: mean pairwise cosine between the occurrences of each type.
        counts: number of occurrences of each type.

    Example:
        >>> import torch
        >>> s = self_similarity(torch.randn(20, 4), torch.arange(20) % 2, min_count=2)
        >>> s.token_ids.tolist(), s.counts.tolist()
        ([0, 1], [10, 10])
    """

    token_ids: torch.Tensor
    values: torch.Tensor
    counts: torch.Tensor


def self_similarity(H: ArrayLike, token_ids: ArrayLike, *, min_count: int = 5) -> SelfSimilarity:
    """Ethayarajh's SelfSim: mean cosine between the contextual occurrences of each token type, in O(nd).

    For a type ``w`` with ``c_w`` occurrences and unit-row sum ``S_w``:
    ``SelfSim(w) = (‖S_w‖² − c_w) / (c_w(c_w − 1))`` (§2.2), all types at once via a scatter-add. Types with
    fewer than ``min_count`` occurrences are dropped (Ethayarajh uses 5). For the anisotropy-adjusted value
    subtract :func:`average_cosine_cross_sequence` of the same layer.

    Args:
        H: ``n × d`` points (uncentred, as in the paper).
        token_ids: one integer token id per row.
        min_count: minimum occurrences for a type to be reported (at least 2).

    Example:
        >>> import torch
        >>> H = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
        >>> s = self_similarity(H, torch.tensor([7, 7, 7, 3]), min_count=2)
        >>> s.token_ids.tolist(), [round(v, 4) for v in s.values.tolist()]
        ([7], [0.3333])
    """
    if not isinstance(min_count, int) or min_count < 2:
        raise ValueError(f"min_count must be an integer >= 2 (a pair is needed for a cosine), got {min_count!r}")
    x = _as_points(H, min_rows=1)
    unique, inverse = _as_labels(token_ids, x.shape[0], "token_ids", x.device)
    units = _unit_rows(x, "H", _ZERO_ROW_HINT)
    sums = torch.zeros(unique.shape[0], x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, inverse, units)
    counts = torch.bincount(inverse, minlength=unique.shape[0])
    keep = counts >= min_count
    c = counts[keep].to(x.dtype)
    values = ((sums[keep] * sums[keep]).sum(dim=1) - c) / (c * (c - 1))
    return SelfSimilarity(token_ids=unique[keep], values=values, counts=counts[keep])


def cosine_contributions(H: ArrayLike) -> torch.Tensor:
    """Per-dimension contributions to the average cosine (rogue dimensions, Timkey & van Schijndel 2021).

    ``CC_k = ((Σ_i û_ik)² − Σ_i û_ik²) / (n(n − 1))`` with ``Σ_k CC_k = average_cosine(H)`` exactly (§2.3).
    A share ``CC_k / AvgCos`` near 1 for one or a few ``k`` means a handful of dimensions drive the cosine.

    Example:
        >>> import torch
        >>> H = torch.randn(500, 8)
        >>> H[:, 3] += 20.0  # a rogue dimension
        >>> cc = cosine_contributions(H)
        >>> int(cc.argmax()), round(float(cc.sum()), 6) == round(average_cosine(H), 6)
        (3, True)
    """
    x = _as_points(H)
    n = x.shape[0]
    units = _unit_rows(x, "H", _ZERO_ROW_HINT)
    column_sums = units.sum(dim=0)
    return (column_sums * column_sums - (units * units).sum(dim=0)) / (n * (n - 1))


def drift_share(H: ArrayLike) -> float:
    """Share of the mean squared norm carried by the common mean: ``‖μ‖² / mean_i ‖h_i‖²`` (§5).

    In ``[0, 1]``; 0 for a centred cloud, 1 when every row equals the mean. A large value is the common-drift
    anisotropy that centring removes (Biś et al. 2021).

    Example:
        >>> import torch
        >>> round(drift_share(torch.tensor([[3.0, 1.0], [3.0, -1.0]])), 4)  # 9 / 10
        0.9
    """
    x = _as_points(H, min_rows=1)
    centred = _centre(x)
    value = _drift_share(x.mean(dim=0), (centred * centred).sum(), x.shape[0])
    if not torch.isfinite(value):
        raise ValueError("H is all zeros; the drift share is undefined")
    return float(value)


# ----------------------------------------------------------------------------------------------------------
# IsoScore family and spectral dimension (§3, §4)
# ----------------------------------------------------------------------------------------------------------


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
    x = _centre(_as_points(H))
    trace, frob2, _ = _covariance_moments(x)
    _check_variance(trace, "H")
    return float(_participation_ratio(trace, frob2))


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
    x = _centre(_as_points(H))
    _check_dim_for_isoscore(x.shape[1], "H")
    trace, frob2, _ = _covariance_moments(x)
    _check_variance(trace, "H")
    return float(_isoscore_from_pr(_participation_ratio(trace, frob2), x.shape[1]))


ShrinkageTarget = Union[str, torch.Tensor, np.ndarray]


def _check_shrinkage(zeta: float, C0: ShrinkageTarget, d: int, device: torch.device) -> ShrinkageTarget:
    """Validate zeta and C0; return C0 as one of the two names or a float64 d × d tensor."""
    if isinstance(zeta, bool) or not isinstance(zeta, numbers.Real) or not 0.0 <= float(zeta) <= 1.0:
        raise ValueError(f"zeta must be a number in [0, 1], got {zeta!r}")
    if isinstance(C0, str):
        if C0 not in ("scaled_identity", "identity"):
            raise ValueError(f"C0 must be 'scaled_identity', 'identity' or a d × d matrix, got {C0!r}")
        return C0
    c0 = _float64(_to_tensor(C0, "C0")).to(device)
    if c0.shape != (d, d):
        raise ValueError(f"C0 must be a {d} × {d} covariance matrix to match the data, got shape {tuple(c0.shape)}")
    _check_finite(c0, "C0")
    if not torch.allclose(c0, c0.T, rtol=1e-10, atol=1e-12 * float(c0.abs().max())):
        raise ValueError("C0 must be symmetric (a covariance matrix); symmetrise it with (C0 + C0.T) / 2")
    return c0


def _named_target_terms(name: str, trace: torch.Tensor, dim: int) -> tuple:
    """(⟨C, C0⟩, tr C0, ‖C0‖_F²) for C0 = I or C0 = (tr C/dim)·I in ``dim`` dimensions."""
    if name == "identity":
        return trace, torch.full_like(trace, dim), torch.full_like(trace, dim)
    scale = trace / dim
    return scale * trace, scale * dim, scale * scale * dim


def _shrunk_isoscore(trace, frob2, dim: int, zeta: float, inner, target_trace, target_frob2) -> torch.Tensor:
    """IsoScore* = (PR(C_ζ) − 1)/(dim − 1) for C_ζ = (1 − ζ)C + ζC₀, from traces and Frobenius norms only."""
    shrunk_trace = (1 - zeta) * trace + zeta * target_trace
    shrunk_frob2 = (1 - zeta) ** 2 * frob2 + 2 * zeta * (1 - zeta) * inner + zeta**2 * target_frob2
    return _isoscore_from_pr(shrunk_trace * shrunk_trace / shrunk_frob2, dim)


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
    x = _centre(_as_points(H))
    n, d = x.shape
    _check_dim_for_isoscore(d, "H")
    target = _check_shrinkage(zeta, C0, d, x.device)
    trace, frob2, _ = _covariance_moments(x)
    _check_variance(trace, "H")
    if isinstance(target, str):
        terms = _named_target_terms(target, trace, d)
    else:
        inner = ((x @ target) * x).sum() / (n - 1)
        terms = (inner, target.trace(), (target * target).sum())
    return float(_shrunk_isoscore(trace, frob2, d, float(zeta), *terms))


def _spectrum(H: ArrayLike) -> torch.Tensor:
    x = _centre(_as_points(H))
    n, d = x.shape
    trace, _, gram = _covariance_moments(x)
    _check_variance(trace, "H")
    return _eigenvalues_from_gram(gram, n, d)


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
    return float(_exp_entropy(_spectrum(H).sqrt()))


def effective_rank_eigen(H: ArrayLike) -> float:
    """Effective rank in the **eigenvalue** convention: ``exp(H(λ/Σλ))``, λ = covariance eigenvalues.

    This is ``exp`` of the Shannon entropy of the explained-variance distribution, so
    ``stable_rank ≤ participation_ratio ≤ effective_rank_eigen ≤ rank`` (Rényi orders ∞, 2, 1; §4).
    Compare :func:`effective_rank_singular`.

    Example:
        >>> import torch
        >>> H = torch.randn(400, 10) * torch.linspace(0.1, 2.0, 10)
        >>> participation_ratio(H) <= effective_rank_eigen(H) <= effective_rank_singular(H)
        True
    """
    return float(_exp_entropy(_spectrum(H)))


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
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= eigenvalues.shape[0]):
        raise ValueError(f"k must be an integer between 1 and min(n, d) = {eigenvalues.shape[0]}, got {k!r}")
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
    x = _as_points(V, "V")
    directions = torch.linalg.eigh(x.T @ x).eigenvectors
    logits = x @ directions
    log_z = torch.logsumexp(logits, dim=0)
    if both_signs:
        log_z = torch.cat([log_z, torch.logsumexp(-logits, dim=0)])
    return float(torch.exp(log_z.min() - log_z.max()))


# ----------------------------------------------------------------------------------------------------------
# subspaces (§7.3, §8)
# ----------------------------------------------------------------------------------------------------------


def orthonormalize(basis: ArrayLike, name: str = "basis") -> torch.Tensor:
    """Orthonormal basis (float64, ``d × k``) of the span of the columns of ``basis``, by QR.

    QR keeps the column order: the first output column is the first input direction. Concept dictionaries
    (NMF, SAE decoders) are not orthogonal, and energy fractions on them are meaningless until orthonormalised.

    Args:
        basis: ``d × k`` matrix whose columns span the subspace (directions as **columns**; transpose an
            sklearn-style ``components_`` array, which is ``k × d``).
        name: argument name used in error messages.

    Raises:
        ValueError: if ``k > d`` or the columns are linearly dependent.

    Example:
        >>> import torch
        >>> Q = orthonormalize(torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))
        >>> torch.allclose(Q.T @ Q, torch.eye(2, dtype=torch.float64))
        True
    """
    x = _to_tensor(basis, name)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D d × k matrix with directions as columns, got shape {tuple(x.shape)}")
    d, k = x.shape
    if k < 1:
        raise ValueError(f"{name} has no columns; pass at least one direction")
    if k > d:
        raise ValueError(
            f"{name} has shape {tuple(x.shape)}: more directions ({k}) than dimensions ({d}). Directions must be "
            f"columns (d × k); transpose a k × d array such as sklearn's components_"
        )
    x = _float64(x)
    _check_finite(x, name)
    q, r = torch.linalg.qr(x)
    singular = torch.linalg.svdvals(r)
    if not float(singular[-1]) > float(singular[0]) * max(d, k) * _EPS64:
        raise ValueError(f"the {k} columns of {name} are linearly dependent; drop the redundant directions")
    return q


def principal_angles(A: ArrayLike, B: ArrayLike) -> torch.Tensor:
    """Principal angles (radians, **ascending**) between the column spans of ``A`` (d × p) and ``B`` (d × q).

    ``cos θ_i = σ_i(Q_AᵀQ_B)`` (Björck & Golub 1973); angles whose cosine exceeds ``1/√2`` are taken from the
    sines ``σ(Q_B − Q_A Q_AᵀQ_B)`` instead, which stays accurate for tiny angles (Knyazev & Argentati 2002).
    Returns ``min(p, q)`` angles in ``[0, π/2]``. ``scipy.linalg.subspace_angles`` returns the same values in
    descending order. The Grassmann distance is ``principal_angles(A, B).norm()``.

    Example:
        >>> import torch
        >>> A = torch.tensor([[1.0], [0.0]]); B = torch.tensor([[1.0], [1.0]])
        >>> round(float(principal_angles(A, B)[0]), 6)  # pi/4
        0.785398
    """
    qa, qb = orthonormalize(A, "A"), orthonormalize(B, "B")
    if qa.shape[0] != qb.shape[0]:
        raise ValueError(f"A and B must live in the same space: A has {qa.shape[0]} rows, B has {qb.shape[0]}")
    qb = qb.to(qa.device)
    if qa.shape[1] < qb.shape[1]:
        qa, qb = qb, qa
    cross = qa.T @ qb
    cosines = torch.linalg.svdvals(cross)  # descending → angles ascending
    sines = torch.linalg.svdvals(qb - qa @ cross).flip(0)  # ascending → angles ascending
    from_cosines = torch.arccos(cosines.clamp(-1.0, 1.0))
    from_sines = torch.arcsin(sines.clamp(0.0, 1.0))
    return torch.where(cosines * cosines >= 0.5, from_sines, from_cosines)


def linear_cka(X: ArrayLike, Y: ArrayLike) -> float:
    """Linear centred kernel alignment (Kornblith et al. 2019) between two representations of the same n inputs.

    ``CKA = ‖Y_cᵀX_c‖_F² / (‖X_cᵀX_c‖_F ‖Y_cᵀY_c‖_F)`` = ``⟨K, L⟩_F/(‖K‖_F‖L‖_F)`` for centred Grams;
    the cheaper of the feature and Gram forms is used. In ``[0, 1]``; invariant to orthogonal maps and
    isotropic scaling (not to general invertible maps), and dominated by high-variance dimensions (§8).

    Example:
        >>> import torch
        >>> X = torch.randn(100, 5)
        >>> round(linear_cka(X, 3 * X @ torch.linalg.qr(torch.randn(5, 5)).Q), 6)
        1.0
    """
    x = _centre(_as_points(X, "X"))
    y = _centre(_as_points(Y, "Y")).to(x.device)
    n = x.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"X and Y must have the same rows (inputs): X has {n}, Y has {y.shape[0]}")
    p1, p2 = x.shape[1], y.shape[1]
    if p1 * p2 + p1 * p1 + p2 * p2 <= n * (p1 + p2):  # feature form is cheaper
        cross = y.T @ x
        numerator = (cross * cross).sum()
        norm_x, norm_y = torch.linalg.matrix_norm(x.T @ x), torch.linalg.matrix_norm(y.T @ y)
    else:  # Gram form: ⟨K, L⟩_F / (‖K‖_F ‖L‖_F)
        gram_x, gram_y = x @ x.T, y @ y.T
        numerator = (gram_x * gram_y).sum()
        norm_x, norm_y = torch.linalg.matrix_norm(gram_x), torch.linalg.matrix_norm(gram_y)
    if not (float(norm_x) > 0 and float(norm_y) > 0):
        raise ValueError("X or Y has zero variance (all rows identical); CKA is undefined")
    return float(numerator / (norm_x * norm_y))


def projection_energy(G: ArrayLike, U: ArrayLike) -> float:
    """Fraction of the energy of ``G`` in the span of ``U``: ``‖G Q‖_F² / ‖G‖_F²`` (§7.3).

    ``G`` is a d-vector or an ``N × d`` matrix whose rows are vectors in the space of ``U`` (per-token hidden
    gradients, or the rows of a linear layer's weight gradient for its input side). ``U`` (d × k) is
    orthonormalised by QR first, so the value is that of its span. In ``[0, 1]``; a Haar-random k-subspace
    gives ``k/d`` on average. Not centred: centre ``G`` yourself for the variance fraction.

    Example:
        >>> import torch
        >>> projection_energy(torch.tensor([3.0, 4.0, 0.0]), torch.tensor([[1.0], [0.0], [0.0]]))
        0.36
    """
    g = _to_tensor(G, "G")
    g = _as_points(g.unsqueeze(0) if g.ndim == 1 else g, "G", min_rows=1)
    q = orthonormalize(U, "U").to(g.device)
    if q.shape[0] != g.shape[1]:
        raise ValueError(f"U has {q.shape[0]} rows but G has {g.shape[1]} columns; both must be in the same space")
    total = (g * g).sum()
    if not float(total) > 0:
        raise ValueError("G is all zeros; its energy fraction is undefined")
    projected = g @ q
    return float((projected * projected).sum() / total)


# ----------------------------------------------------------------------------------------------------------
# per-step bundle
# ----------------------------------------------------------------------------------------------------------


def representation_metrics(H: ArrayLike, sequence_ids: ArrayLike | None = None) -> dict[str, float]:
    """The standard anisotropy bundle for one layer at one step, sharing one centring, Gram and spectrum.

    Keys (all floats except the two counts):

    * ``n_tokens``, ``dim``: shape of the cloud (spectral metrics are biased by ``n_tokens``; keep it fixed).
    * ``avg_cosine``: :func:`average_cosine` of the raw rows; ``avg_cosine_centered``: of the centred rows.
    * ``avg_cosine_cross_sequence``: :func:`average_cosine_cross_sequence` (only when ``sequence_ids`` given).
    * ``isoscore``: :func:`isoscore`; ``participation_ratio``: :func:`participation_ratio`.
    * ``effective_rank_singular``, ``effective_rank_eigen``: the two effective-rank conventions.
    * ``stable_rank``: :func:`stable_rank`; ``top1_explained_variance``: first principal component's share.
    * ``drift_share``: :func:`drift_share`.

    Each value equals the single-metric function on the same input. Cost: one ``O(nd·min(n, d))`` Gram and one
    ``min(n, d)``-sized symmetric eigensolve; everything else is ``O(nd)``.

    Example:
        >>> import torch
        >>> m = representation_metrics(torch.randn(256, 16) + 3.0, sequence_ids=torch.arange(256) // 64)
        >>> m["n_tokens"], m["dim"], m["avg_cosine"] > 0.5 > abs(m["avg_cosine_centered"])
        (256, 16, True)
    """
    return _representation_metrics(_as_points(H), sequence_ids)


def _representation_metrics(
    x: torch.Tensor, sequence_ids: ArrayLike | None = None, gram: torch.Tensor | None = None
) -> dict[str, float]:
    """:func:`representation_metrics` of a validated float64 cloud (from :func:`_as_points`); ``gram``: the
    smaller Gram of the centred cloud if already computed (e.g. the ``M2`` of its moments when n ≥ d)."""
    n, d = x.shape
    _check_rows(n, "H", 2)
    _check_dim_for_isoscore(d, "H")
    mean = x.mean(dim=0)
    centred = x - mean
    trace, frob2, gram = _covariance_moments(centred, gram)
    _check_variance(trace, "H")
    eigenvalues = _eigenvalues_from_gram(gram, n, d)
    pr = _participation_ratio(trace, frob2)
    inverse_norms = _inverse_row_norms(x, "H", _ZERO_ROW_HINT)
    values = _cosines(x, centred, inverse_norms)
    if sequence_ids is not None:
        _, inverse = _as_labels(sequence_ids, n, "sequence_ids", x.device)
        n_groups = int(inverse.max()) + 1
        if n_groups < 2:
            raise ValueError("sequence_ids holds a single sequence; pass sequence_ids=None or a multi-sequence batch")
        values["avg_cosine_cross_sequence"] = _cross_sequence_cosine(x, inverse_norms, inverse, n_groups)
    values.update(
        isoscore=_isoscore_from_pr(pr, d),
        participation_ratio=pr,
        effective_rank_singular=_exp_entropy(eigenvalues.sqrt()),
        effective_rank_eigen=_exp_entropy(eigenvalues),
        stable_rank=eigenvalues.sum() / eigenvalues[0],
        top1_explained_variance=eigenvalues[0] / eigenvalues.sum(),
        drift_share=_drift_share(mean, trace * (n - 1), n),
    )
    return _floats(values, n, d)


def _cosines(x: torch.Tensor, centred: torch.Tensor, inverse_norms: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "avg_cosine": _average_cosine(x, inverse_norms),
        "avg_cosine_centered": _average_cosine(centred, _inverse_row_norms(centred, "H", _MEAN_ROW_HINT)),
    }


def _floats(values: dict[str, torch.Tensor], n: int, d: int) -> dict[str, float]:
    floats = torch.stack(list(values.values())).tolist()  # one device sync for the whole bundle
    return {"n_tokens": n, "dim": d, **dict(zip(values.keys(), floats))}


def _linear_time_metrics(x: torch.Tensor) -> dict[str, float]:
    """The O(nd) part of :func:`_representation_metrics` (no Gram, no eigensolve): ``avg_cosine``,
    ``avg_cosine_centered`` and ``drift_share`` of a validated float64 cloud, equal to the full bundle's values."""
    n, d = x.shape
    _check_rows(n, "H", 2)
    mean = x.mean(dim=0)
    centred = x - mean
    values = _cosines(x, centred, _inverse_row_norms(x, "H", _ZERO_ROW_HINT))
    values["drift_share"] = _drift_share(mean, (centred * centred).sum(), n)
    return _floats(values, n, d)
