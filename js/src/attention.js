/**
 * Attention patterns view (front end of interp_widgets.widgets.AttentionWidget): a head view (one layer, any
 * subset of heads, heatmap or lines between query and key tokens) and a model view (layers × heads thumbnails).
 *
 * Heads are not synced: the view asks the kernel for the one it shows (custom message {type: "request", id, layer,
 * head}) and gets its (queries × keys) weights as one float16 buffer; the last heads stay in a small cache. Pinned
 * heads (top-k keys per query) are part of the synced state, so a saved notebook or exported page shows those.
 * Hover a token to focus its query row, click to lock, click again or press Esc to unlock.
 *
 * @example
 *   import widget from "./attention.js";
 *   widget.render({model, el});
 */

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of AttentionWidget: its data (AttentionData, generated in lib/view_traits.js) and its view
 * state (AttentionState).
 * @typedef {import("./lib/view_traits.js").AttentionData & AttentionState} AttentionModel
 */
/**
 * View state of AttentionWidget (and its base InterpWidget).
 * @typedef {object} AttentionState
 * @property {"head" | "model"} view  (written)
 * @property {number} layer  (written)
 * @property {number[]} heads  (written)
 * @property {"" | "mean" | "max" | "rollout"} aggregate  (written)
 * @property {"heatmap" | "lines"} pattern_style  (written; not `style`, which ipywidgets' DOMWidgetView reads as a StyleModel reference)
 * @property {number} focus  Focused query token, -1: none (written).
 * @property {boolean} locked  (written)
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./attention.css";
import {
  combineHeads,
  decodeFloat16,
  denseFromTopK,
  gridCellAt,
  gridLayout,
  heatmapCellAt,
  lineSegments,
  nextFocus,
  paintWeights,
  weightRamp,
} from "./lib/attention_math.js";
import { decodeArray } from "./lib/codec.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { createExportMenu } from "./lib/export.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";
import { viewKit } from "./lib/view.js";
import { ATTENTION_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";

/** Traits whose change only redraws. @type {(keyof AttentionModel)[]} */
const VIEW_TRAITS = ["view", "layer", "heads", "aggregate", "pattern_style", "focus", "locked"];
const CACHE = 24;
const NO_KERNEL_MS = 2500;
const HEAD_COLOURS = [
  "#e66101",
  "#5e3c99",
  "#1b9e77",
  "#d95f02",
  "#7570b3",
  "#e7298a",
  "#66a61e",
  "#e6ab02",
  "#a6761d",
  "#1f78b4",
  "#b2df8a",
  "#fb9a99",
];
const ROW = 16;
/** Heatmap rows / columns at least this many CSS px get a tick label per token. */
const TICK_ROW = 12;
const TICK_COLUMN = 28;
/** Top keys per query listed in the HTML export's table (the CSV has every non-zero weight). */
const HTML_TOP_KEYS = 5;

/** Read and check the synced data. @param {AnyModel<AttentionModel>} model */
export function readAttention(model) {
  const tokens = model.get("tokens") ?? [];
  const keyTokens = model.get("key_tokens") ?? [];
  if (tokens.length === 0 || keyTokens.length === 0) throw new RangeError("there are no tokens to display");
  const layers = model.get("n_layers");
  const heads = model.get("n_heads");
  if (!(layers > 0 && heads > 0)) throw new RangeError(`the model has ${layers} layers and ${heads} heads`);
  const thumbs = decodeArray(model.get("thumbnails"));
  if (thumbs.shape[0] !== layers || thumbs.shape[1] !== heads)
    throw new RangeError(`thumbnails have shape [${thumbs.shape}], expected [${layers}, ${heads}, s, s]`);
  const pinned = model.get("pinned") ?? [];
  const keys = decodeArray(model.get("pinned_keys"));
  const weights = decodeArray(model.get("pinned_weights"));
  if (keys.shape[0] !== pinned.length || weights.shape[0] !== pinned.length)
    throw new RangeError(`pinned_keys/pinned_weights hold ${keys.shape[0]} heads, pinned lists ${pinned.length}`);
  return {
    tokens, keyTokens, layers, heads, kvHeads: Math.max(1, model.get("n_kv_heads") || 1),
    layerNames: model.get("layer_names") ?? [], kind: model.get("kind") || "self", modelName: model.get("model_name") || "",
    thumbs, pinned, keys, weights, topK: model.get("pinned_top_k") || keys.shape[2] || 0,
    generated: decodeArray(model.get("generated_mask")).values,
  }; // prettier-ignore
}

