"""Agreement between attribution methods: Spearman rank correlation and top-k overlap of score vectors.

The one definition of these statistics, in pure numpy. ``interp_widgets.attribution`` exports them for analysis, and
:func:`interp_widgets.widgets.compare` uses them to fill the comparison view's agreement tables (the view itself
only draws the tables it is given).

Example:
    >>> spearman([0.1, -0.5, 0.3], [0.2, 0.9, 0.25])
    1.0
    >>> top_k_overlap([0.9, 0.1, 0.5, 0.0], [0.8, 0.0, 0.0, 0.7], k=2)
    0.5
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any, Sequence

import numpy as np

__all__ = ["AGREEMENT_BY", "agreement_table", "spearman", "top_k", "top_k_overlap"]

AGREEMENT_BY = ("magnitude", "signed")


def _valid(a: np.ndarray, b: np.ndarray, mask: Any) -> np.ndarray:
    keep = ~(np.isnan(a) | np.isnan(b))
    return keep if mask is None else keep & np.asarray(mask, bool)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their ranks (as ``scipy.stats.rankdata``)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2.0)[inverse]


def spearman(a: Any, b: Any, *, by: str = "magnitude", mask: Any = None) -> float:
    """Spearman rank correlation of two score vectors over the tokens both can see (NaN skipped).

    ``by="magnitude"`` ranks |score| (importance, comparable across signed and unsigned methods); ``"signed"`` ranks
    the scores themselves. NaN when fewer than two tokens remain or a vector is constant.

    Example:
        >>> spearman([0.1, -0.5, 0.3], [0.2, 0.9, 0.25])
        1.0
    """
    if by not in AGREEMENT_BY:
        raise ValueError(f"by must be one of {AGREEMENT_BY}, got {by!r}")
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"score vectors must be 1-D and the same length, got shapes {a.shape} and {b.shape}")
    keep = _valid(a, b, mask)
    x, y = a[keep], b[keep]
    if by == "magnitude":
        x, y = np.abs(x), np.abs(y)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    rho = float(np.dot(rx, ry) / math.sqrt(float(np.dot(rx, rx)) * float(np.dot(ry, ry))))
    return max(-1.0, min(1.0, rho))


def top_k(a: Any, k: int, mask: Any = None) -> list[int]:
    """Indices of the ``k`` largest |scores| (NaN and masked-out tokens skipped; ties: lower index first).

    Example:
        >>> top_k([0.1, -0.5, 0.3, np.nan], 2)
        [1, 2]
    """
    a = np.asarray(a, dtype=np.float64)
    keep = _valid(a, a, mask)
    candidates = np.flatnonzero(keep)
    order = candidates[np.argsort(-np.abs(a[candidates]), kind="stable")]
    return order[:k].tolist()


def top_k_overlap(a: Any, b: Any, k: int = 5, *, mask: Any = None) -> float:
    """Share of the ``k`` most important tokens (by |score|) the two methods have in common, in [0, 1].

    Only tokens both methods can see count; ``k`` shrinks to their number if smaller.

    Example:
        >>> top_k_overlap([0.9, 0.1, 0.5, 0.0], [0.8, 0.0, 0.0, 0.7], k=2)
        0.5
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    keep = _valid(a, b, mask)
    k = min(k, int(keep.sum()))
    if k == 0:
        return math.nan
    return len(set(top_k(a, k, keep)) & set(top_k(b, k, keep))) / k


def agreement_table(scores: np.ndarray, methods: Sequence[str], *, k: int = 5, by: str = "magnitude",
                    mask: Any = None) -> list[dict[str, Any]]:  # fmt: skip
    """Pairwise agreement of the rows of ``scores`` (methods × tokens): one dict per pair.

    Example:
        >>> agreement_table(np.array([[1.0, 2, 3], [1, 2, 4]]), ["a", "b"], k=1)
        [{'a': 'a', 'b': 'b', 'spearman': 1.0, 'top_k_overlap': 1.0, 'k': 1}]
    """
    rows = []
    for i, j in combinations(range(len(methods)), 2):
        rows.append({
            "a": methods[i], "b": methods[j],
            "spearman": spearman(scores[i], scores[j], by=by, mask=mask),
            "top_k_overlap": top_k_overlap(scores[i], scores[j], k, mask=mask), "k": k,
        })  # fmt: skip
    return rows
