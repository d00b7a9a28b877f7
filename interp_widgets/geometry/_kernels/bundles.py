"""The per-step representation bundles: every representation metric of a validated cloud at once, in float64 or in float32 passes with a proven bound."""

from __future__ import annotations

import math

import torch

from interp_widgets.geometry._kernels.eigen import covariance_moments, eigenvalues_from_gram, fast_eigenvalues
from interp_widgets.geometry._kernels.inputs import (
    ArrayLike,
    MEAN_ROW_HINT,
    ZERO_ROW_HINT,
    as_labels,
    check_rows,
    check_variance,
    inverse_row_norms,
)
from interp_widgets.geometry._kernels.isoscore_terms import (
    check_dim_for_isoscore,
    drift_share_from_moments,
    exp_entropy,
    isoscore_from_pr,
    pr_from_moments,
)
from interp_widgets.geometry._kernels.products import (
    GRAM_BLOCK,
    U32,
    _row_norms32,
    blocked_gram32,
    blocked_row_sums32,
    cross_sequence_cosine,
    mean_pairwise_cosine,
)


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
