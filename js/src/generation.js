/**
 * Generation attribution view (front end of interp_widgets.widgets.GenerationWidget).
 *
 * Synced traits: the GenerationModel typedef below; the fields marked "written" are also set by the view.
 * Hovering a generated token previews its sources; clicking or Enter selects it.
 * The heatmap is a canvas: rows are generated tokens, columns all tokens, hover shows the value.
 * At word or sentence granularity every token carries its unit's summed score. An encoder–decoder result
 * (source_mask has a true entry) shows the source and the target sides apart, each with its own units.
 * A contrastive result (foil_tokens non-empty) also shows one chip per step with the generated token, its foil,
 * both probabilities and ln(p/p'); its signed scores explain the difference (orange: towards the generated token,
 * blue: towards the foil).
 *
 * @example
 *   import widget from "./generation.js";
 *   widget.render({model, el});
 */

import "./generation.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/generation/build.js";
import { draw } from "./views/generation/draw.js";
import { read } from "./views/generation/read.js";

export { heatmapCell } from "./views/generation/draw.js";
export { logRatio, read as readGeneration, unitRow } from "./views/generation/read.js";

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of GenerationWidget (and its bases TokenScoresWidget, InterpWidget).
 * @typedef {object} GenerationModel
 * @property {string[]} tokens  Text of each token, prompt then generated.
 * @property {string[]} spaces_before  Original text before each token.
 * @property {BinaryArray} special_mask  bool [n_tokens].
 * @property {BinaryArray} generated_mask  bool [n_tokens], true: generated.
 * @property {BinaryArray} turn_ids  int [n_tokens], chat turn (message) of each token (-1: none, e.g. template tokens).
 * @property {string[]} turn_roles  Role of each turn ("system", "user", "assistant"); empty for a plain text.
 * @property {BinaryArray} scores  float32 [n_steps, n_tokens]; NaN = not visible to that generated token.
 * @property {number[]} step_tokens  Token index of the token generated at each step.
 * @property {(number | null)[]} step_probs  Probability of each generated token.
 * @property {string} method
 * @property {string} score_meaning
 * @property {boolean} signed
 * @property {string[]} foil_tokens  Foil of each generated token (contrastive results; empty otherwise).
 * @property {(number | null)[]} foil_probs  Probability of each step's foil.
 * @property {string} contrast  The foil continuation ("" without a contrast).
 * @property {BinaryArray} word_ids  int [n_tokens], word id per token (-1: none); absent in version-2 data.
 * @property {BinaryArray} sentence_ids  int [n_tokens], sentence id per token (-1: none).
 * @property {BinaryArray} source_mask  bool [n_tokens], true: a source token of an encoder–decoder.
 * @property {"token" | "word" | "sentence"} granularity  Each token shows its unit's summed score (written).
 * @property {boolean} shared_scale  One colour scale for all steps (written).
 * @property {"colour" | "underline"} encoding
 * @property {boolean} high_contrast
 * @property {"text" | "heatmap"} view  Coloured tokens or the canvas of all steps (written).
 * @property {number} selected_step  Generated token whose sources are coloured (written).
 * @property {number} selected_token  Prompt token clicked, -1: none (read and written: a click toggles it).
 * @property {number} hovered_token  Token under the pointer, -1: none (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

/** Traits whose change re-reads the data. @type {(keyof GenerationModel)[]} */
const DATA_TRAITS = [
  "tokens",
  "spaces_before",
  "special_mask",
  "generated_mask",
  "turn_ids",
  "turn_roles",
  "scores",
  "step_tokens",
  "step_probs",
  "method",
  "score_meaning",
  "signed",
  "foil_tokens",
  "foil_probs",
  "contrast",
  "word_ids",
  "sentence_ids",
  "source_mask",
];
/** Traits whose change only redraws. @type {(keyof GenerationModel)[]} */
const VIEW_TRAITS = ["selected_step", "shared_scale", "encoding", "high_contrast", "view", "granularity"];

export default mountView("GenerationWidget", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
