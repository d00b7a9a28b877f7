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

import "./lens.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/lens/build.js";
import { draw } from "./views/lens/draw.js";
import { read } from "./views/lens/read.js";

export { read as readLens } from "./views/lens/read.js";

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

import { LENS_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof LensModel)[]} */
const VIEW_TRAITS = ["lens", "colour_by", "target", "selected_position", "plotted_targets"];

export default mountView("LensWidget", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
