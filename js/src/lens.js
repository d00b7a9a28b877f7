/**
 * Lens view (front end of interp_widgets.widgets.LensWidget): a layers × positions grid of a logit / tuned lens.
 * Each cell shows the top-1 token, coloured by its probability or by a target's probability or rank; hovering lists
 * the top-k; clicking a position plots the targets' probability and rank across the layers. The logit ↔ tuned
 * switch reads the arrays already here (no kernel round trip). The grid is a canvas that draws only the columns in
 * view, so 30 layers × 1,000 positions paint at once; token text is drawn with fillText or set as textContent.
 *
 * @example
 *   import widget from "./lens.js";
 *   widget.render({model, el});
 */

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of LensWidget: its data (LensData, generated in lib/view_traits.js) and its view
 * state (LensState).
 * @typedef {import("./lib/view_traits.js").LensData & LensState} LensModel
 */
/**
 * View state of LensWidget (N lenses, L layers, T positions, k top tokens, M targets).
 * @typedef {object} LensState
 * @property {string} lens  The lens shown (written).
 * @property {"top1_prob" | "target_prob" | "target_rank"} colour_by  (written)
 * @property {number} target  Target colouring the cells (written).
 * @property {number} selected_position  Position plotted, -1: none (written).
 * @property {number[]} plotted_targets  Targets in the trajectory plot (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./lens.css";
import { decodeArray } from "./lib/codec.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { createExportMenu, svgNamespace } from "./lib/export.js";
import { formatProbability } from "./lib/format.js";
import {
  cellAt,
  cellValue,
  gridLayout,
  intensityRgb,
  rowOfLayer,
  trajectories,
  visibleColumns,
} from "./lib/lens_grid.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";
import { viewKit } from "./lib/view.js";
import { LENS_DATA_TRAITS as DATA } from "./lib/view_traits.js";

const UI = ["lens", "colour_by", "target", "selected_position", "plotted_targets"];
const LINE_COLOURS = ["#0b62d6", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#57606a"];

/** @param {AnyModel<LensModel>} model */
export function readLens(model) {
  const tokens = model.get("tokens") ?? [];
  const layers = model.get("layers") ?? [];
  const lenses = model.get("lenses") ?? [];
  const top = decodeArray(model.get("top_vocab"));
  const [N, L, T, K] = top.shape;
  if (T !== tokens.length || L !== layers.length || N !== lenses.length) {
    throw new RangeError(
      `top_vocab has shape [${top.shape.join(", ")}], expected [${lenses.length} lenses, ${layers.length} layers, ${tokens.length} positions, k]`,
    );
  }
  if (T === 0 || L === 0) throw new RangeError("there are no positions or layers to display");
  const targetProbs = decodeArray(model.get("target_probs"));
  const M = targetProbs.shape[3];
  return {
    tokens, layers, lenses, vocab: model.get("vocab") ?? [], targetLabels: model.get("target_labels") ?? [],
    topVocab: top.values, topProbs: decodeArray(model.get("top_probs")).values, kl: decodeArray(model.get("kl")).values,
    targetVocab: decodeArray(model.get("target_vocab")).values, targetProbs: targetProbs.values,
    targetRanks: decodeArray(model.get("target_ranks")).values, generated: decodeArray(model.get("generated_mask")).values,
    vocabSize: model.get("vocab_size") || 2, modelName: model.get("model_name") ?? "", dims: { N, L, T, K, M },
  }; // prettier-ignore
}

