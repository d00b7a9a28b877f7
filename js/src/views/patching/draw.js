/**
 * Patching view, draw: one heatmap per panel (a canvas that paints only the columns in view, grouped by patched point
 * with the results side by side), the tooltip of a cell, the detail box of the clicked cell with the top-5 next
 * tokens of its patched run (stored in the view, or asked of the kernel above the stored limit), the agreement table
 * and the controls' values. Keeps `ctx.state.cursor` (the keyboard's cell) and `ctx.state.hovered`.
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { scoreRgb } from "../../lib/colour.js";
import { h } from "../../lib/dom.js";
import { createLegend } from "../../lib/legend.js";
import { formatProbability, formatScore } from "../../lib/format.js";
import { cellAt as gridCellAt, gridLayout, rowOfLayer, visibleColumns } from "../../lib/lens_grid.js";
import { displayToken, quoteToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";
import { PATCHING_CELL, cellAt, cellNumbers, columnOf, moveCell, panelColumns, storedTop } from "./grid.js";

/** How long the view waits for the kernel's answer before saying that the kernel is needed. */
const NO_KERNEL_MS = 1500;
const rgb = ([r, g, b]) => `rgb(${r},${g},${b})`;
const clip = (text, n = 6) => {
  const chars = Array.from(text.replace(/\n/g, ""));
  return chars.length > n ? `${chars.slice(0, n - 1).join("")}\u2026` : chars.join("");
};
const exact = (v) => (Number.isFinite(v) ? String(Number(v.toPrecision(6))) : String(v));

/** The scale shown and the position of the heads grids. */
export const ui = ({ model }) => ({
  scale: model.get("scale") === "raw" ? "raw" : "normalised",
  unitPosition: model.get("unit_position") ?? -1,
  selected: model.get("selected_cell") ?? [],
});

/** The direction label of a result: noising says that a low value means important. */
export const directionLabel = (result) =>
  result.direction === "noise"
    ? "noising (clean run, corrupt activation patched in): low = important"
    : "denoising (corrupt run, clean activation patched in): high = important";

/** Text of a cell for the tooltip and the detail box. */
function cellTitle(data, panel, cell) {
  const unit = panel.U > 1 ? ` \u00b7 ${panel.units[cell.unit]}` : "";
  return `${panel.point} \u00b7 layer ${panel.layers[cell.layer]}${unit} \u00b7 position ${cell.position} ${quoteToken(panel.positions[cell.position] ?? "")}`;
}

export function cellRows(data, panel, cell) {
  const result = data.results[panel.result];
  const n = cellNumbers(data, panel, cell);
  const rows = [["cell", cellTitle(data, panel, cell)]];
  if (panel.onTokens && data.corruptTokens[cell.position] !== undefined)
    rows.push(["corrupt token", quoteToken(data.corruptTokens[cell.position])]);
  rows.push(["value", `${exact(n.value)} (normalised: 0 = corrupt, 1 = clean)`]);
  rows.push(["raw metric", `${exact(n.raw)}${result.metric ? ` (${result.metric})` : ""}`]);
  if (data.nPairs > 1) rows.push(["spread", `\u00b1${exact(n.spread)} over ${data.nPairs} pairs`]);
  if (result.direction === "noise") rows.push(["noising", "low = important"]);
  if (result.method === "attribution") rows.push(["method", "attribution patching (first-order estimate)"]);
  return rows;
}

