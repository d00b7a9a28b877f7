"""The concept browser in real JupyterLab, driven through Debian's chromium.

The notebook is written at run time into the server's root: a tiny random BERT classifier with the real MiniLM
WordPiece tokenizer, token activations of block 1 on demo texts plus one text holding an HTML tag, NMF with 8
concepts, their interpretation (concept 0 relabelled with that tag) and a browser of 4 concepts per page whose text
view shows the hostile text (with concept importance) and a plain one. Python prints the facts the test checks
(labels, densities as float32, every concept's top contexts, each token's most active concepts), and a state cell
prints what the kernel holds after each interaction. At the end the kernel is shut down: a concept whose details
were not loaded must say that the kernel is busy or not connected, not hang.
"""

from __future__ import annotations

import json
import re
from typing import Iterator

import numpy as np
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from tests.browser.harness import notebook_cells, run_cells, wait_for_kernel_idle
from tests.browser.token_view import TINY_BERT_CLASSIFIER

pytestmark = pytest.mark.browser

NOTEBOOK = "concept_browser.ipynb"
EVIL = "<img src=x onerror=alert(1)>"
ROOT = ".iw-root.iw-concepts"
PAGE_SIZE = 4

SETUP = (
    TINY_BERT_CLASSIFIER
    + f"""
import json

from interp_widgets.concepts import NMFConcepts, collect_activations, concept_importance, interpret_concepts, text_concepts
from interp_widgets.demo import corpus
from interp_widgets.widgets import ConceptBrowser, buffer_to_array

EVIL = {EVIL!r}  # untrusted text: it must show as literal characters, never as markup
texts = corpus()[:60] + [f"The soup {{EVIL}} was cold."]
store = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False)
concepts = NMFConcepts(8, nonnegative="shift", estimator_params={{"init": "nndsvda", "max_iter": 300, "random_state": 0}}).fit(store)
interpretation = interpret_concepts(concepts, store, k=4, window=3, progress=False)
automatic = list(interpretation.labels)
interpretation.relabel(lambda c, examples: EVIL if c == 0 else automatic[c])
browser = ConceptBrowser(interpretation, page_size={PAGE_SIZE},
                         texts=[concept_importance(concepts, model, tokenizer, texts[-1], target=2),
                                text_concepts(concepts, model, tokenizer, "Fast delivery, great price.")])
state_calls = 0
"""
)

SHOW = """\
facts = {"labels": browser.labels, "top_tokens": browser.top_tokens,
         "density": buffer_to_array(browser.density).tolist(),
         "examples": [[[e["tokens"], e["center"]] for e in browser.concept_detail(c)["examples"]]
                      for c in range(browser.n_concepts)],
         "text_tokens": browser.text_tokens, "text_top": buffer_to_array(browser.text_top_concepts).tolist()}
print("IW_FACTS " + json.dumps(facts))
browser
"""

STATE = """\
state_calls += 1
print(f"IW_STATE {state_calls} " + json.dumps({
    "sort_by": browser.sort_by, "descending": browser.descending, "search": browser.search, "page": browser.page,
    "selected_concept": browser.selected_concept, "selected_token": browser.selected_token,
    "requested": browser.requested, "details": sorted(map(int, browser.details)), "order": browser.visible_order()}))
"""


@pytest.fixture()
def concept_notebook(jupyter_server) -> Iterator[str]:
    """Write the notebook afresh, without outputs; afterwards shut its kernel down and forget the workspace."""
    jupyter_server.write_notebook(NOTEBOOK, (SETUP, SHOW, STATE))
    yield NOTEBOOK
    jupyter_server.reset()


def _printed(page, cell: int, marker: str) -> str:
    return notebook_cells(page).nth(cell).locator(".jp-OutputArea-output", has_text=marker).inner_text()


class Kernel:
    """Re-runs the state cell and returns what the kernel holds (each run prints a new counter)."""

    def __init__(self, page):
        self.page, self.calls = page, 0

    def state(self) -> dict:
        self.calls += 1
        cells = notebook_cells(self.page)
        cells.nth(2).locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Control+Enter")  # run in place
        marker = f"IW_STATE {self.calls} "
        expect(cells.nth(2).locator(".jp-OutputArea-output")).to_contain_text(marker, timeout=60_000)
        text = _printed(self.page, 2, marker)
        return json.loads(text.split(marker, 1)[1])


