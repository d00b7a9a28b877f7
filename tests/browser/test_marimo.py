"""interp_widgets in marimo (``marimo run`` in Debian's chromium): results display as their views, ``result.widget()``
and ``mo.ui.anywidget(...)`` render, a selection made in the browser reaches Python and re-runs the cells that read
it, token text stays text, and the training monitor updates while the training cell is still running.

marimo has no ipywidgets widget manager; it shows any ``anywidget.AnyWidget`` itself (as ``mo.ui.anywidget``), and
objects with a ``_display_`` method as whatever that returns, which for every result is its ``widget()``.
"""

from __future__ import annotations

import re
import time
from typing import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.marimo_app import MarimoApp, cell_output, marimo_app, write_marimo_notebook
from tests.widgets.test_views_widget import EVIL

pytestmark = pytest.mark.browser

DISPLAYS = {
    "setup": """\
        import marimo as mo
        from interp_widgets.geometry.log.geometry_log import GeometryLog
        from tests.widgets.test_concept_widget import _interpretation as make_interpretation
        from tests.widgets.test_views_widget import _collection as make_collection, _gen_result as make_generation
        from tests.widgets.test_views_widget import _result as make_result
        """,
    "result_display": """\
        result = make_result([[0.1, -0.2, 0.3, 0.4, -0.5], [0.2, 0.1, -0.3, 0.4, 0.5]])
        result
        """,
    "result_widget": "result.widget()",
    "generation_display": "make_generation()",
    "collection_display": "make_collection()",
    "concepts_display": "make_interpretation()",
    "history_display": """\
        history = GeometryLog(["layer:0"])
        history.log(0, loss=1.0)
        history
        """,
    "picker": """\
        picker = mo.ui.anywidget(result.widget())
        picker
        """,
    "picked": "mo.md(f\"IW_PICKED {picker.value['selected_target']} {picker.widget.selected_target}\")",
}

#: cell -> root element of the view it shows
ROOTS = {
    "result_display": ".iw-token-highlight", "result_widget": ".iw-token-highlight", "generation_display": ".iw-generation",
    "collection_display": ".iw-examples", "concepts_display": ".iw-concepts", "history_display": ".iw-monitor",
    "picker": ".iw-token-highlight",
}  # fmt: skip


@pytest.fixture(scope="module")
def displays_app(tmp_path_factory) -> Iterator[MarimoApp]:
    path = write_marimo_notebook(tmp_path_factory.mktemp("marimo-displays") / "displays.py", DISPLAYS)
    with marimo_app(path) as app:
        yield app


def test_results_display_as_their_views_and_selections_reach_python(displays_app, recorded_page):
    page = recorded_page.page
    page.goto(displays_app.url)
    for cell, selector in ROOTS.items():
        output = cell_output(page, cell)
        root = output.locator(f".iw-root{selector}")
        expect(root, f"cell {cell}").to_be_visible(timeout=60_000)
        assert root.evaluate("e => e.children.length > 0 && e.textContent.trim().length > 0"), cell
        assert output.locator("img").count() == 0, f"token text became markup in {cell}"
    tokens = cell_output(page, "result_display").locator(".iw-tokens .iw-token").all_text_contents()
    assert EVIL in tokens
    assert page.locator(".iw-error").count() == 0, page.locator(".iw-error").all_inner_texts()

    picked = cell_output(page, "picked")
    expect(picked).to_have_text(re.compile(r"IW_PICKED 1 1"), timeout=30_000)
    cell_output(page, "picker").locator(".iw-target-select").select_option("0")
    expect(picked).to_have_text(re.compile(r"IW_PICKED 0 0"), timeout=30_000)  # the dependent cell re-ran
    recorded_page.requests.assert_loopback_only()


STEPS = 250
MONITOR = {
    "setup": """\
        import math, time

        import marimo as mo
        from interp_widgets.widgets.monitor import MonitorWidget
        """,
    "show": """\
        widget = MonitorWidget(layers=["encoder.0", "<b>encoder.1</b>"], title="live test")
        widget
        """,
    "train": f"""\
        logged = 0
        with widget:  # marimo runs no IPython post_execute hook: the block's end sends the throttled tail
            for step in range({STEPS}):
                widget.log(step, {{"energy_ratio|encoder.0": 1.5 + math.sin(step / 15),
                                   "energy_ratio|<b>encoder.1</b>": 2.0}}, loss=1.0 / (step + 1))
                logged += 1
                time.sleep(0.04)
            widget.log({STEPS}, loss=0.0)  # 40 ms after the previous row: held back by the throttle
            logged += 1
        mo.md(f"IW_LOGGED {{logged}}")
        """,
}


def test_monitor_updates_while_the_cell_runs(tmp_path, recorded_page):
    path = write_marimo_notebook(tmp_path / "monitor.py", MONITOR)
    page = recorded_page.page
    with marimo_app(path) as app:
        page.goto(app.url)
        view = cell_output(page, "show").locator(".iw-monitor")
        expect(view).to_be_visible(timeout=60_000)
        assert view.locator(".iw-monitor-layer").all_text_contents() == ["encoder.0", "<b>encoder.1</b>"]
        assert view.locator("b").count() == 0
        done = cell_output(page, "train").get_by_text(f"IW_LOGGED {STEPS + 1}")
        samples: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = int(view.get_attribute("data-iw-rows"))
            if done.count():
                break
            samples.append(rows)
            page.wait_for_timeout(400)
        growth = sorted(set(samples) - {0, STEPS + 1})
        assert len(growth) >= 4 and growth[0] < growth[-1], f"rows seen while the cell ran: {samples}"
        assert samples == sorted(samples), samples
        expect(done).to_be_visible(timeout=60_000)
        expect(view).to_have_attribute("data-iw-rows", str(STEPS + 1))  # the throttled tail arrives after the cell
        assert view.locator(".iw-monitor-status").inner_text() == f"step {STEPS} · {STEPS + 1} logged"
        assert page.locator(".iw-error").count() == 0
    recorded_page.requests.assert_loopback_only()
