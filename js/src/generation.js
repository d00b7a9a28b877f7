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
 * Synced traits of GenerationWidget: its data (GenerationData, generated in lib/view_traits.js) and its view
 * state (GenerationState).
 * @typedef {import("./lib/view_traits.js").GenerationData & GenerationState} GenerationModel
 */
/**
 * View state of GenerationWidget (and its bases TokenScoresWidget, InterpWidget).
 * @typedef {object} GenerationState
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

import { GENERATION_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof GenerationModel)[]} */
const VIEW_TRAITS = ["selected_step", "shared_scale", "encoding", "high_contrast", "view", "granularity"];

export default mountView("GenerationWidget", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