def _expect_listed(view, ids: list[int]) -> None:
    expect(view.locator(".iw-concept-list .iw-concept")).to_have_count(len(ids))
    try:
        view.page.wait_for_function(
            "([root, ids]) => JSON.stringify(Array.from(document.querySelectorAll(root + ' .iw-concept-list "
            ".iw-concept'), li => Number(li.dataset.concept))) === JSON.stringify(ids)",
            arg=[ROOT, ids],
            timeout=60_000,
        )
    except PlaywrightTimeoutError:
        shown = [
            int(c)
            for c in view.locator(".iw-concept-list .iw-concept").evaluate_all(
                "items => items.map((li) => li.dataset.concept)"
            )
        ]
        controls = {
            "sort": view.locator(".iw-sort-select").input_value(),
            "descending": view.locator(".iw-descending-toggle").is_checked(),
        }
        raise AssertionError(f"the list shows {shown}, expected {ids}; controls {controls}") from None


def _expect_detail(view, facts: dict, concept: int) -> None:
    """Title, and each top context: its tokens as literal text and a highlighted centre token."""
    title = view.locator(".iw-detail-title")
    expect(title).to_have_text(f"#{concept} {facts['labels'][concept]}", timeout=30_000)
    contexts = view.locator(".iw-contexts .iw-example-context")
    expect(contexts).to_have_count(len(facts["examples"][concept]))
    for k, (tokens, center) in enumerate(facts["examples"][concept]):
        shown = contexts.nth(k).locator(".iw-token").all_text_contents()
        assert len(shown) == len(tokens) and all(a == b for a, b in zip(shown, tokens) if b.strip()), (shown, tokens)
        centre = contexts.nth(k).locator(".iw-token.iw-center")
        expect(centre).to_have_count(1)
        assert centre.evaluate("s => Array.from(s.parentNode.children).indexOf(s)") == center
        background = centre.evaluate("s => getComputedStyle(s).backgroundColor")
        assert background not in ("rgba(0, 0, 0, 0)", "transparent", "rgb(255, 255, 255)"), background


