"""Circuit view performance in headless Debian chromium (Playwright, offline), and the size of its saved output.

The graph is the seeded one of ``benchmarks/_circuit_graph.py``: 30 layers x 24 positions, 5,000 nodes, 50,000
edges, 40-character labels. Prints ``bench:`` lines (medians over fresh pages, timed as ``benchmarks/widgets.py``
times: from the call or event to the end of the next frame):

- first paint of the 5,000-node graph (``render()`` to the end of the next frame);
- hover: a ``mousemove`` onto a node until the next frame (its edges highlighted, the tooltip shown);
- a threshold slider move (node threshold 0.8, then edge threshold 0.98: ``input`` event, pruning in the browser
  by graph_math, repaint) until the next frame. The first move is reported on its own: the view computes the full
  graph's influence and runs the pruning once (then forgets its result) when the browser is idle after the first
  paint, or 300 ms after it at the latest, so the first move runs warm code but computes its own pruning;
- the saved output: the output's MIME bundle as the notebook stores it (the view's payload, the static picture,
  the text), base64 included; and the widget state ipywidgets saves (ESM and CSS included);
- first paint of the graph pruned in Python to about 300 nodes.

Usage: PYTHONPATH=. python -u benchmarks/circuit_view.py [--small]   (``--small``: a quick check on a small graph)
"""

from __future__ import annotations

import _repo  # noqa: F401  (the repository root on sys.path: these import tests.browser.harness)

import json
import os
import statistics
import sys

from _browser import chromium, open_page
from _circuit_graph import circuit_graph
from interp_widgets.widgets.export import export_state

SMALL = "--small" in sys.argv
TRIALS = 1 if SMALL else 5

# Mounts the view from its exported state with a minimal evented model (set fires change:<name>, as Backbone does).
MOUNT = """async ({esm, payload}) => {
  const state = payload.state;
  for (const {path, data} of payload.buffers) {
    const bin = atob(data); const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    let node = state; for (const k of path.slice(0, -1)) node = node[k];
    node[path[path.length - 1]] = new DataView(bytes.buffer);
  }
  const handlers = new Map();
  const model = {get: (k) => state[k], set: (k, v) => { state[k] = v; for (const h of handlers.get(`change:${k}`) ?? []) h(); },
    on: (e, h) => { if (!handlers.has(e)) handlers.set(e, new Set()); handlers.get(e).add(h); },
    off: (e, h) => handlers.get(e)?.delete(h), save_changes() {}, send() {}};
  const mod = await import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})));
  const el = document.getElementById("el");
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  await frame();
  const t0 = performance.now();
  mod.default.render({model, el});
  await frame();
  const paint = performance.now() - t0;
  if (el.querySelector(".iw-error")) throw new Error(el.textContent);
  window.__iw = {model, el};
  return paint;
}"""

INTERACT = """async () => {
  const {el} = window.__iw;
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const stage = el.querySelector(".iw-circuit-stage");
  const tip = el.querySelector(".iw-circuit-tip");
  const box = stage.getBoundingClientRect();
  const move = (x, y) => stage.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
  // find points over nodes (not timed), then time hovers onto them from an empty spot
  const hits = [];
  for (let y = box.top + 12; y < box.bottom - 50 && hits.length < 12; y += 17)
    for (let x = box.left + 50; x < box.right - 10 && hits.length < 12; x += 13) {
      move(x, y); await frame();
      if (!tip.hidden) { hits.push([x, y]); x += 200; }
    }
  if (!hits.length) throw new Error("no node found under the pointer");
  const hovers = [];
  for (const [x, y] of hits) {
    stage.dispatchEvent(new MouseEvent("mouseleave", {bubbles: true})); await frame();
    const t = performance.now(); move(x, y); await frame(); hovers.push(performance.now() - t);
    if (tip.hidden) throw new Error("no tooltip on hover");
  }
  const slide = async (name, value) => {
    const input = el.querySelector(`.iw-circuit-${name}`);
    input.value = String(value);
    const t = performance.now(); input.dispatchEvent(new Event("input")); await frame();
    return performance.now() - t;
  };
  const sliders = [await slide("node_threshold", 0.8), await slide("edge_threshold", 0.98), await slide("node_threshold", 0.6),
                   await slide("edge_threshold", 0.9), await slide("node_threshold", 0.9)];
  const shown = el.querySelector(".iw-circuit-stage").getAttribute("aria-description");
  hovers.sort((a, b) => a - b);
  return {hover: hovers[Math.floor(hovers.length / 2)], hoverWorst: hovers[hovers.length - 1], sliderFirst: sliders[0],
          slider: [...sliders.slice(1)].sort((a, b) => a - b)[2], shown};
}"""


