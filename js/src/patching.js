/**
 * Patching view (front end of interp_widgets.widgets.PatchingView): activation or attribution patching of a clean /
 * corrupt pair as one heatmap per patched point type, layers × positions (clean tokens along the axis) or layers ×
 * heads. Hover shows a cell's exact value and raw metric; clicking lists the top-5 next tokens of its patched run
 * from the arrays stored in the view (no kernel), or asks the kernel when the view holds none (over 50,000 cells,
 * said in the view). A switch shows normalised or raw values; noising results say "low = important"; an exact and an
 * attribution-patching result sit side by side with their agreement. Each heatmap is one tab stop: arrow keys move
 * the cell, Enter selects it. Token text is drawn with fillText or set as textContent.
 *
 * @example
 *   import widget from "./patching.js";
 *   widget.render({model, el});
 */

import "./patching.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/patching/build.js";
import { draw } from "./views/patching/draw.js";
import { read } from "./views/patching/read.js";

export { read as readPatching } from "./views/patching/read.js";

/**
 * Synced traits of PatchingView: its data (PatchingData, generated in lib/view_traits.js) and its view state
 * (PatchingViewState).
 * @typedef {import("./lib/view_traits.js").PatchingData & PatchingViewState} PatchingViewModel
 */
/**
 * View state of PatchingView.
 * @typedef {object} PatchingViewState
 * @property {"normalised" | "raw"} scale  Values shown (written).
 * @property {number[]} selected_cell  The clicked cell [panel, layer, unit, position], [] for none (written).
 * @property {number} unit_position  Position of the heads grids, -1: the last (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { PATCHING_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof PatchingViewModel)[]} */
const VIEW_TRAITS = ["scale", "selected_cell", "unit_position"];

export default mountView("PatchingView", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
