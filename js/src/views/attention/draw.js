/**
 * Attention, draw: the head view (heatmaps or lines of the heads shown, the token strip coloured by the focused
 * query), the model view (every head's thumbnail), the layer / head controls and the status lines. Keeps in
 * `ctx.state`: `lut` (colour ramp of the theme), `painted` (entry -> its heatmap pixels per theme),
 * `heatmapCanvases` (one per panel slot, reused), `spans` / `keySpans` (token strips), `shown` (the heads painted),
 * `tokensPainted`, `focusedSpan`, `grid` (model-view layout), `started` (for the first-paint time).
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { combineHeads, gridLayout, lineSegments, paintWeights, weightRamp } from "../../lib/attention_math.js";
import { h } from "../../lib/dom.js";
import { displayToken, quoteToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";
import { forgetPatterns, pattern, pinnedIndex } from "./patterns.js";

export const HEAD_COLOURS = [
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

/** A head's label ("head 3 (KV 1)", or "mean of layer"). */
export const headLabel = ({ data }, head) =>
  typeof head === "string"
    ? `${head} of layer`
    : `head ${head} (KV ${Math.floor(head / Math.max(1, Math.floor(data.heads / data.kvHeads)))})`;
/** The heads shown: the aggregation chosen, else the heads ticked (head 0 if none). */
export const currentHeads = (ctx) => {
  const agg = ctx.model.get("aggregate");
  if (agg) return [agg];
  const heads = (ctx.model.get("heads") ?? []).filter((x) => x >= 0 && x < ctx.data.heads);
  return heads.length ? heads : [0];
};

function buildControls(ctx) {
  const { parts } = ctx;
  parts.layerSelect.replaceChildren(
    ...Array.from({ length: ctx.data.layers }, (_, l) =>
      h("option", { value: l }, `${l}${ctx.data.layerNames[l] ? ` · ${ctx.data.layerNames[l]}` : ""}`),
    ),
  );
  const perGroup = Math.max(1, Math.floor(ctx.data.heads / ctx.data.kvHeads));
  const groups = [];
  for (let g = 0; g < ctx.data.kvHeads; g += 1) {
    const boxes = [];
    for (let hd = g * perGroup; hd < Math.min(ctx.data.heads, (g + 1) * perGroup); hd += 1) {
      boxes.push(
        h("label", { class: "iw-head-choice", style: `--iw-head:${HEAD_COLOURS[hd % HEAD_COLOURS.length]}` }, [
          h("input", { type: "checkbox", "data-head": hd, "aria-label": `head ${hd}` }),
          String(hd),
        ]),
      );
    }
    groups.push(
      h("span", { class: "iw-kv-group", title: `query heads reading KV head ${g}` }, [
        h("span", { class: "iw-kv-label" }, ctx.data.kvHeads < ctx.data.heads ? `KV ${g}:` : ""),
        ...boxes,
      ]),
    );
  }
  parts.headBox.replaceChildren(h("span", { class: "iw-kv-label" }, "heads "), ...groups);
}

function buildTokens(ctx) {
  const { state, parts } = ctx;
  const make = (tokens, cls) =>
    tokens.map((t, i) => h("span", { class: cls, "data-index": i, role: "option" }, displayToken(t)));
  state.spans = make(ctx.data.tokens, "iw-attn-token");
  state.tokensPainted = false;
  state.focusedSpan = null;
  state.spans.forEach((s, i) => ctx.data.generated[i] && s.classList.add("iw-generated"));
  parts.strip.replaceChildren(...state.spans.flatMap((s, i) => (i ? [" ", s] : [s])));
  const cross = ctx.data.kind === "cross";
  parts.keyStrip.hidden = !cross;
  state.keySpans = cross ? make(ctx.data.keyTokens, "iw-attn-token iw-attn-key") : state.spans;
  if (cross)
    parts.keyStrip.replaceChildren(
      h("span", { class: "iw-kv-label" }, "keys: "),
      ...state.keySpans.flatMap((s, i) => (i ? [" ", s] : [s])),
    );
}

/**
 * Colour the key tokens by the focused query's weights (mean over the heads shown). `state.tokensPainted`: whether
 * any key span carries a colour (else an unfocused redraw touches none).
 */
