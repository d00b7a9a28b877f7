"""The interp-widgets JupyterLab / Notebook 7 extension renders every view from its saved output.

Per front end (JupyterLab 4 and Notebook 7) one notebook shows every view (the ``VIEWS`` factories of
``tests/widgets/test_widget_schema.py``, found by walking ``InterpWidget``'s subclasses). It is run, which must show the live
widgets (the renderer hands outputs whose model exists to ipywidgets), then saved twice from the UI: with "Save
Widget State Automatically" off (JupyterLab's default) and on. The kernel is stopped and each saved file is reopened:

- without widget state: every view is rebuilt from its ``application/vnd.interp-widgets.v1+json`` payload and is
  interactive (tooltips on hover, a concept's detail pane on click, a granularity switch regroups tokens, export
  downloads a file), and ipywidgets' "model not found" never shows;
- with widget state: the live widgets restored from the state win, and no output shows a view twice;
- an untrusted copy (edited outside Jupyter, so its signature no longer matches): rebuilt from the payloads, the
  hostile token texts of the fixtures stay text.

No request of any page leaves the loopback interface.
"""

from __future__ import annotations

import time

import nbformat
import pytest
from playwright.sync_api import expect

from tests.browser.harness import VISIBLE_NOTEBOOK, RequestLog, notebook_cells, run_cells, wait_for_kernel_idle
from tests.browser.test_saved_state import _set_save_state
from tests.widgets.test_widget_schema import VIEWS, _views

pytestmark = pytest.mark.browser

DISCOVERED = sorted(_views(), key=lambda cls: cls.__name__)
SETUP = "import interp_widgets.widgets as iw\nfrom tests.widgets.test_widget_schema import VIEWS\n"
SAVED = ".iw-mime-saved .iw-root"  # a view the extension rebuilt from the payload
NOT_FOUND = "model not found"


def _sources() -> list[str]:
    return [SETUP, *(f"VIEWS[iw.{cls.__name__}]()\n" for cls in DISCOVERED)]


def _outputs(page):
    cells = notebook_cells(page)
    return [cells.nth(1 + i).locator(".jp-OutputArea-output") for i in range(len(DISCOVERED))]


def _save(page, server, name: str, *, with_state: bool) -> dict:
    """Press Ctrl+S and wait until the file on disk has the outputs (and widget state iff ``with_state``)."""
    notebook_cells(page).nth(0).locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+s")
    path = server.root_dir / name
    deadline = time.monotonic() + 30
    saved = None
    while time.monotonic() < deadline:
        try:
            saved = nbformat.read(path, as_version=4)
        except (OSError, ValueError):  # the server is still writing the file (nbformat's NotJSONError)
            page.wait_for_timeout(250)
            continue
        views = saved.cells[1 : 1 + len(DISCOVERED)]  # (Shift+Enter on the last cell added an empty one)
        if all(cell.outputs for cell in views) and ("widgets" in saved.metadata) == with_state:
            return saved
        page.wait_for_timeout(250)
    raise AssertionError(f"{name} was not saved with_state={with_state}: {saved and saved.metadata}")


@pytest.fixture(scope="module", params=["lab", "notebook"])
def saved_notebooks(request, browser, jupyter_server):
    """Run the every-view notebook in front end ``request.param`` and save it without, then with, widget state; the
    two files are byte copies of what the UI saved (so still trusted), plus an untrusted edited copy."""
    ui, server = request.param, jupyter_server
    server.reset()
    name = server.write_notebook(f"mime_{ui}.ipynb", _sources())
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests = RequestLog(page)
    try:
        page.goto(server.notebook_url(name, ui=ui))
        wait_for_kernel_idle(page)
        run_cells(page, 0, len(_sources()))
        for output in _outputs(page):  # the live widgets: handed to ipywidgets, nothing rebuilt from the payload
            output.scroll_into_view_if_needed()
            expect(output.locator(".iw-root")).to_have_count(1, timeout=60_000)
            assert output.locator(".iw-mime-saved").count() == 0
        _save(page, server, name, with_state=False)
        files = {"no-state": f"nostate_{ui}.ipynb", "state": f"state_{ui}.ipynb", "untrusted": f"untrusted_{ui}.ipynb"}
        (server.root_dir / files["no-state"]).write_bytes((server.root_dir / name).read_bytes())
        _set_save_state(server, True)
        try:
            page.reload()  # the page reads the setting at load; the kernel (and its widget models) live on
            wait_for_kernel_idle(page)
            for output in _outputs(page):
                output.scroll_into_view_if_needed()
                expect(output.locator(".iw-root")).to_have_count(1, timeout=60_000)
            _save(page, server, name, with_state=True)
        finally:
            _set_save_state(server, False)
        (server.root_dir / files["state"]).write_bytes((server.root_dir / name).read_bytes())
        untrusted = nbformat.read(server.root_dir / files["no-state"], as_version=4)
        untrusted.cells.insert(0, nbformat.v4.new_markdown_cell("An edited copy: its signature no longer matches."))
        nbformat.write(untrusted, server.root_dir / files["untrusted"])
    finally:
        context.close()
        server.shutdown_sessions()  # stop the kernel: the widget models are gone
    requests.assert_loopback_only()
    yield ui, files
    server.reset()


