"""Method comparison: several attribution methods on the same input side by side, with synchronised hover and
a table of pairwise agreement (Spearman rank correlation and top-k overlap).

Example:
    >>> from interp_widgets.attribution import IntegratedGradients, Saliency
    >>> ig = IntegratedGradients().attribute(model, tokenizer, "Not bad at all.")
    >>> sal = Saliency().attribute(model, tokenizer, "Not bad at all.")
    >>> compare([ig, sal])  # doctest: +ELLIPSIS
    ComparisonWidget(2 methods ['integrated_gradients', 'saliency'], 7 tokens, target='positive', integrated_gradients~saliency ρ=...)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import numpy as np
import traitlets

from interp_widgets.agreement import agreement_table
from interp_widgets.text_units import GRANULARITIES, display_units
from interp_widgets.widgets.view_data import ComparisonData
from interp_widgets.widgets._colour import format_score
from interp_widgets.widgets._svg import SvgFigure
from interp_widgets.widgets._tokens import (
    shown_target,
    ChatTurns,
    GroupedTokens,
    TokenScoresWidget,
    finite_max,
    token_pieces,
    token_data,
    unit_sums,
    with_role_labels,
)

#: Agreement rows drawn in the static picture (n methods give n(n-1)/2 pairs; the live view shows them all).
MAX_STATIC_PAIRS = 15
#: Method rows drawn in the static picture (the live view shows every method).
MAX_STATIC_METHODS = 8


class ComparisonWidget(TokenScoresWidget, GroupedTokens, ChatTurns, data=ComparisonData):
    """Several methods' scores for one input and one target, one row per method, with synchronised hover.

    Hovering (or focusing) a token in any row highlights it in every row and shows all methods' scores. The
    ``granularity`` switch (token, word, sentence) sums scores per unit in the browser. The agreement table
    (Spearman ρ and top-k overlap, computed in Python by :mod:`interp_widgets.agreement`) is computed once per granularity over its units'
    sums and travels as ``agreements``, so the browser switches tables with the granularity and no round trip;
    ``agreement`` is the table of the current granularity. The colour scale is per method or shared
    (``shared_scale``). A chat conversation's rows label each turn's role, as the token view does, and offer the
    ``turn`` granularity. Build it with :func:`compare`.

    Example:
        >>> from interp_widgets.attribution import InputXGradient, IntegratedGradients
        >>> text = "Not bad at all, honestly."  # the text of ``result`` (saliency)
        >>> ig = IntegratedGradients().attribute(model, tokenizer, text)
        >>> ixg = InputXGradient().attribute(model, tokenizer, text)
        >>> widget = compare([ig, result, ixg], target="positive", k=3)
        >>> widget.methods
        ['integrated_gradients', 'saliency', 'input_x_gradient']
        >>> widget.granularity = "word"; round(widget.agreement[0]["spearman"], 2)
        0.68
    """

    _payload_schema: ClassVar[dict[str, Any]] = {
        "agreements": {
            "map": {
                "list": {
                    "object": {
                        "a": "str",
                        "b": "str",
                        "spearman": {"nullable": "num"},
                        "top_k_overlap": {"nullable": "num"},
                        "k": "int",
                    }
                }
            }
        }
    }

    shared_scale = traitlets.Bool(False, help="One colour scale for all methods instead of one per method.").tag(
        sync=True
    )
    high_contrast = traitlets.Bool(False).tag(sync=True)

    @property
    def agreement(self) -> list[dict[str, Any]]:
        """Pairwise agreement rows ``{a, b, spearman, top_k_overlap, k}`` over the units of the current granularity.

        Example:
            >>> from interp_widgets.attribution import IntegratedGradients
            >>> widget = compare([IntegratedGradients().attribute(model, tokenizer, result.text), result], k=3)
            >>> row = widget.agreement[0]
            >>> row["a"], row["b"], round(row["spearman"], 2), round(row["top_k_overlap"], 2), row["k"]
            ('integrated_gradients', 'saliency', 0.68, 0.67, 3)
            >>> widget.granularity = "sentence"; widget.agreement[0]["top_k_overlap"]  # one unit: ρ undefined
            1.0
        """
        return self.agreements.get(self.granularity, [])

    def units(self) -> list[list[int]]:
        """Token indices of each unit shown for the current granularity (special tokens hidden), as in the browser.

        Example:
            >>> from interp_widgets.attribution import IntegratedGradients
            >>> widget = compare([IntegratedGradients().attribute(model, tokenizer, result.text), result])
            >>> widget.tokens[:3], widget.units()[:2]  # [CLS] (token 0) is hidden
            (['[CLS]', 'Not', 'bad'], [[1], [2]])
            >>> widget.granularity = "sentence"; widget.units()
            [[1, 2, 3, 4, 5, 6, 7]]
        """
        return self._group(False)

    def unit_scores(self) -> np.ndarray:
        """``(n_methods, n_units)`` score sums per unit for the current granularity (NaN skipped).

        Example:
            >>> from interp_widgets.attribution import InputXGradient, IntegratedGradients
            >>> ig = IntegratedGradients().attribute(model, tokenizer, result.text)
            >>> widget = compare([ig, result, InputXGradient().attribute(model, tokenizer, result.text)])
            >>> widget.unit_scores().shape  # 3 methods × 7 word-piece tokens ([CLS] and [SEP] hidden)
            (3, 7)
            >>> widget.granularity = "sentence"; widget.unit_scores().shape
            (3, 1)
        """
        return unit_sums(self.units(), self.score_matrix())

    def static_svg(self) -> str:
        """One labelled token row per method, each with its scale, then the agreement table as text.

        Example:
            >>> from interp_widgets.attribution import IntegratedGradients
            >>> widget = compare([IntegratedGradients().attribute(model, tokenizer, result.text), result])
            >>> svg = widget.static_svg()
            >>> svg.startswith("<svg"), 'aria-label="Comparison of 2 attribution methods"' in svg
            (True, True)
        """
        units, matrix = self.units(), self.unit_scores()
        roles = self.role_starts(units)
        shared = finite_max(matrix) if self.shared_scale else None
        figure = SvgFigure(label=f"Comparison of {len(self.methods)} attribution methods")
        per = "" if self.granularity == "token" else f" · sum per {self.granularity}"
        figure.text(
            f"{len(self.methods)} methods · target {self.target_label}"
            + (" · shared scale" if shared is not None else "")
            + per,
            bold=True,
        )
        for m, method in enumerate(self.methods[:MAX_STATIC_METHODS]):
            sums = matrix[m]
            max_abs = shared if shared is not None else finite_max(sums)
            figure.text(
                f"{method} (scale ±{format_score(max_abs)})"
                if self.signed[m]
                else f"{method} (scale 0..{format_score(max_abs)})",
                size=12,
                bold=True,
            )
            pieces, omitted = token_pieces(self.tokens, self.spaces_before, units, sums, max_abs, self.signed[m])
            figure.tokens(with_role_labels(pieces, roles), omitted=omitted)
        if len(self.methods) > MAX_STATIC_METHODS:
            figure.text(
                f"… {len(self.methods) - MAX_STATIC_METHODS} more methods in the live widget", size=11, colour="#57606a"
            )
        figure.legend(
            1.0, signed=True, title="colours (signed methods; unsigned ones use the pale → orange half), 1 = scale max"
        )
        figure.text(f"agreement over {self.granularity}s ({self.agreement_by} ranks)", size=12, bold=True)
        lines = [f"{'method A':<22}{'method B':<22}{'Spearman ρ':>11}{'top-k overlap':>15}"]
        for row in self.agreement[:MAX_STATIC_PAIRS]:
            rho = "n/a" if row["spearman"] is None else f"{row['spearman']:+.3f}"
            overlap = "n/a" if row["top_k_overlap"] is None else f"{row['top_k_overlap']:.2f} (k={row['k']})"
            lines.append(f"{row['a'][:21]:<22}{row['b'][:21]:<22}{rho:>11}{overlap:>15}")
        figure.mono_lines(lines)
        if len(self.agreement) > MAX_STATIC_PAIRS:
            figure.text(
                f"… {len(self.agreement) - MAX_STATIC_PAIRS} more pairs in the live widget "
                "(widget.agreement holds them all)",
                size=11,
                colour="#57606a",
            )
        return figure.render()

    def __repr__(self) -> str:
        pairs = ", ".join(
            f"{r['a']}~{r['b']} ρ={'n/a' if r['spearman'] is None else format(r['spearman'], '.2f')}"
            for r in self.agreement
        )
        return f"ComparisonWidget({len(self.methods)} methods {self.methods}, {len(self.tokens)} tokens, target={self.target_label!r}, {pairs})"


def _json_number(value: float) -> float | None:
    return None if math.isnan(value) else value


def compare(results: Sequence[Any], *, target: int | str | None = None, k: int = 5, by: str = "magnitude",
            names: Sequence[str] | None = None, **options: Any) -> ComparisonWidget:  # fmt: skip
    """Compare attribution results of several methods on the same input (same tokens) for one target.

    ``target`` picks the row (label, index, or ``None`` for each result's most probable target, which must agree).
    ``names`` overrides the method names (needed if two results share one). ``options`` go to the widget
    (``shared_scale=True``, ``granularity="word"`` …).

    Example:
        >>> from interp_widgets.attribution import IntegratedGradients, Occlusion
        >>> ig = IntegratedGradients().attribute(model, tokenizer, result.text)
        >>> compare([ig, result], k=3)
        ComparisonWidget(2 methods ['integrated_gradients', 'saliency'], 9 tokens, target='positive', integrated_gradients~saliency ρ=0.68)

        Perturbation methods score the tokens without [CLS] and [SEP]; compare them with token-level results
        that drop special tokens too (``aggregate("token")``):

        >>> occlusion = Occlusion(progress=False).attribute(model, tokenizer, result.text)
        >>> compare([ig.aggregate("token"), occlusion]).tokens
        ['Not', 'bad', 'at', 'all', ',', 'honestly', '.']
    """
    results = list(results)
    if len(results) < 2:
        raise ValueError(f"compare needs at least two results, got {len(results)}")
    inputs = [token_data(r) for r in results]
    first = inputs[0]
    for r, t in zip(results[1:], inputs[1:]):
        if t.tokens != first.tokens or t.spaces_before != first.spaces_before:
            plain = [[tok for tok, special in zip(d.tokens, d.special_mask) if not special] for d in (first, t)]
            hint = (
                "the same tokens once special tokens are dropped, as perturbation methods do; pass "
                "result.aggregate('token') for the results that keep them"
                if plain[0] == plain[1] and plain[0]
                else "attribute the same text with the same tokenizer"
            )
            raise ValueError(
                f"results must explain the same input with the same tokens; {getattr(r, 'method', '?')!r} has different "
                f"tokens ({hint})"
            )
    rows, label = [], None
    for t in inputs:
        labels, probs = t.target_labels, t.target_probs
        index = shown_target(target, labels, probs)
        if label is not None and labels[index] != label:
            raise ValueError(f"the results explain different targets ({label!r} and {labels[index]!r}); pass target=")
        label = labels[index]
        rows.append(t.scores[index])  # float32: the numbers the browser holds
    methods = list(names) if names is not None else [t.method or f"method {i + 1}" for i, t in enumerate(inputs)]
    if len(methods) != len(results):
        raise ValueError(f"{len(methods)} names for {len(results)} results")
    if len(set(methods)) != len(methods):
        raise ValueError(f"method names must be distinct, got {methods}; pass names=[...]")
    matrix = np.stack(rows)
    agreements = {}
    for granularity in GRANULARITIES:  # each over its units' sums, special tokens left out as in the browser
        units = display_units(
            first.special_mask, first.word_ids, first.sentence_ids, granularity, turn_ids=first.turn_ids
        )
        table = agreement_table(unit_sums(units, matrix), methods, k=k, by=by)
        for row in table:
            row["spearman"], row["top_k_overlap"] = _json_number(row["spearman"]), _json_number(row["top_k_overlap"])
        agreements[granularity] = table
    data = ComparisonData(
        layout=first.layout, scores=matrix, methods=methods, signed=[t.signed for t in inputs], target_label=label,
        agreements=agreements, agreement_by=by,
    )  # fmt: skip
    return ComparisonWidget(**data.to_traits(), **options)
