/**
 * Method comparison view (front end of interp_widgets.widgets.ComparisonWidget): one token row per
 * method, synchronised hover/focus across rows, per-method or shared colour scale, a token/word/sentence
 * granularity switch (sums computed here from the ids sent once) and the pairwise agreement table
 * computed in Python.
 *
 * Synced traits: the ComparisonModel typedef below; the fields marked "written" are also set by the view.
 *
 * @example
 *   import widget from "./comparison.js";
 *   widget.render({model, el});
 */

import "./comparison.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/comparison/build.js";
import { draw } from "./views/comparison/draw.js";
import { read } from "./views/comparison/read.js";

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * One row of the pairwise agreement table (Python `agreement_table`).
 * @typedef {object} AgreementRow
 * @property {string} a  Method A.
 * @property {string} b  Method B.
 * @property {number | null} spearman  Rank correlation (null: undefined, e.g. constant scores).
 * @property {number | null} top_k_overlap
 * @property {number} k
 */

/**
 * Synced traits of ComparisonWidget: its data (ComparisonData, generated in lib/view_traits.js) and its view
 * state (ComparisonState).
 * @typedef {import("./lib/view_traits.js").ComparisonData & ComparisonState} ComparisonModel
 */
/**
 * View state of ComparisonWidget (and its bases TokenScoresWidget, GroupedTokens, InterpWidget).
 * @typedef {object} ComparisonState
 * @property {"token" | "word" | "sentence" | "turn"} granularity  (written)
 * @property {boolean} shared_scale  One colour scale for all methods (written).
 * @property {"colour" | "underline"} encoding
 * @property {boolean} high_contrast
 * @property {number} selected_token  Token clicked, -1: none (written).
 * @property {number} hovered_token  Token under the pointer, -1: none (read and written: every row outlines it).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { COMPARISON_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof ComparisonModel)[]} */
const VIEW_TRAITS = ["granularity", "shared_scale", "encoding", "high_contrast"];

export default mountView("ComparisonWidget", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
