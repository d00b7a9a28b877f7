"""Geometry metrics on point clouds of activations or gradients: one namespace for every metric family.

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

The metrics live in one module per family (all of them importable from here and from
:mod:`interp_widgets.geometry`):

* :mod:`~interp_widgets.geometry.cosine`: average cosine (also cross-sequence), self-similarity, cosine
  contributions, drift share (§2, §5);
* :mod:`~interp_widgets.geometry.isotropy`: participation ratio, IsoScore, IsoScore* (§3);
* :mod:`~interp_widgets.geometry.spectral`: effective ranks, stable rank, explained variance, partition
  isotropy (§4, §6);
* :mod:`~interp_widgets.geometry.subspaces`: orthonormalisation, principal angles, linear CKA, projection
  energy (§7.3, §8);
* here: :func:`representation_metrics`, the per-step bundle that shares one centring, Gram and spectrum.
"""

from __future__ import annotations

from interp_widgets.geometry._kernels.bundles import representation_bundle
from interp_widgets.geometry._kernels.inputs import ArrayLike, as_points
from interp_widgets.geometry.cosine import (
    SelfSimilarity,
    average_cosine,
    average_cosine_cross_sequence,
    cosine_contributions,
    drift_share,
    self_similarity,
)
from interp_widgets.geometry.isotropy import isoscore, isoscore_star, participation_ratio
from interp_widgets.geometry.spectral import (
    effective_rank_eigen,
    effective_rank_singular,
    explained_variance_ratio,
    partition_isotropy,
    stable_rank,
)
from interp_widgets.geometry.subspaces import linear_cka, orthonormalize, principal_angles, projection_energy

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
    return representation_bundle(as_points(H), sequence_ids)
