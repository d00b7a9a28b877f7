/**
 * Token attribution highlighter (front end of interp_widgets.widgets.TokenHighlightWidget).
 *
 * Synced traits: the TokenHighlightModel typedef below; the fields marked "written" are also set by the view.
 * Word/sentence sums are computed here, never in the kernel. Long inputs render block by block (lib/paint.js renderTokenRun).
 * The view is mounted by lib/view.js mountView from its read, build and draw modules in views/token_highlight/.
 *
 * @example
 *   import widget from "./token_highlight.js";
 *   const cleanup = widget.render({model, el});
 */

import "./token_highlight.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/token_highlight/build.js";
import { draw } from "./views/token_highlight/draw.js";
import { read } from "./views/token_highlight/read.js";

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of TokenHighlightWidget: its data (TokenHighlightData, generated in lib/view_traits.js) and its view
 * state (TokenHighlightState).
 * @typedef {import("./lib/view_traits.js").TokenHighlightData & TokenHighlightState} TokenHighlightModel
 */
/**
 * View state of TokenHighlightWidget (and its bases TokenScoresWidget, GroupedTokens, InterpWidget).
 * @typedef {object} TokenHighlightState
 * @property {number} selected_target  Row of scores on display (written).
 * @property {"token" | "word" | "sentence" | "turn"} granularity  Units coloured; sums are computed here (written).
 * @property {boolean} show_special_tokens  (written)
 * @property {boolean} shared_scale  One colour scale for all targets (written).
 * @property {"colour" | "underline"} encoding  (written)
 * @property {boolean} high_contrast  (written)
 * @property {number} selected_token  Token clicked or chosen with Enter, -1: none (written).
 * @property {number} hovered_token  Token under the pointer, -1: none (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { TOKEN_HIGHLIGHT_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof TokenHighlightModel)[]} */
const VIEW_TRAITS = [
  "selected_target",
  "granularity",
  "show_special_tokens",
  "shared_scale",
  "encoding",
  "high_contrast",
];

export default mountView("TokenHighlightWidget", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
