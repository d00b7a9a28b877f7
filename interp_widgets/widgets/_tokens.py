"""Shared library of the token views: the scored-token data taken from a result, the traits and validation of
views that show scored tokens (:class:`TokenScoresWidget`, :class:`GroupedTokens`), and the helpers of their static
pictures. The views themselves live in ``token_highlight.py``, ``comparison.py``, ``example_list.py`` and
``generation.py``.

Example:
    >>> unit_sums([[0, 1], [2]], np.array([[1.0, np.nan, 2.0]])).tolist()
    [[1.0, 2.0]]
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np
import traitlets

from interp_widgets.targets import Targets
from interp_widgets.text_units import GRANULARITIES, TokenLayout, display_units
from interp_widgets.widgets.view_data import ScoringPart, TargetsPart, TokenHighlightData, TokenLayoutPart
from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._colour import format_score, score_colours
from interp_widgets.widgets._svg import MAX_STATIC_TOKENS, TokenPiece, unseen_colours
from interp_widgets.validation import check_choice

ROLE_BACKGROUND, ROLE_COLOUR = "#eaeef2", "#57606a"  # role labels of chat turns: grey, never a score colour
SPECIAL_COLOUR = "#6e7781"  # text of special tokens (chat-template markers) drawn in a static picture: greyed
_WHITESPACE_MARKERS = {" ": "\u00b7", "\n": "\u21b5\n", "\r": "\u240d", "\t": "\u2192"}
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


def shown_target(target: int | str | None, labels: list[str], probs: list[float | None]) -> int:
    """The target row a token view shows: ``target`` as :meth:`Targets.index <interp_widgets.targets.Targets.index>`
    reads it, or the most probable target for ``None``.

    Example:
        >>> shown_target(None, ["neg", "pos"], [0.2, 0.8]), shown_target(-2, ["neg", "pos"], [])
        (1, 0)
    """
    known = [np.nan if p is None else p for p in probs]
    targets = Targets(labels, probs=known if len(known) == len(labels) else None)
    return targets.most_probable() if target is None else targets.index(target)


def check_granularity(value: str) -> str:
    """``value`` if it is a granularity the views know, else a ValueError naming the choices.

    Example:
        >>> check_granularity("word")
        'word'
    """
    return check_choice("granularity", value, GRANULARITIES)


def _spaces_before(text: str, offsets: np.ndarray, special: np.ndarray) -> list[str]:
    spaces, previous_end = [], 0
    for (start, end), is_special in zip(offsets.tolist(), special.tolist()):
        if is_special and (end <= start or end > len(text)):  # added by the tokenizer: no place in the text
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


def token_pieces(tokens, spaces, units, sums, max_abs, signed, limit=MAX_STATIC_TOKENS, special=None):
    """:class:`TokenPiece` per unit for the static SVG (at most ``limit``), and how many units were left out.
    Units starting with a ``special`` token (template markers, when shown) get grey text.

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
        if special is not None and special[unit[0]]:
            colour, title = SPECIAL_COLOUR, f"{title} (special token)"
        pieces.append(TokenPiece(spaces[unit[0]], display_token(text), background, colour, title))
    return pieces, max(0, len(units) - limit)


def _layout_of(result: Any) -> Any:
    """``result.layout`` where it is a :class:`TokenLayout`, else ``result`` itself (a plain object, values flat)."""
    layout = getattr(result, "layout", None)
    return layout if isinstance(layout, TokenLayout) else result


def _check_scored(result: Any, needed: tuple[str, ...]) -> None:
    """A TypeError naming what ``result`` lacks of a token layout (``layout``, else flat ``text``, ``tokens`` and
    ``offsets``) and of ``needed``."""
    flat = () if _layout_of(result) is not result else ("text", "tokens", "offsets")
    missing = [name for name in (*flat, *needed) if not hasattr(result, name)]
    if missing:
        raise TypeError(
            f"{type(result).__name__} has no {', '.join(missing)}; pass an AttributionResult (or any object with a "
            "TokenLayout `layout` and `scores`) or use TokenHighlightWidget.from_arrays(text, tokens, offsets, scores)"
        )


