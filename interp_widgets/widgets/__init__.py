"""Thin anywidget classes over the bundled front ends in ``interp_widgets/static``.

Example:
    >>> from interp_widgets.widgets import TokenHighlightWidget
    >>> TokenHighlightWidget.from_arrays("Hi!", ["Hi", "!"], [(0, 2), (2, 3)], [0.5, -0.1])  # doctest: +ELLIPSIS
    TokenHighlightWidget(...)
"""

from interp_widgets.widgets._base import InterpWidget, array_to_buffer, buffer_to_array
from interp_widgets.widgets._export import html_page
from interp_widgets.widgets.tokens import TokenHighlightWidget

__all__ = ["InterpWidget", "TokenHighlightWidget", "array_to_buffer", "buffer_to_array", "html_page"]
