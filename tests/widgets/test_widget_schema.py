"""The Python side of the widget contract, for every view: unknown keyword arguments raise a TypeError naming the
valid ones (a misspelt option used to be silently ignored), and the data a view draws is one versioned schema
(``interp_widgets.widgets.view_data``) whose fields are the view's synced data traits, serialised alike by the traits, the
export page and JSON."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from interp_widgets.widgets.view_data import VIEW_DATA, TokenHighlightData, ViewData
from interp_widgets.widgets._traits import BinaryArray

from interp_widgets.widgets import (
    AttentionWidget, ComparisonWidget, ConceptBrowser, ExampleListWidget, GenerationWidget, InterpWidget, LensWidget,
    MonitorWidget, PatchingView, SteeringView,
    TokenHighlightWidget, compare,
)  # fmt: skip
from interp_widgets.widgets.patching import demo_patching_data
from interp_widgets.widgets import CircuitView
from tests.widgets.test_concept_widget import _interpretation, _text, _with_control
from tests.widgets.test_steering_view import _steering_result
from tests.widgets.test_views_widget import _collection, _gen_result, _result


def _attention_patterns():
    from interp_widgets.attribution.patterns import AttentionPatterns

    weights = np.tril(np.ones((3, 3)))
    weights = (weights / weights.sum(1, keepdims=True)).astype(np.float16)
    return AttentionPatterns(tokens=["a", "b", "c"], weights=[np.stack([weights, weights])], n_kv_heads=1)


#: One way to build each view, forwarding keyword arguments to the view's constructor.
VIEWS = {
    TokenHighlightWidget: lambda **kw: TokenHighlightWidget(_result([[0.1] * 5, [0.2] * 5]), **kw),
    GenerationWidget: lambda **kw: GenerationWidget(_gen_result(), **kw),
    ComparisonWidget: lambda **kw: compare([_result([[0.1] * 5, [0.2, 0.1, 0.3, 0.4, 0.5]], method="a"),
                                            _result([[0.1] * 5, [0.5, 0.4, 0.3, 0.2, 0.1]], method="b")], **kw),
    ExampleListWidget: lambda **kw: ExampleListWidget(_collection(), **kw),
    ConceptBrowser: lambda **kw: ConceptBrowser(_with_control(_interpretation(), wins=3), texts=[_text()], **kw),
    MonitorWidget: lambda **kw: MonitorWidget(layers=["layer:0"], **kw),
    AttentionWidget: lambda **kw: AttentionWidget(_attention_patterns(), **kw),
    LensWidget: lambda **kw: LensWidget(_lens_result(), **kw),
    PatchingView: lambda **kw: PatchingView(demo_patching_data(heads=True), **kw),
    SteeringView: lambda **kw: SteeringView(_steering_result(), **kw),
    CircuitView: lambda **kw: _circuit_graph().widget(**kw),
}  # fmt: skip


def _circuit_graph():
    from interp_widgets.circuits import example_graph

    return example_graph()


def _lens_result():
    from interp_widgets.lens import logit_lens
    from tests import tiny_models

    return logit_lens(*tiny_models.gpt2_lm(), "The cat sat.", targets=[" the"], progress=False)


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


@pytest.mark.parametrize("view", list(VIEWS), ids=lambda cls: cls.__name__)
def test_no_synced_trait_shadows_one_that_ipywidgets_views_read(view):
    # ipywidgets' DOMWidgetView reads `style` (and `layout`) as references to child models and creates views of
    # them: an AttentionWidget `style = "heatmap"` threw "Cannot read properties of undefined (reading 'then')"
    # under the html-manager (VS Code) and JupyterLab on every render.
    import ipywidgets

    reserved = {name for name in ipywidgets.DOMWidget.class_trait_names() if not name.startswith("_")} | {
        "style",
        "description",
    }
    base = ipywidgets.DOMWidget.class_traits()
    own = {name for name, trait in view.class_traits(sync=True).items() if name not in base or trait is not base[name]}
    assert own & reserved == set(), sorted(own & reserved)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=True)
        )
    return a == b


def _filled(view) -> object:
    widget = VIEWS[view]()
    if view is MonitorWidget:
        for step in range(3):
            widget.log(step, {"energy_ratio|layer:0": 1.5 + step}, loss=1.0 / (step + 1))
        widget.flush()
    return widget


@pytest.mark.parametrize("view", list(VIEWS), ids=lambda cls: cls.__name__)
def test_the_schema_fields_are_the_synced_data_traits_with_the_same_array_specs(view):
    schema = VIEW_DATA[view._bundle]
    assert issubclass(schema, ViewData) and schema.VIEW == view._bundle and schema.VERSION >= 1
    assert set(schema.field_names()) == set(view.class_trait_names(sync=True, data=True))
    arrays = {
        name: trait.spec
        for name, trait in view.class_traits(sync=True, data=True).items()
        if isinstance(trait, BinaryArray)
    }
    assert arrays == schema.array_specs()


@pytest.mark.parametrize("view", list(VIEWS), ids=lambda cls: cls.__name__)
def test_view_data_round_trips_through_json_and_is_what_the_export_page_embeds(view):
    widget = _filled(view)
    data = widget.view_data()
    text = json.dumps(data.to_json(), allow_nan=False)
    back = type(data).from_json(json.loads(text))
    assert back.field_names() == data.field_names()
    for name in data.field_names():
        assert _same(getattr(back, name), getattr(data, name)), name
    page = widget.to_html()
    block = re.search(r'<script type="application/json" id="iw-state-0">(.*?)</script>', page, re.S).group(1)
    exported = json.loads(block)
    buffers = {tuple(b["path"]): base64.b64decode(b["data"]) for b in exported["buffers"]}
    for name, value in data.to_state().items():
        if isinstance(value, dict) and "data" in value:
            assert exported["state"][name] == {"dtype": value["dtype"], "shape": value["shape"]}
            assert buffers[(name, "data")] == bytes(value["data"])
        elif isinstance(value, bytes):
            assert buffers[(name,)] == value
        else:
            assert exported["state"][name] == json.loads(json.dumps(value)), name


def test_payloads_of_another_view_or_a_newer_version_are_refused():
    payload = VIEWS[TokenHighlightWidget]().view_data().to_json()
    with pytest.raises(ValueError, match="holds 'token_highlight' view data, not 'generation'"):
        VIEW_DATA["generation"].from_json(payload)
    with pytest.raises(ValueError, match="format version 3; .* reads up to 2"):
        TokenHighlightData.from_json({**payload, "version": 3})
    old = {name: value for name, value in payload["data"].items() if name not in ("turn_ids", "turn_roles")}
    older = TokenHighlightData.from_json({**payload, "version": 1, "data": old})  # version 1 had no turns
    assert older.turn_ids is None and older.turn_roles == []
    with pytest.raises(ValueError, match=r"unknown token_highlight fields \['colour'\]"):
        TokenHighlightData.from_json({**payload, "data": {**payload["data"], "colour": "red"}})