function paintTokens(ctx) {
  const { state, parts } = ctx;
  const focus = ctx.model.get("focus");
  const ready = state.shown.filter((s) => s.values);
  const row =
    focus >= 0 && ready.length
      ? combineHeads(
          ready.map((s) => s.values.subarray(focus * s.tk, (focus + 1) * s.tk)),
          "mean",
        )
      : null;
  let max = 0;
  if (row) for (let k = 0; k < row.length; k += 1) max = Math.max(max, row[k]);
  if (state.focusedSpan !== (state.spans[focus] ?? null)) {
    state.focusedSpan?.classList.remove("iw-focus");
    state.focusedSpan = state.spans[focus] ?? null;
    state.focusedSpan?.classList.add("iw-focus");
  }
  parts.strip.classList.toggle("iw-locked", Boolean(ctx.model.get("locked")));
  if (!row && !state.tokensPainted) return;
  state.tokensPainted = Boolean(row);
  state.keySpans.forEach((span, k) => {
    if (!row) {
      span.style.backgroundColor = "";
      span.style.color = "";
      return;
    }
    const level = Math.min(255, Math.max(0, Math.round((row[k] / (max || 1)) * 255))) * 4;
    span.style.backgroundColor = `rgb(${state.lut[level]},${state.lut[level + 1]},${state.lut[level + 2]})`;
    span.style.color = level > 600 ? "#fff" : "";
  });
}

/** The entry's RGBA pixels for the current theme, painted once (a redraw or a focus change only copies them). */
function imageOf(ctx, entry, g2) {
  const { state } = ctx;
  const hit = state.painted.get(entry);
  if (hit && hit.theme === ctx.theme) return hit.image;
  const image = g2.createImageData(entry.tk, entry.tq);
  let max = 0;
  for (let i = 0; i < entry.values.length; i += 1) if (entry.values[i] > max) max = entry.values[i];
  paintWeights(image.data, entry.values, max, state.lut);
  state.painted.set(entry, { theme: ctx.theme, image });
  return image;
}

