"""Headless Debian chromium for the browser benchmarks (Playwright, offline, the flags of ``tests/browser``).

The one way the benchmarks start the browser (:func:`chromium`), build the page a view mounts in (:func:`page_html`,
:func:`open_page`) and mount a view from its exported state (:data:`MOUNT`). A benchmark that needs another model
(one that fires change events, or answers ``send``) keeps its own mount script and still opens its pages here.
"""

from __future__ import annotations

import _repo  # noqa: F401  (the repository root on sys.path: chromium() imports tests.browser.harness)

import contextlib
from typing import Iterator

# Mounts the widget from its exported state with a minimal model, like the export page does.
MOUNT = """async ({esm, payload}) => {
  const state = payload.state;
  for (const {path, data} of payload.buffers) {
    const bin = atob(data); const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    let node = state; for (const k of path.slice(0, -1)) node = node[k];
    node[path[path.length - 1]] = new DataView(bytes.buffer);
  }
  const model = {get: (k) => state[k], set: (k, v) => { state[k] = v; }, on() {}, off() {}, save_changes() {}, send() {}};
  const mod = await import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})));
  const el = document.getElementById("el");
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  await frame();
  const t0 = performance.now();
  mod.default.render({model, el});
  await frame();
  return performance.now() - t0;
}"""


def page_html(css: str, style: str = "") -> str:
    """The page a view mounts in: its ``css`` and one ``div#el`` (with the inline ``style``, if any)."""
    div = f"<div id='el' style='{style}'></div>" if style else "<div id='el'></div>"
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{css}</style></head><body>{div}</body></html>"


@contextlib.contextmanager
def chromium() -> Iterator:
    """Headless chromium, launched as the browser tests launch it, and closed on exit (also on errors)."""
    from playwright.sync_api import sync_playwright

    from tests.browser.harness import launch_chromium

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser, css: str, style: str = "", viewport: dict | None = None):
    """A new page of ``browser`` (of ``viewport``, else Playwright's default) holding :func:`page_html`."""
    page = browser.new_page(viewport=viewport) if viewport is not None else browser.new_page()
    page.set_content(page_html(css, style))
    return page
