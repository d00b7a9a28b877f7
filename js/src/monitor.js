/**
 * Live training monitor (front end of interp_widgets.widgets.MonitorWidget).
 *
 * `initialize` (once per model) creates the model's SeriesStore, loads the `checkpoint` trait and listens
 * for "iw-monitor-append" custom messages, so rows streamed while a cell runs are kept even before the
 * widget is displayed. `render` (once per view) draws the store on canvases, at most once per animation
 * frame, decimated to the pixel grid. All interaction is local to the browser and keeps working while
 * the kernel is busy: hover readouts, layer and panel toggles, smoothing, drag-to-zoom, Shift+drag pan,
 * double-click / "Reset zoom", linear/log scale per panel.
 *
 * Synced traits: the MonitorModel typedef below (the view writes none; rows stream in as custom messages).
 *
 * @example
 *   import widget from "./monitor.js";
 *   widget.initialize({model}); widget.render({model, el});
 */

/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * One panel of the monitor (Python `DEFAULT_PANELS`).
 * @typedef {object} MonitorPanel
 * @property {string} id
 * @property {string} [title]
 * @property {"lines" | "heatmap"} [kind]
 * @property {string[]} [series]  Global series drawn as lines.
 * @property {string} [metric]  Per-layer metric: series `<metric>|<layer>`.
 * @property {string[]} [dashed]  Per-layer companions drawn dashed.
 * @property {[string, string]} [band]  Per-layer low and high metrics of a shaded band.
 * @property {"linear" | "log"} [scale]
 * @property {number} [reference]  y of a reference line.
 */

/**
 * Synced traits of MonitorWidget: its data (MonitorData, generated in lib/view_traits.js) and its view
 * state (MonitorState).
 * @typedef {import("./lib/view_traits.js").MonitorData & MonitorState} MonitorModel
 */
/**
 * View state of MonitorWidget (and its base InterpWidget).
 * @typedef {object} MonitorState
 * @property {string} stream_id  Identifies the browser-side store shared by this model's views.
 * @property {string} title
 * @property {string} x_label  Name of the x axis: "step", or "checkpoint" for replays.
 * @property {string[]} layers  Layer names in display order.
 * @property {MonitorPanel[]} panels
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./monitor.css";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { formatScore } from "./lib/format.js";
import { MARGIN, paintHeatmap, paintLines, prepareLines } from "./lib/plot_canvas.js";
import { EmaState, lowerBound, runsOf } from "./lib/plot_math.js";
import { SeriesStore, decodeAppend, decodeCheckpoint } from "./lib/plot_store.js";
import { detectTheme, watchTheme } from "./lib/theme.js";

export const PALETTE = [
  "#1f77b4",
  "#d62728",
  "#2ca02c",
  "#9467bd",
  "#ff7f0e",
  "#17becf",
  "#8c564b",
  "#e377c2",
  "#7f7f7f",
  "#bcbd22",
];
const PANEL_HEIGHT = 170;
const HEATMAP_ROW = 18;

/** Stores by the model's `stream_id`: initialize and every render of one model share one store. */
const STORES = new Map();

/**
 * The store of `model` (created on first use, e.g. by render in hosts that skip initialize).
 * @param {AnyModel<MonitorModel>} model
 */
export function storeOf(model) {
  const id = model.get("stream_id") || "";
  let store = STORES.get(id);
  if (!store) {
    store = new SeriesStore();
    store.replace(decodeCheckpoint(model.get("checkpoint"), model.get("checkpoint_schema")));
    STORES.set(id, store);
  }
  return store;
}

/** @param {{model: AnyModel<MonitorModel>}} props */
function initializeMonitor({ model }) {
  const id = model.get("stream_id") || "";
  STORES.delete(id); // a re-initialised model (new ESM, page reload) starts from its checkpoint
  const store = storeOf(model);
  const onMessage = (content, buffers) => {
    if (content?.type !== "iw-monitor-append") return;
    try {
      store.append(decodeAppend(content, buffers));
    } catch (error) {
      console.error("MonitorWidget: dropped a malformed append message", error);
    }
  };
  const onCheckpoint = () => store.replace(decodeCheckpoint(model.get("checkpoint"), model.get("checkpoint_schema")));
  model.on("msg:custom", onMessage);
  model.on("change:checkpoint", onCheckpoint);
  return () => {
    model.off("msg:custom", onMessage);
    model.off("change:checkpoint", onCheckpoint);
    if (STORES.get(id) === store) STORES.delete(id);
  };
}

