"""Supervised linear probes on activations, honest accuracies, probe directions as concepts, and layer sweeps.

:class:`LinearProbe` fits a logistic regression, a linear SVM (both scikit-learn) or a mean-difference probe to the
rows of an :class:`~interp_widgets.concepts.ActivationStore` against labels given per row or per text. Its accuracy is
cross-validated **grouped by text**, so the tokens of one text never sit on both sides of a split, and is reported
beside two controls: the majority-class baseline and the accuracy of the same probe trained on labels shuffled
across texts (a probe that reads the labels' structure rather than the activations scores the same there).

The probe's direction is a concept like any other: :meth:`LinearProbe.as_concepts` returns a
:class:`DirectionConcepts`, which interpretation, importance and the concept browser take. :func:`probe_layers`
repeats the probe at several layers and returns a :class:`ProbeSweep` (a table and an altair chart).

Example:
    >>> from interp_widgets.concepts import collect_activations
    >>> store = collect_activations(model, tokenizer, texts[:40], layer="layer:1", progress=False)
    >>> labels = [i % 2 for i in range(40)]        # one label per text, broadcast to its tokens
    >>> probe = LinearProbe("mean_difference", cv=4).fit(store, labels)
    >>> probe.classes_.tolist(), probe.direction_.shape, probe.report_["groups"]
    ([0, 1], (1, 32), 40)
    >>> sorted(probe.report_)
    ['cv_accuracy', 'cv_accuracy_std', 'folds', 'groups', 'majority_baseline', 'random_label_accuracy', 'rows']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from interp_widgets.concepts.decompositions import ConceptModel, _as_matrix
from interp_widgets.validation import check_choice, check_int

PROBE_KINDS = ("logistic", "svm", "mean_difference")


class DirectionConcepts(ConceptModel):
    """Fixed concept directions (probe directions, steering vectors, rows of a dictionary) as a concept model.

    ``fit(X)`` records the mean of ``X`` as the offset; the coefficients of a row are its least-squares coordinates
    on the directions after centring, ``(x - offset) @ pinv(directions)``, so ``inverse_transform`` is the projection
    of ``x`` onto their span (plus the offset). For one unit direction the coefficient is ``(x - mean) · w``.

    Example:
        >>> directions = np.eye(2, 32, dtype=np.float32)
        >>> concepts = DirectionConcepts(2, directions=directions).fit(store)
        >>> C = concepts.transform(store[:3])
        >>> np.allclose(C, store[:3][:, :2] - store.to_numpy()[:, :2].mean(0), atol=1e-5)
        True
    """

    name = "direction"
    affine_encoder = True

    def __init__(self, n_concepts: int, *, directions=None):
        super().__init__(n_concepts)
        self.directions = directions

    def _check_params(self) -> None:
        super()._check_params()
        if self.directions is None:
            raise ValueError("DirectionConcepts needs directions=<(n_concepts, d) array>, e.g. probe.direction_")
        directions = _as_matrix(self.directions, name="directions")
        if directions.shape[0] != self.n_concepts:
            raise ValueError(f"directions has {directions.shape[0]} rows for n_concepts={self.n_concepts}")
        if not np.isfinite(directions).all() or not np.linalg.norm(directions, axis=1).all():
            raise ValueError("directions must be finite and non-zero")

    def _check_size(self, n_rows: int, n_features: int) -> None:
        width = _as_matrix(self.directions, name="directions").shape[1]
        if width != n_features:
            raise ValueError(
                f"the directions have {width} features but the activations have {n_features}; "
                "use directions from the same layer"
            )

    def _fit(self, X) -> None:
        from interp_widgets.concepts.activations import ActivationStore

        self.D_ = _as_matrix(self.directions, name="directions").copy()
        if isinstance(X, ActivationStore):
            total, count = np.zeros(X.dim, dtype=np.float64), 0
            for _, block in X.iter_chunks():
                total += block.sum(0, dtype=np.float64)
                count += len(block)
            self.mean_ = (total / count).astype(np.float32)
        else:
            self.mean_ = _as_matrix(X).mean(0).astype(np.float32)
        self.pinv_ = np.linalg.pinv(self.D_).astype(np.float32)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean_) @ self.pinv_

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        return C @ self.D_ + self.mean_

    def _saved_params(self) -> dict[str, Any]:
        return {}  # the directions are saved as an array

    def _state(self):
        arrays, extra = super()._state()
        arrays.update(D_=self.D_, mean_=self.mean_, pinv_=self.pinv_)
        return arrays, extra

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.D_, self.mean_, self.pinv_ = arrays["D_"], arrays["mean_"], arrays["pinv_"]
        self.directions = self.D_


def _row_labels(labels, text_ids: np.ndarray, n_rows: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {labels.shape}")
    n_texts = int(text_ids.max()) + 1 if len(text_ids) else 0
    if len(labels) == n_rows:
        return labels
    if len(labels) == n_texts:
        return labels[text_ids]
    raise ValueError(
        f"{len(labels)} labels for {n_rows} rows from {n_texts} texts; give one label per row or one per text"
    )


def _rows_and_groups(X, groups):
    """``(store or None, X as a float32 matrix, cross-validation groups, text ids)`` of a probe's ``fit`` input:
    the groups default to the store's text ids (else one group per row) and the text ids to the groups."""
    from interp_widgets.concepts.activations import ActivationStore

    store = X if isinstance(X, ActivationStore) else None
    X = _as_matrix(X)
    if groups is None:
        groups = store.text_ids if store is not None else np.arange(len(X))
    groups = np.asarray(groups)
    if len(groups) != len(X):
        raise ValueError(f"{len(groups)} groups for {len(X)} rows; give one group id per row")
    text_ids = np.asarray(store.text_ids if store is not None else groups)
    return store, X, groups, text_ids