def scored_layout(result: Any) -> TokenLayout:
    """The token layout of a result the token views read (:class:`~interp_widgets.widgets._protocols.ScoredTokens`):
    its ``layout``, or, for the plain object that ``TokenHighlightWidget`` also takes (flat ``text``, ``tokens``,
    ``offsets`` and optionally ``special_mask``, ``word_ids``, ``sentence_ids``, ``turn_ids``, ``turn_roles``), one
    made from those, checked: words split where whitespace or a special token comes between tokens, one sentence, one
    turn where they are not given.

    Example:
        >>> from types import SimpleNamespace
        >>> scored_layout(SimpleNamespace(text="a b", tokens=["a", "b"], offsets=[(0, 1), (2, 3)])).word_ids.tolist()
        [0, 1]
    """
    if _layout_of(result) is not result:
        return _layout_of(result)
    _check_scored(result, ())
    text, tokens = result.text, list(result.tokens)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not all(isinstance(token, str) for token in tokens):
        raise TypeError("tokens must be a list of str (the text of each token)")
    n = len(tokens)
    offsets = np.asarray(result.offsets)
    if offsets.shape != (n, 2):
        raise ValueError(f"offsets have shape {offsets.shape}; expected ({n}, 2) character spans, one per token")
    offsets = offsets.astype(np.int64)
    special = _per_token(result, "special_mask", n, bool, np.zeros(n, bool))
    roles = getattr(result, "turn_roles", None)
    return TokenLayout(
        text=text, tokens=tokens, offsets=offsets, special_mask=special,
        word_ids=_per_token(result, "word_ids", n, np.int64,
                            _default_word_ids(_spaces_before(text, offsets, special), special)),
        sentence_ids=_per_token(result, "sentence_ids", n, np.int64, np.where(special, -1, 0)),
        turn_ids=_per_token(result, "turn_ids", n, np.int64, np.where(special, -1, 0)),
        turn_roles=[] if roles is None else list(roles),
    )  # fmt: skip


