"""Thin anywidget classes over the bundled front ends in ``interp_widgets/static``.

One class per view: :class:`TokenHighlightWidget` (classification), :class:`GenerationWidget` (prompt + generated
tokens), :class:`ComparisonWidget` via :func:`compare` (methods side by side), :class:`ExampleListWidget` (many
inputs), :class:`ConceptBrowser` (concepts) and :class:`MonitorWidget` (live training curves). Every widget displays a
static SVG where no JavaScript runs and exports to one offline HTML page (:mod:`interp_widgets.widgets.export`).

The widgets are a leaf of the package: they import only its core (``text_units``, ``layers``, ``agreement``,
``series_names``), never ``attribution``, ``concepts`` or ``geometry``; results build their own views
(``result.widget()``), and the inputs a view reads are written as protocols in ``widgets/_protocols.py``.

Example:
    >>> from interp_widgets.widgets import TokenHighlightWidget
    >>> TokenHighlightWidget.from_arrays("Hi!", ["Hi", "!"], [(0, 2), (2, 3)], [0.5, -0.1])  # doctest: +ELLIPSIS
    TokenHighlightWidget(...)
"""

from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._static import STATIC_DIR
from interp_widgets.widgets._traits import array_to_buffer, buffer_to_array
from interp_widgets.widgets.comparison import ComparisonWidget, compare
from interp_widgets.widgets.concept_browser import ConceptBrowser
from interp_widgets.widgets.example_list import ExampleListWidget
from interp_widgets.widgets.export import html_page
from interp_widgets.widgets.generation import GenerationWidget
from interp_widgets.widgets.monitor import MonitorWidget
from interp_widgets.widgets.token_highlight import TokenHighlightWidget

__all__ = [
    "STATIC_DIR",
    "ComparisonWidget",
    "ConceptBrowser",
    "ExampleListWidget",
    "GenerationWidget",
    "InterpWidget",
    "MonitorWidget",
    "TokenHighlightWidget",
    "array_to_buffer",
    "buffer_to_array",
    "compare",
    "html_page",
]
