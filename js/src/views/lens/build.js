/**
 * Logit lens, build: the toolbar (lens, colour, target), the scrolling canvas and the plot box, and their handlers
 * (hover shows a cell, click selects a position, scroll repaints the visible columns).
 *
 * @example
 *   const parts = build(ctx);
 */
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { cellAt } from "../../lib/lens_grid.js";
import { createTooltip } from "../../lib/tooltip.js";
import { paintGrid, showTip, ui, vocabText } from "./draw.js";

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, state, safely, save, reportError } = ctx;
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
  state.hovered = null;
  ctx.onCleanup(() => tooltip.hide());

  const cellOf = (event) => {
    const box = canvas.getBoundingClientRect();
    const shift = Number(canvas.dataset.shift) || 0;
    return cellAt(
      state.layout,
      event.clientX - box.left + shift,
      event.clientY - box.top,
      Number(canvas.dataset.start) || 0,
    );
  };
  canvas.addEventListener("mousemove", safely((event) => {
    const cell = cellOf(event);
    if (!cell) { state.hovered = null; tooltip.hide(); return; }
    const { hovered } = state;
    if (hovered && hovered.layer === cell.layer && hovered.position === cell.position) return;
    state.hovered = cell;
    showTip(ctx, cell);
  })); // prettier-ignore
  canvas.addEventListener("mouseleave", safely(() => { state.hovered = null; tooltip.hide(); })); // prettier-ignore
  canvas.addEventListener("click", safely((event) => {
    const cell = cellOf(event);
    if (!cell) return;
    const now = model.get("selected_position") ?? -1;
    save({ selected_position: now === cell.position ? -1 : cell.position });
  })); // prettier-ignore
  const requestPaint = ctx.coalesce(() => paintGrid(ctx));
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

  const csvRows = () => {
    const { data } = ctx;
    const { lens } = ui(ctx);
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
          vocabText(data, data.topVocab[base * K]),
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
      title: () => `${data.lenses[ui(ctx).lens]} lens: ${data.modelName}`,
      reportError,
    }),
  );
  toolbar.append(
    createExportMenu({
      name: "lens",
      root,
      rows: csvRows,
      title: () => `${ctx.data.lenses[ui(ctx).lens]} lens: ${ctx.data.modelName}`,
      reportError,
    }),
  );
  return { root, toolbar, lensSelect, colourSelect, targetSelect, caption, canvas, sizer, scroller, plotBox, tooltip };
}
