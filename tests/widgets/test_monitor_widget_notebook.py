"""MonitorWidget in a notebook executed by nbclient (which saves widget state): the saved state carries the whole
history, the output shown with ``widget.show()`` is refreshed with the final curves after the training cell, and an
nbconvert export without widget state falls back to that SVG picture."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

REPO = Path(__file__).resolve().parents[2]
STEPS = 50

SHOW = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from interp_widgets.widgets.monitor import MonitorWidget
widget = MonitorWidget(layers=["enc.0"], title="saved run")
handle = widget.show()
"""
TRAIN = f"""
for step in range({STEPS}):
    widget.log(step, {{"energy_ratio|enc.0": 1.0 + step / 10, "control_ratio_q05|enc.0": 0.8,
                       "control_ratio_q95|enc.0": 1.2}}, loss=1.0 / (step + 1))
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SHOW), nbformat.v4.new_code_cell(TRAIN)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    return nb


def _monitor_state(nb) -> dict:
    states = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    (model,) = [m for m in states.values() if m["state"].get("_anywidget_id", "").endswith("MonitorWidget")]
    return model


def test_saved_state_has_the_whole_history(executed):
    model = _monitor_state(executed)
    assert model["state"]["checkpoint_schema"]["rows"] == STEPS
    series = model["state"]["checkpoint_schema"]["series"]
    (buffer,) = [b for b in model.get("buffers", []) if b["path"] == ["checkpoint"]]
    data = base64.b64decode(buffer["data"])
    steps = np.frombuffer(data[: 8 * STEPS], dtype="<f8")
    columns = np.frombuffer(data[8 * STEPS :], dtype="<f4").reshape(len(series), STEPS)
    np.testing.assert_array_equal(steps, np.arange(STEPS))
    np.testing.assert_array_equal(columns[series.index("loss")], np.float32(1.0 / (np.arange(STEPS) + 1)))


def test_shown_output_is_refreshed_with_the_final_curves(executed):
    (output,) = executed.cells[0].outputs
    assert "application/vnd.jupyter.widget-view+json" in output["data"]
    svg = output["data"]["image/svg+xml"]
    assert "No steps logged yet" not in svg and "saved run" in svg
    assert len(re.findall(r"<path", svg)) > 5


def test_export_without_widget_state_shows_the_svg(executed):
    nb = nbformat.from_dict(executed)
    nb.metadata.pop("widgets")
    page, _ = HTMLExporter().from_notebook_node(nb)
    images = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)
    assert images, "no SVG fallback in the exported page"
    svg = base64.b64decode(images[0]).decode("utf-8")
    assert "saved run" in svg and "enc.0" in svg
