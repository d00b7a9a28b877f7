/**
 * Circuit, proxies: the roving tabindex of the graph. A transparent `role="listbox"` layer over the canvases holds
 * one `role="option"` element per drawn node (the nodes the threshold sliders keep, and the pinned ones), placed over
 * its node and named by its label, kind, layer, token, activation and influence (set as attributes: labels and
 * tokens are never parsed as HTML). Exactly one option has tabindex 0 (the focused or last focused node, else the
 * first node: the bottom-left one), the others -1, so the graph is one tab stop; the arrow keys move the DOM focus
 * between options (build.js). The options are kept in a map by node and updated in place, in the order rows bottom
 * to top, left to right: a change of the drawn set only adds and removes options, so the focused one stays in the
 * page (and focused) while it is drawn. The DOM work is proportional to the drawn nodes.
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

/** The node order of the options: rows bottom to top, then left to right (ties by node index), per data. */
function nodeOrder(ctx) {
  const { data, state, parts } = ctx;
  if (state.proxyData !== data) {
    const { row, col } = data.layout;
    const order = Array.from({ length: data.n }, (_, i) => i);
    order.sort((a, b) => row[a] - row[b] || col[a] - col[b] || a - b);
    state.proxyOrder = order;
    state.proxyData = data;
    state.proxies = new Map();
    state.proxyKeys = new Map();
    state.tabStop = -1;
    state.proxySelected = -1;
    parts.nodes.replaceChildren();
  }
  return state.proxyOrder;
}

/** The option of node `i`, or undefined when it is not drawn. */
export function proxyOf(ctx, i) {
  return ctx.state.proxies?.get(i);
}

/** Move the DOM focus to node `i`'s option (`state.focus` follows in the focus handler); false when not drawn. */
export function focusNode(ctx, i, options = undefined) {
  const el = proxyOf(ctx, i);
  if (!el) return false;
  el.focus(options);
  return true;
}

/** The node that holds the tab stop: the focused (or last focused) node when drawn, else the first drawn node. */
function tabStopNode(ctx) {
  const { state } = ctx;
  if (state.focus >= 0 && state.proxies.has(state.focus)) return state.focus;
  for (const i of state.proxyOrder) if (state.proxies.has(i)) return i;
  return -1;
}

/** Give the tab stop (tabindex 0) to the right option and aria-selected to the selected one: O(1) per call. */
export function markProxies(ctx) {
  const { state, data, model } = ctx;
  if (!state.proxies) return;
  const stop = tabStopNode(ctx);
  if (stop !== state.tabStop) {
    state.proxies.get(state.tabStop)?.setAttribute("tabindex", "-1");
    state.proxies.get(stop)?.setAttribute("tabindex", "0");
    state.tabStop = stop;
  }
  const selected = data.idIndex.get(model.get("selected") || "") ?? -1;
  if (selected !== state.proxySelected) {
    state.proxies.get(state.proxySelected)?.setAttribute("aria-selected", "false");
    state.proxies.get(selected)?.setAttribute("aria-selected", "true");
    state.proxySelected = selected;
  }
}

/**
 * Bring the options in line with the drawn nodes (`state.visible`) and the geometry `g`: remove the undrawn, add the
 * new ones in order, move and rename the others where needed. A node that is no longer drawn loses the focus; when
 * the DOM focus was on the graph, it moves to the tab stop.
 */
export function syncProxies(ctx, g) {
  const { data, parts, state, model, doc } = ctx;
  const layer = parts.nodes;
  const active = doc.activeElement;
  const hadFocus = active === parts.stage || (active !== null && layer.contains(active));
  const order = nodeOrder(ctx); // new data: every option is made anew
  const { proxies, proxyKeys, visible } = state;
  for (const [i, el] of proxies) {
    if (visible[i]) continue;
    el.remove();
    proxies.delete(i);
    proxyKeys.delete(i);
  }
  if (state.focus >= 0 && !visible[state.focus]) state.focus = -1;
  if (state.hover >= 0 && !visible[state.hover]) state.hover = -1;
  if (!proxies.has(state.tabStop)) state.tabStop = -1;
  if (!proxies.has(state.proxySelected)) state.proxySelected = -1;
  const pinned = new Set(model.get("pinned") ?? []);
  const groupOf = new Map();
  for (const group of model.get("groups") ?? []) for (const id of group.members) groupOf.set(id, group.name);
  layer.style.width = `${g.width}px`;
  layer.style.height = `${g.height}px`;
  let next = layer.firstChild;
  for (const i of order) {
    if (!visible[i]) continue;
    let el = proxies.get(i);
    if (!el) {
      el = doc.createElement("div");
      el.className = "iw-circuit-node";
      el.setAttribute("role", "option");
      el.setAttribute("tabindex", "-1");
      el.setAttribute("aria-selected", "false");
      el.dataset.node = String(i);
      proxies.set(i, el);
      layer.insertBefore(el, next);
    } else if (el === next) next = el.nextSibling;
    else layer.insertBefore(el, next); // not reached while the layout holds: kept options keep their order
    const id = data.ids[i];
    const { x, y, r } = nodeBox(g, data, i);
    const size = 2 * (r + 3);
    const name = proxyName(data, i, pinned.has(id), groupOf.get(id) ?? "");
    const key = `${x - size / 2}|${y - size / 2}|${size}|${name}`;
    if (proxyKeys.get(i) === key) continue;
    proxyKeys.set(i, key);
    el.style.left = `${x - size / 2}px`;
    el.style.top = `${y - size / 2}px`;
    el.style.width = `${size}px`;
    el.style.height = `${size}px`;
    el.setAttribute("aria-label", name);
  }
  markProxies(ctx);
  if (hadFocus && !layer.contains(doc.activeElement)) focusNode(ctx, state.tabStop, { preventScroll: true });
}