def _grouped_cv_report(make_estimator, X, y, groups, *, cv: int, seed: int, majority: float) -> dict[str, Any]:
    """The probe report: ``make_estimator()``'s score cross-validated with folds grouped by ``groups`` (no group on
    both sides of a split), its spread, the ``majority`` baseline, the same score on labels shuffled across groups
    (seeded by ``seed``), and the numbers of folds, groups and rows. ``y`` may be a vector or a rows × labels matrix;
    the score is the estimator's own ``score``."""
    from sklearn.model_selection import GroupKFold, cross_val_score

    n_groups = len(np.unique(groups))
    folds = min(cv, n_groups)
    if folds < 2:
        raise ValueError("cross-validation needs rows from at least two texts (groups)")
    splitter = GroupKFold(n_splits=folds)
    scores = cross_val_score(make_estimator(), X, y, groups=groups, cv=splitter)
    shuffled = _shuffle_by_group(y, groups, np.random.default_rng(seed))
    control = cross_val_score(make_estimator(), X, shuffled, groups=groups, cv=splitter)
    return {
        "cv_accuracy": float(scores.mean()),
        "cv_accuracy_std": float(scores.std()),
        "majority_baseline": float(majority),
        "random_label_accuracy": float(control.mean()),
        "folds": int(folds),
        "groups": int(n_groups),
        "rows": len(X),
    }


