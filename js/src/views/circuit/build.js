/**
 * Circuit, build: the toolbar (threshold sliders, pin, group with a typed name, intervene), the scores line, the
 * graph (a base canvas for edges and nodes, an overlay canvas for the hovered node's edges; one tab stop whose
 * arrow keys move between nodes), the suggestions, the groups and the detail pane, and their handlers. Trait
 * writes go through `ctx.save`; the kernel is asked for the details that did not travel and for interventions,
 * and when it does not answer the view says what it needs.
 *
 * @example
 *   const parts = build(ctx);
 */
import { h } from "../../lib/dom.js";
import { edgeIndex } from "./graph_math/index.js";
import { KIND_NAMES, nodeName } from "./read.js";
import { nodeAt, visibleNodes } from "./draw.js";

/** How long the view waits for the kernel before it says it needs one. */
export const NO_KERNEL_MS = 1500;

/** Send to the kernel; a host with no kernel (an exported page, a reopened notebook) may throw or reject. */
function sendToKernel(model, message) {
  try {
    const sent = model.send(message);
    if (sent && typeof sent.catch === "function") sent.catch(() => {});
  } catch {
    // no kernel: the timer below says so
  }
}

/** A question to the kernel; `onSilence` runs when no answer came within NO_KERNEL_MS. */
export function askKernel(ctx, message, onSilence) {
  const { state, model } = ctx;
  const id = state.nextId++;
  state.waiting.set(id, setTimeout(() => { state.waiting.delete(id); if (!ctx.disposed) onSilence(); }, NO_KERNEL_MS)); // prettier-ignore
  sendToKernel(model, { ...message, id });
  return id;
}

const NEEDS_KERNEL =
  "Intervening needs the kernel, and the graph's model and transcoders in it: this view has no kernel (a saved " +
  "notebook or an exported page). Run the cell again with them loaded; interventions from the view wait for " +
  "issue 33's transcoders.";

/** Toggle a pin (by node index). */
export function togglePin(ctx, i) {
  const id = ctx.data.ids[i];
  const pinned = ctx.model.get("pinned") ?? [];
  ctx.save({ pinned: pinned.includes(id) ? pinned.filter((p) => p !== id) : [...pinned, id] });
}

/** Group `members` (ids; default: the pinned nodes in no group) under the typed name (or "group N"). */
export function groupPinned(ctx, members = null) {
  const { model, parts } = ctx;
  const groups = model.get("groups") ?? [];
  const grouped = new Set(groups.flatMap((g) => g.members));
  const pinned = model.get("pinned") ?? [];
  const chosen = members ?? pinned.filter((p) => !grouped.has(p));
  if (chosen.length === 0) {
    parts.status.textContent = "Pin nodes first (Enter on a node, or the Pin button): a group holds pinned nodes.";
    return false;
  }
  const name = parts.groupName.value.trim() || `group ${groups.length + 1}`;
  const newPins = [...pinned, ...chosen.filter((m) => !pinned.includes(m))];
  const others = groups.filter((g) => g.name !== name);
  ctx.save({ groups: [...others, { name, members: chosen }], pinned: newPins });
  parts.groupName.value = "";
  parts.status.textContent = `Grouped ${chosen.length} nodes as ${JSON.stringify(name)}.`;
  return true;
}

/** Ask to intervene on the selected node (or its group); says what is needed when it cannot. */
export function intervene(ctx) {
  const { data, model, parts, state } = ctx;
  const selected = model.get("selected") || "";
  const i = data.idIndex.get(selected);
  if (i === undefined) {
    parts.status.textContent = "Select a feature node (click it, or Space on it) to intervene on it.";
    return;
  }
  const group = (model.get("groups") ?? []).find((g) => g.members.includes(selected));
  const nodes = group ? group.members : [selected];
  for (const node of nodes) {
    const k = data.kind[data.idIndex.get(node)];
    if (k !== 0) {
      parts.status.textContent = `${node} is ${k === 1 ? "an error" : `a ${KIND_NAMES[k]}`} node: interventions act on feature nodes (transcoder features) and supernodes of them, not on error, token or logit nodes.`; // prettier-ignore
      return;
    }
  }
  parts.status.textContent = "Asking the kernel to intervene…";
  state.interveneId = askKernel(ctx, { type: "intervene", nodes }, () => {
    parts.status.textContent = NEEDS_KERNEL;
  });
}

