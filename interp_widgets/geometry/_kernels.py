"""Package-internal helpers shared by the geometry modules: input validation, float64 tensor kernels, the
IsoScore* shrinkage terms and the per-step representation bundle.

Every name here is internal to :mod:`interp_widgets.geometry` (the module is private); the public metrics in
:mod:`~interp_widgets.geometry.cosine`, :mod:`~interp_widgets.geometry.isotropy`,
:mod:`~interp_widgets.geometry.spectral` and :mod:`~interp_widgets.geometry.subspaces` validate their input
with these helpers and share these kernels with the alignment and the monitor.

Example:
    >>> import torch
    >>> as_points(torch.ones(3, 2)).dtype
    torch.float64
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os

import numpy as np
import torch

ArrayLike = torch.Tensor | np.ndarray
ShrinkageTarget = str | torch.Tensor | np.ndarray

EPS64 = torch.finfo(torch.float64).eps


# ----------------------------------------------------------------------------------------------------------
# input handling
# ----------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------
# tensor kernels shared by the public functions and the per-step bundle
# ----------------------------------------------------------------------------------------------------------


def mean_pairwise_cosine(x: torch.Tensor, inverse_norms: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    total = x.T @ inverse_norms  # Σ_i û_i without materialising the unit rows
    return (total @ total - n) / (n * (n - 1))


def cross_sequence_cosine(
    x: torch.Tensor, inverse_norms: torch.Tensor, inverse: torch.Tensor, n_groups: int
) -> torch.Tensor:
    n = x.shape[0]
    units = x * inverse_norms[:, None]
    sums = torch.zeros(n_groups, units.shape[1], dtype=units.dtype, device=units.device)
    sums.index_add_(0, inverse, units)
    counts = torch.bincount(inverse, minlength=n_groups).to(units.dtype)
    total = sums.sum(dim=0)
    numerator = total @ total - (sums * sums).sum()
    denominator = n * n - (counts * counts).sum()
    return numerator / denominator


def gram_matrix(x: torch.Tensor, blocks: int = 4) -> torch.Tensor:
    """``xᵀx`` from its upper block triangle, mirrored: 5/8 of the multiply-adds of one product (torch has no
    symmetric rank-k update)."""
    d = x.shape[1]
    if d < 32 * blocks:  # small: one product beats several
        return x.T @ x
    cuts = [d * i // blocks for i in range(blocks + 1)]
    gram = x.new_empty(d, d)
    for start, stop in zip(cuts[:-1], cuts[1:]):
        rows = x[:, start:stop].T @ x[:, start:]
        gram[start:stop, start:] = rows
        gram[stop:, start:stop] = rows[:, stop - start :].T
    return gram


@contextlib.contextmanager
def one_thread():
    """Run the monitor's per-step work (small products, eigensolves and QRs of d × d matrices with d in the
    hundreds, dozens of small element-wise kernels per layer) on one intra-op thread, restoring the caller's
    thread count afterwards. Each of these kernels ends in a barrier: with two OpenMP threads on a busy machine
    every barrier waits for a descheduled thread. Measured at load 15 on 2 cores: a 384 × 384 ``eigvalsh`` 10–30×
    slower on two threads than on one, the 1024 × 256 float32 Gram in 256-row blocks 18× slower; on an idle
    machine the second thread gains at most 2× on these sizes. The result is the same algorithm's, so every error
    bound holds.

    Example:
        >>> threads = torch.get_num_threads()
        >>> with one_thread():
        ...     inside = torch.get_num_threads()
        >>> inside, torch.get_num_threads() == threads
        (1, True)
    """
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


#: One-minute load average per core above which :func:`measurement_threads` runs on one thread.
OVERSUBSCRIBED_LOAD_PER_CORE = 1.5


def machine_oversubscribed() -> bool:
    """Whether the one-minute load average exceeds :data:`OVERSUBSCRIBED_LOAD_PER_CORE` runnable threads per core
    (False where the platform reports no load average).

    Example:
        >>> isinstance(machine_oversubscribed(), bool)
        True
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average
        return False
    return load > OVERSUBSCRIBED_LOAD_PER_CORE * (os.cpu_count() or 1)