class LinearProbe(ClassifierMixin, BaseEstimator):
    """A linear probe: predict a label from a layer's activations, with grouped cross-validation and controls.

    Args:
        kind: ``"logistic"`` (scikit-learn ``LogisticRegression``), ``"svm"`` (``LinearSVC``) or
            ``"mean_difference"`` (the direction between the two class means; binary labels only).
        C: inverse regularisation strength of logistic / SVM.
        cv: number of folds, grouped by text (at most the number of texts).
        max_iter: iteration cap of the scikit-learn solvers.
        seed: seed of the shuffled-label control.

    After ``fit(store, labels)``: ``classes_``, ``coef_`` (classes × d, one row for binary), ``intercept_``,
    ``direction_`` (``coef_`` rows scaled to unit length), ``layer_`` and ``report_`` (``cv_accuracy``,
    ``cv_accuracy_std``, ``majority_baseline``, ``random_label_accuracy``, ``folds``, ``groups``, ``rows``).

    Example:
        >>> from interp_widgets.concepts import collect_activations
        >>> store = collect_activations(model, tokenizer, texts[:40], layer="layer:1", progress=False)
        >>> probe = LinearProbe("logistic", cv=4).fit(store, [i % 2 for i in range(40)])
        >>> probe.predict(store[:3]).shape, probe.as_concepts().n_concepts
        ((3,), 1)
    """

    def __init__(self, kind: str = "logistic", *, C: float = 1.0, cv: int = 5, max_iter: int = 2000, seed: int = 0):
        self.kind = kind
        self.C = C
        self.cv = cv
        self.max_iter = max_iter
        self.seed = seed

    def _estimator(self):
        if self.kind == "logistic":
            from sklearn.linear_model import LogisticRegression

            return LogisticRegression(C=self.C, max_iter=self.max_iter)
        if self.kind == "svm":
            from sklearn.svm import LinearSVC

            return LinearSVC(C=self.C, max_iter=self.max_iter)
        return _MeanDifference()

    def fit(self, X, y, groups=None) -> "LinearProbe":
        """Fit on activations ``X`` (store, array or tensor) and labels ``y`` (one per row, or one per text of a store);
        ``groups`` (one per row) replaces the store's text ids as the cross-validation groups.

        Example:
            >>> X = np.r_[np.random.default_rng(0).normal(size=(30, 4)) + 2, np.random.default_rng(1).normal(size=(30, 4))]
            >>> probe = LinearProbe("svm", cv=3).fit(X, [1] * 30 + [0] * 30, groups=np.arange(60) // 2)
            >>> probe.report_["cv_accuracy"] > 0.9 > probe.report_["random_label_accuracy"]
            True
        """
        check_choice("kind", self.kind, PROBE_KINDS)
        check_int("cv", self.cv, minimum=2)
        store, X, groups, text_ids = _rows_and_groups(X, groups)
        y = _row_labels(y, text_ids, len(X))
        classes, counts = np.unique(y, return_counts=True)
        if len(classes) < 2:
            raise ValueError(f"the labels hold one class only ({classes.tolist()}); a probe needs at least two")
        if self.kind == "mean_difference" and len(classes) != 2:
            raise ValueError(f"kind='mean_difference' needs two classes, got {len(classes)}; use kind='logistic'")
        self.report_ = _grouped_cv_report(
            self._estimator, X, y, groups, cv=self.cv, seed=self.seed, majority=float(counts.max() / counts.sum())
        )
        estimator = self._estimator().fit(X, y)
        self.estimator_ = estimator
        self.classes_ = classes
        self.coef_ = np.atleast_2d(np.asarray(estimator.coef_, dtype=np.float32))
        self.intercept_ = np.atleast_1d(np.asarray(estimator.intercept_, dtype=np.float32))
        self.direction_ = self.coef_ / np.linalg.norm(self.coef_, axis=1, keepdims=True).clip(1e-12)
        self.layer_ = store.layer if store is not None else None
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X) -> np.ndarray:
        """Predicted labels of the rows of ``X``.

        Example:
            >>> X = np.r_[np.ones((4, 3)), -np.ones((4, 3))]
            >>> LinearProbe("mean_difference", cv=2).fit(X, [1] * 4 + [0] * 4).predict(X[[0, -1]]).tolist()
            [1, 0]
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(_as_matrix(X))

    def as_concepts(self, X=None) -> DirectionConcepts:
        """The probe direction(s) as a fitted :class:`DirectionConcepts` (centred on ``X``'s mean, default: no
        centring), for interpretation, importance and the concept browser.

        Example:
            >>> X = np.r_[np.ones((4, 3)), -np.ones((4, 3))]
            >>> concepts = LinearProbe("mean_difference", cv=2).fit(X, [1] * 4 + [0] * 4).as_concepts()
            >>> [round(float(v), 3) for v in concepts.transform(X[[0, -1]]).ravel()]
            [1.732, -1.732]
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "estimator_")
        concepts = DirectionConcepts(len(self.direction_), directions=self.direction_)
        fit_on = X if X is not None else np.zeros((1, self.n_features_in_), dtype=np.float32)
        concepts.fit(fit_on)
        concepts.layer_ = self.layer_ if X is None else concepts.layer_
        return concepts


class _MeanDifference(ClassifierMixin, BaseEstimator):
    """Binary classifier along the difference of the class means, thresholded half way between them."""

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        low, high = (X[y == c].mean(0) for c in self.classes_)
        self.coef_ = (high - low)[None, :]
        self.intercept_ = np.array([-float(self.coef_[0] @ (high + low) / 2)])
        return self

    def predict(self, X):
        return self.classes_[(X @ self.coef_[0] + self.intercept_[0] > 0).astype(int)]


