"""Multi-label probes (one score per concept): centroid probes and the ridge regression probe, as in Interpreto.

:class:`CentroidProbe` and :class:`LinearRegressionProbe` take activations ``X`` (rows × d) and binary targets ``y``
(rows × concepts; a 1-D label vector becomes one-hot columns) and score every concept on every row. They are the
scikit-learn style siblings of :class:`~interp_widgets.concepts.LinearProbe`: the same grouped cross-validated report
(one code path, ``probes._grouped_cv_report``), the same controls, and ``as_concepts()`` for the kinds whose score is
a direction.

The maths follow Interpreto 0.5.2's ``interpreto.concepts`` probes one to one (checked to 1e-5 by
``tests/concepts/test_centroid_probes.py``):

- ``CentroidProbe("dot")``: ``xn · c_j + b_j`` (``DotProductCentroidProbe``);
- ``CentroidProbe("cosine")``: ``cos(xn, c_j) + b_j`` (``CosineCentroidProbe``);
- ``CentroidProbe("sql2")``: ``-‖xn - c_j‖² + b_j`` (``SqL2CentroidProbe``);
- ``CentroidProbe("diag_mahalanobis")``: ``-Σ_k (xn_k - c_jk)² / var_jk + b_j`` with
  ``var = (1 - shrinkage) · class variance + shrinkage · pooled variance`` (``DiagonalMahalanobisCentroidProbe``);
- ``CentroidProbe("svdd")``: ``r²_j - ‖xn - a_j‖²``, centre ``a_j`` and radius ``r²_j`` fitted by Adam
  (``SVDDCentroidProbe``);
- ``LinearRegressionProbe(l2)``: ``xn · w_j + b_j``, least squares or ridge in closed form (``LinearRegressionProbe``).

``xn`` is the row after ``normalization`` (``None``, ``"standardization"``: per-feature z-score with the population
standard deviation; ``"whitening"``: SVD whitening, optionally keeping ``rank`` components), fitted on the training
rows; ``c_j`` is the mean of the normalised positive rows of concept ``j``. ``b_j`` comes from ``bias_calibrator``
(Interpreto's functions of the same names): ``None`` (zero; the least-squares intercept for the regression),
``"prevalence"`` (``logit(mean y_j)``), ``"midpoint"`` (minus the midpoint of the positive and negative mean scores),
``"fpr"`` (minus the 99th percentile of the negative scores: 1% false positives), ``"bce"`` (the intercept minimising
the binary cross-entropy, by L-BFGS from the prevalence logit) or ``"lda"`` (the 1-D shared-variance LDA threshold).

Where they differ from Interpreto, on purpose: the default ``bias_calibrator`` of the centroid kinds is
``"midpoint"`` (Interpreto's is ``None``, a zero bias, which makes ``score > 0`` meaningless for the distance kinds;
pass ``bias_calibrator=None`` for Interpreto's default); rows are cast to float32 (as every concept model here); and
SVDD's initial ``log r²`` uses the overflow-free inverse softplus where Interpreto's ``log(expm1(r²))`` is infinite
(squared distances above ~88 in float32), elsewhere the same expression. A 1-D label vector with classes ``classes_``
(sorted, as ``np.unique``) becomes one 0/1 column per class, ``y == classes_[j]``; a two-class vector thus gives two
concepts.

Example:
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, size=(60, 2))                  # two concepts; a row may hold both, or neither
    >>> X = rng.normal(size=(60, 8)) + np.c_[3 * y, np.zeros((60, 6))]
    >>> probe = CentroidProbe("dot", normalization="standardization", cv=3).fit(X, y)
    >>> probe.decision_function(X[:4]).shape, probe.predict(X[:4]).shape, probe.report_["cv_accuracy"] > 0.8
    ((4, 2), (4, 2), True)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin

from interp_widgets.concepts.decompositions import _as_matrix
from interp_widgets.concepts.probes import DirectionConcepts, _grouped_cv_report, _rows_and_groups
from interp_widgets.validation import check_choice, check_int, check_number

CENTROID_KINDS = ("dot", "cosine", "sql2", "diag_mahalanobis", "svdd")
LINEAR_KINDS = ("dot", "cosine", "regression")  # kinds whose score is read along one direction per concept
NORMALIZATIONS = (None, "standardization", "whitening")
BIAS_CALIBRATORS = (None, "prevalence", "midpoint", "fpr", "bce", "lda")


# --- the maths, in torch, in Interpreto's order of operations (float32 results then agree to rounding) -------------


def _fit_normalization(X: torch.Tensor, normalization, rank, eps: float) -> dict[str, torch.Tensor]:
    if normalization == "standardization":
        return {"mean": X.mean(dim=0), "std": X.std(dim=0, unbiased=False).clamp_min(eps)}
    if normalization == "whitening":
        n = X.shape[0]
        mean = X.mean(dim=0)
        _, S, Vh = torch.linalg.svd(X - mean.unsqueeze(0), full_matrices=False)
        inv_s = (torch.sqrt(torch.tensor(float(n), dtype=X.dtype)) / S).clamp_max(1.0 / eps)
        V = Vh.transpose(0, 1)
        if rank is not None:
            V, inv_s = V[:, : min(rank, V.shape[1])], inv_s[: min(rank, V.shape[1])]
        return {"mean": mean, "V": V.contiguous(), "inv_s": inv_s.contiguous()}
    return {}


def _normalize(X: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
    if "std" in state:
        return (X - state["mean"]) / state["std"]
    if "V" in state:
        return ((X - state["mean"]) @ state["V"]) * state["inv_s"].unsqueeze(0)
    return X


def _unit(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(eps)


def _raw_scores(kind: str, xn: torch.Tensor, state: dict[str, torch.Tensor], eps: float) -> torch.Tensor:
    """Scores before the bias, from normalised rows."""
    if kind == "regression":
        return xn @ state["weight"]
    C = state["centroids"]
    if kind == "dot":
        return xn @ C.t()
    if kind == "cosine":
        return _unit(xn, eps) @ C.t()
    if kind == "sql2":
        x2 = (xn * xn).sum(dim=1, keepdim=True)
        c2 = (C * C).sum(dim=1, keepdim=True).t()
        return -(x2 + c2 - 2.0 * (xn @ C.t()))
    diff = xn.unsqueeze(1) - C.unsqueeze(0)
    if kind == "diag_mahalanobis":
        return -(diff * diff * state["inv_var"].unsqueeze(0)).sum(dim=2)
    return -(diff * diff).sum(dim=2)  # svdd


def _calibrate(name, scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Interpreto's bias calibrators (``interpreto.concepts.probes.bias_calibrators``) at their default settings."""
    y01 = (y > 0.5).to(dtype=scores.dtype)
    if name == "prevalence" or name == "bce":
        p = y01.mean(dim=0).clamp(1e-6, 1.0 - 1e-6)
        b = torch.log(p / (1.0 - p))
        if name == "prevalence":
            return b
        b = b.clone().requires_grad_(True)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        optimizer = torch.optim.LBFGS([b], max_iter=50, line_search_fn="strong_wolfe")

        def closure():
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(scores + b, y01)
            loss.backward()
            return loss

        with torch.enable_grad():
            optimizer.step(closure)
        return b.detach()
    if name == "fpr":
        positive = y > 0.5
        ordered = scores.masked_fill(positive, float("inf")).sort(dim=0).values
        m = (~positive).to(dtype=scores.dtype).sum(dim=0).clamp_min(1.0)
        index = torch.floor((m - 1.0) * (1.0 - 1e-2)).to(torch.long)
        return -ordered.gather(0, index.unsqueeze(0)).squeeze(0)
    n1 = y01.sum(dim=0).clamp_min(1e-12)
    n0 = (1.0 - y01).sum(dim=0).clamp_min(1e-12)
    mu1 = (scores * y01).sum(dim=0) / n1
    mu0 = (scores * (1.0 - y01)).sum(dim=0) / n0
    if name == "midpoint":
        return -0.5 * (mu1 + mu0)
    # lda: 0.5 (mu0 + mu1) + var / (mu1 - mu0) * log(pi0 / pi1), with Interpreto's floors
    var = scores.var(dim=0, unbiased=False).clamp_min(1e-6)
    pi1 = (n1 / (n0 + n1)).clamp(1e-12, 1.0 - 1e-12)
    denom = mu1 - mu0
    denom = denom.sign() * denom.abs().clamp_min(1e-12)
    return -(0.5 * (mu0 + mu1) + (var / denom) * torch.log((1.0 - pi1) / pi1))


