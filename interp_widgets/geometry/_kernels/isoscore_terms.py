"""IsoScore terms from traces and Frobenius norms: participation ratio, the IsoScore* shrinkage target and its checks."""

from __future__ import annotations

import numbers

import torch

from interp_widgets.geometry._kernels.inputs import ShrinkageTarget, as_float64, check_finite, to_tensor


def pr_from_moments(trace: torch.Tensor, frob2: torch.Tensor) -> torch.Tensor:
    return trace * trace / frob2


def isoscore_from_pr(pr: torch.Tensor, dim: int) -> torch.Tensor:
    return (pr - 1) / (dim - 1)


def exp_entropy(weights: torch.Tensor) -> torch.Tensor:
    p = weights / weights.sum()
    return torch.exp(torch.special.entr(p).sum())


def drift_share_from_moments(mean: torch.Tensor, centred_square_sum: torch.Tensor, n: int) -> torch.Tensor:
    """‖μ‖²/mean‖h_i‖², using mean‖h_i‖² = Σ‖h_i − μ‖²/n + ‖μ‖² (exact, no cancellation)."""
    mean_square = mean @ mean
    return mean_square / (centred_square_sum / n + mean_square)


def check_dim_for_isoscore(d: int, name: str) -> None:
    if d < 2:
        raise ValueError(f"{name} has d = {d}; IsoScore needs at least 2 dimensions")


def check_shrinkage(zeta: float, C0: ShrinkageTarget, d: int, device: torch.device) -> ShrinkageTarget:
    """Validate zeta and C0; return C0 as one of the two names or a float64 d × d tensor."""
    if isinstance(zeta, bool) or not isinstance(zeta, numbers.Real) or not 0.0 <= float(zeta) <= 1.0:
        raise ValueError(f"zeta must be a number in [0, 1], got {zeta!r}")
    if isinstance(C0, str):
        if C0 not in ("scaled_identity", "identity"):
            raise ValueError(f"C0 must be 'scaled_identity', 'identity' or a d × d matrix, got {C0!r}")
        return C0
    c0 = as_float64(to_tensor(C0, "C0")).to(device)
    if c0.shape != (d, d):
        raise ValueError(f"C0 must be a {d} × {d} covariance matrix to match the data, got shape {tuple(c0.shape)}")
    check_finite(c0, "C0")
    if not torch.allclose(c0, c0.T, rtol=1e-10, atol=1e-12 * float(c0.abs().max())):
        raise ValueError("C0 must be symmetric (a covariance matrix); symmetrise it with (C0 + C0.T) / 2")
    return c0


def named_target_terms(name: str, trace: torch.Tensor, dim: int) -> tuple:
    """(⟨C, C0⟩, tr C0, ‖C0‖_F²) for C0 = I or C0 = (tr C/dim)·I in ``dim`` dimensions."""
    if name == "identity":
        return trace, torch.full_like(trace, dim), torch.full_like(trace, dim)
    scale = trace / dim
    return scale * trace, scale * dim, scale * scale * dim


def shrunk_isoscore(trace, frob2, dim: int, zeta: float, inner, target_trace, target_frob2) -> torch.Tensor:
    """IsoScore* = (PR(C_ζ) − 1)/(dim − 1) for C_ζ = (1 − ζ)C + ζC₀, from traces and Frobenius norms only."""
    shrunk_trace = (1 - zeta) * trace + zeta * target_trace
    shrunk_frob2 = (1 - zeta) ** 2 * frob2 + 2 * zeta * (1 - zeta) * inner + zeta**2 * target_frob2
    return isoscore_from_pr(shrunk_trace * shrunk_trace / shrunk_frob2, dim)
