"""Every widget under the conditions of a VS Code notebook webview, in Debian's chromium.

VS Code itself cannot run here, so this reproduces the three things about its webview that break widgets elsewhere:

* a global AMD loader (``define`` with ``define.amd``), which bundled UMD code registers with instead of running;
  our bundles are built with ``define.amd = false``, so ``define`` must never be called;
* the theme: ``body.vscode-dark`` and the ``--vscode-*`` colour variables on ``<html>``; each view must detect the dark
  theme and take its background (``--iw-bg``, painted by the host cell) and text colours from those variables;
* no network.

Each widget is rendered from its offline export page (the ESM and state inlined, no kernel), with those conditions
injected before any script runs. It must render without a page error or an error box.

``test_reruns_in_vscode_webview_conditions`` goes further for re-runs (anywidget #904, #531): anywidget's real front
end in a real widget manager, outputs created and disposed as the webview does when a cell is re-run. What it cannot
reproduce: VS Code's own renderer code (vscode-jupyter's ipywidgets kernel and its module loader, the extension-host
message channel, its timing), Electron's Chromium, the webview's CSP, the webview being torn down and rebuilt when
the notebook editor is hidden, and the editor's decision to keep or replace an output element (microsoft/vscode
#190634).
"""

from __future__ import annotations

import numpy as np
import pytest

from interp_widgets.widgets import (
    AttentionWidget,
    GenerationWidget,
    LensWidget,
    MonitorWidget,
    PatchingView,
    SteeringView,
    TokenHighlightWidget,
    compare,
)
from interp_widgets.widgets.concept_browser import ConceptBrowser
from interp_widgets.widgets.patching import demo_patching_data
from tests.widgets.test_concept_widget import _interpretation
from tests.widgets.test_views_widget import EVIL, _collection, _gen_result, _result
from tests.widgets.test_steering_view import _steering_result
from tests.widgets.test_widget_schema import _attention_patterns, _circuit_graph, _lens_result

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
        widget.log(
            step, {"energy_ratio|encoder.0": 1.0 + step / 10, f"energy_ratio|{EVIL}": 2.0}, loss=1.0 / (step + 1)
        )
    return widget


WIDGETS = {
    "token_highlight": lambda: TokenHighlightWidget(_result([[0.1, -0.2, 0.3, 0.4, -0.5], [0.2] * 5])),
    "generation": lambda: GenerationWidget(_gen_result()),
    "comparison": lambda: compare([_result([[0.1] * 5, [0.2, 0.1, 0.3, 0.4, 0.5]], method="a"),
                                   _result([[0.1] * 5, [0.5, 0.4, 0.3, 0.2, 0.1]], method="b")]),
    "examples": lambda: _collection().widget(),
    "concept_browser": lambda: ConceptBrowser(_interpretation()),
    "monitor": _monitor,
    "attention": lambda: AttentionWidget(_attention_patterns()),
    "lens": lambda: LensWidget(_lens_result()),
    "patching": lambda: PatchingView(demo_patching_data(heads=True)),
    "steering": lambda: SteeringView(_steering_result()),
    "circuit": lambda: _circuit_graph().widget(),
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


# ------------------------------------------------------------------------------------------------------- re-runs
# VS Code renders widget outputs with a real @jupyter-widgets manager and anywidget's own AMD front end (AnyModel,
# AnyView), loaded through an AMD loader. The page below has the same parts, all offline: require.js, the
# html-manager and anywidget's AMD module (the vendored copies `interp-widgets export` inlines), the VS Code dark
# theme, and a stand-in for the VS Code output renderer that creates, shows and disposes views the way the webview
# does when a cell runs and is re-run. The kernel is replaced by widget state sent from this test (a new model per
# "execution", exactly as a re-run creates one).

VSCODE_THEME = VSCODE_WEBVIEW[VSCODE_WEBVIEW.index("  const dress") :]
VSCODE_THEME = "(() => {\n" + VSCODE_THEME  # the theme part alone: a real AMD loader (require.js) is on this page

RENDERER = """
window.iwViews = new Map();
window.iwReady = new Promise((resolve) => {
  require(["@jupyter-widgets/html-manager", "@jupyter-widgets/html-manager/dist/libembed-amd"], (hm, embed) => {
    window.iwManager = new hm.HTMLManager({ loader: embed.requireLoader });
    resolve();
  });
});
// renderOutputItem: a new output element (or the one given), a view of the model, shown in it.
window.iwRender = async (outputId, modelId, { hidden = false } = {}) => {
  await window.iwReady;
  let el = document.getElementById(outputId);
  if (!el) {
    el = document.createElement("div");
    el.id = outputId;
    el.className = "output";
    document.getElementById("outputs").append(el);
  }
  if (hidden) el.style.display = "none";
  const model = await window.iwManager.get_model(modelId);
  const view = await window.iwManager.create_view(model);
  await window.iwManager.display_view(view, el);
  window.iwViews.set(outputId, view);
};
// disposeOutputItem: the view is disposed; VS Code removes the output element unless it re-uses it.
window.iwDispose = (outputId, { keepElement = false } = {}) => {
  const view = window.iwViews.get(outputId);
  window.iwViews.delete(outputId);
  view.luminoWidget.dispose();
  if (!keepElement) document.getElementById(outputId).remove();
};
window.iwSet = async (modelId, changes) => {
  const model = await window.iwManager.get_model(modelId);
  model.set(changes);
};
"""


def _rerun_page(path) -> None:
    from interp_widgets.notebook_export import _vendor_script

    anywidget_amd = (
        "(function (define) {\n%s\n})(function (deps, factory) { return window.define('anywidget', deps, factory); });"
    )
    path.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>VS Code re-run simulation</title>"
        f"<script>{_vendor_script('require.js')}</script><script>{_vendor_script('embed-amd.js')}</script>"
        f"<script>{anywidget_amd % _vendor_script('anywidget.js')}</script></head>"
        f"<body><div id='outputs'></div><script>{RENDERER}</script></body></html>",
        encoding="utf-8",
    )