function paintPanel(ctx, panel) {
  const { model, data, doc, theme, state } = ctx;
  const part = ctx.parts.panels[panel.index];
  const { canvas, scroller, sizer } = part;
  const { scale, unitPosition, selected } = ui(ctx);
  const columns = panelColumns(panel, unitPosition);
  const layout = gridLayout({ layers: panel.L, positions: columns.count }, PATCHING_CELL);
  part.layout = layout;
  sizer.style.width = `${layout.fullWidth}px`;
  const viewWidth = Math.max(layout.left + layout.width, scroller.clientWidth || 800);
  const { start, end } = visibleColumns(layout, scroller.scrollLeft, viewWidth);
  const shift = scroller.scrollLeft - start * layout.width;
  part.start = start;
  part.shift = shift;
  const dpr = doc.defaultView?.devicePixelRatio || 1;
  const width = Math.min(viewWidth, layout.fullWidth);
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(layout.fullHeight * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${layout.fullHeight}px`;
  const g2 = canvas.getContext("2d");
  if (!g2) return;
  const dark = theme === "dark";
  g2.setTransform(dpr, 0, 0, dpr, 0, 0);
  g2.fillStyle = dark ? "#1e1e1e" : "#ffffff";
  g2.fillRect(0, 0, width, layout.fullHeight);
  const numbers = scale === "raw" ? data.raw : data.values;
  const max = panel.range[scale];
  g2.save();
  g2.beginPath();
  g2.rect(layout.left, 0, width - layout.left, layout.fullHeight);
  g2.clip();
  g2.font = "10px ui-monospace, SFMono-Regular, Menlo, monospace";
  g2.textBaseline = "middle";
  const ink = dark ? "#e6edf3" : "#1f2328";
  for (let c = start; c < end; c += 1) {
    const x = layout.left + (c - start) * layout.width - shift;
    for (let l = 0; l < panel.L; l += 1) {
      const cell = cellAt(panel, l, c, unitPosition);
      const v = numbers[panel.cellStart + (cell.layer * panel.U + cell.unit) * panel.P + cell.position];
      g2.fillStyle = Number.isNaN(v) ? (dark ? "#3c3c3c" : "#eeeeee") : rgb(scoreRgb(v, max, theme));
      g2.fillRect(x, layout.top + rowOfLayer(layout, l) * layout.height, layout.width - 1, layout.height - 1);
    }
    g2.fillStyle = ink;
    g2.fillText(
      clip(displayToken(columns.labels[c] ?? "")),
      x + 2,
      layout.top + panel.L * layout.height + layout.bottom / 2,
    );
  }
  const outline = (cell, style, dashed) => {
    if (columns.position >= 0 && cell.position !== columns.position) return;
    const c = columnOf(panel, cell);
    if (c < start || c >= end) return;
    const x = layout.left + (c - start) * layout.width - shift;
    g2.strokeStyle = style;
    g2.lineWidth = 2;
    g2.setLineDash(dashed ? [3, 2] : []);
    g2.strokeRect(
      x + 1,
      layout.top + rowOfLayer(layout, cell.layer) * layout.height + 1,
      layout.width - 3,
      layout.height - 3,
    );
    g2.setLineDash([]);
  };
  if (selected.length === 4 && selected[0] === panel.index)
    outline({ layer: selected[1], unit: selected[2], position: selected[3] }, dark ? "#ffd33d" : "#1f2328", false);
  if (state.cursor?.panel === panel.index) outline(state.cursor.cell, dark ? "#58a6ff" : "#0b62d6", true);
  g2.restore();
  g2.fillStyle = dark ? "#9da7b3" : "#57606a";
  g2.font = "10px system-ui, sans-serif";
  g2.textBaseline = "middle";
  for (let l = 0; l < panel.L; l += 1)
    g2.fillText(
      clip(`layer ${panel.layers[l]}`, 14),
      4,
      layout.top + rowOfLayer(layout, l) * layout.height + layout.height / 2,
    );
  canvas.dataset.start = String(start);
  canvas.dataset.shift = String(shift);
  void model;
}

/** Show the tooltip of a cell of a panel, under the cell. */
export function showTip(ctx, panel, cell) {
  const { data, parts } = ctx;
  const { root, tooltip } = parts;
  const part = parts.panels[panel.index];
  const { canvas, layout } = part;
  tooltip.show(canvas, cellRows(data, panel, cell));
  const rootBox = root.getBoundingClientRect();
  const box = canvas.getBoundingClientRect();
  const x = layout.left + (columnOf(panel, cell) - part.start) * layout.width - part.shift;
  tooltip.node.style.left = `${Math.max(0, box.left - rootBox.left + x)}px`;
  tooltip.node.style.top = `${box.top - rootBox.top + layout.top + (rowOfLayer(layout, cell.layer) + 1) * layout.height + 2}px`;
}

function requestTop(ctx, panel, cell) {
  const { state, model } = ctx;
  const key = [panel.index, cell.layer, cell.unit, cell.position].join(":");
  if (state.fetched.has(key) || state.pending.has(key)) return key;
  state.pending.add(key);
  try {
    const sent = model.send({ type: "top", id: state.nextId++, panel: panel.index, layer: cell.layer, unit: cell.unit, position: cell.position }); // prettier-ignore
    if (sent && typeof sent.catch === "function") sent.catch(() => {});
  } catch {
    // no kernel: the note below says it is needed
  }
  if (state.kernelTimer === null)
    state.kernelTimer = setTimeout(() => {
      state.kernelTimer = null;
      if (state.pending.size) {
        state.noKernel = true;
        ctx.request(1);
      }
    }, NO_KERNEL_MS);
  return key;
}

function topList(items) {
  return h("ol", { class: "iw-patching-top" }, items.map(({ text, prob }) =>
    h("li", {}, [h("span", { class: "iw-patching-token" }, quoteToken(text)), ` ${formatProbability(prob)}`]))); // prettier-ignore
}

export function paintDetail(ctx) {
  const { data, parts, state } = ctx;
  const { selected } = ui(ctx);
  const panel = selected.length === 4 ? data.panels[selected[0]] : undefined;
  if (!panel || selected[1] >= panel.L || selected[2] >= panel.U || selected[3] >= panel.P) {
    parts.detail.replaceChildren(h("div", { class: "iw-hint" },
      "Click a cell (or focus a heatmap, move with the arrow keys and press Enter) to list the top-5 next tokens of its patched run.")); // prettier-ignore
    return;
  }
  const cell = { layer: selected[1], unit: selected[2], position: selected[3] };
  const result = data.results[panel.result];
  const rows = cellRows(data, panel, cell).map(([label, value]) =>
    h("div", { class: "iw-tooltip-row" }, [h("span", { class: "iw-tooltip-label" }, label), value])); // prettier-ignore
  let body;
  const stored = storedTop(data, panel, cell);
  if (stored) body = [h("div", {}, "Top-5 next tokens of this patched run:"), topList(stored)];
  else if (result.method === "attribution")
    body = [h("div", { class: "iw-hint" }, "Attribution patching estimates each cell from gradients: it makes no patched runs, so there are no top-5 tokens.")]; // prettier-ignore
  else {
    const got = state.fetched.get(requestTop(ctx, panel, cell));
    if (got?.error) body = [h("div", { class: "iw-hint" }, `The kernel could not send this cell's top-5: ${got.error}`)];
    else if (got)
      body = [h("div", {}, "Top-5 next tokens of this patched run (from the kernel):"),
        topList(got.tokens.map((text, k) => ({ text, prob: got.probs[k] })))]; // prettier-ignore
    else
      body = [h("div", { class: "iw-hint iw-patching-kernel" }, state.noKernel
        ? `The kernel is needed for the top-5 of cells not stored in the view (no kernel answered). ${data.topNote}`
        : `Asking the kernel for this cell's top-5. ${data.topNote}`)]; // prettier-ignore
  }
  parts.detail.replaceChildren(h("div", { class: "iw-patching-detail-rows" }, rows), ...body);
}

