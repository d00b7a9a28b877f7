"""The patching view: activation (or attribution) patching of a clean / corrupt pair as heatmaps.

One heatmap per patched point type: layers × positions with the clean tokens along the axis for a residual or
sublayer point, layers × heads (at a chosen position when every position was patched) for heads, q, k, v and
patterns. Hovering a cell shows its exact normalised value, the raw metric of its patched run and the spread over
pairs; clicking it lists the top-5 next tokens of that patched run, from arrays stored in the view (no kernel needed)
up to :data:`~interp_widgets.widgets.view_data.PATCHING_STORED_CELLS` cells; above that the kernel sends a cell's
top-5 on click and the view says so. A switch shows the normalised or the raw values; noising results are labelled
(a low value means important); an exact and an attribution-patching result can be shown side by side with their
agreement. The grid is one tab stop per heatmap: arrow keys move the cell, Enter selects it. Token text never
becomes HTML (canvas text, ``textContent``; the static SVG escapes it).

The widget draws data only: ``PatchingResult.widget()`` (``interp_widgets.interventions``) builds its
:class:`~interp_widgets.widgets.view_data.PatchingData` with :func:`patching_data`.

Example:
    >>> view = PatchingView(demo_patching_data())
    >>> view
    PatchingView(1 result, panels=['resid_pre'], 3 layers × 4 positions, scale='normalised')
"""

from __future__ import annotations

import math
from html import escape
from typing import Any, Mapping, Sequence

import numpy as np
import traitlets

from interp_widgets.text_units import TokenLayout
from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._colour import score_colours
from interp_widgets.widgets._svg import visible_text
from interp_widgets.widgets._tokens import _spaces_before
from interp_widgets.widgets.view_data import (
    PATCHING_STORED_CELLS,
    PatchingAgreementPart,
    PatchingData,
    PatchingPanelsPart,
    PatchingRunsPart,
    TokenLayoutPart,
)

__all__ = ["PatchingView", "demo_patching_data", "patching_data", "patching_panels"]

#: Top next tokens kept per patched run.
TOP_K = 5
#: Columns and layers drawn per panel in the static picture (the live grid shows them all).
MAX_STATIC_COLUMNS = 40
MAX_STATIC_LAYERS = 48
SCALES = ("normalised", "raw")


def _strings(values: Sequence[Any]) -> list[str]:
    return [str(v) for v in values]


