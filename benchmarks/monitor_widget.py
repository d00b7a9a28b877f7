"""Training-monitor streaming performance. Prints ``bench:`` lines:

* kernel side: 10,000 steps × 6 per-layer series × 4 layers (+ loss, fitting) logged at full speed with the default
  throttle — µs per logged step (flushes and checkpoints included) and bytes sent per logged step;
* browser side (headless Debian chromium via Playwright, offline): the same 10,000 steps streamed as append
  messages of 100 rows, one per animation frame (far above the ≤ 10 flushes/s the kernel sends) — worst, median
  and 95th-percentile redraw time (wall clock, so the 1-minute load average is printed too), the redraw of the full 10k history, hover readout latency, a zoom redraw, and the rows shown at the
  end (must equal the steps logged); and the one-off warm-up the first view of a page runs after its first paint
  (a hidden copy drawing synthetic rows, so the streamed frames run compiled code), which the first message
  here follows by one animation frame.

Usage: PYTHONPATH=. python benchmarks/monitor_widget.py
"""

from __future__ import annotations

import _repo  # noqa: F401  (the repository root on sys.path: these import tests.browser.harness)

import base64
import json
import os
import time

import numpy as np
from _browser import chromium, open_page

from interp_widgets.widgets.monitor import MonitorWidget

STEPS = 10_000
LAYERS = [f"encoder.layer.{i}" for i in range(4)]
METRICS = ("energy_ratio", "control_ratio_q05", "control_ratio_q95", "avg_cosine", "isoscore", "effective_rank")

RUN = """async ({esm, state, messages}) => {
  const decode = (text) => { const bin = atob(text); const bytes = new Uint8Array(bin.length + 3);
    for (let i = 0; i < bin.length; i++) bytes[i + 3] = bin.charCodeAt(i);
    return new DataView(bytes.buffer, 3, bin.length); };  // odd byteOffset, as a worst case
  const handlers = new Map();
  const model = {get: (k) => state[k], set: (k, v) => { state[k] = v; }, save_changes() {}, send() {},
    on: (e, f) => { if (!handlers.has(e)) handlers.set(e, new Set()); handlers.get(e).add(f); },
    off: (e, f) => handlers.get(e)?.delete(f)};
  const mod = await import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})));
  const el = document.getElementById("el");
  mod.default.initialize({model});
  mod.default.render({model, el});
  const root = el.querySelector(".iw-monitor");
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const decoded = messages.map(([content, buffers]) => [content, buffers.map(decode)]);
  await frame();
  const draws = [];
  for (const [content, buffers] of decoded) {
    for (const f of handlers.get("msg:custom")) f(content, buffers);
    await frame();
    draws.push(Number(root.dataset.iwDrawMs));
  }
  const canvas = root.querySelector('[data-panel="energy_ratio"] canvas');
  const box = canvas.getBoundingClientRect();
  const t0 = performance.now();
  canvas.dispatchEvent(new MouseEvent("mousemove", {clientX: box.left + box.width / 2, clientY: box.top + 40, bubbles: true}));
  await new Promise((r) => requestAnimationFrame(r));
  const hover = performance.now() - t0;
  const hoverDraw = Number(root.dataset.iwDrawMs);
  const readout = root.querySelector('[data-panel="energy_ratio"] .iw-monitor-readout').textContent;
  canvas.dispatchEvent(new MouseEvent("mousedown", {clientX: box.left + 200, clientY: box.top + 40, button: 0}));
  canvas.dispatchEvent(new MouseEvent("mouseup", {clientX: box.left + 300, clientY: box.top + 40, button: 0}));
  await frame();
  const zoomDraw = Number(root.dataset.iwDrawMs);
  return {warmUp: Number(root.dataset.iwWarmUpMs), draws, hover, hoverDraw, readout, zoomDraw, rows: Number(root.dataset.iwRows)};
}"""


def _row(rng: np.random.Generator, step: int) -> dict[str, float]:
    values = {"loss": float(np.exp(-step / 3000) + 0.05 * rng.random()), "fitting": float(step < 500)}
    for layer in LAYERS:
        for metric in METRICS:
            values[f"{metric}|{layer}"] = float(1.0 + rng.random())
    return values


