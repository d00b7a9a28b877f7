"""Many inputs: a paged list of explained examples with predicted and true labels, sortable and filterable by label,
confidence or maximum attribution, all in the browser.

Example:
    >>> from interp_widgets.attribution import IntegratedGradients
    >>> reviews = ["Great food.", "Awful service.", "It was fine.", "Not bad at all."]
    >>> labels = ["positive", "negative", "neutral", "positive"]
    >>> results = IntegratedGradients(progress=False).attribute(model, tokenizer, reviews, true_labels=labels)
    >>> ExampleListWidget(results)
    ExampleListWidget(4 examples, method='integrated_gradients', accuracy 0.75 on 4 labelled)

A list too long to hold (a corpus attribution's shards) is shown page by page with :meth:`ExampleListWidget.from_pages`:
the widget holds one page, and when the browser (or Python) sets ``page`` the widget asks its source for that page's
examples (an :class:`~interp_widgets.widgets._protocols.ExamplePages`: ``len()`` and ``examples(start, stop)``) and
replaces its data with them. Sorting and filtering then need every example, so a paged list keeps the input order.
A saved output (no kernel) holds the page it showed and says that more pages exist.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import numpy as np
import traitlets

from interp_widgets.widgets._base import InterpWidget, PagedList
from interp_widgets.widgets._protocols import ExamplePages
from interp_widgets.widgets._colour import format_score
from interp_widgets.widgets._svg import SvgFigure
from interp_widgets.text_units import GRANULARITIES, display_units
from interp_widgets.widgets.view_data import ExampleListData, ExamplesLayoutPart
from interp_widgets.widgets._tokens import (
    check_granularity,
    finite_max,
    role_starts,
    token_pieces,
    token_data,
    unit_sums,
    with_role_labels,
)
from interp_widgets.validation import check_choice

SORT_KEYS = ("index", "confidence", "max_attribution", "label")
OUTCOMES = ("all", "correct", "wrong")
MAX_STATIC_EXAMPLE_TOKENS = 400


class ExampleListWidget(InterpWidget, PagedList, data=ExampleListData):
    """A paged list of examples: each row shows the predicted label with its confidence, the true label, and the
    tokens coloured for the predicted class. Sorting, filtering, paging and the ``granularity`` switch (token, word
    or sentence sums) run in the browser; the page, sort, filters, granularity and the selected example sync back
    to Python (``selected_example`` is an index into the results).

    Example:
        >>> from interp_widgets.attribution import Saliency
        >>> reviews = ["Great food.", "Awful service.", "It was fine.", "Not bad at all."]
        >>> labels = ["positive", "negative", "neutral", "positive"]
        >>> results = Saliency(progress=False).attribute(model, tokenizer, reviews, true_labels=labels)
        >>> widget = ExampleListWidget(results, page_size=5, sort_by="confidence")
        >>> widget.predicted, widget.visible_order()[:3]  # least confident first
        (['positive', 'positive', 'neutral', 'positive'], [3, 1, 0])
    """

    _payload_schema: ClassVar[dict[str, Any]] = {
        "granularity": {"enum": list(GRANULARITIES)},
        "sort_by": {"enum": list(SORT_KEYS)},
        "filter_outcome": {"enum": list(OUTCOMES)},
    }

    granularity = traitlets.Unicode(
        "token", help="'token', 'word', 'sentence' or 'turn' (sums computed in the browser)."
    ).tag(sync=True)
    sort_by = traitlets.Unicode("index", help=f"One of {SORT_KEYS}.").tag(sync=True)
    descending = traitlets.Bool(False).tag(sync=True)
    filter_label = traitlets.Unicode("", help="Show only examples predicted as this label ('' = all).").tag(sync=True)
    filter_outcome = traitlets.Unicode("all", help=f"One of {OUTCOMES} (needs true labels).").tag(sync=True)
    shared_scale = traitlets.Bool(True, help="One colour scale for all examples instead of one per example.").tag(
        sync=True
    )
    selected_example = traitlets.Int(-1, help="Index of the example clicked (-1: none).").tag(sync=True)
    total_examples = traitlets.Int(
        0, help="Examples in the whole list when the widget holds one page of it (from_pages); 0: it holds them all."
    ).tag(sync=True)
    first_example = traitlets.Int(0, help="List index of the first example held (from_pages; else 0).").tag(sync=True)

    def __init__(self, results: Sequence[Any], **kwargs: Any) -> None:
        results = list(results)
        if not results:
            raise ValueError("there are no results to list; pass a non-empty AttributionCollection or list of results")
        self._pages: ExamplePages | None = None
        super().__init__(**self._list_traits(results), **kwargs)

    @classmethod
    def from_pages(cls, source: ExamplePages, *, page: int = 0, **kwargs: Any) -> ExampleListWidget:
        """A list that holds one page of ``source`` at a time (``len(source)`` examples in all): setting ``page``
        (the browser's pager, or Python) asks ``source.examples(start, stop)`` for that page only.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> results = Saliency(progress=False).attribute(model, tokenizer, ["Great.", "Awful.", "Fine.", "Bad."])
            >>> class Pages:  # any object with len() and examples(start, stop)
            ...     asked = []
            ...     def __len__(self): return len(results)
            ...     def examples(self, start, stop): self.asked.append((start, stop)); return results[start:stop]
            >>> widget = ExampleListWidget.from_pages(Pages(), page_size=3)
            >>> widget.total_examples, len(widget.tokens), Pages.asked
            (4, 3, [(0, 3)])
            >>> widget.page = 1
            >>> widget.first_example, widget.tokens[0] == results[3].tokens, Pages.asked[-1]
            (3, True, (3, 4))
        """
        if not isinstance(source, ExamplePages):
            raise TypeError(f"from_pages needs len() and examples(start, stop); got {type(source).__name__}")
        total = len(source)
        if total < 1:
            raise ValueError("there are no results to list; the paged source is empty")
        for name in ("sort_by", "filter_label", "filter_outcome", "descending"):
            if kwargs.get(name) not in (None, "", "index", "all", False):
                raise ValueError(
                    f"{name}={kwargs[name]!r}: a paged list holds one page at a time and keeps the input order; "
                    "sorting and filtering need every example in memory (ExampleListWidget(list(source)))"
                )
        page_size = kwargs.pop("page_size", cls.page_size.default_value)
        first = cls._page_start(page, page_size, total)
        widget = cls(source.examples(first, min(total, first + page_size)), page_size=page_size, **kwargs)
        widget._pages = source
        widget.total_examples, widget.first_example, widget.page = total, first, first // page_size
        widget.observe(widget._load_page, names=["page", "page_size"])
        return widget

    @staticmethod
    def _page_start(page: int, page_size: int, total: int) -> int:
        last = max(0, (total - 1) // max(1, page_size))
        return min(max(0, int(page)), last) * page_size

    def _load_page(self, change=None) -> None:
        """Replace the data with the examples of ``page`` (a paged list: read from its source)."""
        total = self.total_examples
        first = self._page_start(self.page, self.page_size, total)
        if first == self.first_example and len(self.tokens) == min(self.page_size, total - first):
            return
        traits = self._list_traits(self._pages.examples(first, min(total, first + self.page_size)))
        with self.hold_sync():
            self.selected_example = -1
            for name, value in traits.items():
                setattr(self, name, value)
            self.first_example = first
            self.page = first // self.page_size

    @staticmethod
    def _list_traits(results: Sequence[Any]) -> dict[str, Any]:
        tokens, spaces, special, words, sentences, rows, predicted, confidence, true_labels, max_attr = (
            [] for _ in range(10)
        )
        turns, roles = [], []
        signed = set()
        for r in results:
            data = token_data(r)
            probs = data.target_probs
            known = [(p, i) for i, p in enumerate(probs) if p is not None]
            target = max(known)[1] if known else 0
            mask = data.special_mask
            row = data.scores[target]  # float32: the numbers the browser holds
            tokens.append(data.tokens)
            spaces.append(data.spaces_before)
            special.append(mask)
            words.append(data.word_ids)
            sentences.append(data.sentence_ids)
            turns.append(np.where(mask, -1, 0) if data.turn_ids is None else data.turn_ids)
            roles.append(list(data.turn_roles))
            rows.append(row)
            predicted.append(data.target_labels[target])
            confidence.append(probs[target] if known else None)
            true_label = getattr(r, "true_label", None)
            true_labels.append("" if true_label is None else str(true_label))
            max_attr.append(finite_max(row[~mask]))
            signed.add(data.signed)
        methods = {str(getattr(r, "method", "") or "") for r in results}
        layout = ExamplesLayoutPart(
            tokens=tokens, spaces_before=spaces, special_mask=np.concatenate(special), word_ids=np.concatenate(words),
            sentence_ids=np.concatenate(sentences), turn_ids=np.concatenate(turns), turn_roles=roles,
        )  # fmt: skip
        listed = ExampleListData(
            layout=layout, scores=np.concatenate(rows), predicted=predicted, confidence=confidence,
            true_labels=true_labels, max_attribution=max_attr, signed=signed == {True},
            method=", ".join(sorted(methods - {""})),
        )  # fmt: skip
        return listed.to_traits()

    # ----------------------------------------------------------------- validation
    @traitlets.validate("granularity")
    def _check_granularity(self, proposal):
        return check_granularity(proposal["value"])

    @traitlets.validate("sort_by")
    def _check_sort(self, proposal):
        return check_choice("sort_by", proposal["value"], SORT_KEYS)

    @traitlets.validate("filter_outcome")
    def _check_outcome(self, proposal):
        return check_choice("filter_outcome", proposal["value"], OUTCOMES)

    @traitlets.validate("selected_example")
    def _check_selected(self, proposal):
        # a paged list's selection is a list index among the examples held (first_example onwards)
        low, n = self.first_example, len(self.tokens)
        if proposal["value"] != -1 and not low <= proposal["value"] < low + n:
            raise ValueError(f"selected_example {proposal['value']} is out of range; use -1 or {low}..{low + n - 1}")
        return proposal["value"]

    # ----------------------------------------------------------------- state
    @property
    def labels(self) -> list[str]:
        """All labels that occur as predicted or true labels, sorted (the filter's choices).

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> results = Saliency(progress=False).attribute(model, tokenizer, ["Great food.", "Awful service."],
            ...                                              true_labels=["positive", "negative"])
            >>> ExampleListWidget(results).labels  # "negative" is only a true label here
            ['negative', 'positive']
        """
        return sorted(set(self.predicted) | {t for t in self.true_labels if t})

    def visible_order(self) -> list[int]:
        """Example indices after filtering and sorting, as the browser lists them (ties keep input order).

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> reviews = ["Great food.", "Awful service.", "It was fine.", "Not bad at all."]
            >>> labels = ["positive", "negative", "neutral", "positive"]
            >>> results = Saliency(progress=False).attribute(model, tokenizer, reviews, true_labels=labels)
            >>> widget = ExampleListWidget(results)
            >>> widget.sort_by = "confidence"; widget.visible_order()
            [3, 1, 0, 2]
            >>> widget.filter_outcome = "wrong"; widget.visible_order()  # predicted positive, labelled negative
            [1]
        """
        keep = []
        for i, (pred, true) in enumerate(zip(self.predicted, self.true_labels)):
            if self.filter_label and pred != self.filter_label:
                continue
            if self.filter_outcome != "all" and (not true or (pred == true) != (self.filter_outcome == "correct")):
                continue
            keep.append(i)
        if self.sort_by == "index":
            keys = {i: float(i) for i in keep}
        elif self.sort_by == "label":
            ranks = {label: r for r, label in enumerate(sorted(set(self.predicted)))}
            keys = {i: float(ranks[self.predicted[i]]) for i in keep}
        elif self.sort_by == "confidence":
            keys = {i: -math.inf if self.confidence[i] is None else self.confidence[i] for i in keep}
        else:
            keys = {i: self.max_attribution[i] for i in keep}
        sign = -1.0 if self.descending else 1.0
        return sorted(keep, key=lambda i: (sign * keys[i], i))

    def example_scores(self, index: int) -> np.ndarray:
        """Scores of example ``index`` for its shown (predicted) class.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> reviews = ["Great food.", "Awful service.", "It was fine.", "Not bad at all."]
            >>> labels = ["positive", "negative", "neutral", "positive"]
            >>> results = Saliency(progress=False).attribute(model, tokenizer, reviews, true_labels=labels)
            >>> widget = ExampleListWidget(results)
            >>> widget.tokens[0], widget.example_scores(0).shape
            (['[CLS]', 'Great', 'food', '.', '[SEP]'], (5,))
        """
        return self._slice(self.scores, index)

    def _slice(self, values: np.ndarray, index: int) -> np.ndarray:
        start = sum(len(t) for t in self.tokens[:index])
        return values[start : start + len(self.tokens[index])]

    def units(self, index: int) -> list[list[int]]:
        """Token indices (within example ``index``) of each unit shown for the current granularity, as in the browser.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> reviews = ["Great food.", "Awful service.", "It was fine.", "Not bad at all."]
            >>> labels = ["positive", "negative", "neutral", "positive"]
            >>> results = Saliency(progress=False).attribute(model, tokenizer, reviews, true_labels=labels)
            >>> widget = ExampleListWidget(results)
            >>> widget.units(0)  # [CLS] and [SEP] are hidden
            [[1], [2], [3]]
            >>> widget.granularity = "sentence"; widget.units(0)
            [[1, 2, 3]]
        """
        return display_units(
            self._slice(self.special_mask, index),
            self._slice(self.word_ids, index),
            self._slice(self.sentence_ids, index),
            self.granularity,
            turn_ids=self._slice(self.turn_ids, index) if len(self.turn_ids) else None,
        )

    def unit_scores(self, index: int) -> np.ndarray:
        """Score sums of example ``index``'s units for the current granularity (its shown class; NaN skipped).

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> reviews = ["Great food.", "Awful service.", "It was fine.", "Not bad at all."]
            >>> labels = ["positive", "negative", "neutral", "positive"]
            >>> results = Saliency(progress=False).attribute(model, tokenizer, reviews, true_labels=labels)
            >>> widget = ExampleListWidget(results, granularity="word")
            >>> widget.unit_scores(3).round(2)  # "Not bad at all." for its predicted class
            array([0.89, 1.03, 0.56, 0.63, 0.67])
            >>> widget.granularity = "sentence"; widget.unit_scores(3).round(2)
            array([3.8])
        """
        return unit_sums(self.units(index), self.example_scores(index))[0]

    # ----------------------------------------------------------------- display
    def static_svg(self) -> str:
        """The current page (after sort and filter) with labels, confidence and coloured tokens.

        Example:
            >>> from interp_widgets.attribution import Saliency
            >>> reviews = ["Great food.", "Awful service.", "It was fine.", "Not bad at all."]
            >>> labels = ["positive", "negative", "neutral", "positive"]
            >>> results = Saliency(progress=False).attribute(model, tokenizer, reviews, true_labels=labels)
            >>> widget = ExampleListWidget(results, page_size=3)
            >>> svg = widget.static_svg()
            >>> svg.startswith("<svg"), "4 of 4 examples · page 1 of 2 · sorted by index" in svg
            (True, True)
        """
        order = self.visible_order()
        pages = max(1, math.ceil(len(order) / self.page_size))
        page = min(self.page, pages - 1)
        shown = order[page * self.page_size : (page + 1) * self.page_size]
        shared = max((finite_max(self.unit_scores(i)) for i in order), default=0.0) if self.shared_scale else None
        figure = SvgFigure(label=f"{len(order)} explained examples")
        filters = [
            f"label {self.filter_label}" if self.filter_label else "",
            f"{self.filter_outcome} only" if self.filter_outcome != "all" else "",
        ]
        paged = self.total_examples > len(self.tokens)
        if paged:  # one page of a longer list is held: the page shown is that one
            page, pages = self.first_example // self.page_size, math.ceil(self.total_examples / self.page_size)
            shown = order
        figure.text(
            (f"examples {self.first_example + 1}–{self.first_example + len(self.tokens)} of {self.total_examples}"
             if paged else f"{len(order)} of {len(self.tokens)} examples")
            + f" · page {page + 1} of {pages} · sorted by {self.sort_by}"
            + (" (descending)" if self.descending else "") + "".join(f" · {f}" for f in filters if f)
            + ("" if self.granularity == "token" else f" · sum per {self.granularity}"),
            bold=True,
        )  # fmt: skip
        if paged:
            figure.text(f"more pages exist ({pages} in all): this output holds page {page + 1}; page through the "
                        "others with a running kernel", size=11, colour="#57606a")  # fmt: skip
        for i in shown:
            pred, true = self.predicted[i], self.true_labels[i]
            conf = "" if self.confidence[i] is None else f" ({100 * self.confidence[i]:.1f}%)"
            verdict = "" if not true else (" ✓" if pred == true else " ✗")
            figure.text(f"#{self.first_example + i} predicted {pred}{conf} · true {true or 'unknown'}{verdict} · max |attribution| "
                        f"{format_score(self.max_attribution[i])}", size=12)  # fmt: skip
            units, sums = self.units(i), self.unit_scores(i)
            max_abs = shared if shared is not None else finite_max(sums)
            pieces, omitted = token_pieces(self.tokens[i], self.spaces_before[i], units, sums, max_abs, self.signed,
                                           limit=MAX_STATIC_EXAMPLE_TOKENS)  # fmt: skip
            turns = self._slice(self.turn_ids, i) if len(self.turn_ids) else None
            roles = role_starts(
                units, turns, self._slice(self.special_mask, i), self.turn_roles[i] if self.turn_roles else []
            )
            figure.tokens(with_role_labels(pieces, roles), omitted=omitted)
        legend_max = shared if shared is not None else 1.0
        title = "attribution to the predicted class" + (
            "" if shared is not None else " (each example scaled to its own max = 1)"
        )
        figure.legend(legend_max, signed=self.signed, title=title)
        if self.method:
            figure.text(f"method: {self.method}", size=11, colour="#57606a")
        return figure.render()

    def __repr__(self) -> str:
        known = [(p, t) for p, t in zip(self.predicted, self.true_labels) if t]
        accuracy = (
            f", accuracy {sum(p == t for p, t in known) / len(known):.2f} on {len(known)} labelled" if known else ""
        )
        if self.total_examples > len(self.tokens):
            held = (
                f"examples {self.first_example}..{self.first_example + len(self.tokens) - 1} of {self.total_examples}"
            )
            return f"ExampleListWidget({held}, method={self.method!r}, paged)"
        return f"ExampleListWidget({len(self.tokens)} examples, method={self.method!r}{accuracy})"