def _fit_svdd(xn: torch.Tensor, y: torch.Tensor, n_pos: torch.Tensor, mu: torch.Tensor, params) -> tuple:
    """Interpreto's SVDD: Adam on the centres (from the positive means) and ``log r²`` (from the inverse softplus of
    the mean positive squared distance), minimising ``mean_j(r²_j + C · mean_pos relu(‖x - a_j‖² - r²_j)) +
    0.5 · l2 · ‖A‖²``. Nothing is random, so there is no seed."""
    eps = params["eps"]
    with torch.no_grad():
        diff = xn.unsqueeze(1) - mu.unsqueeze(0)
        mean_dist2 = ((diff * diff).sum(dim=2) * y).sum(dim=0) / n_pos.clamp_min(1.0)
        m = mean_dist2.clamp_min(eps)
        log_r2 = torch.log(torch.expm1(m))
        # where expm1 overflows (Interpreto gets inf, then NaN), the same inverse softplus in its stable form
        log_r2 = torch.where(torch.isfinite(log_r2), log_r2, m + torch.log(-torch.expm1(-m)))
    centres = torch.nn.Parameter(mu.clone())
    log_r2 = torch.nn.Parameter(log_r2.clone())
    optimizer = torch.optim.Adam([centres, log_r2], lr=params["lr"])
    with torch.enable_grad():
        for _ in range(params["max_iter"]):
            optimizer.zero_grad()
            r2 = torch.nn.functional.softplus(log_r2)
            diff = xn.unsqueeze(1) - centres.unsqueeze(0)
            hinge = torch.relu((diff * diff).sum(dim=2) - r2.unsqueeze(0))
            loss = (r2 + params["C"] * ((hinge * y).sum(dim=0) / n_pos.clamp_min(1.0))).mean()
            if params["l2"] > 0.0:
                loss = loss + 0.5 * params["l2"] * (centres * centres).sum()
            loss.backward()
            optimizer.step()
    return centres.detach(), torch.nn.functional.softplus(log_r2).detach()


