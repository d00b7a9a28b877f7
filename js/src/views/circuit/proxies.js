/**
 * Circuit, proxies: the roving tabindex of the graph. A transparent `role="listbox"` layer over the canvases holds
 * the graph's one tab stop: a single `role="option"` element for the focused (or last focused) drawn node, else the
 * first drawn node (the bottom-left one), placed over its node and named by its label, kind, layer, token,
 * activation and influence (set as attributes: labels and tokens are never parsed as HTML). Its `aria-posinset` and
 * `aria-setsize` give its place among the drawn nodes (the nodes the threshold sliders keep, and the pinned ones),
 * in the order rows bottom to top, left to right, so the list is virtual: an arrow key (build.js) puts a new option
 * over the next node, focuses it and removes the old one, and a screen reader reads the new node's name and
 * "k of n". A slider move therefore costs one option's DOM work, not one per drawn node (a 5,000-node graph held
 * 5,000 options, and the first move removed most of them). The option keeps its element while its node stays the
 * tab stop, so it stays focused across redraws.
 *
 * @example
 *   syncProxies(ctx, geometry(ctx)); // after the base canvas is painted
 *   markProxies(ctx); // on every draw: the tab stop and the selected option
 */
import { displayToken } from "../../lib/text.js";
import { KIND_NAMES, nodeName } from "./read.js";
import { nodeBox } from "./draw.js";

const fmt = (x) => (Number.isFinite(x) ? Number(x).toPrecision(3) : "—");

/** The accessible name of node `i`: label, kind, layer, token, activation (or probability), influence, pin. */
export function proxyName(data, i, pinned = false, group = "") {
  const k = data.kind[i];
  const where = k === 2 ? "embedding" : k === 3 ? "output" : `layer ${data.layer[i]}`;
  // a token node's name already says its token and position
  const token = k === 2 ? "" : `, token ${JSON.stringify(displayToken(String(data.tokens[data.pos[i]] ?? "")))} at position ${data.pos[i]}`; // prettier-ignore
  const value = k === 0 || k === 4 ? `, activation ${fmt(data.activation[i])}` : k === 3 ? `, p = ${fmt(data.logitProbs[data.logitOf[i]])}` : ""; // prettier-ignore
  const pin = group ? `, pinned in supernode ${group}` : pinned ? ", pinned" : "";
  return `${nodeName(data, i)}, ${KIND_NAMES[k]} ${data.ids[i]}, ${where}${token}${value}, influence ${fmt(data.influence[i])}${pin}`; // prettier-ignore
}

/** The node order of the list: rows bottom to top, then left to right (ties by node index), per data. */
function nodeOrder(ctx) {
  const { data, state } = ctx;
  if (state.proxyData !== data) {
    const { row, col } = data.layout;
    const order = Array.from({ length: data.n }, (_, i) => i);
    order.sort((a, b) => row[a] - row[b] || col[a] - col[b] || a - b);
    state.proxyOrder = order;
    state.proxyData = data;
    state.optionNode = -1; // new data: the next placement makes a new option (and moves the focus to it)
  }
  return state.proxyOrder;
}

/** Whether node `i` is drawn (kept by the sliders or pinned) in the last base paint. */
const drawn = (ctx, i) => i >= 0 && Boolean(ctx.state.visible?.[i]);

/** The first (bottom-left) or, with `last`, the last (top-right) drawn node in the list's order; -1 for none. */
export function endNode(ctx, last = false) {
  const order = nodeOrder(ctx);
  const n = order.length;
  for (let k = 0; k < n; k++) {
    const i = order[last ? n - 1 - k : k];
    if (drawn(ctx, i)) return i;
  }
  return -1;
}

/** The option element, or undefined when none is placed (nothing drawn yet). */
export function proxyOf(ctx) {
  return ctx.state.option ?? undefined;
}