@contextlib.contextmanager
def measurement_threads():
    """The intra-op threads of one measured monitor step: the caller's own count, except on an oversubscribed
    machine (:func:`machine_oversubscribed`), where :func:`one_thread` avoids barriers that wait for descheduled
    threads. On an idle 2-core machine the second thread halves the step's products (the Gram of the gradient
    rows, the proxy and control products); at load 15 it made them 10–30× slower. The load is read at every
    step, so the choice follows the machine. The eigensolves always run on one thread (:func:`one_thread`).

    Example:
        >>> threads = torch.get_num_threads()
        >>> with measurement_threads():
        ...     inside = torch.get_num_threads()
        >>> inside == (1 if machine_oversubscribed() else threads), torch.get_num_threads() == threads
        (True, True)
    """
    if machine_oversubscribed():
        with one_thread():
            yield
    else:
        yield


#: Unit roundoff of float32 (2⁻²⁴), the unit of the fast kernels' error bounds.
U32 = 2.0**-24
#: Rows per float32 block of :func:`blocked_gram32` (its error bound is proportional to this).
GRAM_BLOCK = 256
#: Most block products :func:`blocked_gram32` sums in float32 before adding them in float64 (and most bytes of them).
GRAM_BATCH_BLOCKS = 16
GRAM_BATCH_BYTES = 16 * 2**20
#: The coefficient of :func:`blocked_gram32`'s error bound: ``‖Ĝ − G‖_F ≤ GRAM_BOUND·tr(G)``.
GRAM_BOUND = (GRAM_BLOCK + GRAM_BATCH_BLOCKS + 1) * U32


