"""Thin anywidget classes over the bundled front ends in ``interp_widgets/static``.

One class per view: :class:`TokenHighlightWidget` (classification), :class:`GenerationWidget` (prompt + generated
tokens), :class:`ComparisonWidget` via :func:`compare` (methods side by side), :class:`ExampleListWidget` (many
inputs), :class:`MonitorWidget` (live training curves). Every widget displays a static SVG where no JavaScript runs and exports to one offline HTML page.

Example:
    >>> from interp_widgets.widgets import TokenHighlightWidget
    >>> TokenHighlightWidget.from_arrays("Hi!", ["Hi", "!"], [(0, 2), (2, 3)], [0.5, -0.1])  # doctest: +ELLIPSIS
    TokenHighlightWidget(...)
"""

from interp_widgets.widgets._base import InterpWidget, array_to_buffer, buffer_to_array
from interp_widgets.widgets._export import html_page
from interp_widgets.widgets.comparison import ComparisonWidget, agreement_table, compare, spearman, top_k_overlap
from interp_widgets.widgets.concepts import ConceptBrowser
from interp_widgets.widgets.examples import ExampleListWidget
from interp_widgets.widgets.generation import GenerationWidget
from interp_widgets.widgets.monitor import MonitorWidget
from interp_widgets.widgets.tokens import TokenHighlightWidget

__all__ = [
    "ComparisonWidget",
    "ConceptBrowser",
    "ExampleListWidget",
    "GenerationWidget",
    "InterpWidget",
    "MonitorWidget",
    "TokenHighlightWidget",
    "agreement_table",
    "array_to_buffer",
    "buffer_to_array",
    "compare",
    "html_page",
    "spearman",
    "top_k_overlap",
]
