"""A view's data is declared once, in its view-data class: the widget's synced data traits are made from its fields
(``class MyWidget(InterpWidget, data=MyData)``), and a field that is itself a dataclass (a part several views share,
such as a token layout) is flattened into traits of its own fields' names, so the wire format stays flat."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import traitlets

from interp_widgets.widgets import InterpWidget
from interp_widgets.widgets._traits import BinaryArray, data_traits
from interp_widgets.widgets.view_data import VIEW_DATA, ViewData, data_field, data_fields


@dataclass
class Layout:
    """A part: its arrays' specs travel with it."""

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"word_ids": ("int", 1, False)}

    tokens: list[str] = data_field("Text of each token.")
    word_ids: np.ndarray = data_field("Word of each token.")


@dataclass
class PartData(ViewData):
    VIEW: ClassVar[str] = "part_test"
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"scores": ("float32", 1, True)}

    layout: Layout
    scores: np.ndarray = data_field("One score per token.")
    kind: str = data_field(trait_default="plain")
    title: str = data_field("A title.", default="untitled")
    probs: list[float | None] = data_field(default_factory=list)


def _data() -> PartData:
    return PartData(layout=Layout(tokens=["a", "b"], word_ids=[0, 300]), scores=[1, 2], kind="k", probs=[0.5, None])


def _check_part_widget() -> None:
    class PartWidget(InterpWidget, data=PartData):
        selected = traitlets.Int(-1).tag(sync=True)

    assert [f.name for f in data_fields(PartData)] == ["tokens", "word_ids", "scores", "kind", "title", "probs"]
    assert [f.path for f in data_fields(PartData)][:2] == [("layout", "tokens"), ("layout", "word_ids")]
    traits = PartWidget.class_traits(data=True)
    assert sorted(traits) == sorted(["tokens", "word_ids", "scores", "kind", "title", "probs"])
    assert isinstance(traits["word_ids"], BinaryArray) and traits["word_ids"].spec == ("int", 1, False)
    assert traits["scores"].spec == ("float32", 1, True)
    assert isinstance(traits["tokens"], traitlets.List) and isinstance(traits["tokens"]._trait, traitlets.Unicode)
    assert traits["tokens"].help == "Text of each token."
    assert traits["title"].default_value == "untitled" and traits["kind"].default_value == "plain"
    inner = traits["probs"]._trait
    assert isinstance(inner, traitlets.Float) and inner.allow_none
    assert all(trait.metadata["sync"] and trait.metadata["data"] for trait in traits.values())
    assert "selected" not in traits and PartWidget._bundle == "part_test"


def test_a_dataclass_field_is_flattened_into_traits_of_its_fields_names():
    _check_part_widget()  # the widget class lives in that call only, and is then collected
    gc.collect()  # so it joins no list of the package's views (tests/test_widget_schema.py finds them all)
    assert not [cls for cls in InterpWidget.__subclasses__() if cls.__name__ == "PartWidget"]


def test_the_flat_wire_format_round_trips_into_the_part():
    data = _data()
    assert data.layout.word_ids.dtype == np.int16  # the part's arrays are coerced like the view's
    flat = data.to_traits()
    assert list(flat) == ["tokens", "word_ids", "scores", "kind", "title", "probs"]
    assert flat["tokens"] == ["a", "b"] and flat["word_ids"].tolist() == [0, 300]
    assert set(data.to_state()) == set(flat) and data.to_state()["word_ids"]["dtype"] == "int16"
    back = PartData.from_json(data.to_json())
    assert set(back.to_json()["data"]) == set(flat)
    assert back.layout.tokens == ["a", "b"] and back.layout.word_ids.tolist() == [0, 300]
    assert back.scores.tolist() == [1.0, 2.0] and back.kind == "k" and back.probs == [0.5, None]
    rebuilt = PartData.from_traits(flat).layout
    assert isinstance(rebuilt, Layout) and rebuilt.tokens == ["a", "b"] and rebuilt.word_ids.tolist() == [0, 300]


def test_a_data_field_declared_on_the_widget_too_is_refused():
    with pytest.raises(TypeError, match="declares 'title', a field of its data PartData"):

        class Twice(InterpWidget, data=PartData):
            title = traitlets.Unicode("").tag(sync=True, data=True)

    gc.collect()  # the half-made class must not stay among the views
    assert not [cls for cls in InterpWidget.__subclasses__() if cls.__name__ == "Twice"]


