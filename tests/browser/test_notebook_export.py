"""`interp-widgets export` pages in Debian's chromium from file://, with no kernel and every request recorded:
live widgets from saved state with no request leaving the machine, static fallbacks without saved state."""

from __future__ import annotations

import nbformat
import pytest
from playwright.sync_api import expect

from interp_widgets.notebook_export import export_notebook
from tests.browser.token_view import LIGHT_FULL, ROOT, TOKEN, token_colours
from tests.test_cli_export import TOKENS, execute_notebook

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    return execute_notebook(tmp_path_factory.mktemp("nb") / "executed.ipynb")


def test_exported_notebook_renders_live_widgets_offline(executed, tmp_path, recorded_page):
    page_path = export_notebook(executed, tmp_path / "executed.html")
    page = recorded_page.page
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_path.as_uri())

    view = page.locator(ROOT)
    expect(view.locator(TOKEN)).to_have_count(len(TOKENS), timeout=30_000)
    assert view.locator(TOKEN).all_text_contents() == TOKENS
    assert view.locator(".iw-tokens b").count() == 0  # "<b>awful</b>" is text, not markup
    colours = [c["background"] for c in token_colours(view)]
    assert colours[0] == LIGHT_FULL[1] and colours[2] == LIGHT_FULL[-1]  # the ends of the scale: +0.8 and -0.8
    # ipywidgets' own controls come from the inlined widget manager.
    slider = page.locator(".widget-slider")
    expect(slider).to_have_count(1)
    assert "steps" in slider.inner_text() and "7" in slider.inner_text()

    recorded_page.requests.assert_loopback_only()
    assert all(url.startswith(("file:", "blob:", "data:")) for url in recorded_page.requests.urls), \
        recorded_page.requests.urls  # fmt: skip
    assert errors == []


def test_exported_notebook_without_state_shows_fallbacks(executed, tmp_path, recorded_page):
    notebook = nbformat.read(executed, as_version=4)
    del notebook.metadata["widgets"]
    source = tmp_path / "unsaved.ipynb"
    nbformat.write(notebook, source)
    page = recorded_page.page
    page.goto(export_notebook(source).as_uri())

    picture = page.locator(".jp-OutputArea-output svg, .jp-OutputArea-output img")
    expect(picture.first).to_be_visible()
    assert page.locator(ROOT).count() == 0
    text = page.locator(".jp-OutputArea-output").all_inner_texts()
    assert any("IntSlider(value=7" in block for block in text)
    recorded_page.requests.assert_loopback_only()
