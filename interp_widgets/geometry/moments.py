"""Streaming moments ``(n, μ, M2)`` of a point cloud in float64 (:class:`Moments`), merged exactly across
micro-batches, ranks and steps: what the proxy fit and the gradient alignment are computed from.

Example:
    >>> import torch
    >>> Moments.from_rows(torch.randn(10, 3)).count
    10
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from interp_widgets.geometry._kernels.inputs import ArrayLike, as_points
from interp_widgets.geometry._kernels.products import blocked_gram32, blocked_row_sums32, gram_matrix

__all__ = ["Moments"]


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
        return moments_of_points(as_points(X, name, min_rows=1))

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


def moments_of_points(x: torch.Tensor, fast: bool = False) -> Moments:
    """:class:`Moments` of a cloud already validated by ``as_points`` (float64, 2-D, finite), without validating
    it again (``fast``: ``M2`` from :func:`~interp_widgets.geometry._kernels.products.blocked_gram32`, relative Frobenius
    error ≤ ``GRAM_BOUND`` (273·2⁻²⁴) of its trace; the monitor's per-step gradient moments).

    Example:
        >>> import torch
        >>> moments_of_points(torch.ones(4, 2, dtype=torch.float64)).m2.tolist()
        [[0.0, 0.0], [0.0, 0.0]]
    """
    mean = x.mean(dim=0)
    centred = x - mean
    return Moments(count=x.shape[0], mean=mean, m2=(blocked_gram32 if fast else gram_matrix)(centred))


#: Rows per float32 partial sum of the mean in :func:`moments_of_float32_rows` (its error bound is proportional to it).
MEAN_BLOCK = 16


def moments_of_float32_rows(x: torch.Tensor) -> Moments:
    """:class:`Moments` of a finite float32 ``n × d`` cloud with ``M2`` from :func:`blocked_gram32`, never copied
    to float64 (the monitor's per-step gradient moments).

    Error: the mean comes from float32 partial sums of :data:`MEAN_BLOCK` rows added in float64, so each coordinate
    is within ``17·u·Σ_i |x_ij|/n`` of the exact mean (``u = 2⁻²⁴``; ``‖e‖ ≤ 17·u·√(mean‖x_i‖²)``). The rows are
    centred on that mean rounded to float32 (``δ``, ``‖δ‖ ≤ u‖μ‖ + ‖e‖``), each centred entry rounded once, as the
    cast in :func:`blocked_gram32` already does, so its bound ``‖ΔM2‖_F ≤ GRAM_BOUND·tr M2`` holds, plus ``n·‖δ‖²``
    (``Σ(x − μ − δ)(x − μ − δ)ᵀ = M2 + nδδᵀ``: second order). The uncentred scatter ``M2 + nμμᵀ`` built from these
    moments gains ``n(2‖μ‖‖e‖ + ‖e‖²) ≤ 35·u·tr S`` more. Tested against :func:`moments_of_points`.

    Example:
        >>> import torch
        >>> x = torch.randn(500, 6) + 3.0
        >>> exact = moments_of_points(x.double())
        >>> bool((moments_of_float32_rows(x).m2 - exact.m2).norm() <= 1e-5 * exact.m2.trace())
        True
    """
    n = x.shape[0]
    mean = blocked_row_sums32(x, block=MEAN_BLOCK) / n
    return Moments(count=n, mean=mean, m2=blocked_gram32(x - mean.to(torch.float32)))
