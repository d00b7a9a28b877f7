"""The duck-typed inputs of the views, written as :class:`typing.Protocol` s (as in ``anywidget/_protocols.py``).

The widgets are a leaf of the package: they import no compute package (``attribution``, ``concepts``,
``geometry``), so they cannot name the result classes. These protocols say what a view reads from its input
instead; ``AttributionResult``, ``ConceptInterpretation``, ``TextConcepts``, ``ConceptImportance`` and
``GeometryLog`` satisfy them, and so does any object of the same shape.

A text's tokens are read from its one :class:`~interp_widgets.text_units.TokenLayout` (``layout``), never from
fields declared again here.

Example:
    >>> from types import SimpleNamespace
    >>> layout = TokenLayout(text="a", tokens=["a"], offsets=[(0, 1)], special_mask=[False])
    >>> isinstance(SimpleNamespace(layout=layout, scores=[1.0]), ScoredTokens)
    True
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from interp_widgets.text_units import TokenLayout

__all__ = [
    "ConceptImportanceLike",
    "ConceptInputAttributionsLike",
    "ConceptSummary",
    "ConceptTexts",
    "ScoredTokens",
    "SeriesSource",
]


@runtime_checkable
class ScoredTokens(Protocol):
    """Scores of the tokens of one text (read by the token views): the text's :class:`~interp_widgets.text_units.
    TokenLayout` (``layout``: tokens, offsets, special mask, word / sentence / turn ids, roles) and a score per row and
    token.

    Optional attributes, read when present: ``target_labels``, ``target_probs``, ``completeness_error`` (one per row of
    scores), ``method``, ``score_meaning`` (what a score means), ``signed``, for generations ``generated_mask`` and
    ``target_positions``, and for contrastive results ``foil_labels``, ``foil_probs`` (one per row) and ``contrast``
    (the foil continuation). The token views also take a plain object with the layout's values flat (``text``,
    ``tokens``, ``offsets``, optionally ``special_mask``, ``word_ids``, ``sentence_ids``, ``turn_ids``,
    ``turn_roles``), as ``TokenHighlightWidget.from_arrays`` passes them (:func:`~interp_widgets.widgets._tokens.
    scored_layout` reads both).

    Example:
        >>> isinstance(object(), ScoredTokens)
        False
    """

    layout: TokenLayout
    scores: Any  # (n_targets, n_tokens) or (n_tokens,)


@runtime_checkable
class SeriesSource(Protocol):
    """A live source of training curves (read by :class:`~interp_widgets.widgets.MonitorWidget`).

    Optional: ``steps``, ``series_names()`` and ``series(name)`` for the rows it already holds.

    Example:
        >>> isinstance(object(), SeriesSource)
        False
    """

    layers: Sequence[str]
    x_label: str

    def subscribe(self, callback: Callable[[Any, dict], None]) -> Callable[[], None]: ...

    def on_flush(self, callback: Callable[..., None]) -> Any: ...


@runtime_checkable
class ConceptSummary(Protocol):
    """Per-concept summaries (read by :class:`~interp_widgets.widgets.ConceptBrowser`): arrays indexed by concept.

    ``examples[c]`` holds dicts with ``token``, ``context``, ``center``, ``activation``, ``text_id`` and
    ``context_activations``; ``top_texts[c]`` / ``top_text_values[c]`` are text ids (-1 pad) into ``texts`` and their
    largest activation; ``hist_counts[c]`` counts over ``hist_edges[c]``.

    Example:
        >>> isinstance(object(), ConceptSummary)
        False
    """

    method: str
    layer: str | None
    labels: list[str]
    density: np.ndarray
    mean: np.ndarray
    maximum: np.ndarray
    minimum: np.ndarray
    examples: list[list[dict]]
    top_texts: np.ndarray
    top_text_values: np.ndarray
    texts: dict[str, str]
    hist_counts: np.ndarray
    hist_edges: np.ndarray
    vocab_tokens: list[list[str]] | None
    vocab_logits: np.ndarray | None
    params: dict[str, Any]

    def top_tokens(self, concept: int) -> list[str]: ...


@runtime_checkable
class ConceptTexts(Protocol):
    """Concept coefficients of every token of one text (the concept browser's text view), over the text's
    :class:`~interp_widgets.text_units.TokenLayout` (``layout``).

    Example:
        >>> isinstance(object(), ConceptTexts)
        False
    """

    layout: TokenLayout
    coefficients: np.ndarray  # (n_tokens, n_concepts)


@runtime_checkable
class ConceptImportanceLike(ConceptTexts, Protocol):
    """Concept texts that also know each concept's importance for a prediction (the browser's importance column).

    Example:
        >>> isinstance(object(), ConceptImportanceLike)
        False
    """

    target_labels: list[str]

    def per_concept(self, target: int | str | None = None) -> np.ndarray: ...

    def target_label(self, target: int | str | None = None) -> str: ...


@runtime_checkable
class ConceptInputAttributionsLike(Protocol):
    """Input attributions of concepts on texts (the concept browser's "input attribution" text view):
    ``scores(text, concept, compute=...)`` returns a :class:`ScoredTokens` with one score row for that text and
    concept, or ``None`` when it is not available without computing. The compute side
    (:class:`~interp_widgets.concepts.ConceptInputAttributions`) computes and caches; the browser only asks.

    Example:
        >>> isinstance(object(), ConceptInputAttributionsLike)
        False
    """

    method: str

    def scores(self, text: str, concept: int, *, compute: bool = True) -> Any: ...


@runtime_checkable
class ExamplePages(Protocol):
    """A long list of explained examples read a page at a time (read by
    :meth:`~interp_widgets.widgets.ExampleListWidget.from_pages`):
    :class:`~interp_widgets.attribution.CorpusAttribution` reads only the shards a page needs.

    ``len()`` is the number of examples; ``examples(start, stop)`` returns the results ``start..stop-1`` (each a
    :class:`ScoredTokens` with ``true_label`` and ``method``).
    """

    def __len__(self) -> int: ...

    def examples(self, start: int, stop: int) -> Sequence[Any]: ...


@runtime_checkable
class ExportableView(Protocol):
    """What an export page needs of a view (every :class:`~interp_widgets.widgets.InterpWidget` has it): its bundled
    front end and styles, its view data and its no-script fallback.

    Example:
        >>> from interp_widgets.widgets import TokenHighlightWidget
        >>> isinstance(TokenHighlightWidget.from_arrays("Hi", ["Hi"], [(0, 2)], [0.5]), ExportableView)
        True
    """

    _esm: Any
    _css: Any

    def view_data(self) -> Any: ...

    def _fallback_html(self) -> str: ...
