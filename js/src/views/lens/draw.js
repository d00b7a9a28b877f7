/**
 * Logit lens, draw: the grid (a canvas, only the visible columns), the trajectory plot of the selected position,
 * the tooltip of a cell and the controls' values. Keeps `ctx.state.layout` (the grid geometry, set on each re-read)
 * and reads `ctx.state.hovered` (the cell under the pointer, set by build.js).
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { h } from "../../lib/dom.js";
import { svgNamespace } from "../../lib/export.js";
import { formatProbability } from "../../lib/format.js";
import { cellValue, gridLayout, intensityRgb, rowOfLayer, trajectories, visibleColumns } from "../../lib/lens_grid.js";
import { displayToken, quoteToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";

const LINE_COLOURS = ["#0b62d6", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#57606a"];
const rgb = ([r, g, b]) => `rgb(${r},${g},${b})`;
const ink = ([r, g, b]) => (0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#1f2328" : "#ffffff");
const clip = (text, n = 6) =>
  Array.from(text).length > n
    ? `${Array.from(text)
        .slice(0, n - 1)
        .join("")}\u2026`
    : text;

/** The lens, colour and target chosen (clamped to the data). */
export const ui = ({ model, data }) => ({
  lens: Math.max(0, data.lenses.indexOf(model.get("lens"))),
  colourBy: model.get("colour_by") || "top1_prob",
  target: Math.min(Math.max(0, model.get("target") ?? 0), data.dims.M - 1),
});
export const vocabText = (data, index) => (index >= 0 ? (data.vocab[index] ?? "?") : "");

