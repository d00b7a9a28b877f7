"""The typed Python↔JS contract: ``BinaryArray`` traits (coercion, dimensions, finiteness, wire format)."""

from __future__ import annotations

import numpy as np
import pytest
import traitlets

from interp_widgets.widgets import TokenHighlightWidget, buffer_to_array
from interp_widgets.widgets._traits import ArrayTraitError, BinaryArray


class Holder(traitlets.HasTraits):
    scores = BinaryArray("float32", ndim=2, finite=True)
    ids = BinaryArray("int")
    mask = BinaryArray("bool")
    optional = BinaryArray("float32", allow_none=True)


def _wire(holder: Holder, name: str):
    return holder.trait_metadata(name, "to_json")(getattr(holder, name), holder)


def test_values_are_coerced_read_only_copies():
    source = np.array([[1.0, 2.0]], dtype=np.float64)
    holder = Holder(scores=source, ids=[1, 300], mask=[1, 0])
    assert holder.scores.dtype == np.float32 and holder.ids.dtype == np.int16 and holder.mask.dtype == bool
    source[0, 0] = 9.0
    assert holder.scores[0, 0] == 1.0  # a copy: later changes to the input do not leak in
    with pytest.raises(ValueError, match="read-only"):
        holder.scores[0, 0] = 5.0  # changes go through assignment, which notifies the browser
    assert Holder().scores.shape == (0, 0) and Holder().optional is None


def test_dimensions_infinity_and_dtypes_are_checked_nan_is_allowed():
    holder = Holder()
    holder.scores = [[np.nan, 1.0]]  # NaN means "not seen"
    with pytest.raises(ArrayTraitError, match=r"scores must be a 2-D array, got shape \(2,\)"):
        holder.scores = [1.0, 2.0]
    with pytest.raises(ValueError, match="scores contain infinity"):
        holder.scores = [[np.inf, 1.0]]
    with pytest.raises(ValueError, match="do not fit in int32"):
        holder.ids = [2**40]
    with pytest.raises(ArrayTraitError, match="must hold numbers"):
        holder.ids = np.array(["a", None], dtype=object)
    assert np.isnan(holder.scores[0, 0])


def test_wire_format_is_the_codec_payload_and_round_trips():
    holder = Holder(scores=[[0.5, -1.0]], ids=[-1, 0, 2], optional=None)
    payload = _wire(holder, "scores")
    assert payload["dtype"] == "float32" and payload["shape"] == [1, 2] and isinstance(payload["data"], memoryview)
    assert _wire(holder, "ids")["dtype"] == "int8"
    assert _wire(holder, "optional") == {}  # absent travels as {}, as the JS expects
    back = holder.trait_metadata("scores", "from_json")(payload, holder)
    np.testing.assert_array_equal(back, holder.scores)
    assert holder.trait_metadata("optional", "from_json")({}, holder) is None


def test_widget_attributes_are_arrays_and_buffer_to_array_passes_them_through():
    widget = TokenHighlightWidget.from_arrays("a b", ["a", "b"], [(0, 1), (2, 3)], [[1.0, -1.0]])
    assert isinstance(widget.scores, np.ndarray) and widget.scores.shape == (1, 2)
    assert buffer_to_array(widget.scores) is widget.scores
    state = widget.get_state()
    np.testing.assert_array_equal(buffer_to_array(state["scores"]), widget.scores)
