"""Notebooks saved by a real JupyterLab with "Save Widget State Automatically" on and off render through nbconvert,
pass nbformat validation and GitHub's widget check, before and after `interp-widgets clean`; the cleaned notebook's
export page renders every view, the deduplicated ones through the loader, with no request leaving the machine."""

from __future__ import annotations

import json
import time
import urllib.request

import nbformat
import pytest
from playwright.sync_api import expect

from interp_widgets.notebook_clean import WIDGET_STATE_MIME, clean_notebook, github_widget_problem
from interp_widgets.notebook_export import export_notebook
from tests.browser.harness import notebook_cells, run_cells, wait_for_kernel_idle
from tests.browser.token_view import ROOT, TOKEN
from tests.test_notebook_clean import CELLS, assert_renders_everywhere

pytestmark = pytest.mark.browser
PLUGIN = "@jupyter-widgets/jupyterlab-manager:plugin"


def _set_save_state(server, on: bool) -> None:
    body = json.dumps({"raw": json.dumps({"saveState": on})}).encode()
    request = urllib.request.Request(server.url(f"lab/api/settings/{PLUGIN}"), data=body, method="PUT",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10):
        pass


def _save_from_lab(server, recorded_page, name: str, save_state: bool):
    server.reset()
    server.write_notebook(name, CELLS)
    _set_save_state(server, save_state)
    page = recorded_page.page
    try:
        page.goto(server.notebook_url(name))
        wait_for_kernel_idle(page)
        run_cells(page, 0, len(CELLS))
        expect(page.locator(ROOT)).to_have_count(2, timeout=30_000)
        notebook_cells(page).nth(1).locator(".jp-InputPrompt").click()
        page.keyboard.press("Control+s")
        path = server.root_dir / name
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            saved = nbformat.read(path, as_version=4)
            if saved.cells[1].outputs and ("widgets" in saved.metadata) == save_state:
                break
            page.wait_for_timeout(250)
        else:
            raise AssertionError(f"JupyterLab did not save {name} (saveState={save_state}): {saved.metadata}")
    finally:
        _set_save_state(server, False)  # the default, for the other tests of the session
        server.shutdown_sessions()
    recorded_page.requests.assert_loopback_only()
    return path


@pytest.mark.parametrize("save_state", [True, False], ids=["save-state-on", "save-state-off"])
def test_jupyterlab_saved_notebook_renders_everywhere(jupyter_server, recorded_page, browser, save_state, tmp_path):
    path = _save_from_lab(jupyter_server, recorded_page, f"saved-{save_state}.ipynb", save_state)
    assert_renders_everywhere(path)
    saved = nbformat.read(path, as_version=4)
    if save_state:
        states = saved.metadata["widgets"][WIDGET_STATE_MIME]["state"]
        assert sum(m["model_name"] == "AnyModel" for m in states.values()) == 3  # JupyterLab saves the hidden one too
    size = path.stat().st_size
    problems = clean_notebook(path)
    print(f"\nJupyterLab saveState={save_state}: {size} bytes -> {path.stat().st_size} bytes; {problems}")
    assert bool(problems) == save_state
    assert_renders_everywhere(path)
    assert github_widget_problem(nbformat.read(path, as_version=4)) is None
    if not save_state:
        return
    # The cleaned notebook's offline page: both views render, the second through the deduplicating loader.
    context = browser.new_context()
    try:
        page = context.new_page()
        urls: list[str] = []
        errors: list[str] = []
        context.on("request", lambda request: urls.append(request.url))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(export_notebook(path, tmp_path / "saved.html").as_uri())
        views = page.locator(ROOT)
        expect(views).to_have_count(2, timeout=30_000)
        expect(views.nth(0).locator(TOKEN)).to_have_count(3)
        expect(views.nth(1).locator(TOKEN)).to_have_count(2)
        assert views.nth(1).locator(TOKEN).all_text_contents() == ["good", "bad"]
        assert urls and all(url.startswith(("file:", "blob:", "data:")) for url in urls), urls
        assert errors == []
    finally:
        context.close()