def test_a_part_that_repeats_a_field_name_is_refused():
    @dataclass
    class Clash(ViewData):
        VIEW: ClassVar[str] = "clash_test"
        layout: Layout
        tokens: list[str] = data_field(default_factory=list)

    with pytest.raises(TypeError, match=r"data fields \['tokens'\] twice"):
        data_traits(Clash)


def test_an_array_without_a_spec_is_refused():
    @dataclass
    class NoSpec(ViewData):
        VIEW: ClassVar[str] = "no_spec_test"
        values: np.ndarray = data_field()

    with pytest.raises(TypeError, match="NoSpec.values is an array without a spec"):
        data_traits(NoSpec)


@pytest.mark.parametrize("view", sorted(VIEW_DATA))
def test_every_view_widget_gets_its_data_traits_from_its_view_data_class(view):
    widgets = [cls for cls in _widget_classes() if cls._data_class is VIEW_DATA[view]]
    assert len(widgets) == 1, f"one widget draws {view}, found {widgets}"
    (widget,) = widgets
    assert widget._bundle == view
    assert sorted(widget.class_trait_names(data=True)) == sorted(VIEW_DATA[view].field_names())
    for name, trait in data_traits(VIEW_DATA[view]).items():
        made = widget.class_traits()[name]
        assert type(made) is type(trait) and made.metadata == trait.metadata and made.allow_none == trait.allow_none


def _widget_classes() -> list[type]:
    import interp_widgets.widgets as widgets

    return [getattr(widgets, name) for name in widgets.__all__ if isinstance(getattr(widgets, name), type)
            and issubclass(getattr(widgets, name), InterpWidget) and getattr(widgets, name)._data_class]  # fmt: skip


def test_the_generated_js_trait_lists_are_current():
    """js/src/lib/view_traits.js (each view's data typedef and DATA_TRAITS, imported by the views) is generated from
    the view-data classes; a change there without `python scripts/view_schema.py` fails here."""
    from pathlib import Path

    from interp_widgets.widgets._payload_schema import traits_js

    path = Path(__file__).resolve().parents[2] / "js" / "src" / "lib" / "view_traits.js"
    assert path.read_text(encoding="utf-8") == traits_js(), "run python scripts/view_schema.py"
    for view, data_class in VIEW_DATA.items():
        names = ", ".join(f'"{name}"' for name in data_class.field_names())
        assert f"export const {view.upper()}_DATA_TRAITS = [{names}];" in traits_js()


@pytest.mark.parametrize("view", sorted(VIEW_DATA))
def test_every_view_data_class_is_built_from_at_most_twelve_fields(view):
    import dataclasses
    import inspect

    assert len(dataclasses.fields(VIEW_DATA[view])) <= 12
    assert len(inspect.signature(VIEW_DATA[view]).parameters) <= 12


def test_the_token_views_share_one_token_layout_part():
    import dataclasses
    import typing

    from interp_widgets.widgets.view_data import TokenLayoutPart

    layouts = {view: typing.get_type_hints(cls).get("layout") for view, cls in VIEW_DATA.items()}
    for view in ("token_highlight", "comparison", "generation"):
        assert issubclass(layouts[view], TokenLayoutPart), view
    names = {f.name for f in dataclasses.fields(TokenLayoutPart)} - {"tokens"}  # attention and lens list tokens only
    for view, cls in VIEW_DATA.items():  # no view declares a token layout's fields again beside a part
        own = {f.name for f in dataclasses.fields(cls)}
        assert not own & names, (view, own & names)


def test_part_fields_read_flat_are_read_only_and_from_flat_refuses_unknown_names():
    from interp_widgets.widgets.view_data import TokenHighlightData

    flat = dict(tokens=["a"], spaces_before=[""], special_mask=[False], word_ids=[0], sentence_ids=[0], scores=[[1]])
    data = TokenHighlightData.from_flat(**flat)
    assert data.tokens is data.layout.tokens and data.scores is data.scoring.scores and data.target_labels == []
    with pytest.raises(AttributeError, match="set data.layout.tokens instead"):
        data.tokens = ["b"]
    with pytest.raises(AttributeError, match="no attribute 'colour'"):
        data.colour
    with pytest.raises(ValueError, match=r"unknown token_highlight fields \['colour'\]"):
        TokenHighlightData.from_flat(**flat, colour="red")
