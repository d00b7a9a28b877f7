"""Offline HTML of an executed notebook with live widgets (``interp-widgets export``).

nbconvert's own HTML export loads require.js, MathJax and mermaid from cdnjs, the widget manager from unpkg and
anywidget's front end from jsDelivr. :func:`export_notebook` uses nbconvert's JupyterLab template with those
blocks replaced, MathJax and mermaid left out (formulas and diagrams stay as their source text). The page is one
file and makes no network request. It renders widgets one of two ways:

- **From the saved outputs** (the common case: the notebook holds only interp_widgets views and plain outputs, or
  has no saved widget state): every view is rebuilt from its ``application/vnd.interp-widgets.v1+json`` payload by
  the view's own ES module and a small loader (``static/payload_boot.js``), each module inlined once. A notebook with
  one small token view exports to a few hundred KB. Other widgets, which have no such payload, show their static
  fallback.
- **With the whole widget manager**, when the notebook holds other ipywidgets (tqdm bars, controls) *and* their
  state was saved (nbclient and ``jupyter nbconvert --execute`` save it): require.js, the widget manager
  (``@jupyter-widgets/html-manager`` ``embed-amd.js``) and anywidget's AMD module are inlined from the copies bundled
  in ``interp_widgets/static/vendor`` (about 3.7 MB) and every widget renders live from the saved state.

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
from typing import Any

from interp_widgets.notebook_clean import clean_widget_metadata
from interp_widgets.widgets.view_data import VIEW_DATA
from interp_widgets.widgets import MIME_TYPE
from interp_widgets.widgets.export import BUNDLE_MISSING, STATIC_DIR, script_json

VENDOR_DIR = STATIC_DIR / "vendor"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

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
{% block data_html scoped -%}
{%- if output.metadata.get("interp_widgets_view") -%}
<div class="jp-OutputArea-output {{ extra_class }}" data-mime-type="application/vnd.interp-widgets.v1+json">
{{ output.data['text/html'] }}
</div>
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock data_html %}
{% block body_footer %}
{%- if resources.interp_widgets.payload_boot -%}
{{ resources.interp_widgets.payload_blocks }}
<script type="module">{{ resources.interp_widgets.payload_boot }}</script>
{%- endif -%}
{{ super() }}
{% endblock body_footer %}
"""
_TEMPLATE_NAME = "interp_widgets_offline.html.j2"
_SCRIPT_END = re.compile(r"</(script)", re.IGNORECASE)


def _static_text(path: Path) -> str:
    if not path.is_file():
        raise FileNotFoundError(f"{BUNDLE_MISSING} ({path} does not exist)")
    # "</script" (or "</style") is the only text that ends an inline script early; "<\/script" means the same in
    # strings, template literals, regular expressions and comments.
    return _SCRIPT_END.sub(r"<\\/\1", path.read_text(encoding="utf-8"))


def _vendor_script(name: str) -> str:
    return _static_text(VENDOR_DIR / name)


def renderable_payload(output: Any) -> dict[str, Any] | None:
    """The interp_widgets payload of a notebook output if this version can rebuild the view from it (a known view at
    a data version it reads, carrying its data), else None.

    Example:
        >>> payload = result.widget().mime_payload()
        >>> renderable_payload({"output_type": "display_data", "data": {MIME_TYPE: payload}})["view"]
        'token_highlight'
        >>> renderable_payload({"output_type": "display_data", "data": {MIME_TYPE: {**payload, "version": 99}}})
    """
    payload = (
        output.get("data", {}).get(MIME_TYPE)
        if output.get("output_type") in ("display_data", "execute_result")
        else None
    )
    if not isinstance(payload, dict) or payload.get("format") != 1 or "data" not in payload:
        return None
    schema = VIEW_DATA.get(payload.get("view"))
    version = payload.get("version")
    if schema is None or not isinstance(version, int) or not 1 <= version <= schema.VERSION:
        return None
    return payload


def _outputs(notebook):
    for cell in notebook.get("cells", []):
        yield from cell.get("outputs", []) if cell.get("cell_type") == "code" else []