def test_concept_browser_in_jupyterlab(jupyter_server, concept_notebook, recorded_page):
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(jupyter_server.notebook_url(concept_notebook, ui="lab"))
    wait_for_kernel_idle(page)
    run_cells(page, 0, 2, timeout=240_000)
    facts = json.loads(re.search(r"IW_FACTS (\{.*\})", _printed(page, 1, "IW_FACTS")).group(1))
    kernel = Kernel(page)
    output = notebook_cells(page).nth(1)
    view = output.locator(ROOT)
    n = len(facts["labels"])
    # run_cells waited out the hand-over from the rebuilt view to the live widget (a failure seen in CI: controls
    # used on the rebuilt view, the list then sorted by index after density had been chosen): the live one is shown
    expect(view).to_have_count(1, timeout=60_000)
    expect(output.locator(".iw-mime-saved")).to_have_count(0)

    # The list: first page in id order, labels and top tokens as literal text (concept 0's label is the tag).
    _expect_listed(view, list(range(PAGE_SIZE)))
    items = view.locator(".iw-concept-list .iw-concept")
    assert items.locator(".iw-concept-label").all_text_contents() == facts["labels"][:PAGE_SIZE]
    assert items.nth(0).locator(".iw-concept-label").text_content() == EVIL
    expect(view.locator(".iw-page-label")).to_contain_text(f"page 1 of {n // PAGE_SIZE} ({n} of {n} concepts)")

    # Sorting by density, descending: the order the float32 densities give, and the kernel agrees.
    # Each change is seen in the list before the next one is made (ascending first, then descending).
    density = np.asarray(facts["density"], dtype=np.float32)
    view.locator(".iw-sort-select").select_option("density")
    _expect_listed(view, sorted(range(n), key=lambda c: (density[c], c))[:PAGE_SIZE])
    view.locator(".iw-descending-toggle").check()
    by_density = sorted(range(n), key=lambda c: (-density[c], c))
    _expect_listed(view, by_density[:PAGE_SIZE])
    state = kernel.state()
    assert (state["sort_by"], state["descending"], state["order"]) == ("density", True, by_density)

    # Search: a top token of one concept keeps exactly the concepts whose label or top tokens contain it.
    needle = next(
        t
        for c in range(n)
        for t in facts["top_tokens"][c]
        if t.isalpha()
        and 0
        < sum(any(t.lower() in x.lower() for x in [facts["labels"][d], *facts["top_tokens"][d]]) for d in range(n))
        < n
    )
    matching = [
        c for c in by_density if any(needle.lower() in x.lower() for x in [facts["labels"][c], *facts["top_tokens"][c]])
    ]
    view.locator(".iw-concept-search").fill(needle)
    _expect_listed(view, matching[:PAGE_SIZE])
    assert kernel.state()["search"] == needle
    view.locator(".iw-concept-search").fill("")
    _expect_listed(view, by_density[:PAGE_SIZE])

    # Selecting a concept shows its top contexts with the activating token highlighted.
    first = by_density[0]
    items.nth(0).click()
    expect(items.nth(0)).to_have_attribute("aria-selected", "true")
    _expect_detail(view, facts, first)

    # Keyboard: ArrowDown selects the next concept and keeps focus in the list; End goes to the page's last.
    items.nth(0).focus()
    page.keyboard.press("ArrowDown")
    second = by_density[1]
    _expect_detail(view, facts, second)
    expect(view.locator(f'.iw-concept[data-concept="{second}"]')).to_be_focused()
    page.keyboard.press("End")
    _expect_detail(view, facts, by_density[PAGE_SIZE - 1])

    # Text view: the hostile text shows as literal characters; clicking a token lists the concepts active there.
    text_box = view.locator(".iw-text-tokens")
    box_text = text_box.evaluate("box => box.textContent")
    assert EVIL in box_text, box_text
    assert view.locator("img").count() == 0 and text_box.locator("*:not(.iw-token)").count() == 0
    tokens = facts["text_tokens"][0]
    soup = tokens.index("soup")
    text_box.locator(".iw-text-token").nth(soup).click()
    expected = [c for c in facts["text_top"][soup] if c >= 0]
    buttons = view.locator(".iw-token-concepts .iw-goto-concept")
    expect(buttons).to_have_count(len(expected), timeout=30_000)
    assert [int(b) for b in buttons.evaluate_all("bs => bs.map(b => b.dataset.concept)")] == expected
    assert kernel.state()["selected_token"] == soup
    # Keyboard on a token: Enter selects it too.
    text_box.locator(".iw-text-token").nth(0).focus()
    page.keyboard.press("Enter")
    expected_first = [c for c in facts["text_top"][0] if c >= 0]
    page.wait_for_function(
        "([root, ids]) => JSON.stringify(Array.from(document.querySelectorAll(root + ' .iw-goto-concept'),"
        " b => Number(b.dataset.concept))) === JSON.stringify(ids)",
        arg=[ROOT, expected_first],
        timeout=30_000,
    )
    # A listed concept button jumps to that concept.
    target = expected_first[0]
    view.locator(f'.iw-goto-concept[data-concept="{target}"]').click()
    _expect_detail(view, facts, target)

    # Paging: PageDown in the list shows page 2, whose details the kernel loads on request.
    view.locator(".iw-concept-list .iw-concept").first.focus()
    page.keyboard.press("PageDown")
    _expect_listed(view, by_density[PAGE_SIZE : 2 * PAGE_SIZE])
    state = kernel.state()
    assert state["page"] == 1 and state["requested"] == by_density[PAGE_SIZE : 2 * PAGE_SIZE]
    assert set(by_density[PAGE_SIZE : 2 * PAGE_SIZE]) <= set(state["details"])
    items.nth(1).click()
    _expect_detail(view, facts, by_density[PAGE_SIZE + 1])
    held = kernel.state()["details"]
    assert sorted(held) == sorted(by_density[PAGE_SIZE : 2 * PAGE_SIZE])  # the visible page and the selected one

    # No answer from the kernel: the browser says so instead of hanging. (Here widget messages are answered even
    # while a cell runs, since JupyterLab and ipykernel route them apart, so the kernel is shut down instead.)
    jupyter_server.shutdown_sessions()
    expect(page.get_by_text("No Kernel").first).to_be_visible(timeout=30_000)
    view.locator(".iw-prev").click()
    _expect_listed(view, by_density[:PAGE_SIZE])
    pending = by_density[2]
    assert pending not in held
    items.nth(2).click()
    expect(view.locator(".iw-concept-busy")).to_contain_text(
        "kernel is busy (a cell is running) or not connected", timeout=15_000
    )
    expect(view.locator(".iw-detail-title")).to_have_count(0)
    expect(view.locator(".iw-error")).to_have_count(0)

    assert dialogs == [], f"a script ran from token text: {dialogs}"
    assert view.locator("img, script, iframe").count() == 0
    recorded_page.requests.assert_loopback_only()
