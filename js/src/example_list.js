/**
 * Paged list of explained examples (front end of interp_widgets.widgets.ExampleListWidget): predicted
 * label with confidence, true label, coloured tokens; sort, filter, page and switch granularity (token,
 * word or sentence sums, computed here from the ids sent once) in the browser.
 *
 * Synced traits: the ExampleListModel typedef below; the fields marked "written" are also set by the view.
 *
 * @example
 *   import widget from "./example_list.js";
 *   widget.render({model, el});
 */

import "./example_list.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/example_list/build.js";
import { draw } from "./views/example_list/draw.js";
import { read } from "./views/example_list/read.js";

export { exampleUnits, visibleOrder } from "./views/example_list/read.js";

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of ExampleListWidget: its data (ExampleListData, generated in lib/view_traits.js) and its view
 * state (ExampleListState).
 * @typedef {import("./lib/view_traits.js").ExampleListData & ExampleListState} ExampleListModel
 */
/**
 * View state of ExampleListWidget (and its bases PagedList, InterpWidget). Per-token arrays hold the tokens of
 * all examples concatenated, in example order.
 * @typedef {object} ExampleListState
 * @property {"index" | "confidence" | "max_attribution" | "label"} sort_by  (written)
 * @property {boolean} descending  (written)
 * @property {string} filter_label  Show only examples predicted as this label, "" = all (written).
 * @property {"all" | "correct" | "wrong"} filter_outcome  (written)
 * @property {"token" | "word" | "sentence" | "turn"} granularity  (written)
 * @property {boolean} shared_scale  One colour scale for all examples (written).
 * @property {number} page  Page shown, 0-based (written).
 * @property {number} page_size  Examples per page.
 * @property {number} selected_example  Example clicked (its list index), -1: none (written).
 * @property {number} total_examples  Examples in the whole list when the widget holds one page of it (a paged
 *   list: the kernel replaces the data when `page` changes); 0: it holds them all.
 * @property {number} first_example  List index of the first example held (a paged list; else 0).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { EXAMPLE_LIST_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof ExampleListModel)[]} */
const VIEW_TRAITS = [
  "page",
  "page_size",
  "sort_by",
  "descending",
  "filter_label",
  "filter_outcome",
  "granularity",
  "shared_scale",
  "selected_example",
  "total_examples",
  "first_example",
];

export default mountView("ExampleListWidget", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