def needs_widget_manager(notebook) -> bool:
    """True if the page must inline the whole widget manager: the notebook shows other ipywidgets (outputs with a widget
    view but no interp_widgets payload) and saved their state. Otherwise interp_widgets views render from their
    payloads and other widgets show their fallbacks.

    Example:
        >>> import nbformat
        >>> slider = nbformat.v4.new_output("display_data", data={WIDGET_VIEW_MIME: {"model_id": "6f0c"},
        ...                                                         "text/plain": "IntSlider(value=7)"})
        >>> notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("s", outputs=[slider])])
        >>> needs_widget_manager(notebook)  # no saved state: the slider shows its text
        False
        >>> notebook.metadata["widgets"] = {WIDGET_STATE_MIME: {"version_major": 2, "version_minor": 0,
        ...                                 "state": {"6f0c": {"model_name": "IntSliderModel", "state": {}}}}}
        >>> needs_widget_manager(notebook)
        True
    """
    others = any(WIDGET_VIEW_MIME in output.get("data", {}) and renderable_payload(output) is None
                 for output in _outputs(notebook))  # fmt: skip
    return others and has_widget_state(notebook)


def _payload_html(payload: dict[str, Any], module_id: str, block_id: str, picture: str) -> str:
    return (f'<div class="iw-export-widget" data-iw-esm="{module_id}" data-iw-payload="{block_id}"></div>'
            f"<noscript>{picture}</noscript>"
            f'<script type="application/json" id="{block_id}">{script_json(payload)}</script>')  # fmt: skip


def _picture_html(data: dict[str, Any]) -> str:
    import base64
    import html

    if isinstance(data.get("image/svg+xml"), str):
        encoded = base64.b64encode(data["image/svg+xml"].encode("utf-8")).decode("ascii")
        return f'<img alt="" src="data:image/svg+xml;base64,{encoded}">'
    if isinstance(data.get("image/png"), str):
        return f'<img alt="" src="data:image/png;base64,{html.escape(data["image/png"].strip())}">'
    return ""


def _use_payloads(notebook) -> dict[str, str]:
    """Replace every renderable interp_widgets output of ``notebook`` (in place) by its loader markup; return the
    template resources: the views' modules and styles, once each, and the loader script."""
    modules: dict[str, str] = {}  # view -> module block id
    for index, output in enumerate(o for o in _outputs(notebook) if renderable_payload(o) is not None):
        payload = output["data"][MIME_TYPE]
        module_id = modules.setdefault(payload["view"], f"iw-esm-{len(modules)}")
        output["data"] = {
            "text/html": _payload_html(payload, module_id, f"iw-payload-{index}", _picture_html(output["data"]))
        }
        output["metadata"] = {"interp_widgets_view": payload["view"]}
    if not modules:
        return {"payload_blocks": "", "payload_boot": ""}
    blocks = []
    for view, module_id in modules.items():
        source = STATIC_DIR / f"{view}.js"
        if not source.is_file():
            raise FileNotFoundError(f"{BUNDLE_MISSING} ({source} does not exist)")
        blocks.append(
            f'<script type="application/json" id="{module_id}">{script_json(source.read_text(encoding="utf-8"))}</script>'
        )
        css = STATIC_DIR / f"{view}.css"
        if css.is_file():
            blocks.append(f"<style>{_static_text(css)}</style>")
    return {"payload_blocks": "\n".join(blocks), "payload_boot": _static_text(STATIC_DIR / "payload_boot.js")}


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
    live = needs_widget_manager(notebook)
    payloads = {"payload_blocks": "", "payload_boot": ""}
    if not live:  # interp_widgets views render from their payloads; no widget state, so no manager either
        payloads = _use_payloads(notebook)
        notebook.metadata.pop("widgets", None)
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
            **payloads,
        }
    }
    page, _ = exporter.from_notebook_node(notebook, resources=resources)
    return page


def export_notebook(notebook: str | Path, out: str | Path | None = None) -> Path:
    """Write the offline HTML page of the executed notebook at ``notebook`` to ``out`` and return its path.

    ``out`` defaults to the notebook's path with ``.html``. interp_widgets views render from their saved outputs;
    when the notebook also holds other ipywidgets, every widget renders live from the widget state saved in the
    notebook instead (execute it with nbclient or ``jupyter nbconvert --to notebook --execute`` to save it), and
    without saved state those show their static fallbacks. See the module docstring.

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
