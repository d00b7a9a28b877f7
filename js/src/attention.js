/**
 * Attention patterns view (front end of interp_widgets.widgets.AttentionWidget): a head view (one layer, any
 * subset of heads, heatmap or lines between query and key tokens) and a model view (layers × heads thumbnails).
 *
 * Heads are not synced: the view asks the kernel for the one it shows (custom message {type: "request", id, layer,
 * head}) and gets its (queries × keys) weights as one float16 buffer; the last heads stay in a small cache. Pinned
 * heads (top-k keys per query) are part of the synced state, so a saved notebook or exported page shows those.
 * Hover a token to focus its query row, click to lock, click again or press Esc to unlock.
 *
 * @example
 *   import widget from "./attention.js";
 *   widget.render({model, el});
 */

import "./attention.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/attention/build.js";
import { draw, onTheme } from "./views/attention/draw.js";
import { read } from "./views/attention/read.js";

export { patternKey } from "./views/attention/patterns.js";
export { read as readAttention } from "./views/attention/read.js";

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of AttentionWidget: its data (AttentionData, generated in lib/view_traits.js) and its view
 * state (AttentionState).
 * @typedef {import("./lib/view_traits.js").AttentionData & AttentionState} AttentionModel
 */
/**
 * View state of AttentionWidget (and its base InterpWidget).
 * @typedef {object} AttentionState
 * @property {"head" | "model"} view  (written)
 * @property {number} layer  (written)
 * @property {number[]} heads  (written)
 * @property {"" | "mean" | "max" | "rollout"} aggregate  (written)
 * @property {"heatmap" | "lines"} pattern_style  (written; not `style`, which ipywidgets' DOMWidgetView reads as a StyleModel reference)
 * @property {number} focus  Focused query token, -1: none (written).
 * @property {boolean} locked  (written)
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { ATTENTION_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof AttentionModel)[]} */
const VIEW_TRAITS = ["view", "layer", "heads", "aggregate", "pattern_style", "focus", "locked"];

export default mountView("AttentionWidget", {
  dataTraits: DATA_TRAITS,
  uiTraits: VIEW_TRAITS,
  read,
  build,
  draw,
  onTheme,
});
