"""A 10,000-token input in Debian's chromium (an exported page, no kernel): the view builds block by block, yet
keyboard navigation, tooltips, the screen-reader table and the CSV export cover every token, and the text is
reproduced exactly. Timings are not asserted here (the goals live in benchmarks/widgets.py)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from playwright.sync_api import expect

from interp_widgets.widgets import TokenHighlightWidget
from tests.browser.token_view import ROOT, TOKEN

pytestmark = pytest.mark.browser

N = 10_000


@pytest.fixture(scope="module")
def long_page(tmp_path_factory):
    words = [f"w{i}" + ("\n" if i % 997 == 996 else "") for i in range(N)]  # a few newlines: natural block breaks
    text, offsets = "", []
    for w in words:
        start = len(text) + (1 if text and not text.endswith("\n") else 0)
        text = text + (" " if text and not text.endswith("\n") else "") + w
        offsets.append((start, start + len(w)))
    scores = np.sin(np.arange(2 * N, dtype=np.float64)).reshape(2, N)
    widget = TokenHighlightWidget.from_arrays(text, words, offsets, scores, target_labels=["a", "b"])
    path = widget.export_html(tmp_path_factory.mktemp("long") / "long.html")
    return path, text, scores.astype(np.float32)


def test_ten_thousand_tokens_stay_complete_and_navigable(long_page, recorded_page, tmp_path):
    path, text, scores = long_page
    page = recorded_page.page
    page.goto(path.as_uri())
    view = page.locator(ROOT)
    first = view.locator(TOKEN).first
    expect(first).to_be_visible()

    # Keyboard: End reaches the last token even if its block is not built yet; the tooltip opens on focus.
    first.focus()
    page.keyboard.press("End")
    focused = page.evaluate("document.activeElement.textContent")
    assert focused == f"w{N - 1}"
    tooltip = view.locator(".iw-tooltip")
    expect(tooltip).to_be_visible()
    expect(tooltip).to_contain_text(f'"w{N - 1}"')
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("document.activeElement.textContent") == f"w{N - 2}"

    # Every block and every screen-reader row arrive; the text is the original text, newlines included.
    expect(view.locator(TOKEN)).to_have_count(N, timeout=60_000)
    expect(view.locator(".iw-sr-table tbody tr")).to_have_count(N, timeout=60_000)
    shown = view.locator(".iw-tokens").evaluate("box => box.textContent")
    assert shown == text  # blocks break after the newlines the text has, so nothing is added or lost
    last_row = (
        view.locator(".iw-sr-table tbody tr").nth(N - 1).locator("td").all_text_contents()
    )  # not rendered: read the text, not innerText
    assert last_row[0] == f"w{N - 1}"

    # The CSV export lists every token with its float32 score.
    with page.expect_download() as info:
        view.locator('[data-iw-export="csv"]').click()
    target = tmp_path / "long.csv"
    info.value.save_as(target)
    rows = list(csv.reader(io.StringIO(target.read_text(encoding="utf-8"))))
    assert rows[0] == ["position", "token", "start_token", "a", "b"] and len(rows) == N + 1
    got = np.array([[float(r[3]), float(r[4])] for r in rows[1:]]).T
    np.testing.assert_allclose(got, scores.astype(np.float64), rtol=1e-6, atol=1e-7)
    recorded_page.requests.assert_loopback_only()
