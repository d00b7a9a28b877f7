"""The generation view in real JupyterLab: clicking a generated token recolours its sources and syncs back to
Python; switching JupyterLab to its dark theme restyles the live view.

The notebook explains a greedy continuation of the demo decoder (trained by the project, cached) with saliency and
prints the score matrix exactly as sent to the browser (float32).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.browser.harness import ARTIFACTS, notebook_cells, run_cells, wait_for_kernel_idle
from tests.browser.token_view import LIGHT_FULL, TOKEN, token_colours

pytestmark = pytest.mark.browser

NOTEBOOK = "generation.ipynb"
ROOT = ".iw-generation"

SETUP = """\
import json

from interp_widgets.attribution import Saliency
from interp_widgets.demo.decoder import load_decoder

model, tokenizer = load_decoder(progress=False)
result = Saliency(progress=False).attribute(model, tokenizer, "The hotel was", max_new_tokens=6)
widget = result.widget()
facts = {"steps": widget.step_tokens, "tokens": widget.tokens,
         "scores": [[None if s != s else s for s in row] for row in widget.score_matrix().tolist()]}
print("IW_FACTS " + json.dumps(facts))
widget
"""

PRINT_STEP = 'print("IW_STEP", widget.selected_step)\n'


@pytest.fixture()
def generation_notebook(jupyter_server) -> str:
    from interp_widgets.demo.decoder import load_decoder

    load_decoder(progress=False)  # train or load once here, in the cache the kernel uses
    jupyter_server.write_notebook(NOTEBOOK, (SETUP, PRINT_STEP))
    yield NOTEBOOK
    jupyter_server.reset()


def _facts(page) -> dict:
    text = notebook_cells(page).nth(0).locator(".jp-OutputArea-output", has_text="IW_FACTS").inner_text()
    return json.loads(re.search(r"IW_FACTS (\{.*\})", text).group(1))


def _shown(view) -> list[int]:
    """Token index of each token span, in order."""
    return [int(i) for i in view.locator(TOKEN).evaluate_all("spans => spans.map(s => s.dataset.index)")]


def _strongest_source(facts: dict, shown: list[int], step: int) -> tuple[int, int]:
    """(position among the shown tokens, sign) of the largest |score| that generated step ``step`` can see."""
    row = np.array([np.nan if s is None else s for s in facts["scores"][step]], dtype=np.float64)[shown]
    k = int(np.nanargmax(np.abs(row)))
    return k, int(np.sign(row[k]))


def test_clicking_a_generated_token_recolours_its_sources_and_syncs_back(jupyter_server, generation_notebook,
                                                                         recorded_page):  # fmt: skip
    page = recorded_page.page
    page.goto(jupyter_server.notebook_url(generation_notebook))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    facts = _facts(page)
    assert len(facts["steps"]) >= 3, facts["steps"]
    view = notebook_cells(page).nth(0).locator(ROOT)
    generated = view.locator(".iw-generated")
    expect(generated).to_have_count(len(facts["steps"]))
    shown = _shown(view)
    assert [shown[k] for k in range(len(shown)) if shown[k] in facts["steps"]] == facts["steps"]

    before = token_colours(view)
    first, sign = _strongest_source(facts, shown, 0)
    assert before[first]["background"] == LIGHT_FULL[sign]

    generated.nth(2).click()
    second, sign = _strongest_source(facts, shown, 2)
    expect(view.locator(TOKEN).nth(second)).to_have_css("background-color", LIGHT_FULL[sign])
    after = token_colours(view)
    assert after != before, "clicking another generated token did not recolour the sources"
    # The third generated token sees the first two: they are coloured as its sources now.
    for step in (0, 1):
        position = shown.index(facts["steps"][step])
        score = facts["scores"][2][facts["steps"][step]]
        if score:
            assert after[position]["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), after[position]

    run_cells(page, 1)
    expect(notebook_cells(page).nth(1).locator(".jp-OutputArea-output")).to_have_text("IW_STEP 2")
    recorded_page.requests.assert_loopback_only()


def test_jupyterlab_dark_theme_restyles_the_live_view(jupyter_server, generation_notebook, recorded_page):
    page = recorded_page.page
    page.goto(jupyter_server.notebook_url(generation_notebook))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    view = notebook_cells(page).nth(0).locator(ROOT)
    expect(view.locator(TOKEN).first).to_be_visible()
    assert view.get_attribute("data-iw-theme") == "light"
    light = token_colours(view)

    try:
        _choose_theme(page, "JupyterLab Dark")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
        expect(view).to_have_attribute("data-iw-theme", "dark")
        dark = token_colours(view)
        assert dark != light, "the token colours did not follow the dark theme"
        foreground = view.evaluate("e => getComputedStyle(e).color")
        assert foreground not in ("rgb(0, 0, 0)", "rgb(31, 35, 40)"), (
            f"text stayed dark on the dark theme: {foreground}"
        )
        page.screenshot(path=str(ARTIFACTS / "generation_jupyterlab_dark.png"))
    finally:  # the theme is a user setting of the shared server: put it back for the other tests
        _choose_theme(page, "JupyterLab Light")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true", timeout=30_000)
    recorded_page.requests.assert_loopback_only()


def _choose_theme(page, name: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Settings$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Theme$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{name}$")).click()