def saved_output_bytes(view) -> int:
    """Bytes of the output as a notebook stores it: the MIME bundle without the widget reference (the view's
    payload, the static picture, the text), as JSON."""
    data, _ = view._repr_mimebundle_()
    data = {k: v for k, v in data.items() if k != "application/vnd.jupyter.widget-view+json"}
    return len(json.dumps(data, separators=(",", ":")).encode())


def widget_state_bytes(view) -> int:
    """Bytes of the widget state ipywidgets saves for it (binary buffers as base64, ESM and CSS included)."""
    from ipywidgets.embed import dependency_state, embed_data

    state = embed_data(views=[view], state=dependency_state([view], drop_defaults=False), drop_defaults=False)
    return len(json.dumps(state["manager_state"], separators=(",", ":")).encode())


def pruned_to(graph, nodes: int):
    """The graph pruned in Python to about ``nodes`` nodes (node threshold searched by bisection, edges at 0.98)."""
    lo, hi, best = 0.05, 1.0, None
    for _ in range(4 if SMALL else 7):
        mid = (lo + hi) / 2
        pruned = graph.prune(node_threshold=mid, edge_threshold=0.98)
        if best is None or abs(pruned.n_nodes - nodes) < abs(best.n_nodes - nodes):
            best = pruned
        lo, hi = (mid, hi) if pruned.n_nodes < nodes else (lo, mid)
    return best


def paint(browser, view, interact: bool):
    payload = json.loads(json.dumps(export_state(view)))
    paints, results = [], []
    for _ in range(TRIALS):
        page = open_page(browser, view._css, "width:1200px", viewport={"width": 1300, "height": 1000})
        paints.append(page.evaluate(MOUNT, {"esm": view._esm, "payload": payload}))
        if interact:
            results.append(page.evaluate(INTERACT))
        page.close()
    return paints, results


def main() -> None:
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    size = dict(n_nodes=1500, n_edges=8000) if SMALL else {}
    graph, labels = circuit_graph(**size)
    view = graph.widget(labels=labels)
    small = pruned_to(graph, 300).widget(labels=labels)
    n, e = graph.n_nodes, len(view.edge_src)
    with chromium() as browser:
        paints, results = paint(browser, view, interact=True)
        trials = ", ".join(f"{p:.0f}" for p in paints)
        print(f"bench: circuit_first_paint_{n}_nodes_{e}_edges_ms = {statistics.median(paints):.1f} (goal < 300)  [trials {trials}]")  # fmt: skip
        hover = [r["hover"] for r in results]
        print(f"bench: circuit_hover_ms = {statistics.median(hover):.1f} (goal < 50)  [median of 12 nodes per page; "
              f"worst {max(r['hoverWorst'] for r in results):.0f}]")  # fmt: skip
        slider = [r["slider"] for r in results]
        first = [r["sliderFirst"] for r in results]
        print(f"bench: circuit_slider_move_ms = {statistics.median(slider):.1f} (goal < 50)  [median of 4 moves per "
              f"page; the first move: {statistics.median(first):.0f} ms; "
              f"after them: {results[0]['shown']}]")  # fmt: skip
        small_paints, _ = paint(browser, small, interact=False)
        print(f"bench: circuit_first_paint_pruned_{small.node_kind.size}_nodes_ms = {statistics.median(small_paints):.1f} "
              f"(goal < 100)  [trials {', '.join(f'{p:.0f}' for p in small_paints)}]")  # fmt: skip
    print(f"bench: circuit_saved_output_bytes_{n}_nodes = {saved_output_bytes(view)} (goal <= 1048576)")
    print(f"bench: circuit_widget_state_bytes_{n}_nodes = {widget_state_bytes(view)} (goal <= 1048576)")


if __name__ == "__main__":
    main()