def blocked_gram32(x: torch.Tensor, block: int = GRAM_BLOCK) -> torch.Tensor:
    """``xᵀx`` (float64 result) from float32 products over row blocks of ``block`` rows: up to
    :data:`GRAM_BATCH_BLOCKS` of them as one batched product, summed in float32, and those sums added in float64.

    About twice as fast as the float64 product on CPU. Error bound (standard dot-product analysis, the cast to
    float32 included): each block's entry is within ``(block + 2)·u·Σ_{k∈block} |x_ki||x_kj|``, the float32 sum of at
    most ``m = GRAM_BATCH_BLOCKS`` of them adds ``(m − 1)·u`` of the same sum, so every entry satisfies
    ``|Ĝ_ij − G_ij| ≤ (block + m + 1)·u·Σ_k |x_ki||x_kj| ≤ (block + m + 1)·u·‖x_i‖‖x_j‖`` with ``u = 2⁻²⁴``, and
    ``‖Ĝ − G‖_F ≤ GRAM_BOUND·tr(G)`` (``(256 + 17)·u ≈ 1.6e-5``), whatever the number of rows. Tested against the
    float64 product.

    Example:
        >>> x = torch.randn(600, 8, dtype=torch.float64)
        >>> error = (blocked_gram32(x) - x.T @ x).norm() / (x * x).sum()
        >>> bool(error < GRAM_BOUND)
        True
    """
    n, d = x.shape
    single = x.to(torch.float32)
    whole, rest = divmod(n, block)
    per_batch = max(1, min(GRAM_BATCH_BLOCKS, GRAM_BATCH_BYTES // (4 * d * d)))
    gram = None
    for first in range(0, whole, per_batch):  # batches of whole blocks, each summed in float32
        count = min(per_batch, whole - first)
        blocks = single[first * block : (first + count) * block].reshape(count, block, d)
        product = blocks[0].T @ blocks[0] if count == 1 else (blocks.transpose(1, 2) @ blocks).sum(0)
        if rest and first + count == whole and count < per_batch:  # the partial block joins the last batch
            product.addmm_(single[whole * block :].T, single[whole * block :])
            rest = 0
        gram = product.to(torch.float64) if gram is None else gram.add_(product)
    if rest:
        part = single[whole * block :]
        product = part.T @ part
        gram = product.to(torch.float64) if gram is None else gram.add_(product)
    return gram


def fast_eigenvalues(gram: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """:func:`eigenvalues_from_gram` with the eigensolver in float32 (on the Gram scaled by its trace): several
    times faster than float64 for d in the hundreds.

    Error bound: a backward-stable symmetric eigensolver returns the exact eigenvalues of ``A + E`` with
    ``‖E‖₂ ≤ c·d·u·‖A‖₂`` (u = 2⁻²⁴), so by Weyl's inequality every eigenvalue is off by at most
    ``c·d·u·λ_max``; :data:`FAST_EIGENVALUE_BOUND` (``c = 4``, with the rounding of the cast) is the bound the
    tests check. Values below that bound are set to 0, like the float64 path's noise floor.

    Example:
        >>> x = torch.randn(500, 6, dtype=torch.float64); x = x - x.mean(0)
        >>> exact = eigenvalues_from_gram(x.T @ x, 500, 6)
        >>> bool(((fast_eigenvalues(x.T @ x, 500, 6) - exact).abs() <= FAST_EIGENVALUE_BOUND(6) * exact[0]).all())
        True
    """
    scale = gram.diagonal().sum()
    if not float(scale) > 0:
        return eigenvalues_from_gram(gram, n, d)
    single = (gram / scale).to(torch.float32)
    with one_thread():
        eigenvalues = torch.linalg.eigvalsh(single).flip(0).to(torch.float64)
    tolerance = eigenvalues[0] * FAST_EIGENVALUE_BOUND(gram.shape[0])
    eigenvalues = torch.where(eigenvalues > tolerance, eigenvalues, torch.zeros_like(eigenvalues))
    return eigenvalues * (scale / (n - 1))


def FAST_EIGENVALUE_BOUND(size: int) -> float:  # noqa: N802 (a constant of the bound, as a function of the size)
    """The tested bound of :func:`fast_eigenvalues`: absolute eigenvalue error ≤ this × λ_max.

    Example:
        >>> FAST_EIGENVALUE_BOUND(384) < 1e-4
        True
    """
    return 4 * (size + 2) * U32


#: Directions beyond the rank that :func:`fast_top_eigenvectors` keeps from its float32 eigensolve.
RITZ_EXTRA = 16
#: :func:`fast_top_eigenvectors` falls back to the float64 ``eigh`` when its bound on the subspace angle exceeds this.
FIT_ANGLE_TOL = 1e-4
#: Float64 subspace iterations :func:`fast_top_eigenvectors` may take before falling back.
RITZ_ITERATIONS = 2


def fast_top_eigenvectors(m2: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The top-``rank`` eigenpairs of a symmetric positive semi-definite float64 matrix (e.g. a scatter ``M2``),
    as ``(eigenvalues descending, d × rank orthonormal basis, angle bound)``, from a float32 eigensolve refined
    in float64.

    The float32 ``eigh`` (on ``m2`` scaled by its trace) gives ``rank + RITZ_EXTRA`` approximate top
    eigenvectors; float64 subspace iterations (``Q = qr(m2·V)``) each followed by a Rayleigh–Ritz step
    (eigenpairs of ``Qᵀ·m2·Q``) refine them. The returned Ritz basis ``V`` comes with a bound on its distance to
    the exact top-``rank`` eigenspace ``U`` (Davis–Kahan sin θ theorem, residual form):
    ``‖sin Θ(V, U)‖_F ≤ ‖m2·V − V·diag(θ)‖_F / δ``, where ``δ = θ_rank − λ_{rank+1}`` and ``λ_{rank+1}`` is
    bounded above by the float32 eigenvalue plus its Weyl bound (:data:`FAST_EIGENVALUE_BOUND`). Iterations stop
    once the bound is below :data:`FIT_ANGLE_TOL`; after :data:`RITZ_ITERATIONS` without it (no gap, or a slow
    one), the exact float64 ``eigh`` is used (bound 0). So the returned basis is always within
    :data:`FIT_ANGLE_TOL` of the float64 eigenvectors' subspace, and every energy ``tr(QᵀSQ)/tr S`` measured with
    it within ``√2·FIT_ANGLE_TOL`` of the exact one (``‖VVᵀ − UUᵀ‖_F = √2‖sin Θ‖_F``).

    Example:
        >>> x = torch.randn(2000, 40, dtype=torch.float64) * torch.logspace(0, -1, 40, dtype=torch.float64)
        >>> m2 = x.T @ x
        >>> values, basis, bound = fast_top_eigenvectors(m2, 4)
        >>> exact = torch.linalg.eigh(m2).eigenvectors[:, -4:]
        >>> sines = torch.linalg.svdvals(basis - exact @ (exact.T @ basis))  # sines of the principal angles
        >>> bool(sines.norm() <= bound <= FIT_ANGLE_TOL)
        True
    """
    d = m2.shape[0]
    scale = m2.diagonal().sum()
    m = min(d, rank + RITZ_EXTRA)
    if m <= rank or not float(scale) > 0:
        return _exact_top_eigenvectors(m2, rank)
    with one_thread():
        values32, vectors32 = torch.linalg.eigh((m2 / scale).to(torch.float32))  # ascending
    # Weyl: λ_{rank+1}(m2) ≤ scale·(λ̂_{rank+1} + bound·λ̂_max) for the float32 eigenvalues λ̂ of m2/scale
    upper = float(scale * (values32[d - 1 - rank].double() + FAST_EIGENVALUE_BOUND(d) * values32[-1].double()))
    basis = vectors32[:, d - m :].to(torch.float64)
    rounding = 4 * d * EPS64 * float(scale) * math.sqrt(rank)  # float64 error of the residual itself
    for _ in range(RITZ_ITERATIONS):
        with one_thread():
            q = torch.linalg.qr(m2 @ basis).Q
        mq = m2 @ q
        small = q.T @ mq
        with one_thread():
            theta, w = torch.linalg.eigh((small + small.T) / 2)
        theta, w = theta.flip(0), w.flip(1)
        basis = q @ w
        residual = mq @ w[:, :rank] - basis[:, :rank] * theta[:rank]
        gap = float(theta[rank - 1]) - upper
        if gap > 0:
            bound = (float(residual.norm()) + rounding) / gap
            if bound <= FIT_ANGLE_TOL:
                return theta[:rank].clone(), basis[:, :rank].contiguous(), bound
    return _exact_top_eigenvectors(m2, rank)


def _exact_top_eigenvectors(m2: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    with one_thread():
        values, vectors = torch.linalg.eigh(m2)
    return values.flip(0)[:rank], vectors.flip(1)[:, :rank], 0.0


def covariance_moments(
    centred: torch.Tensor, gram: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tr C, ‖C‖_F², smaller Gram) of the covariance of an already centred cloud (``gram``: that Gram, if
    already computed)."""
    n, d = centred.shape
    if gram is None:
        gram = gram_matrix(centred if n >= d else centred.T)
    trace = gram.diagonal().sum() / (n - 1)
    frob2 = (gram * gram).sum() / (n - 1) ** 2
    return trace, frob2, gram


def eigenvalues_from_gram(gram: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """Covariance eigenvalues, descending, with numerical noise (below max(n, d)·eps·λ_max) set to 0."""
    eigenvalues = torch.linalg.eigvalsh(gram).flip(0) / (n - 1)
    tolerance = eigenvalues[0] * max(n, d) * EPS64
    return torch.where(eigenvalues > tolerance, eigenvalues, torch.zeros_like(eigenvalues))


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


# ----------------------------------------------------------------------------------------------------------
# the per-step representation bundle (validated input)
# ----------------------------------------------------------------------------------------------------------


def representation_bundle(
    x: torch.Tensor, sequence_ids: ArrayLike | None = None, gram: torch.Tensor | None = None, fast: bool = False
) -> dict[str, float]:
    """:func:`representation_metrics` of a validated float64 cloud (from :func:`as_points`); ``gram``: the
    smaller Gram of the centred cloud if already computed (e.g. the ``M2`` of its moments when n ≥ d);
    ``fast``: the eigenvalues from :func:`fast_eigenvalues` (float32 eigensolver, bounded error; the monitor's
    setting) instead of float64."""
    n, d = x.shape
    check_rows(n, "H", 2)
    check_dim_for_isoscore(d, "H")
    mean = x.mean(dim=0)
    centred = x - mean
    if gram is None and fast:
        gram = blocked_gram32(centred if n >= d else centred.T)
    trace, frob2, gram = covariance_moments(centred, gram)
    if fast:  # the exact O(nd) trace: drift_share stays exact, the spectrum metrics take the Gram's bound
        trace = (centred * centred).sum() / (n - 1)
    check_variance(trace, "H")
    eigenvalues = (fast_eigenvalues if fast else eigenvalues_from_gram)(gram, n, d)
    pr = pr_from_moments(trace, frob2)
    inverse_norms = inverse_row_norms(x, "H", ZERO_ROW_HINT)
    values = _cosines(x, centred, inverse_norms)
    if sequence_ids is not None:
        _, inverse = as_labels(sequence_ids, n, "sequence_ids", x.device)
        n_groups = int(inverse.max()) + 1
        if n_groups < 2:
            raise ValueError("sequence_ids holds a single sequence; pass sequence_ids=None or a multi-sequence batch")
        values["avg_cosine_cross_sequence"] = cross_sequence_cosine(x, inverse_norms, inverse, n_groups)
    values.update(
        isoscore=isoscore_from_pr(pr, d),
        participation_ratio=pr,
        effective_rank_singular=exp_entropy(eigenvalues.sqrt()),
        effective_rank_eigen=exp_entropy(eigenvalues),
        stable_rank=eigenvalues.sum() / eigenvalues[0],
        top1_explained_variance=eigenvalues[0] / eigenvalues.sum(),
        drift_share=drift_share_from_moments(mean, trace * (n - 1), n),
    )
    return _floats(values, n, d)


def _cosines(x: torch.Tensor, centred: torch.Tensor, inverse_norms: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "avg_cosine": mean_pairwise_cosine(x, inverse_norms),
        "avg_cosine_centered": mean_pairwise_cosine(centred, inverse_row_norms(centred, "H", MEAN_ROW_HINT)),
    }


def _floats(values: dict[str, torch.Tensor], n: int, d: int) -> dict[str, float]:
    floats = torch.stack(list(values.values())).tolist()  # one device sync for the whole bundle
    return {"n_tokens": n, "dim": d, **dict(zip(values.keys(), floats))}


def linear_time_bundle(x: torch.Tensor) -> dict[str, float]:
    """The O(nd) part of :func:`representation_bundle` (no Gram, no eigensolve): ``avg_cosine``,
    ``avg_cosine_centered`` and ``drift_share`` of a validated float64 cloud, equal to the full bundle's values.

    Six passes over the cloud (the monitor runs it at every step): the mean, the centring, both row norms, and
    one product ``xᵀ[1/‖x_i‖, 1/‖x_i − μ‖]`` for both unit-vector sums, the centred one as
    ``Σ x_i/c_i − μ·Σ 1/c_i``.

    Example:
        >>> x = torch.randn(300, 8, dtype=torch.float64) + 1.0
        >>> fast, full = linear_time_bundle(x), representation_bundle(x)
        >>> all(abs(fast[m] - full[m]) < 1e-12 for m in ("avg_cosine", "avg_cosine_centered", "drift_share"))
        True
    """
    n, d = x.shape
    check_rows(n, "H", 2)
    mean = x.mean(dim=0)
    inverse = torch.stack(
        [inverse_row_norms(x, "H", ZERO_ROW_HINT), inverse_row_norms(x - mean, "H", MEAN_ROW_HINT)], dim=1
    )
    sums = x.T @ inverse  # (d, 2): Σ x_i/‖x_i‖ and Σ x_i/c_i
    unit = sums[:, 0]
    centred_unit = sums[:, 1] - mean * inverse[:, 1].sum()
    pairs = n * (n - 1)
    values = {
        "avg_cosine": (unit @ unit - n) / pairs,
        "avg_cosine_centered": (centred_unit @ centred_unit - n) / pairs,
        "drift_share": drift_share_from_moments(mean, inverse[:, 1].pow(-2).sum(), n),
    }
    return _floats(values, n, d)


#: Largest error bound :func:`linear_time_bundle32` accepts on any of its three values; above it (a cloud whose rows
#: lie very close to their mean, next to a large mean), it computes them in float64 instead.
LINEAR_FAST_TOL = 1e-4


def blocked_row_sums32(x: torch.Tensor, weights: torch.Tensor | None = None, block: int = GRAM_BLOCK) -> torch.Tensor:
    """``Σ_i x_i`` (``weights`` None: shape ``(d,)``) or ``Σ_i w_ij x_i`` for each column ``j`` of an ``n × m``
    ``weights`` (shape ``(m, d)``) of float32 rows, as float64: float32 partial sums over blocks of ``block`` rows
    (one batched kernel), summed in float64. Error bound (any summation order inside a block): each coordinate is
    off by at most ``(block + 1)·u·Σ_i |w_i||x_i|`` (``u = 2⁻²⁴``), whatever the number of rows.

    Example:
        >>> x = torch.randn(1000, 3)
        >>> exact = x.double().sum(0)
        >>> bool(((blocked_row_sums32(x) - exact).abs() <= 257 * U32 * x.double().abs().sum(0)).all())
        True
    """
    n, d = x.shape
    full = n - n % block
    parts = []
    if full:
        blocks = x[:full].reshape(-1, block, d)
        if weights is None:
            parts.append(blocks.sum(1).sum(0, dtype=torch.float64))
        else:
            w = weights[:full].reshape(-1, block, weights.shape[1]).transpose(1, 2)
            parts.append(torch.bmm(w, blocks).sum(0, dtype=torch.float64))
    if full < n:
        rest = x[full:].sum(0) if weights is None else weights[full:].T @ x[full:]
        parts.append(rest.to(torch.float64))
    return parts[0] if len(parts) == 1 else parts[0] + parts[1]


def linear_time_bundle32(x: torch.Tensor) -> dict[str, float]:
    """:func:`linear_time_bundle` of a finite float32 ``n × d`` cloud in float32 passes (the monitor's every-step
    representation metrics: about a quarter of the float64 passes' time, the rows never copied to float64), with a
    proven bound on the error of each value, ``linear_error_bound`` (the largest of the three); where that bound
    exceeds :data:`LINEAR_FAST_TOL` (rows very close to a large mean), the float64 :func:`linear_time_bundle` is used
    instead (bound 0).

    The mean ``μ̃`` and the sums ``s = Σ x_i/‖x_i‖`` and ``s_c = Σ r_i/‖r_i‖`` (``r_i = x_i − μ̂``, ``μ̂`` = ``μ̃`` in
    float32; ``c_i = x_i − μ`` for the exact mean ``μ``) come from :func:`blocked_row_sums32` (``b = 256``-row float32 blocks). With ``ε`` the relative error of
    a float32 row norm and its reciprocal (``(min(d, b)/2 + ⌈d/b⌉/2 + 3)·u``, the squares summed in ``b``-column
    blocks) and ``δ = ‖μ̂ − μ‖ ≤ u‖μ̃‖ + (b + 1)·u·√(mean‖x_i‖²)``:

    - each computed unit vector is within ``ε`` (uncentred) and ``min(2, 2(‖δ‖ + u‖r_i‖)/‖c_i‖) + ε`` (centred,
      ``‖c_i‖ ≥ ĉ_i(1 − ε) − ‖δ‖ − u‖r_i‖``; summed over the rows in closed form when every ``ĉ_i`` is at least
      twice ``‖δ‖``, else row by row) of the exact one,
      and the block sums add ``(b + 1)·u`` per row, so ``s`` and ``s_c`` are within ``Δ``, the sum over rows;
    - a mean pairwise cosine ``(‖s‖² − n)/(n(n − 1))`` moves by at most ``Δ(2‖ŝ‖ + Δ)/(n(n − 1))``;
    - ``drift_share = A/(A + B)`` (``A = ‖μ‖²``, ``B = Σ‖x_i − μ‖²/n``) moves by at most
      ``((B̂ + ΔB)ΔA + (Â + ΔA)ΔB)/((Â + B̂)(Â + B̂ − ΔA − ΔB))``, with ``ΔA`` from the error of ``μ̃`` and ``ΔB`` from
      those of ``ĉ_i``.

    The drift-share bound drops terms second order in ``ε`` (≈ 1e-5) and carries a factor 1.01 for them, as do
    the others. Tested against the float64 bundle.

    Example:
        >>> x = torch.randn(300, 8) + 1.0
        >>> fast, exact = linear_time_bundle32(x), linear_time_bundle(x.double())
        >>> all(abs(fast[m] - exact[m]) <= fast["linear_error_bound"] <= LINEAR_FAST_TOL
        ...     for m in ("avg_cosine", "avg_cosine_centered", "drift_share"))
        True
    """
    n, d = x.shape
    check_rows(n, "H", 2)
    b = GRAM_BLOCK
    eps = (min(d, b) / 2 + math.ceil(d / b) / 2 + 3) * U32
    norms = _row_norms32(x, b)
    mean = blocked_row_sums32(x) / n  # μ̃, float64
    centred = x - mean.to(torch.float32)
    centred_norms = _row_norms32(centred, b)
    inverse = torch.stack([1.0 / norms, 1.0 / centred_norms], dim=1)
    if not bool(torch.isfinite(inverse).all()):  # a zero row, or a row equal to the mean: the float64 path says which
        return _exact_linear_bundle(x)
    unit = blocked_row_sums32(x, inverse[:, :1])[0]
    centred_unit = blocked_row_sums32(centred, inverse[:, 1:])[0]
    centred_norms64 = centred_norms.double()
    square_norm_sum = norms.double().pow(2).sum()
    mean_error = (b + 1) * U32 * (square_norm_sum / n).sqrt()  # ‖μ̃ − μ‖
    delta = U32 * mean.norm() + mean_error  # ‖μ̂ − μ‖
    # every scalar the values and bounds need, in one transfer; the bounds are then plain float arithmetic
    (
        unit2,
        centred_unit2,
        mean2,
        centred_norm_sum,
        centred_square_sum,
        mean_error,
        delta,
        inverse_centred_sum,
        smallest,
    ) = torch.stack(
        [
            unit @ unit,
            centred_unit @ centred_unit,
            mean @ mean,
            centred_norms64.sum(),
            centred_norms64.pow(2).sum(),
            mean_error,
            delta,
            inverse[:, 1].sum(dtype=torch.float64) * (1 + 2 * U32),
            centred_norms64.min(),
        ]
    ).tolist()
    # each centred unit vector's error, from ‖r_i − c_i‖ ≤ ‖δ‖ + u‖r_i‖ and ‖r_i‖ ≥ ĉ_i(1 − ε): at most
    # 2(‖δ‖ + u(1 + ε)ĉ_i)/(γĉ_i − ‖δ‖) with γ = 1 − ε − u(1 + ε) (and never more than 2), plus ε for the norm
    gamma = 1 - eps - U32 * (1 + eps)
    if delta <= gamma * smallest / 2:  # every row far from the mean: summed in closed form over the rows
        centred_errors = (2 * delta * inverse_centred_sum + 2 * n * U32 * (1 + eps)) / gamma / (
            1 - delta / (gamma * smallest)
        ) + n * eps
    else:  # some row next to the mean: row by row, each at most 2
        rounded = U32 * (1 + eps) * centred_norms64
        lower = gamma * centred_norms64 - delta
        per_row = (
            torch.where(
                lower > 0, (2 * (delta + rounded) / lower.clamp(min=1e-300)).clamp(max=2.0), torch.full_like(lower, 2.0)
            )
            + eps
        )
        centred_errors = float(per_row.sum())
    pairs = n * (n - 1)
    mean_norm = math.sqrt(mean2)
    accumulation = (b + 1) * U32 * n
    spread = n * eps + accumulation
    centred_spread = centred_errors + accumulation
    a, b_hat = mean2, centred_square_sum / n
    error_a = 2 * (mean_norm + mean_error) * mean_error + mean_error**2
    error_b = 2 * delta * centred_norm_sum / n + delta**2 + 2 * (eps + U32) * b_hat
    total = a + b_hat
    low = total - error_a - error_b
    bound = 1.01 * max(
        spread * (2 * math.sqrt(unit2) + spread) / pairs,
        centred_spread * (2 * math.sqrt(centred_unit2) + centred_spread) / pairs,
        ((b_hat + error_b) * error_a + (a + error_a) * error_b) / (total * low) if low > 0 else math.inf,
    )
    if not bound <= LINEAR_FAST_TOL:
        return _exact_linear_bundle(x)
    return {
        "n_tokens": n,
        "dim": d,
        "avg_cosine": (unit2 - n) / pairs,
        "avg_cosine_centered": (centred_unit2 - n) / pairs,
        "drift_share": a / total,
        "linear_error_bound": bound,
    }


def _exact_linear_bundle(x: torch.Tensor) -> dict[str, float]:
    values = linear_time_bundle(x.double())
    values["linear_error_bound"] = 0.0
    return values


def _row_norms32(x: torch.Tensor, block: int) -> torch.Tensor:
    """Float32 row norms, the squares summed over blocks of ``block`` columns (relative error ≤ (block/2 + 2)·u)."""
    d = x.shape[1]
    if d <= block:
        return torch.linalg.vector_norm(x, dim=1)
    partial = torch.stack([torch.linalg.vector_norm(x[:, s : s + block], dim=1) for s in range(0, d, block)], dim=1)
    return torch.linalg.vector_norm(partial, dim=1)
