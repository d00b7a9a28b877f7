"""The export buttons (PNG, SVG, CSV, HTML) of the token, comparison and example-list views in real JupyterLab,
the granularity switch of the comparison and example-list views, and their dark theme.

The notebook is written at run time; it builds the widgets from plain arrays (no model) with hostile token text
and prints the facts the test checks the downloaded files against: every file must be valid, carry the token text
as inert text, and the CSV must hold every score exactly as sent (float32). The downloaded HTML page must open
with no request beyond the file itself.
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import re
import xml.etree.ElementTree as ET
from typing import Iterator

import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import expect

from interp_widgets.widgets import ExampleListWidget, compare
from tests.browser.harness import ARTIFACTS, RequestLog, notebook_cells, run_cells, wait_for_kernel_idle
from tests.browser.token_view import contrast_ratio, js_score, text_and_background

pytestmark = pytest.mark.browser

NOTEBOOK = "export_buttons.ipynb"
WORDS = ["The", "film", "<img src=x onerror=alert(1)>", "was", "</script>", "{{7*7}}", "fine", "."]


def word_result(words, rows, method, **extra):
    """An attribution-result stand-in: ``words`` joined by spaces, one token each, scores ``rows`` (targets ×
    words). Also sent as source to the kernel (SETUP), so both sides build results the same way."""
    from types import SimpleNamespace

    offsets, start = [], 0
    for w in words:
        offsets.append((start, start + len(w)))
        start += len(w) + 1
    return SimpleNamespace(
        text=" ".join(words),
        tokens=words,
        offsets=offsets,
        scores=rows,
        method=method,
        target_labels=["negative", "positive"],
        target_probs=[0.3, 0.7],
        **extra,
    )


SETUP = f"""\
import json

import numpy as np

from interp_widgets.widgets import ExampleListWidget, TokenHighlightWidget, compare

{inspect.getsource(word_result)}
words = {WORDS!r}
scores = np.random.default_rng(0).normal(size=(2, len(words)))
result = lambda rows, method: word_result(words, rows, method)

token_widget = TokenHighlightWidget(result(scores, "ig"))
comparison = compare([result(scores, "ig"), result(scores[::-1].copy(), "saliency")])
examples = ExampleListWidget([result(scores, "ig"), result(-scores, "occlusion")])
print("IW_FACTS " + json.dumps({{"scores": scores.astype(np.float32).tolist(), "target": token_widget.selected_target}}))
"""

PRINT_GRANULARITY = 'print("IW_GRANULARITY", comparison.granularity, examples.granularity)\n'

VIEWS = {  # cell index -> (root selector, download name, CSV header)
    1: (".iw-root.iw-token-highlight", "token-attribution", ["position", "token", "start_token", "negative", "positive"]),
    2: (".iw-root.iw-comparison", "method-comparison", ["position", "token", "start_token", "ig", "saliency"]),
    3: (".iw-root.iw-examples", "examples", ["example", "predicted", "confidence", "true_label", "max_attribution",
                                             "position", "token", "start_token", "score"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def notebook_kernel(jupyter_server) -> Iterator[None]:
    """Shuts this module's kernel down and forgets the JupyterLab workspace afterwards."""
    yield
    jupyter_server.reset()


@pytest.fixture()
def export_notebook(jupyter_server, notebook_kernel) -> str:
    return jupyter_server.write_notebook(NOTEBOOK, (SETUP, "token_widget", "comparison", "examples", PRINT_GRANULARITY))


def _download(page, button, tmp_path):
    with page.expect_download() as info:
        button.click()
    download = info.value
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    return path


def _expected_rows(cell: int, facts: dict) -> list[list[float]]:
    """The numbers each CSV must hold (float32 as sent), one list per row."""
    scores = np.asarray(facts["scores"], dtype=np.float32).astype(np.float64)
    if cell == 1:
        return [[i, i, *scores[:, i]] for i in range(len(WORDS))]
    if cell == 2:
        return [[i, i, scores[1, i], scores[0, i]] for i in range(len(WORDS))]  # target "positive"; reversed rows
    # Each example shows its predicted class: "positive" (0.7) for both, the second with negated scores.
    return [[e, i, i, sign * scores[1, i]] for e, sign in ((0, 1.0), (1, -1.0)) for i in range(len(WORDS))]


def _check_csv(path, cell: int, header: list[str], facts: dict) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert rows[0] == header
    expected = _expected_rows(cell, facts)
    assert len(rows) - 1 == len(expected)
    token_column = header.index("token")
    for row, numbers in zip(rows[1:], expected):
        assert row[token_column] in WORDS
        if cell == 3:
            got = [float(row[0]), float(row[5]), float(row[7]), float(row[8])]
        else:
            got = [float(row[0]), float(row[2]), *map(float, row[3:])]
        np.testing.assert_allclose(got, numbers, rtol=1e-6, atol=1e-7)
    assert [row[token_column] for row in rows[1 : 1 + len(WORDS)]] == WORDS


def _check_png(path, view_box) -> None:
    image = Image.open(path)
    image.load()  # decodes every pixel: a truncated or corrupt file raises here
    assert image.format == "PNG"
    # Drawn at twice the CSS size of the view (for sharpness); allow a pixel of rounding.
    assert abs(image.width - 2 * view_box["width"]) <= 2 and abs(image.height - 2 * view_box["height"]) <= 2
    colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 8, "the PNG is blank"
    assert (230, 97, 1) in {rgb for _, rgb in colours} or (33, 102, 172) in {rgb for _, rgb in colours}