def _execute(page, widget) -> str:
    """What the kernel does for one execution of ``widget``: its models reach the front end; returns its id."""
    from ipywidgets.embed import dependency_state, embed_data

    # Full state, as the kernel's comm_open carries it (embed_data would drop defaults such as `_view_name`).
    state = embed_data(views=[widget], state=dependency_state([widget], drop_defaults=False), drop_defaults=False)
    page.evaluate("state => window.iwReady.then(() => window.iwManager.set_state(state))", state["manager_state"])
    return widget.model_id


def _shown(page, output_id: str) -> dict:
    return page.evaluate(
        """id => {
          const el = document.getElementById(id);
          const roots = el ? el.querySelectorAll(".iw-root") : [];
          const root = roots[0];
          const box = root ? root.getBoundingClientRect() : null;
          const canvases = root ? Array.from(root.querySelectorAll("canvas")).filter((c) => c.offsetParent) : [];
          return { roots: roots.length, errors: el ? el.querySelectorAll(".iw-error").length : -1,
                   error: el ? Array.from(el.querySelectorAll(".iw-error")).map((e) => e.textContent).join(" | ") : "",
                   width: box ? box.width : 0, height: box ? box.height : 0, theme: root ? root.dataset.iwTheme : null,
                   text: root ? root.textContent : "", blankCanvases: canvases.filter((c) => !c.width || !c.height).length };
        }""",
        output_id,
    )


def _assert_rendered(page, output_id: str) -> dict:
    page.wait_for_function("id => document.querySelector(`#${id} .iw-root`)", arg=output_id, timeout=15_000)
    page.wait_for_timeout(100)  # chunked rendering, the first animation frames, a ResizeObserver round
    shown = _shown(page, output_id)
    assert shown["roots"] == 1, shown  # one view, never two stacked, never none
    assert shown["errors"] == 0, shown
    assert shown["width"] > 100 and shown["height"] > 20, f"blank output {output_id}: {shown}"
    assert shown["blankCanvases"] == 0, shown
    assert shown["theme"] == "dark", shown
    return shown


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_reruns_in_vscode_webview_conditions(name, tmp_path, recorded_page):
    page = recorded_page.page
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.add_init_script(VSCODE_THEME)
    _rerun_page(tmp_path / "vscode.html")
    page.goto((tmp_path / "vscode.html").as_uri())

    # First execution, then a re-run: VS Code disposes the old output's view and element, the kernel makes a new
    # model, the new output renders (#904: white after the re-run; #531: the second execution shows nothing).
    first = _execute(page, WIDGETS[name]())
    page.evaluate("id => window.iwRender('out-1', id)", first)
    _assert_rendered(page, "out-1")
    for run in (2, 3):
        model = _execute(page, WIDGETS[name]())
        page.evaluate("([old, out, id]) => { window.iwDispose(old); return window.iwRender(out, id); }",
                      [f"out-{run - 1}", f"out-{run}", model])  # fmt: skip
        _assert_rendered(page, f"out-{run}")
        assert page.locator(".iw-root").count() == 1  # the disposed views left nothing behind

    # A re-run whose new output re-uses the old output element (the webview keeps the element of an output it
    # replaces in place): the old view is disposed, the new one renders into the same element, once.
    model = _execute(page, WIDGETS[name]())
    page.evaluate(
        "id => { window.iwDispose('out-3', { keepElement: true }); return window.iwRender('out-3', id); }", model
    )
    _assert_rendered(page, "out-3")

    # The output is rendered while hidden (an output scrolled away or collapsed), then shown: it must draw at its real
    # size once visible (canvases sized from a zero-width element stay blank: the white-widget symptom).
    page.evaluate("id => window.iwRender('hidden', id, { hidden: true })", model)
    page.evaluate("document.getElementById('hidden').style.display = ''")
    _assert_rendered(page, "hidden")

    # Two outputs of one model: disposing one leaves the other alive and listening; the `error` trait set by the
    # kernel replaces it with a message (never a blank box), and clearing it brings the view back.
    page.evaluate("id => window.iwDispose('out-3')", model)
    shown = _assert_rendered(page, "hidden")
    page.evaluate("id => window.iwSet(id, { error: 'the <b>run</b> failed' })", model)
    page.wait_for_function("document.querySelector('#hidden .iw-error')")
    assert "the <b>run</b> failed" in _shown(page, "hidden")["error"]
    page.evaluate("id => window.iwSet(id, { error: '' })", model)
    assert _assert_rendered(page, "hidden")["text"] == shown["text"]

    # HMR / a re-sent module (anywidget re-imports `_esm` and renders every view again: render runs twice for one
    # view, as in #531): still one view, no error.
    page.evaluate("([id, esm]) => window.iwSet(id, { _esm: esm + '\\n// re-sent' })", [model, WIDGETS[name]()._esm])
    page.wait_for_timeout(300)
    _assert_rendered(page, "hidden")

    assert errors == [], errors
    recorded_page.requests.assert_loopback_only()