def patching_panels(
    results: Sequence[Sequence[Any]], token_text: Mapping[int, str], *, n_positions: int
) -> PatchingPanelsPart:
    """Pack the panels of one or more patching results into the view's :class:`PatchingPanelsPart`.

    ``results[r]`` lists result ``r``'s panels, each an object with ``point``, ``layers``, ``units``, ``positions``
    (labels; ``n_positions`` labels equal to the clean tokens are stored as "the clean tokens"), ``values``, ``raw``,
    ``spread`` (arrays of shape ``(layers, units, positions)``) and ``top_ids`` / ``top_probs`` (shape ``(layers,
    units, positions, 5)``, or None: no patched runs). ``token_text`` maps every id in ``top_ids`` to its text.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> z = np.zeros((2, 1, 3), np.float32)
        >>> panel = NS(point="resid_pre", layers=[0, 1], units=["stream"], positions=["a", "b", "c"], values=z,
        ...            raw=z, spread=z, top_ids=np.full((2, 1, 3, 5), 7), top_probs=np.full((2, 1, 3, 5), 0.2))
        >>> part = patching_panels([[panel]], {7: "<b>"}, n_positions=3)
        >>> part.cell_offsets.tolist(), part.top_vocab.shape, part.vocab, part.panel_layers
        ([0, 6], (6, 5), ['<b>'], [['0', '1']])
    """
    points, owners, layers, units, positions = [], [], [], [], []
    cells, tops, values, raw, spread, top_ids, top_probs = [0], [0], [], [], [], [], []
    for r, panels in enumerate(results):
        for panel in panels:
            v = np.asarray(panel.values, dtype=np.float32)
            shape = (len(panel.layers), len(panel.units), len(panel.positions))
            if v.shape != shape:
                raise ValueError(
                    f"panel {panel.point!r} has values of shape {v.shape} but {shape[0]} layers, {shape[1]} units and "
                    f"{shape[2]} positions; pass values of shape (layers, units, positions)"
                )
            points.append(str(panel.point))
            owners.append(r)
            layers.append(_strings(panel.layers))
            units.append(_strings(panel.units))
            labels = _strings(panel.positions)
            positions.append([] if len(labels) == n_positions and labels != ["all"] else labels)
            values.append(v.ravel())
            for name, out in (("raw", raw), ("spread", spread)):
                array = getattr(panel, name, None)
                array = np.zeros(shape, np.float32) if array is None else np.asarray(array, dtype=np.float32)
                if array.shape != shape:
                    raise ValueError(f"panel {panel.point!r} has {name} of shape {array.shape}; expected {shape}")
                out.append(array.ravel())
            cells.append(cells[-1] + v.size)
            ids = getattr(panel, "top_ids", None)
            if ids is None:
                tops.append(tops[-1])
                continue
            ids = np.asarray(ids, dtype=np.int64).reshape(v.size, -1)[:, :TOP_K]
            probs = np.asarray(panel.top_probs, dtype=np.float32).reshape(v.size, -1)[:, :TOP_K]
            top_ids.append(ids)
            top_probs.append(probs)
            tops.append(tops[-1] + v.size)
    all_ids = np.concatenate(top_ids) if top_ids else np.zeros((0, TOP_K), np.int64)
    vocab_ids = np.unique(all_ids)
    missing = [int(i) for i in vocab_ids if int(i) not in token_text]
    if missing:
        raise ValueError(f"token_text has no text for the top-5 token ids {missing[:5]}; pass the text of every id")
    return PatchingPanelsPart(
        panel_points=points, panel_results=owners, panel_layers=layers, panel_units=units, panel_positions=positions,
        cell_offsets=np.asarray(cells, np.int32), values=np.concatenate(values) if values else np.zeros(0, np.float32),
        raw=np.concatenate(raw) if raw else np.zeros(0, np.float32),
        spread=np.concatenate(spread) if spread else np.zeros(0, np.float32),
        top_offsets=np.asarray(tops, np.int32), top_vocab=np.searchsorted(vocab_ids, all_ids).astype(np.int32),
        top_probs=np.concatenate(top_probs) if top_probs else np.zeros((0, TOP_K), np.float32),
        vocab=[str(token_text[int(i)]) for i in vocab_ids],
    )  # fmt: skip


def patching_data(
    layout: TokenLayout,
    corrupt_tokens: Sequence[str],
    panels: PatchingPanelsPart,
    runs: PatchingRunsPart,
    *,
    agreement: PatchingAgreementPart | None = None,
    answer: str = "",
    foil: str = "",
    n_pairs: int = 1,
    model_name: str = "",
) -> PatchingData:
    """The patching view's data: the clean prompt's :class:`~interp_widgets.text_units.TokenLayout`, the corrupt
    tokens, the packed panels (:func:`patching_panels`), the results shown and their agreement.

    Example:
        >>> data = demo_patching_data()
        >>> data.tokens, data.corrupt_tokens, data.result_directions
        (['The', ' <b>', ' is', ' in'], ['The', ' &amp;', ' is', ' in'], ['denoise'])
    """
    if len(corrupt_tokens) != len(layout.tokens):
        raise ValueError(
            f"the corrupt prompt has {len(corrupt_tokens)} tokens and the clean one {len(layout.tokens)}; pass a pair "
            "of equal token length"
        )
    special = np.asarray(layout.special_mask, dtype=bool)
    return PatchingData(
        layout=TokenLayoutPart(tokens=list(layout.tokens), spaces_before=_spaces_before(layout.text, layout.offsets,
                               special), special_mask=special, word_ids=layout.word_ids,
                               sentence_ids=layout.sentence_ids),
        corrupt_tokens=[str(t) for t in corrupt_tokens], panels=panels, runs=runs,
        agreement=agreement or PatchingAgreementPart(), answer=str(answer), foil=str(foil), n_pairs=int(n_pairs),
        model_name=str(model_name),
    )  # fmt: skip


