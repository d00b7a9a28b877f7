"""The patching view of a :class:`~interp_widgets.interventions.patching_result.PatchingResult`: its data for
:class:`~interp_widgets.widgets.PatchingView` (``result.widget()`` calls :func:`patching_view`).

One result, or an exact and an attribution-patching result side by side (``compare=``) with their agreement per
point type: Spearman's rank correlation and the overlap of their top-k cells, passed in (``agreement=``, e.g. what
``attribution_result.agreement(exact)`` returns) or computed here with :mod:`interp_widgets.agreement`.

Example:
    >>> from interp_widgets.interventions._patching_examples import tiny_patching_result
    >>> view = patching_view(tiny_patching_result())
    >>> view.panel_points, view.result_labels, view.top_tokens(0, 1, 0, 0)[0]
    (['resid_pre'], ['exact'], (' Paris', 0.5))
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from interp_widgets import agreement as _agreement
from interp_widgets.widgets import PatchingView
from interp_widgets.widgets.patching import patching_data, patching_panels
from interp_widgets.widgets.view_data import PatchingAgreementPart, PatchingRunsPart

__all__ = ["patching_view"]

#: The k of the top-k overlap computed when no agreement is passed.
AGREEMENT_K = 20


def _label(result: Any) -> str:
    return str(result.setting.method)


def _number(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _agreement_rows(agreement: Any) -> tuple[dict[str, tuple[float | None, float | None]], int | None]:
    """``({point: (spearman, overlap)}, k)`` from a mapping (``{point: {"spearman", "top_k_overlap", "k"}}`` or
    ``{point: (rho, overlap)}``) or a table (a DataFrame, or anything with ``to_dataframe()`` such as what
    ``PatchingResult.agreement`` returns) with ``point``, ``spearman``, an overlap column (its name may carry k, e.g.
    ``top_10_overlap``) and optionally ``k``; k is None when not given."""
    if hasattr(agreement, "to_dataframe"):
        agreement = agreement.to_dataframe()
    if hasattr(agreement, "columns"):
        columns = [str(c) for c in agreement.columns]
        if "point" not in columns or "spearman" not in columns:
            raise ValueError(f"agreement table has columns {columns}; it needs 'point', 'spearman' and an overlap one")
        agreement = {str(row["point"]): dict(row) for _, row in agreement.iterrows()}
    if not isinstance(agreement, Mapping):
        raise TypeError(
            f"agreement must be a mapping {{point: {{'spearman', 'top_k_overlap'}}}} or a table, got "
            f"{type(agreement).__name__}"
        )
    rows, ks = {}, set()
    for point, value in agreement.items():
        if isinstance(value, Mapping):
            overlap = next((v for key, v in value.items() if "overlap" in str(key)), None)
            rows[str(point)] = (_number(value.get("spearman")), _number(overlap))
            if value.get("k") is not None:
                ks.add(int(value["k"]))
        else:
            rho, overlap = value
            rows[str(point)] = (_number(rho), _number(overlap))
    return rows, (max(ks) if ks else None)


def _computed_agreement(result: Any, other: Any, k: int) -> Any:
    """The agreement of an estimate and an exact result: ``estimate.agreement(exact, k)`` where the results have it
    (attribution patching's, :mod:`interp_widgets.interventions.patching_checks`); else, per point type of equal
    shape, Spearman's ρ of the cells' effects (value minus the unpatched run's: 0 denoising, 1 noising) and the
    top-k overlap by |effect|, with :mod:`interp_widgets.agreement`. None for results of another metric, direction
    or positions setting."""
    estimate, exact = (other, result) if other.setting.method == "attribution" else (result, other)
    if any(
        getattr(result.setting, name) != getattr(other.setting, name) for name in ("metric", "direction", "positions")
    ):
        return {}  # different questions (e.g. noising beside denoising): shown side by side, not ranked together
    if hasattr(estimate, "agreement"):
        return estimate.agreement(exact, k)
    rows = {}
    others = {panel.point: panel for panel in exact.panels}
    for panel in estimate.panels:
        twin = others.get(panel.point)
        if twin is None or np.shape(twin.values) != np.shape(panel.values):
            continue
        a, b = (np.ravel(p.values).astype(np.float64) - (1.0 if r.setting.direction == "noise" else 0.0)
                for p, r in ((panel, estimate), (twin, exact)))  # fmt: skip
        rows[panel.point] = {"spearman": _agreement.spearman(a, b, by="signed"),
                             "top_k_overlap": _agreement.top_k_overlap(a, b, k), "k": min(k, a.size)}  # fmt: skip
    return rows


def patching_view(
    result: Any,
    compare: Any = None,
    *,
    agreement: Any = None,
    agreement_k: int | None = None,
    **options: Any,
) -> PatchingView:
    """The patching view of ``result`` (a ``PatchingResult``), with ``compare`` (another one, e.g. attribution
    patching of the same pair) side by side. ``agreement`` gives their agreement per point type (a mapping
    ``{point: {"spearman": ρ, "top_k_overlap": share}}``, or a table with those columns such as
    ``estimate.agreement(exact)`` returns); without it, it is computed (Spearman's ρ of the cells' effects and the
    top-``agreement_k`` overlap, default 20).
    ``options`` are the view's state (``scale="raw"``, ``unit_position=...``).

    Example:
        >>> from interp_widgets.interventions._patching_examples import tiny_patching_result
        >>> exact = tiny_patching_result()
        >>> view = patching_view(exact, tiny_patching_result(method="attribution"))
        >>> view.result_labels, view.agreement_points, view.agreement_spearman
        (['exact', 'attribution'], ['resid_pre'], [1.0])
        >>> patching_view(exact, tiny_patching_result(tokens=["A", " b", " c"]))
        Traceback (most recent call last):
        ...
        ValueError: compare is patching of another prompt (['A', ' b', ' c'], not ['The', ' Eiffel', ' Tower']); pass a result of the same clean prompt
    """
    results = [result] if compare is None else [result, compare]
    if compare is not None and list(compare.pair.tokens) != list(result.pair.tokens):
        raise ValueError(
            f"compare is patching of another prompt ({list(compare.pair.tokens)}, not {list(result.pair.tokens)}); "
            "pass a result of the same clean prompt"
        )
    text: dict[int, str] = {}
    for r in results:
        for panel in r.panels:
            if panel.top_ids is not None:
                text.update(zip((int(i) for i in panel.vocab_ids), panel.top_tokens))
    n_positions = len(result.pair.tokens)
    panels = patching_panels([list(r.panels) for r in results], text, n_positions=n_positions)
    labels = [_label(r) for r in results]
    if len(labels) == 2 and labels[0] == labels[1]:  # two exact results: by direction, else numbered
        directions = [str(r.setting.direction) for r in results]
        labels = [f"{label} {d}" for label, d in zip(labels, directions)] if directions[0] != directions[1] else [
            f"{labels[0]} (1)", f"{labels[1]} (2)"]  # fmt: skip
    runs = PatchingRunsPart(
        result_labels=labels,
        result_methods=[str(r.setting.method) for r in results],
        result_directions=[str(r.setting.direction) for r in results],
        result_metrics=[str(r.setting.metric) for r in results],
        clean_metrics=[float(r.baseline.clean_metric) for r in results],
        corrupt_metrics=[float(r.baseline.corrupt_metric) for r in results],
    )
    agree = PatchingAgreementPart()
    if compare is not None or agreement is not None:
        k = AGREEMENT_K if agreement_k is None else int(agreement_k)
        rows, given_k = _agreement_rows(agreement if agreement is not None else _computed_agreement(result, compare, k))
        agree = PatchingAgreementPart(
            agreement_points=list(rows),
            agreement_spearman=[rho for rho, _ in rows.values()],
            agreement_overlap=[overlap for _, overlap in rows.values()],
            agreement_k=k if given_k is None else given_k,
        )
    pair = result.pair
    data = patching_data(
        pair.layout,
        pair.corrupt_tokens,
        panels,
        runs,
        agreement=agree,
        answer=" / ".join(dict.fromkeys(pair.answers)),
        foil=" / ".join(dict.fromkeys(pair.foils)) if pair.foils else "",
        n_pairs=pair.n_pairs,
        model_name=str(result.setting.model),
    )
    return PatchingView(data, **options)
