"""Self-contained offline HTML pages for widgets (``InterpWidget.export_html`` and reports).

A page inlines, once per widget class, the widget's ES module (as a JSON string, imported through a Blob URL
by the boot script) and its CSS; per widget it inlines the synced state with binary buffers as base64, and
the static fallback inside ``<noscript>``. The boot script (``static/export_boot.js``) renders each widget
against a kernel-less model shim. No external ``src``/``href`` and no URL appear anywhere.

All embedded JSON escapes ``<``, ``>`` and ``&`` (``\\u003c``…) so token text such as ``</script>`` cannot
end a script element; inline script and style text has ``</`` escaped as ``<\\/``.

This is the public export module: :func:`html_page`, :class:`Note`, :func:`export_state`, :func:`script_json`, and
the bundle location :data:`STATIC_DIR` with the :data:`BUNDLE_MISSING` message, for the notebook exporter and reports.

Example:
    >>> from interp_widgets.widgets import TokenHighlightWidget
    >>> other = TokenHighlightWidget.from_arrays("Great!", ["Great", "!"], [(0, 5), (5, 6)], [0.8, 0.1])
    >>> page = html_page([result.widget(), "Second input", other], title="Report")
    >>> page.count('<section class="iw-export-item">'), page.count('<script type="application/json" id="iw-esm-')
    (2, 1)
"""

from __future__ import annotations

import base64
import html
import json
from typing import Any, Iterable

from ipywidgets.widgets.widget import _remove_buffers

from interp_widgets.widgets._protocols import ExportableView
from interp_widgets.widgets._static import BUNDLE_MISSING, STATIC_DIR

__all__ = ["BUNDLE_MISSING", "STATIC_DIR", "Note", "export_state", "html_page", "script_json"]

_NOT_STATE = {"_esm", "_css"}  # embedded once per class instead of per widget

PAGE_CSS = """
:root { color-scheme: light dark; }
body { margin: 0; background: #ffffff; color: #1f2328; font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }
@media (prefers-color-scheme: dark) { body { background: #1e1e1e; color: #e6edf3; } }
.iw-page { max-width: 60rem; margin: 0 auto; padding: 1.5rem; }
.iw-page h1 { font-size: 1.4rem; }
.iw-page h2 { font-size: 1.1rem; margin-top: 2rem; }
.iw-export-item { margin: 1rem 0 2rem; }
.iw-note { max-width: 50rem; line-height: 1.45; }
"""


def script_json(value: Any) -> str:
    """JSON text that is safe inside ``<script type="application/json">`` (no ``<``, ``>``, ``&`` left).

    Example:
        >>> script_json("</script>")
        '"\\\\u003c/script\\\\u003e"'
    """
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for char, escape in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def _inline_code(text: str) -> str:
    return text.replace("</", "<\\/")


def export_state(widget: ExportableView) -> dict[str, Any]:
    """The widget's synced state for an export page: ``{"state": …, "buffers": [{"path", "data": base64}]}``.

    The data traits come from :meth:`InterpWidget.view_data` (the versioned schema), the view state (selection,
    sort, page …) from the widget.

    Example:
        >>> state = export_state(result.widget())
        >>> state["state"]["target_labels"], state["buffers"][0]["path"]
        (['positive'], ['scores', 'data'])
    """
    state = {key: value for key, value in widget.get_state().items() if key not in _NOT_STATE}
    state.update(widget.view_data().to_state())
    state, paths, buffers = _remove_buffers(state)
    encoded = [
        {"path": path, "data": base64.b64encode(bytes(buffer)).decode("ascii")} for path, buffer in zip(paths, buffers)
    ]
    return {"state": state, "buffers": encoded}


def _boot_script() -> str:
    path = STATIC_DIR / "export_boot.js"
    if not path.is_file():
        raise FileNotFoundError(f"{BUNDLE_MISSING} ({path} does not exist)")
    return path.read_text(encoding="utf-8")


class Note(str):
    """A paragraph of text for :func:`html_page` (a plain string there is a heading); it is HTML-escaped.

    Example:
        >>> page = html_page(["Inputs", Note("Scores are <logits>."), result.widget()], title="Report")
        >>> '<p class="iw-note">Scores are &lt;logits&gt;.</p>' in page
        True
    """


def html_page(items: Iterable[ExportableView | str], title: str) -> str:
    """One offline HTML page showing ``items`` in order: widgets, strings rendered as (escaped) headings, and
    :class:`Note` strings rendered as (escaped) paragraphs.

    Example:
        >>> page = html_page([result.widget()], title="Sentiment")
        >>> page.startswith("<!DOCTYPE html>"), "<noscript>" in page, "http" in page
        (True, True, False)
    """
    modules: dict[str, str] = {}  # ES module source -> id of its data block
    styles: list[str] = []
    body: list[str] = []
    for index, item in enumerate(items):
        if isinstance(item, Note):
            body.append(f'<p class="iw-note">{html.escape(item)}</p>')
            continue
        if isinstance(item, str):
            body.append(f"<h2>{html.escape(item)}</h2>")
            continue
        if not isinstance(item, ExportableView):
            raise TypeError(f"html_page takes interp_widgets widgets and heading strings, not {type(item).__name__}")
        if item._esm not in modules:
            modules[item._esm] = f"iw-esm-{len(modules)}"
            if item._css:
                styles.append(item._css)
        state_id = f"iw-state-{index}"
        body.append(
            '<section class="iw-export-item">'
            f'<div class="iw-export-widget" data-iw-esm="{modules[item._esm]}" data-iw-state="{state_id}"></div>'
            f"<noscript>{item._fallback_html()}</noscript>"
            f'<script type="application/json" id="{state_id}">{script_json(export_state(item))}</script>'
            "</section>"
        )
    module_blocks = "".join(
        f'<script type="application/json" id="{block_id}">{script_json(source)}</script>'
        for source, block_id in modules.items()
    )
    css = _inline_code(PAGE_CSS + "\n".join(styles))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{css}</style>\n</head>\n<body>\n"
        f'<main class="iw-page">\n<h1>{html.escape(title)}</h1>\n' + "\n".join(body) + "\n</main>\n"
        f"{module_blocks}\n"
        f'<script type="module">{_inline_code(_boot_script())}</script>\n'
        "</body>\n</html>\n"
    )
