"""Attention patterns on SmolLM2-135M-Instruct over a 1,000-token text (30 layers × 9 heads of 1,000 × 1,000):
compute, kernel replies, the saved notebook size with one pinned head, and the head view in headless chromium.

Prints ``bench:`` lines:

- the time to record every layer's and head's probabilities (one eager forward pass, float16 on the CPU) and their
  size;
- the kernel's reply to one head request (the float16 bytes of a 1,000 × 1,000 head, 2 MB), and to ``mean`` and
  ``rollout`` (the first rollout, of layer 28, composes 29 layers; the rollout is cached incrementally, so the next
  layer's, ``rollout_next_layer``, costs one more matmul);
- the bytes the widget adds to a saved notebook with one pinned head (its widget state as ipywidgets saves it,
  ESM included; goal ≤ 2 MB), and the pinned head's share;
- first paint of one head in chromium (``render()`` until the kernel's float16 reply is painted and the next frame
  has run) and switching heads (the ``heads`` trait changes until the new head is painted), medians of 5. The page
  answers the view's requests from the float16 bytes this script got from the widget, so the transport of a real
  kernel (a local websocket) is not included; the Python-side reply time is the line above.

Usage: PYTHONPATH=. nice -n 10 python -u benchmarks/attention_views.py
"""

from __future__ import annotations

import _repo  # noqa: F401  (the repository root on sys.path: these import tests.browser.harness)

import base64
import json
import os
import statistics
import time

from _browser import chromium, open_page
from ipywidgets.embed import dependency_state, embed_data

TRIALS = 5
N_TOKENS = 1000
LAYER = 12

# Mounts the view on a model whose send() is answered (next task) from the float16 heads given by the script.
MOUNT = """async ({esm, state, heads}) => {
  const decode = (b64) => { const s = atob(b64); const u = new Uint8Array(s.length); for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i); return u; };
  for (const [k, v] of Object.entries(state)) if (v && typeof v === "object" && "b64" in v) state[k] = {dtype: v.dtype, shape: v.shape, data: new DataView(decode(v.b64).buffer)};
  const bytes = Object.fromEntries(Object.entries(heads).map(([k, v]) => [k, decode(v)]));
  const handlers = new Map();
  const emit = (event, ...args) => { for (const f of [...(handlers.get(event) ?? [])]) f(...args); };
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; emit(`change:${k}`); },
    on: (e, f) => { if (!handlers.has(e)) handlers.set(e, new Set()); handlers.get(e).add(f); },
    off: (e, f) => handlers.get(e)?.delete(f),
    save_changes() {},
    send(msg) {
      if (msg.type !== "request") return;
      const data = bytes[`${msg.layer}:${msg.head}`];
      setTimeout(() => emit("msg:custom", {type: "pattern", id: msg.id, layer: msg.layer, head: msg.head, dtype: "float16", shape: [state.tokens.length, state.key_tokens.length]}, [new DataView(data.buffer)]), 0);
    },
  };
  window.__model = model;
  const mod = await import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})));
  const el = document.getElementById("el");
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  await frame();
  const painted = (head) => el.querySelector(`canvas.iw-attn-heatmap[data-head="${head}"][data-source="kernel"]`);
  const t0 = performance.now();
  mod.default.render({model, el});
  while (!painted(state.heads[0])) await new Promise((r) => setTimeout(r, 0));
  await frame();
  const first = performance.now() - t0;
  const switches = [];
  for (const head of [1, 2, 3, 4, 5, 6, 7, 8]) {
    const t1 = performance.now();
    model.set("heads", [head]);
    while (!painted(head)) await new Promise((r) => setTimeout(r, 0));
    await frame();
    switches.push(performance.now() - t1);
  }
  switches.sort((a, b) => a - b);
  return {first, switchMedian: switches[4], switchWorst: switches[7]};
}"""