const rgb = ([r, g, b]) => `rgb(${r},${g},${b})`;
const ink = ([r, g, b]) => (0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#1f2328" : "#ffffff");
const clip = (text, n = 6) =>
  Array.from(text).length > n
    ? `${Array.from(text)
        .slice(0, n - 1)
        .join("")}\u2026`
    : text;

/** @param {{model: AnyModel<LensModel>, el: HTMLElement, reportError: (error: unknown) => void}} props */
function renderLens({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const { safely, save, coalesce } = viewKit(model, reportError);
  const lensSelect = h("select", { class: "iw-lens-select", "aria-label": "Lens" });
  const colourSelect = h("select", { class: "iw-colour-select", "aria-label": "Colour cells by" }, [
    h("option", { value: "top1_prob" }, "top-1 probability"),
    h("option", { value: "target_prob" }, "target probability"),
    h("option", { value: "target_rank" }, "target rank"),
  ]);
  const targetSelect = h("select", { class: "iw-target-select", "aria-label": "Target" });
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Lens ", lensSelect]),
    h("label", {}, ["Colour ", colourSelect]),
    h("label", {}, ["Target ", targetSelect]),
  ]);
  const caption = h("div", { class: "iw-caption" });
  const canvas = h("canvas", { class: "iw-lens-canvas", role: "img" });
  const sizer = h("div", { class: "iw-lens-sizer" }, [canvas]);
  const scroller = h("div", { class: "iw-lens-scroll", tabindex: "0" }, [sizer]);
  const plotBox = h("div", { class: "iw-lens-plot" });
  const root = h("div", { class: "iw-root iw-lens" }, [toolbar, caption, scroller, plotBox]);
  el.append(root);
  const tooltip = createTooltip(root);
  let theme = detectTheme(doc);
  let data = null;
  let layout = null;
  let hovered = null;

  const ui = () => ({
    lens: Math.max(0, data.lenses.indexOf(model.get("lens"))),
    colourBy: model.get("colour_by") || "top1_prob",
    target: Math.min(Math.max(0, model.get("target") ?? 0), data.dims.M - 1),
  });
  const vocabText = (index) => (index >= 0 ? (data.vocab[index] ?? "?") : "");

  function paintGrid() {
    const { lens, colourBy, target } = ui();
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
    const ctx = canvas.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = theme === "dark" ? "#1e1e1e" : "#ffffff";
    ctx.fillRect(0, 0, width, layout.fullHeight);
    ctx.font = "11px ui-monospace, SFMono-Regular, Menlo, monospace";
    ctx.textBaseline = "middle";
    ctx.save();
    ctx.beginPath();
    ctx.rect(layout.left, 0, width - layout.left, layout.fullHeight);
    ctx.clip();
    for (let t = start; t < end; t += 1) {
      const x = layout.left + (t - start) * layout.width - shift;
      for (let l = 0; l < L; l += 1) {
        const y = layout.top + rowOfLayer(layout, l) * layout.height;
        const colour = intensityRgb(cellValue(data, { lens, layer: l, position: t, colourBy, target }), theme);
        ctx.fillStyle = rgb(colour);
        ctx.fillRect(x, y, layout.width - 1, layout.height - 1);
        ctx.fillStyle = ink(colour);
        ctx.fillText(
          clip(displayToken(vocabText(data.topVocab[((lens * L + l) * T + t) * K])).replace(/\n/g, "")),
          x + 3,
          y + layout.height / 2,
        );
      }
      const selected = t === (model.get("selected_position") ?? -1);
      ctx.fillStyle = theme === "dark" ? "#e6edf3" : "#1f2328";
      ctx.font = `${data.generated[t] ? "italic " : ""}${selected ? "bold " : ""}11px ui-monospace, monospace`;
      ctx.fillText(
        clip(displayToken(data.tokens[t]).replace(/\n/g, "")),
        x + 3,
        layout.top + L * layout.height + layout.bottom / 2,
      );
      ctx.font = "11px ui-monospace, SFMono-Regular, Menlo, monospace";
      if (selected) {
        ctx.strokeStyle = theme === "dark" ? "#58a6ff" : "#0b62d6";
        ctx.lineWidth = 2;
        ctx.strokeRect(x + 1, layout.top + 1, layout.width - 3, L * layout.height - 2);
      }
    }
    ctx.restore();
    ctx.fillStyle = theme === "dark" ? "#9da7b3" : "#57606a";
    ctx.font = "11px system-ui, sans-serif";
    for (let l = 0; l < L; l += 1) {
      ctx.fillText(clip(data.layers[l], 18), 4, layout.top + rowOfLayer(layout, l) * layout.height + layout.height / 2);
    }
  }

  function paintPlot() {
    const position = model.get("selected_position") ?? -1;
    if (position < 0 || position >= data.dims.T) {
      plotBox.replaceChildren(
        h("div", { class: "iw-hint" }, "Click a position to plot the targets' probability and rank across the layers."),
      );
      return;
    }
    const { lens } = ui();
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
      const word = m === 0 ? vocabText(data.targetVocab[position * data.dims.M]) : data.targetLabels[m];
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

  function showTip(cell) {
    const { lens } = ui();
    const { L, T, K, M } = data.dims;
    const base = (lens * L + cell.layer) * T + cell.position;
    const rows = [
      ["cell", `${data.layers[cell.layer]} \u00b7 position ${cell.position} ${quoteToken(data.tokens[cell.position])}`],
    ];
    for (let k = 0; k < K; k += 1)
      rows.push([
        `#${k + 1}`,
        `${quoteToken(vocabText(data.topVocab[base * K + k]))} ${formatProbability(data.topProbs[base * K + k])}`,
      ]);
    for (let m = 0; m < M; m += 1) {
      const p = data.targetProbs[base * M + m];
      if (Number.isNaN(p)) continue;
      const word = vocabText(data.targetVocab[cell.position * M + m]);
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

  const cellOf = (event) => {
    const box = canvas.getBoundingClientRect();
    const shift = Number(canvas.dataset.shift) || 0;
    return cellAt(layout, event.clientX - box.left + shift, event.clientY - box.top, Number(canvas.dataset.start) || 0);
  };
  canvas.addEventListener("mousemove", safely((event) => {
    const cell = cellOf(event);
    if (!cell) { hovered = null; tooltip.hide(); return; }
    if (hovered && hovered.layer === cell.layer && hovered.position === cell.position) return;
    hovered = cell;
    showTip(cell);
  })); // prettier-ignore
  canvas.addEventListener("mouseleave", safely(() => { hovered = null; tooltip.hide(); })); // prettier-ignore
  canvas.addEventListener("click", safely((event) => {
    const cell = cellOf(event);
    if (!cell) return;
    const now = model.get("selected_position") ?? -1;
    save({ selected_position: now === cell.position ? -1 : cell.position });
  })); // prettier-ignore
  scroller.addEventListener("scroll", () => requestPaint());
  lensSelect.addEventListener(
    "change",
    safely(() => save({ lens: lensSelect.value })),
  );
  colourSelect.addEventListener(
    "change",
    safely(() => save({ colour_by: colourSelect.value })),
  );
  targetSelect.addEventListener(
    "change",
    safely(() => save({ target: Number(targetSelect.value) })),
  );

  function draw(level) {
    if (level >= 2 || !data) {
      data = readLens(model);
      layout = gridLayout({ layers: data.dims.L, positions: data.dims.T });
      sizer.style.width = `${layout.fullWidth}px`;
      lensSelect.replaceChildren(...data.lenses.map((name) => h("option", { value: name }, name)));
      targetSelect.replaceChildren(...data.targetLabels.map((label, m) => h("option", { value: String(m) }, label)));
    }
    root.dataset.iwTheme = theme;
    const { lens, colourBy, target } = ui();
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
    paintGrid();
    paintPlot();
    if (hovered) showTip(hovered);
  }
  const request = coalesce(draw);
  const requestPaint = coalesce(() => paintGrid());
  const onData = () => request(2);
  const onUi = () => request(1);
  for (const name of DATA) model.on(`change:${name}`, onData);
  for (const name of UI) model.on(`change:${name}`, onUi);
  const stopTheme = watchTheme(doc, (next) => { theme = next; request(1); }); // prettier-ignore
  draw(2);

  const csvRows = () => {
    const { lens } = ui();
    const { L, T, K, M } = data.dims;
    const header = [
      "lens",
      "layer",
      "position",
      "token",
      "top1",
      "top1_prob",
      "kl",
      ...data.targetLabels.flatMap((label) => [`${label}_prob`, `${label}_rank`]),
    ];
    const rows = [header];
    for (let l = 0; l < L; l += 1) {
      for (let t = 0; t < T; t += 1) {
        const base = (lens * L + l) * T + t;
        const row = [
          data.lenses[lens],
          data.layers[l],
          t,
          data.tokens[t],
          vocabText(data.topVocab[base * K]),
          data.topProbs[base * K],
          data.kl[base],
        ];
        for (let m = 0; m < M; m += 1) row.push(data.targetProbs[base * M + m], data.targetRanks[base * M + m]);
        rows.push(row);
      }
    }
    return rows;
  };
  toolbar.append(
    createExportMenu({
      name: "lens",
      root,
      rows: csvRows,
      title: () => `${data.lenses[ui().lens]} lens: ${data.modelName}`,
      reportError,
    }),
  );
  return () => {
    for (const name of DATA) model.off(`change:${name}`, onData);
    for (const name of UI) model.off(`change:${name}`, onUi);
    stopTheme?.();
    tooltip.hide();
  };
}

export default { render: guardedRender("LensWidget", renderLens) };