def token_data(result: Any) -> TokenHighlightData:
    """The view data of a result (any object shaped like :class:`~interp_widgets.widgets._protocols.ScoredTokens`,
    or the plain object :func:`scored_layout` reads), checked against each other: shapes, spans inside the text, one
    label per target. The schema checks the rest (dtype, dimensions, finite scores with NaN allowed: "not seen").

    Example:
        >>> from types import SimpleNamespace
        >>> token_data(SimpleNamespace(text="a b", tokens=["a", "b"], offsets=[(0, 1), (2, 3)], scores=[1.0, 2.0])).spaces_before
        ['', ' ']
    """
    _check_scored(result, ("scores",))
    if not len(_layout_of(result).tokens):  # before the per-token arrays are checked against none
        raise ValueError("tokens is empty: there is nothing to highlight; pass at least one token")
    layout = scored_layout(result)
    text, tokens, n = layout.text, layout.tokens, len(layout)
    scores = np.asarray(result.scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[None, :]
    if scores.ndim != 2 or scores.shape[1] != n or scores.shape[0] == 0:
        raise ValueError(f"scores have shape {scores.shape} but there are {n} tokens; expected (n_targets, {n})")
    n_targets = scores.shape[0]
    special = layout.special_mask
    real = layout.offsets[~special]
    if len(real) and ((real[:, 0] < 0).any() or (real[:, 0] > real[:, 1]).any() or (real[:, 1] > len(text)).any()):
        raise ValueError(f"offsets must be spans 0 <= start <= end <= len(text) = {len(text)} for non-special tokens")
    turn_ids, roles = layout.turn_ids, layout.turn_roles
    if roles and (turn_ids >= len(roles)).any():
        raise ValueError(
            f"turn_ids go up to {int(turn_ids.max())} but turn_roles names {len(roles)} turns; pass one role per turn"
        )
    labels = getattr(result, "target_labels", None)
    labels = [f"target {t}" for t in range(n_targets)] if labels is None else [str(label) for label in labels]
    if len(labels) != n_targets:
        raise ValueError(f"{len(labels)} target labels for {n_targets} rows of scores; pass one label per row")
    foils = getattr(result, "foil_labels", None)
    if foils is not None and len(foils) == n_targets and getattr(result, "generated_mask", None) is None:
        labels = [f"{label} vs {foil}" for label, foil in zip(labels, foils)]  # a contrastive masked-LM target
    return TokenHighlightData(
        layout=TokenLayoutPart(tokens=list(tokens), spaces_before=_spaces_before(text, layout.offsets, special),
                               special_mask=special, word_ids=layout.word_ids, sentence_ids=layout.sentence_ids,
                               # a plain text is one turn without a role: the views need no ids for it
                               turn_ids=turn_ids if roles else None, turn_roles=list(roles)),
        scoring=ScoringPart(scores=scores, method=str(getattr(result, "method", "") or ""),
                            score_meaning=str(getattr(result, "score_meaning", "") or ""),
                            signed=bool(getattr(result, "signed", True))),
        targets=TargetsPart(target_labels=labels, target_probs=_per_target(result, "target_probs", n_targets),
                            completeness_error=_per_target(result, "completeness_error", n_targets)),
    )  # fmt: skip


class TokenScoresWidget(InterpWidget):
    """Shared part of the views that show scored tokens: the colour or underline encoding and the selected / hovered
    token, with their validation. The token texts and the score matrix are data traits, made from the view's data
    class (``tokens``, ``scores``).

    Example:
        >>> from interp_widgets.widgets import TokenHighlightWidget
        >>> issubclass(TokenHighlightWidget, TokenScoresWidget)
        True
    """

    _payload_schema: ClassVar[dict[str, Any]] = {"encoding": {"enum": list(ENCODINGS)}}

    encoding = traitlets.Unicode("colour", help="'colour', or 'underline' (weight = magnitude, +/− marker).").tag(
        sync=True
    )
    selected_token = traitlets.Int(-1, help="Token index clicked or chosen with Enter (-1: none).").tag(sync=True)
    hovered_token = traitlets.Int(-1, help="Token index under the pointer (-1: none).").tag(sync=True)

    @traitlets.validate("encoding")
    def _check_encoding(self, proposal):
        return check_choice("encoding", proposal["value"], ENCODINGS)

    @traitlets.validate("selected_token", "hovered_token")
    def _check_token(self, proposal):
        n = len(self.tokens)
        if not -1 <= proposal["value"] < n:
            raise ValueError(f"{proposal['trait'].name} {proposal['value']} is out of range; use -1 or 0..{n - 1}")
        return proposal["value"]

    def score_matrix(self) -> np.ndarray:
        """The (rows, n_tokens) float32 scores as sent to the browser (rows = targets, steps or methods); the same
        array as ``widget.scores``.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> both = Saliency().attribute(model, tokenizer, "Not bad at all, honestly.", target=["negative", "positive"])
            >>> widget = both.widget()
            >>> widget.score_matrix().shape, widget.score_matrix().dtype  # 2 targets × 9 tokens
            ((2, 9), dtype('float32'))
        """
        return self.scores


class GroupedTokens(traitlets.HasTraits):
    """Traits of views whose tokens the browser groups into words or sentences (mixed into a widget class): word
    and sentence ids travel once (``special_mask``, ``word_ids``, ``sentence_ids``, data traits made from the view's
    data class) and the view sums scores per unit for the chosen ``granularity`` without a round trip to the kernel.

    Example:
        >>> from interp_widgets.widgets import TokenHighlightWidget
        >>> issubclass(TokenHighlightWidget, GroupedTokens)
        True
    """

    _payload_schema: ClassVar[dict[str, Any]] = {"granularity": {"enum": list(GRANULARITIES)}}

    granularity = traitlets.Unicode("token", help="'token', 'word' or 'sentence'.").tag(sync=True)

    @traitlets.validate("granularity")
    def _check_granularity(self, proposal):
        return check_granularity(proposal["value"])

    def _group(self, show_special: bool, granularity: str | None = None) -> list[list[int]]:
        return display_units(
            self.special_mask,
            self.word_ids,
            self.sentence_ids,
            granularity or self.granularity,
            show_special=show_special,
            turn_ids=getattr(self, "turn_ids", None),
        )


class ChatTurns(traitlets.HasTraits):
    """Behaviour of views that label the turns of a chat conversation (mixed into a widget class): the turn of every
    token (``turn_ids``; -1 for the template's own tokens, which are special: folded away, or greyed when shown) and
    the role of each turn (``turn_roles``), data traits made from the view's data class. A plain text is one turn
    without a role, and no label shows.

    Example:
        >>> from interp_widgets.widgets import TokenHighlightWidget
        >>> issubclass(TokenHighlightWidget, ChatTurns)
        True
    """

    def role_starts(self, units: list[list[int]]) -> dict[int, str]:
        """``{unit index: role}`` for each unit that starts a turn (where a role label goes), in a chat view.

        Example:
            >>> from interp_widgets.widgets import TokenHighlightWidget
            >>> w = TokenHighlightWidget.from_arrays("Hi. Yo.", ["Hi.", "Yo."], [(0, 3), (4, 7)], [1.0, 2.0],
            ...                                      turn_ids=[0, 1], turn_roles=["user", "assistant"])
            >>> w.role_starts(w.units())
            {0: 'user', 1: 'assistant'}
        """
        return role_starts(units, self.turn_ids, self.special_mask, self.turn_roles)


def role_starts(units: list[list[int]], turn_ids, special_mask, roles: list[str]) -> dict[int, str]:
    """``{unit index: role}`` of the units where a new turn begins (its first non-special token's turn differs from
    the previous turn seen), as the JS views place role labels; empty without roles.

    Example:
        >>> role_starts([[0], [1], [2]], np.array([0, 0, 1]), np.zeros(3, bool), ["user", "assistant"])
        {0: 'user', 2: 'assistant'}
    """
    if not roles or turn_ids is None:
        return {}
    starts, previous = {}, -1
    for u, unit in enumerate(units):
        turns = [int(turn_ids[i]) for i in unit if not special_mask[i] and 0 <= int(turn_ids[i]) < len(roles)]
        if turns and turns[0] != previous:
            starts[u] = roles[turns[0]]
            previous = turns[0]
    return starts


def with_role_labels(pieces: list[TokenPiece], roles: dict[int, str]) -> list[TokenPiece]:
    """``pieces`` (one per unit) with a role label before each turn's first unit (``roles`` from
    :func:`role_starts`), each turn on a line of its own, as the live views draw them.

    Example:
        >>> pieces, _ = token_pieces(["Hi", "Yo"], ["", " "], [[0], [1]], np.array([1.0, 2.0]), 2.0, True)
        >>> [p.text for p in with_role_labels(pieces, {0: "user", 1: "assistant"})]
        ['user:', 'Hi', 'assistant:', 'Yo']
    """
    pieces = list(pieces)
    for u in sorted((u for u in roles if u < len(pieces)), reverse=True):
        pieces[u].gap = pieces[u].gap.lstrip("\r\n") or " "
        pieces.insert(u, role_piece(roles[u], first=u == 0))
    return pieces


def role_piece(role: str, first: bool) -> TokenPiece:
    """The static picture's label of a turn's role: a grey tag on a new line (the role text is escaped by the SVG).

    Example:
        >>> role_piece("user", first=False).text, role_piece("user", first=False).gap
        ('user:', '\\n')
    """
    return TokenPiece("" if first else "\n", f"{role}:", ROLE_BACKGROUND, ROLE_COLOUR, f"{role} turn")
