/**
 * Live training monitor (front end of interp_widgets.widgets.MonitorWidget).
 *
 * `initialize` (once per model) creates the model's SeriesStore, loads the `checkpoint` trait and listens
 * for "iw-monitor-append" custom messages, so rows streamed while a cell runs are kept even before the
 * widget is displayed. `render` (once per view) draws the store on canvases, at most once per animation
 * frame, decimated to the pixel grid. All interaction is local to the browser and keeps working while
 * the kernel is busy: hover readouts, layer and panel toggles, smoothing, drag-to-zoom, Shift+drag pan,
 * double-click / "Reset zoom", linear/log scale per panel.
 *
 * Synced traits: the MonitorModel typedef below (the view writes none; rows stream in as custom messages).
 *
 * @example
 *   import widget from "./monitor.js";
 *   widget.initialize({model}); widget.render({model, el});
 */

import "./monitor.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/monitor/build.js";
import { draw, onTheme } from "./views/monitor/draw.js";
import { initialize } from "./views/monitor/read.js";

export { PALETTE, nearestFinite } from "./views/monitor/draw.js";
export { splitSeries, storeOf } from "./views/monitor/read.js";

/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * One panel of the monitor (Python `DEFAULT_PANELS`).
 * @typedef {object} MonitorPanel
 * @property {string} id
 * @property {string} [title]
 * @property {"lines" | "heatmap"} [kind]
 * @property {string[]} [series]  Global series drawn as lines.
 * @property {string} [metric]  Per-layer metric: series `<metric>|<layer>`.
 * @property {string[]} [dashed]  Per-layer companions drawn dashed.
 * @property {[string, string]} [band]  Per-layer low and high metrics of a shaded band.
 * @property {"linear" | "log"} [scale]
 * @property {number} [reference]  y of a reference line.
 */

/**
 * Synced traits of MonitorWidget: its data (MonitorData, generated in lib/view_traits.js) and its view
 * state (MonitorState).
 * @typedef {import("./lib/view_traits.js").MonitorData & MonitorState} MonitorModel
 */
/**
 * View state of MonitorWidget (and its base InterpWidget).
 * @typedef {object} MonitorState
 * @property {string} stream_id  Identifies the browser-side store shared by this model's views.
 * @property {string} title
 * @property {string} x_label  Name of the x axis: "step", or "checkpoint" for replays.
 * @property {string[]} layers  Layer names in display order.
 * @property {MonitorPanel[]} panels
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

// Traits whose change re-reads the data: the rows, which initialize() puts into the model's store
// (views/monitor/read.js), whose update redraws in the same frame.
import { MONITOR_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof MonitorModel)[]} */
const VIEW_TRAITS = ["title", "x_label"];

export default mountView("MonitorWidget", {
  dataTraits: DATA_TRAITS,
  uiTraits: VIEW_TRAITS,
  build,
  draw,
  onTheme,
  initialize,
  schedule: "frame",
});
