"""The one Python column store (interp_widgets/columns.py), shared by the geometry log and the monitor widget."""

import subprocess
import sys

import numpy as np
import pytest

from interp_widgets.columns import ColumnStore


def test_the_store_imports_no_torch():
    code = "import sys, interp_widgets.columns; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_log_and_the_widget_hold_the_same_store():
    from interp_widgets.geometry import GeometryLog
    from interp_widgets.widgets import MonitorWidget

    assert isinstance(GeometryLog(["0"])._store, ColumnStore)
    assert isinstance(MonitorWidget()._store, ColumnStore)


def test_append_keeps_equal_steps_as_rows_and_drops_a_bad_row():
    store = ColumnStore(step_dtype=np.float64, dtype=np.float32)
    store.append(0, {"loss": 1.0})
    store.append(0, {"loss": 0.5, "acc": 0.25})
    with pytest.raises(TypeError, match="series 'loss' at step 1: expected a number"):
        store.append(1, {"acc": 0.5, "loss": "high"})
    assert store.steps.tolist() == [0.0, 0.0] and store.column("loss").tolist() == [1.0, 0.5]
    assert store.column("acc").dtype == np.float32 and np.isnan(store.column("acc")[0])
    with pytest.raises(ValueError, match="must not decrease"):
        store.append(-1, {"loss": 1.0})


def test_extend_matches_appending_row_by_row():
    steps = np.arange(40, dtype=np.float64)
    values = {"a": np.linspace(0, 1, 40), "b": np.full(40, np.nan)}
    one, many = ColumnStore(step_dtype=np.float64), ColumnStore(step_dtype=np.float64)
    many.extend(steps, values)
    for i, step in enumerate(steps):
        one.append(step, {name: column[i] for name, column in values.items()})
    assert np.array_equal(one.steps, many.steps)
    for name in values:
        assert np.array_equal(one.column(name), many.column(name), equal_nan=True)
    assert np.array_equal(many.column("a", 10, 12), values["a"][10:12])


def test_arrays_round_trip_keeps_thinning_state():
    store = ColumnStore(max_rows=4)
    for step in range(10):
        store.put(step, {"x": float(step)}, raw={"r": np.array([step, -step])})
    back = ColumnStore.from_arrays(*store.arrays(), max_rows=4)
    assert back.steps.tolist() == store.steps.tolist() == [0, 4, 8]
    assert back.raw_matrix("r").tolist() == store.raw_matrix("r").tolist()
    assert (back.stride, back.offered) == (store.stride, store.offered)


def test_a_new_row_starts_empty_after_a_failed_append_and_after_thinning():
    store = ColumnStore(step_dtype=np.float64, dtype=np.float32)
    store.append(0, {"loss": 1.0, "acc": 0.5})
    with pytest.raises(TypeError):
        store.append(1, {"acc": 0.75, "loss": "high"})  # acc was written before the bad loss
    store.append(2, {"loss": 0.5})  # the row the failed append used: acc must not show 0.75
    assert store.column("loss").tolist() == [1.0, 0.5] and np.isnan(store.column("acc")[1])
    thinned = ColumnStore(4, step_dtype=np.float64, dtype=np.float32)
    for step in range(6):  # the fifth row thins the store to every other step; step 5 is dropped
        thinned.append(step, {"x": float(step), "y": float(step)})
    thinned.append(6, {"x": 6.0})  # kept after thinning: y was never given at this step
    assert thinned.steps.tolist() == [0, 2, 4, 6] and np.isnan(thinned.column("y")[-1])
