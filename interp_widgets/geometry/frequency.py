"""Token frequency against distance to the token's centroid (anisotropy-paper §3.8).

The paper reports that frequent tokens sit tightly around their centroids ("pinned"), rare ones spread more:
a negative relation between log-frequency and centroid distance, strong in decoders. Per token type ``w`` in a
set of hidden states: count ``f_w``, centroid ``c_w`` (mean of its rows) and distance ``d_w`` = mean ``‖h − c_w‖``
over its occurrences (two passes, float64; ``distance="rms"`` gives the root-mean-square form). Types seen fewer
than ``min_count`` times are dropped (their centroid is noise); the threshold is kept with the result.

Example:
    >>> import torch
    >>> ids = torch.arange(60) % 6
    >>> result = frequency_analysis(torch.randn(60, 4), ids, min_count=5)
    >>> result.n_types, result.min_count
    (6, 5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from interp_widgets.geometry._kernels import ArrayLike, as_labels, as_points
from interp_widgets.validation import check_int

__all__ = ["FrequencyAnalysis", "frequency_analysis"]


@dataclass(frozen=True, eq=False)
class FrequencyAnalysis:
    """Per-type counts and centroid distances with their Pearson and Spearman correlation.

    Attributes:
        token_ids: the kept token types (ascending).
        counts: occurrences of each kept type.
        distances: mean (or RMS) distance of each type's rows to its centroid.
        pearson, spearman: correlation of ``(log counts, distances)``; NaN when either is constant.
        min_count: types seen fewer times were dropped.
        distance: ``"mean"`` or ``"rms"``.

    Example:
        >>> import torch
        >>> result = frequency_analysis(torch.randn(40, 3), torch.arange(40) % 4)
        >>> len(result.to_dataframe())
        4
    """

    token_ids: np.ndarray
    counts: np.ndarray
    distances: np.ndarray
    pearson: float
    spearman: float
    min_count: int
    distance: str

    @property
    def n_types(self) -> int:
        """Number of kept token types.

        Example:
            >>> import torch
            >>> frequency_analysis(torch.randn(30, 2), torch.arange(30) % 3).n_types
            3
        """
        return int(self.token_ids.shape[0])

    def to_dataframe(self, tokenizer=None):
        """``pandas.DataFrame`` with ``token_id, count, distance`` (and ``token`` text given a tokenizer).

        Example:
            >>> import torch
            >>> frequency_analysis(torch.randn(30, 2), torch.arange(30) % 3).to_dataframe().columns.tolist()
            ['token_id', 'count', 'distance']
        """
        import pandas as pd

        frame = pd.DataFrame({"token_id": self.token_ids, "count": self.counts, "distance": self.distances})
        if tokenizer is not None:
            frame["token"] = tokenizer.convert_ids_to_tokens(self.token_ids.tolist())
        return frame

    def chart(self, tokenizer=None):
        """Altair scatter of log10 count against centroid distance with a fitted line; the coefficients are in
        the title (token texts, if given, only appear in tooltips and are escaped by Vega).

        Example:
            >>> import torch
            >>> type(frequency_analysis(torch.randn(30, 2), torch.arange(30) % 3).chart()).__name__
            'LayerChart'
        """
        import altair as alt

        frame = self.to_dataframe(tokenizer)
        frame["log10_count"] = np.log10(frame["count"].to_numpy())
        tooltip = ["token_id", "count", "distance"] + (["token"] if tokenizer is not None else [])
        points = alt.Chart(frame).mark_circle(opacity=0.6).encode(
            x=alt.X("log10_count:Q", title="log10 frequency"),
            y=alt.Y("distance:Q", title=f"{self.distance} distance to centroid"),
            tooltip=tooltip,
        )
        line = points.transform_regression("log10_count", "distance").mark_line(color="black")
        title = (f"frequency vs centroid distance: Pearson {self.pearson:+.2f}, Spearman {self.spearman:+.2f} "
                 f"({self.n_types} types with ≥ {self.min_count} occurrences)")
        return alt.layer(points, line).properties(title=title, width=420, height=260)


def frequency_analysis(H: ArrayLike, token_ids: ArrayLike, *, min_count: int = 5,
                       distance: str = "mean") -> FrequencyAnalysis:
    """Count, centroid and centroid distance of every token type in ``H`` (n × d rows with one id per row).

    Args:
        H: hidden states, padding already removed.
        token_ids: the token id of each row.
        min_count: drop types seen fewer times (≥ 2).
        distance: ``"mean"`` (mean Euclidean distance to the centroid) or ``"rms"`` (root mean square).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> ids = torch.cat([torch.zeros(200), torch.ones(20), torch.full((6,), 2)]).long()
        >>> spread = torch.tensor([0.1, 1.0, 3.0])[ids]  # frequent tokens pinned, rare ones spread
        >>> H = torch.randn(226, 8, generator=g) * spread[:, None]
        >>> frequency_analysis(H, ids).spearman
        -1.0
    """
    from scipy import stats

    check_int("min_count", min_count, minimum=2)
    if distance not in ("mean", "rms"):
        raise ValueError(f"distance must be 'mean' or 'rms', got {distance!r}")
    x = as_points(H)
    types, inverse = as_labels(token_ids, x.shape[0], "token_ids", x.device)
    counts = torch.bincount(inverse, minlength=types.shape[0])
    centroids = torch.zeros(types.shape[0], x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, inverse, x)
    centroids = centroids / counts[:, None]
    offsets = torch.linalg.vector_norm(x - centroids[inverse], dim=1)
    per_row = offsets if distance == "mean" else offsets * offsets
    totals = torch.zeros(types.shape[0], dtype=x.dtype, device=x.device).index_add_(0, inverse, per_row)
    distances = totals / counts
    if distance == "rms":
        distances = distances.sqrt()
    keep = counts >= min_count
    if int(keep.sum()) < 3:
        raise ValueError(f"only {int(keep.sum())} token type(s) occur at least {min_count} times; a correlation "
                         f"needs 3 or more: pass more text or lower min_count")
    log_counts = torch.log(counts[keep].to(x.dtype)).cpu().numpy()
    kept = distances[keep].cpu().numpy()
    constant = np.ptp(log_counts) == 0 or np.ptp(kept) == 0
    pearson = math.nan if constant else float(stats.pearsonr(log_counts, kept)[0])
    spearman = math.nan if constant else float(stats.spearmanr(log_counts, kept)[0])
    return FrequencyAnalysis(token_ids=types[keep].cpu().numpy(), counts=counts[keep].cpu().numpy(),
                             distances=kept, pearson=pearson, spearman=spearman, min_count=min_count,
                             distance=distance)
