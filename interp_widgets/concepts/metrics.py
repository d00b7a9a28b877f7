"""Quality metrics of concept models: reconstruction, sparsity, dead concepts and stability across seeds.

Definitions (``X`` rows × features, ``X̂`` its reconstruction, ``C`` the coefficients):

- relative reconstruction error ``‖X − X̂‖_F / ‖X‖_F``;
- explained variance ``1 − ‖X − X̂‖²_F / ‖X − mean(X)‖²_F`` (the mean over rows, per feature);
- L0 sparsity: mean number of concepts per row with ``|c| > eps``;
- dead concepts: concepts with ``|c| <= eps`` on every row;
- stability: directions of two fits matched one-to-one by the Hungarian algorithm
  (``scipy.optimize.linear_sum_assignment``) on their cosine similarity; the score is the mean matched cosine.

Example:
    >>> report = evaluate(concepts, store)
    >>> round(report["explained_variance"], 3), round(report["l0"], 2), report["n_dead"]
    (0.684, 7.3, 0)
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from interp_widgets.concepts.decompositions import ConceptModel, _as_matrix

_BLOCK_VALUES = 1 << 24  # coefficients per block in evaluate (about 64 MB of float32)


def relative_reconstruction_error(X, X_hat) -> float:
    """``‖X − X̂‖_F / ‖X‖_F``.

    Example:
        >>> relative_reconstruction_error([[3.0, 4.0]], [[3.0, 1.0]])
        0.6
    """
    X, X_hat = _pair(X, X_hat)
    return float(np.linalg.norm(X - X_hat) / max(np.linalg.norm(X), 1e-30))


def explained_variance(X, X_hat) -> float:
    """``1 − ‖X − X̂‖² / ‖X − mean(X)‖²`` with the per-feature mean over rows.

    Example:
        >>> explained_variance([[0.0], [2.0]], [[0.0], [1.0]])
        0.5
    """
    X, X_hat = _pair(X, X_hat)
    total = float(((X - X.mean(axis=0)) ** 2).sum())
    return 1.0 - float(((X - X_hat) ** 2).sum()) / max(total, 1e-30)


def l0_sparsity(C, eps: float = 0.0) -> float:
    """Mean number of active concepts (``|c| > eps``) per row.

    Example:
        >>> l0_sparsity([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]])
        1.5
    """
    C = _as_matrix(C, name="C")
    return float((np.abs(C) > eps).sum(axis=1).mean()) if len(C) else 0.0


def dead_concepts(C, eps: float = 0.0) -> np.ndarray:
    """Indices of concepts that are never active (``|c| <= eps`` on every row).

    Example:
        >>> dead_concepts([[0.0, 1.0, 0.0], [0.0, 2.0, 0.0]]).tolist()
        [0, 2]
    """
    C = _as_matrix(C, name="C")
    return np.flatnonzero(~(np.abs(C) > eps).any(axis=0))


def matched_cosine(A, B, *, absolute: bool = False) -> tuple[float, np.ndarray, np.ndarray]:
    """Match the rows of ``A`` to the rows of ``B`` one-to-one, maximising total cosine similarity.

    Returns ``(mean matched cosine, matched cosine per row of A, index into B per row of A)``. With
    ``absolute=True`` the sign of a direction is ignored (for ICA or PCA, whose signs are arbitrary). Rows of ``A``
    left unmatched (when ``A`` has more rows than ``B``) get cosine 0 and index -1.

    Example:
        >>> mean, per_row, index = matched_cosine([[1, 0], [0, 1]], [[0, 2], [3, 0]])
        >>> round(mean, 6), index.tolist()
        (1.0, [1, 0])
    """
    from scipy.optimize import linear_sum_assignment

    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[1]:
        raise ValueError(f"A and B must be 2-D with the same number of columns, got {A.shape} and {B.shape}")
    A = A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-30)
    B = B / np.maximum(np.linalg.norm(B, axis=1, keepdims=True), 1e-30)
    similarity = A @ B.T
    if absolute:
        similarity = np.abs(similarity)
    rows, cols = linear_sum_assignment(similarity, maximize=True)
    per_row, index = np.zeros(len(A)), np.full(len(A), -1)
    per_row[rows], index[rows] = similarity[rows, cols], cols
    return float(per_row.mean()), per_row, index


def stability(
    make_model: Callable[[int], ConceptModel], X, seeds: Sequence[int] = (0, 1, 2), *, absolute: bool = False
) -> dict:
    """Fit one model per seed and compare every pair of fits by Hungarian-matched cosine of their directions.

    Args:
        make_model: ``seed -> unfitted concept model``, for example ``lambda s: NMFConcepts(20, estimator_params={"random_state": s})``.
        X: activations (array, tensor or store).
        seeds: at least two seeds.
        absolute: ignore the sign of directions.

    Returns ``{"mean": ..., "pairs": {(s1, s2): mean cosine}, "per_concept": mean matched cosine per concept of the
    first fit}``.

    Example:
        >>> from interp_widgets.concepts import ICAConcepts, PCAConcepts
        >>> round(stability(lambda s: PCAConcepts(4, estimator_params={"random_state": s}), store, absolute=True)["mean"], 3)
        1.0
        >>> report = stability(lambda s: ICAConcepts(4, estimator_params={"random_state": s}), store, seeds=[0, 1], absolute=True)
        >>> list(report["pairs"]), report["per_concept"].shape
        ([(0, 1)], (4,))
    """
    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError("stability needs at least two seeds")
    models = [make_model(seed).fit(X) for seed in seeds]
    pairs, first = {}, []
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            mean, per_row, _ = matched_cosine(models[i].components_, models[j].components_, absolute=absolute)
            pairs[(seeds[i], seeds[j])] = mean
            if i == 0:
                first.append(per_row)
    return {"mean": float(np.mean(list(pairs.values()))), "pairs": pairs, "per_concept": np.mean(first, axis=0)}


def evaluate(model: ConceptModel, X, *, eps: float = 0.0, rows_per_chunk: int = 65536) -> dict:
    """All reconstruction and sparsity metrics of a fitted model on ``X``, streamed chunk by chunk for a store.

    Returns a dict with ``relative_reconstruction_error``, ``explained_variance``, ``l0``, ``dead`` (indices),
    ``n_dead``, ``density`` (fraction of rows where each concept is active) and ``rows``.

    Example:
        >>> report = evaluate(concepts, store)
        >>> report["rows"], report["n_dead"], round(report["relative_reconstruction_error"], 3)
        (775, 0, 0.351)
        >>> report["density"].round(2)
        array([0.94, 0.9 , 0.92, 0.88, 0.91, 0.91, 0.93, 0.91])
    """
    from interp_widgets.concepts.activations import ActivationStore

    # bound the (rows x concepts) coefficient block to about 64 MB of float32, whatever the number of concepts
    rows_per_chunk = max(256, min(int(rows_per_chunk), _BLOCK_VALUES // max(1, int(model.n_concepts))))
    if isinstance(X, ActivationStore):
        blocks = X.iter_chunks(rows_per_chunk)
    else:
        X = _as_matrix(X)
        blocks = ((start, X[start : start + rows_per_chunk]) for start in range(0, len(X), rows_per_chunk))
    n, sq_err, sq_norm, total, total_sq, active, nnz = 0, 0.0, 0.0, None, None, None, 0
    for _, block in blocks:
        block = block.astype(np.float64)
        C = model.transform(block)
        residual = block - model.inverse_transform(C, X=block)
        sq_err += float((residual**2).sum())
        sq_norm += float((block**2).sum())
        total = block.sum(0) if total is None else total + block.sum(0)
        total_sq = (block**2).sum(0) if total_sq is None else total_sq + (block**2).sum(0)
        counts = (np.abs(C) > eps).sum(0)
        active = counts if active is None else active + counts
        nnz += int(counts.sum())
        n += len(block)
    if not n:
        raise ValueError("no rows to evaluate on")
    centred = float((total_sq - total**2 / n).sum())
    dead = np.flatnonzero(active == 0)
    return {
        "relative_reconstruction_error": float(np.sqrt(sq_err / max(sq_norm, 1e-30))),
        "explained_variance": 1.0 - sq_err / max(centred, 1e-30),
        "l0": nnz / n,
        "dead": dead,
        "n_dead": int(len(dead)),
        "density": active / n,
        "rows": n,
    }


def _pair(X, X_hat) -> tuple[np.ndarray, np.ndarray]:
    X, X_hat = _as_matrix(X).astype(np.float64), _as_matrix(X_hat, name="X_hat").astype(np.float64)
    if X.shape != X_hat.shape:
        raise ValueError(f"X and X_hat differ in shape: {X.shape} vs {X_hat.shape}")
    return X, X_hat