/** The cache / request key of a head or aggregation. */
export const patternKey = (layer, head) => `${layer}:${head}`;

/** @param {{model: AnyModel<AttentionModel>, el: HTMLElement, reportError: (error: unknown) => void}} props */
function renderAttention({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const { safely, save, coalesce } = viewKit(model, reportError);
  let theme = detectTheme(doc);
  let lut = weightRamp(theme);
  let data = readAttention(model);

  const viewButtons = ["head", "model"].map((v) =>
    h(
      "button",
      { type: "button", class: "iw-button", "data-view": v, "aria-pressed": "false" },
      v === "head" ? "Head view" : "Model view",
    ),
  );
  const layerSelect = h("select", { class: "iw-layer-select", "aria-label": "Layer" });
  const headBox = h("span", { class: "iw-heads", role: "group", "aria-label": "Heads, grouped by KV head" });
  const aggButtons = ["mean", "max", "rollout"].map((a) =>
    h(
      "button",
      {
        type: "button",
        class: "iw-button",
        "data-aggregate": a,
        "aria-pressed": "false",
        title: a === "rollout" ? "attention rollout through layers 0..this one" : `${a} over the layer's heads`,
      },
      a,
    ),
  );
  const styleButtons = ["heatmap", "lines"].map((s) =>
    h(
      "button",
      { type: "button", class: "iw-button", "data-style": s, "aria-pressed": "false" },
      s === "heatmap" ? "Heatmap" : "Lines",
    ),
  );
  const pinButton = h(
    "button",
    {
      type: "button",
      class: "iw-button iw-pin",
      title: "Keep this head in the saved notebook and exported page (top keys per query)",
    },
    "Pin",
  );
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("span", { role: "group", "aria-label": "View" }, viewButtons),
    h("label", {}, ["layer ", layerSelect]),
    headBox,
    h("span", { role: "group", "aria-label": "Combine heads" }, aggButtons),
    h("span", { role: "group", "aria-label": "Style" }, styleButtons),
    pinButton,
  ]);
  const status = h("div", { class: "iw-attn-status", "aria-live": "polite" });
  const note = h("div", { class: "iw-attn-note" });
  const strip = h("div", {
    class: "iw-attn-tokens",
    role: "listbox",
    "aria-label": "Tokens: hover to focus, click to lock, click again or Esc to unlock",
    tabindex: 0,
  });
  const keyStrip = h("div", { class: "iw-attn-tokens iw-attn-keys", "aria-label": "Key tokens" });
  const panels = h("div", { class: "iw-attn-panels" });
  const modelCanvas = h("canvas", { class: "iw-attn-model", role: "img" });
  const modelAxes = h("div", { class: "iw-attn-model-axes" });
  const modelBox = h("div", { class: "iw-attn-model-box" }, [modelAxes, modelCanvas]);
  const root = h("div", { class: "iw-root iw-attention", tabindex: -1 }, [
    toolbar,
    status,
    strip,
    keyStrip,
    panels,
    modelBox,
    note,
  ]);
  el.append(root);
  const tooltip = createTooltip(root);

  const cache = new Map(); // key -> {values, tq, tk}, most recent last
  const pinnedDense = new Map(); // key -> a pinned head made dense once (cleared when the data change)
  const painted = new WeakMap(); // entry -> {theme, image}: its heatmap pixels, painted once per theme
  const heatmapCanvases = []; // reused across redraws, one per panel slot
  const pending = new Map(); // key -> request id
  let nextId = 1;
  let answered = false;
  let kernelTimer = null;
  let noKernel = false;
  let spans = [];
  let keySpans = [];
  let shown = []; // [{label, values, exact, head}] painted in the head view
  let disposed = false;
  const started = performance.now();
  el.dataset.firstPaintMs = "";

  const remember = (key, entry) => {
    cache.delete(key);
    cache.set(key, entry);
    while (cache.size > CACHE) cache.delete(cache.keys().next().value);
  };
  /** Send to the kernel; a host with no kernel (an exported page, a reopened notebook) may throw or reject. */
  const sendToKernel = (message) => {
    try {
      const sent = model.send(message);
      if (sent && typeof sent.catch === "function") sent.catch(() => {});
    } catch {
      // no kernel: the pinned heads and the no-kernel note take over
    }
  };
  const pinnedIndex = (layer, head) =>
    data.pinned.findIndex((p) => p.layer === layer && String(p.head) === String(head));
  /** The weights of (layer, head): exact from the kernel, else the pinned top-k, else null (requested). */
  function pattern(layer, head) {
    const key = patternKey(layer, head);
    const hit = cache.get(key);
    if (hit) return hit;
    if (!pending.has(key)) {
      const id = nextId++;
      pending.set(key, id);
      sendToKernel({ type: "request", id, layer, head });
      if (!answered && kernelTimer === null) kernelTimer = setTimeout(() => { kernelTimer = null; if (!answered) { noKernel = true; request(1); } }, NO_KERNEL_MS); // prettier-ignore
    }
    const p = pinnedIndex(layer, head);
    if (p < 0) return null;
    if (!pinnedDense.has(key))
      pinnedDense.set(key, {
        values: denseFromTopK(
          data.keys.values,
          data.weights.values,
          p,
          data.tokens.length,
          data.keys.shape[2],
          data.keyTokens.length,
        ),
        tq: data.tokens.length,
        tk: data.keyTokens.length,
        exact: false,
      });
    return pinnedDense.get(key);
  }

  const onMessage = safely((msg, buffers) => {
    if (!msg || msg.type !== "pattern") {
      if (msg?.type === "pin-error") status.textContent = `Could not pin: ${msg.error}`;
      return;
    }
    answered = true;
    noKernel = false;
    const key = patternKey(msg.layer, msg.head);
    pending.delete(key);
    if (msg.error) {
      status.textContent = `The kernel could not send layer ${msg.layer} head ${msg.head}: ${msg.error}`;
      return;
    }
    const [tq, tk] = msg.shape;
    const values = decodeFloat16(buffers[0]);
    if (values.length !== tq * tk) throw new RangeError(`pattern of ${values.length} values for shape [${tq}, ${tk}]`);
    remember(key, { values, tq, tk, exact: true });
    request(1);
  });
  model.on("msg:custom", onMessage);

  const headLabel = (head) =>
    typeof head === "string"
      ? `${head} of layer`
      : `head ${head} (KV ${Math.floor(head / Math.max(1, Math.floor(data.heads / data.kvHeads)))})`;
  const currentHeads = () => {
    const agg = model.get("aggregate");
    if (agg) return [agg];
    const heads = (model.get("heads") ?? []).filter((x) => x >= 0 && x < data.heads);
    return heads.length ? heads : [0];
  };

  function buildControls() {
    layerSelect.replaceChildren(
      ...Array.from({ length: data.layers }, (_, l) =>
        h("option", { value: l }, `${l}${data.layerNames[l] ? ` · ${data.layerNames[l]}` : ""}`),
      ),
    );
    const perGroup = Math.max(1, Math.floor(data.heads / data.kvHeads));
    const groups = [];
    for (let g = 0; g < data.kvHeads; g += 1) {
      const boxes = [];
      for (let hd = g * perGroup; hd < Math.min(data.heads, (g + 1) * perGroup); hd += 1) {
        boxes.push(
          h("label", { class: "iw-head-choice", style: `--iw-head:${HEAD_COLOURS[hd % HEAD_COLOURS.length]}` }, [
            h("input", { type: "checkbox", "data-head": hd, "aria-label": `head ${hd}` }),
            String(hd),
          ]),
        );
      }
      groups.push(
        h("span", { class: "iw-kv-group", title: `query heads reading KV head ${g}` }, [
          h("span", { class: "iw-kv-label" }, data.kvHeads < data.heads ? `KV ${g}:` : ""),
          ...boxes,
        ]),
      );
    }
    headBox.replaceChildren(h("span", { class: "iw-kv-label" }, "heads "), ...groups);
  }

  function buildTokens() {
    const make = (tokens, cls) =>
      tokens.map((t, i) => h("span", { class: cls, "data-index": i, role: "option" }, displayToken(t)));
    spans = make(data.tokens, "iw-attn-token");
    tokensPainted = false;
    focusedSpan = null;
    spans.forEach((s, i) => data.generated[i] && s.classList.add("iw-generated"));
    strip.replaceChildren(...spans.flatMap((s, i) => (i ? [" ", s] : [s])));
    const cross = data.kind === "cross";
    keyStrip.hidden = !cross;
    keySpans = cross ? make(data.keyTokens, "iw-attn-token iw-attn-key") : spans;
    if (cross)
      keyStrip.replaceChildren(
        h("span", { class: "iw-kv-label" }, "keys: "),
        ...keySpans.flatMap((s, i) => (i ? [" ", s] : [s])),
      );
  }

  /** Colour the key tokens by the focused query's weights (mean over the heads shown). */
  let tokensPainted = false; // whether any key span carries a colour (else an unfocused redraw touches none)
  let focusedSpan = null;
  function paintTokens() {
    const focus = model.get("focus");
    const ready = shown.filter((s) => s.values);
    const row =
      focus >= 0 && ready.length
        ? combineHeads(
            ready.map((s) => s.values.subarray(focus * s.tk, (focus + 1) * s.tk)),
            "mean",
          )
        : null;
    let max = 0;
    if (row) for (let k = 0; k < row.length; k += 1) max = Math.max(max, row[k]);
    if (focusedSpan !== (spans[focus] ?? null)) {
      focusedSpan?.classList.remove("iw-focus");
      focusedSpan = spans[focus] ?? null;
      focusedSpan?.classList.add("iw-focus");
    }
    strip.classList.toggle("iw-locked", Boolean(model.get("locked")));
    if (!row && !tokensPainted) return;
    tokensPainted = Boolean(row);
    keySpans.forEach((span, k) => {
      if (!row) {
        span.style.backgroundColor = "";
        span.style.color = "";
        return;
      }
      const level = Math.min(255, Math.max(0, Math.round((row[k] / (max || 1)) * 255))) * 4;
      span.style.backgroundColor = `rgb(${lut[level]},${lut[level + 1]},${lut[level + 2]})`;
      span.style.color = level > 600 ? "#fff" : "";
    });
  }

  /** The entry's RGBA pixels for the current theme, painted once (a redraw or a focus change only copies them). */
  function imageOf(entry, ctx) {
    const hit = painted.get(entry);
    if (hit && hit.theme === theme) return hit.image;
    const image = ctx.createImageData(entry.tk, entry.tq);
    let max = 0;
    for (let i = 0; i < entry.values.length; i += 1) if (entry.values[i] > max) max = entry.values[i];
    paintWeights(image.data, entry.values, max, lut);
    painted.set(entry, { theme, image });
    return image;
  }

  /** One head's heatmap: queries down, keys across, with axis titles (and a label per token when they fit). */
  function drawHeatmap(panel, entry, slot) {
    const canvas =
      heatmapCanvases[slot] ?? (heatmapCanvases[slot] = h("canvas", { class: "iw-attn-heatmap", role: "img" }));
    if (canvas.width !== entry.tk) canvas.width = entry.tk;
    if (canvas.height !== entry.tq) canvas.height = entry.tq;
    canvas.setAttribute("aria-label", `${panel.label}: queries (rows) by keys (columns)`);
    const cssWidth = Math.max(120, Math.min(shown.length > 1 ? 300 : 560, entry.tk * 24));
    const cssHeight = (cssWidth * entry.tq) / entry.tk;
    canvas.style.width = `${cssWidth}px`;
    canvas.style.height = `${cssHeight}px`;
    const ctx = canvas.getContext?.("2d");
    if (ctx) {
      ctx.putImageData(imageOf(entry, ctx), 0, 0);
      const focus = model.get("focus");
      if (focus >= 0 && focus < entry.tq) {
        ctx.fillStyle = theme === "dark" ? "rgba(255,255,255,0.35)" : "rgba(0,0,0,0.25)";
        ctx.fillRect(0, focus, entry.tk, Math.max(1, entry.tq / 300));
      }
    }
    canvas.dataset.head = String(panel.head);
    canvas.dataset.source = entry.exact ? "kernel" : "pinned";
    const queryNames = data.tokens;
    const keyNames = data.kind === "cross" ? data.keyTokens : data.tokens;
    const range = (n) => (n > 1 ? ` 0–${n - 1}` : " 0");
    const rowTicks = cssHeight / entry.tq >= TICK_ROW && entry.tq === queryNames.length
      ? h("div", { class: "iw-attn-ticks-y", "aria-hidden": "true" }, queryNames.map((t, q) => h("div", { style: `height:${cssHeight / entry.tq}px;line-height:${cssHeight / entry.tq}px`, "data-index": q }, displayToken(t))))
      : null; // prettier-ignore
    const columnWidth = cssWidth / entry.tk;
    const columnTicks = columnWidth >= TICK_COLUMN && entry.tk === keyNames.length
      ? h("div", { class: "iw-attn-ticks-x", "aria-hidden": "true" }, keyNames.map((t) => h("div", { style: `width:${columnWidth}px` }, displayToken(t).slice(0, Math.max(1, Math.floor(columnWidth / 7))))))
      : null; // prettier-ignore
    return h("div", { class: "iw-attn-plot" }, [
      h("div", { class: "iw-attn-axis iw-attn-axis-y" }, `queries${range(entry.tq)} ↓`),
      h("div", { class: "iw-attn-axis iw-attn-axis-x" }, `keys${range(entry.tk)} →`),
      rowTicks ?? h("div", { class: "iw-attn-ticks-y" }),
      h("div", { class: "iw-attn-canvas-box" }, columnTicks ? [canvas, columnTicks] : [canvas]),
    ]); // prettier-ignore
  }

  function drawLines(entries) {
    const tq = data.tokens.length;
    const tk = data.keyTokens.length;
    const rows = Math.max(tq, tk);
    const width = 180;
    const canvas = h("canvas", { class: "iw-attn-lines", width, height: rows * ROW });
    const left = h(
      "div",
      { class: "iw-attn-col" },
      data.tokens.map((t, i) => h("div", { class: "iw-attn-row", "data-index": i }, displayToken(t))),
    );
    const right = h(
      "div",
      { class: "iw-attn-col" },
      data.keyTokens.map((t) => h("div", { class: "iw-attn-row" }, displayToken(t))),
    );
    const header = h("div", { class: "iw-attn-linesheader" }, [
      h("span", { class: "iw-attn-axis" }, "queries"),
      h("span", { class: "iw-attn-axis" }, "keys"),
    ]);
    const ctx = canvas.getContext?.("2d");
    const focus = model.get("focus");
    let drawn = 0;
    if (ctx) {
      for (const entry of entries) {
        ctx.strokeStyle = typeof entry.head === "number" ? HEAD_COLOURS[entry.head % HEAD_COLOURS.length] : "#e66101";
        for (const [q, k, w] of lineSegments(entry.values, entry.tq, entry.tk, focus, 0.05)) {
          ctx.globalAlpha = Math.min(1, w);
          ctx.lineWidth = 0.5 + 2 * w;
          ctx.beginPath();
          ctx.moveTo(0, q * ROW + ROW / 2);
          ctx.lineTo(width, k * ROW + ROW / 2);
          ctx.stroke();
          drawn += 1;
        }
      }
      ctx.globalAlpha = 1;
    }
    canvas.dataset.lines = String(drawn);
    const box = h("div", { class: "iw-attn-linesbox" }, [left, canvas, right]);
    const caption = h(
      "div",
      { class: "iw-attn-linescaption" },
      `layer ${model.get("layer")}${data.layerNames[model.get("layer")] ? ` (${data.layerNames[model.get("layer")]})` : ""}, ${entries.map((e) => headLabel(e.head)).join(", ")}`,
    );
    if (focus < 0 && tq > 200)
      return [
        caption,
        h(
          "div",
          { class: "iw-attn-hint" },
          `Hover or click a token to draw its lines (${tq} queries are too many to draw at once).`,
        ),
        header,
        box,
      ];
    return [caption, header, box];
  }

  function drawHeadView() {
    const layer = model.get("layer");
    const heads = currentHeads();
    shown = heads.map((head) => {
      const entry = pattern(layer, head);
      return {
        label: `layer ${layer}${data.layerNames[layer] ? ` (${data.layerNames[layer]})` : ""}, ${headLabel(head)}`,
        head,
        entry,
        ...(entry ?? { values: null, tq: 0, tk: 0, exact: false }),
      };
    });
    const ready = shown.filter((s) => s.values);
    if (model.get("pattern_style") === "lines" && ready.length) {
      panels.replaceChildren(...drawLines(ready));
    } else {
      panels.replaceChildren(...shown.map((panel, slot) => h("figure", { class: "iw-attn-panel" }, [
        h("figcaption", {}, `${panel.label}${panel.values && !panel.exact ? ` · pinned: top ${data.topK} keys per query` : ""}`),
        panel.values ? drawHeatmap(panel, panel.entry, slot) : h("div", { class: "iw-attn-loading" }, noKernel ? "Not saved: only pinned heads are kept without a kernel. Run the cell to explore every head." : "Loading from the kernel…"),
      ]))); // prettier-ignore
    }
    const missing = shown.length - ready.length;
    const focus = model.get("focus");
    const focusText =
      focus >= 0
        ? ` Focus: ${quoteToken(data.tokens[focus])} (#${focus})${model.get("locked") ? ", locked (click it again or press Esc to unlock)" : ""}.`
        : " Hover a token to focus it, click to lock.";
    status.textContent = `${data.kind} attention, layer ${layer} of ${data.layers}, ${heads.map(headLabel).join(", ")}${missing ? ` (${missing} loading)` : ""}.${focusText}`;
    if (ready.length === shown.length && !el.dataset.firstPaintMs)
      el.dataset.firstPaintMs = (performance.now() - started).toFixed(1);
    paintTokens();
  }

  let grid = null;
  function drawModelView() {
    const s = data.thumbs.shape[2] || 1;
    const cell = Math.max(12, Math.min(40, s * 2));
    grid = gridLayout({ layers: data.layers, heads: data.heads, kvHeads: data.kvHeads, cell });
    modelCanvas.width = grid.width;
    modelCanvas.height = grid.height;
    modelAxes.textContent = `Rows: layers 0–${data.layers - 1} (L). Columns: query heads 0–${data.heads - 1} (h)${data.kvHeads < data.heads ? `, in ${data.kvHeads} KV-head group${data.kvHeads > 1 ? "s" : ""}` : ""}. Each thumbnail: queries down, keys across.`;
    const ctx = modelCanvas.getContext?.("2d");
    if (!ctx) return;
    ctx.clearRect(0, 0, grid.width, grid.height);
    ctx.fillStyle = theme === "dark" ? "#ddd" : "#333";
    ctx.font = "10px sans-serif";
    for (let hd = 0; hd < data.heads; hd += 1) ctx.fillText(`h${hd}`, grid.x(hd), 10);
    const image = ctx.createImageData(s, s);
    const scratch = doc.createElement("canvas");
    scratch.width = s;
    scratch.height = s;
    const sctx = scratch.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    const values = new Float32Array(s * s);
    for (let layer = 0; layer < data.layers; layer += 1) {
      ctx.fillText(`L${layer}`, 2, grid.y(layer) + cell / 2 + 3);
      for (let hd = 0; hd < data.heads; hd += 1) {
        const base = (layer * data.heads + hd) * s * s;
        for (let i = 0; i < s * s; i += 1) values[i] = data.thumbs.values[base + i] / 127;
        paintWeights(image.data, values, 1, lut);
        sctx.putImageData(image, 0, 0);
        ctx.drawImage(scratch, grid.x(hd), grid.y(layer), cell, cell);
      }
    }
    const layer = model.get("layer");
    ctx.strokeStyle = theme === "dark" ? "#fff" : "#000";
    for (const hd of currentHeads())
      if (typeof hd === "number") ctx.strokeRect(grid.x(hd) - 1, grid.y(layer) - 1, cell + 2, cell + 2);
    status.textContent = `Model view: ${data.layers} layers × ${data.heads} heads (${data.kvHeads} KV heads), each head max-pooled to ${s} × ${s}. Click a head to open it.`;
  }

  function draw() {
    root.dataset.iwTheme = theme; // the theme the canvases were drawn for (tests and the CSS read it)
    const view = model.get("view") === "model" ? "model" : "head";
    viewButtons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.view === view)));
    layerSelect.value = String(model.get("layer"));
    const agg = model.get("aggregate");
    aggButtons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.aggregate === agg)));
    styleButtons.forEach((b) =>
      b.setAttribute("aria-pressed", String(b.dataset.style === (model.get("pattern_style") || "heatmap"))),
    );
    const heads = new Set(agg ? [] : currentHeads());
    for (const box of headBox.querySelectorAll("input[data-head]")) box.checked = heads.has(Number(box.dataset.head));
    const pinnedNow = pinnedIndex(model.get("layer"), currentHeads()[0]) >= 0 && currentHeads().length === 1;
    pinButton.textContent = pinnedNow ? "Unpin" : "Pin";
    pinButton.disabled = currentHeads().length !== 1;
    const list = data.pinned
      .map((p) => `layer ${p.layer} ${typeof p.head === "string" ? p.head : `head ${p.head}`}`)
      .join(", ");
    note.textContent = `Saved notebooks and exported pages keep only the pinned heads, as their top ${data.topK} keys per query (other weights dropped), plus the model-view thumbnails. Pinned: ${list || "none"}.${noKernel ? " No kernel is answering, so only pinned heads can be shown." : ""}`;
    panels.hidden = strip.hidden = view !== "head";
    keyStrip.hidden = view !== "head" || data.kind !== "cross";
    modelBox.hidden = view !== "model";
    if (view === "head") drawHeadView();
    else drawModelView();
  }

  const request = coalesce((level) => {
    if (disposed) return;
    if (level === 2) {
      data = readAttention(model);
      cache.clear();
      pinnedDense.clear();
      buildControls();
      buildTokens();
    }
    draw();
  });

  // focus: hover / click to lock / click again or Esc to unlock
  const setFocus = (action) => {
    const next = nextFocus({ focus: model.get("focus"), locked: Boolean(model.get("locked")) }, action);
    if (next.focus !== model.get("focus") || next.locked !== Boolean(model.get("locked"))) save(next);
  };
  const tokenOf = (event) => {
    const span =
      event.target instanceof Element ? event.target.closest(".iw-attn-token, .iw-attn-row[data-index]") : null;
    return span && !span.classList.contains("iw-attn-key") ? Number(span.dataset.index) : -1;
  };
  const onHover = safely((event) => {
    const i = tokenOf(event);
    if (i >= 0) setFocus({ type: "hover", token: i });
  });
  const onClick = safely((event) => {
    const i = tokenOf(event);
    if (i >= 0) setFocus({ type: "click", token: i });
  });
  for (const box of [strip, panels]) {
    box.addEventListener("mouseover", onHover);
    box.addEventListener("click", onClick);
  }
  strip.addEventListener(
    "mouseleave",
    safely(() => setFocus({ type: "leave" })),
  );
  root.addEventListener("keydown", safely((event) => {
    if (event.key !== "Escape") return;
    setFocus({ type: "escape" });
    tooltip.hide();
    event.preventDefault();
  })); // prettier-ignore
  const heatmapEvent = (event) => {
    const canvas =
      event.target instanceof HTMLCanvasElement && event.target.classList.contains("iw-attn-heatmap")
        ? event.target
        : null;
    if (!canvas) return null;
    const box = canvas.getBoundingClientRect();
    const entry = shown.find((s) => String(s.head) === canvas.dataset.head);
    if (!entry?.values || !box.width) return null;
    const cell = heatmapCellAt(
      ((event.clientX - box.left) / box.width) * entry.tk,
      ((event.clientY - box.top) / box.height) * entry.tq,
      { tq: entry.tq, tk: entry.tk, scale: 1 },
    );
    return cell && { canvas, entry, cell };
  };
  panels.addEventListener("mousemove", safely((event) => {
    const hit = heatmapEvent(event);
    if (!hit) return;
    const { canvas, entry, cell } = hit;
    tooltip.show(canvas, [["query", `${quoteToken(data.tokens[cell.query])} (#${cell.query})`], ["key", `${quoteToken(data.keyTokens[cell.key])} (#${cell.key})`], ["weight", entry.values[cell.query * entry.tk + cell.key].toFixed(4)]]);
  })); // prettier-ignore
  panels.addEventListener("mouseleave", () => tooltip.hide());
  panels.addEventListener("click", safely((event) => {
    const hit = heatmapEvent(event);
    if (hit) setFocus({ type: "click", token: hit.cell.query });
  })); // prettier-ignore
  modelCanvas.addEventListener("click", safely((event) => {
    const box = modelCanvas.getBoundingClientRect();
    const cell = grid && gridCellAt(((event.clientX - box.left) * modelCanvas.width) / (box.width || 1), ((event.clientY - box.top) * modelCanvas.height) / (box.height || 1), grid);
    if (cell) save({ view: "head", layer: cell.layer, heads: [cell.head], aggregate: "" });
  })); // prettier-ignore
  modelCanvas.addEventListener("mousemove", safely((event) => {
    const box = modelCanvas.getBoundingClientRect();
    const cell = grid && gridCellAt(((event.clientX - box.left) * modelCanvas.width) / (box.width || 1), ((event.clientY - box.top) * modelCanvas.height) / (box.height || 1), grid);
    if (!cell) return tooltip.hide();
    tooltip.show(modelCanvas, [["layer", String(cell.layer)], ["head", headLabel(cell.head)]]);
  })); // prettier-ignore
  viewButtons.forEach((b) =>
    b.addEventListener(
      "click",
      safely(() => save({ view: b.dataset.view })),
    ),
  );
  styleButtons.forEach((b) =>
    b.addEventListener(
      "click",
      safely(() => save({ pattern_style: b.dataset.style })),
    ),
  );
  aggButtons.forEach((b) =>
    b.addEventListener(
      "click",
      safely(() => save({ aggregate: model.get("aggregate") === b.dataset.aggregate ? "" : b.dataset.aggregate })),
    ),
  );
  layerSelect.addEventListener(
    "change",
    safely(() => save({ layer: Number(layerSelect.value) })),
  );
  headBox.addEventListener("change", safely((event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || box.dataset.head === undefined) return;
    const head = Number(box.dataset.head);
    const current = model.get("aggregate") ? [] : currentHeads();
    const next = box.checked ? [...new Set([...current, head])].sort((a, b) => a - b) : current.filter((x) => x !== head);
    save({ heads: next.length ? next : [head], aggregate: "" });
  })); // prettier-ignore
  pinButton.addEventListener("click", safely(() => {
    const head = currentHeads()[0];
    const layer = model.get("layer");
    sendToKernel({ type: pinnedIndex(layer, head) >= 0 ? "unpin" : "pin", layer, head });
  })); // prettier-ignore

  // export: the view as PNG/SVG (what is on screen), the shown heads' weights as CSV (every non-zero weight) and
  // an HTML page (the picture, and each query's top keys as a table); token text goes in as text, never markup
  const exportHeads = () => shown.filter((s) => s.values);
  const exportHeader = ["layer", "layer_name", "head", "source", "query", "query_token", "key", "key_token", "weight"];
  const exportRow = (s, q, k) => [
    model.get("layer"),
    data.layerNames[model.get("layer")] ?? "",
    String(s.head),
    s.exact ? "kernel" : `pinned top-${data.topK}`,
    q,
    data.tokens[q],
    k,
    data.keyTokens[k],
    s.values[q * s.tk + k],
  ];
  const csvRows = () => {
    const rows = [exportHeader];
    for (const s of exportHeads()) {
      for (let q = 0; q < s.tq; q += 1)
        for (let k = 0; k < s.tk; k += 1) if (s.values[q * s.tk + k] > 0) rows.push(exportRow(s, q, k));
    }
    return rows;
  };
  const tableRows = () => {
    const rows = [[...exportHeader.slice(0, 6), "rank", ...exportHeader.slice(6)]];
    for (const s of exportHeads()) {
      for (let q = 0; q < s.tq; q += 1) {
        const order = Array.from({ length: s.tk }, (_, k) => k).filter((k) => s.values[q * s.tk + k] > 0);
        order.sort((a, b) => s.values[q * s.tk + b] - s.values[q * s.tk + a] || a - b);
        order.slice(0, HTML_TOP_KEYS).forEach((k, rank) => {
          const row = exportRow(s, q, k);
          rows.push([...row.slice(0, 6), rank + 1, ...row.slice(6)]);
        });
      }
    }
    return rows;
  };
  const exportTitle = () =>
    `${data.kind} attention${data.modelName ? ` of ${data.modelName}` : ""}: layer ${model.get("layer")}, ${currentHeads().map(headLabel).join(", ")}${model.get("view") === "model" ? " (model view)" : ""}`;
  toolbar.append(
    createExportMenu({ name: "attention", root, rows: csvRows, tableRows, title: exportTitle, reportError }),
  );

  const onData = () => request(2);
  const onView = () => request(1);
  for (const name of DATA_TRAITS) model.on(`change:${name}`, onData);
  for (const name of VIEW_TRAITS) model.on(`change:${name}`, onView);
  const stopWatchingTheme = watchTheme(doc, (next) => {
    theme = next;
    lut = weightRamp(theme);
    request(1);
  });
  buildControls();
  buildTokens();
  draw();
  return () => {
    disposed = true;
    if (kernelTimer !== null) clearTimeout(kernelTimer);
    model.off("msg:custom", onMessage);
    for (const name of DATA_TRAITS) model.off(`change:${name}`, onData);
    for (const name of VIEW_TRAITS) model.off(`change:${name}`, onView);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("AttentionWidget", renderAttention) };
