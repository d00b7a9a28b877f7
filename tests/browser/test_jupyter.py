"""The token-highlight widget in real JupyterLab and Notebook 7, driven through Debian's chromium.

The notebook is written at run time into the server's root: it builds a tiny random BERT classifier with the
real MiniLM WordPiece tokenizer, explains a text containing HTML with integrated gradients, prints the facts
the test checks against (scores as float32, exactly as sent to the browser) and displays the widget.
"""

from __future__ import annotations

import json
import re
from typing import Iterator

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.browser.harness import notebook_cells, run_cells, wait_for_kernel_idle
from tests.browser.token_view import (
    LIGHT_FULL, ROOT, TINY_BERT_CLASSIFIER, TOKEN, focus_token, js_score, legend_labels, token_colours, tooltip_rows,
)  # fmt: skip

pytestmark = pytest.mark.browser

NOTEBOOK = "token_highlight.ipynb"
TEXT = "<b>bold</b> claim"  # token text is untrusted: it must show as literal text, never as markup

SETUP = (
    TINY_BERT_CLASSIFIER
    + f"""
import json

from interp_widgets.attribution import IntegratedGradients

result = IntegratedGradients(n_steps=16, progress=False).attribute(model, tokenizer, {TEXT!r}, target=[0, 1, 2])
"""
)

SHOW_WIDGET = """\
widget = result.widget()
facts = {"selected_target": widget.selected_target, "labels": widget.target_labels, "tokens": widget.tokens,
         "units": [unit[0] for unit in widget.units()], "scores": widget.score_matrix().tolist()}
print("IW_FACTS " + json.dumps(facts))
widget
"""

SHOW_RESULT = "result  # an AttributionResult displays as the widget\n"

PRINT_TARGET = 'print("IW_TARGET", widget.selected_target, widget.target_labels[widget.selected_target])\n'


@pytest.fixture(scope="module")
def notebook_kernel(jupyter_server) -> Iterator[None]:
    """Keeps the notebook's kernel across this module's tests (Notebook 7 reuses the warm kernel JupyterLab
    started, as for a user opening the same notebook in both); afterwards shuts it down and forgets the saved
    JupyterLab workspace."""
    yield
    jupyter_server.reset()


@pytest.fixture()
def token_notebook(jupyter_server, notebook_kernel) -> str:
    """Write the notebook afresh, without outputs, into the server's root; returns its name."""
    return jupyter_server.write_notebook(NOTEBOOK, (SETUP, SHOW_WIDGET, SHOW_RESULT, PRINT_TARGET))


def _facts(page) -> dict:
    text = notebook_cells(page).nth(1).locator(".jp-OutputArea-output", has_text="IW_FACTS").inner_text()
    return json.loads(re.search(r"IW_FACTS (\{.*\})", text).group(1))


def _unit_scores(facts: dict, target: int) -> np.ndarray:
    row = np.asarray(facts["scores"][target], dtype=np.float64)
    return row[facts["units"]]


def _assert_renders_tokens(view, facts: dict) -> None:
    """Literal token text, one span per shown token, coloured for every nonzero score."""
    tokens = view.locator(TOKEN)
    expect(tokens).to_have_count(len(facts["units"]))
    assert tokens.all_text_contents() == [facts["tokens"][i] for i in facts["units"]]
    text, elements = view.locator(".iw-tokens").evaluate(
        "box => [box.textContent, Array.from(box.querySelectorAll('*')).filter(e => !e.matches('.iw-token')).length]"
    )
    assert text == TEXT and elements == 0, f"token text was parsed as markup: {text!r}, {elements} extra elements"
    scores = _unit_scores(facts, facts["selected_target"])
    colours = token_colours(view)
    for score, colour in zip(scores, colours):
        if score != 0:
            assert colour["background"] not in ("rgba(0, 0, 0, 0)", "transparent", "rgb(255, 255, 255)"), colour
    strongest = int(np.argmax(np.abs(scores)))
    assert colours[strongest]["background"] == LIGHT_FULL[int(np.sign(scores[strongest]))]
    expect(view.locator(".iw-legend")).to_be_visible()
    peak = float(np.max(np.abs(scores)))
    assert legend_labels(view) == [js_score(-peak, 3), "0", js_score(peak, 3, sign=True)]


def _assert_tooltip(view, facts: dict, target: int, unit: int) -> None:
    scores = _unit_scores(facts, target)
    rank = 1 + int(np.sum(np.abs(scores) > abs(scores[unit])))
    assert tooltip_rows(view) == {
        "token": json.dumps(facts["tokens"][facts["units"][unit]]),
        "score": js_score(float(scores[unit])),
        "rank": f"{rank} of {len(scores)} by |score|",
        "class": facts["labels"][target],
    }


def test_jupyterlab_renders_widget_and_syncs_class_back(jupyter_server, token_notebook, recorded_page):
    page = recorded_page.page
    page.goto(jupyter_server.notebook_url(token_notebook, ui="lab"))
    wait_for_kernel_idle(page)
    run_cells(page, 0, 3)
    facts = _facts(page)
    view = notebook_cells(page).nth(1).locator(ROOT)
    _assert_renders_tokens(view, facts)
    _assert_renders_tokens(notebook_cells(page).nth(2).locator(ROOT), facts)  # the result's own display

    # Tooltip on keyboard focus (sends nothing to the kernel), for the strongest token: exact score and rank 1.
    start = facts["selected_target"]
    strongest = int(np.argmax(np.abs(_unit_scores(facts, start))))
    focus_token(view, view.locator(TOKEN).nth(strongest))
    _assert_tooltip(view, facts, start, strongest)

    # The class selector writes selected_target back to Python. Moving focus to it closes the tooltip.
    other = (start + 1) % len(facts["labels"])
    selector = view.locator(".iw-target-select")
    selector.focus()
    expect(view.locator(".iw-tooltip")).to_be_hidden()
    selector.select_option(str(other))
    run_cells(page, 3)
    printed = notebook_cells(page).nth(3).locator(".jp-OutputArea-output").inner_text()
    assert printed.strip() == f"IW_TARGET {other} {facts['labels'][other]}"
    recoloured = token_colours(view)
    other_scores = _unit_scores(facts, other)
    strongest_other = int(np.argmax(np.abs(other_scores)))
    assert recoloured[strongest_other]["background"] == LIGHT_FULL[int(np.sign(other_scores[strongest_other]))]

    # Tooltip on hover follows the newly selected class.
    hovered = (strongest_other + 1) % len(other_scores)
    view.locator(TOKEN).nth(hovered).hover()
    _assert_tooltip(view, facts, other, hovered)

    recorded_page.requests.assert_loopback_only()


def test_notebook7_renders_widget(jupyter_server, token_notebook, recorded_page):
    page = recorded_page.page
    page.goto(jupyter_server.notebook_url(token_notebook, ui="notebook"))
    wait_for_kernel_idle(page)
    run_cells(page, 0, 2)
    facts = _facts(page)
    view = notebook_cells(page).nth(1).locator(ROOT)
    _assert_renders_tokens(view, facts)
    first = view.locator(TOKEN).first
    first.hover()
    _assert_tooltip(view, facts, facts["selected_target"], 0)
    recorded_page.requests.assert_loopback_only()