export function paintGrid(ctx) {
  const { model, data, parts, state, doc, theme } = ctx;
  const { canvas, scroller } = parts;
  const { layout } = state;
  const { lens, colourBy, target } = ui(ctx);
  const { L, T, K } = data.dims;
  const viewWidth = Math.max(layout.left + layout.width, scroller.clientWidth || 800);
  const { start, end } = visibleColumns(layout, scroller.scrollLeft, viewWidth);
  const shift = scroller.scrollLeft - start * layout.width;
  const dpr = doc.defaultView.devicePixelRatio || 1;
  const width = Math.min(viewWidth, layout.fullWidth);
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(layout.fullHeight * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${layout.fullHeight}px`;
  canvas.dataset.start = String(start);
  canvas.dataset.shift = String(shift);
  const g2 = canvas.getContext("2d");
  if (!g2) return;
  g2.setTransform(dpr, 0, 0, dpr, 0, 0);
  g2.fillStyle = theme === "dark" ? "#1e1e1e" : "#ffffff";
  g2.fillRect(0, 0, width, layout.fullHeight);
  g2.font = "11px ui-monospace, SFMono-Regular, Menlo, monospace";
  g2.textBaseline = "middle";
  g2.save();
  g2.beginPath();
  g2.rect(layout.left, 0, width - layout.left, layout.fullHeight);
  g2.clip();
  for (let t = start; t < end; t += 1) {
    const x = layout.left + (t - start) * layout.width - shift;
    for (let l = 0; l < L; l += 1) {
      const y = layout.top + rowOfLayer(layout, l) * layout.height;
      const colour = intensityRgb(cellValue(data, { lens, layer: l, position: t, colourBy, target }), theme);
      g2.fillStyle = rgb(colour);
      g2.fillRect(x, y, layout.width - 1, layout.height - 1);
      g2.fillStyle = ink(colour);
      g2.fillText(
        clip(displayToken(vocabText(data, data.topVocab[((lens * L + l) * T + t) * K])).replace(/\n/g, "")),
        x + 3,
        y + layout.height / 2,
      );
    }
    const selected = t === (model.get("selected_position") ?? -1);
    g2.fillStyle = theme === "dark" ? "#e6edf3" : "#1f2328";
    g2.font = `${data.generated[t] ? "italic " : ""}${selected ? "bold " : ""}11px ui-monospace, monospace`;
    g2.fillText(
      clip(displayToken(data.tokens[t]).replace(/\n/g, "")),
      x + 3,
      layout.top + L * layout.height + layout.bottom / 2,
    );
    g2.font = "11px ui-monospace, SFMono-Regular, Menlo, monospace";
    if (selected) {
      g2.strokeStyle = theme === "dark" ? "#58a6ff" : "#0b62d6";
      g2.lineWidth = 2;
      g2.strokeRect(x + 1, layout.top + 1, layout.width - 3, L * layout.height - 2);
    }
  }
  g2.restore();
  g2.fillStyle = theme === "dark" ? "#9da7b3" : "#57606a";
  g2.font = "11px system-ui, sans-serif";
  for (let l = 0; l < L; l += 1) {
    g2.fillText(clip(data.layers[l], 18), 4, layout.top + rowOfLayer(layout, l) * layout.height + layout.height / 2);
  }
}

export function paintPlot(ctx) {
  const { model, data, parts, doc, safely, save } = ctx;
  const { plotBox } = parts;
  const position = model.get("selected_position") ?? -1;
  if (position < 0 || position >= data.dims.T) {
    plotBox.replaceChildren(
      h("div", { class: "iw-hint" }, "Click a position to plot the targets' probability and rank across the layers."),
    );
    return;
  }
  const { lens } = ui(ctx);
  const chosen = (model.get("plotted_targets") ?? [0]).filter((m) => m >= 0 && m < data.dims.M);
  const lines = trajectories(data, lens, position, chosen.length ? chosen : [0]);
  const W = 560, H = 170, left = 44, right = 10, top = 10, bottom = 24; // prettier-ignore
  const L = data.dims.L;
  const xOf = (l) => left + (L === 1 ? 0 : (l / (L - 1)) * (W - left - right));
  const svg = doc.createElementNS(svgNamespace(doc), "svg");
  svg.setAttribute("width", String(W));
  svg.setAttribute("height", String(2 * H));
  svg.setAttribute("class", "iw-lens-trajectory");
  const add = (parent, tag, attrs, text) => {
    const node = doc.createElementNS(svgNamespace(doc), tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    parent.append(node);
    return node;
  };
  const maxLog = Math.log10(Math.max(10, data.vocabSize));
  [["probability", (p) => top + (1 - p) * (H - top - bottom), "probs", [0, 0.5, 1]],
   ["rank (log)", (r) => H + top + (Math.log10(Math.max(1, r)) / maxLog) * (H - top - bottom), "ranks", [1, 10, 100, 1000].filter((r) => Math.log10(r) <= maxLog)]]
    .forEach(([title, yOf, key, ticks]) => {
      const g = add(svg, "g", {});
      add(g, "text", { x: 2, y: yOf(ticks[0]) - 2, "font-size": 10, class: "iw-axis-title" }, title);
      for (const tick of ticks) {
        add(g, "line", { x1: left, x2: W - right, y1: yOf(tick), y2: yOf(tick), stroke: "#d0d7de" });
        add(g, "text", { x: left - 4, y: yOf(tick) + 3, "font-size": 10, "text-anchor": "end" }, String(tick));
      }
      lines.forEach((line, i) => {
        const pts = line[key].map((v, l) => (key === "ranks" ? v > 0 : !Number.isNaN(v)) ? `${xOf(l).toFixed(1)},${yOf(v).toFixed(1)}` : null).filter(Boolean);
        if (pts.length) add(g, "polyline", { points: pts.join(" "), fill: "none", stroke: LINE_COLOURS[i % LINE_COLOURS.length], "stroke-width": 2, "data-target": line.target });
      });
    }); // prettier-ignore
  for (let l = 0; l < L; l += Math.max(1, Math.ceil(L / 10))) {
    add(svg, "text", { x: xOf(l), y: 2 * H - 6, "font-size": 10, "text-anchor": "middle" }, String(l));
  }
  const legend = h("div", { class: "iw-lens-legend" }, lines.map((line, i) => {
    const m = line.target;
    const word = m === 0 ? vocabText(data, data.targetVocab[position * data.dims.M]) : data.targetLabels[m];
    return h("span", { style: `color:${LINE_COLOURS[i % LINE_COLOURS.length]}` }, `\u25a0 ${data.targetLabels[m]}${m === 0 ? ` ${quoteToken(word)}` : ""}`);
  })); // prettier-ignore
  const boxes = h("div", { class: "iw-lens-targets" }, data.targetLabels.map((label, m) => {
    const box = h("input", { type: "checkbox", "data-target": String(m) });
    box.checked = chosen.includes(m);
    box.addEventListener("change", safely(() => {
      const now = new Set(model.get("plotted_targets") ?? []);
      if (box.checked) now.add(m); else now.delete(m);
      save({ plotted_targets: [...now].sort((a, b) => a - b) });
    })); // prettier-ignore
    return h("label", {}, [box, ` ${label}`]);
  })); // prettier-ignore
  plotBox.replaceChildren(
    h(
      "div",
      { class: "iw-caption" },
      `Position ${position} ${quoteToken(data.tokens[position])}: targets across the layers (${data.lenses[lens]} lens)`,
    ),
    boxes,
    svg,
    legend,
  );
}

export function showTip(ctx, cell) {
  const { data, parts, state } = ctx;
  const { canvas, root, tooltip } = parts;
  const { layout } = state;
  const { lens } = ui(ctx);
  const { L, T, K, M } = data.dims;
  const base = (lens * L + cell.layer) * T + cell.position;
  const rows = [
    ["cell", `${data.layers[cell.layer]} \u00b7 position ${cell.position} ${quoteToken(data.tokens[cell.position])}`],
  ];
  for (let k = 0; k < K; k += 1)
    rows.push([
      `#${k + 1}`,
      `${quoteToken(vocabText(data, data.topVocab[base * K + k]))} ${formatProbability(data.topProbs[base * K + k])}`,
    ]);
  for (let m = 0; m < M; m += 1) {
    const p = data.targetProbs[base * M + m];
    if (Number.isNaN(p)) continue;
    const word = vocabText(data, data.targetVocab[cell.position * M + m]);
    rows.push([
      data.targetLabels[m],
      `${quoteToken(word)} ${formatProbability(p)}, rank ${data.targetRanks[base * M + m]}`,
    ]);
  }
  rows.push(["KL(final\u2016lens)", `${data.kl[base].toFixed(3)} nats`]);
  tooltip.show(canvas, rows);
  const rootBox = root.getBoundingClientRect();
  const box = canvas.getBoundingClientRect();
  const x =
    layout.left +
    (cell.position - (Number(canvas.dataset.start) || 0)) * layout.width -
    (Number(canvas.dataset.shift) || 0);
  tooltip.node.style.left = `${Math.max(0, box.left - rootBox.left + x)}px`;
  tooltip.node.style.top = `${box.top - rootBox.top + layout.top + (rowOfLayer(layout, cell.layer) + 1) * layout.height + 2}px`;
}