/** The details of node `i`: travelled with the data, or arrived from the kernel, else null (then asked for). */
export function detailOf(ctx, i) {
  const { data, state, parts } = ctx;
  const id = data.ids[i];
  const known = data.details[id] ?? state.details.get(id);
  if (known) return known;
  if (data.kind[i] === 0 && !state.asked.has(id)) {
    state.asked.add(id);
    askKernel(ctx, { type: "detail", node: id }, () => {
      state.noKernel.add(id);
      if (ctx.model.get("selected") === id) ctx.request(1);
    });
  }
  return null;
}

/** The strongest `k` inputs (or outputs) of node `i` among the edges: [[node, weight], ...]. */
export function strongest(data, i, direction, k = 8) {
  const index = edgeIndex(data.graph);
  const start = direction === "in" ? index.inStart : index.outStart;
  const list = direction === "in" ? index.inEdges : index.outEdges;
  const found = [];
  for (let j = start[i]; j < start[i + 1]; j++) {
    const e = list[j];
    found.push([direction === "in" ? data.src[e] : data.dst[e], data.weight[e]]);
  }
  found.sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]) || a[0] - b[0]);
  return found.slice(0, k);
}

/** Move the keyboard focus from node `i` (-1: none) by an arrow key among the visible nodes. */
export function moveFocus(ctx, i, key) {
  const { data } = ctx;
  const visible = visibleNodes(ctx);
  const { row, col } = data.layout;
  if (i < 0 || !visible[i]) {
    let best = -1;
    for (let j = 0; j < data.n; j++) if (visible[j] && (best < 0 || row[j] < row[best] || (row[j] === row[best] && col[j] < col[best]))) best = j; // prettier-ignore
    return best;
  }
  let best = -1;
  let bestCost = Infinity;
  for (let j = 0; j < data.n; j++) {
    if (!visible[j] || j === i) continue;
    const dr = row[j] - row[i];
    const dc = col[j] - col[i];
    let cost;
    if (key === "ArrowRight" || key === "ArrowLeft") {
      if (dr !== 0 || (key === "ArrowRight" ? dc <= 0 : dc >= 0)) continue;
      cost = Math.abs(dc);
    } else {
      if (key === "ArrowUp" ? dr <= 0 : dr >= 0) continue;
      cost = Math.abs(dr) * 1000 + Math.abs(dc);
    }
    if (cost < bestCost) [best, bestCost] = [j, cost];
  }
  return best < 0 ? i : best;
}

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { el, model, state, safely, save } = ctx;
  Object.assign(state, {
    hover: -1, focus: -1, nextId: 1, waiting: new Map(), details: new Map(), asked: new Set(), noKernel: new Set(),
    pruned: null, prunedKey: "", suggestions: [], suggestKey: "", interveneId: 0,
  }); // prettier-ignore
  const slider = (name, label, write) => {
    const input = h("input", { type: "range", min: "0.05", max: "1", step: "0.01", class: `iw-circuit-${name}`, "aria-label": label, title: "Prunes in the browser as graph.prune() does; both at 1 show the whole graph this view holds" }); // prettier-ignore
    const value = h("output", { class: "iw-circuit-value" });
    input.addEventListener(
      "input",
      safely(() => write(Number(input.value))),
    );
    return { input, value, box: h("label", { class: "iw-circuit-slider" }, [`${label} `, input, value]) };
  };
  const nodeSlider = slider("node_threshold", "Node threshold", (value) => save({ node_threshold: value }));
  const edgeSlider = slider("edge_threshold", "Edge threshold", (value) => save({ edge_threshold: value }));
  const pinButton = h("button", { type: "button", class: "iw-button iw-circuit-pin" }, "Pin");
  const groupName = h("input", { type: "text", class: "iw-circuit-group-name", placeholder: "supernode name", "aria-label": "Supernode name" }); // prettier-ignore
  const groupButton = h("button", { type: "button", class: "iw-button iw-circuit-group", title: "Group the pinned nodes into a supernode (G)" }, "Group pinned"); // prettier-ignore
  const interveneButton = h("button", { type: "button", class: "iw-button iw-circuit-intervene", title: "Ablate or scale the selected feature or supernode in the model (needs the kernel)" }, "Intervene…"); // prettier-ignore
  const toolbar = h("div", { class: "iw-toolbar iw-circuit-toolbar" }, [
    nodeSlider.box, edgeSlider.box, pinButton, groupName, groupButton, interveneButton,
  ]); // prettier-ignore
  const scores = h("div", { class: "iw-circuit-scores", "aria-live": "polite" });
  const status = h("div", { class: "iw-circuit-status", role: "status", "aria-live": "polite" });
  const base = h("canvas", { class: "iw-circuit-base" });
  const overlay = h("canvas", { class: "iw-circuit-overlay" });
  const tip = h("div", { class: "iw-circuit-tip", role: "tooltip", hidden: true });
  const announce = h("div", { class: "iw-circuit-focus iw-visually-hidden", "aria-live": "polite" });
  const stage = h("div", {
    class: "iw-circuit-stage",
    tabindex: 0,
    role: "application",
    "aria-roledescription": "attribution graph",
    "aria-label": "Attribution graph: arrow keys move between nodes, Enter pins, Space shows details, G groups the pinned nodes",
  }, [base, overlay, tip, announce]); // prettier-ignore
  const suggestions = h("div", { class: "iw-circuit-suggestions" });
  const groupsBox = h("div", { class: "iw-circuit-groups" });
  const pane = h("div", { class: "iw-circuit-pane", "aria-live": "polite" });
  const root = h("div", { class: "iw-root iw-circuit" }, [
    toolbar, scores, status, h("div", { class: "iw-circuit-main" }, [stage, pane]), suggestions, groupsBox,
  ]); // prettier-ignore
  el.append(root);

  const select = (i) => save({ selected: i < 0 ? "" : ctx.data.ids[i] });
  const hoverAt = (event) => {
    const box = base.getBoundingClientRect();
    return nodeAt(ctx, event.clientX - box.left, event.clientY - box.top);
  };
  stage.addEventListener("mousemove", safely((event) => {
    const i = hoverAt(event);
    if (i !== state.hover) {
      state.hover = i;
      ctx.request(1);
    }
  })); // prettier-ignore
  stage.addEventListener("mouseleave", safely(() => { state.hover = -1; ctx.request(1); })); // prettier-ignore
  stage.addEventListener("click", safely((event) => {
    const i = hoverAt(event);
    if (i >= 0) state.focus = i;
    select(i);
  })); // prettier-ignore
  stage.addEventListener("keydown", safely((event) => {
    const key = event.key;
    if (key.startsWith("Arrow")) {
      state.focus = moveFocus(ctx, state.focus, key);
      state.hover = state.focus;
      event.preventDefault();
      ctx.request(1);
    } else if (key === "Enter" && state.focus >= 0) {
      togglePin(ctx, state.focus);
      event.preventDefault();
    } else if (key === " " && state.focus >= 0) {
      select(state.focus);
      event.preventDefault();
    } else if (key === "g" || key === "G") {
      if (!groupName.value.trim() && (model.get("pinned") ?? []).length) {
        status.textContent = "Type the supernode's name, then press Enter.";
        groupName.focus();
      } else groupPinned(ctx);
      event.preventDefault();
    } else if (key === "Escape") {
      select(-1);
    }
  })); // prettier-ignore
  stage.addEventListener("focus", safely(() => {
    if (state.focus < 0) state.focus = moveFocus(ctx, -1, "ArrowRight");
    ctx.request(1);
  })); // prettier-ignore
  pinButton.addEventListener("click", safely(() => {
    const i = ctx.data.idIndex.get(model.get("selected") || "");
    if (i === undefined) status.textContent = "Select a node first (click it).";
    else togglePin(ctx, i);
  })); // prettier-ignore
  groupButton.addEventListener(
    "click",
    safely(() => groupPinned(ctx)),
  );
  groupName.addEventListener("keydown", safely((event) => {
    if (event.key === "Enter") {
      groupPinned(ctx);
      stage.focus();
    }
  })); // prettier-ignore
  interveneButton.addEventListener(
    "click",
    safely(() => intervene(ctx)),
  );
  ctx.listen("msg:custom", (msg) => {
    if (!msg || typeof msg !== "object") return;
    const timer = state.waiting.get(msg.id);
    if (timer !== undefined) {
      clearTimeout(timer);
      state.waiting.delete(msg.id);
    }
    if (msg.type === "detail" && typeof msg.node === "string") {
      state.details.set(msg.node, msg.detail ?? { label: "", contexts: [], top_logits: [], bottom_logits: [], source: msg.error ?? "none" }); // prettier-ignore
      ctx.request(1);
    } else if (msg.type === "intervene") {
      status.textContent = msg.error ? `Cannot intervene: ${msg.error}` : String(msg.message ?? "");
    }
  });
  ctx.onCleanup(() => {
    for (const timer of state.waiting.values()) clearTimeout(timer);
  });
  const resize = typeof ResizeObserver === "function" ? new ResizeObserver(() => ctx.request(1)) : null;
  resize?.observe(stage);
  ctx.onCleanup(() => resize?.disconnect());
  return { root, nodeSlider, edgeSlider, pinButton, groupName, groupButton, interveneButton, scores, status, base, overlay, tip, announce, stage, suggestions, groupsBox, pane }; // prettier-ignore
}

export { nodeName };
