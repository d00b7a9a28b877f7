/**
 * Attention, the patterns of single heads: requested from the kernel (a custom message) and cached, with the
 * pinned heads (saved top-k keys per query, made dense once) standing in while no kernel answers. State lives in
 * `ctx.state`: `cache` (key -> {values, tq, tk, exact}, most recent last), `pinnedDense`, `pending` (key ->
 * request id), `nextId`, `answered`, `kernelTimer`, `noKernel`.
 *
 * @example
 *   const entry = pattern(ctx, 0, 3); // null while layer 0 head 3 is being fetched (then a redraw is requested)
 */
import { decodeFloat16, denseFromTopK } from "../../lib/attention_math.js";

const CACHE = 24;
const NO_KERNEL_MS = 2500;

/** The cache / request key of a head or aggregation. */
export const patternKey = (layer, head) => `${layer}:${head}`;

/** The pattern state of a fresh view (the caches are emptied when the data change: see `forgetPatterns`). */
export function patternState() {
  return {
    cache: new Map(),
    pinnedDense: new Map(),
    pending: new Map(),
    nextId: 1,
    answered: false,
    kernelTimer: null,
    noKernel: false,
  };
}

/** Empty the caches (new data). */
export function forgetPatterns({ state }) {
  state.cache.clear();
  state.pinnedDense.clear();
}

function remember({ state }, key, entry) {
  state.cache.delete(key);
  state.cache.set(key, entry);
  while (state.cache.size > CACHE) state.cache.delete(state.cache.keys().next().value);
}

/** Send to the kernel; a host with no kernel (an exported page, a reopened notebook) may throw or reject. */
export function sendToKernel({ model }, message) {
  try {
    const sent = model.send(message);
    if (sent && typeof sent.catch === "function") sent.catch(() => {});
  } catch {
    // no kernel: the pinned heads and the no-kernel note take over
  }
}

/** Index of (layer, head) in the pinned heads, -1 if it is not pinned. */
export const pinnedIndex = ({ data }, layer, head) =>
  data.pinned.findIndex((p) => p.layer === layer && String(p.head) === String(head));

/** The weights of (layer, head): exact from the kernel, else the pinned top-k, else null (requested). */
export function pattern(ctx, layer, head) {
  const { data, state } = ctx;
  const key = patternKey(layer, head);
  const hit = state.cache.get(key);
  if (hit) return hit;
  if (!state.pending.has(key)) {
    const id = state.nextId++;
    state.pending.set(key, id);
    sendToKernel(ctx, { type: "request", id, layer, head });
    if (!state.answered && state.kernelTimer === null) state.kernelTimer = setTimeout(() => { state.kernelTimer = null; if (!state.answered) { state.noKernel = true; ctx.request(1); } }, NO_KERNEL_MS); // prettier-ignore
  }
  const p = pinnedIndex(ctx, layer, head);
  if (p < 0) return null;
  if (!state.pinnedDense.has(key))
    state.pinnedDense.set(key, {
      values: denseFromTopK(
        data.keys.values,
        data.weights.values,
        p,
        data.tokens.length,
        data.keys.shape[2],
        data.keyTokens.length,
      ),
      tq: data.tokens.length,
      tk: data.keyTokens.length,
      exact: false,
    });
  return state.pinnedDense.get(key);
}

/** Listen for the kernel's answers (`pattern`, `pin-error`) for as long as the view lives. */
export function listenForPatterns(ctx) {
  const { state, parts } = ctx;
  ctx.listen("msg:custom", (msg, buffers) => {
    if (!msg || msg.type !== "pattern") {
      if (msg?.type === "pin-error") parts.status.textContent = `Could not pin: ${msg.error}`;
      return;
    }
    state.answered = true;
    state.noKernel = false;
    const key = patternKey(msg.layer, msg.head);
    state.pending.delete(key);
    if (msg.error) {
      parts.status.textContent = `The kernel could not send layer ${msg.layer} head ${msg.head}: ${msg.error}`;
      return;
    }
    const [tq, tk] = msg.shape;
    const values = decodeFloat16(buffers[0]);
    if (values.length !== tq * tk) throw new RangeError(`pattern of ${values.length} values for shape [${tq}, ${tk}]`);
    remember(ctx, key, { values, tq, tk, exact: true });
    ctx.request(1);
  });
  ctx.onCleanup(() => {
    if (state.kernelTimer !== null) clearTimeout(state.kernelTimer);
  });
}
