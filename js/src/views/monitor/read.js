/**
 * Training monitor, read: the model's rows live in a column store (lib/plot_store.js), one per `stream_id`,
 * filled from the saved `checkpoint` and then by the kernel's `iw-monitor-append` custom messages; `initialize`
 * (once per model) keeps it, every view of the model draws from it.
 *
 * @example
 *   const store = storeOf(model); // store.n rows, store.x, store.column("loss")
 */
import { SeriesStore, decodeAppend, decodeCheckpoint } from "../../lib/plot_store.js";

/** @typedef {import("../../monitor.js").MonitorModel} MonitorModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

/** Stores by the model's `stream_id`: initialize and every render of one model share one store. */
export const STORES = new Map();

/**
 * The store of `model` (created on first use, e.g. by render in hosts that skip initialize).
 * @param {AnyModel<MonitorModel>} model
 */
export function storeOf(model) {
  const id = model.get("stream_id") || "";
  let store = STORES.get(id);
  if (!store) {
    store = new SeriesStore();
    store.replace(decodeCheckpoint(model.get("checkpoint"), model.get("checkpoint_schema")));
    STORES.set(id, store);
  }
  return store;
}

/** @param {{model: AnyModel<MonitorModel>}} props */
export function initialize({ model }) {
  const id = model.get("stream_id") || "";
  STORES.delete(id); // a re-initialised model (new ESM, page reload) starts from its checkpoint
  const store = storeOf(model);
  const onMessage = (content, buffers) => {
    if (content?.type !== "iw-monitor-append") return;
    try {
      store.append(decodeAppend(content, buffers));
    } catch (error) {
      console.error("MonitorWidget: dropped a malformed append message", error);
    }
  };
  const onCheckpoint = () => store.replace(decodeCheckpoint(model.get("checkpoint"), model.get("checkpoint_schema")));
  model.on("msg:custom", onMessage);
  model.on("change:checkpoint", onCheckpoint);
  return () => {
    model.off("msg:custom", onMessage);
    model.off("change:checkpoint", onCheckpoint);
    if (STORES.get(id) === store) STORES.delete(id);
  };
}

/** Split "metric|layer" (layer names may contain "|"; metric names never do). */
export function splitSeries(name) {
  const bar = name.indexOf("|");
  return bar < 0 ? [name, null] : [name.slice(0, bar), name.slice(bar + 1)];
}
