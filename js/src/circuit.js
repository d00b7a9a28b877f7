/**
 * Circuit view (front end of interp_widgets.widgets.CircuitView): an attribution graph, layers bottom to top and
 * prompt positions left to right. Hover a node for its label, activation and edges; click it for its details;
 * pin (Enter), group pinned nodes into named supernodes (G), prune with the threshold sliders and read the pinned
 * subgraph's live scores, all in the browser (graph_math). Pins, groups, thresholds and the selected node are view
 * state, saved with the notebook.
 *
 * @example
 *   import widget from "./circuit.js";
 *   widget.render({model, el});
 */
import "./circuit.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/circuit/build.js";
import { draw, onTheme } from "./views/circuit/draw.js";
import { read } from "./views/circuit/read.js";

export { layoutNodes, nodeIds, read as readCircuit } from "./views/circuit/read.js";

/**
 * Synced traits of CircuitView: its data (CircuitData, generated in lib/view_traits.js) and its view state.
 * @typedef {import("./lib/view_traits.js").CircuitData & CircuitViewState} CircuitViewModel
 */
/**
 * View state of CircuitView (and its base InterpWidget).
 * @typedef {object} CircuitViewState
 * @property {string[]} pinned  Pinned node ids (written).
 * @property {{name: string, members: string[]}[]} groups  Supernodes (written).
 * @property {number} node_threshold  Browser pruning's node threshold, (0, 1] (written).
 * @property {number} edge_threshold  Browser pruning's edge threshold, (0, 1] (written).
 * @property {string} selected  Node id whose details show, "" for none (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { CIRCUIT_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof CircuitViewModel)[]} */
const VIEW_TRAITS = ["pinned", "groups", "node_threshold", "edge_threshold", "selected"];

export default mountView("CircuitView", {
  dataTraits: DATA_TRAITS,
  uiTraits: VIEW_TRAITS,
  read,
  build,
  draw,
  onTheme,
  schedule: "frame",
});
