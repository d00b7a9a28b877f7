"""The tangent proxy: a rank-k orthonormal basis standing in for the tangent space of a layer's activations
(:class:`TangentProxy`), fitted by PCA (from rows or streamed :class:`~interp_widgets.geometry.moments.Moments`),
by a custom dictionary method, or supplied.

Example:
    >>> import torch
    >>> TangentProxy.fit(torch.randn(100, 6), rank=2).basis.shape
    torch.Size([6, 2])
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from interp_widgets.geometry._kernels.eigen import fast_top_eigenvectors
from interp_widgets.geometry._kernels.inputs import ArrayLike, as_float64, as_points, to_tensor
from interp_widgets.geometry.moments import Moments
from interp_widgets.geometry.subspaces import orthonormalize
from interp_widgets.validation import check_int

__all__ = ["TangentProxy", "ProxyMethod", "check_rank", "dictionary_function"]

#: A proxy fitting method: ``"pca"``, a function ``(H, rank) -> d × k`` dictionary, or an estimator.
ProxyMethod = str | Callable[[torch.Tensor, int], object] | object

#: Tolerance of the orthonormality checks on proxy bases and controls (max entry of ``|QᵀQ − I|``).
ORTHO_TOL = 1e-6


def check_rank(rank, d: int | None = None, *, layer: str | None = None, controls: bool = True) -> int:
    """The proxy rank ``k`` as an int: the one rank check of the alignment measurement (the monitor's config, the
    schedule, the proxy, the controls and every monitored layer call it).

    ``k`` must be an integer ``>= 1``. Given the dimension ``d`` of the space, also ``2k <= d``, so that matched-rank
    normal controls fit beside the proxy in its complement; or, with ``controls=False`` (a proxy on its own),
    ``k < d``. The message names the ``layer`` when there is one, and the largest rank that fits.

    Example:
        >>> check_rank(4, 8)
        4
        >>> check_rank(5, 8, layer="layer:0")
        Traceback (most recent call last):
        ...
        ValueError: rank must be <= 4 at layer 'layer:0', got 5: d = 8, and the proxy and its matched-rank normal controls need 2k <= d; choose rank <= 4
    """
    rank = check_int("rank", rank, minimum=1, hint="the tangent proxy needs rank=, its number of directions k")
    if d is None:
        return rank
    limit = d // 2 if controls else d - 1
    if rank > limit:
        where = f" at layer {layer!r}" if layer is not None else ""
        need = "the proxy and its matched-rank normal controls need 2k <= d" if controls else "a proxy needs k < d"
        if limit < 1:
            raise ValueError(f"no rank fits{where}: d = {d}, and {need}; use a layer with d >= 2")
        raise ValueError(f"rank must be <= {limit}{where}, got {rank}: d = {d}, and {need}; choose rank <= {limit}")
    return rank


@dataclass(frozen=True, eq=False)
class TangentProxy:
    """A rank-k orthonormal basis standing in for the tangent space of the activations at one layer.

    Attributes:
        basis: ``d × k`` float64 tensor with orthonormal columns.
        method: how it was obtained: ``"pca"``, ``"fixed"`` or the name of a custom fitting function.
        mean: activation mean of the fitted data (``None`` for a supplied basis). PCA centres, so the mean
            direction — the classic anisotropy carrier — is *not* in the proxy; :func:`gradient_alignment`
            reports the gradient energy along it separately.
        explained_variance: fraction of the fitted activations' variance inside the proxy (``None`` for a
            supplied basis).
        angle_bound: for a ``fast`` :meth:`from_moments` fit, the proven bound on ``‖sin Θ‖_F`` between the
            basis and the exact float64 eigenvectors' subspace (0 when the exact solver was used); else ``None``.

    Example:
        >>> import torch
        >>> proxy = TangentProxy.fit(torch.randn(200, 10), rank=3)
        >>> proxy.basis.shape, proxy.method
        (torch.Size([10, 3]), 'pca')
    """

    basis: torch.Tensor
    method: str
    mean: torch.Tensor | None = None
    explained_variance: float | None = None
    angle_bound: float | None = None

    @property
    def rank(self) -> int:
        """Number of directions k.

        Example:
            >>> import torch
            >>> TangentProxy.from_basis(torch.eye(4)[:, :2]).rank
            2
        """
        return self.basis.shape[1]

    @property
    def dim(self) -> int:
        """Ambient dimension d.

        Example:
            >>> import torch
            >>> TangentProxy.from_basis(torch.eye(4)[:, :2]).dim
            4
        """
        return self.basis.shape[0]

    @classmethod
    def fit(
        cls,
        H: ArrayLike,
        rank: int,
        method: str | Callable[[torch.Tensor, int], ArrayLike] = "pca",
    ) -> "TangentProxy":
        """Fit a proxy to activations ``H`` (n × d).

        Args:
            H: activations, rows are tokens.
            rank: number of directions k (``1 <= k < d``; PCA also needs ``k <= n − 1``).
            method: ``"pca"`` (default): the top-k right singular vectors of the centred ``H`` (torch SVD,
                float64). Or a function ``(H, rank) -> d × k`` dictionary (e.g. an NMF or SAE fit; called with
                the float64 activations); its columns are orthonormalised by QR.

        Example:
            >>> import torch
            >>> H = torch.randn(500, 6) * torch.tensor([10.0, 3.0, 1.0, 1.0, 1.0, 1.0])
            >>> proxy = TangentProxy.fit(H, rank=2)
            >>> torch.allclose(proxy.basis.abs()[:2], torch.eye(2, dtype=torch.float64), atol=0.1)
            True
        """
        x = as_points(H)
        n, d = x.shape
        check_rank(rank, d, controls=False)
        mean = x.mean(dim=0)
        centred = x - mean
        if method == "pca":
            if rank > n - 1:
                raise ValueError(f"PCA of {n} points spans at most {n - 1} directions; pass rank <= {n - 1}")
            basis = torch.linalg.svd(centred, full_matrices=False).Vh[:rank].T
            name = "pca"
        elif callable(method):
            basis = orthonormalize(method(x, rank), "the dictionary returned by method").to(x.device)
            if basis.shape != (d, rank):
                raise ValueError(
                    f"method must return a {d} × {rank} dictionary (directions as columns), "
                    f"got shape {tuple(basis.shape)}"
                )
            name = getattr(method, "__name__", type(method).__name__)
        else:
            raise ValueError(f"method must be 'pca' or a function (H, rank) -> d × k basis, got {method!r}")
        inside = centred @ basis
        explained = float((inside * inside).sum() / (centred * centred).sum())
        return cls(basis=basis, method=name, mean=mean, explained_variance=explained)

    @classmethod
    def from_moments(cls, moments: Moments, rank: int, *, fast: bool = False) -> "TangentProxy":
        """PCA proxy from pooled activation moments (eigenvectors of the covariance), e.g. a streamed fit window.

        Same subspace as :meth:`fit` on the pooled rows, without storing them. ``fast=True`` (the live
        monitor's setting) replaces the float64 ``eigh`` by a float32 eigensolve refined by float64 subspace
        iteration and Rayleigh–Ritz, whose distance to the exact subspace is bounded and recorded in
        ``angle_bound`` (``‖sin Θ‖_F ≤ 1e-4``; see ``interp_widgets.geometry._kernels.eigen.fast_top_eigenvectors``);
        ``explained_variance`` then uses the Ritz values over the exact trace.

        Example:
            >>> import torch
            >>> H = torch.randn(300, 5) * torch.tensor([4.0, 1.0, 1.0, 1.0, 1.0])
            >>> proxy = TangentProxy.from_moments(Moments.from_rows(H), rank=1)
            >>> float(proxy.basis[0, 0].abs()) > 0.95
            True
        """
        if not isinstance(moments, Moments):
            raise TypeError(f"moments must be a Moments instance, got {type(moments).__name__}")
        check_rank(rank, moments.dim, controls=False)
        if rank > moments.count - 1:
            raise ValueError(
                f"PCA of {moments.count} points spans at most {moments.count - 1} directions; "
                f"pass rank <= {moments.count - 1} or observe more activations"
            )
        if fast:
            top, basis, bound = fast_top_eigenvectors(moments.m2, rank)
            explained = float(top.sum() / moments.m2.trace())
            return cls(basis=basis, method="pca", mean=moments.mean, explained_variance=explained, angle_bound=bound)
        eigenvalues, eigenvectors = torch.linalg.eigh(moments.m2)
        basis = eigenvectors.flip(1)[:, :rank]
        explained = float(eigenvalues.flip(0)[:rank].sum() / eigenvalues.sum())
        return cls(basis=basis, method="pca", mean=moments.mean, explained_variance=explained)

    @classmethod
    def from_basis(cls, basis: ArrayLike, method: str = "fixed") -> "TangentProxy":
        """Wrap a user-supplied ``d × k`` basis (any dictionary; orthonormalised by QR).

        Example:
            >>> import torch
            >>> proxy = TangentProxy.from_basis(torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))
            >>> torch.allclose(proxy.basis.T @ proxy.basis, torch.eye(2, dtype=torch.float64))
            True
        """
        q = orthonormalize(basis)
        check_rank(q.shape[1], q.shape[0], controls=False)
        return cls(basis=q, method=method)


def basis_of(proxy: TangentProxy | ArrayLike) -> torch.Tensor:
    """The orthonormal d × k basis of a proxy or of a tensor that must already be orthonormal.

    Example:
        >>> import torch
        >>> basis_of(torch.eye(3)[:, :1]).dtype
        torch.float64
    """
    if isinstance(proxy, TangentProxy):
        return proxy.basis
    basis = to_tensor(proxy, "proxy")
    if basis.ndim != 2 or not 1 <= basis.shape[1] < basis.shape[0]:
        raise ValueError(f"proxy basis must be d × k with 1 <= k < d, got shape {tuple(basis.shape)}")
    basis = as_float64(basis)
    error = (basis.T @ basis - torch.eye(basis.shape[1], dtype=basis.dtype, device=basis.device)).abs().max()
    if not float(error) < ORTHO_TOL:
        raise ValueError(
            f"proxy basis is not orthonormal (max |QᵀQ − I| = {float(error):.2e}); "
            f"wrap it with TangentProxy.from_basis(basis), which orthonormalises it by QR"
        )
    return basis


def dictionary_function(method: ProxyMethod) -> Callable[[torch.Tensor, int], object] | None:
    """None for PCA; else a ``(H, rank) -> d × k`` function (sklearn-style estimators give ``components_.T``).

    Example:
        >>> dictionary_function("pca") is None
        True
    """
    if isinstance(method, str):
        if method != "pca":
            raise ValueError(
                f"proxy_method must be 'pca', a function (H, rank) -> d × k dictionary or an estimator "
                f"with fit() and components_, got {method!r}"
            )
        return None
    if hasattr(method, "fit") and not isinstance(method, type):
        estimator = method

        def from_estimator(H: torch.Tensor, rank: int):
            fitted = copy.deepcopy(estimator).fit(H.cpu().numpy())
            components = np.asarray(fitted.components_)
            if components.shape[0] != rank:
                raise ValueError(
                    f"the estimator produced {components.shape[0]} components but rank={rank}; "
                    f"configure it with {rank} components"
                )
            return torch.as_tensor(components.T)

        from_estimator.__name__ = type(estimator).__name__
        return from_estimator
    if callable(method):
        return method
    raise TypeError(f"proxy_method must be 'pca', a function or an estimator, got {type(method).__name__}")