def _check_svg(path) -> None:
    root = ET.fromstring(path.read_bytes())  # well-formed XML, or this raises
    assert root.tag.endswith("}svg")
    assert not [e for e in root.iter() if e.tag.endswith("}script") or e.tag.endswith("}foreignObject")]
    texts = "".join(e.text or "" for e in root.iter() if e.tag.endswith("}text"))
    for word in WORDS:
        assert word in texts, f"{word!r} missing from the SVG text"


def _check_html(path, browser, header: list[str], rows: int) -> None:
    source = path.read_text(encoding="utf-8")
    assert source.startswith("<!DOCTYPE html>") and "<script" not in source.lower()
    context = browser.new_context()
    try:
        page = context.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        requests = RequestLog(page)
        page.goto(path.as_uri())
        expect(page.locator("svg")).to_have_count(1)
        assert page.locator("table tr").count() == rows + 1
        assert page.locator("table th").all_inner_texts() == header
        assert page.evaluate("document.querySelectorAll('img, script').length") == 0
        assert WORDS[2] in page.locator("table").inner_text() and "{{7*7}}" in page.locator("svg").text_content()
        assert dialogs == []
        requests.assert_loopback_only()
        assert all(url.startswith(("file:", "data:", "blob:", "about:")) for url in requests.urls), requests.urls
    finally:
        context.close()


def test_export_buttons_and_granularity(jupyter_server, export_notebook, recorded_page, browser, tmp_path):
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(jupyter_server.notebook_url(export_notebook, ui="lab"))
    wait_for_kernel_idle(page)
    run_cells(page, 0, 4)  # the last cell runs after the views have been used
    text = notebook_cells(page).nth(0).locator(".jp-OutputArea-output", has_text="IW_FACTS").inner_text()
    facts = json.loads(re.search(r"IW_FACTS (\{.*\})", text).group(1))

    for cell, (selector, name, header) in VIEWS.items():
        view = notebook_cells(page).nth(cell).locator(selector)
        expect(view.locator(".iw-token").first).to_be_visible()
        view.scroll_into_view_if_needed()
        buttons = view.locator(".iw-export [data-iw-export]")
        assert buttons.evaluate_all("bs => bs.map(b => b.dataset.iwExport)") == ["png", "svg", "csv", "html"]
        folder = tmp_path / name
        folder.mkdir()
        files = {kind: _download(page, buttons.nth(k), folder) for k, kind in enumerate(["png", "svg", "csv", "html"])}
        assert {kind: p.name for kind, p in files.items()} == {kind: f"{name}.{kind}" for kind in files}
        _check_png(files["png"], view.bounding_box())
        _check_svg(files["svg"])
        _check_csv(files["csv"], cell, header, facts)
        _check_html(files["html"], browser, header, len(_expected_rows(cell, facts)))

    # The granularity switch of the comparison and example views: sums in the browser, the choice synced back.
    comparison = notebook_cells(page).nth(2).locator(VIEWS[2][0])
    comparison.locator(".iw-granularity-select").select_option("sentence")
    expect(comparison.locator(".iw-token")).to_have_count(2)  # one sentence per method row
    assert comparison.locator(".iw-token").all_text_contents() == [" ".join(WORDS)] * 2
    examples = notebook_cells(page).nth(3).locator(VIEWS[3][0])
    examples.locator(".iw-granularity-select").select_option("sentence")
    expect(examples.locator(".iw-token")).to_have_count(2)  # one sentence per example
    examples.locator(".iw-token").first.hover()
    expected = js_score(sum(float(x) for x in np.asarray(facts["scores"][1], dtype=np.float32)))  # in JS's order
    expect(examples.locator(".iw-tooltip")).to_contain_text(f"score{expected}")
    run_cells(page, 4)
    printed = notebook_cells(page).nth(4).locator(".jp-OutputArea-output").inner_text()
    assert printed.strip() == "IW_GRANULARITY sentence sentence"

    assert dialogs == [], f"token text ran as script: {dialogs}"
    assert notebook_cells(page).locator(".iw-error").count() == 0
    recorded_page.requests.assert_loopback_only()


def _results():
    rows = np.random.default_rng(1).normal(size=(2, len(WORDS)))
    return [
        word_result(WORDS, sign * rows, method, true_label=truth)
        for sign, method, truth in ((1.0, "ig", "positive"), (-1.0, "occlusion", "negative"))
    ]


@pytest.mark.parametrize(
    "name, make, selector",
    [("comparison", lambda results: compare(results, names=["ig", "occlusion"]), ".iw-root.iw-comparison"),
     ("examples", lambda results: ExampleListWidget(results), ".iw-root.iw-examples")],
)  # fmt: skip
def test_dark_theme_is_legible(name, make, selector, tmp_path, recorded_page):
    path = make(_results()).export_html(tmp_path / f"{name}_dark.html")
    page = recorded_page.page
    page.emulate_media(color_scheme="dark")
    page.goto(path.as_uri())
    view = page.locator(selector)
    expect(view).to_have_attribute("data-iw-theme", "dark")
    tokens = view.locator(".iw-token")
    expect(tokens.first).to_be_visible()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}_dark.png"), full_page=True)

    _, page_background = text_and_background(page.locator("body"))
    assert contrast_ratio(page_background, (0, 0, 0)) < 3, f"page is not dark: background {page_background}"
    colour, background = text_and_background(view.locator(".iw-toolbar"))
    assert contrast_ratio(colour, background) >= 4.5, f"toolbar text {colour} on {background}"
    for k in range(tokens.count()):
        colour, background = text_and_background(tokens.nth(k))
        ratio = contrast_ratio(colour, background)
        assert ratio >= 4.5, f"token {k}: text {colour} on {background} has contrast {ratio:.2f} < 4.5"
    recorded_page.requests.assert_loopback_only()
