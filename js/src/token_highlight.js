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
 * Synced traits of TokenHighlightWidget (and its bases TokenScoresWidget, GroupedTokens, InterpWidget).
 * @typedef {object} TokenHighlightModel
 * @property {string[]} tokens  Text of each token (special tokens by name).
 * @property {string[]} spaces_before  Original text between a token and the previous one.
 * @property {BinaryArray} special_mask  bool [n_tokens].
 * @property {BinaryArray} word_ids  int [n_tokens], word of each token (-1: none).
 * @property {BinaryArray} sentence_ids  int [n_tokens], sentence of each token (-1: none).
 * @property {BinaryArray} turn_ids  int [n_tokens], chat turn (message) of each token (-1: none, e.g. template tokens).
 * @property {string[]} turn_roles  Role of each turn ("system", "user", ...); empty for a plain text.
 * @property {BinaryArray} scores  float32 [n_targets, n_tokens]; NaN = the target does not see the token.
 * @property {string[]} target_labels  Label of each row of scores.
 * @property {(number | null)[]} target_probs  Predicted probability per target, or empty.
 * @property {(number | null)[]} completeness_error  Per target, or empty.
 * @property {string} method
 * @property {string} score_meaning  What a score is, e.g. "sum over embedding dimension (signed)".
 * @property {boolean} signed  Diverging scale (signed scores) or 0..max (e.g. a norm).
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

/** Traits whose change re-reads the data. @type {(keyof TokenHighlightModel)[]} */
const DATA_TRAITS = [
  "tokens",
  "spaces_before",
  "special_mask",
  "word_ids",
  "sentence_ids",
  "turn_ids",
  "turn_roles",
  "scores",
  "target_labels",
  "target_probs",
  "method",
  "score_meaning",
  "completeness_error",
  "signed",
];
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
