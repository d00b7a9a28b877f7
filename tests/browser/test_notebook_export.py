"""`interp-widgets export` pages in Debian's chromium from file://, with no kernel and every request recorded: a
notebook of our views only renders them from their saved payloads in a page under 500 KB; a notebook with other
ipywidgets renders every widget live from saved state with the inlined widget manager; without saved state our
views still render from their payloads and other widgets show their fallbacks. No request leaves the machine."""

from __future__ import annotations

import nbformat
import pytest
from playwright.sync_api import expect

from interp_widgets.notebook_export import export_notebook
from tests.browser.token_view import LIGHT_FULL, ROOT, TOKEN, token_colours
from tests.test_cli_export import ONE_VIEW_BUDGET, TOKENS, execute_notebook

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


def test_one_view_notebook_exports_under_500_kb_and_renders_from_file_with_no_network(tmp_path, recorded_page):
    notebook = execute_notebook(tmp_path / "one_view.ipynb", slider=False)
    page_path = export_notebook(notebook, tmp_path / "one_view.html")
    assert page_path.stat().st_size <= ONE_VIEW_BUDGET, page_path.stat().st_size
    page = recorded_page.page
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_path.as_uri())

    view = page.locator(ROOT)
    expect(view.locator(TOKEN)).to_have_count(len(TOKENS), timeout=30_000)
    assert view.locator(TOKEN).all_text_contents() == TOKENS and view.locator(".iw-tokens b").count() == 0
    colours = [c["background"] for c in token_colours(view)]
    assert colours[0] == LIGHT_FULL[1] and colours[2] == LIGHT_FULL[-1]
    view.locator(TOKEN).first.hover()  # interactive without a kernel: tooltip, granularity switch
    expect(view.locator(".iw-tooltip:not([hidden])")).to_contain_text("fine")
    view.locator(".iw-granularity-select").select_option("sentence")
    expect(view.locator(TOKEN)).to_have_count(1)
    assert page.locator(".widget-slider, .jupyter-widgets").count() == 0  # no widget manager on this page
    recorded_page.requests.assert_loopback_only()
    assert all(url.startswith(("file:", "blob:", "data:")) for url in recorded_page.requests.urls), \
        recorded_page.requests.urls  # fmt: skip
    assert errors == []


def test_exported_notebook_without_state_renders_our_views_from_payloads_and_falls_back_for_others(
    executed, tmp_path, recorded_page
):
    notebook = nbformat.read(executed, as_version=4)
    del notebook.metadata["widgets"]
    source = tmp_path / "unsaved.ipynb"
    nbformat.write(notebook, source)
    page = recorded_page.page
    page.goto(export_notebook(source).as_uri())

    view = page.locator(ROOT)  # our view: rebuilt from its payload
    expect(view.locator(TOKEN)).to_have_count(len(TOKENS), timeout=30_000)
    text = page.locator(".jp-OutputArea-output").all_inner_texts()
    assert any("IntSlider(value=7" in block for block in text)  # the slider: its text fallback
    assert page.locator(".widget-slider").count() == 0
    recorded_page.requests.assert_loopback_only()