def _text(tokenizer) -> str:
    from interp_widgets.demo import corpus

    text, pieces = "", corpus()
    while len(tokenizer(text).input_ids) < N_TOKENS:
        text += pieces[len(text) % len(pieces)] + " "
    ids = tokenizer(text).input_ids[:N_TOKENS]
    return tokenizer.decode(ids)


def saved_bytes(widget) -> int:
    """Bytes of the widget's saved state (what a notebook stores for it), ESM and CSS included."""
    state = embed_data(views=[widget], state=dependency_state([widget], drop_defaults=False), drop_defaults=False)
    return len(json.dumps(state["manager_state"], separators=(",", ":")).encode())


def main() -> None:
    from interp_widgets.attribution import attention_patterns
    from interp_widgets.demo import load_lm
    from interp_widgets.widgets.export import export_state

    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    model, tokenizer = load_lm(progress=False)
    text = _text(tokenizer)
    t0 = time.perf_counter()
    patterns = attention_patterns(model, tokenizer, text, progress=False)
    compute = time.perf_counter() - t0
    n = len(patterns.tokens)
    size = sum(w.nbytes for w in patterns.weights)
    print(
        f"bench: attention_patterns_compute_{n}_tokens_s = {compute:.1f} ({patterns.n_layers} layers x "
        f"{patterns.n_heads} heads, {size / 2**20:.0f} MiB float16)"
    )

    t0 = time.perf_counter()
    widget = patterns.widget(layer=LAYER, heads=[0])
    print(f"bench: attention_widget_build_s = {time.perf_counter() - t0:.2f} (thumbnails of every head)")
    last = patterns.n_layers - 1
    for name, layer, head in ((0, LAYER, 0), ("mean", LAYER, "mean"), ("rollout", last - 1, "rollout"),
                              ("rollout_next_layer", last, "rollout")):  # fmt: skip
        t0 = time.perf_counter()
        content, buffers = widget.reply({"type": "request", "id": 1, "layer": layer, "head": head})
        print(
            f"bench: attention_kernel_reply_{name}_ms = {1000 * (time.perf_counter() - t0):.1f} "
            f"({len(buffers[0])} bytes float16, layer {layer})"
        )

    bare = saved_bytes(widget)
    widget.pin(LAYER, 0)
    pinned = saved_bytes(widget)
    print(
        f"bench: attention_saved_notebook_bytes_{n}_tokens_one_pinned_head = {pinned} (goal <= 2097152; "
        f"pinned head as top-{widget.pinned_top_k} keys per query: {pinned - bare} bytes, ESM {len(widget._esm)})"
    )

    raw = export_state(widget)  # the state an exported page holds, binary arrays as base64
    state = dict(raw["state"])
    for item in raw["buffers"]:
        key = item["path"][0]
        state[key] = {"dtype": state[key]["dtype"], "shape": state[key]["shape"], "b64": item["data"]}
    heads = {}
    for head in range(patterns.n_heads):
        _, buffers = widget.reply({"type": "request", "id": 0, "layer": LAYER, "head": head})
        heads[f"{LAYER}:{head}"] = base64.b64encode(buffers[0]).decode("ascii")
    results = []
    with chromium() as browser:
        for _ in range(TRIALS):
            page = open_page(browser, widget._css, "width:1000px", viewport={"width": 1100, "height": 900})
            results.append(
                page.evaluate(MOUNT, {"esm": widget._esm, "state": dict(state, heads=[0], layer=LAYER), "heads": heads})
            )
            page.close()
    first = [r["first"] for r in results]
    switch = [r["switchMedian"] for r in results]
    worst = [r["switchWorst"] for r in results]
    print(
        f"bench: attention_head_first_paint_{n}_tokens_ms = {statistics.median(first):.1f} (goal < 150)  "
        f"[trials {', '.join(f'{x:.0f}' for x in first)}]"
    )
    print(
        f"bench: attention_switch_head_{n}_tokens_ms = median {statistics.median(switch):.1f}, worst "
        f"{statistics.median(worst):.1f} (goal < 100)  [trials {', '.join(f'{x:.0f}' for x in switch)}]"
    )
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
