"""Subspaces (geometry-metrics §7.3, §8): QR orthonormalisation, principal angles, linear CKA and projection energy.
Conventions as in :mod:`interp_widgets.geometry.metrics`.

Example:
    >>> import torch
    >>> projection_energy(torch.tensor([3.0, 4.0, 0.0]), torch.tensor([[1.0], [0.0], [0.0]]))
    0.36
"""

from __future__ import annotations

import torch

from interp_widgets.geometry._kernels.inputs import (
    EPS64,
    ArrayLike,
    as_float64,
    as_points,
    centre,
    check_finite,
    to_tensor,
)

__all__ = ["orthonormalize", "principal_angles", "linear_cka", "projection_energy"]


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
    x = to_tensor(basis, name)
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
    x = as_float64(x)
    check_finite(x, name)
    q, r = torch.linalg.qr(x)
    singular = torch.linalg.svdvals(r)
    if not float(singular[-1]) > float(singular[0]) * max(d, k) * EPS64:
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
    x = centre(as_points(X, "X"))
    y = centre(as_points(Y, "Y")).to(x.device)
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
    g = to_tensor(G, "G")
    g = as_points(g.unsqueeze(0) if g.ndim == 1 else g, "G", min_rows=1)
    q = orthonormalize(U, "U").to(g.device)
    if q.shape[0] != g.shape[1]:
        raise ValueError(f"U has {q.shape[0]} rows but G has {g.shape[1]} columns; both must be in the same space")
    total = (g * g).sum()
    if not float(total) > 0:
        raise ValueError("G is all zeros; its energy fraction is undefined")
    projected = g @ q
    return float((projected * projected).sum() / total)
