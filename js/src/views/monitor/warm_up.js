/**
 * Training monitor, warm-up: a hidden copy of the view streams synthetic rows once per page (see warmUp).
 *
 * @example
 *   const ms = warmUp(model, document, { build, draw, schedule: "frame" }); // 0 after the first call
 */
import { startView } from "../../lib/view.js";
import { STORES, storeOf } from "./read.js";

let warmedUp = false;

/**
 * Draw a hidden, detached copy of `view` (same layers and panels as `model`) once per page while it streams
 * synthetic rows, so the JavaScript engine compiles the drawing paths before the real rows arrive: without it
 * the first few streamed frames take 10–25 ms instead of 2–8 ms (`benchmarks/monitor_widget.py`, which prints
 * this warm-up's own cost). Returns that cost in ms, or 0 after the first call.
 */
export function warmUp(model, doc, view) {
  if (warmedUp) return 0;
  warmedUp = true;
  const started = performance.now();
  const traits = {
    stream_id: "\u0000iw-warm-up",
    layers: model.get("layers") ?? [],
    panels: model.get("panels") ?? [],
    title: "",
    x_label: "step",
  };
  const fake = { get: (key) => traits[key] ?? null, on() {}, off() {} };
  const names = new Set(["loss", "fitting"]);
  for (const panel of traits.panels) {
    for (const layer of panel.metric ? traits.layers : []) {
      for (const metric of [panel.metric, ...(panel.dashed ?? []), ...(panel.band ?? [])])
        names.add(`${metric}|${layer}`);
    }
    for (const name of panel.series ?? []) names.add(name);
  }
  const series = [...names];
  const el = doc.createElement("div");
  const dispose = startView(view, { model: fake, el, reportError: () => {}, immediate: true });
  const store = storeOf(fake);
  const rows = 100;
  try {
    for (let block = 0; block < 6; block += 1) {
      const x = new Float64Array(rows);
      const values = new Float32Array(series.length * rows);
      for (let i = 0; i < rows; i += 1) x[i] = block * rows + i;
      for (let k = 0; k < values.length; k += 1) values[k] = 1 + ((k * 7919) % 101) / 100;
      store.append({ names: series, rows, x, values, start: block * rows }); // draws at once (immediate)
    }
  } finally {
    dispose();
    STORES.delete(traits.stream_id);
  }
  return performance.now() - started;
}
