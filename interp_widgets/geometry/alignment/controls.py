"""Matched-rank normal controls: seeded random k-dim subspaces orthogonal to a tangent proxy
(:func:`normal_controls`), the null against which :func:`~interp_widgets.geometry.alignment.measure.gradient_alignment`
compares the proxy.

Example:
    >>> import torch
    >>> normal_controls(torch.eye(6, dtype=torch.float64)[:, :2], n_controls=3).shape
    torch.Size([3, 6, 2])
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from interp_widgets.geometry._kernels.inputs import ArrayLike, as_float64, to_tensor
from interp_widgets.geometry.alignment.proxy import ORTHO_TOL, TangentProxy, basis_of, check_rank
from interp_widgets.validation import check_int

__all__ = ["normal_controls"]


def normal_controls(proxy: TangentProxy | ArrayLike, n_controls: int = 20, seed: int = 0) -> torch.Tensor:
    """Seeded random k-dim orthonormal subspaces orthogonal to the proxy ("matched-rank normal controls").

    Each control is Haar-random inside the (d − k)-dim orthogonal complement of the proxy: a Gaussian
    ``d × k`` matrix, projected off the proxy twice, then QR. Draw ``r`` uses its own generator seeded from
    ``numpy.random.SeedSequence(seed, spawn_key=(r,))``, so it depends only on ``(seed, r)``: the first m
    controls of a larger set equal a set of m. Controls are not orthogonal to each other.

    Args:
        proxy: a :class:`TangentProxy` or an orthonormal ``d × k`` basis.
        n_controls: number of draws R (≥ 1; the paper uses 20, giving a minimum p-value of 1/21).
        seed: non-negative integer.

    Returns:
        float64 tensor of shape ``(n_controls, d, k)``.

    Raises:
        ValueError: if ``2k > d`` (no k-dim subspace fits in the complement).

    Example:
        >>> import torch
        >>> proxy = TangentProxy.from_basis(torch.eye(10)[:, :3])
        >>> controls = normal_controls(proxy, n_controls=5, seed=1)
        >>> controls.shape, float((proxy.basis.T @ controls).abs().max()) < 1e-12
        (torch.Size([5, 10, 3]), True)
    """
    basis = basis_of(proxy)
    d, k = basis.shape
    check_int("n_controls", n_controls, minimum=1)
    check_int("seed", seed, minimum=0)
    check_rank(k, d)
    z = control_gaussians(seed, n_controls, d, k).to(basis.device)
    for _ in range(2):  # projecting twice removes the round-off left by one pass
        z = z - basis @ (basis.T @ z)
    controls = torch.linalg.qr(z).Q
    leak = float((basis.T @ controls).abs().max())
    if not leak < ORTHO_TOL:
        raise RuntimeError(f"a control is not orthogonal to the proxy (max |Q_TᵀQ_N| = {leak:.2e})")
    return controls


@functools.lru_cache(maxsize=16)
def control_gaussians(seed: int, n_controls: int, d: int, k: int) -> torch.Tensor:
    """The Gaussian ``(n_controls, d, k)`` draws behind :func:`normal_controls`, draw ``r`` from its own generator
    seeded by ``(seed, r)``; cached, as every layer of a monitor draws the same ones (read-only: callers copy).

    Example:
        >>> control_gaussians(0, 2, 4, 1).shape, control_gaussians(0, 2, 4, 1) is control_gaussians(0, 2, 4, 1)
        (torch.Size([2, 4, 1]), True)
    """
    gaussians = []
    for r in range(n_controls):
        draw_seed = int(np.random.SeedSequence(seed, spawn_key=(r,)).generate_state(1, dtype=np.uint64)[0])
        generator = torch.Generator().manual_seed(draw_seed)
        gaussians.append(torch.randn(d, k, generator=generator, dtype=torch.float64))
    return torch.stack(gaussians)


def check_controls(controls: ArrayLike, basis: torch.Tensor) -> torch.Tensor:
    """Validate ``(R, d, k)`` controls against a proxy basis (shape, orthonormal, orthogonal to the proxy) and
    return them in float64 on the basis' device.

    Example:
        >>> import torch
        >>> basis = torch.eye(6, dtype=torch.float64)[:, :2]
        >>> check_controls(normal_controls(basis, 2), basis).shape
        torch.Size([2, 6, 2])
    """
    c = as_float64(to_tensor(controls, "controls")).to(basis.device)
    d, k = basis.shape
    if c.ndim != 3 or c.shape[1:] != (d, k) or c.shape[0] < 1:
        raise ValueError(
            f"controls must have shape (n_controls >= 1, {d}, {k}) to match the proxy, got {tuple(c.shape)}; "
            f"build them with normal_controls(proxy, n_controls, seed)"
        )
    eye = torch.eye(k, dtype=c.dtype, device=c.device)
    if not float((c.transpose(1, 2) @ c - eye).abs().max()) < ORTHO_TOL:
        raise ValueError("controls are not orthonormal; build them with normal_controls(proxy, n_controls, seed)")
    if not float((basis.T @ c).abs().max()) < ORTHO_TOL:
        raise ValueError(
            "controls are not orthogonal to this proxy (stale controls from an earlier fit?); "
            "redraw them with normal_controls(proxy, n_controls, seed) after every (re)fit"
        )
    return c
