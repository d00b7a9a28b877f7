"""The Python side of the widget contract, for every view: unknown keyword arguments raise a TypeError naming the
valid ones (a misspelt option used to be silently ignored)."""

from __future__ import annotations

import numpy as np
import pytest

from interp_widgets.widgets import (
    ComparisonWidget, ConceptBrowser, ExampleListWidget, GenerationWidget, InterpWidget, MonitorWidget,
    TokenHighlightWidget, compare,
)  # fmt: skip
from tests.test_concept_widget import _interpretation, _text
from tests.test_views_widget import _collection, _gen_result, _result

#: One way to build each view, forwarding keyword arguments to the view's constructor.
VIEWS = {
    TokenHighlightWidget: lambda **kw: TokenHighlightWidget(_result([[0.1] * 5, [0.2] * 5]), **kw),
    GenerationWidget: lambda **kw: GenerationWidget(_gen_result(), **kw),
    ComparisonWidget: lambda **kw: compare([_result([[0.1] * 5, [0.2, 0.1, 0.3, 0.4, 0.5]], method="a"),
                                            _result([[0.1] * 5, [0.5, 0.4, 0.3, 0.2, 0.1]], method="b")], **kw),
    ExampleListWidget: lambda **kw: ExampleListWidget(_collection(), **kw),
    ConceptBrowser: lambda **kw: ConceptBrowser(_interpretation(), texts=[_text()], **kw),
    MonitorWidget: lambda **kw: MonitorWidget(layers=["layer:0"], **kw),
}  # fmt: skip


def _views(cls=InterpWidget):
    for sub in cls.__subclasses__():
        if sub.__dict__.get("_bundle"):
            yield sub
        yield from _views(sub)


def test_every_view_is_covered():
    assert set(_views()) == set(VIEWS), "add a factory for the new view to VIEWS"


@pytest.mark.parametrize("view", list(VIEWS), ids=lambda cls: cls.__name__)
def test_unknown_keyword_arguments_raise_naming_the_valid_ones(view):
    make = VIEWS[view]
    assert isinstance(make(), view)
    with pytest.raises(TypeError, match=rf"{view.__name__} got unexpected keyword argument 'no_such_option'; "
                                        r"valid ones are: .*\berror\b"):  # fmt: skip
        make(no_such_option=1)
    misspelt = next(name for name in view.valid_options() if len(name) > 5 and name not in ("monitor", "result"))
    with pytest.raises(TypeError, match=rf"'{misspelt[:-1]}' \(did you mean '{misspelt}'\?\)"):
        make(**{misspelt[:-1]: None})
    with pytest.raises(TypeError, match="'_esm'"):
        make(_esm="export default {}")


def test_valid_options_are_constructor_parameters_and_public_traits():
    options = TokenHighlightWidget.valid_options()
    assert {"result", "selected_target", "granularity", "shared_scale", "high_contrast", "encoding"} <= set(options)
    assert not any(name.startswith("_") for name in options) and "layout" not in options
    assert {"monitor", "flush_interval", "clock", "title"} <= set(MonitorWidget.valid_options())
    assert np.all([isinstance(name, str) for name in ConceptBrowser.valid_options()])