def demo_patching_data(noise: bool = False, heads: bool = False) -> PatchingData:
    """A small synthetic :class:`PatchingData` (3 layers × 4 positions of resid_pre, with markup in the tokens; with
    ``heads``, also a 3 layers × 2 heads × 4 positions panel), for examples and tests.

    Example:
        >>> demo_patching_data(heads=True).panel_points
        ['resid_pre', 'head']
    """
    from types import SimpleNamespace as NS

    tokens, corrupt = ["The", " <b>", " is", " in"], ["The", " &amp;", " is", " in"]
    text = "".join(tokens)
    starts = np.cumsum([0] + [len(t) for t in tokens])
    layout = TokenLayout(text=text, tokens=tokens, offsets=list(zip(starts[:-1], starts[1:])),
                         special_mask=[False] * 4)  # fmt: skip
    rng = np.random.default_rng(0)

    def panel(point, units):
        shape = (3, len(units), 4)
        values = np.round(rng.uniform(-0.2, 1.1, shape), 3).astype(np.float32)
        ids = rng.integers(0, 6, (*shape, TOP_K))
        probs = np.sort(rng.dirichlet(np.ones(TOP_K + 1), shape)[..., :TOP_K], axis=-1)[..., ::-1]
        return NS(point=point, layers=[0, 1, 2], units=units, positions=tokens, values=values,
                  raw=2.0 + 3.0 * values, spread=np.zeros(shape, np.float32), top_ids=ids, top_probs=probs)  # fmt: skip

    panels = [panel("resid_pre", ["stream"])] + ([panel("head", ["H0", "H1"])] if heads else [])
    text_of = {i: t for i, t in enumerate([" Paris", " Rome", "<img src=x onerror=alert(1)>", " the", "\n", " a"])}
    runs = PatchingRunsPart(result_labels=["exact"], result_methods=["exact"],
                            result_directions=["noise" if noise else "denoise"], result_metrics=["logit_diff"],
                            clean_metrics=[5.0], corrupt_metrics=[2.0])  # fmt: skip
    return patching_data(layout, corrupt, patching_panels([panels], text_of, n_positions=4), runs, answer=" Paris",
                         foil=" Rome", model_name="demo")  # fmt: skip


def _cell_rgb_hex(value: float, max_abs: float) -> tuple[str, str]:
    if not math.isfinite(value):
        return "#eeeeee", "#1f2328"
    return score_colours(value, max_abs)


