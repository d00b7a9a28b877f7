"""The patching view in real JupyterLab with a live kernel: hovering a cell shows its exact value and raw metric,
clicking it lists the top-5 next tokens of its patched run (read from the arrays stored in the view and checked
against ``PatchingView.top_tokens`` in Python), token text with markup stays text, the clicked cell reaches Python,
and the keyboard (arrow keys, Enter) moves and selects a cell.

The notebook builds the view from a hand-made ``PatchingResult`` (``_patching_examples.tiny_patching_result``: 2
layers × 3 positions of resid_pre, whose top-5 vocabulary holds ``"<b>"`` and a newline) and prints the facts the
page is checked against.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.harness import notebook_cells, printed_state, run_cells, wait_for_kernel_idle

pytestmark = pytest.mark.browser

NOTEBOOK = "patching.ipynb"

SETUP = """\
import json
from interp_widgets.interventions._patching_examples import tiny_patching_result

result = tiny_patching_result()
result.panels[0].top_ids[1, 0, 2] = [13, 11, 15, 14, 12]  # layer 1, position 2: "<b>" first
widget = result.widget()
facts = {"value": f"{float(widget.panel_values(0, raw=False)[1, 0, 2]):.6g}",
         "raw": f"{float(widget.panel_values(0, raw=True)[1, 0, 2]):.6g}",
         "top": [json.dumps(t) + f" {100 * p:.1f}%" for t, p in widget.top_tokens(0, 1, 0, 2)]}
print("IW_FACTS " + json.dumps(facts))
widget
"""

PRINT_STATE = 'print("IW_STATE", json.dumps({"selected": widget.selected_cell}))\n'


@pytest.fixture()
def patching_notebook(jupyter_server) -> str:
    jupyter_server.write_notebook(NOTEBOOK, (SETUP, PRINT_STATE))
    yield NOTEBOOK
    jupyter_server.reset()


def test_patching_hover_and_click_show_the_value_and_top_5(jupyter_server, patching_notebook, recorded_page):
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(jupyter_server.notebook_url(patching_notebook))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    text = notebook_cells(page).nth(0).locator(".jp-OutputArea-output", has_text="IW_FACTS").inner_text()
    facts = json.loads(re.search(r"IW_FACTS (\{.*\})", text).group(1))
    view = notebook_cells(page).nth(0).locator(".iw-patching")
    canvas = view.locator(".iw-patching-canvas").first
    expect(canvas).to_be_visible(timeout=30_000)

    # layer 1 is the top row (2 layers); position 2 is the third column (cells 44 × 16 after a 96 px label margin)
    x, y = 96 + 2 * 44 + 10, 4 + 0 * 16 + 5
    canvas.hover(position={"x": x, "y": y})
    tip = view.locator(".iw-tooltip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("layer 1")
    expect(tip).to_contain_text(f"{facts['value']} (normalised")
    expect(tip).to_contain_text(f"{facts['raw']} (logit_diff)")

    canvas.click(position={"x": x, "y": y})
    items = view.locator(".iw-patching-top li")
    expect(items).to_have_count(5)
    assert items.all_inner_texts() == facts["top"]
    assert view.locator("b").count() == 0, "token text was parsed as markup"
    assert printed_state(page) == {"selected": [0, 1, 0, 2]}

    # the keyboard: the heatmap is one tab stop; ArrowLeft moves to position 1, Enter selects it
    view.locator(".iw-patching-scroll").first.focus()
    page.keyboard.press("ArrowLeft")
    expect(tip).to_contain_text("position 1")
    page.keyboard.press("Enter")
    expect(view.locator(".iw-patching-detail")).to_contain_text("position 1")
    expect(items).to_have_count(5)
    assert printed_state(page) == {"selected": [0, 1, 0, 1]}
    assert dialogs == [], f"token text ran as script: {dialogs}"
    assert notebook_cells(page).locator(".iw-error").count() == 0
    recorded_page.requests.assert_loopback_only()
