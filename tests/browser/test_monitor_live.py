"""The training monitor updates live in real JupyterLab and Notebook 7 while the training cell is still running.

One cell displays a standalone MonitorWidget; the next logs a step every 40 ms for about 10 seconds. While that cell's
prompt shows ``[*]`` the test samples the widget: the number of rows it shows must grow several times, the canvas
pixels must change, and a hover readout must work (interaction needs no kernel round trip). After the cell ends the
rows shown must equal the steps logged (the post-cell flush sends the throttled tail), with no request leaving
loopback.
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from interp_widgets.widgets.monitor import MonitorWidget
from tests.browser.conftest import STATIC
from tests.browser.harness import notebook_cells, run_cells, wait_for_kernel_idle

pytestmark = pytest.mark.browser

NOTEBOOK = "monitor_live.ipynb"
STEPS = 250

SHOW = """\
from interp_widgets.widgets.monitor import MonitorWidget

widget = MonitorWidget(layers=["encoder.0", "<b>encoder.1</b>"], title="live test")
widget
"""

TRAIN = f"""\
import math, time

logged = 0
for step in range({STEPS}):
    widget.log(step, {{"energy_ratio|encoder.0": 1.5 + math.sin(step / 15), "energy_ratio|<b>encoder.1</b>": 2.0,
                       "control_ratio_q05|encoder.0": 0.8, "control_ratio_q95|encoder.0": 1.25}},
               loss=1.0 / (step + 1), fitting=float(step < 20))
    logged += 1
    time.sleep(0.04)
print("IW_LOGGED", logged)
"""

ROOT = ".iw-monitor"


@pytest.fixture()
def monitor_notebook(jupyter_server) -> str:
    assert (STATIC / "monitor.js").is_file(), "monitor bundle missing; run `npm --prefix js run build`"
    jupyter_server.write_notebook(NOTEBOOK, (SHOW, TRAIN))
    yield NOTEBOOK
    jupyter_server.shutdown_sessions()


def _canvas_pixels(view) -> str:
    return view.locator('[data-panel="energy_ratio"] canvas').evaluate("c => c.toDataURL()")


@pytest.mark.parametrize("ui", ["lab", "notebook"])
def test_monitor_updates_while_the_cell_runs(jupyter_server, monitor_notebook, recorded_page, ui):
    page = recorded_page.page
    page.goto(jupyter_server.notebook_url(monitor_notebook, ui=ui))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    cells = notebook_cells(page)
    view = cells.nth(0).locator(ROOT)
    expect(view).to_be_visible()
    assert view.get_attribute("data-iw-rows") == "0"
    assert view.locator(".iw-monitor-layer").all_text_contents() == ["encoder.0", "<b>encoder.1</b>"]
    assert view.locator("b").count() == 0  # the layer name is text, not markup
    blank = _canvas_pixels(view)

    cells.nth(1).locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
    running = cells.nth(1).locator(".jp-InputPrompt").filter(has_text=re.compile(r"\[\*\]"))
    running.wait_for(timeout=30_000)

    samples: list[int] = []
    pixels: set[str] = set()
    readout = ""
    hovered_while_running = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = int(view.get_attribute("data-iw-rows"))
        still_running = running.count() == 1  # read after the sample: the sample was taken while [*] showed
        if not still_running:
            break
        samples.append(rows)
        pixels.add(_canvas_pixels(view))
        if rows > 20 and not readout:
            canvas = view.locator('[data-panel="energy_ratio"] canvas')
            canvas.hover(position={"x": canvas.bounding_box()["width"] * 0.3, "y": 60})
            shown = view.locator('[data-panel="energy_ratio"] .iw-monitor-readout')
            expect(shown).to_contain_text("encoder.0: ", timeout=5000)
            readout = shown.inner_text()
            hovered_while_running = running.count() == 1
        page.wait_for_timeout(400)

    # rows that arrived while [*] showed, short of the total (the last flush may land before the prompt changes)
    growth = sorted(set(samples) - {STEPS})
    assert len(growth) >= 4 and growth[0] < growth[-1], f"rows seen while [*]: {samples}"
    assert samples == sorted(samples), samples  # never goes backwards
    assert len(pixels - {blank}) >= 3, "the ratio canvas did not repaint while the cell ran"
    assert re.match(r"step \d+", readout) and "encoder.0: " in readout, readout
    assert hovered_while_running, "the hover readout was only checked after the cell ended"

    cells.nth(1).locator(".jp-InputPrompt").filter(has_text=re.compile(r"^\s*\[\d+\]:\s*$")).wait_for(timeout=60_000)
    expect(cells.nth(1).locator(".jp-OutputArea-output", has_text="IW_LOGGED")).to_have_text(f"IW_LOGGED {STEPS}")
    expect(view).to_have_attribute(
        "data-iw-rows", str(STEPS)
    )  # the throttled tail arrived, at the latest after the cell
    assert view.locator(".iw-monitor-status").inner_text() == f"step {STEPS - 1} · {STEPS} logged"
    recorded_page.requests.assert_loopback_only()


def test_exported_monitor_shows_the_whole_history_offline(tmp_path, recorded_page):
    """``export_html`` of a run that was never displayed: the page draws every logged row from the checkpoint
    (no custom message ever reached a browser) over file:// with no request leaving the machine."""
    widget = MonitorWidget(layers=["encoder.0"], x_label="checkpoint", flush_interval=1e9)
    for step in range(37):
        widget.log(step, {"energy_ratio|encoder.0": 1.0 + step / 10, "isoscore|encoder.0": 0.5}, loss=1.0 / (step + 1))
    path = widget.export_html(tmp_path / "monitor.html")
    page = recorded_page.page
    page.goto(path.as_uri())
    view = page.locator(ROOT)
    expect(view).to_have_attribute("data-iw-rows", "37")
    assert view.locator(".iw-monitor-status").inner_text() == "checkpoint 36 · 37 logged"
    assert int(view.get_attribute("data-iw-points")) >= 3 * 37  # loss, ratio and IsoScore lines drawn
    recorded_page.requests.assert_loopback_only()
