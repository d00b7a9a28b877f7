"""Every widget under the conditions of a VS Code notebook webview, in Debian's chromium.

VS Code itself cannot run here, so this reproduces the three things about its webview that break widgets elsewhere:

* a global AMD loader (``define`` with ``define.amd``), which bundled UMD code registers with instead of running;
  our bundles are built with ``define.amd = false``, so ``define`` must never be called;
* the theme: ``body.vscode-dark`` and the ``--vscode-*`` colour variables on ``<html>``; each view must detect the dark
  theme and take its background (``--iw-bg``, painted by the host cell) and text colours from those variables;
* no network.

Each widget is rendered from its offline export page (the ESM and state inlined, no kernel), with those conditions
injected before any script runs. It must render without a page error or an error box.
"""

from __future__ import annotations

import numpy as np
import pytest

from interp_widgets.widgets import GenerationWidget, MonitorWidget, TokenHighlightWidget, compare
from interp_widgets.widgets.concept_browser import ConceptBrowser
from tests.test_concept_widget import _interpretation
from tests.test_views_widget import EVIL, _collection, _gen_result, _result

pytestmark = pytest.mark.browser

EDITOR_BACKGROUND = (31, 31, 31)
EDITOR_FOREGROUND = (204, 204, 204)

VSCODE_WEBVIEW = """
(() => {
  window.__amdCalls = [];
  window.define = function () { window.__amdCalls.push(Array.from(arguments).map(String).join(" ").slice(0, 80)); };
  window.define.amd = { jQuery: true };
  window.require = function () {};
  const dress = () => {
    const html = document.documentElement;
    html.style.setProperty("--vscode-editor-background", "rgb(%d, %d, %d)");
    html.style.setProperty("--vscode-editor-foreground", "rgb(%d, %d, %d)");
    html.style.setProperty("--vscode-font-family", "sans-serif");
    document.body.classList.add("vscode-dark");
    document.body.dataset.vscodeThemeKind = "vscode-dark";
  };
  if (document.body) dress();
  else new MutationObserver((_, observer) => { if (document.body) { dress(); observer.disconnect(); } })
    .observe(document, { childList: true, subtree: true });
})();
""" % (*EDITOR_BACKGROUND, *EDITOR_FOREGROUND)


def _monitor() -> MonitorWidget:
    widget = MonitorWidget(layers=["encoder.0", EVIL], flush_interval=1e9)
    for step in range(30):
        widget.log(step, {"energy_ratio|encoder.0": 1.0 + step / 10, f"energy_ratio|{EVIL}": 2.0}, loss=1.0 / (step + 1))
    return widget


WIDGETS = {
    "token_highlight": lambda: TokenHighlightWidget(_result([[0.1, -0.2, 0.3, 0.4, -0.5], [0.2] * 5])),
    "generation": lambda: GenerationWidget(_gen_result()),
    "comparison": lambda: compare([_result([[0.1] * 5, [0.2, 0.1, 0.3, 0.4, 0.5]], method="a"),
                                   _result([[0.1] * 5, [0.5, 0.4, 0.3, 0.2, 0.1]], method="b")]),
    "examples": lambda: _collection().widget(),
    "concept_browser": lambda: ConceptBrowser(_interpretation()),
    "monitor": _monitor,
}  # fmt: skip


def _rgb(css: str) -> tuple[int, ...]:
    return tuple(int(float(part)) for part in css[css.index("(") + 1 : css.index(")")].split(",")[:3])


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_widget_renders_in_vscode_webview_conditions(name, tmp_path, recorded_page):
    page = recorded_page.page
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.add_init_script(VSCODE_WEBVIEW)
    path = WIDGETS[name]().export_html(tmp_path / f"{name}.html")
    page.goto(path.as_uri())
    root = page.locator(".iw-export-widget > .iw-root").first
    root.wait_for(state="visible", timeout=15_000)
    page.wait_for_timeout(300)  # let chunked rendering and the first animation frames finish

    assert errors == [], errors
    assert page.locator(".iw-error").count() == 0, page.locator(".iw-error").all_inner_texts()
    assert page.evaluate("window.__amdCalls") == [], "a bundled module registered with the page's AMD loader"
    assert page.evaluate("document.body.classList.contains('vscode-dark')")
    assert root.get_attribute("data-iw-theme") == "dark"
    style = root.evaluate("e => { const s = getComputedStyle(e); return [s.getPropertyValue('--iw-bg'), s.color]; }")
    assert _rgb(style[0]) == EDITOR_BACKGROUND, style
    assert _rgb(style[1]) == EDITOR_FOREGROUND, style
    assert page.locator("img").count() == 0 and EVIL not in page.content().split("<main", 1)[1].split("<script", 1)[0]
    recorded_page.requests.assert_loopback_only()


def test_every_widget_class_is_covered():
    from interp_widgets.widgets import _base

    classes = {cls.__name__ for cls in _base.InterpWidget.__subclasses__()}
    classes |= {sub.__name__ for cls in _base.InterpWidget.__subclasses__() for sub in cls.__subclasses__()}
    covered = {type(make()).__name__ for make in WIDGETS.values()}
    assert classes - {"TokenScoresWidget"} <= covered, sorted(classes - covered)
    assert np.all([isinstance(make(), _base.InterpWidget) for make in WIDGETS.values()])