/** The node that holds the tab stop: the focused (or last focused) node when drawn, else the first drawn node. */
function tabStopNode(ctx) {
  return drawn(ctx, ctx.state.focus) ? ctx.state.focus : endNode(ctx);
}

/** Set the option's place, size, name, "k of n" and selection for node `i`; skipped when nothing changed. */
function describe(ctx, el, i) {
  const { data, state, model } = ctx;
  const order = nodeOrder(ctx);
  let rank = 0;
  let count = 0;
  for (const j of order) {
    if (!drawn(ctx, j)) continue;
    count += 1;
    if (j === i) rank = count;
  }
  const id = data.ids[i];
  const group = (model.get("groups") ?? []).find((g) => g.members.includes(id))?.name ?? "";
  const name = proxyName(data, i, (model.get("pinned") ?? []).includes(id), group);
  const selected = model.get("selected") === id;
  const { x, y, r } = nodeBox(state.geometry, data, i);
  const size = 2 * (r + 3);
  const key = `${x - size / 2}|${y - size / 2}|${size}|${name}|${rank}|${count}|${selected}`;
  if (state.optionKey === key) return;
  state.optionKey = key;
  el.style.left = `${x - size / 2}px`;
  el.style.top = `${y - size / 2}px`;
  el.style.width = `${size}px`;
  el.style.height = `${size}px`;
  el.setAttribute("aria-label", name);
  el.setAttribute("aria-posinset", String(rank));
  el.setAttribute("aria-setsize", String(count));
  el.setAttribute("aria-selected", String(selected));
}

/**
 * Put the option over node `i` (a drawn node): a new element when the node changes, inserted before the old one is
 * removed, and focused when `focus` is set or the old one held the focus.
 */
function place(ctx, i, focus = false, options = undefined) {
  const { state, parts, doc } = ctx;
  nodeOrder(ctx);
  let el = state.option;
  const old = state.optionNode === i && el ? null : el;
  if (!el || old) {
    el = doc.createElement("div");
    el.className = "iw-circuit-node";
    el.setAttribute("role", "option");
    el.setAttribute("tabindex", "0");
    el.dataset.node = String(i);
    parts.nodes.append(el);
    state.option = el;
    state.optionNode = i;
    state.optionKey = "";
  }
  describe(ctx, el, i);
  if (focus || (old && doc.activeElement === old)) el.focus(options);
  old?.remove();
  return el;
}

/** Move the DOM focus to node `i` (`state.focus` follows in the focus handler); false when it is not drawn. */
export function focusNode(ctx, i, options = undefined) {
  if (!drawn(ctx, i) || !ctx.state.geometry) return false;
  place(ctx, i, true, options);
  return true;
}

/** Keep the option on the tab stop node, with its name and selection up to date: O(drawn nodes), one element. */
export function markProxies(ctx) {
  const { state } = ctx;
  if (!state.geometry || !state.visible) return;
  const stop = tabStopNode(ctx);
  if (stop >= 0) place(ctx, stop);
  else if (state.option) {
    state.option.remove();
    state.option = null;
    state.optionNode = -1;
  }
}

/**
 * Bring the option in line with the drawn nodes (`state.visible`) and the geometry `g`: a focused or hovered node
 * that is no longer drawn is dropped, and when the DOM focus was on the graph it stays there, on the tab stop.
 */
export function syncProxies(ctx, g) {
  const { parts, state, doc } = ctx;
  const layer = parts.nodes;
  const active = doc.activeElement;
  const hadFocus = active === parts.stage || (active !== null && layer.contains(active));
  if (!drawn(ctx, state.focus)) state.focus = -1;
  if (!drawn(ctx, state.hover)) state.hover = -1;
  layer.style.width = `${g.width}px`;
  layer.style.height = `${g.height}px`;
  markProxies(ctx);
  if (hadFocus && state.option && doc.activeElement !== state.option) state.option.focus({ preventScroll: true });
}
