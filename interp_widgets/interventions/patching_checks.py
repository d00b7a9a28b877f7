"""How far to trust attribution patching: its agreement with exact patching, and exact re-runs of chosen cells.

- :class:`PatchingAgreement` (from ``PatchingResult.agreement(exact)``): per point type, the Spearman rank
  correlation of the two results' effects over every (layer, unit, position) cell and the overlap of their top k
  cells by |effect|. The effect of a cell is its normalised value minus the unpatched run's (0 when denoising, 1 when
  noising), so the top cells are those whose patch moves the metric most, whichever the direction.
- :class:`PatchingVerification` (from ``PatchingResult.verify(top_k=20)``): the exact values of the estimate's top k
  cells by |effect| and of as many cells drawn at random from the rest. Attribution patching is linear, so it misses
  effects that saturate (an attention softmax near 0 or 1 has a near-zero gradient) or whose paths cancel in the
  gradient (AtP*, Kramar et al. 2024): a drawn cell whose exact effect beats the weakest verified top cell is such a
  false negative, and ``false_negatives`` lists them.

Both compare results by duck typing (``setting``, ``panels``, ``tokens``), so this module imports no result class.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from interp_widgets.agreement import spearman, top_k_overlap
from interp_widgets.validation import check_int

_AGREEMENT_COLUMNS = ("point", "spearman", "top_k_overlap", "k", "cells")


def unpatched_value(direction: str) -> float:
    """The normalised value of the unpatched run: 0 (the corrupt run) when denoising, 1 (the clean run) when noising.

    Example:
        >>> unpatched_value("denoise"), unpatched_value("noise")
        (0.0, 1.0)
    """
    return 0.0 if direction == "denoise" else 1.0


def effects(result, point: str) -> np.ndarray:
    """The effect of every cell of one panel, (layers, units, positions): value minus the unpatched run's value.

    Example:
        >>> from interp_widgets.interventions import attribution_patching
        >>> result = attribution_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on", foil=" the")
        >>> effects(result, "resid_pre").shape
        (2, 1, 6)
    """
    panel = result.panel(point)
    return panel.values.astype(np.float64) - unpatched_value(result.setting.direction)


@dataclass(frozen=True)
class PatchingAgreement:
    """The agreement of two patching results (an estimate and an exact one), one row per point type they share:
    ``spearman`` (the rank correlation of the cells' effects, signed), ``top_k_overlap`` (the share of the top ``k``
    cells by |effect| they have in common) and ``cells`` (how many cells were compared).

    Example:
        >>> agreement = PatchingAgreement((("resid_pre", 0.9, 0.5, 2, 12),))
        >>> agreement["resid_pre"]["spearman"], list(agreement.to_dataframe().columns)
        (0.9, ['point', 'spearman', 'top_k_overlap', 'k', 'cells'])
    """

    rows: tuple[tuple, ...]

    @property
    def points(self) -> list[str]:
        """The compared point types."""
        return [row[0] for row in self.rows]

    def __getitem__(self, point: str) -> dict:
        for row in self.rows:
            if row[0] == point:
                return dict(zip(_AGREEMENT_COLUMNS, row))
        raise KeyError(f"no agreement for {point!r}; compared {self.points}")

    def to_dict(self) -> dict[str, dict]:
        """``{point: {"spearman", "top_k_overlap", "k", "cells"}}`` (plain floats and ints, JSON-ready).

        Example:
            >>> PatchingAgreement((("head", 1.0, 1.0, 5, 24),)).to_dict()
            {'head': {'spearman': 1.0, 'top_k_overlap': 1.0, 'k': 5, 'cells': 24}}
        """
        return {row[0]: dict(zip(_AGREEMENT_COLUMNS[1:], row[1:])) for row in self.rows}

    def to_dataframe(self):
        """One row per point type (see the class example)."""
        import pandas as pd

        return pd.DataFrame(list(self.rows), columns=list(_AGREEMENT_COLUMNS))

    def __repr__(self) -> str:
        parts = ", ".join(f"{row[0]}: rho={row[1]:.3f}, top-{row[3]}={row[2]:.2f}" for row in self.rows)
        return f"PatchingAgreement({parts})"

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><td>{html.escape(str(row[0]))}</td><td>{row[1]:.3f}</td><td>{row[2]:.2f}</td><td>{row[3]}</td>"
            f"<td>{row[4]}</td></tr>"
            for row in self.rows
        )
        return (
            "<table><tr><th>point</th><th>Spearman</th><th>top-k overlap</th><th>k</th><th>cells</th></tr>"
            f"{body}</table>"
        )


def _check_comparable(result, other) -> None:
    for name in ("metric", "direction", "positions"):
        mine, theirs = getattr(result.setting, name), getattr(other.setting, name)
        if mine != theirs:
            raise ValueError(
                f"the two results differ in {name} ({mine!r} vs {theirs!r}); compare results computed with the same "
                "metric, direction and positions on the same prompts"
            )
    if list(result.tokens) != list(other.tokens):
        raise ValueError(
            "the two results patch different prompts; compare results computed on the same clean and corrupt prompts"
        )


def agreement(result, exact, k: int = 20) -> PatchingAgreement:
    """Spearman and top-k overlap of ``result`` against ``exact``, per point type both hold (see
    :class:`PatchingAgreement`); ``PatchingResult.agreement`` calls it.

    Example:
        >>> from interp_widgets.interventions import activation_patching, attribution_patching
        >>> args = (lm, lm_tokenizer, "the cat sat", "the dog sat")
        >>> estimate = attribution_patching(*args, answer=" on", foil=" the", points=("resid_pre", "head"))
        >>> exact = activation_patching(*args, answer=" on", foil=" the", points=("head",), progress=False)
        >>> agreement(estimate, exact, k=3).points
        ['head']
    """
    k = check_int("k", k, minimum=1)
    _check_comparable(result, exact)
    shared = [point for point in result.points if point in exact.points]
    if not shared:
        raise ValueError(
            f"the results share no point type ({result.points} vs {exact.points}); patch the same points in both"
        )
    rows = []
    for point in shared:
        a, b = effects(result, point), effects(exact, point)
        if a.shape != b.shape:
            raise ValueError(
                f"the {point} panels have different shapes ({a.shape} vs {b.shape}: layers, units, positions); "
                "compare results over the same layers and heads"
            )
        a, b = a.reshape(-1), b.reshape(-1)
        rows.append((point, spearman(a, b, by="signed"), top_k_overlap(a, b, k), min(k, a.size), int(a.size)))
    return PatchingAgreement(tuple(rows))


def choose_cells(result, top_k: int, sample: int, seed: int) -> list[tuple]:
    """The cells to verify: ``(point, layer index, unit index, position index, "top" | "sample")`` for the ``top_k``
    cells of largest |effect| over every panel, then ``sample`` cells drawn at random (``seed``) from the rest.

    Example:
        >>> from interp_widgets.interventions import attribution_patching
        >>> result = attribution_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on", foil=" the")
        >>> [cell[-1] for cell in choose_cells(result, 2, 1, seed=0)]
        ['top', 'top', 'sample']
    """
    top_k = check_int("top_k", top_k, minimum=1)
    sample = check_int("sample", sample, minimum=0)
    cells, scores = [], []
    for panel in result.panels:
        values = np.abs(effects(result, panel.point))
        for index in np.ndindex(values.shape):
            cells.append((panel.point, *index))
            scores.append(values[index])
    order = np.argsort(-np.asarray(scores), kind="stable")
    top = [cells[i] + ("top",) for i in order[:top_k]]
    rest = order[top_k:]
    drawn = np.random.default_rng(seed).choice(rest, size=min(sample, len(rest)), replace=False) if len(rest) else []
    return top + [cells[i] + ("sample",) for i in sorted(drawn)]


_VERIFY_COLUMNS = ("point", "layer", "unit", "position", "token", "chosen", "estimate", "exact", "exact_raw", "error")


@dataclass(frozen=True)
class PatchingVerification:
    """Exact re-runs of cells of an attribution patching result, one row per cell: ``point``, ``layer``, ``unit``,
    ``position`` (-1 for all positions), ``token``, ``chosen`` (``"top"``: among the estimate's top cells by
    |effect|; ``"sample"``: drawn at random from the rest), ``estimate`` and ``exact`` (normalised values, means over
    pairs), ``exact_raw`` (the patched run's metric) and ``error`` (estimate - exact), plus the ``direction``.

    Example:
        >>> check = PatchingVerification(
        ...     (("head", 0, "H1", 2, "c", "top", 0.4, 0.5, 1.0, -0.1), ("head", 1, "H0", 0, "t", "sample", 0.0, 0.7, 1.2, -0.7)),
        ...     "denoise")
        >>> [row["unit"] for row in check.false_negatives], round(check.max_error, 3)
        (['H0'], 0.7)
    """

    rows: tuple[tuple, ...]
    direction: str = "denoise"

    def _records(self) -> list[dict]:
        return [dict(zip(_VERIFY_COLUMNS, row)) for row in self.rows]

    @property
    def max_error(self) -> float:
        """The largest |estimate - exact| over the verified cells."""
        return max((abs(row[9]) for row in self.rows), default=float("nan"))

    @property
    def false_negatives(self) -> list[dict]:
        """The drawn cells whose exact |effect| is at least that of the weakest verified top cell: effects the
        estimate ranked too low (saturation or cancellation, AtP*)."""
        base = unpatched_value(self.direction)
        records = self._records()
        top = [abs(r["exact"] - base) for r in records if r["chosen"] == "top"]
        if not top:
            return []
        weakest = min(top)
        return [r for r in records if r["chosen"] == "sample" and abs(r["exact"] - base) >= weakest]

    def to_dataframe(self):
        """One row per verified cell (see the class docstring).

        Example:
            >>> PatchingVerification((("mlp_out", 1, "stream", 0, "t", "top", 0.2, 0.3, 1.0, -0.1),)).to_dataframe().shape
            (1, 10)
        """
        import pandas as pd

        return pd.DataFrame(list(self.rows), columns=list(_VERIFY_COLUMNS))

    def __repr__(self) -> str:
        missed = len(self.false_negatives)
        return (
            f"PatchingVerification({len(self.rows)} cells, max |estimate - exact| = {self.max_error:.3g}, "
            f"{missed} false negative(s) among the drawn cells)"
        )

    def _repr_html_(self) -> str:
        body = "".join(
            "<tr>"
            + "".join(f"<td>{html.escape(f'{v:.3f}' if isinstance(v, float) else str(v))}</td>" for v in row)
            + "</tr>"
            for row in self.rows
        )
        head = "".join(f"<th>{name}</th>" for name in _VERIFY_COLUMNS)
        return f"<div>{html.escape(repr(self))}<table><tr>{head}</tr>{body}</table></div>"


def verify(result, top_k: int = 20, *, sample: int | None = None, seed: int = 0) -> PatchingVerification:
    """Re-run exactly the ``top_k`` cells of largest estimated |effect| of an attribution patching ``result``, and
    ``sample`` (default: ``top_k``) cells drawn at random from the rest (see :class:`PatchingVerification`).

    The re-runs use the model, tokenizer and prompts of the call that made ``result``, which it keeps in memory
    only: a loaded result, or one from exact patching, cannot be verified. ``PatchingResult.verify`` calls it.

    Example:
        >>> from interp_widgets.interventions import attribution_patching
        >>> result = attribution_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on", foil=" the")
        >>> check = verify(result, top_k=3, sample=2)
        >>> check.to_dataframe()["chosen"].tolist()
        ['top', 'top', 'top', 'sample', 'sample']
    """
    if result.setting.method != "attribution":
        raise ValueError(
            f"verify() re-runs the cells of an attribution patching result exactly; this result is already "
            f"{result.setting.method!r}"
        )
    rerun = getattr(result, "_rerun", None)
    if rerun is None:
        raise ValueError(
            "this attribution patching result no longer knows its model (it was loaded from a file or copied): "
            "verify() re-runs cells on the model, tokenizer and prompts of the call that made it, kept in memory "
            "only. Run attribution_patching(...) again in this session and call .verify() on its result."
        )
    cells = choose_cells(result, top_k, top_k if sample is None else sample, seed)
    raw = rerun(cells)  # (cells, pairs)
    clean, corrupt = result.baseline.clean_metrics, result.baseline.corrupt_metrics
    exact = (raw - corrupt) / (clean - corrupt)
    rows = []
    for cell, values, raws in zip(cells, exact, raw):
        point, layer, unit, position, chosen = cell
        panel = result.panel(point)
        estimate = float(panel.values[layer, unit, position])
        every = panel.positions == ["all"]
        rows.append(
            (point, panel.layers[layer], panel.units[unit], -1 if every else int(position), panel.positions[position],
             chosen, estimate, float(values.mean()), float(raws.mean()), estimate - float(values.mean()))
        )  # fmt: skip
    return PatchingVerification(tuple(rows), result.setting.direction)