class PatchingView(InterpWidget, data=PatchingData):
    """Heatmaps of a patching result (build it with ``PatchingResult.widget()``, or from a
    :class:`~interp_widgets.widgets.view_data.PatchingData`).

    Example:
        >>> view = PatchingView(demo_patching_data(noise=True), scale="raw")
        >>> view.scale, "low = important" in view.static_svg(), "<b>" in view.static_svg()
        ('raw', True, False)
    """

    scale = traitlets.Enum(SCALES, "normalised", help="Colour and hover by the normalised or the raw metric.").tag(
        sync=True
    )
    selected_cell = traitlets.List(
        traitlets.Int(), [], help="The clicked cell [panel, layer, unit, position] ([]: none)."
    ).tag(sync=True)
    unit_position = traitlets.Int(
        -1, help="Position shown by the layers × heads grids when every position was patched (-1: the last)."
    ).tag(sync=True)

    def __init__(self, data: PatchingData | None = None, **kwargs: Any):
        full = None
        if data is not None:
            if not isinstance(data, PatchingData):
                raise TypeError(
                    f"PatchingView takes PatchingData, got {type(data).__name__}; use PatchingResult.widget()"
                )
            traits = data.to_traits()
            cells = int(data.cell_offsets[-1]) if len(data.cell_offsets) else 0
            if cells > PATCHING_STORED_CELLS and len(data.top_vocab):
                # too many cells to keep every top-5 in the notebook: the kernel answers a click instead
                full = (np.asarray(data.top_offsets), np.asarray(data.top_vocab), np.asarray(data.top_probs),
                        list(data.vocab))  # fmt: skip
                traits.update(
                    top_offsets=np.zeros(len(data.top_offsets), np.int32), top_vocab=np.zeros((0, TOP_K), np.int32),
                    top_probs=np.zeros((0, TOP_K), np.float32), vocab=[],
                    top_note=f"{cells:,} cells (over {PATCHING_STORED_CELLS:,}): the top-5 tokens of a cell are not "
                             "stored in the view; the kernel sends them on click (it is needed for them).",
                )  # fmt: skip
            kwargs = {**traits, **kwargs}
        super().__init__(**kwargs)
        self._full_top = full
        self.on_msg(self._on_message)

    @traitlets.validate("selected_cell")
    def _check_selected(self, proposal):
        value = list(proposal["value"])
        if value and (len(value) != 4 or not 0 <= value[0] < len(self.panel_points)):
            raise traitlets.TraitError(
                f"selected_cell must be [] or [panel, layer, unit, position] with panel in 0..{len(self.panel_points) - 1}"
                f", got {value}"
            )
        return value

    # ------------------------------------------------------------------ data
    def panel_shape(self, panel: int) -> tuple[int, int, int]:
        """``(layers, units, positions)`` of a panel.

        Example:
            >>> PatchingView(demo_patching_data(heads=True)).panel_shape(1)
            (3, 2, 4)
        """
        positions = self.panel_positions[panel] or self.tokens
        return len(self.panel_layers[panel]), len(self.panel_units[panel]), len(positions)

    def panel_values(self, panel: int, raw: bool | None = None) -> np.ndarray:
        """A panel's ``(layers, units, positions)`` normalised values (or raw metrics; default: the ``scale`` shown).

        Example:
            >>> PatchingView(demo_patching_data()).panel_values(0, raw=True).shape
            (3, 1, 4)
        """
        raw = self.scale == "raw" if raw is None else raw
        start, end = int(self.cell_offsets[panel]), int(self.cell_offsets[panel + 1])
        return np.asarray((self.raw if raw else self.values)[start:end]).reshape(self.panel_shape(panel))

    def top_tokens(self, panel: int, layer: int, unit: int, position: int) -> list[tuple[str, float]]:
        """The top-5 next tokens (text, probability) of one patched run; empty for attribution patching.

        Example:
            >>> view = PatchingView(demo_patching_data())
            >>> [text for text, p in view.top_tokens(0, 2, 0, 1)][:2]
            [' the', '<img src=x onerror=alert(1)>']
        """
        L, U, P = self.panel_shape(panel)
        if not (0 <= layer < L and 0 <= unit < U and 0 <= position < P):
            raise IndexError(f"cell ({layer}, {unit}, {position}) is outside panel {panel}'s {L} × {U} × {P} cells")
        offsets, vocab_rows, probs, vocab = (
            self._full_top if self._full_top else (self.top_offsets, self.top_vocab, self.top_probs, self.vocab)
        )
        start, end = int(offsets[panel]), int(offsets[panel + 1])
        if end == start:
            return []
        row = start + (layer * U + unit) * P + position
        return [(vocab[int(i)], float(p)) for i, p in zip(vocab_rows[row], probs[row])]

    def reply(self, content: dict) -> dict:
        """The answer to the view's ``{"type": "top", "id", "panel", "layer", "unit", "position"}`` message (sent for
        a cell whose top-5 is not stored): ``{"type": "top", ..., "tokens", "probs"}``, or an ``error``.

        Example:
            >>> PatchingView(demo_patching_data()).reply({"type": "top", "id": 1, "panel": 0, "layer": 0, "unit": 0,
            ...                                           "position": 9})["error"]
            "cell (0, 0, 9) is outside panel 0's 3 × 1 × 4 cells"
        """
        keys = ("id", "panel", "layer", "unit", "position")
        base = {"type": "top", **{key: content.get(key) for key in keys}}
        try:
            top = self.top_tokens(*(int(content[key]) for key in keys[1:]))
        except (IndexError, ValueError, TypeError, KeyError) as exc:
            return {**base, "error": str(exc).strip("'\"")}
        return {**base, "tokens": [t for t, _ in top], "probs": [p for _, p in top]}

    def _on_message(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "top":
            self.send(self.reply(content))

    # ------------------------------------------------------------------ pictures
    def _column_labels(self, panel: int) -> tuple[list[str], int | None]:
        """Column labels of a panel's grid and the position it shows (None: the columns are the positions)."""
        L, U, P = self.panel_shape(panel)
        positions = self.panel_positions[panel] or self.tokens
        if U == 1:
            return list(positions), None
        p = self.unit_position if 0 <= self.unit_position < P else P - 1
        return list(self.panel_units[panel]), p

    def panel_grid(self, panel: int) -> np.ndarray:
        """The ``(layers, columns)`` grid a panel draws: positions for one unit, else units at ``unit_position``.

        Example:
            >>> PatchingView(demo_patching_data(heads=True), unit_position=0).panel_grid(1).shape
            (3, 2)
        """
        values = self.panel_values(panel)
        _, position = self._column_labels(panel)
        return values[:, 0, :] if position is None else values[:, :, position]

    def _direction(self, panel: int) -> str:
        r = self.panel_results[panel]
        return self.result_directions[r] if r < len(self.result_directions) else "denoise"

    def static_svg(self) -> str:
        """Every panel's heatmap (its first layers and columns), labelled and coloured as in the live view, escaped.

        Example:
            >>> svg = PatchingView(demo_patching_data()).static_svg()
            >>> svg.startswith("<svg"), " <b>" in svg, "&lt;b&gt;" in svg
            (True, False, True)
        """
        cw, ch, left = 48, 16, 90
        parts, y = [], 8
        scale = self.scale
        title = (f"Activation patching · {self.model_name} · answer {self.answer!r}" + (f" vs {self.foil!r}" if self.foil
                 else "") + f" · {scale} values" + (f" · {self.n_pairs} pairs" if self.n_pairs > 1 else ""))  # fmt: skip
        parts.append(f'<text x="8" y="{y + 12}" font-size="13" font-weight="bold">{escape(visible_text(title))}</text>')
        y += 24
        width = 400
        for p, point in enumerate(self.panel_points):
            r = self.panel_results[p]
            label = self.result_labels[r] if r < len(self.result_labels) else ""
            grid = self.panel_grid(p)
            L, C = grid.shape
            shown_c, shown_l = min(C, MAX_STATIC_COLUMNS), min(L, MAX_STATIC_LAYERS)
            columns, position = self._column_labels(p)
            finite = np.abs(grid[np.isfinite(grid)])
            max_abs = float(max(finite.max() if finite.size else 0.0, 1.0 if scale == "normalised" else 0.0)) or 1.0
            heading = f"{point} · {label}"
            if position is not None:
                heading += f" · position {position} {(self.panel_positions[p] or self.tokens)[position]!r}"
            if self._direction(p) == "noise":
                heading += " · noising: low = important"
            parts.append(f'<text x="8" y="{y + 12}" font-size="12">{escape(visible_text(heading))}</text>')
            y += 18
            layers = self.panel_layers[p]
            for row, l in enumerate(list(range(L))[::-1][:shown_l]):  # the last layer on top
                ty = y + row * ch
                parts.append(f'<text x="{left - 6}" y="{ty + 12}" font-size="10" text-anchor="end">'
                             f"{escape(visible_text(layers[l]))}</text>")  # fmt: skip
                for c in range(shown_c):
                    value = float(grid[l, c])
                    fill, ink = _cell_rgb_hex(value, max_abs)
                    tip = f"{point} layer {layers[l]} · {columns[c]!r}: {value:.4g}"
                    x = left + c * cw
                    parts.append(f'<rect x="{x}" y="{ty}" width="{cw - 1}" height="{ch - 1}" fill="{fill}">'
                                 f"<title>{escape(tip)}</title></rect>")  # fmt: skip
            y += shown_l * ch + 12
            for c in range(shown_c):
                parts.append(f'<text x="{left + c * cw + 2}" y="{y}" font-size="9" font-family="monospace">'
                             f"{escape(visible_text(columns[c])[:7])}</text>")  # fmt: skip
            more = [f"{n} more {what}" for n, what in ((C - shown_c, "columns"), (L - shown_l, "layers")) if n > 0]
            if more:
                y += 14
                parts.append(f'<text x="8" y="{y}" font-size="10" fill="#57606a">… {escape(", ".join(more))} in the '
                             "live widget</text>")  # fmt: skip
            y += 20
            width = max(width, left + shown_c * cw + 12)
        if self.agreement_points:
            line = "; ".join(
                f"{point}: Spearman {_fmt(s)}, top-{self.agreement_k} overlap {_fmt(o)}"
                for point, s, o in zip(self.agreement_points, self.agreement_spearman, self.agreement_overlap)
            )
            parts.append(f'<text x="8" y="{y}" font-size="11">{escape("Agreement · " + line)}</text>')
            y += 16
        height = y + 8
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(title)}" font-family="system-ui,sans-serif">'
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>' + "".join(parts) + "</svg>"
        )

    def __repr__(self) -> str:
        n = len(self.result_labels)
        L, _, P = self.panel_shape(0) if self.panel_points else (0, 0, 0)
        return (
            f"PatchingView({n} result{'s' if n != 1 else ''}, panels={self.panel_points}, {L} layers × {P} positions, "
            f"scale={self.scale!r})"
        )


def _fmt(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.3f}"