def _fit_state(kind: str, X: np.ndarray, Y: np.ndarray, params: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Everything a fitted probe needs to score rows: normalisation statistics, centroids (and ``inv_var``) or the
    regression weight, and the bias."""
    eps = params["eps"]
    x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
    y = torch.from_numpy(np.ascontiguousarray(Y, dtype=np.float32))
    with torch.no_grad():
        state = _fit_normalization(x, params["normalization"], params["rank"], eps)
        xn = _normalize(x, state)
        if kind == "regression":
            n, d = xn.shape
            x_aug = torch.cat([xn, torch.ones(n, 1, dtype=xn.dtype)], dim=1)
            if params["l2"] == 0.0:
                w_aug = torch.linalg.pinv(x_aug) @ y
            else:
                penalty = torch.ones(d + 1, dtype=xn.dtype)
                penalty[-1] = 0.0  # the intercept is not penalised
                w_aug = torch.linalg.solve(x_aug.T @ x_aug + params["l2"] * torch.diag(penalty), x_aug.T @ y)
            state["weight"] = w_aug[:d, :].clone()
            if params["bias_calibrator"] is None:
                state["bias"] = w_aug[d, :].clone()
            else:
                state["bias"] = _calibrate(params["bias_calibrator"], xn @ state["weight"], y)
            return state
        n_pos = y.sum(dim=0)
        centroids = (y.transpose(0, 1) @ xn) / n_pos.unsqueeze(1).clamp_min(eps)
        if kind == "svdd":
            state["centroids"], state["bias"] = _fit_svdd(xn, y, n_pos, centroids, params)
            return state
        if kind == "cosine":
            centroids = _unit(centroids, eps)
        state["centroids"] = centroids
        if kind == "diag_mahalanobis":
            shrinkage = params["shrinkage"]
            var = torch.zeros_like(centroids)
            if shrinkage > 0.0:
                var += shrinkage * xn.var(dim=0, unbiased=False).unsqueeze(0)
            if shrinkage < 1.0:
                ex2 = (y.t() @ (xn * xn)) / n_pos.unsqueeze(1)
                var += (1.0 - shrinkage) * (ex2 - centroids * centroids)
            state["inv_var"] = 1.0 / var.clamp_min(eps)
        if params["bias_calibrator"] is None:
            state["bias"] = torch.zeros(y.shape[1], dtype=xn.dtype)
        else:
            state["bias"] = _calibrate(params["bias_calibrator"], _raw_scores(kind, xn, state, eps), y)
        return state


def _targets(y, text_ids: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``(Y, classes)``: ``y`` as a rows × concepts 0/1 float32 matrix (one row per text of a store is broadcast to
    its rows) and, for a 1-D label vector, its sorted classes (column ``j`` is ``label == classes[j]``)."""
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim not in (1, 2):
        raise ValueError(
            f"y must be rows × concepts (0/1) or a 1-D label vector, got shape {y.shape}; reshape it to (rows, concepts)"
        )
    n_texts = int(text_ids.max()) + 1 if len(text_ids) else 0
    if len(y) == n_texts and n_texts != n_rows:
        y = y[text_ids]
    if len(y) != n_rows:
        raise ValueError(
            f"y has {len(y)} rows for {n_rows} activation rows from {n_texts} texts; "
            "give one target row per activation row or one per text"
        )
    classes = None
    if y.ndim == 1:
        classes = np.unique(y)
        if len(classes) < 2:
            raise ValueError(f"the labels hold one class only ({classes.tolist()}); a probe needs at least two")
        y = (y[:, None] == classes[None, :]).astype(np.float32)
    elif y.dtype == bool:
        y = y.astype(np.float32)
    else:
        try:
            values = np.unique(y.astype(np.float64))
        except (TypeError, ValueError):
            values = None
        if values is None or not np.isin(values, (0.0, 1.0)).all():
            shown = values[:5].tolist() if values is not None else y.dtype
            raise ValueError(
                f"a rows × concepts y must hold 0/1 (or booleans), found {shown}; "
                "pass class labels as a 1-D vector to get one-hot columns"
            )
        y = y.astype(np.float32)
    if y.shape[1] == 0:
        raise ValueError("y has no concept columns; give at least one")
    positives = y.sum(0)
    empty = np.flatnonzero((positives == 0) | (positives == len(y)))
    if len(empty):
        raise ValueError(
            f"concept column(s) {empty.tolist()} are all 0 or all 1; each concept needs positive and negative rows "
            "(drop those columns)"
        )
    return y, classes


class _MultiLabelModel(ClassifierMixin, BaseEstimator):
    """One fitted multi-label probe without the report: what cross-validation clones and fits on each fold."""

    def __init__(self, kind="dot", params=None):
        self.kind = kind
        self.params = params

    def fit(self, X, Y):
        self.state_ = _fit_state(self.kind, X, Y, self.params)
        return self

    def decision_function(self, X) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
        with torch.no_grad():
            xn = _normalize(x, self.state_)
            scores = _raw_scores(self.kind, xn, self.state_, self.params["eps"]) + self.state_["bias"]
        return scores.numpy()

    def predict(self, X) -> np.ndarray:
        return (self.decision_function(X) > self.params["threshold"]).astype(int)

    def score(self, X, y, sample_weight=None) -> float:
        """Label-wise accuracy: the mean over rows and concepts of ``predict == y`` (1 − Hamming loss)."""
        return float((self.predict(X) == np.asarray(y)).mean())


class _MultiLabelProbe(ClassifierMixin, BaseEstimator):
    """What :class:`CentroidProbe` and :class:`LinearRegressionProbe` share: targets, report, scores, directions."""

    _kinds: tuple = ()

    def _params(self) -> dict[str, Any]:
        raise NotImplementedError

    def _check_kind(self) -> str:
        return check_choice("kind", self.kind, self._kinds)

    def fit(self, X, y, groups=None):
        """Fit on activations ``X`` (store, array or tensor) and targets ``y``: rows × concepts 0/1 (or booleans), or a
        1-D label vector that becomes one-hot columns in the order of ``classes_``; one target row per activation row,
        or one per text of a store. ``groups`` (one per row) replaces the store's text ids as cross-validation groups.

        Example:
            >>> X = np.r_[np.full((6, 3), 2.0), np.full((6, 3), -2.0)] + np.eye(12, 3)
            >>> probe = CentroidProbe("cosine", cv=3).fit(X, ["pos"] * 6 + ["neg"] * 6)
            >>> probe.classes_.tolist(), probe.predict(X[[0, -1]]).tolist()
            (['neg', 'pos'], [[0, 1], [1, 0]])
        """
        self._check_kind()
        check_int("cv", self.cv, minimum=2)
        params = self._params()
        store, X, groups, text_ids = _rows_and_groups(X, groups)
        Y, classes = _targets(y, text_ids, len(X))
        prevalence = Y.mean(0, dtype=np.float64)
        self.report_ = _grouped_cv_report(
            lambda: _MultiLabelModel(self.kind, params),
            X,
            Y,
            groups,
            cv=self.cv,
            seed=self.seed,
            majority=float(np.maximum(prevalence, 1 - prevalence).mean()),
        )
        self.model_ = _MultiLabelModel(self.kind, params).fit(X, Y)
        self.classes_ = classes
        self.n_concepts_ = Y.shape[1]
        self.n_features_in_ = X.shape[1]
        self.layer_ = store.layer if store is not None else None
        if self.kind in LINEAR_KINDS:
            self.coef_ = self._raw_directions()
            self.direction_ = self.coef_ / np.linalg.norm(self.coef_, axis=1, keepdims=True).clip(1e-12)
        return self

    def _raw_directions(self) -> np.ndarray:
        """Concepts × d: the direction in the input space whose dot product with ``x`` (less the normalisation's mean)
        is the score's numerator before the bias: ``xn · w = (x - mean) · coef``."""
        state = self.model_.state_
        W = state["weight"] if self.kind == "regression" else state["centroids"].t()  # (d or r) × c
        if "std" in state:
            W = W / state["std"].unsqueeze(1)
        elif "V" in state:
            W = state["V"] @ (state["inv_s"].unsqueeze(1) * W)
        return W.t().contiguous().numpy().astype(np.float32)

    def _fitted(self):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")

    def decision_function(self, X) -> np.ndarray:
        """Rows × concepts scores (Interpreto's ``encode``); higher means more of the concept.

        Example:
            >>> X = np.r_[np.ones((4, 3)), -np.ones((4, 3))] + np.eye(8, 3)
            >>> probe = CentroidProbe("dot", bias_calibrator=None, cv=2).fit(X, [[1, 0]] * 4 + [[0, 1]] * 4)
            >>> probe.decision_function(X[:1]).round(2).tolist()
            [[5.0, -4.0]]
        """
        self._fitted()
        X = _as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features but the probe was fitted on {self.n_features_in_}")
        return self.model_.decision_function(X)

    def predict(self, X) -> np.ndarray:
        """Rows × concepts 0/1: ``decision_function(X) > threshold_`` (0, or 0.5 for the uncalibrated regression).

        Example:
            >>> X = np.r_[np.ones((4, 3)), -np.ones((4, 3))] + np.eye(8, 3)
            >>> LinearRegressionProbe(cv=2).fit(X, [1] * 4 + [0] * 4).predict(X[[0, -1]]).tolist()
            [[0, 1], [1, 0]]
        """
        self._fitted()
        return (self.decision_function(X) > self.threshold_).astype(int)

    @property
    def threshold_(self) -> float:
        """The score above which ``predict`` says yes: 0.5 for a regression fitted with its own intercept (its scores
        estimate the 0/1 targets), else 0 (the calibrated bias or the SVDD radius already sits in the score)."""
        self._fitted()
        return self.model_.params["threshold"]

    def score(self, X, y, sample_weight=None) -> float:
        """Label-wise accuracy (mean over rows and concepts of ``predict == y``); ``y`` as in :meth:`fit`.

        Example:
            >>> X = np.r_[np.ones((4, 3)), -np.ones((4, 3))] + np.eye(8, 3)
            >>> CentroidProbe("sql2", cv=2).fit(X, [1] * 4 + [0] * 4).score(X, [1] * 4 + [0] * 4)
            1.0
        """
        self._fitted()
        Y = _as_matrix(y, name="y") if np.asarray(y).ndim == 2 else None
        if Y is None:
            labels = np.asarray(y)
            Y = (labels[:, None] == self.classes_[None, :]).astype(np.float32)
        return float((self.predict(X) == Y).mean())

    def as_concepts(self, X=None) -> DirectionConcepts:
        """The concept directions (``direction_``, one unit row per concept, in the input space) as a fitted
        :class:`~interp_widgets.concepts.DirectionConcepts` (centred on ``X``'s mean, default: no centring), for
        kinds ``"dot"``, ``"cosine"`` and the regression. The other kinds' scores are not read along a direction.

        Example:
            >>> X = np.r_[np.ones((4, 3)), -np.ones((4, 3))] + np.eye(8, 3)
            >>> CentroidProbe("dot", cv=2).fit(X, [1] * 4 + [0] * 4).as_concepts().n_concepts
            2
            >>> CentroidProbe("sql2", cv=2).fit(X, [1] * 4 + [0] * 4).as_concepts()
            Traceback (most recent call last):
            ...
            ValueError: kind='sql2' scores are not linear in x (a squared distance to a centroid), so they have no direction; use kind='dot' or 'cosine', or LinearRegressionProbe, for as_concepts()
        """
        self._fitted()
        if self.kind not in LINEAR_KINDS:
            why = {
                "sql2": "a squared distance to a centroid",
                "diag_mahalanobis": "a variance-weighted squared distance to a centroid",
                "svdd": "a radius minus a squared distance to a centre",
            }[self.kind]
            raise ValueError(
                f"kind={self.kind!r} scores are not linear in x ({why}), so they have no direction; "
                "use kind='dot' or 'cosine', or LinearRegressionProbe, for as_concepts()"
            )
        concepts = DirectionConcepts(len(self.direction_), directions=self.direction_)
        origin = np.zeros((len(self.direction_), self.n_features_in_), dtype=np.float32)  # no centring
        concepts.fit(X if X is not None else origin)
        concepts.layer_ = self.layer_ if X is None else concepts.layer_
        return concepts


def _common_params(probe, kind: str) -> dict[str, Any]:
    normalization = probe.normalization
    if normalization == "default":
        normalization = "standardization" if kind == "diag_mahalanobis" else None
    check_choice("normalization", normalization, NORMALIZATIONS)
    rank = probe.rank
    if rank is not None:
        rank = check_int("rank", rank, minimum=1)
        if normalization != "whitening":
            raise ValueError("rank applies to normalization='whitening' only; leave rank=None")
    calibrator = probe.bias_calibrator
    if calibrator == "default":
        calibrator = "midpoint" if kind in ("dot", "cosine", "sql2", "diag_mahalanobis") else None
    check_choice("bias_calibrator", calibrator, BIAS_CALIBRATORS)
    if kind == "svdd" and calibrator is not None:
        raise ValueError(
            "kind='svdd' has its own bias (the squared radius r²); leave bias_calibrator='default' or None"
        )
    eps = check_number("eps", probe.eps, minimum=0, low_open=True)
    threshold = 0.5 if kind == "regression" and calibrator is None else 0.0
    return {
        "normalization": normalization,
        "rank": rank,
        "bias_calibrator": calibrator,
        "eps": eps,
        "threshold": threshold,
    }


class CentroidProbe(_MultiLabelProbe):
    """A multi-label centroid probe: one centroid per concept, each row scored against every centroid.

    Args:
        kind: ``"dot"``, ``"cosine"``, ``"sql2"``, ``"diag_mahalanobis"`` or ``"svdd"`` (see the module table; each
            matches the Interpreto class named there).
        normalization: ``None``, ``"standardization"`` or ``"whitening"`` (Interpreto's ``Standardization`` /
            ``Whitening``), fitted on the training rows. ``"default"``: ``"standardization"`` for
            ``"diag_mahalanobis"`` (Interpreto's default for it), else ``None``.
        rank: components kept by ``"whitening"`` (``None``: all).
        bias_calibrator: ``None``, ``"prevalence"``, ``"midpoint"``, ``"fpr"``, ``"bce"`` or ``"lda"`` (Interpreto's
            ``*_bias`` functions at their defaults). ``"default"``: ``"midpoint"``, so that ``predict``'s threshold
            of 0 separates the classes, except for ``"svdd"``, whose bias is its squared radius (no calibrator).
            Interpreto's own default is ``None`` (a zero bias).
        shrinkage: ``"diag_mahalanobis"``'s variance, ``(1 - s) · class variance + s · pooled variance``, in [0, 1]
            (Interpreto's default 1.0: the pooled per-feature variance of the normalised rows).
        lr, max_iter, C, l2: ``"svdd"``'s Adam learning rate and steps, hinge weight and L2 penalty on the centres
            (Interpreto's defaults 0.05, 20, 1.0, 0.0). Its initialisation is deterministic (positive means and the
            mean positive squared distance), so there is no seed.
        eps: Interpreto's numerical floor (1e-8) for counts, norms and variances.
        cv: number of folds, grouped by text (at most the number of texts).
        seed: seed of the shuffled-label control.

    After ``fit(X, y)``: ``model_`` (the fitted scorer), ``classes_`` (the classes of a 1-D label vector, else
    None), ``n_concepts_``, ``layer_`` and ``report_`` (the keys of ``LinearProbe.report_``; accuracies are label-wise
    accuracies, the majority baseline the mean over concepts of the larger class's share); for ``"dot"`` and
    ``"cosine"`` also ``coef_`` (concepts × d, the centroids brought back to the input space) and ``direction_`` (its
    unit rows).

    Example:
        >>> rng = np.random.default_rng(1)
        >>> X = np.r_[rng.normal(size=(20, 5)) + 3, rng.normal(size=(20, 5))]
        >>> probe = CentroidProbe("diag_mahalanobis", cv=4).fit(X, [1] * 20 + [0] * 20)
        >>> probe.report_["cv_accuracy"], probe.n_concepts_, probe.classes_.tolist()
        (1.0, 2, [0, 1])
    """

    _kinds = CENTROID_KINDS

    def __init__(
        self,
        kind: str = "cosine",
        *,
        normalization: str | None = "default",
        rank: int | None = None,
        bias_calibrator: str | None = "default",
        shrinkage: float = 1.0,
        lr: float = 5e-2,
        max_iter: int = 20,
        C: float = 1.0,
        l2: float = 0.0,
        eps: float = 1e-8,
        cv: int = 5,
        seed: int = 0,
    ):
        self.kind = kind
        self.normalization = normalization
        self.rank = rank
        self.bias_calibrator = bias_calibrator
        self.shrinkage = shrinkage
        self.lr = lr
        self.max_iter = max_iter
        self.C = C
        self.l2 = l2
        self.eps = eps
        self.cv = cv
        self.seed = seed

    def _params(self) -> dict[str, Any]:
        params = _common_params(self, self.kind)
        params["shrinkage"] = check_number("shrinkage", self.shrinkage, minimum=0, maximum=1)
        params["lr"] = check_number("lr", self.lr, minimum=0, low_open=True)
        params["max_iter"] = check_int("max_iter", self.max_iter, minimum=0)
        params["C"] = check_number("C", self.C, minimum=0)
        params["l2"] = check_number("l2", self.l2, minimum=0)
        return params


class LinearRegressionProbe(_MultiLabelProbe):
    """Multi-output least squares (``l2 = 0``, by pseudo-inverse) or ridge regression (``l2 > 0``, intercept not
    penalised) of the 0/1 targets on the normalised rows, in closed form: Interpreto's ``LinearRegressionProbe``.

    A separate class rather than a ``CentroidProbe`` kind because it has no centroid; it shares everything else
    (targets, report, ``predict``, ``as_concepts``) through one base.

    Args:
        l2: ridge penalty (0: ordinary least squares).
        normalization, rank, eps, cv, seed: as in :class:`CentroidProbe` (``"default"``: no normalisation).
        bias_calibrator: ``None`` or ``"default"`` keep the least-squares intercept (``predict`` then thresholds at
            0.5); a calibrator's name replaces it (threshold 0), as in Interpreto.

    After ``fit``: as :class:`CentroidProbe`, with ``coef_`` (concepts × d, the weights in the input space) and
    ``direction_``.

    Example:
        >>> X = np.r_[np.ones((4, 3)), -np.ones((4, 3))] + np.eye(8, 3)
        >>> probe = LinearRegressionProbe(l2=0.1, cv=2).fit(X, [[1]] * 4 + [[0]] * 4)
        >>> [round(float(v), 2) for v in probe.decision_function(X[[0, -1]]).ravel()], probe.threshold_
        ([1.03, 0.01], 0.5)
    """

    _kinds = ("regression",)

    def __init__(
        self,
        l2: float = 0.0,
        *,
        normalization: str | None = "default",
        rank: int | None = None,
        bias_calibrator: str | None = "default",
        eps: float = 1e-8,
        cv: int = 5,
        seed: int = 0,
    ):
        self.l2 = l2
        self.normalization = normalization
        self.rank = rank
        self.bias_calibrator = bias_calibrator
        self.eps = eps
        self.cv = cv
        self.seed = seed

    kind = "regression"

    def _params(self) -> dict[str, Any]:
        params = _common_params(self, "regression")
        params["l2"] = check_number("l2", self.l2, minimum=0)
        return params