function paintAgreement(ctx) {
  const { data, parts } = ctx;
  const { points, spearman, overlap, k } = data.agreement;
  if (!points.length) {
    parts.agreementBox.replaceChildren();
    return;
  }
  const num = (v) => (v === null || v === undefined || Number.isNaN(v) ? "\u2013" : formatScore(v, { digits: 3 }));
  const labels = data.results.map((r) => r.label).join(" vs ");
  parts.agreementBox.replaceChildren(
    h("div", { class: "iw-caption" }, `Agreement (${labels})`),
    h("table", { class: "iw-table iw-patching-agreement-table" }, [
      h("tr", {}, [h("th", {}, "point"), h("th", {}, "Spearman \u03c1"), h("th", {}, `top-${k} overlap`)]),
      ...points.map((point, i) => h("tr", {}, [h("td", {}, point), h("td", {}, num(spearman[i])), h("td", {}, num(overlap[i]))])), // prettier-ignore
    ]),
  );
}

/** The panel's heatmap DOM and its handlers (hover, click, keyboard, scroll). */
function makePanel(ctx, panel) {
  const { data, state, safely, save } = ctx;
  const result = data.results[panel.result];
  const heading = h("div", { class: "iw-patching-heading" });
  const canvas = h("canvas", { class: "iw-patching-canvas", role: "img" });
  const sizer = h("div", { class: "iw-patching-sizer" }, [canvas]);
  const scroller = h("div", { class: "iw-patching-scroll", tabindex: "0", role: "grid",
    "aria-label": `${panel.point} heatmap, ${result.label}: arrow keys move, Enter selects`, "data-panel": String(panel.index) }, [sizer]); // prettier-ignore
  const legend = h("div", { class: "iw-patching-legend" });
  const box = h("div", { class: "iw-patching-panel", "data-panel": String(panel.index), "data-point": panel.point }, [heading, scroller, legend]); // prettier-ignore
  const part = { box, heading, canvas, sizer, scroller, legend, layout: null, start: 0, shift: 0 };
  const cellOf = (event) => {
    const rect = canvas.getBoundingClientRect();
    const at = gridCellAt(part.layout, event.clientX - rect.left + part.shift, event.clientY - rect.top, part.start);
    return at && cellAt(panel, at.layer, at.position, ui(ctx).unitPosition);
  };
  const select = (cell) => {
    const now = ui(ctx).selected;
    const same = now.length === 4 && now[0] === panel.index && now[1] === cell.layer && now[2] === cell.unit && now[3] === cell.position; // prettier-ignore
    save({ selected_cell: same ? [] : [panel.index, cell.layer, cell.unit, cell.position] });
  };
  canvas.addEventListener("mousemove", safely((event) => {
    const cell = cellOf(event);
    if (!cell) { state.hovered = null; ctx.parts.tooltip.hide(); return; }
    const was = state.hovered;
    if (was && was.panel === panel.index && was.cell.layer === cell.layer && was.cell.unit === cell.unit && was.cell.position === cell.position) return;
    state.hovered = { panel: panel.index, cell };
    showTip(ctx, panel, cell);
  })); // prettier-ignore
  canvas.addEventListener("mouseleave", safely(() => { state.hovered = null; ctx.parts.tooltip.hide(); })); // prettier-ignore
  canvas.addEventListener("click", safely((event) => {
    const cell = cellOf(event);
    if (!cell) return;
    state.cursor = { panel: panel.index, cell };
    select(cell);
  })); // prettier-ignore
  scroller.addEventListener("focus", safely(() => {
    if (state.cursor?.panel === panel.index) return;
    const { selected, unitPosition } = ui(ctx);
    const cell = selected.length === 4 && selected[0] === panel.index
      ? { layer: selected[1], unit: selected[2], position: selected[3] } : cellAt(panel, panel.L - 1, 0, unitPosition); // prettier-ignore
    state.cursor = { panel: panel.index, cell };
    paintPanel(ctx, panel);
    showTip(ctx, panel, cell);
  })); // prettier-ignore
  scroller.addEventListener(
    "blur",
    safely(() => ctx.parts.tooltip.hide()),
  );
  scroller.addEventListener("keydown", safely((event) => {
    const cursor = state.cursor?.panel === panel.index ? state.cursor.cell : null;
    if (!cursor) return;
    if (event.key === "Enter" || event.key === " ") { event.preventDefault(); select(cursor); return; }
    const { unitPosition } = ui(ctx);
    const columns = panelColumns(panel, unitPosition);
    const next = moveCell({ layer: cursor.layer, column: columnOf(panel, cursor) }, event.key, panel.L, columns.count);
    if (!next) return;
    event.preventDefault();
    const cell = cellAt(panel, next.layer, next.column, unitPosition);
    state.cursor = { panel: panel.index, cell };
    const { layout } = part;
    const left = next.column * layout.width, view = scroller.clientWidth - layout.left; // prettier-ignore
    if (left < scroller.scrollLeft) scroller.scrollLeft = left;
    else if (view > 0 && left + layout.width > scroller.scrollLeft + view) scroller.scrollLeft = left + layout.width - view;
    paintPanel(ctx, panel);
    showTip(ctx, panel, cell);
  })); // prettier-ignore
  const repaint = ctx.coalesce(() => paintPanel(ctx, panel));
  scroller.addEventListener("scroll", () => repaint());
  return part;
}

