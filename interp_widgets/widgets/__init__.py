"""Thin anywidget classes over the bundled front ends in ``interp_widgets/static``.

One class per view: :class:`TokenHighlightWidget` (classification), :class:`GenerationWidget` (prompt + generated
tokens), :class:`ComparisonWidget` via :func:`compare` (methods side by side), :class:`ExampleListWidget` (many
inputs), :class:`ConceptBrowser` (concepts), :class:`MonitorWidget` (live training curves) and :class:`PatchingView`
(activation / attribution patching heatmaps). Every widget displays a
static SVG where no JavaScript runs and exports to one offline HTML page (:mod:`interp_widgets.widgets.export`). Each
output also saves the view's data as :data:`MIME_TYPE` (at most :func:`output_cap` bytes, 1 MiB by default), from
which the ``interp-widgets`` JupyterLab / Notebook 7 extension rebuilds the interactive view without a kernel.

The widgets are a leaf of the package: they import only its core (``text_units``, ``agreement``, ``series_names``,
``validation``), never ``attribution``, ``concepts`` or ``geometry``; results build their own views
(``result.widget()``), and the inputs a view reads are written as protocols in ``widgets/_protocols.py``.

Example:
    >>> from interp_widgets.widgets import TokenHighlightWidget
    >>> TokenHighlightWidget.from_arrays("Hi!", ["Hi", "!"], [(0, 2), (2, 3)], [0.5, -0.1])  # doctest: +ELLIPSIS
    TokenHighlightWidget(...)
"""

from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._static import STATIC_DIR
from interp_widgets.widgets.attention import AttentionWidget
from interp_widgets.widgets.circuit import CircuitView
from interp_widgets.widgets._traits import array_to_buffer, buffer_to_array
from interp_widgets.widgets.comparison import ComparisonWidget, compare
from interp_widgets.widgets.concept_browser import ConceptBrowser
from interp_widgets.widgets.example_list import ExampleListWidget
from interp_widgets.widgets.export import html_page
from interp_widgets.widgets.generation import GenerationWidget
from interp_widgets.widgets._mime import MIME_TYPE, output_cap, set_output_cap
from interp_widgets.widgets.lens import LensWidget
from interp_widgets.widgets.monitor import MonitorWidget
from interp_widgets.widgets.patching import PatchingView
from interp_widgets.widgets.steering import SteeringView
from interp_widgets.widgets.token_highlight import TokenHighlightWidget

__all__ = [
    "MIME_TYPE",
    "STATIC_DIR",
    "AttentionWidget",
    "CircuitView",
    "ComparisonWidget",
    "ConceptBrowser",
    "ExampleListWidget",
    "GenerationWidget",
    "InterpWidget",
    "LensWidget",
    "MonitorWidget",
    "PatchingView",
    "SteeringView",
    "TokenHighlightWidget",
    "array_to_buffer",
    "buffer_to_array",
    "compare",
    "html_page",
    "output_cap",
    "set_output_cap",
]
