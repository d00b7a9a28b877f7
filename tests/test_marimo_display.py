"""marimo shows results as their views: every result's ``_display_`` (marimo's display protocol, which takes
precedence over ``_repr_mimebundle_``) returns its widget, and marimo's own formatter turns that widget into a
``<marimo-anywidget>`` UI element, as ``mo.ui.anywidget`` does. The browser side is in ``tests/browser/test_marimo.py``."""

from __future__ import annotations

import pytest
from marimo._output.formatting import try_format

from interp_widgets.geometry import AnisotropyMonitor
from interp_widgets.geometry.monitor.delegation import offer_history_api
from interp_widgets.geometry.log.geometry_log import GeometryLog
from interp_widgets.widgets import (
    ConceptBrowser,
    ExampleListWidget,
    GenerationWidget,
    MonitorWidget,
    TokenHighlightWidget,
)
from tests.widgets.test_concept_widget import _interpretation
from tests.widgets.test_views_widget import _collection, _gen_result, _result

RESULTS = {
    "attribution": (lambda: _result([[0.1] * 5, [0.2] * 5]), TokenHighlightWidget),
    "generation": (_gen_result, GenerationWidget),
    "collection": (_collection, ExampleListWidget),
    "concepts": (_interpretation, ConceptBrowser),
    "history": (lambda: GeometryLog(["layer:0"]), MonitorWidget),
}


@pytest.mark.parametrize("name", sorted(RESULTS))
def test_results_display_in_marimo_as_their_widget(name):
    make, view = RESULTS[name]
    result = make()
    assert isinstance(result._display_(), view)
    formatted = try_format(result)
    assert formatted.traceback is None, formatted.traceback
    assert formatted.mimetype == "text/html"
    assert formatted.data.startswith("<marimo-ui-element object-id=") and "<marimo-anywidget" in formatted.data


def test_a_monitor_displays_its_cached_widget():
    assert AnisotropyMonitor._display_ is GeometryLog._display_  # offered from its history, like _repr_mimebundle_

    class Holder:  # what AnisotropyMonitor is to offer_history_api: an object holding a history log
        def __init__(self):
            self.history = GeometryLog(["layer:0"])

    holder = offer_history_api(Holder)()
    assert holder._display_() is holder.history.widget()
