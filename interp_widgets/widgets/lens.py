"""The lens view: a layers × positions grid of a logit (and tuned) lens.

Each cell shows the top-1 token as text, coloured by its probability, or by a target's probability or rank
(``colour_by``). Hovering a cell lists the top-k tokens with their probabilities; clicking a position plots the
targets' probability and rank across the layers. When the result holds both lenses, the logit ↔ tuned switch happens
in the browser with no kernel round trip. The grid is drawn on a canvas, only the columns in view, so 30 layers ×
1,000 positions paint at once. Token text never becomes HTML (canvas text, ``textContent``; the static SVG escapes it).

Example:
    >>> from interp_widgets.lens import logit_lens
    >>> widget = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False).widget()
    >>> widget
    LensWidget(6 positions × 2 layers, lenses=['logit'], colour_by='top1_prob')
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import numpy as np
import traitlets

from interp_widgets.widgets.view_data import LensData, LensTargetsPart, LensTopPart
from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._svg import visible_text

__all__ = ["LensWidget"]

#: Positions and layers drawn in the static picture (the live grid shows them all).
MAX_STATIC_POSITIONS = 40
MAX_STATIC_LAYERS = 48
COLOUR_BY = ("top1_prob", "target_prob", "target_rank")


def _colour(value: float) -> str:
    """White → blue for a value in [0, 1] (grey for NaN)."""
    if not math.isfinite(value):
        return "#eeeeee"
    v = min(1.0, max(0.0, value))
    r, g, b = (int(round(255 + (t - 255) * v)) for t in (33, 102, 172))
    return f"#{r:02x}{g:02x}{b:02x}"


def rank_intensity(rank: int, vocab_size: int) -> float:
    """Colour intensity of a rank: 1 for rank 1, falling with log(rank) to 0 at the vocabulary size (0: no target).

    Example:
        >>> rank_intensity(1, 1000), rank_intensity(1000, 1000), round(rank_intensity(10, 1000), 3)
        (1.0, 0.0, 0.667)
    """
    if rank <= 0:
        return float("nan")
    return max(0.0, 1.0 - math.log(rank) / math.log(max(2, vocab_size)))


class LensWidget(InterpWidget, data=LensData):
    """Layers × positions grid of a lens result (build it with ``LensResult.widget()``).

    Example:
        >>> from interp_widgets.lens import logit_lens
        >>> widget = LensWidget(logit_lens(lm, lm_tokenizer, "The room", progress=False), colour_by="target_rank")
        >>> widget.colour_by, widget.lens, widget.static_svg()[:4]
        ('target_rank', 'logit', '<svg')
    """

    lens = traitlets.Unicode("logit", help="The lens shown (logit or tuned).").tag(sync=True)
    colour_by = traitlets.Enum(
        COLOUR_BY, "top1_prob", help="Cell colour: top-1 probability, target probability or target rank."
    ).tag(sync=True)
    target = traitlets.Int(0, help="The target whose probability or rank colours the cells.").tag(sync=True)
    selected_position = traitlets.Int(-1, help="Position whose trajectory is plotted (-1: none).").tag(sync=True)
    plotted_targets = traitlets.List(traitlets.Int(), [0], help="Targets drawn in the trajectory plot.").tag(sync=True)

    def __init__(self, result: Any = None, **kwargs: Any):
        if result is not None:
            position = {int(i): k for k, i in enumerate(np.asarray(result.vocab_ids).tolist())}
            top = (
                np.vectorize(position.__getitem__, otypes=[np.int32])(result.top_ids)
                if result.top_ids.size
                else np.zeros(result.top_ids.shape, np.int32)
            )
            targets = np.asarray(result.target_ids)
            target_vocab = np.where(
                targets >= 0, np.vectorize(lambda i: position.get(int(i), -1), otypes=[np.int32])(targets), -1
            )
            data = LensData(
                tokens=list(result.tokens),
                layers=list(result.layers),
                lenses=list(result.lenses),
                vocab=list(result.vocab_text),
                top=LensTopPart(top_vocab=top, top_probs=result.top_probs, kl=result.kl),
                targets=LensTargetsPart(
                    target_labels=list(result.target_labels),
                    target_vocab=target_vocab,
                    target_probs=result.target_probs,
                    target_ranks=result.target_ranks,
                ),
                generated_mask=result.generated_mask,
                vocab_size=int(result.params.get("vocab_size", 0) or len(result.vocab_text)),
                model_name=result.model_name,
            )
            kwargs = {**data.to_traits(), **kwargs}
        super().__init__(**kwargs)

    @traitlets.validate("lens")
    def _check_lens(self, proposal):
        value = proposal["value"]
        if self.lenses and value not in self.lenses:
            raise traitlets.TraitError(f"lens must be one of {self.lenses}, got {value!r}")
        return value

    @traitlets.validate("target")
    def _check_target(self, proposal):
        value = proposal["value"]
        if self.target_labels and not 0 <= value < len(self.target_labels):
            raise traitlets.TraitError(
                f"target must be in 0..{len(self.target_labels) - 1} ({self.target_labels}), got {value}"
            )
        return value

    def cell_values(self) -> np.ndarray:
        """``(layers, positions)`` colour intensities in [0, 1] of the shown lens and ``colour_by`` (NaN: none), as the
        browser computes them.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> w = logit_lens(lm, lm_tokenizer, "The room", progress=False).widget()
            >>> w.cell_values().shape
            (2, 2)
        """
        n = self.lenses.index(self.lens) if self.lens in self.lenses else 0
        if self.colour_by == "top1_prob":
            return np.asarray(self.top_probs[n, :, :, 0], dtype=np.float64)
        if self.colour_by == "target_prob":
            return np.asarray(self.target_probs[n, :, :, self.target], dtype=np.float64)
        ranks = self.target_ranks[n, :, :, self.target]
        return np.vectorize(lambda r: rank_intensity(int(r), self.vocab_size), otypes=[np.float64])(ranks)

    def static_svg(self) -> str:
        """The grid of the first positions (top-1 token in each cell, coloured as in the live view), escaped.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> svg = LensWidget(logit_lens(lm, lm_tokenizer, "<b>&", progress=False)).static_svg()
            >>> "<b>" in svg, "&lt;b&gt;" in svg or "&lt;" in svg
            (False, True)
        """
        n = self.lenses.index(self.lens) if self.lens in self.lenses else 0
        values = self.cell_values()
        L, T = values.shape
        shown_t, shown_l = min(T, MAX_STATIC_POSITIONS), min(L, MAX_STATIC_LAYERS)
        cw, ch, left, top = 54, 18, 130, 40
        width = left + shown_t * cw + 12
        height = top + (shown_l + 1) * ch + 40
        label = {"top1_prob": "top-1 probability", "target_prob": "probability of", "target_rank": "rank of"}[
            self.colour_by
        ]
        if self.colour_by != "top1_prob" and self.target_labels:
            label += f" {self.target_labels[self.target]}"
        title = f"{self.lens} lens · {self.model_name} · colour: {label}"
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(title)}" font-family="system-ui,sans-serif">',
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text x="8" y="18" font-size="13" font-weight="bold">{escape(visible_text(title))}</text>',
        ]
        layer_rows = list(range(L))[::-1][:shown_l]  # the last layer on top
        for r, l in enumerate(layer_rows):
            y = top + r * ch
            parts.append(
                f'<text x="{left - 6}" y="{y + 13}" font-size="11" text-anchor="end">{escape(self.layers[l])}</text>'
            )
            for t in range(shown_t):
                word = self.vocab[int(self.top_vocab[n, l, t, 0])]
                value = values[l, t]
                fill = _colour(value)
                ink = "#ffffff" if math.isfinite(value) and value > 0.6 else "#1f2328"
                x = left + t * cw
                tip = f"{self.layers[l]} · position {t}: {word!r} p={float(self.top_probs[n, l, t, 0]):.3f}"
                parts.append(
                    f'<rect x="{x}" y="{y}" width="{cw - 1}" height="{ch - 1}" fill="{fill}">'
                    f"<title>{escape(tip)}</title></rect>"
                    f'<text x="{x + 3}" y="{y + 13}" font-size="10" fill="{ink}" font-family="monospace">'
                    f"{escape(visible_text(word)[:7])}</text>"
                )
        y = top + shown_l * ch + 14
        for t in range(shown_t):
            token = visible_text(self.tokens[t])[:7]
            weight = ' font-style="italic"' if bool(self.generated_mask[t]) else ""
            parts.append(
                f'<text x="{left + t * cw + 3}" y="{y}" font-size="10" font-family="monospace"{weight}>'
                f"{escape(token)}</text>"
            )
        more = []
        if T > shown_t:
            more.append(f"{T - shown_t} more positions")
        if L > shown_l:
            more.append(f"{L - shown_l} more layers")
        if more:
            parts.append(
                f'<text x="8" y="{y + 22}" font-size="11" fill="#57606a">… {escape(", ".join(more))} in '
                "the live widget</text>"
            )
        parts.append("</svg>")
        return "".join(parts)

    def __repr__(self) -> str:
        return (
            f"LensWidget({len(self.tokens)} positions × {len(self.layers)} layers, lenses={self.lenses}, "
            f"colour_by={self.colour_by!r})"
        )