/** Split "metric|layer" (layer names may contain "|"; metric names never do). */
export function splitSeries(name) {
  const bar = name.indexOf("|");
  return bar < 0 ? [name, null] : [name.slice(0, bar), name.slice(bar + 1)];
}

/** Format a value for readouts. */
function fmt(v) {
  return Number.isFinite(v) ? formatScore(v, { digits: 4 }) : "–";
}

/**
 * Index of the finite value of `y` nearest to row `i` among rows whose x lies within `tolerance` of
 * `target`, or -1.
 */
export function nearestFinite(x, y, n, i, target, tolerance) {
  for (let d = 0; d < n; d += 1) {
    const left = i - d;
    const right = i + d;
    const leftIn = left >= 0 && Math.abs(x[left] - target) <= tolerance;
    const rightIn = right < n && Math.abs(x[right] - target) <= tolerance;
    if (!leftIn && !rightIn) return -1;
    if (leftIn && y[left] === y[left]) return left;
    if (rightIn && y[right] === y[right]) return right;
  }
  return -1;
}

function cssColours(root) {
  const style = root.ownerDocument.defaultView?.getComputedStyle?.(root);
  const read = (name, fallback) => style?.getPropertyValue(name)?.trim() || fallback;
  const dark = root.dataset.iwTheme === "dark";
  return {
    fg: read("--iw-fg", dark ? "#e6edf3" : "#1f2328"),
    muted: read("--iw-fg-muted", dark ? "#9da7b3" : "#57606a"),
    grid: dark ? "rgba(255,255,255,0.08)" : "rgba(0,0,0,0.07)",
    shade: dark ? "rgba(255,200,80,0.12)" : "rgba(255,170,0,0.13)",
    neutral: dark ? [60, 60, 64] : [247, 247, 247],
  };
}

let warmedUp = false;

/**
 * Draw a hidden, detached copy of the view (same layers and panels as `model`) once per page while it streams
 * synthetic rows, so the JavaScript engine compiles the drawing paths before the real rows arrive: without it
 * the first few streamed frames take 10–25 ms instead of 2–8 ms (`benchmarks/monitor_widget.py`, which prints
 * this warm-up's own cost). Returns that cost in ms, or 0 after the first call.
 */
