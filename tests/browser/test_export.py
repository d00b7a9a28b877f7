"""Exported pages (``result.to_html()``, ``widget.export_html(path)``) in Debian's chromium, with no kernel and no
network: interactive with JavaScript, static fallback without it, legible in dark mode."""

from __future__ import annotations

import functools
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from playwright.sync_api import expect

from interp_widgets.attribution import IntegratedGradients
from interp_widgets.widgets import TokenHighlightWidget
from tests.browser.harness import ARTIFACTS, RequestLog
from tests.browser.token_view import (
    LIGHT_FULL,
    ROOT,
    TOKEN,
    contrast_ratio,
    js_score,
    legend_labels,
    text_and_background,
    token_colours,
    tooltip_rows,
)

pytestmark = pytest.mark.browser

TEXT = "<b>bold</b> claim"


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory):
    """A directory served by ``http.server`` on 127.0.0.1; yields (directory, base URL)."""
    directory = tmp_path_factory.mktemp("export")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield directory, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def explained(bert_classifier):
    """Integrated gradients of the tiny BERT classifier for all three classes of a text containing HTML."""
    model, tokenizer = bert_classifier
    return IntegratedGradients(n_steps=16, progress=False).attribute(model, tokenizer, TEXT, target=[0, 1, 2])


def test_exported_page_is_interactive_offline(explained, served_dir, recorded_page):
    directory, base_url = served_dir
    (directory / "result.html").write_text(explained.to_html(), encoding="utf-8")
    widget = explained.widget()
    units = [unit[0] for unit in widget.units()]
    scores = widget.score_matrix().astype(np.float64)[:, units]
    target = widget.selected_target

    page = recorded_page.page
    page.goto(base_url + "result.html")
    view = page.locator(ROOT)
    tokens = view.locator(TOKEN)
    expect(tokens).to_have_count(len(units))
    assert tokens.all_text_contents() == [widget.tokens[i] for i in units]
    literal = view.locator(".iw-tokens").evaluate("box => [box.textContent, box.querySelectorAll('b').length]")
    assert literal == [TEXT, 0], f"token text was parsed as markup: {literal}"
    strongest = int(np.argmax(np.abs(scores[target])))
    colours = token_colours(view)
    assert colours[strongest]["background"] == LIGHT_FULL[int(np.sign(scores[target, strongest]))]
    assert all(c["background"] not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)") for c in colours)
    peak = float(np.abs(scores[target]).max())
    assert legend_labels(view) == [js_score(-peak, 3), "0", js_score(peak, 3, sign=True)]

    tokens.nth(strongest).hover()
    rows = tooltip_rows(view)
    assert rows["score"] == js_score(float(scores[target, strongest]))
    assert rows["class"] == widget.target_labels[target] and rows["rank"] == f"1 of {len(units)} by |score|"

    # Switching class and granularity works in the page alone (no kernel).
    other = (target + 1) % len(widget.target_labels)
    view.locator(".iw-target-select").select_option(str(other))
    strongest_other = int(np.argmax(np.abs(scores[other])))
    expected = LIGHT_FULL[int(np.sign(scores[other, strongest_other]))]
    assert token_colours(view)[strongest_other]["background"] == expected
    view.locator(".iw-granularity-select").select_option("sentence")
    expect(tokens).to_have_count(1)
    assert tokens.first.evaluate("span => [span.textContent, span.children.length]") == [TEXT, 0]
    tokens.first.hover()
    assert tooltip_rows(view)["score"] == js_score(float(scores[other].sum()))

    recorded_page.requests.assert_loopback_only()
    assert all(url.startswith((base_url, "blob:", "data:")) for url in recorded_page.requests.urls)


def test_exported_file_has_static_fallback_without_javascript(explained, tmp_path, browser):
    widget = explained.widget()
    path = widget.export_html(tmp_path / "widget.html")
    (noscript,) = re.findall(r"<noscript>(.*?)</noscript>", path.read_text(encoding="utf-8"), flags=re.S)
    assert 'class="iw-static' in noscript and ">&lt;</span>" in noscript  # the fallback, with "<" escaped

    units = [unit[0] for unit in widget.units()]
    row = widget.score_matrix().astype(np.float64)[widget.selected_target, units]
    strongest = int(np.argmax(np.abs(row)))
    for javascript in (False, True):
        context = browser.new_context(java_script_enabled=javascript)
        try:
            page = context.new_page()
            requests = RequestLog(page)
            page.goto(path.as_uri())
            if javascript:  # file:// works too, and the live view replaces nothing but the empty container
                expect(page.locator(f"{ROOT} {TOKEN}")).to_have_count(len(units))
                expect(page.locator(".iw-static")).to_be_hidden()
            else:
                spans = page.locator(".iw-static span[title]")
                expect(spans).to_have_count(len(units))
                assert spans.all_text_contents() == [widget.tokens[i] for i in units]
                line = spans.first.locator("..")
                assert line.evaluate("p => [p.textContent, p.querySelectorAll('b').length]") == [TEXT, 0]
                background = spans.nth(strongest).evaluate("s => getComputedStyle(s).backgroundColor")
                assert background == LIGHT_FULL[int(np.sign(row[strongest]))]
                expect(page.locator(ROOT)).to_have_count(0)
            requests.assert_loopback_only()
        finally:
            context.close()


def test_dark_mode_zero_score_token_is_legible(served_dir, recorded_page):
    directory, base_url = served_dir
    widget = TokenHighlightWidget.from_arrays(
        "fine zero awful", ["fine", "zero", "awful"], [(0, 4), (5, 9), (10, 15)], [0.8, 0.0, -0.6]
    )
    widget.export_html(directory / "dark.html")
    page = recorded_page.page
    page.emulate_media(color_scheme="dark")
    page.goto(base_url + "dark.html")
    view = page.locator(ROOT)
    expect(view).to_have_attribute("data-iw-theme", "dark")
    expect(view.locator(TOKEN)).to_have_count(3)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "token_highlight_dark.png"), full_page=True)

    _, page_background = text_and_background(page.locator("body"))
    assert contrast_ratio(page_background, (0, 0, 0)) < 3, f"page is not dark: background {page_background}"
    for index, name in enumerate(["fine", "zero", "awful"]):
        colour, background = text_and_background(view.locator(TOKEN).nth(index))
        ratio = contrast_ratio(colour, background)
        assert ratio >= 4.5, f"token {name!r}: text {colour} on {background} has contrast {ratio:.2f} < 4.5"
    recorded_page.requests.assert_loopback_only()
