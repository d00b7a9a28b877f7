/**
 * Patching view, build: the toolbar (normalised / raw switch, the position of the heads grids, export), the caption,
 * the box of heatmaps (made per panel by draw.js on each re-read), the detail box of the clicked cell, the agreement
 * table, the tooltip, and the answers of the kernel to requests for top-5 lists not stored in the view.
 *
 * @example
 *   const parts = build(ctx);
 */
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { createTooltip } from "../../lib/tooltip.js";
import { csvRows } from "./grid.js";

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { el, state, safely, save, reportError } = ctx;
  const scaleSelect = h("select", { class: "iw-patching-scale", "aria-label": "Values shown" }, [
    h("option", { value: "normalised" }, "normalised (0 = corrupt, 1 = clean)"),
    h("option", { value: "raw" }, "raw metric"),
  ]);
  const positionSelect = h("select", { class: "iw-patching-position", "aria-label": "Position of the heads grids" });
  const positionLabel = h("label", { class: "iw-patching-position-label" }, ["Heads at position ", positionSelect]);
  const toolbar = h("div", { class: "iw-toolbar" }, [h("label", {}, ["Values ", scaleSelect]), positionLabel]);
  const caption = h("div", { class: "iw-caption" });
  const note = h("div", { class: "iw-hint iw-patching-note" });
  const panelsBox = h("div", { class: "iw-patching-panels" });
  const detail = h("div", { class: "iw-patching-detail", "aria-live": "polite" });
  const agreementBox = h("div", { class: "iw-patching-agreement" });
  const root = h("div", { class: "iw-root iw-patching" }, [toolbar, caption, note, panelsBox, detail, agreementBox]);
  el.append(root);
  const tooltip = createTooltip(root);
  ctx.onCleanup(() => tooltip.hide());
  Object.assign(state, { hovered: null, cursor: null, fetched: new Map(), pending: new Set(), nextId: 1 });
  state.noKernel = false;
  state.kernelTimer = null;
  ctx.onCleanup(() => state.kernelTimer !== null && clearTimeout(state.kernelTimer));
  scaleSelect.addEventListener(
    "change",
    safely(() => save({ scale: scaleSelect.value })),
  );
  positionSelect.addEventListener(
    "change",
    safely(() => save({ unit_position: Number(positionSelect.value) })),
  );
  ctx.listen("msg:custom", (msg) => {
    if (!msg || msg.type !== "top") return;
    const key = [msg.panel, msg.layer, msg.unit, msg.position].join(":");
    state.pending.delete(key);
    state.noKernel = false;
    state.fetched.set(
      key,
      msg.error ? { error: String(msg.error) } : { tokens: msg.tokens ?? [], probs: msg.probs ?? [] },
    );
    ctx.request(1);
  });
  const title = () => `Activation patching: ${ctx.data.modelName}`;
  toolbar.append(createExportMenu({ name: "patching", root, rows: () => csvRows(ctx.data), title, reportError }));
  return { root, toolbar, scaleSelect, positionSelect, positionLabel, caption, note, panelsBox, detail, agreementBox,
    tooltip, panels: [] }; // prettier-ignore
}
