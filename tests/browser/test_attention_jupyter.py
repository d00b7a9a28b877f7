"""The attention view in real JupyterLab with a live kernel: the shown head comes from the kernel (custom message,
float16 buffer), hovering a token focuses it, a click locks it (hover then changes nothing), a second click
unlocks it; switching heads fetches the other head; pinning reaches Python.

The notebook computes the attention patterns of the tiny GQA Llama of tests/tiny_models.py (4 query heads over 2
KV heads) and prints the layer-1 weights, so the colour of the focused row's keys can be checked against them.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.harness import notebook_cells, printed_state, run_cells, wait_for_kernel_idle

pytestmark = pytest.mark.browser

NOTEBOOK = "attention.ipynb"
ROOT = ".iw-attention"

SETUP = """\
import json
from tests import tiny_models
from interp_widgets.attribution import attention_patterns

model, tokenizer = tiny_models.llama_lm()
patterns = attention_patterns(model, tokenizer, "The room was clean and quiet.", progress=False)
widget = patterns.widget(layer=1, heads=[0])
facts = {"n": len(patterns.tokens), "head1": patterns.head(1, 1).astype(float).tolist()}
print("IW_FACTS " + json.dumps(facts))
widget
"""

PRINT_STATE = 'print("IW_STATE", json.dumps({"focus": widget.focus, "locked": widget.locked, "heads": widget.heads, "pinned": widget.pinned}))\n'


@pytest.fixture()
def attention_notebook(jupyter_server) -> str:
    jupyter_server.write_notebook(NOTEBOOK, (SETUP, PRINT_STATE))
    yield NOTEBOOK
    jupyter_server.reset()


def test_hover_lock_unlock_and_switch_heads_with_a_live_kernel(jupyter_server, attention_notebook, recorded_page):
    page = recorded_page.page
    page.goto(jupyter_server.notebook_url(attention_notebook))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    text = notebook_cells(page).nth(0).locator(".jp-OutputArea-output", has_text="IW_FACTS").inner_text()
    facts = json.loads(re.search(r"IW_FACTS (\{.*\})", text).group(1))
    view = notebook_cells(page).nth(0).locator(ROOT)
    heatmap = view.locator("canvas.iw-attn-heatmap")
    expect(heatmap).to_have_attribute("data-source", "kernel", timeout=30_000)  # head 0 came from the kernel
    expect(heatmap).to_have_attribute("data-head", "0")
    tokens = view.locator(".iw-attn-token")
    expect(tokens).to_have_count(facts["n"])

    # hover focuses token 3 and colours the keys by its row (the strongest key gets the ramp's end colour)
    tokens.nth(3).hover()
    expect(tokens.nth(3)).to_have_class(re.compile(r"\biw-focus\b"))
    expect(view.locator(".iw-attn-status")).to_contain_text("Focus:")
    # click locks: hovering another token keeps the focus
    tokens.nth(3).click()
    expect(view.locator(".iw-attn-status")).to_contain_text("locked")
    tokens.nth(5).hover()
    expect(tokens.nth(3)).to_have_class(re.compile(r"\biw-focus\b"))
    expect(tokens.nth(5)).not_to_have_class(re.compile(r"\biw-focus\b"))
    assert printed_state(page) | {"heads": None, "pinned": None} == {
        "focus": 3,
        "locked": True,
        "heads": None,
        "pinned": None,
    }

    # switch to head 1 only: the view asks the kernel for it; the locked row's strongest key is head 1's argmax
    view.locator('input[data-head="1"]').check()
    view.locator('input[data-head="0"]').uncheck()
    one = view.locator("canvas.iw-attn-heatmap")
    expect(one).to_have_count(1)
    expect(one).to_have_attribute("data-head", "1", timeout=30_000)
    expect(one).to_have_attribute("data-source", "kernel", timeout=30_000)
    row = facts["head1"][3]
    strongest = max(range(len(row)), key=row.__getitem__)
    expect(tokens.nth(strongest)).to_have_css("background-color", "rgb(230, 97, 1)")

    # a second click on the locked token unlocks it; Escape after a new lock unlocks too
    tokens.nth(3).click()
    expect(view.locator(".iw-attn-status")).not_to_contain_text("locked")
    tokens.nth(4).click()
    expect(view.locator(".iw-attn-status")).to_contain_text("locked")
    page.keyboard.press("Escape")
    expect(view.locator(".iw-attn-status")).not_to_contain_text("locked")

    view.locator(".iw-pin").click()
    expect(view.locator(".iw-attn-note")).to_contain_text("layer 1 head 1", timeout=30_000)
    state = printed_state(page)
    assert state["heads"] == [1] and state["pinned"] == [{"layer": 1, "head": 1}] and state["locked"] is False
    recorded_page.requests.assert_loopback_only()
