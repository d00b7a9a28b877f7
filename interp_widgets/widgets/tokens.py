"""Token attribution highlighter: coloured tokens, class selector, legend, tooltips, token/word/sentence views.

Example:
    >>> from types import SimpleNamespace
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

from interp_widgets.widgets._base import InterpWidget, array_to_buffer, buffer_to_array
from interp_widgets.widgets._colour import MID, format_score, hex_colour, legend_stops, score_colours
from interp_widgets.widgets._svg import MAX_STATIC_TOKENS, SvgFigure, TokenPiece, unseen_colours

GRANULARITIES = ("token", "word", "sentence")
_WHITESPACE_MARKERS = {" ": "\u00b7", "\n": "\u21b5\n", "\r": "\u240d", "\t": "\u2192"}
_DATA_TRAITS = ("tokens", "spaces_before", "special_mask", "word_ids", "sentence_ids", "scores", "target_labels",
                "target_probs", "completeness_error", "method", "score_meaning", "signed")
ENCODINGS = ("colour", "underline")


def display_token(text: str) -> str:
    """Token text as drawn: whitespace-only tokens get visible markers, the empty token is "∅" (as in the JS view).

    Example:
        >>> display_token("\\t")
        '→'
    """
    if text == "":
        return "\u2205"
    if text.strip():
        return text
    return "".join(_WHITESPACE_MARKERS.get(ch, "\u00b7") for ch in text)


def _per_token(result: Any, name: str, n: int, dtype, default) -> np.ndarray:
    value = getattr(result, name, None)
    array = np.asarray(default if value is None else value)
    if array.shape != (n,):
        raise ValueError(f"{name} has shape {array.shape} but there are {n} tokens; pass one entry per token")
    return array.astype(dtype)


def _per_target(result: Any, name: str, n_targets: int) -> list[float | None]:
    value = getattr(result, name, None)
    if value is None:
        return []
    values = np.asarray(value, dtype=np.float64).reshape(-1)
    if values.shape != (n_targets,):
        raise ValueError(f"{name} has {values.size} entries for {n_targets} targets; pass one per target or None")
    return [float(v) if math.isfinite(v) else None for v in values]


def check_granularity(value: str) -> str:
    """``value`` if it is a granularity the views know, else a ValueError naming the choices.

    Example:
        >>> check_granularity("word")
        'word'
    """
    if value not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {value!r}")
    return value


def narrowest_ints(values: np.ndarray) -> np.ndarray:
    """``values`` as the narrowest of int8, int16 and int32 that holds them (ids travel in fewer bytes).

    Example:
        >>> narrowest_ints(np.array([-1, 0, 300])).dtype
        dtype('int16')
    """
    values = np.asarray(values, dtype=np.int64)
    for dtype in (np.int8, np.int16):
        info = np.iinfo(dtype)
        if values.size == 0 or (values.min() >= info.min and values.max() <= info.max):
            return values.astype(dtype)
    return values


def _spaces_before(text: str, offsets: np.ndarray, special: np.ndarray) -> list[str]:
    spaces, previous_end = [], 0
    for (start, end), is_special in zip(offsets.tolist(), special.tolist()):
        if is_special:
            spaces.append("")
            continue
        spaces.append(text[previous_end:start] if start > previous_end else "")
        previous_end = max(previous_end, end)
    return spaces


def _default_word_ids(spaces: list[str], special: np.ndarray) -> np.ndarray:
    """A new word starts after whitespace or a special token (used when the result has no word ids)."""
    ids, word, previous_special = np.full(len(spaces), -1, dtype=np.int64), -1, True
    for i, (gap, is_special) in enumerate(zip(spaces, special.tolist())):
        if is_special:
            previous_special = True
            continue
        if gap or previous_special:
            word += 1
        ids[i], previous_special = word, False
    return ids


def group_units(special: np.ndarray, ids: np.ndarray | None, show_special: bool) -> list[list[int]]:
    """Token indices of each displayed unit: runs of tokens sharing an id (``ids=None``: one token per unit).

    Special tokens are units of their own, or hidden unless ``show_special``; the same grouping as the JS view.

    Example:
        >>> group_units(np.array([True, False, False]), np.array([-1, 0, 0]), False)
        [[1, 2]]
    """
    units: list[list[int]] = []
    previous = None
    for i, is_special in enumerate(np.asarray(special, bool).tolist()):
        if is_special and not show_special:
            continue
        unit_id = None if ids is None or is_special or ids[i] < 0 else int(ids[i])
        if unit_id is not None and unit_id == previous:
            units[-1].append(i)
        else:
            units.append([i])
        previous = unit_id
    return units


def unit_sums(units: list[list[int]], matrix: np.ndarray) -> np.ndarray:
    """``(n_rows, n_units)`` sums of each unit's token scores per row, skipping NaN (NaN only if all are).

    Example:
        >>> unit_sums([[0, 1], [2]], np.array([[1.0, np.nan, 2.0]])).tolist()
        [[1.0, 2.0]]
    """
    matrix = np.asarray(matrix, dtype=np.float64).reshape(-1, np.shape(matrix)[-1])
    out = np.empty((matrix.shape[0], len(units)))
    for u, unit in enumerate(units):
        block = matrix[:, unit]
        with np.errstate(all="ignore"):
            out[:, u] = np.where(np.isnan(block).all(axis=1), np.nan, np.nansum(block, axis=1))
    return out


def finite_max(values: np.ndarray) -> float:
    """Largest |value| ignoring NaN (0.0 when there is none).

    Example:
        >>> finite_max(np.array([np.nan, -3.0, 2.0]))
        3.0
    """
    values = np.abs(np.asarray(values, dtype=np.float64))
    values = values[~np.isnan(values)]
    return float(values.max()) if values.size else 0.0


def magnitude_ranks(values: np.ndarray) -> dict[int, int]:
    """1-based rank of each non-NaN value by decreasing |value|, ties sharing the better rank (as the JS view).

    Example:
        >>> magnitude_ranks(np.array([0.1, -0.5, np.nan, 0.5]))
        {1: 1, 3: 1, 0: 3}
    """
    order = sorted((i for i in range(len(values)) if not math.isnan(values[i])), key=lambda i: -abs(values[i]))
    ranks: dict[int, int] = {}
    for position, i in enumerate(order):
        tie = position and abs(values[order[position - 1]]) == abs(values[i])
        ranks[i] = ranks[order[position - 1]] if tie else position + 1
    return ranks


def token_pieces(tokens, spaces, units, sums, max_abs, signed, limit=MAX_STATIC_TOKENS):
    """:class:`TokenPiece` per unit for the static SVG (at most ``limit``), and how many units were left out.

    Example:
        >>> pieces, omitted = token_pieces(["a"], [""], [[0]], np.array([1.0]), 1.0, True)
        >>> pieces[0].background, omitted
        ('#e66101', 0)
    """
    ranks = magnitude_ranks(sums)
    pieces = []
    for u, unit in enumerate(units[:limit]):
        text = "".join((spaces[i] if k else "") + tokens[i] for k, i in enumerate(unit))
        score = float(sums[u])
        if math.isnan(score):
            background, colour = unseen_colours()
            title = f"{json.dumps(text, ensure_ascii=False)}: score none (not seen)"
        else:
            background, colour = score_colours(score, max_abs, signed)
            title = f"{json.dumps(text, ensure_ascii=False)}: score {format_score(score, 6, signed)}, rank {ranks[u]} of {len(ranks)}"
        pieces.append(TokenPiece(spaces[unit[0]], display_token(text), background, colour, title))
    return pieces, max(0, len(units) - limit)


def _traits_from_result(result: Any) -> dict[str, Any]:
    missing = [name for name in ("text", "tokens", "offsets", "scores") if not hasattr(result, name)]
    if missing:
        raise TypeError(
            f"{type(result).__name__} has no {', '.join(missing)}; pass an AttributionResult or use "
            "TokenHighlightWidget.from_arrays(text, tokens, offsets, scores)"
        )
    text, tokens = result.text, list(result.tokens)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not all(isinstance(token, str) for token in tokens):
        raise TypeError("tokens must be a list of str (the text of each token)")
    n = len(tokens)
    if n == 0:
        raise ValueError("tokens is empty: there is nothing to highlight; pass at least one token")
    scores = np.asarray(result.scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[None, :]
    if scores.ndim != 2 or scores.shape[1] != n or scores.shape[0] == 0:
        raise ValueError(f"scores have shape {scores.shape} but there are {n} tokens; expected (n_targets, {n})")
    if np.isinf(scores).any():
        raise ValueError("scores contain infinity; check the attribution (NaN is allowed and means 'not seen')")
    n_targets = scores.shape[0]
    offsets = np.asarray(result.offsets)
    if offsets.shape != (n, 2):
        raise ValueError(f"offsets have shape {offsets.shape}; expected ({n}, 2) character spans, one per token")
    offsets = offsets.astype(np.int64)
    special = _per_token(result, "special_mask", n, bool, np.zeros(n, bool))
    real = offsets[~special]
    if len(real) and ((real[:, 0] < 0).any() or (real[:, 0] > real[:, 1]).any() or (real[:, 1] > len(text)).any()):
        raise ValueError(f"offsets must be spans 0 <= start <= end <= len(text) = {len(text)} for non-special tokens")
    spaces = _spaces_before(text, offsets, special)
    word_ids = _per_token(result, "word_ids", n, np.int64, _default_word_ids(spaces, special))
    sentence_ids = _per_token(result, "sentence_ids", n, np.int64, np.where(special, -1, 0))
    labels = getattr(result, "target_labels", None)
    labels = [f"target {t}" for t in range(n_targets)] if labels is None else [str(label) for label in labels]
    if len(labels) != n_targets:
        raise ValueError(f"{len(labels)} target labels for {n_targets} rows of scores; pass one label per row")
    return {
        "tokens": tokens,
        "spaces_before": spaces,
        "special_mask": array_to_buffer(special),
        "word_ids": array_to_buffer(narrowest_ints(word_ids)),
        "sentence_ids": array_to_buffer(narrowest_ints(sentence_ids)),
        "scores": array_to_buffer(scores),
        "target_labels": labels,
        "target_probs": _per_target(result, "target_probs", n_targets),
        "completeness_error": _per_target(result, "completeness_error", n_targets),
        "method": str(getattr(result, "method", "") or ""),
        "score_meaning": str(getattr(result, "reduce", "") or ""),
        "signed": bool(getattr(result, "signed", True)),
    }


class TokenScoresWidget(InterpWidget):
    """Shared part of the views that show scored tokens: the token texts, the binary score matrix, the colour or
    underline encoding and the selected / hovered token, with their validation.

    Example:
        >>> issubclass(TokenHighlightWidget, TokenScoresWidget)
        True
    """

    tokens = traitlets.List(traitlets.Unicode(), help="Text of each token (special tokens by name).").tag(sync=True)
    scores = traitlets.Dict(help="float32 (rows, n_tokens) scores, binary; NaN = not seen.").tag(sync=True)
    encoding = traitlets.Unicode("colour", help="'colour', or 'underline' (weight = magnitude, +/− marker).").tag(sync=True)
    selected_token = traitlets.Int(-1, help="Token index clicked or chosen with Enter (-1: none).").tag(sync=True)
    hovered_token = traitlets.Int(-1, help="Token index under the pointer (-1: none).").tag(sync=True)

    @traitlets.validate("encoding")
    def _check_encoding(self, proposal):
        if proposal["value"] not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {proposal['value']!r}")
        return proposal["value"]

    @traitlets.validate("selected_token", "hovered_token")
    def _check_token(self, proposal):
        n = len(self.tokens)
        if not -1 <= proposal["value"] < n:
            raise ValueError(f"{proposal['trait'].name} {proposal['value']} is out of range; use -1 or 0..{n - 1}")
        return proposal["value"]

    def score_matrix(self) -> np.ndarray:
        """The (rows, n_tokens) float32 scores as sent to the browser (rows = targets, steps or methods).

        Example:
            >>> widget.score_matrix().shape  # doctest: +SKIP
            (2, 9)
        """
        return buffer_to_array(self.scores)


class GroupedTokens(traitlets.HasTraits):
    """Traits of views whose tokens the browser groups into words or sentences (mixed into a widget class): word
    and sentence ids travel once and the view sums scores per unit for the chosen ``granularity`` without a round
    trip to the kernel.

    Example:
        >>> issubclass(TokenHighlightWidget, GroupedTokens)
        True
    """

    special_mask = traitlets.Dict(help="bool per token, binary.").tag(sync=True)
    word_ids = traitlets.Dict(help="Word id per token (-1: none), binary int8/int16/int32 (narrowest).").tag(sync=True)
    sentence_ids = traitlets.Dict(help="Sentence id per token (-1: none), binary int8/int16/int32 (narrowest).").tag(sync=True)
    granularity = traitlets.Unicode("token", help="'token', 'word' or 'sentence'.").tag(sync=True)

    @traitlets.validate("granularity")
    def _check_granularity(self, proposal):
        return check_granularity(proposal["value"])

    def _group(self, show_special: bool, granularity: str | None = None) -> list[list[int]]:
        ids = {"token": None, "word": self.word_ids, "sentence": self.sentence_ids}[granularity or self.granularity]
        return group_units(buffer_to_array(self.special_mask), None if ids is None else buffer_to_array(ids), show_special)


class TokenHighlightWidget(TokenScoresWidget, GroupedTokens):
    """Tokens coloured by signed attribution, with a class selector, legend, tooltips and keyboard navigation.

    Takes an attribution result (``interp_widgets.attribution.AttributionResult`` or any object with ``text``,
    ``tokens``, ``offsets``, ``scores`` and optionally ``special_mask``, ``word_ids``, ``sentence_ids``,
    ``target_labels``, ``target_probs``, ``method``, ``reduce``, ``completeness_error``). The class shown,
    the granularity (``"token"``, ``"word"``, ``"sentence"``; sums computed in the browser), whether special
    tokens show, and the selected / hovered token sync both ways with the browser.

    Example:
        >>> widget = TokenHighlightWidget(result, granularity="word")  # doctest: +SKIP
        >>> widget.selected_target = 1                                 # doctest: +SKIP
        >>> widget.export_html("explanation.html")                     # doctest: +SKIP
    """

    _bundle = "token_highlight"

    spaces_before = traitlets.List(traitlets.Unicode(), help="Original text between a token and the previous one.").tag(sync=True)
    target_labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    target_probs = traitlets.List(traitlets.Float(allow_none=True), help="Predicted probability per target, or empty.").tag(sync=True)
    completeness_error = traitlets.List(traitlets.Float(allow_none=True), help="Per target, or empty.").tag(sync=True)
    method = traitlets.Unicode("").tag(sync=True)
    score_meaning = traitlets.Unicode("", help="What a score is, e.g. 'sum over embedding dimension (signed)'.").tag(sync=True)
    signed = traitlets.Bool(True, help="Signed scores use the diverging scale; unsigned (e.g. a norm) the 0..max one.").tag(sync=True)
    shared_scale = traitlets.Bool(False, help="One colour scale for all targets instead of one per target.").tag(sync=True)
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
        traits = _traits_from_result(result)
        target = self._resolve_target(selected_target, traits["target_labels"], traits["target_probs"])
        super().__init__(
            **traits, selected_target=target, granularity=granularity, show_special_tokens=show_special_tokens, **kwargs
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
            method=method, reduce=score_meaning, completeness_error=completeness_error,
        )  # fmt: skip
        return cls(result, **kwargs)

    def set_result(self, result: Any) -> None:
        """Show another result in this widget (one message to the browser); keeps the target if it still exists.

        Example:
            >>> widget.set_result(other_result)  # doctest: +SKIP
        """
        traits = _traits_from_result(result)
        keep = self.selected_target if self.selected_target < len(traits["target_labels"]) else None
        target = self._resolve_target(keep, traits["target_labels"], traits["target_probs"])
        with self.hold_sync(), self.hold_trait_notifications():
            for name in _DATA_TRAITS:
                setattr(self, name, traits[name])
            self.selected_target, self.selected_token, self.hovered_token = target, -1, -1

    @staticmethod
    def _resolve_target(target: int | str | None, labels: list[str], probs: list[float | None]) -> int:
        if target is None:
            known = [(p, i) for i, p in enumerate(probs) if p is not None]
            return max(known)[1] if known else 0
        if isinstance(target, str):
            if target not in labels:
                raise ValueError(f"unknown target {target!r}; choose one of {labels}")
            return labels.index(target)
        return int(target)

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
            >>> widget.granularity = "word"; widget.units()[:2]  # doctest: +SKIP
            [[1], [2, 3]]
        """
        return self._group(self.show_special_tokens)

    def unit_scores(self) -> np.ndarray:
        """Score of each displayed unit for the selected target: sums, skipping NaN (NaN if all are).

        Example:
            >>> widget.unit_scores()  # doctest: +SKIP
            array([ 0.41, -0.2 ])
        """
        return unit_sums(self.units(), self.score_matrix())[self.selected_target]

    def scale_max(self) -> float:
        """Largest |unit score| the colours are scaled to: of the selected target, or of all targets if shared.

        Example:
            >>> widget.scale_max()  # doctest: +SKIP
            0.8
        """
        sums = unit_sums(self.units(), self.score_matrix())
        return finite_max(sums if self.shared_scale else sums[self.selected_target])

    def _unit_text(self, unit: list[int]) -> str:
        return "".join((self.spaces_before[i] if k else "") + self.tokens[i] for k, i in enumerate(unit))

    # ----------------------------------------------------------------- display
    def static_html(self) -> str:
        """Coloured spans, legend and class line in plain HTML with inline styles (no script, text escaped).

        Example:
            >>> "<span" in widget.static_html()  # doctest: +SKIP
            True
        """
        units, sums, max_abs = self.units(), self.unit_scores(), self.scale_max()
        ranks, order = magnitude_ranks(sums), [i for i in range(len(sums)) if not math.isnan(sums[i])]
        pieces = []
        for u, unit in enumerate(units):
            gap = self.spaces_before[unit[0]]
            text = self._unit_text(unit)
            score = float(sums[u])
            if math.isnan(score):
                background, colour = hex_colour(MID), "#000000"
                note = "score none (this class does not see it)"
            else:
                background, colour = score_colours(score, max_abs, self.signed)
                note = f"score {format_score(score, 6, self.signed)}, rank {ranks[u]} of {len(order)}"
            title = f"{json.dumps(text, ensure_ascii=False)}: {note}"
            pieces.append(
                html.escape(gap)
                + f'<span style="background-color:{background};color:{colour};border-radius:3px;padding:1px 1px" '
                f'title="{html.escape(title)}">{html.escape(display_token(text))}</span>'
            )
        target = self.selected_target
        label = self.target_labels[target]
        prob = self.target_probs[target] if self.target_probs else None
        others = [
            f"{html.escape(other)}" + (f" ({100 * p:.1f}%)" if p is not None else "")
            for i, (other, p) in enumerate(zip(self.target_labels, self.target_probs or [None] * len(self.target_labels)))
            if i != target
        ]
        header = f"class <b>{html.escape(label)}</b>" + (f" ({100 * prob:.1f}%)" if prob is not None else "")
        if others:
            header += " · other classes: " + ", ".join(others)
        details = [f"method: {html.escape(self.method)}" if self.method else "",
                   f"score: {html.escape(self.score_meaning)}" if self.score_meaning else "",
                   f"granularity: {html.escape(self.granularity)}"]
        if self.completeness_error and self.completeness_error[target] is not None:
            details.append(f"completeness error: {format_score(self.completeness_error[target])}")
        stops = legend_stops() if self.signed else legend_stops()[2:]
        swatches = "".join(
            f'<span style="display:inline-block;width:28px;height:10px;background-color:{colour}"></span>'
            for colour in stops
        )
        per = "" if self.granularity == "token" else f" (sum per {html.escape(self.granularity)})"
        low, high = (format_score(-max_abs), format_score(max_abs, sign=True)) if self.signed else ("0", format_score(max_abs))
        meaning = "blue = negative, orange = positive, pale = near 0" if self.signed else "pale = 0, orange = large"
        legend = f'<div style="margin-top:6px;font-size:12px">attribution{per}: {low} {swatches} {high} · {meaning}</div>'
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
            >>> widget.static_svg().startswith("<svg")  # doctest: +SKIP
            True
        """
        units, sums, max_abs = self.units(), self.unit_scores(), self.scale_max()
        target = self.selected_target
        probs = self.target_probs or [None] * len(self.target_labels)
        classes = [f"{label}" + (f" ({100 * p:.1f}%)" if p is not None else "") for label, p in zip(self.target_labels, probs)]
        figure = SvgFigure(label=f"Token attribution for class {self.target_labels[target]}")
        header = f"class {classes[target]}"
        others = [c for i, c in enumerate(classes) if i != target]
        figure.text(header + (" · other classes: " + ", ".join(others) if others else ""), bold=True)
        pieces, omitted = token_pieces(self.tokens, self.spaces_before, units, sums, max_abs, self.signed)
        figure.tokens(pieces, omitted=omitted)
        per = "" if self.granularity == "token" else f" (sum per {self.granularity})"
        scale = ", scale shared by all classes" if self.shared_scale else ""
        figure.legend(max_abs, signed=self.signed, title=f"attribution{per}{scale}")
        details = [f"method: {self.method}" if self.method else "", f"score: {self.score_meaning}" if self.score_meaning else ""]
        if self.completeness_error and self.completeness_error[target] is not None:
            details.append(f"completeness error: {format_score(self.completeness_error[target])}")
        if any(details):
            figure.text(" · ".join(d for d in details if d), size=11, colour="#57606a")
        return figure.render()

    def __repr__(self) -> str:
        target = self.selected_target
        prob = self.target_probs[target] if self.target_probs else None
        row = self.score_matrix()[target].astype(np.float64)
        special = buffer_to_array(self.special_mask)
        candidates = [i for i in range(len(self.tokens)) if not special[i] and not math.isnan(row[i])]
        top = sorted(candidates, key=lambda i: -abs(row[i]))[:3]
        top_text = ", ".join(f"{self.tokens[i]!r} {format_score(row[i], sign=True)}" for i in top)
        prob_text = f" p={prob:.3f}" if prob is not None else ""
        return (
            f"TokenHighlightWidget(method={self.method!r}, {len(self.tokens)} tokens, "
            f"class={self.target_labels[target]!r}{prob_text} of {self.target_labels}, top: {top_text})"
        )