export function draw(ctx, level) {
  const { data, parts, state, theme } = ctx;
  const { root, panelsBox, scaleSelect, positionSelect, positionLabel, caption, note } = parts;
  if (level >= REREAD) {
    state.cursor = null;
    state.hovered = null;
    parts.tooltip.hide();
    parts.panels = data.panels.map((panel) => makePanel(ctx, panel));
    const groups = new Map();
    for (const panel of data.panels) {
      if (!groups.has(panel.point))
        groups.set(panel.point, h("div", { class: "iw-patching-row", "data-point": panel.point }));
      groups.get(panel.point).append(parts.panels[panel.index].box);
    }
    panelsBox.replaceChildren(...groups.values());
    const unitPanel = data.panels.find((panel) => panel.U > 1 && panel.P > 1);
    positionLabel.hidden = !unitPanel;
    positionSelect.replaceChildren(
      ...(unitPanel ? unitPanel.positions : []).map((token, p) =>
        h("option", { value: String(p) }, `${p} ${quoteToken(token)}`),
      ),
    );
  }
  root.dataset.iwTheme = theme;
  const { scale, unitPosition } = ui(ctx);
  scaleSelect.value = scale;
  const unitPanel = data.panels.find((panel) => panel.U > 1 && panel.P > 1);
  if (unitPanel) positionSelect.value = String(panelColumns(unitPanel, unitPosition).position);
  const versus = data.foil ? ` vs ${quoteToken(data.foil)}` : "";
  const results = data.results.map((r) => `${r.label}: ${r.method} ${directionLabel(r)}, ${r.metric} clean ${formatScore(r.clean)} / corrupt ${formatScore(r.corrupt)}`); // prettier-ignore
  caption.textContent = `Patching \u00b7 ${data.modelName} \u00b7 answer ${quoteToken(data.answer)}${versus}${data.nPairs > 1 ? ` \u00b7 mean of ${data.nPairs} pairs` : ""} \u00b7 ${scale} values \u00b7 ${results.join("; ")}`; // prettier-ignore
  note.textContent = data.topNote;
  note.hidden = !data.topNote;
  for (const panel of data.panels) {
    const result = data.results[panel.result];
    const { position } = panelColumns(panel, unitPosition);
    const where = position >= 0 ? ` \u00b7 layers \u00d7 ${panel.point === "k" || panel.point === "v" ? "KV heads" : "heads"} at position ${position} ${quoteToken(panel.positions[position])}` : " \u00b7 layers \u00d7 positions"; // prettier-ignore
    const part = parts.panels[panel.index];
    part.heading.textContent = `${panel.point} \u00b7 ${result.label}${where}${result.direction === "noise" ? " \u00b7 noising: low = important" : ""}`;
    part.box.classList.toggle("iw-patching-noise", result.direction === "noise");
    part.canvas.setAttribute("aria-label", part.heading.textContent);
    const what = scale === "raw" ? `raw ${result.metric || "metric"}` : "normalised (0 = corrupt, 1 = clean)";
    part.legend.replaceChildren(createLegend(panel.range[scale], theme, what));
    paintPanel(ctx, panel);
  }
  paintDetail(ctx);
  paintAgreement(ctx);
  const { hovered } = state;
  if (hovered && data.panels[hovered.panel]) showTip(ctx, data.panels[hovered.panel], hovered.cell);
}