def _shuffle_by_group(y: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Labels permuted across groups: each group takes the labels of another group, so a per-text label stays
    constant within a text (rows of one text keep their shared structure)."""
    unique, inverse = np.unique(groups, return_inverse=True)
    first = np.zeros(len(unique), dtype=int)
    first[inverse[::-1]] = np.arange(len(y))[::-1]
    group_labels = y[first]
    constant = all((y[inverse == g] == group_labels[g]).all() for g in range(len(unique)))
    if constant:
        return rng.permutation(group_labels)[inverse]
    return rng.permutation(y)


@dataclass
class ProbeSweep:
    """Probe accuracy per layer: ``probes`` by layer name, ``table`` as rows.

    Example:
        >>> sweep = probe_layers(model, tokenizer, texts[:40], [i % 2 for i in range(40)], layers=[0, 1], cv=4)
        >>> sweep.to_dataframe().columns.tolist()
        ['layer', 'cv_accuracy', 'cv_accuracy_std', 'majority_baseline', 'random_label_accuracy', 'rows']
        >>> list(sweep.probes)
        ['layer:0', 'layer:1']
    """

    probes: dict[str, LinearProbe]
    kind: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dataframe(self):
        """One row per layer: cross-validated accuracy, its spread and the two controls."""
        import pandas as pd

        keys = ("cv_accuracy", "cv_accuracy_std", "majority_baseline", "random_label_accuracy", "rows")
        return pd.DataFrame(
            [{"layer": name, **{k: probe.report_[k] for k in keys}} for name, probe in self.probes.items()]
        )

    def chart(self):
        """An altair line chart of accuracy per layer beside the majority and shuffled-label controls.

        Example:
            >>> sweep = probe_layers(model, tokenizer, texts[:20], [i % 2 for i in range(20)], layers=[1], cv=2)
            >>> sweep.chart().to_dict()["mark"]["type"]
            'line'
        """
        import altair as alt

        frame = self.to_dataframe().melt(
            id_vars="layer",
            value_vars=["cv_accuracy", "majority_baseline", "random_label_accuracy"],
            var_name="series",
            value_name="accuracy",
        )
        order = list(self.probes)
        return (
            alt.Chart(frame)
            .mark_line(point=True)
            .encode(
                x=alt.X("layer:N", sort=order),
                y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1])),
                color="series:N",
                tooltip=["layer", "series", alt.Tooltip("accuracy:Q", format=".3f")],
            )
            .properties(title=f"{self.kind} probe accuracy per layer (grouped {self.meta.get('folds', '')}-fold CV)")
        )

    def _repr_html_(self) -> str:
        return self.to_dataframe().to_html(index=False, float_format="{:.3f}".format)


def probe_layers(
    model,
    tokenizer,
    texts: Sequence[str],
    labels,
    *,
    layers: Sequence,
    kind: str = "logistic",
    cv: int = 5,
    progress: bool = False,
    **collect_options,
) -> ProbeSweep:
    """Fit one :class:`LinearProbe` per layer on the same texts and labels (per text, or per token row).

    ``collect_options`` go to :func:`~interp_widgets.concepts.collect_activations` (``unit``, ``pooling``,
    ``include_special`` ...).

    Example:
        >>> sweep = probe_layers(model, tokenizer, texts[:40], [i % 2 for i in range(40)], layers=[1], cv=4)
        >>> row = sweep.to_dataframe().iloc[0]
        >>> row.layer, bool(0 <= row.cv_accuracy <= 1), round(float(row.majority_baseline), 2)
        ('layer:1', True, 0.52)
    """
    from interp_widgets.concepts.activations import collect_activations

    probes: dict[str, LinearProbe] = {}
    for layer in layers:
        store = collect_activations(model, tokenizer, texts, layer=layer, progress=progress, **collect_options)
        probe = LinearProbe(kind, cv=cv).fit(store, labels)
        probes[store.layer] = probe
    folds = next(iter(probes.values())).report_["folds"] if probes else cv
    return ProbeSweep(probes, kind, {"folds": folds, "texts": len(texts)})