/** One head's heatmap: queries down, keys across, with axis titles (and a label per token when they fit). */
function drawHeatmap(ctx, panel, entry, slot) {
  const { state } = ctx;
  const canvas =
    state.heatmapCanvases[slot] ??
    (state.heatmapCanvases[slot] = h("canvas", { class: "iw-attn-heatmap", role: "img" }));
  if (canvas.width !== entry.tk) canvas.width = entry.tk;
  if (canvas.height !== entry.tq) canvas.height = entry.tq;
  canvas.setAttribute("aria-label", `${panel.label}: queries (rows) by keys (columns)`);
  const cssWidth = Math.max(120, Math.min(state.shown.length > 1 ? 300 : 560, entry.tk * 24));
  const cssHeight = (cssWidth * entry.tq) / entry.tk;
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  const g2 = canvas.getContext?.("2d");
  if (g2) {
    g2.putImageData(imageOf(ctx, entry, g2), 0, 0);
    const focus = ctx.model.get("focus");
    if (focus >= 0 && focus < entry.tq) {
      g2.fillStyle = ctx.theme === "dark" ? "rgba(255,255,255,0.35)" : "rgba(0,0,0,0.25)";
      g2.fillRect(0, focus, entry.tk, Math.max(1, entry.tq / 300));
    }
  }
  canvas.dataset.head = String(panel.head);
  canvas.dataset.source = entry.exact ? "kernel" : "pinned";
  const queryNames = ctx.data.tokens;
  const keyNames = ctx.data.kind === "cross" ? ctx.data.keyTokens : ctx.data.tokens;
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

function drawLines(ctx, entries) {
  const tq = ctx.data.tokens.length;
  const tk = ctx.data.keyTokens.length;
  const rows = Math.max(tq, tk);
  const width = 180;
  const canvas = h("canvas", { class: "iw-attn-lines", width, height: rows * ROW });
  const left = h(
    "div",
    { class: "iw-attn-col" },
    ctx.data.tokens.map((t, i) => h("div", { class: "iw-attn-row", "data-index": i }, displayToken(t))),
  );
  const right = h(
    "div",
    { class: "iw-attn-col" },
    ctx.data.keyTokens.map((t) => h("div", { class: "iw-attn-row" }, displayToken(t))),
  );
  const header = h("div", { class: "iw-attn-linesheader" }, [
    h("span", { class: "iw-attn-axis" }, "queries"),
    h("span", { class: "iw-attn-axis" }, "keys"),
  ]);
  const g2 = canvas.getContext?.("2d");
  const focus = ctx.model.get("focus");
  let drawn = 0;
  if (g2) {
    for (const entry of entries) {
      g2.strokeStyle = typeof entry.head === "number" ? HEAD_COLOURS[entry.head % HEAD_COLOURS.length] : "#e66101";
      for (const [q, k, w] of lineSegments(entry.values, entry.tq, entry.tk, focus, 0.05)) {
        g2.globalAlpha = Math.min(1, w);
        g2.lineWidth = 0.5 + 2 * w;
        g2.beginPath();
        g2.moveTo(0, q * ROW + ROW / 2);
        g2.lineTo(width, k * ROW + ROW / 2);
        g2.stroke();
        drawn += 1;
      }
    }
    g2.globalAlpha = 1;
  }
  canvas.dataset.lines = String(drawn);
  const box = h("div", { class: "iw-attn-linesbox" }, [left, canvas, right]);
  const caption = h(
    "div",
    { class: "iw-attn-linescaption" },
    `layer ${ctx.model.get("layer")}${ctx.data.layerNames[ctx.model.get("layer")] ? ` (${ctx.data.layerNames[ctx.model.get("layer")]})` : ""}, ${entries.map((e) => headLabel(ctx, e.head)).join(", ")}`,
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

function drawHeadView(ctx) {
  const { state, parts } = ctx;
  const layer = ctx.model.get("layer");
  const heads = currentHeads(ctx);
  state.shown = heads.map((head) => {
    const entry = pattern(ctx, layer, head);
    return {
      label: `layer ${layer}${ctx.data.layerNames[layer] ? ` (${ctx.data.layerNames[layer]})` : ""}, ${headLabel(ctx, head)}`,
      head,
      entry,
      ...(entry ?? { values: null, tq: 0, tk: 0, exact: false }),
    };
  });
  const ready = state.shown.filter((s) => s.values);
  if (ctx.model.get("pattern_style") === "lines" && ready.length) {
    parts.panels.replaceChildren(...drawLines(ready));
  } else {
    parts.panels.replaceChildren(...state.shown.map((panel, slot) => h("figure", { class: "iw-attn-panel" }, [
      h("figcaption", {}, `${panel.label}${panel.values && !panel.exact ? ` · pinned: top ${ctx.data.topK} keys per query` : ""}`),
      panel.values ? drawHeatmap(ctx, panel, panel.entry, slot) : h("div", { class: "iw-attn-loading" }, state.noKernel ? "Not saved: only pinned heads are kept without a kernel. Run the cell to explore every head." : "Loading from the kernel…"),
    ]))); // prettier-ignore
  }
  const missing = state.shown.length - ready.length;
  const focus = ctx.model.get("focus");
  const focusText =
    focus >= 0
      ? ` Focus: ${quoteToken(ctx.data.tokens[focus])} (#${focus})${ctx.model.get("locked") ? ", locked (click it again or press Esc to unlock)" : ""}.`
      : " Hover a token to focus it, click to lock.";
  parts.status.textContent = `${ctx.data.kind} attention, layer ${layer} of ${ctx.data.layers}, ${heads.map((head) => headLabel(ctx, head)).join(", ")}${missing ? ` (${missing} loading)` : ""}.${focusText}`;
  if (ready.length === state.shown.length && !ctx.el.dataset.firstPaintMs)
    ctx.el.dataset.firstPaintMs = (performance.now() - state.started).toFixed(1);
  paintTokens(ctx);
}

function drawModelView(ctx) {
  const { state, parts } = ctx;
  const s = ctx.data.thumbs.shape[2] || 1;
  const cell = Math.max(12, Math.min(40, s * 2));
  state.grid = gridLayout({ layers: ctx.data.layers, heads: ctx.data.heads, kvHeads: ctx.data.kvHeads, cell });
  parts.modelCanvas.width = state.grid.width;
  parts.modelCanvas.height = state.grid.height;
  parts.modelAxes.textContent = `Rows: layers 0–${ctx.data.layers - 1} (L). Columns: query heads 0–${ctx.data.heads - 1} (h)${ctx.data.kvHeads < ctx.data.heads ? `, in ${ctx.data.kvHeads} KV-head group${ctx.data.kvHeads > 1 ? "s" : ""}` : ""}. Each thumbnail: queries down, keys across.`;
  const g2 = parts.modelCanvas.getContext?.("2d");
  if (!g2) return;
  g2.clearRect(0, 0, state.grid.width, state.grid.height);
  g2.fillStyle = ctx.theme === "dark" ? "#ddd" : "#333";
  g2.font = "10px sans-serif";
  for (let hd = 0; hd < ctx.data.heads; hd += 1) g2.fillText(`h${hd}`, state.grid.x(hd), 10);
  const image = g2.createImageData(s, s);
  const scratch = ctx.doc.createElement("canvas");
  scratch.width = s;
  scratch.height = s;
  const sctx = scratch.getContext("2d");
  g2.imageSmoothingEnabled = false;
  const values = new Float32Array(s * s);
  for (let layer = 0; layer < ctx.data.layers; layer += 1) {
    g2.fillText(`L${layer}`, 2, state.grid.y(layer) + cell / 2 + 3);
    for (let hd = 0; hd < ctx.data.heads; hd += 1) {
      const base = (layer * ctx.data.heads + hd) * s * s;
      for (let i = 0; i < s * s; i += 1) values[i] = ctx.data.thumbs.values[base + i] / 127;
      paintWeights(image.data, values, 1, state.lut);
      sctx.putImageData(image, 0, 0);
      g2.drawImage(scratch, state.grid.x(hd), state.grid.y(layer), cell, cell);
    }
  }
  const layer = ctx.model.get("layer");
  g2.strokeStyle = ctx.theme === "dark" ? "#fff" : "#000";
  for (const hd of currentHeads(ctx))
    if (typeof hd === "number") g2.strokeRect(state.grid.x(hd) - 1, state.grid.y(layer) - 1, cell + 2, cell + 2);
  parts.status.textContent = `Model view: ${ctx.data.layers} layers × ${ctx.data.heads} heads (${ctx.data.kvHeads} KV heads), each head max-pooled to ${s} × ${s}. Click a head to open it.`;
}

/**
 * Paint from the state; on REREAD (new data) the pattern caches are emptied and the layer / head controls and the
 * token strips rebuilt first.
 * @param {import("../../lib/view.js").ViewContext} ctx
 */
export function draw(ctx, level) {
  const { state, parts } = ctx;
  if (level >= REREAD) {
    forgetPatterns(ctx);
    buildControls(ctx);
    buildTokens(ctx);
  }
  parts.root.dataset.iwTheme = ctx.theme; // the theme the canvases were drawn for (tests and the CSS read it)
  const view = ctx.model.get("view") === "model" ? "model" : "head";
  parts.viewButtons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.view === view)));
  parts.layerSelect.value = String(ctx.model.get("layer"));
  const agg = ctx.model.get("aggregate");
  parts.aggButtons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.aggregate === agg)));
  parts.styleButtons.forEach((b) =>
    b.setAttribute("aria-pressed", String(b.dataset.style === (ctx.model.get("pattern_style") || "heatmap"))),
  );
  const heads = new Set(agg ? [] : currentHeads(ctx));
  for (const box of parts.headBox.querySelectorAll("input[data-head]"))
    box.checked = heads.has(Number(box.dataset.head));
  const pinnedNow =
    pinnedIndex(ctx, ctx.model.get("layer"), currentHeads(ctx)[0]) >= 0 && currentHeads(ctx).length === 1;
  parts.pinButton.textContent = pinnedNow ? "Unpin" : "Pin";
  parts.pinButton.disabled = currentHeads(ctx).length !== 1;
  const list = ctx.data.pinned
    .map((p) => `layer ${p.layer} ${typeof p.head === "string" ? p.head : `head ${p.head}`}`)
    .join(", ");
  parts.note.textContent = `Saved notebooks and exported pages keep only the pinned heads, as their top ${ctx.data.topK} keys per query (other weights dropped), plus the model-view thumbnails. Pinned: ${list || "none"}.${state.noKernel ? " No kernel is answering, so only pinned heads can be shown." : ""}`;
  parts.panels.hidden = parts.strip.hidden = view !== "head";
  parts.keyStrip.hidden = view !== "head" || ctx.data.kind !== "cross";
  parts.modelBox.hidden = view !== "model";
  if (view === "head") drawHeadView(ctx);
  else drawModelView(ctx);
}

/** A theme change recolours: the weight ramp of the new theme (the heatmaps repaint once for it). */
export function onTheme(ctx) {
  ctx.state.lut = weightRamp(ctx.theme);
}