def kernel_side(rows: list[dict[str, float]]) -> tuple[float, float, int]:
    """Log every row at full speed with the real clock; returns (µs per step, bytes per step, messages)."""
    widget = MonitorWidget(layers=LAYERS)
    sent_bytes = 0
    messages = 0

    def send(content, buffers=None):
        nonlocal sent_bytes, messages
        messages += 1
        sent_bytes += len(json.dumps(content)) + sum(len(b) for b in buffers or [])

    widget.send = send
    started = time.perf_counter()
    for step, values in enumerate(rows):
        widget.log(step, values)
    widget.flush()
    elapsed = time.perf_counter() - started
    sent_bytes += len(widget.checkpoint)  # the final checkpoint goes out as a state update
    widget.close()
    return elapsed / len(rows) * 1e6, sent_bytes / len(rows), messages


def stream_messages(rows: list[dict[str, float]]) -> tuple[MonitorWidget, list]:
    """The same rows as append messages of 100 rows (a fake clock advancing 0.11 s every 100 steps)."""
    clock = [0.0]
    widget = MonitorWidget(layers=LAYERS, clock=lambda: clock[0], checkpoint_interval=1e9)
    messages = []
    widget.send = lambda content, buffers=None: messages.append(
        [content, [base64.b64encode(bytes(b)).decode("ascii") for b in buffers or []]]
    )
    for step, values in enumerate(rows):
        if step % 100 == 0:
            clock[0] += 0.11  # just over the 0.1 s throttle: one message per 100 rows
        widget.log(step, values)
    widget.flush()
    return widget, messages


def main() -> None:
    rng = np.random.default_rng(0)
    rows = [_row(rng, step) for step in range(STEPS)]
    per_step = min(kernel_side(rows)[0] for _ in range(3))
    _, bytes_per_step, flushes = kernel_side(rows)
    print(f"bench: monitor_log_cost_us_per_step = {per_step:.1f} (goal < 50)")
    print(f"bench: monitor_bytes_per_logged_step = {bytes_per_step:.0f} (goal < 500; {flushes} messages at full speed)")

    widget, messages = stream_messages(rows)
    state = {key: widget.get_state()[key] for key in ("stream_id", "layers", "panels", "x_label", "title", "error")}
    state.update(checkpoint=None, checkpoint_schema={})
    with chromium() as browser:
        page = open_page(browser, widget._css, "width:1100px", viewport={"width": 1200, "height": 900})
        result = page.evaluate(RUN, {"esm": widget._esm, "state": state, "messages": messages})
    draws = result["draws"]
    load = os.getloadavg()[0]  # redraw times are wall-clock: a busy machine inflates the worst one
    print(f"bench: monitor_machine_load_1min = {load:.1f} (goal < {os.cpu_count()}: numbers below are trustworthy)")
    assert result["rows"] == STEPS, result["rows"]
    assert "encoder.layer.0" in result["readout"], result["readout"]
    print(
        f"bench: monitor_warm_up_ms = {result['warmUp']:.1f} (once per page, after the first paint, before any "
        f"row arrives)"
    )
    print(f"bench: monitor_worst_redraw_ms = {max(draws):.2f} (goal < 16; {len(draws)} streamed frames)")
    print(f"bench: monitor_median_redraw_ms = {float(np.median(draws)):.2f} (goal < 8)")
    print(f"bench: monitor_p95_redraw_ms = {float(np.percentile(draws, 95)):.2f} (goal < 16)")
    print(f"bench: monitor_full_history_redraw_ms = {draws[-1]:.2f} (goal < 16; {STEPS} rows × 26 series)")
    print(f"bench: monitor_hover_readout_ms = {result['hover']:.1f} (goal < 50)")
    print(f"bench: monitor_zoom_redraw_ms = {result['zoomDraw']:.2f} (goal < 16)")
    print(f"bench: monitor_rows_shown = {result['rows']} (goal == {STEPS})")


if __name__ == "__main__":
    main()
