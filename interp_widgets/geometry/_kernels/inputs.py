"""Input handling of the geometry metrics: point clouds, labels and row norms validated with clear errors, as float64 tensors."""

from __future__ import annotations

import numpy as np
import torch


ArrayLike = torch.Tensor | np.ndarray


ShrinkageTarget = str | torch.Tensor | np.ndarray


EPS64 = torch.finfo(torch.float64).eps


def to_tensor(x: ArrayLike, name: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    return x


def as_float64(x: torch.Tensor) -> torch.Tensor:
    """Detached float64 copy on a device that supports float64."""
    device = torch.device("cpu") if x.device.type == "mps" else x.device
    return x.detach().to(device=device, dtype=torch.float64)


def check_finite(x: torch.Tensor, name: str) -> None:
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        raise ValueError(
            f"{name} contains {int(bad.sum())} NaN/inf value(s); drop or mask those rows before measuring "
            f"(e.g. {name}[torch.isfinite({name}).all(dim=1)])"
        )


def check_rows(n: int, name: str, min_rows: int) -> None:
    if n < min_rows:
        raise ValueError(f"{name} has {n} row(s) but this metric needs at least {min_rows} points; pass more tokens")


def as_points(x: ArrayLike, name: str = "H", *, min_rows: int = 2, finite: bool = False) -> torch.Tensor:
    """Validate an n × d point cloud and return it as a detached float64 tensor (``finite=True``: the caller
    has already checked that every value is finite)."""
    return as_float64(checked_points(x, name, min_rows=min_rows, finite=finite))


def checked_points(x: ArrayLike, name: str = "H", *, min_rows: int = 2, finite: bool = False) -> torch.Tensor:
    """:func:`as_points` without the float64 copy: the validated n × d cloud as a tensor of its own dtype.

    Example:
        >>> checked_points(torch.ones(3, 2)).dtype
        torch.float32
    """
    x = to_tensor(x, name)
    if x.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n points × d dimensions), got shape {tuple(x.shape)}; "
            f"flatten batch and sequence axes first, e.g. {name}.reshape(-1, {name}.shape[-1])"
        )
    n, d = x.shape
    check_rows(n, name, min_rows)
    if d < 1:
        raise ValueError(f"{name} has no columns (shape {tuple(x.shape)}); pass points with at least one dimension")
    if not finite:
        check_finite(x, name)
    return x


def as_labels(labels, n: int, name: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate per-row integer labels; return (unique labels, inverse indices)."""
    if isinstance(labels, (list, tuple)):
        labels = torch.as_tensor(labels)
    labels = to_tensor(labels, name)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"{name} must be a 1-D tensor with one id per row ({n}), got shape {tuple(labels.shape)}")
    if labels.is_floating_point():
        raise TypeError(f"{name} must hold integer ids, got dtype {labels.dtype}")
    unique, inverse = torch.unique(labels.to(device), return_inverse=True)
    return unique, inverse


def inverse_row_norms(x: torch.Tensor, name: str, hint: str) -> torch.Tensor:
    norms = torch.linalg.vector_norm(x, dim=1)
    zero = norms == 0
    if bool(zero.any()):
        raise ValueError(f"{name} has {int(zero.sum())} all-zero row(s){hint}; cosines are undefined for them")
    return 1.0 / norms


def unit_rows(x: torch.Tensor, name: str, hint: str) -> torch.Tensor:
    return x * inverse_row_norms(x, name, hint)[:, None]


ZERO_ROW_HINT = " (padding?); remove them first, e.g. H[H.norm(dim=1) > 0]"


MEAN_ROW_HINT = " after centring (rows equal to the mean); drop duplicates of the mean or use center=False"


def centre(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(dim=0)


def check_variance(trace: torch.Tensor, name: str) -> None:
    if not float(trace) > 0:
        raise ValueError(f"{name} has zero variance (all rows identical); spectral metrics are undefined for it")
