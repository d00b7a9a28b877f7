"""Every view renders in every notebook front end we test: JupyterLab 4, Notebook 7 and marimo.

The views are discovered from ``interp_widgets.widgets`` (every ``InterpWidget`` subclass with a bundle, as
``tests/widgets/test_widget_schema.py`` finds them) and built by that module's ``VIEWS`` factories, so a new view without a
factory fails here too. Per front end one notebook shows every view, one cell each; per (front end, view) the test
checks that the cell shows the view's root element, visible and non-empty, no error box anywhere on the page, and
that no request of the page left the loopback interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.harness import RequestLog, notebook_cells, run_cells, wait_for_kernel_idle
from tests.browser.marimo_app import cell_output, marimo_app, write_marimo_notebook
from tests.widgets.test_widget_schema import VIEWS, _views

pytestmark = pytest.mark.browser

#: Every view class, found by walking ``InterpWidget``'s subclasses (not by reading VIEWS).
DISCOVERED = sorted(_views(), key=lambda cls: cls.__name__)
COVERED = [cls for cls in DISCOVERED if cls in VIEWS]
FRONT_ENDS = ("lab", "notebook", "marimo")

SETUP = """\
import interp_widgets.widgets as iw
from tests.widgets.test_widget_schema import VIEWS
"""


def _show(cls) -> str:
    return f"VIEWS[iw.{cls.__name__}]()  # the view is the cell's last expression\n"


def _cell_name(cls) -> str:
    return f"view_{cls.__name__}"


@dataclass
class RenderedNotebook:
    """A page showing every covered view, one per cell, and a way to find the output of a view's cell."""

    page: object
    requests: RequestLog
    output_of: Callable[[type], object]


@pytest.fixture(scope="module", params=FRONT_ENDS)
def rendered(request, browser, tmp_path_factory) -> Iterator[RenderedNotebook]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests = RequestLog(page)
    try:
        if request.param == "marimo":
            cells = {"setup": "import marimo as mo\n" + SETUP} | {_cell_name(cls): _show(cls) for cls in COVERED}
            path = write_marimo_notebook(tmp_path_factory.mktemp("marimo") / "every_view.py", cells)
            with marimo_app(path) as app:
                page.goto(app.url)
                try:
                    yield RenderedNotebook(page, requests, lambda cls: cell_output(page, _cell_name(cls)))
                finally:
                    page.close()
        else:
            server = request.getfixturevalue("jupyter_server")
            name = server.write_notebook(f"every_view_{request.param}.ipynb", [SETUP, *map(_show, COVERED)])
            page.goto(server.notebook_url(name, ui=request.param))
            wait_for_kernel_idle(page)
            run_cells(page, 0, 1 + len(COVERED))
            cells = notebook_cells(page)
            try:
                yield RenderedNotebook(
                    page, requests, lambda cls: cells.nth(1 + COVERED.index(cls)).locator(".jp-OutputArea-output")
                )
            finally:
                page.close()
                server.reset()
    finally:
        context.close()


def test_every_view_has_a_factory():
    assert DISCOVERED, "no InterpWidget subclass was discovered"
    missing = [cls.__name__ for cls in DISCOVERED if cls not in VIEWS]
    assert not missing, f"add a factory to VIEWS in tests/widgets/test_widget_schema.py for {missing}"


@pytest.mark.parametrize("view", DISCOVERED, ids=lambda cls: cls.__name__)
def test_view_renders(rendered, view):
    assert view in VIEWS, f"{view.__name__} has no factory in tests/widgets/test_widget_schema.py VIEWS"
    output = rendered.output_of(view)
    root = output.locator(".iw-root").first
    expect(root).to_be_visible(timeout=60_000)
    shape = root.evaluate("e => ({children: e.children.length, height: e.getBoundingClientRect().height,"
                          " text: e.textContent.trim().length})")  # fmt: skip
    assert shape["children"] > 0 and shape["height"] > 20 and shape["text"] > 0, shape
    assert output.locator(".iw-root").count() == 1, "the cell shows the view more than once"
    page = rendered.page
    errors = page.locator(".iw-error")
    assert errors.count() == 0, errors.all_inner_texts()
    rendered.requests.assert_loopback_only()
