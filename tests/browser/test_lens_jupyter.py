"""The lens view in real JupyterLab with a live kernel: hovering a cell lists its top-k tokens, clicking a position
plots the target's probability across the layers (read back from the drawn line and checked against
``LensResult.trajectory``), a second target adds its lines, the logit ↔ tuned switch redraws in the page, and the
clicked position, the plotted targets and the lens reach Python.

The notebook computes the logit and tuned lens of the tiny Llama of tests/tiny_models.py (the tuned lens with random
biases, so the two differ) over a text with markup in it, and prints the facts the page is checked against.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.browser.harness import notebook_cells, printed_state, run_cells, wait_for_kernel_idle

pytestmark = pytest.mark.browser

NOTEBOOK = "lens.ipynb"

SETUP = """\
import json
import numpy as np
from tests import tiny_models
from interp_widgets.lens import TunedLens, logit_lens

model, tokenizer = tiny_models.llama_lm()
tuned = TunedLens.for_model(model)
tuned.biases[:] = np.random.default_rng(0).normal(0, 0.5, tuned.biases.shape)
result = logit_lens(model, tokenizer, "The <b>cat</b> sat & purred", targets=[" the"], tuned=tuned, top_k=3,
                    progress=False)
widget = result.widget()
facts = {"layers": len(result.layers), "token": result.tokens[2],
         "top": {lens: result.top_tokens(layer=0, position=2, lens=lens)[0][0] for lens in ("logit", "tuned")},
         "probability": result.trajectory(2, target=0, lens="logit")["probability"].tolist()}
print("IW_FACTS " + json.dumps(facts))
widget
"""

PRINT_STATE = ('print("IW_STATE", json.dumps({"position": widget.selected_position, "targets": widget.plotted_targets, '
               '"lens": widget.lens}))\n')  # fmt: skip


@pytest.fixture()
def lens_notebook(jupyter_server) -> str:
    jupyter_server.write_notebook(NOTEBOOK, (SETUP, PRINT_STATE))
    yield NOTEBOOK
    jupyter_server.reset()


def test_lens_hover_and_trajectory_with_a_live_kernel(jupyter_server, lens_notebook, recorded_page):
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(jupyter_server.notebook_url(lens_notebook))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    text = notebook_cells(page).nth(0).locator(".jp-OutputArea-output", has_text="IW_FACTS").inner_text()
    facts = json.loads(re.search(r"IW_FACTS (\{.*\})", text).group(1))
    view = notebook_cells(page).nth(0).locator(".iw-lens")
    canvas = view.locator(".iw-lens-canvas")
    expect(canvas).to_be_visible(timeout=30_000)
    assert view.locator("b").count() == 0, "token text was parsed as markup"

    # hover the cell of layer 0 (the bottom row) at position 2: its top-k, the logit lens's
    L = facts["layers"]
    x, y = 120 + 2 * 56 + 10, 4 + (L - 1) * 18 + 5
    canvas.hover(position={"x": x, "y": y})
    tip = view.locator(".iw-tooltip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text(json.dumps(facts["top"]["logit"]))
    expect(tip).to_contain_text("position 2")

    # click position 2: probability and rank lines of the next token; the drawn probabilities are Python's
    canvas.click(position={"x": x, "y": y})
    plot = view.locator(".iw-lens-plot")
    expect(plot.locator("polyline")).to_have_count(2)
    expect(plot).to_contain_text(json.dumps(facts["token"]))
    points = plot.locator('polyline[data-target="0"]').first.get_attribute("points").split()
    drawn = [1 - (float(point.split(",")[1]) - 10) / 136 for point in points]  # y = 10 + (1 - p) · 136
    np.testing.assert_allclose(drawn, facts["probability"], atol=1e-3)
    plot.locator("input[data-target='1']").check()
    expect(plot.locator("polyline")).to_have_count(4)

    # the tuned lens, switched in the page: the same cell lists the tuned lens's top-k
    view.locator(".iw-lens-select").select_option("tuned")
    expect(view.locator(".iw-caption").first).to_contain_text("tuned lens")
    canvas.hover(position={"x": x + 1, "y": y})
    canvas.hover(position={"x": x, "y": y})
    expect(tip).to_contain_text(json.dumps(facts["top"]["tuned"]))

    assert printed_state(page) == {"position": 2, "targets": [0, 1], "lens": "tuned"}
    assert dialogs == [], f"token text ran as script: {dialogs}"
    assert notebook_cells(page).locator(".iw-error").count() == 0
    recorded_page.requests.assert_loopback_only()
