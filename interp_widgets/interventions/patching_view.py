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
AGREEMENT_K = 10


def _label(result: Any) -> str:
    return str(result.setting.method)


def _number(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _agreement_rows(agreement: Any) -> dict[str, tuple[float | None, float | None]]:
    """``{point: (spearman, overlap)}`` from a mapping (``{point: {"spearman", "overlap"}}`` or ``{point: (rho,
    overlap)}``) or a table (a DataFrame or anything with ``to_dataframe()``) with ``point``, ``spearman`` and an
    ``overlap`` column (its name may carry k, e.g. ``top_10_overlap``)."""
    if hasattr(agreement, "to_dataframe"):
        agreement = agreement.to_dataframe()
    if hasattr(agreement, "columns"):
        columns = [str(c) for c in agreement.columns]
        overlap = next((c for c in columns if "overlap" in c), None)
        if "point" not in columns or "spearman" not in columns:
            raise ValueError(f"agreement table has columns {columns}; it needs 'point', 'spearman' and an overlap one")
        return {str(row["point"]): (_number(row["spearman"]), _number(row[overlap]) if overlap else None)
                for _, row in agreement.iterrows()}  # fmt: skip
    if isinstance(agreement, Mapping):
        rows = {}
        for point, value in agreement.items():
            if isinstance(value, Mapping):
                overlap = next((v for k, v in value.items() if "overlap" in str(k)), None)
                rows[str(point)] = (_number(value.get("spearman")), _number(overlap))
            else:
                rho, overlap = value
                rows[str(point)] = (_number(rho), _number(overlap))
        return rows
    raise TypeError(
        f"agreement must be a mapping {{point: {{'spearman', 'overlap'}}}} or a table, got {type(agreement).__name__}"
    )


def _computed_agreement(result: Any, other: Any, k: int) -> dict[str, tuple[float | None, float | None]]:
    rows = {}
    others = {panel.point: panel for panel in other.panels}
    for panel in result.panels:
        twin = others.get(panel.point)
        if twin is None or np.shape(twin.values) != np.shape(panel.values):
            continue
        a, b = np.ravel(panel.values), np.ravel(twin.values)
        rows[panel.point] = (_number(_agreement.spearman(a, b)), _number(_agreement.top_k_overlap(a, b, k)))
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
    ``{point: {"spearman": ρ, "overlap": share}}`` or a table with those columns); without it, Spearman's ρ (of
    |value|) and the top-``agreement_k`` overlap (default 10) are computed from the two results' values.
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
    if len(labels) == 2 and labels[0] == labels[1]:
        labels = [f"{labels[0]} (1)", f"{labels[1]} (2)"]
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
        rows = _agreement_rows(agreement) if agreement is not None else _computed_agreement(result, compare, k)
        agree = PatchingAgreementPart(
            agreement_points=list(rows),
            agreement_spearman=[rho for rho, _ in rows.values()],
            agreement_overlap=[overlap for _, overlap in rows.values()],
            agreement_k=k,
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
