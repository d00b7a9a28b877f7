"""Token widget performance in headless Debian chromium (Playwright, offline). Prints ``bench:`` lines:
first render (to the next frame) at 1k and 10k tokens, hover-to-tooltip latency, the worst frame while scrolling
a 10k-token view, and the bytes one saved 1k-token widget adds to a notebook (state + ESM).

Usage: PYTHONPATH=. python benchmarks/token_widget.py
"""

from __future__ import annotations

import base64
import json

import numpy as np
from playwright.sync_api import sync_playwright

from interp_widgets.widgets import TokenHighlightWidget
from interp_widgets.widgets._export import export_state

PAGE = "<!DOCTYPE html><html><head><meta charset='utf-8'><style>{css}</style></head><body><div id='el' style='height:400px;overflow:auto'></div></body></html>"

RUN = """async ({esm, payload}) => {
  const state = payload.state;
  for (const {path, data} of payload.buffers) {
    const bin = atob(data); const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    let node = state; for (const k of path.slice(0, -1)) node = node[k];
    node[path[path.length - 1]] = new DataView(bytes.buffer);
  }
  const handlers = new Map();
  const model = {get: (k) => state[k], set: (k, v) => { state[k] = v; }, on: (e, f) => handlers.set(e, f), off() {},
                 save_changes() {}, send() {}};
  const mod = await import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})));
  const el = document.getElementById("el");
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const t0 = performance.now();
  mod.default.render({model, el});
  await frame();
  const firstRender = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 1500));  // let the remaining chunks land
  const token = el.querySelectorAll(".iw-token")[200];
  const t1 = performance.now();
  token.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  await frame();
  const hover = performance.now() - t1;
  const tooltipShown = !el.querySelector(".iw-tooltip").hidden;
  let worst = 0, last = performance.now();
  for (let k = 0; k < 60; k++) {
    el.scrollTop += 120;
    await new Promise((r) => requestAnimationFrame(r));
    const now = performance.now(); worst = Math.max(worst, now - last); last = now;
  }
  return {firstRender, hover, tooltipShown, worst, spans: el.querySelectorAll(".iw-token").length};
}"""


def widget(n: int) -> TokenHighlightWidget:
    rng = np.random.default_rng(0)
    words = [f"w{i % 97}" for i in range(n)]
    text, offsets = "", []
    for w in words:
        start = len(text) + (1 if text else 0)
        text += (" " if text else "") + w
        offsets.append((start, start + len(w)))
    return TokenHighlightWidget.from_arrays(text, words, offsets, rng.normal(size=(2, n)), target_labels=["neg", "pos"])


def main() -> None:
    from tests.browser.harness import launch_chromium

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        for n in (1000, 10000):
            w = widget(n)
            page = browser.new_page(viewport={"width": 1000, "height": 800})
            page.set_content(PAGE.format(css=w._css))
            result = page.evaluate(RUN, {"esm": w._esm, "payload": json.loads(json.dumps(export_state(w)))})
            assert result["tooltipShown"] and result["spans"] == n, result
            print(f"bench: token_widget_first_render_{n // 1000}k_ms = {result['firstRender']:.1f} (goal < 150)")
            if n == 10000:
                print(f"bench: token_widget_hover_latency_ms = {result['hover']:.1f} (goal < 50)")
                print(f"bench: token_widget_scroll_worst_frame_ms = {result['worst']:.1f} (goal < 50)")
            page.close()
        browser.close()
    w = widget(1000)
    saved = len(json.dumps(export_state(w))) + len(w._esm) + len(w._css)
    print(f"bench: token_widget_saved_bytes_1k = {saved} (goal <= 61440)")


if __name__ == "__main__":
    main()
