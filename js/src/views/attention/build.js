/**
 * Attention, build: the toolbar (view, layer, heads by KV group, aggregation, style, pin), the token strips, the
 * panels and the model-view canvas, and their handlers (hover focuses a query token, a click locks it, Esc
 * unlocks; a model-view click opens a head; pin / unpin asks the kernel), and the export menu.
 *
 * @example
 *   const parts = build(ctx);
 */
import { gridCellAt, heatmapCellAt, nextFocus, weightRamp } from "../../lib/attention_math.js";
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { quoteToken } from "../../lib/text.js";
import { createTooltip } from "../../lib/tooltip.js";
import { currentHeads, headLabel } from "./draw.js";
import { listenForPatterns, patternState, pinnedIndex, sendToKernel } from "./patterns.js";

/** Top keys per query listed in the HTML export's table (the CSV has every non-zero weight). */
const HTML_TOP_KEYS = 5;

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, state, safely, save, reportError } = ctx;
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
  Object.assign(state, patternState(), {
    lut: weightRamp(ctx.theme),
    painted: new WeakMap(), // entry -> {theme, image}: its heatmap pixels, painted once per theme
    heatmapCanvases: [], // reused across redraws, one per panel slot
    spans: [],
    keySpans: [],
    shown: [], // [{label, values, exact, head}] painted in the head view
    tokensPainted: false,
    focusedSpan: null,
    grid: null,
    started: performance.now(),
  });
  el.dataset.firstPaintMs = "";
  const parts = { root, toolbar, viewButtons, layerSelect, headBox, aggButtons, styleButtons, pinButton, status, note, strip, keyStrip, panels, modelCanvas, modelAxes, modelBox, tooltip }; // prettier-ignore
  ctx.parts = parts; // the kernel's answers may write to the status line
  listenForPatterns(ctx);

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
    const entry = state.shown.find((s) => String(s.head) === canvas.dataset.head);
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
    tooltip.show(canvas, [["query", `${quoteToken(ctx.data.tokens[cell.query])} (#${cell.query})`], ["key", `${quoteToken(ctx.data.keyTokens[cell.key])} (#${cell.key})`], ["weight", entry.values[cell.query * entry.tk + cell.key].toFixed(4)]]);
  })); // prettier-ignore
  panels.addEventListener("mouseleave", () => tooltip.hide());
  panels.addEventListener("click", safely((event) => {
    const hit = heatmapEvent(event);
    if (hit) setFocus({ type: "click", token: hit.cell.query });
  })); // prettier-ignore
  modelCanvas.addEventListener("click", safely((event) => {
    const box = modelCanvas.getBoundingClientRect();
    const cell = state.grid && gridCellAt(((event.clientX - box.left) * modelCanvas.width) / (box.width || 1), ((event.clientY - box.top) * modelCanvas.height) / (box.height || 1), state.grid);
    if (cell) save({ view: "head", layer: cell.layer, heads: [cell.head], aggregate: "" });
  })); // prettier-ignore
  modelCanvas.addEventListener("mousemove", safely((event) => {
    const box = modelCanvas.getBoundingClientRect();
    const cell = state.grid && gridCellAt(((event.clientX - box.left) * modelCanvas.width) / (box.width || 1), ((event.clientY - box.top) * modelCanvas.height) / (box.height || 1), state.grid);
    if (!cell) return tooltip.hide();
    tooltip.show(modelCanvas, [["layer", String(cell.layer)], ["head", headLabel(ctx, cell.head)]]);
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
    const current = model.get("aggregate") ? [] : currentHeads(ctx);
    const next = box.checked ? [...new Set([...current, head])].sort((a, b) => a - b) : current.filter((x) => x !== head);
    save({ heads: next.length ? next : [head], aggregate: "" });
  })); // prettier-ignore
  pinButton.addEventListener("click", safely(() => {
    const head = currentHeads(ctx)[0];
    const layer = model.get("layer");
    sendToKernel(ctx, { type: pinnedIndex(ctx, layer, head) >= 0 ? "unpin" : "pin", layer, head });
  })); // prettier-ignore

  // export: the view as PNG/SVG (what is on screen), the shown heads' weights as CSV (every non-zero weight) and
  // an HTML page (the picture, and each query's top keys as a table); token text goes in as text, never markup
  const exportHeads = () => state.shown.filter((s) => s.values);
  const exportHeader = ["layer", "layer_name", "head", "source", "query", "query_token", "key", "key_token", "weight"];
  const exportRow = (s, q, k) => [
    model.get("layer"),
    ctx.data.layerNames[model.get("layer")] ?? "",
    String(s.head),
    s.exact ? "kernel" : `pinned top-${ctx.data.topK}`,
    q,
    ctx.data.tokens[q],
    k,
    ctx.data.keyTokens[k],
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
    `${ctx.data.kind} attention${ctx.data.modelName ? ` of ${ctx.data.modelName}` : ""}: layer ${model.get("layer")}, ${currentHeads(
      ctx,
    )
      .map((head) => headLabel(ctx, head))
      .join(", ")}${model.get("view") === "model" ? " (model view)" : ""}`;
  toolbar.append(
    createExportMenu({ name: "attention", root, rows: csvRows, tableRows, title: exportTitle, reportError }),
  );
  return parts;
}
