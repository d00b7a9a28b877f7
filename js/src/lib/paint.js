/**
 * Shared token painting and chunked rendering for every view that draws token runs.
 *
 * `paintToken` encodes a score on an element either by colour (diverging or sequential background,
 * contrasting text) or, for the non-colour encoding, by underline weight plus a +/− marker.
 * `appendChunked` puts the first nodes in the DOM at once and the rest in later animation frames, so
 * 10k-token inputs paint quickly and the page stays responsive.
 *
 * @example
 *   paintToken(span, 0.4, 0.8, {theme: "light", signed: true, encoding: "colour"});
 *   const rendering = appendChunked(box, spans); // rendering.cancel() before the next render
 */
import { scoreColours } from "./colour.js";

const MINUS = "\u2212";

/**
 * @param {HTMLElement} el
 * @param {number} score  NaN paints the neutral "unseen" look
 * @param {number} max
 * @param {{theme?: "light" | "dark", signed?: boolean, encoding?: "colour" | "underline", boost?: boolean}} options
 */
export function paintToken(el, score, max, { theme = "light", signed = true, encoding = "colour", boost = false } = {}) {
  const unseen = Number.isNaN(score);
  const value = unseen ? 0 : score;
  if (encoding === "underline") {
    const t = max > 0 ? Math.min(Math.abs(signed ? value : Math.max(value, 0)) / max, 1) : 0;
    el.style.backgroundColor = "";
    el.style.color = "";
    el.style.borderBottom = t > 0 ? `${(1 + 5 * t).toFixed(1)}px solid currentColor` : "1px dotted currentColor";
    if (signed && value !== 0 && !unseen) el.dataset.iwSign = value > 0 ? "+" : MINUS;
    else delete el.dataset.iwSign;
    return;
  }
  const colours = scoreColours(value, max, theme, { signed, boost });
  el.style.borderBottom = "";
  delete el.dataset.iwSign;
  el.style.backgroundColor = colours.background;
  el.style.color = colours.color;
}

/** Nodes put in the DOM synchronously before chunking starts. */
export const FIRST_CHUNK = 1500;
/** Nodes appended per animation frame afterwards. */
export const CHUNK = 2500;

/**
 * Append `nodes` to `box` (after clearing it): `first` at once, then `chunk` per frame.
 * @param {HTMLElement} box
 * @param {Node[]} nodes
 * @param {{first?: number, chunk?: number, onDone?: () => void, prepare?: (node: Node) => void}} [options]
 *   `prepare` runs on each node just before it enters the DOM (deferred painting and labelling)
 * @returns {{cancel: () => void, finish: () => void}} cancel stops appending (call before re-rendering);
 *   finish appends everything left at once (e.g. before focusing a node far down)
 */
export function appendChunked(box, nodes, { first = FIRST_CHUNK, chunk = CHUNK, onDone, prepare } = {}) {
  const doc = box.ownerDocument;
  const win = doc.defaultView;
  const schedule = win?.requestAnimationFrame ? (fn) => win.requestAnimationFrame(fn) : (fn) => setTimeout(fn, 0);
  const unschedule = win?.cancelAnimationFrame ? (id) => win.cancelAnimationFrame(id) : clearTimeout;
  let next = 0;
  let handle = null;
  const appendUpTo = (end) => {
    const fragment = doc.createDocumentFragment();
    for (; next < Math.min(end, nodes.length); next += 1) {
      prepare?.(nodes[next]);
      fragment.append(nodes[next]);
    }
    box.append(fragment);
  };
  box.replaceChildren();
  appendUpTo(first);
  const step = () => {
    handle = null;
    appendUpTo(next + chunk);
    if (next < nodes.length) handle = schedule(step);
    else onDone?.();
  };
  if (next < nodes.length) handle = schedule(step);
  else onDone?.();
  const cancel = () => {
    if (handle !== null) unschedule(handle);
    handle = null;
  };
  return {
    cancel,
    finish() {
      if (next >= nodes.length) return;
      cancel();
      appendUpTo(nodes.length);
      onDone?.();
    },
  };
}
