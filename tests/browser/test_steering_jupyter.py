"""The steering view in real JupyterLab with a live kernel: toggling the scales (a click, then the keyboard) hides
and shows their generation columns, draws the hidden scale hollow in the dose-response chart, and the hidden scales
reach Python; token text with markup stays text.

The notebook steers the tiny Llama of tests/tiny_models.py along a fixed random direction over a prompt with markup
in it, and prints the facts the page is checked against.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.harness import notebook_cells, printed_state, run_cells, wait_for_kernel_idle

pytestmark = pytest.mark.browser

NOTEBOOK = "steering.ipynb"

SETUP = """\
import json
import torch
from tests import tiny_models
from interp_widgets.demo import corpus
from interp_widgets.interventions import steer

model, tokenizer = tiny_models.llama_lm()
direction = torch.randn(32, generator=torch.Generator().manual_seed(0))
result = steer(model, tokenizer, "The <b>film</b> & <img src=x onerror=alert(1)>", direction, "layer:1",
               scales=[-3.0, 0.0, 3.0], behaviour=" the", anti_behaviour=" a", eval_prompts=["It was", "The day was"],
               max_new_tokens=6, damage_texts=corpus()[:12], damage_tokens=32, progress=False)
widget = result.widget()
facts = {"changed": [int(result.generations.changed(k).sum()) for k in range(3)],
         "generation": result.generations.text(2)}
print("IW_FACTS " + json.dumps(facts))
widget
"""

PRINT_STATE = 'print("IW_STATE", json.dumps({"hidden": widget.hidden_scales}))\n'


@pytest.fixture()
def steering_notebook(jupyter_server) -> str:
    jupyter_server.write_notebook(NOTEBOOK, (SETUP, PRINT_STATE))
    yield NOTEBOOK
    jupyter_server.reset()


def test_steering_scales_toggle_with_a_live_kernel(jupyter_server, steering_notebook, recorded_page):
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(jupyter_server.notebook_url(steering_notebook))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    text = notebook_cells(page).nth(0).locator(".jp-OutputArea-output", has_text="IW_FACTS").inner_text()
    facts = json.loads(re.search(r"IW_FACTS (\{.*\})", text).group(1))
    view = notebook_cells(page).nth(0).locator(".iw-steering")
    expect(view.locator(".iw-steer-chart")).to_be_visible(timeout=30_000)
    assert view.locator("b").count() == 0 and view.locator("img").count() == 0, "token text was parsed as markup"

    headings = view.locator(".iw-steer-column h4")
    expect(headings).to_have_text(["unsteered", "scale -3", "scale 0", "scale 3"])
    expect(view.locator(".iw-steer-column[data-column='scale 0'] .iw-steer-changed")).to_have_count(0)
    expect(view.locator(".iw-steer-column[data-column='scale 3'] .iw-steer-changed")).to_have_count(facts["changed"][2])

    # a click hides scale 3: its column goes, its points are hollow in both panels, Python hears of it
    button = view.locator(".iw-steer-toggles button[data-scale='2']")
    button.click()
    expect(button).to_have_attribute("aria-pressed", "false")
    expect(headings).to_have_text(["unsteered", "scale -3", "scale 0"])
    expect(view.locator(".iw-steer-chart circle.iw-steer-hidden")).to_have_count(2)  # metric and damage panels
    expect(view.locator(".iw-steer-chart polygon.iw-steer-band")).to_have_count(1)
    assert printed_state(page) == {"hidden": [2]}

    # the keyboard: focus the first toggle and press Space (hide), then Enter on the third (show again)
    first = view.locator(".iw-steer-toggles button[data-scale='0']")
    first.focus()
    page.keyboard.press("Space")
    expect(first).to_have_attribute("aria-pressed", "false")
    button.focus()
    page.keyboard.press("Enter")
    expect(button).to_have_attribute("aria-pressed", "true")
    expect(headings).to_have_text(["unsteered", "scale 0", "scale 3"])
    assert printed_state(page) == {"hidden": [0]}

    assert dialogs == [], f"token text ran as script: {dialogs}"
    assert notebook_cells(page).locator(".iw-error").count() == 0
    recorded_page.requests.assert_loopback_only()
