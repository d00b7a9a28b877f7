"""Cosine family (geometry-metrics §2): average cosine, its cross-sequence baseline, self-similarity, per-dimension
contributions and the drift share. Conventions as in :mod:`interp_widgets.geometry.metrics`.

Example:
    >>> import torch
    >>> round(average_cosine(torch.cat([torch.eye(3), -torch.eye(3)])), 6)
    -0.2
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from interp_widgets.geometry._kernels.inputs import (
    MEAN_ROW_HINT,
    ZERO_ROW_HINT,
    ArrayLike,
    as_labels,
    as_points,
    centre,
    inverse_row_norms,
    unit_rows,
)
from interp_widgets.geometry._kernels.isoscore_terms import drift_share_from_moments
from interp_widgets.geometry._kernels.products import cross_sequence_cosine, mean_pairwise_cosine
from interp_widgets.validation import check_int

__all__ = [
    "SelfSimilarity",
    "average_cosine",
    "average_cosine_cross_sequence",
    "self_similarity",
    "cosine_contributions",
    "drift_share",
]


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
    x = as_points(H)
    x, hint = (centre(x), MEAN_ROW_HINT) if center else (x, ZERO_ROW_HINT)
    return float(mean_pairwise_cosine(x, inverse_row_norms(x, "H", hint)))


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
    x = as_points(H)
    _, inverse = as_labels(sequence_ids, x.shape[0], "sequence_ids", x.device)
    n_groups = int(inverse.max()) + 1
    if n_groups < 2:
        raise ValueError("sequence_ids holds a single sequence; cross-sequence pairs need at least two sequences")
    x, hint = (centre(x), MEAN_ROW_HINT) if center else (x, ZERO_ROW_HINT)
    return float(cross_sequence_cosine(x, inverse_row_norms(x, "H", hint), inverse, n_groups))


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
    check_int("min_count", min_count, minimum=2, hint="a pair is needed for a cosine")
    x = as_points(H, min_rows=1)
    unique, inverse = as_labels(token_ids, x.shape[0], "token_ids", x.device)
    units = unit_rows(x, "H", ZERO_ROW_HINT)
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
    x = as_points(H)
    n = x.shape[0]
    units = unit_rows(x, "H", ZERO_ROW_HINT)
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
    x = as_points(H, min_rows=1)
    centred = centre(x)
    value = drift_share_from_moments(x.mean(dim=0), (centred * centred).sum(), x.shape[0])
    if not torch.isfinite(value):
        raise ValueError("H is all zeros; the drift share is undefined")
    return float(value)
