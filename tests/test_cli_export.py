"""`interp-widgets export`: an executed notebook becomes one offline HTML page, and nothing is loaded from a CDN.
interp_widgets views render from their saved payloads with a small loader; a notebook that also holds other
ipywidgets with saved state gets the widget manager, anywidget and require.js inlined instead."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from interp_widgets.notebook_export import VENDOR_DIR, export_notebook, has_widget_state, needs_widget_manager
from interp_widgets.widgets import MIME_TYPE

ROOT = Path(__file__).resolve().parent.parent
TOKENS = ["fine", "zero", "<b>awful</b>"]
WIDGET_CELL = f"""\
import ipywidgets
from interp_widgets.widgets import TokenHighlightWidget
text = "fine zero <b>awful</b>"
widget = TokenHighlightWidget.from_arrays(text, {TOKENS!r}, [(0, 4), (5, 9), (10, 22)], [0.8, 0.0, -0.8])
widget"""


def execute_notebook(path: Path, *, slider: bool = True) -> Path:
    """Write and execute (nbclient, widget state saved) a notebook with a token widget, an ipywidgets slider (unless
    ``slider=False``: then it is the one-widget notebook) and a formula in markdown; returns ``path``."""
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Exported offline\nThe formula $e^{i\\pi} + 1 = 0$ stays as text."),
        nbformat.v4.new_code_cell(WIDGET_CELL),
    ]
    if slider:
        notebook.cells.append(nbformat.v4.new_code_cell("ipywidgets.IntSlider(value=7, max=10, description='steps')"))
    NotebookClient(notebook, kernel_name="python3", timeout=120, store_widget_state=True,
                   resources={"metadata": {"path": str(ROOT)}}).execute()  # fmt: skip
    nbformat.write(notebook, path)
    return path


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    return execute_notebook(tmp_path_factory.mktemp("nb") / "executed.ipynb")


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.external: list[str] = []
        self.script_types: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.script_types.append(attrs.get("type"))
        for name in ("src", "href"):
            value = attrs.get(name)
            if value and not value.startswith(("#", "data:")):
                self.external.append(f"<{tag} {name}={value}>")


def _parse(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    return tags


CDN_HOSTS = ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "esm.sh")


def test_export_inlines_the_widget_manager_and_loads_nothing(executed, tmp_path):
    notebook = nbformat.read(executed, as_version=4)
    assert has_widget_state(notebook)
    out = export_notebook(executed, tmp_path / "page.html")
    page = out.read_text(encoding="utf-8")
    tags = _parse(page)
    assert tags.external == []  # no script src, no stylesheet link: everything is inline
    assert not [host for host in CDN_HOSTS if host in page]
    assert "application/vnd.jupyter.widget-state+json" in tags.script_types
    assert tags.script_types.count("application/vnd.jupyter.widget-view+json") == 2
    for vendor in ("require.js", "embed-amd.js", "anywidget.js"):
        assert (VENDOR_DIR / vendor).read_text(encoding="utf-8")[-2000:].replace("</script", "<\\/script") in page
    assert 'define("anywidget", deps, factory)' in page
    assert "text/x-mathjax-config" not in page and "mermaid.esm" not in page
    assert "$e^{i\\pi} + 1 = 0$" in page  # the formula stays as source text
    # Saved state carries the widget's ES module and its tokens; "<b>" never reaches the page as markup.
    state = json.loads(re.search(r'<script type="application/vnd.jupyter.widget-state\+json">\s*(.*?)\s*</script>',
                                 page, flags=re.S).group(1))  # fmt: skip
    models = [m["state"] for m in state["state"].values() if m["model_name"] == "AnyModel"]
    assert len(models) == 1 and models[0]["tokens"] == TOKENS and "_esm" in models[0]
    assert "<b>awful</b>" not in page


#: ``interp-widgets export`` of a notebook holding one small token view, in bytes (issue 19; it was 4.0 MB).
ONE_VIEW_BUDGET = 500_000


@pytest.fixture(scope="module")
def one_view(tmp_path_factory) -> Path:
    return execute_notebook(tmp_path_factory.mktemp("one") / "one_view.ipynb", slider=False)


def test_a_notebook_of_our_views_exports_small_from_the_payloads(one_view, tmp_path):
    notebook = nbformat.read(one_view, as_version=4)
    assert has_widget_state(notebook) and not needs_widget_manager(notebook)  # nbclient saved state; ours only
    out = export_notebook(one_view, tmp_path / "one.html")
    size = out.stat().st_size
    print(f"\none-view notebook export: {size} bytes")
    assert size <= ONE_VIEW_BUDGET
    page = out.read_text(encoding="utf-8")
    tags = _parse(page)
    assert tags.external == [] and not [host for host in CDN_HOSTS if host in page]
    assert "application/vnd.jupyter.widget-state+json" not in tags.script_types  # no state, no manager, no require.js
    assert "application/vnd.jupyter.widget-view+json" not in tags.script_types
    assert "requirejs" not in page and "html-manager" not in page
    blocks = re.findall(
        r'<script (?=[^>]*type="application/json")[^>]*id="(iw-[a-z]+-\d+)"[^>]*>(.*?)</script>', page, flags=re.S
    )  # nbconvert re-serialises the page (BeautifulSoup): attribute order may change
    payloads = [json.loads(text) for name, text in blocks if name.startswith("iw-payload-")]
    modules = [json.loads(text) for name, text in blocks if name.startswith("iw-esm-")]
    assert len(payloads) == 1 and len(modules) == 1 and 'data-iw-payload="iw-payload-0"' in page
    assert payloads[0] == notebook.cells[1].outputs[0]["data"][MIME_TYPE]  # the saved payload, unchanged
    assert payloads[0]["data"]["tokens"] == TOKENS and "<b>awful</b>" not in page  # the JSON escapes "<"
    assert re.search(
        r'<noscript><img alt="" src="data:image/svg\+xml;base64,[^"]+"/?></noscript>', page
    )  # no-JS picture
    assert "$e^{i\\pi} + 1 = 0$" in page


def test_export_without_saved_state_shows_the_static_fallback(executed, tmp_path):
    notebook = nbformat.read(executed, as_version=4)
    del notebook.metadata["widgets"]  # what JupyterLab saves by default
    source = tmp_path / "unsaved.ipynb"
    nbformat.write(notebook, source)
    assert not has_widget_state(notebook)
    page = export_notebook(source).read_text(encoding="utf-8")  # default output: beside the notebook
    assert (tmp_path / "unsaved.html").is_file()
    tags = _parse(page)
    assert tags.external == []
    assert "application/vnd.jupyter.widget-view+json" not in tags.script_types
    assert "html-manager" not in page and "requirejs" not in page  # no widget manager without state
    assert "image/svg+xml" in page or "<svg" in page  # the widget's static SVG picture
    assert "IntSlider(value=7" in page  # the slider has only its text/plain fallback
    assert 'data-iw-payload="iw-payload-0"' in page  # while our view renders from its payload


@pytest.mark.parametrize(
    ("name", "content", "error", "message"),
    [
        ("notes.txt", "{}", ValueError, "is not a notebook; give a .ipynb file"),
        ("missing.ipynb", None, FileNotFoundError, "no notebook at"),
        ("broken.ipynb", "{not json", ValueError, "is not valid notebook JSON"),
    ],
)
def test_export_rejects_bad_input_clearly(tmp_path, name, content, error, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(error, match=message):
        export_notebook(path)


def test_export_refuses_to_overwrite_the_notebook(executed):
    with pytest.raises(ValueError, match="would overwrite the notebook"):
        export_notebook(executed, executed)


def test_cli_export_writes_the_page_and_reports_errors(executed, tmp_path):
    out = tmp_path / "cli.html"
    done = subprocess.run([sys.executable, "-m", "interp_widgets.cli", "export", str(executed), "-o", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out.resolve())
    assert out.stat().st_size > 1_000_000  # the widget manager is inlined (3.6 MB)
    bad = subprocess.run([sys.executable, "-m", "interp_widgets.cli", "export", str(tmp_path / "nope.ipynb")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert bad.returncode == 2
    assert "interp-widgets export: no notebook at" in bad.stderr
