"""Offline HTML of an executed notebook with live widgets (``interp-widgets export``).

nbconvert's own HTML export loads require.js, MathJax and mermaid from cdnjs, the widget manager from unpkg and
anywidget's front end from jsDelivr. :func:`export_notebook` uses nbconvert's JupyterLab template with those
blocks replaced: require.js, the widget manager (``@jupyter-widgets/html-manager`` ``embed-amd.js``) and
anywidget's AMD module are inlined from the copies bundled in ``interp_widgets/static/vendor``, and MathJax and
mermaid are left out (formulas and diagrams stay as their source text). The page is one file and makes no network
request: every widget whose state was saved in the notebook (nbclient and ``jupyter nbconvert --execute`` save
it) renders live from that state; widgets without saved state show their static fallback.

Example:
    >>> import nbformat
    >>> tmp = getfixture("tmp_path")
    >>> nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Results")]), tmp / "run.ipynb")
    >>> export_notebook(tmp / "run.ipynb", tmp / "run.html") == (tmp / "run.html").resolve()
    True
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from interp_widgets.notebook_clean import clean_widget_metadata
from interp_widgets.widgets.export import BUNDLE_MISSING, STATIC_DIR

VENDOR_DIR = STATIC_DIR / "vendor"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"

# Extends nbconvert's JupyterLab page; the scripts it would fetch from CDNs come inline from the vendor copies.
# anywidget's module is an anonymous AMD define; the wrapper names it "anywidget" so require.js finds it inline.
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
{%- if resources.interp_widgets.has_widget_state -%}
<script>{{ resources.interp_widgets.require_js }}</script>
{%- endif -%}
{%- endblock html_head_js_requirejs -%}
{% block jupyter_widgets %}
{%- if resources.interp_widgets.has_widget_state -%}
<script>{{ resources.interp_widgets.embed_amd_js }}</script>
<script>(function (define) {
{{ resources.interp_widgets.anywidget_js }}
})(function (deps, factory) { return window.define("anywidget", deps, factory); });</script>
{%- endif -%}
{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
_TEMPLATE_NAME = "interp_widgets_offline.html.j2"
_SCRIPT_END = re.compile(r"</(script)", re.IGNORECASE)


def _vendor_script(name: str) -> str:
    path = VENDOR_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"{BUNDLE_MISSING} ({path} does not exist)")
    # "</script" is the only text that ends an inline script early; "<\/script" means the same in strings,
    # template literals, regular expressions and comments.
    return _SCRIPT_END.sub(r"<\\/\1", path.read_text(encoding="utf-8"))


def has_widget_state(notebook) -> bool:
    """True if ``notebook`` (an ``nbformat`` node) carries saved widget state that can render live.

    Example:
        >>> import nbformat
        >>> notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
        >>> has_widget_state(notebook)
        False
        >>> notebook.metadata["widgets"] = {WIDGET_STATE_MIME: {"version_major": 2, "version_minor": 0,
        ...                                 "state": {"6f0c": {"model_name": "LayoutModel", "state": {}}}}}
        >>> has_widget_state(notebook)
        True
    """
    saved = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE_MIME, {})
    return bool(saved.get("state"))


def notebook_html(notebook) -> str:
    """The offline page of ``notebook`` (an ``nbformat`` v4 node) as a string; see :func:`export_notebook`.

    Example:
        >>> import nbformat
        >>> page = notebook_html(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Results")]))
        >>> page.lstrip().startswith("<!DOCTYPE html>"), '<h1 id="Results">' in page
        (True, True)
        >>> any(cdn in page for cdn in ("cdnjs.cloudflare.com", "unpkg.com", "cdn.jsdelivr.net"))
        False
    """
    import copy

    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    notebook = copy.deepcopy(notebook)
    clean_widget_metadata(notebook)
    live = has_widget_state(notebook)
    exporter = HTMLExporter(
        template_name="lab",
        template_file=_TEMPLATE_NAME,
        extra_loaders=[DictLoader({_TEMPLATE_NAME: _TEMPLATE})],
        theme="light",
    )
    resources = {
        "interp_widgets": {
            "has_widget_state": live,
            "require_js": _vendor_script("require.js") if live else "",
            "embed_amd_js": _vendor_script("embed-amd.js") if live else "",
            "anywidget_js": _vendor_script("anywidget.js") if live else "",
        }
    }
    page, _ = exporter.from_notebook_node(notebook, resources=resources)
    return page


def export_notebook(notebook: str | Path, out: str | Path | None = None) -> Path:
    """Write the offline HTML page of the executed notebook at ``notebook`` to ``out`` and return its path.

    ``out`` defaults to the notebook's path with ``.html``. Widgets render live from the widget state saved in the
    notebook (execute it with nbclient or ``jupyter nbconvert --to notebook --execute`` to save it); without saved
    state they show their static fallbacks.

    Example:
        >>> import nbformat
        >>> tmp = getfixture("tmp_path")
        >>> nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), tmp / "run.ipynb")
        >>> path = export_notebook(tmp / "run.ipynb")  # next to the notebook, with .html
        >>> path.name, path.stat().st_size > 1000
        ('run.html', True)
        >>> export_notebook(tmp / "run.ipynb", tmp / "run.ipynb")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: the output ... would overwrite the notebook; choose an .html path
    """
    import nbformat

    source = Path(notebook)
    if source.suffix != ".ipynb":
        raise ValueError(f"{source} is not a notebook; give a .ipynb file")
    if not source.is_file():
        raise FileNotFoundError(f"no notebook at {source}")
    try:
        node = nbformat.read(source, as_version=4)
    except (json.JSONDecodeError, nbformat.reader.NotJSONError) as err:
        raise ValueError(f"{source} is not valid notebook JSON ({err}); save it from Jupyter and try again") from err
    target = Path(out) if out is not None else source.with_suffix(".html")
    if target.resolve() == source.resolve():
        raise ValueError(f"the output {target} would overwrite the notebook; choose an .html path")
    page = notebook_html(node)
    target.write_text(page, encoding="utf-8")
    return target.resolve()
