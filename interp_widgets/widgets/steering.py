"""The steering view: a steering run's generations side by side and its dose-response chart.

For each scale, the greedy continuation is a column, its tokens that differ from the unsteered run's (at the same
place) marked; the chart plots the behaviour metric (mean over the eval prompts, with a ± one-spread band) and the
damage (KL(unsteered ‖ steered) on held-out text) against the scale. Scales are toggled with buttons (keyboard
accessible): a hidden scale leaves the columns and is drawn hollow in the chart. Token text never becomes HTML
(``textContent`` in the browser; the static SVG escapes it).

Example:
    >>> from interp_widgets.interventions import steer
    >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 2], max_new_tokens=3,
    ...                damage_texts=texts, damage_tokens=16, progress=False)
    >>> result.widget()  # doctest: +ELLIPSIS
    SteeringView(layer:1, scales [0.0, 2.0], ...)
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import numpy as np
import traitlets

from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._svg import visible_text
from interp_widgets.widgets.view_data import DoseResponsePart, SteeringData, SteeringGenerationsPart

__all__ = ["SteeringView"]

MAX_STATIC_SCALES = 8  # generation columns drawn in the static picture
MAX_STATIC_TOKENS = 24  # tokens per column drawn in the static picture


class SteeringView(InterpWidget, data=SteeringData):
    """Generations per scale and the dose-response of a :class:`~interp_widgets.interventions.SteeringResult`
    (build it with ``result.widget()``).

    Example:
        >>> from interp_widgets.interventions import steer
        >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 2], max_new_tokens=3,
        ...                damage_texts=texts, damage_tokens=16, progress=False)
        >>> view = SteeringView(result, hidden_scales=[1])
        >>> view.hidden_scales, view.static_svg()[:4]
        ([1], '<svg')
    """

    hidden_scales = traitlets.List(traitlets.Int(), [], help="Indices of the scales hidden by the user.").tag(sync=True)

    def __init__(self, result: Any = None, **kwargs: Any):
        if result is not None:
            n = len(result.scales)
            nan = np.full(n, np.nan)
            g = result.generations
            data = SteeringData(
                prompt=result.run.prompt,
                layer=result.run.layer,
                scale_meaning=result.run.scale_meaning,
                generations=SteeringGenerationsPart(
                    prompt_tokens=list(g.prompt_tokens),
                    unsteered_tokens=list(g.unsteered),
                    steered_tokens=[list(tokens) for tokens in g.steered],
                    changed=[g.changed(k).tolist() for k in range(n)],
                ),
                dose=DoseResponsePart(
                    scales=result.scales,
                    metric_mean=nan if result.metric is None else result.metric.mean,
                    metric_spread=nan if result.metric is None else result.metric.spread,
                    damage=result.damage,
                    metric_name="" if result.metric is None else result.metric.name,
                ),
                damage_tokens=int(result.run.damage_tokens),
                positions=result.run.positions,
            )
            kwargs = {**data.to_traits(), **kwargs}
        super().__init__(**kwargs)

    @traitlets.validate("hidden_scales")
    def _check_hidden(self, proposal):
        value = sorted(set(proposal["value"]))
        n = len(self.steered_tokens)
        bad = [k for k in value if not 0 <= k < n]
        if bad and n:
            raise traitlets.TraitError(f"hidden_scales must be indices of the {n} scales (0..{n - 1}), got {bad}")
        return value

    def shown(self) -> list[int]:
        """Indices of the scales shown (not hidden).

        Example:
            >>> from interp_widgets.interventions import steer
            >>> result = steer(lm, lm_tokenizer, "The room", torch.ones(32), "layer:1", scales=[0, 2, 4], max_new_tokens=2,
            ...                damage_texts=texts, damage_tokens=16, progress=False)
            >>> SteeringView(result, hidden_scales=[0]).shown()
            [1, 2]
        """
        return [k for k in range(len(self.steered_tokens)) if k not in set(self.hidden_scales)]

    def static_svg(self) -> str:
        """The dose-response chart and the shown scales' generations (changed tokens in bold), escaped.

        Example:
            >>> from interp_widgets.interventions import steer
            >>> result = steer(lm, lm_tokenizer, "<b>&", torch.ones(32), "layer:1", scales=[0, 2], max_new_tokens=2,
            ...                damage_texts=texts, damage_tokens=16, progress=False)
            >>> svg = SteeringView(result).static_svg()
            >>> "<b>" in svg, "&lt;b&gt;" in svg
            (False, True)
        """
        shown = self.shown()[:MAX_STATIC_SCALES]
        scales = np.asarray(self.scales, dtype=np.float64)
        cw, left, chart_h, line = 150, 12, 150, 16
        width = max(620, left + max(1, len(shown)) * cw + 12)
        rows = min(MAX_STATIC_TOKENS, max([len(self.unsteered_tokens)] + [len(self.steered_tokens[k]) for k in shown]))
        height = 60 + chart_h + 40 + (rows + 2) * line + 24
        title = f"steering at {self.layer}: {self.prompt}"
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(title)}" font-family="system-ui,sans-serif">',
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text x="8" y="18" font-size="13" font-weight="bold">{escape(visible_text(title)[:120])}</text>',
            f'<text x="8" y="34" font-size="11" fill="#57606a">{escape(self.scale_meaning)}</text>',
        ]
        parts += self._chart_svg(scales, 44, 300, chart_h, "metric", self.metric_mean, self.metric_spread)
        parts += self._chart_svg(scales, 44 + 310, 300, chart_h, "damage", self.damage, None)
        y0 = 60 + chart_h + 40
        for c, k in enumerate(shown):
            x = left + c * cw
            parts.append(f'<text x="{x}" y="{y0}" font-size="12" font-weight="bold">scale {scales[k]:g}</text>')
            for i, token in enumerate(self.steered_tokens[k][:rows]):
                mark = self.changed[k][i] if i < len(self.changed[k]) else False
                style = ' font-weight="bold" fill="#cf222e"' if mark else ""
                parts.append(
                    f'<text x="{x}" y="{y0 + (i + 1) * line}" font-size="11" font-family="monospace"{style}>'
                    f"{escape(visible_text(token).replace(chr(10), '⏎')[:20])}</text>"
                )
        parts.append(
            f'<text x="8" y="{height - 8}" font-size="11" fill="#57606a">bold red: tokens that differ from the '
            f"unsteered run · {len(self.steered_tokens) - len(shown)} scale(s) not drawn</text>"
        )
        parts.append("</svg>")
        return "".join(parts)

    def _chart_svg(self, scales, x0, w, h, name, values, spread) -> list[str]:
        values = np.asarray(values, dtype=np.float64)
        label = (self.metric_name or "no metric") if name == "metric" else "damage: KL(unsteered ‖ steered)"
        out = [f'<text x="{x0}" y="52" font-size="11">{escape(label[:48])}</text>']
        finite = np.isfinite(values)
        if not finite.any() or len(scales) == 0:
            return out
        lo_v, hi_v = values[finite], values[finite]
        if spread is not None:
            s = np.nan_to_num(np.asarray(spread, dtype=np.float64))
            lo_v, hi_v = (values - s)[finite], (values + s)[finite]
        lo, hi = float(lo_v.min()), float(hi_v.max())
        hi = hi if hi > lo else lo + 1.0
        s_lo, s_hi = float(scales.min()), float(scales.max())
        s_hi = s_hi if s_hi > s_lo else s_lo + 1.0
        top = 60

        def xy(s, v):
            return x0 + 30 + (s - s_lo) / (s_hi - s_lo) * (w - 40), top + (1 - (v - lo) / (hi - lo)) * (h - 10)

        out.append(f'<rect x="{x0 + 30}" y="{top}" width="{w - 40}" height="{h - 10}" fill="none" stroke="#d0d7de"/>')
        order = np.argsort(scales)
        points = [xy(scales[k], values[k]) for k in order if math.isfinite(values[k])]
        out.append(
            '<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>'.format(
                "#0b62d6" if name == "metric" else "#d1242f", " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            )
        )
        for x, y in points:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#1f2328"/>')
        out.append(f'<text x="{x0 + 26}" y="{top + 8}" font-size="9" text-anchor="end">{hi:.3g}</text>')
        out.append(f'<text x="{x0 + 26}" y="{top + h - 10}" font-size="9" text-anchor="end">{lo:.3g}</text>')
        return out

    def __repr__(self) -> str:
        scales = np.asarray(self.scales, dtype=np.float64).tolist()
        return (
            f"SteeringView({self.layer}, scales {scales}, metric={self.metric_name or None!r}, "
            f"{len(self.hidden_scales)} hidden)"
        )