function warmUp(model, doc) {
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
  const dispose = renderMonitor({ model: fake, el, reportError: () => {}, immediate: true });
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

/**
 * One view of the monitor; `immediate` (the warm-up's hidden copy) draws on every change instead of per frame.
 * @param {{model: AnyModel<MonitorModel>, el: HTMLElement, reportError: (error: unknown) => void, immediate?: boolean}} props
 */
function renderMonitor({ model, el, reportError, immediate = false }) {
  const doc = el.ownerDocument;
  const store = storeOf(model);
  const root = h("div", { class: "iw-root iw-monitor", "data-iw-theme": detectTheme(doc) });
  const titleNode = h("div", { class: "iw-monitor-title" });
  const status = h("span", { class: "iw-monitor-status", "aria-live": "off" });
  const layerBox = h("span", { class: "iw-monitor-layers", role: "group", "aria-label": "Layers" });
  const smoothing = h("input", {
    type: "range",
    min: 0,
    max: 0.99,
    step: 0.01,
    value: 0,
    class: "iw-monitor-smoothing",
    "aria-label": "Smoothing",
  });
  const smoothingText = h("span", { class: "iw-monitor-smoothing-value" }, "0");
  const resetButton = h(
    "button",
    {
      type: "button",
      class: "iw-button iw-monitor-reset",
      title: "Show all steps and follow new ones (double-click a plot)",
    },
    "Reset zoom",
  );
  const panelBox = h("span", { class: "iw-monitor-panel-toggles", role: "group", "aria-label": "Panels" });
  const toolbar = h("div", { class: "iw-toolbar" }, [
    layerBox,
    h("label", { title: "Exponential moving average weight (0 = raw values)" }, [
      "smoothing ",
      smoothing,
      " ",
      smoothingText,
    ]),
    resetButton,
  ]);
  const panelsNode = h("div", { class: "iw-monitor-panels" });
  const hint = h(
    "div",
    { class: "iw-caption" },
    "Drag across a plot to zoom, Shift+drag to pan, double-click to reset; the shaded x range is the proxy fit window.",
  );
  root.append(
    h("div", { class: "iw-monitor-head" }, [titleNode, status]),
    toolbar,
    h("details", { class: "iw-monitor-panel-menu" }, [h("summary", {}, "Panels"), panelBox]),
    panelsNode,
    hint,
  );
  el.append(root);

  const state = {
    hiddenLayers: new Set(),
    hiddenPanels: new Set(),
    scales: new Map(), // panel id -> "linear" | "log" chosen in this view
    smoothing: 0,
    xDomain: null, // null = follow: all steps, growing with new ones
    follow: null, // [x0, x1, epoch] of the follow-mode domain
    cursor: null,
    drag: null,
  };
  let colours = cssColours(root);
  let panels = [];
  let frameRequest = 0;
  let disposed = false;
  let maxDrawMs = 0;
  const smoothCache = new Map();
  const decimators = new Map();

  const layers = () => model.get("layers") ?? [];
  const layerColour = (layer) => PALETTE[Math.max(0, layers().indexOf(layer)) % PALETTE.length];
  const visibleLayers = () => layers().filter((layer) => !state.hiddenLayers.has(layer));
  const xLabel = () => model.get("x_label") || "step";

  const request = () => {
    if (immediate && !disposed) return draw();
    if (frameRequest || disposed) return;
    const raf = doc.defaultView?.requestAnimationFrame ?? ((fn) => setTimeout(fn, 16));
    frameRequest = raf(() => {
      frameRequest = 0;
      try {
        draw();
      } catch (error) {
        reportError(error);
      }
    });
  };

  /** Column of `name`, smoothed when smoothing is on (extended incrementally: EMA of old rows never changes). */
  const series = (name) => {
    const column = store.column(name);
    if (!column || state.smoothing === 0) return column;
    let cached = smoothCache.get(name);
    if (
      !cached ||
      cached.epoch !== store.epoch ||
      cached.weight !== state.smoothing ||
      cached.values.length < store.n
    ) {
      const values = new Float32Array(Math.max(store.n, cached?.values.length ?? 0, 64) * 2);
      if (cached && cached.epoch === store.epoch && cached.weight === state.smoothing)
        values.set(cached.values.subarray(0, cached.n));
      else cached = { epoch: store.epoch, weight: state.smoothing, n: 0, ema: new EmaState(state.smoothing) };
      cached = { ...cached, values };
      smoothCache.set(name, cached);
    }
    for (let i = cached.n; i < store.n; i += 1) cached.values[i] = cached.ema.next(column[i]);
    cached.n = store.n;
    return cached.values;
  };

  /** Decimators kept between frames, per panel line (see prepareLines); dropped when the history is replaced. */
  const withDecimator = (key, item) => {
    const id = `${store.epoch}|${state.smoothing}|${key}`;
    const cached = decimators.get(key);
    item.decimator = cached?.id === id ? cached.decimator : null;
    item.cacheKey = key;
    item.cacheId = id;
    return item;
  };
  const keepDecimators = (prepared) => {
    for (const { line, decimator } of prepared.decimatedLines)
      decimators.set(line.cacheKey, { id: line.cacheId, decimator });
    for (const { band, decimator } of prepared.decimatedBands)
      decimators.set(band.cacheKey, { id: band.cacheId, decimator });
  };

  /** Follow mode shows every step on [first x, first x + 2^k]: the span doubles when the steps outgrow it, so the
   * decimators are widened in O(pixels) instead of re-reading every row (see prepareLines). */
  const followDomain = () => {
    if (store.n === 0) return [0, 1];
    const first = store.x[0];
    const last = store.x[store.n - 1];
    const current = state.follow;
    if (!current || current[0] !== first || last > current[1] || current[2] !== store.epoch) {
      let span = current && current[0] === first && current[2] === store.epoch ? current[1] - first : 1;
      while (first + span < last) span *= 2;
      state.follow = [first, first + span, store.epoch];
    }
    return state.follow.slice(0, 2);
  };
  const domain = () => state.xDomain ?? followDomain();

  let fitCache = { version: -1, windows: [] };
  const fitWindows = () => {
    if (fitCache.version === store.version) return fitCache.windows;
    const fitting = store.column("fitting");
    const windows = fitting
      ? runsOf(fitting, store.n).map(([a, b]) => [store.x[a], store.x[Math.min(b + 1, store.n - 1)]])
      : [];
    fitCache = { version: store.version, windows };
    return windows;
  };

  function buildToolbar() {
    layerBox.replaceChildren(
      ...layers().map((layer) => {
        const box = h("input", { type: "checkbox", "data-layer": layer });
        box.checked = !state.hiddenLayers.has(layer);
        box.addEventListener("change", () => {
          if (box.checked) state.hiddenLayers.delete(layer);
          else state.hiddenLayers.add(layer);
          request();
        });
        const swatch = h("span", { class: "iw-monitor-swatch" });
        swatch.style.background = layerColour(layer);
        return h("label", { class: "iw-monitor-layer", title: layer }, [box, swatch, layer]);
      }),
    );
  }

  function buildPanels() {
    panels = (model.get("panels") ?? []).map((config) => {
      const heatmap = config.kind === "heatmap";
      const canvas = h("canvas", {
        class: "iw-monitor-canvas",
        tabindex: 0,
        role: "img",
        "aria-label": config.title ?? config.id,
      });
      const readout = h("div", { class: "iw-monitor-readout" }, "\u00a0");
      const scaleSelect = h("select", { class: "iw-monitor-scale", "aria-label": `${config.title} scale` }, [
        h("option", { value: "linear" }, "linear"),
        h("option", { value: "log" }, "log"),
      ]);
      scaleSelect.value = state.scales.get(config.id) ?? (config.scale === "log" ? "log" : "linear");
      scaleSelect.addEventListener("change", () => {
        state.scales.set(config.id, scaleSelect.value);
        request();
      });
      const header = h("div", { class: "iw-monitor-panel-head" }, [
        h("span", { class: "iw-monitor-panel-title" }, config.title ?? config.id),
        heatmap ? "" : scaleSelect,
      ]);
      const node = h(
        "div",
        { class: `iw-monitor-panel${heatmap ? " iw-monitor-heatmap" : ""}`, "data-panel": config.id },
        [header, canvas, readout],
      );
      const panel = { config, node, canvas, readout, frame: null, heatmap };
      attachInteraction(panel);
      return panel;
    });
    panelsNode.replaceChildren(...panels.map((p) => p.node));
    panelBox.replaceChildren(
      ...panels.map(({ config }) => {
        const box = h("input", { type: "checkbox", "data-panel": config.id });
        box.checked = !state.hiddenPanels.has(config.id);
        box.addEventListener("change", () => {
          if (box.checked) state.hiddenPanels.delete(config.id);
          else state.hiddenPanels.add(config.id);
          request();
        });
        return h("label", {}, [box, config.title ?? config.id]);
      }),
    );
  }

  /** Lines and bands of a line panel: per-layer metric (+ band, + dashed companions) and global series. */
  function panelData(config) {
    const lines = [];
    const bands = [];
    const rows = [];
    const layered = config.metric ? visibleLayers() : [];
    for (const layer of layered) {
      const colour = layerColour(layer);
      const y = series(`${config.metric}|${layer}`);
      if (y)
        lines.push(
          withDecimator(`${config.id}:${config.metric}|${layer}`, { x: store.x, y, n: store.n, colour, label: layer }),
        );
      for (const companion of config.dashed ?? []) {
        const c = series(`${companion}|${layer}`);
        if (c)
          lines.push(
            withDecimator(`${config.id}:${companion}|${layer}`, {
              x: store.x,
              y: c,
              n: store.n,
              colour,
              dash: [3, 3],
              width: 1,
              label: `${layer} ${companion}`,
            }),
          );
      }
      if (config.band?.length === 2) {
        const lo = store.column(`${config.band[0]}|${layer}`);
        const hi = store.column(`${config.band[1]}|${layer}`);
        if (lo && hi)
          bands.push(
            withDecimator(`${config.id}:band|${layer}`, { x: store.x, lo, hi, n: store.n, colour, label: layer }),
          );
      }
    }
    (config.series ?? []).forEach((name, k) => {
      const y = series(name);
      const colour = config.metric ? colours.fg : PALETTE[k % PALETTE.length];
      if (y) lines.push(withDecimator(`${config.id}:${name}`, { x: store.x, y, n: store.n, colour, label: name }));
    });
    return { lines, bands, rows };
  }

  function drawPanel(panel, xDomain, shades, available) {
    const { canvas, config } = panel;
    const width = Math.max(240, Math.floor(available || 600));
    const height = panel.heatmap
      ? MARGIN.top + MARGIN.bottom + HEATMAP_ROW * Math.max(1, visibleLayers().length)
      : PANEL_HEIGHT;
    const ratio = doc.defaultView?.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
      canvas.style.width = `${width}px`;
      canvas.style.height = `${height}px`;
    }
    const ctx = canvas.getContext?.("2d") ?? null;
    ctx?.setTransform(ratio, 0, 0, ratio, 0, 0);
    if (panel.heatmap) {
      const rows = visibleLayers()
        .map((layer) => ({ label: layer, x: store.x, y: store.column(`${config.metric}|${layer}`), n: store.n }))
        .filter((row) => row.y);
      panel.rows = rows;
      panel.frame = paintHeatmap(ctx, { width, height, xDomain, rows, colours, neutral: colours.neutral });
      return 0; // data-iw-points counts line points only
    }
    const scale = state.scales.get(config.id) ?? (config.scale === "log" ? "log" : "linear");
    const { lines, bands } = panelData(config);
    panel.lines = lines;
    panel.bands = bands;
    const spec = {
      width,
      height,
      xDomain,
      yKind: scale,
      lines,
      bands,
      shades,
      reference: config.reference,
      cursor: state.cursor,
      colours,
    };
    const prepared = prepareLines(spec);
    keepDecimators(prepared);
    panel.frame = paintLines(ctx, spec, prepared);
    return panel.frame.drawn;
  }

  function readoutText(panel) {
    if (state.cursor === null || !panel.frame || store.n === 0) return "\u00a0";
    const i = Math.min(store.n - 1, lowerBound(store.x, store.n, state.cursor));
    const previous = i > 0 && Math.abs(store.x[i - 1] - state.cursor) < Math.abs(store.x[i] - state.cursor) ? i - 1 : i;
    const tolerance = Math.abs(panel.frame.x.value(MARGIN.left + 8) - panel.frame.x.value(MARGIN.left));
    const parts = [`${xLabel()} ${fmt(store.x[previous])}`];
    if (panel.heatmap) {
      for (const row of panel.rows ?? []) {
        let j = previous;
        while (j > 0 && !(row.y[j] > 0)) j -= 1;
        parts.push(`${row.label}: ${row.y[j] > 0 ? fmt(row.y[j]) : "–"}`);
      }
      return parts.join("   ");
    }
    for (const line of panel.lines ?? []) {
      const j = nearestFinite(store.x, line.y, store.n, previous, state.cursor, tolerance);
      if (j < 0) continue;
      let text = `${line.label}: ${fmt(line.y[j])}`;
      const band = (panel.bands ?? []).find((b) => b.label === line.label && !line.dash);
      if (band && band.lo[j] === band.lo[j]) text += ` [${fmt(band.lo[j])}, ${fmt(band.hi[j])}]`;
      parts.push(text);
    }
    return parts.join("   ");
  }

  function draw() {
    if (disposed) return;
    const started = performance.now();
    const title = model.get("title") || "Training monitor";
    if (titleNode.textContent !== title) titleNode.textContent = title;
    const xDomain = domain();
    const shades = fitWindows();
    let drawn = 0;
    for (const panel of panels) panel.node.hidden = state.hiddenPanels.has(panel.config.id);
    const shown = panels.filter((panel) => !panel.node.hidden);
    const widths = shown.map((panel) => panel.node.clientWidth); // one layout read before any write
    shown.forEach((panel, k) => {
      drawn += drawPanel(panel, xDomain, shades, widths[k]);
    });
    for (const panel of shown) {
      const text = readoutText(panel);
      if (panel.readout.textContent !== text) panel.readout.textContent = text;
    }
    const last = store.n ? store.x[store.n - 1] : null;
    status.textContent = store.n
      ? `${xLabel()} ${fmt(last)} · ${store.n} logged`
      : "waiting for the first logged step…";
    resetButton.disabled = state.xDomain === null;
    const elapsed = performance.now() - started;
    maxDrawMs = Math.max(maxDrawMs, elapsed);
    root.dataset.iwRows = String(store.n);
    root.dataset.iwPoints = String(drawn);
    root.dataset.iwDrawMs = elapsed.toFixed(2);
    root.dataset.iwDrawMaxMs = maxDrawMs.toFixed(2);
  }

  function zoomTo(a, b) {
    const [lo, hi] = a < b ? [a, b] : [b, a];
    if (hi - lo <= 0) return;
    state.xDomain = [lo, hi];
    request();
  }

  function attachInteraction(panel) {
    const { canvas } = panel;
    const xAt = (event) => {
      if (!panel.frame) return null;
      const box = canvas.getBoundingClientRect();
      return panel.frame.x.value(event.clientX - box.left);
    };
    canvas.addEventListener("mousemove", (event) => {
      const value = xAt(event);
      if (value === null) return;
      const drag = state.drag;
      if (drag && drag.panel === panel && drag.pan) {
        const shift = drag.anchor - value;
        state.xDomain = [drag.domain[0] + shift, drag.domain[1] + shift];
      }
      state.cursor = value;
      request();
    });
    canvas.addEventListener("mouseleave", () => {
      state.cursor = null;
      request();
    });
    canvas.addEventListener("mousedown", (event) => {
      const value = xAt(event);
      if (value === null || event.button !== 0) return;
      state.drag = { panel, anchor: value, pan: event.shiftKey, domain: domain() };
    });
    canvas.addEventListener("mouseup", (event) => {
      const drag = state.drag;
      state.drag = null;
      const value = xAt(event);
      if (!drag || drag.panel !== panel || value === null || drag.pan) return;
      const pixels = Math.abs(panel.frame.x.px(value) - panel.frame.x.px(drag.anchor));
      if (pixels >= 4) zoomTo(drag.anchor, value);
    });
    canvas.addEventListener("dblclick", () => {
      state.xDomain = null;
      request();
    });
    canvas.addEventListener("keydown", (event) => {
      const [a, b] = domain();
      const span = b - a;
      const actions = {
        "+": () => zoomTo(a + span / 4, b - span / 4),
        "-": () => zoomTo(a - span / 2, b + span / 2),
        ArrowLeft: () => zoomTo(a - span / 5, b - span / 5),
        ArrowRight: () => zoomTo(a + span / 5, b + span / 5),
        0: () => {
          state.xDomain = null;
          request();
        },
      };
      const action = actions[event.key];
      if (!action) return;
      event.preventDefault();
      action();
    });
  }

  smoothing.addEventListener("input", () => {
    state.smoothing = Number(smoothing.value);
    smoothingText.textContent = smoothing.value;
    request();
  });
  resetButton.addEventListener("click", () => {
    state.xDomain = null;
    request();
  });

  const onLayers = () => {
    buildToolbar();
    request();
  };
  const onPanels = () => {
    buildPanels();
    request();
  };
  const unsubscribe = store.subscribe(request);
  model.on("change:layers", onLayers);
  model.on("change:panels", onPanels);
  model.on("change:title", request);
  model.on("change:x_label", request);
  const stopTheme = watchTheme(doc, (theme) => {
    root.dataset.iwTheme = theme;
    colours = cssColours(root);
    request();
  });
  const resize = typeof ResizeObserver === "function" ? new ResizeObserver(() => request()) : null;
  resize?.observe(panelsNode);
  buildToolbar();
  buildPanels();
  draw();
  if (!immediate) {
    setTimeout(() => {
      if (!disposed) root.dataset.iwWarmUpMs = warmUp(model, doc).toFixed(1); // after the first paint, once per page
    }, 0);
  }
  return () => {
    disposed = true;
    if (frameRequest) (doc.defaultView?.cancelAnimationFrame ?? clearTimeout)(frameRequest);
    unsubscribe();
    model.off("change:layers", onLayers);
    model.off("change:panels", onPanels);
    model.off("change:title", request);
    model.off("change:x_label", request);
    stopTheme();
    resize?.disconnect();
  };
}

export default {
  initialize: initializeMonitor,
  render: guardedRender("MonitorWidget", renderMonitor),
};