def _reopen(recorded_page, server, ui: str, name: str, first_cell: int = 1):
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(server.notebook_url(name, ui=ui))
    wait_for_kernel_idle(page)  # a new kernel, without the old widget models
    cells = notebook_cells(page)
    outputs = [cells.nth(first_cell + i).locator(".jp-OutputArea-output") for i in range(len(DISCOVERED))]
    return page, outputs, dialogs


def _assert_interactive(page, outputs) -> None:
    """Each rebuilt view answers the pointer and its controls without a kernel."""
    by_view = dict(zip(DISCOVERED, outputs))
    for cls, output in by_view.items():
        output.scroll_into_view_if_needed()
        root = output.locator(SAVED)
        expect(root).to_have_count(1, timeout=60_000)
        expect(root).to_be_visible()
        assert output.locator(".iw-root").count() == 1, f"{cls.__name__} shows more than one view"
        tokens = output.locator(".iw-token:visible")
        if tokens.count():
            tokens.first.hover()
            expect(output.locator(".iw-tooltip:not([hidden])")).to_have_count(1)
        select = output.locator(".iw-granularity-select")
        if select.count():
            before = output.locator(".iw-tokens .iw-token").count()
            select.first.select_option("sentence")
            expect(select.first).to_have_value("sentence")
            if cls.__name__ == "TokenHighlightWidget":  # merges tokens into units; the generation view recolours them
                expect(output.locator(".iw-tokens .iw-token")).not_to_have_count(before)
    token_view = by_view[iw_class("TokenHighlightWidget")]
    with page.expect_download() as download:
        token_view.locator('button[data-iw-export="svg"]').click()
    assert download.value.suggested_filename == "token-attribution.svg"
    concepts = by_view[iw_class("ConceptBrowser")]
    concepts.locator(".iw-concept").nth(2).click()
    expect(concepts.locator(".iw-detail-title")).to_contain_text("#2")
    monitor = by_view[iw_class("MonitorWidget")]
    assert monitor.locator(".iw-monitor-panel canvas").count() > 0
    text = page.locator(VISIBLE_NOTEBOOK).inner_text()
    assert NOT_FOUND not in text and "Error displaying widget" not in text
    assert page.locator(f"{VISIBLE_NOTEBOOK} .iw-error, {VISIBLE_NOTEBOOK} .iw-mime-note").count() == 0


def iw_class(name: str) -> type:
    return next(cls for cls in DISCOVERED if cls.__name__ == name)


def test_without_widget_state_every_view_is_rebuilt_and_interactive(saved_notebooks, jupyter_server, recorded_page):
    ui, files = saved_notebooks
    page, outputs, dialogs = _reopen(recorded_page, jupyter_server, ui, files["no-state"])
    _assert_interactive(page, outputs)
    assert dialogs == []
    recorded_page.requests.assert_loopback_only()


def test_with_widget_state_the_restored_widgets_win_and_nothing_renders_twice(saved_notebooks, jupyter_server,
                                                                              recorded_page):  # fmt: skip
    ui, files = saved_notebooks
    page, outputs, _ = _reopen(recorded_page, jupyter_server, ui, files["state"])
    for output in outputs:
        output.scroll_into_view_if_needed()
        expect(output.locator(".iw-root")).to_have_count(1, timeout=60_000)
        expect(output.locator(".iw-mime-saved")).to_have_count(0, timeout=30_000)  # the live widget replaced it
    page.wait_for_timeout(1000)  # nothing comes back later
    assert [output.locator(".iw-root").count() for output in outputs] == [1] * len(outputs)
    assert NOT_FOUND not in page.locator(VISIBLE_NOTEBOOK).inner_text()
    recorded_page.requests.assert_loopback_only()


def test_an_untrusted_notebook_is_rebuilt_from_its_payloads(saved_notebooks, jupyter_server, recorded_page):
    ui, files = saved_notebooks
    contents = jupyter_server.api("GET", f"contents/{files['untrusted']}?content=1")
    assert not any(
        cell["metadata"].get("trusted") for cell in contents["content"]["cells"] if cell["cell_type"] == "code"
    )
    page, outputs, dialogs = _reopen(recorded_page, jupyter_server, ui, files["untrusted"], first_cell=2)
    _assert_interactive(page, outputs)
    concepts = outputs[DISCOVERED.index(iw_class("ConceptBrowser"))]
    assert "<img src=x onerror=alert(1)>" in concepts.inner_text()  # the fixture's hostile label, as text
    assert (
        page.locator(f"{VISIBLE_NOTEBOOK} img[onerror], {VISIBLE_NOTEBOOK} .jp-OutputArea-output script").count() == 0
    )
    assert dialogs == []
    recorded_page.requests.assert_loopback_only()