export function draw(ctx, level) {
  const { data, parts, state, theme } = ctx;
  const { root, sizer, lensSelect, colourSelect, targetSelect, caption, canvas } = parts;
  if (level >= REREAD) {
    state.layout = gridLayout({ layers: data.dims.L, positions: data.dims.T });
    sizer.style.width = `${state.layout.fullWidth}px`;
    lensSelect.replaceChildren(...data.lenses.map((name) => h("option", { value: name }, name)));
    targetSelect.replaceChildren(...data.targetLabels.map((label, m) => h("option", { value: String(m) }, label)));
  }
  root.dataset.iwTheme = theme;
  const { lens, colourBy, target } = ui(ctx);
  lensSelect.value = data.lenses[lens];
  lensSelect.disabled = data.lenses.length < 2;
  colourSelect.value = colourBy;
  targetSelect.value = String(target);
  targetSelect.disabled = colourBy === "top1_prob";
  const what =
    colourBy === "top1_prob"
      ? "top-1 probability"
      : `${colourBy === "target_prob" ? "probability" : "rank"} of ${data.targetLabels[target]}`;
  caption.textContent = `${data.lenses[lens]} lens \u00b7 ${data.modelName} \u00b7 ${data.dims.L} layers \u00d7 ${data.dims.T} positions \u00b7 cell text: top-1 token \u00b7 colour: ${what}`;
  canvas.setAttribute("aria-label", caption.textContent);
  paintGrid(ctx);
  paintPlot(ctx);
  if (state.hovered) showTip(ctx, state.hovered);
}
