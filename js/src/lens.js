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
 * Synced traits of LensWidget (N lenses, L layers, T positions, k top tokens, M targets).
 * @typedef {object} LensModel
 * @property {string[]} tokens  The T tokens.
 * @property {string[]} layers  The L layer names.
 * @property {string[]} lenses  "logit" and maybe "tuned".
 * @property {string[]} vocab  Text of every token the cells mention.
 * @property {BinaryArray} top_vocab  int32 [N, L, T, k] indices into vocab.
 * @property {BinaryArray} top_probs  float32 [N, L, T, k].
 * @property {BinaryArray} kl  float32 [N, L, T] KL(final || lens).
 * @property {string[]} target_labels  The M targets.
 * @property {BinaryArray} target_vocab  int32 [T, M] indices into vocab, -1: none.
 * @property {BinaryArray} target_probs  float32 [N, L, T, M] (NaN: none).
 * @property {BinaryArray} target_ranks  int32 [N, L, T, M] (1 = top, 0: none).
 * @property {BinaryArray} generated_mask  bool [T].
 * @property {number} vocab_size
 * @property {string} model_name
 * @property {string} lens  The lens shown (written).
 * @property {"top1_prob" | "target_prob" | "target_rank"} colour_by  (written)
 * @property {number} target  Target colouring the cells (written).
 * @property {number} selected_position  Position plotted, -1: none (written).
 * @property {number[]} plotted_targets  Targets in the trajectory plot (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

/** Traits whose change re-reads the data. @type {(keyof LensModel)[]} */
const DATA_TRAITS = [
  "tokens",
  "layers",
  "lenses",
  "vocab",
  "top_vocab",
  "top_probs",
  "kl",
  "target_labels",
  "target_vocab",
  "target_probs",
  "target_ranks",
  "generated_mask",
  "vocab_size",
  "model_name",
];
/** Traits whose change only redraws. @type {(keyof LensModel)[]} */
const VIEW_TRAITS = ["lens", "colour_by", "target", "selected_position", "plotted_targets"];

export default mountView("LensWidget", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
