/**
 * Steering view (front end of interp_widgets.widgets.SteeringView): for each scale, the greedy continuation side by
 * side with the tokens that differ from the unsteered run marked, and the dose-response chart (the metric's mean
 * with a ± one-spread band, and the damage, against the scale) drawn in SVG. Buttons toggle the scales (keyboard
 * accessible, aria-pressed); a hidden scale leaves the columns and is drawn hollow in the chart. Token text is only
 * ever set as textContent.
 *
 * @example
 *   import widget from "./steering.js";
 *   widget.render({model, el});
 */

import "./steering.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/steering/build.js";
import { draw } from "./views/steering/draw.js";
import { read } from "./views/steering/read.js";

export { read as readSteering } from "./views/steering/read.js";

/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of SteeringView: its data (SteeringData, generated in lib/view_traits.js) and its view state
 * (SteeringViewState).
 * @typedef {import("./lib/view_traits.js").SteeringData & SteeringViewState} SteeringViewModel
 */
/**
 * View state of SteeringView.
 * @typedef {object} SteeringViewState
 * @property {number[]} hidden_scales  Indices of the scales hidden (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { STEERING_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof SteeringViewModel)[]} */
const VIEW_TRAITS = ["hidden_scales"];

export default mountView("SteeringView", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
