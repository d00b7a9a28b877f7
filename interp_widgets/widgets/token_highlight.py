"""Token attribution highlighter: coloured tokens, class selector, legend, tooltips, token/word/sentence/turn views.

Example:
    >>> widget = TokenHighlightWidget.from_arrays(
    ...     "Not bad.", ["Not", "bad", "."], [(0, 3), (4, 7), (7, 8)], [[0.4, -0.2, 0.1]], target_labels=["positive"]
    ... )
    >>> widget.spaces_before
    ['', ' ', '']
"""

from __future__ import annotations

import html
import json
import math
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import traitlets

from interp_widgets.widgets._colour import MID, format_score, hex_colour, legend_stops, score_colours
from interp_widgets.widgets._svg import SvgFigure
from interp_widgets.widgets.view_data import TokenHighlightData
from interp_widgets.widgets._tokens import (
    shown_target,
    ROLE_BACKGROUND,
    ROLE_COLOUR,
    ChatTurns,
    GroupedTokens,
    TokenScoresWidget,
    display_token,
    finite_max,
    magnitude_ranks,
    role_piece,
    token_pieces,
    token_data,
    unit_sums,
)


class TokenHighlightWidget(TokenScoresWidget, GroupedTokens, ChatTurns, data=TokenHighlightData):
    """Tokens coloured by signed attribution, with a class selector, legend, tooltips and keyboard navigation.

    Takes an attribution result (``interp_widgets.attribution.AttributionResult``, or any object with a
    :class:`~interp_widgets.text_units.TokenLayout` ``layout`` and ``scores``, or with ``text``, ``tokens``,
    ``offsets``, ``scores`` and optionally ``special_mask``, ``word_ids``, ``sentence_ids``, ``turn_ids``,
    ``turn_roles``; either optionally with ``target_labels``, ``target_probs``, ``method``, ``score_meaning``,
    ``completeness_error``). The class shown, the granularity (``"token"``, ``"word"``, ``"sentence"``, ``"turn"``; sums
    computed in the browser), whether special tokens show, and the selected / hovered token sync both ways with the
    browser. A chat conversation's turns start with their role's label; the template's own tokens are special
    tokens, folded away unless ``show_special_tokens`` (then greyed).

    Example:
        >>> from interp_widgets.attribution import Saliency
        >>> both = Saliency().attribute(model, tokenizer, "Not bad at all, honestly.", target=["negative", "positive"])
        >>> widget = TokenHighlightWidget(both, granularity="word")  # shows the most probable class first
        >>> widget.target_labels, widget.selected_target
        (['negative', 'positive'], 1)
        >>> widget.selected_target = 0
        >>> widget  # doctest: +ELLIPSIS
        TokenHighlightWidget(method='saliency', 9 tokens, class='negative' p=0.154 of [...], top: '.' +3.75, 'Not' +1.53, ...)
        >>> widget.export_html(getfixture("tmp_path") / "explanation.html").name
        'explanation.html'
    """

    shared_scale = traitlets.Bool(False, help="One colour scale for all targets instead of one per target.").tag(
        sync=True
    )
    high_contrast = traitlets.Bool(False, help="Stronger colours, black/white text and framed tokens.").tag(sync=True)
    selected_target = traitlets.Int(0, help="Row of scores on display; the class selector writes it.").tag(sync=True)
    show_special_tokens = traitlets.Bool(False).tag(sync=True)

    def __init__(
        self,
        result: Any,
        *,
        selected_target: int | str | None = None,
        granularity: str = "token",
        show_special_tokens: bool = False,
        **kwargs: Any,
    ) -> None:
        data = token_data(result)
        target = shown_target(selected_target, data.target_labels, data.target_probs)
        super().__init__(
            **data.to_traits(),
            selected_target=target,
            granularity=granularity,
            show_special_tokens=show_special_tokens,
            **kwargs,
        )

    @classmethod
    def from_arrays(
        cls,
        text: str,
        tokens: Sequence[str],
        offsets: Any,
        scores: Any,
        *,
        special_mask: Any = None,
        word_ids: Any = None,
        sentence_ids: Any = None,
        target_labels: Sequence[str] | None = None,
        target_probs: Any = None,
        method: str = "",
        score_meaning: str = "",
        completeness_error: Any = None,
        turn_ids: Any = None,
        turn_roles: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> "TokenHighlightWidget":
        """Build the widget from plain arrays instead of an attribution result.

        ``scores`` is ``(n_targets, n_tokens)`` or ``(n_tokens,)``; word ids default to whitespace-separated words,
        sentence ids to one sentence. Extra keyword arguments go to the constructor (``granularity=`` …).

        Example:
            >>> w = TokenHighlightWidget.from_arrays("a b", ["a", "b"], [(0, 1), (2, 3)], [1.0, -1.0])
            >>> w.target_labels
            ['target 0']
        """
        result = SimpleNamespace(
            text=text, tokens=list(tokens), offsets=offsets, scores=scores, special_mask=special_mask,
            word_ids=word_ids, sentence_ids=sentence_ids, target_labels=target_labels, target_probs=target_probs,
            method=method, score_meaning=score_meaning, completeness_error=completeness_error, turn_ids=turn_ids,
            turn_roles=turn_roles,
        )  # fmt: skip
        return cls(result, **kwargs)

    def set_result(self, result: Any) -> None:
        """Show another result in this widget (one message to the browser); keeps the target if it still exists.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> widget = TokenHighlightWidget(result)
            >>> widget.set_result(Saliency().attribute(model, tokenizer, "Awful service."))
            >>> widget.tokens
            ['[CLS]', 'Awful', 'service', '.', '[SEP]']
        """
        data = token_data(result)
        keep = self.selected_target if self.selected_target < len(data.target_labels) else None
        target = shown_target(keep, data.target_labels, data.target_probs)
        with self.hold_sync(), self.hold_trait_notifications():
            for name, value in data.to_traits().items():
                setattr(self, name, value)
            self.selected_target, self.selected_token, self.hovered_token = target, -1, -1

    # ----------------------------------------------------------------- validation
    @traitlets.validate("selected_target")
    def _check_target(self, proposal):
        n = len(self.target_labels)
        if not 0 <= proposal["value"] < n:
            raise ValueError(f"selected_target {proposal['value']} is out of range; there are {n} targets (0..{n - 1})")
        return proposal["value"]

    # ----------------------------------------------------------------- views of the state

    def units(self) -> list[list[int]]:
        """Token indices of each displayed unit for the current granularity (the same grouping as the JS view).

        Example:
            >>> widget = TokenHighlightWidget.from_arrays(
            ...     "Not bad.", ["Not", "bad", "."], [(0, 3), (4, 7), (7, 8)], [0.4, -0.2, 0.1]
            ... )
            >>> widget.units()
            [[0], [1], [2]]
            >>> widget.granularity = "word"; widget.units()  # "bad." is one whitespace-separated word
            [[0], [1, 2]]
        """
        return self._group(self.show_special_tokens)

    def unit_scores(self) -> np.ndarray:
        """Score of each displayed unit for the selected target: sums, skipping NaN (NaN if all are).

        Example:
            >>> widget = TokenHighlightWidget.from_arrays(
            ...     "Not bad.", ["Not", "bad", "."], [(0, 3), (4, 7), (7, 8)], [0.4, -0.2, 0.1], granularity="word"
            ... )
            >>> widget.unit_scores().round(2)
            array([ 0.4, -0.1])
        """
        return unit_sums(self.units(), self.score_matrix())[self.selected_target]

    def scale_max(self) -> float:
        """Largest |unit score| the colours are scaled to: of the selected target, or of all targets if shared, over
        content units (special and template tokens, hidden or greyed, do not count).

        Example:
            >>> widget = TokenHighlightWidget(result)
            >>> round(widget.scale_max(), 2)  # the largest |score|, of '.'
            1.29
            >>> widget.granularity = "sentence"; round(widget.scale_max(), 2)  # the whole sentence's sum
            4.84
        """
        units = self.units()
        sums = unit_sums(units, self.score_matrix())
        # content units only: shown special (template) tokens are greyed and do not set the scale
        content = [u for u, unit in enumerate(units) if not self.special_mask[unit[0]]]
        sums = sums[:, content] if content else sums
        return finite_max(sums if self.shared_scale else sums[self.selected_target])

    def _unit_text(self, unit: list[int]) -> str:
        return "".join((self.spaces_before[i] if k else "") + self.tokens[i] for k, i in enumerate(unit))

    # ----------------------------------------------------------------- display
    def static_html(self) -> str:
        """Coloured spans, legend and class line in plain HTML with inline styles (no script, text escaped).

        Example:
            >>> page = TokenHighlightWidget(result).static_html()
            >>> "<span" in page, "<script" in page, "class <b>positive</b> (63.0%)" in page
            (True, False, True)
        """
        units, sums, max_abs = self.units(), self.unit_scores(), self.scale_max()
        ranks, order = magnitude_ranks(sums), [i for i in range(len(sums)) if not math.isnan(sums[i])]
        roles = self.role_starts(units)
        pieces = []
        for u, unit in enumerate(units):
            gap = self.spaces_before[unit[0]]
            if u in roles:
                pieces.append(
                    ("<br>" if pieces else "") + f'<span style="background-color:{ROLE_BACKGROUND};color:'
                    f'{ROLE_COLOUR};border-radius:3px;padding:1px 4px;font-size:12px;font-weight:bold">'
                    f"{html.escape(roles[u])}</span> "
                )
                gap = gap.lstrip("\r\n")
            text = self._unit_text(unit)
            score = float(sums[u])
            if math.isnan(score):
                background, colour = hex_colour(MID), "#000000"
                note = "score none (this class does not see it)"
            else:
                background, colour = score_colours(score, max_abs, self.signed)
                note = f"score {format_score(score, 6, self.signed)}, rank {ranks[u]} of {len(order)}"
            title = f"{json.dumps(text, ensure_ascii=False)}: {note}"
            grey = ";opacity:0.6;font-style:italic" if self.special_mask[unit[0]] else ""  # template / special tokens
            pieces.append(
                html.escape(gap)
                + f'<span style="background-color:{background};color:{colour};border-radius:3px;padding:1px 1px{grey}" '
                f'title="{html.escape(title)}">{html.escape(display_token(text))}</span>'
            )
        target = self.selected_target
        label = self.target_labels[target]
        prob = self.target_probs[target] if self.target_probs else None
        others = [
            f"{html.escape(other)}" + (f" ({100 * p:.1f}%)" if p is not None else "")
            for i, (other, p) in enumerate(
                zip(self.target_labels, self.target_probs or [None] * len(self.target_labels))
            )
            if i != target
        ]
        header = f"class <b>{html.escape(label)}</b>" + (f" ({100 * prob:.1f}%)" if prob is not None else "")
        if others:
            header += " · other classes: " + ", ".join(others)
        details = [
            f"method: {html.escape(self.method)}" if self.method else "",
            f"score: {html.escape(self.score_meaning)}" if self.score_meaning else "",
            f"granularity: {html.escape(self.granularity)}",
        ]
        if self.completeness_error and self.completeness_error[target] is not None:
            details.append(f"completeness error: {format_score(self.completeness_error[target])}")
        stops = legend_stops() if self.signed else legend_stops()[2:]
        swatches = "".join(
            f'<span style="display:inline-block;width:28px;height:10px;background-color:{colour}"></span>'
            for colour in stops
        )
        per = "" if self.granularity == "token" else f" (sum per {html.escape(self.granularity)})"
        low, high = (
            (format_score(-max_abs), format_score(max_abs, sign=True)) if self.signed else ("0", format_score(max_abs))
        )
        meaning = "blue = negative, orange = positive, pale = near 0" if self.signed else "pale = 0, orange = large"
        legend = (
            f'<div style="margin-top:6px;font-size:12px">attribution{per}: {low} {swatches} {high} · {meaning}</div>'
        )
        return (
            '<div class="iw-static iw-token-highlight" style="font-family:system-ui,-apple-system,\'Segoe UI\','
            'sans-serif;font-size:14px;max-width:100%">'
            f'<div style="font-size:12px;margin-bottom:4px">{header}</div>'
            f'<div style="white-space:pre-wrap;line-height:1.9">{"".join(pieces)}</div>'
            f"{legend}"
            f'<div style="font-size:12px">{" · ".join(d for d in details if d)}</div>'
            "</div>"
        )

    def static_svg(self) -> str:
        """The current view as a standalone SVG: class line, coloured tokens, numeric legend, method line.

        Example:
            >>> svg = TokenHighlightWidget(result).static_svg()
            >>> svg.startswith("<svg"), 'aria-label="Token attribution for class positive"' in svg
            (True, True)
        """
        units, sums, max_abs = self.units(), self.unit_scores(), self.scale_max()
        target = self.selected_target
        probs = self.target_probs or [None] * len(self.target_labels)
        classes = [
            f"{label}" + (f" ({100 * p:.1f}%)" if p is not None else "") for label, p in zip(self.target_labels, probs)
        ]
        figure = SvgFigure(label=f"Token attribution for class {self.target_labels[target]}")
        header = f"class {classes[target]}"
        others = [c for i, c in enumerate(classes) if i != target]
        figure.text(header + (" · other classes: " + ", ".join(others) if others else ""), bold=True)
        pieces, omitted = token_pieces(
            self.tokens, self.spaces_before, units, sums, max_abs, self.signed, special=self.special_mask
        )
        roles = self.role_starts(units[: len(pieces)])
        for u in sorted(roles, reverse=True):  # a role label before each turn's first unit, on a line of its own
            pieces[u].gap = pieces[u].gap.lstrip("\r\n") or " "
            pieces.insert(u, role_piece(roles[u], first=u == 0))
        figure.tokens(pieces, omitted=omitted)
        per = "" if self.granularity == "token" else f" (sum per {self.granularity})"
        scale = ", scale shared by all classes" if self.shared_scale else ""
        figure.legend(max_abs, signed=self.signed, title=f"attribution{per}{scale}")
        details = [
            f"method: {self.method}" if self.method else "",
            f"score: {self.score_meaning}" if self.score_meaning else "",
        ]
        if self.completeness_error and self.completeness_error[target] is not None:
            details.append(f"completeness error: {format_score(self.completeness_error[target])}")
        if any(details):
            figure.text(" · ".join(d for d in details if d), size=11, colour="#57606a")
        return figure.render()

    def __repr__(self) -> str:
        target = self.selected_target
        prob = self.target_probs[target] if self.target_probs else None
        row = self.score_matrix()[target].astype(np.float64)
        special = self.special_mask
        candidates = [i for i in range(len(self.tokens)) if not special[i] and not math.isnan(row[i])]
        top = sorted(candidates, key=lambda i: -abs(row[i]))[:3]
        top_text = ", ".join(f"{self.tokens[i]!r} {format_score(row[i], sign=True)}" for i in top)
        prob_text = f" p={prob:.3f}" if prob is not None else ""
        return (
            f"TokenHighlightWidget(method={self.method!r}, {len(self.tokens)} tokens, "
            f"class={self.target_labels[target]!r}{prob_text} of {self.target_labels}, top: {top_text})"
        )
