/**
 * Circuit, build: the toolbar (threshold sliders, pin, group with a typed name, intervene), the scores line, the
 * graph (a base canvas for edges and nodes, an overlay canvas for the hovered node's edges, and over them a listbox
 * whose one transparent option sits over the focused node, proxies.js: one tab stop, the arrow keys move the option
 * and the focus between the drawn nodes, Enter pins, Space selects, G groups), the suggestions, the groups and the detail pane, and their
 * handlers. Trait writes go through `ctx.save`; the kernel is asked for the details that did not travel and for
 * interventions, and when it does not answer the view says what it needs.
 *
 * @example
 *   const parts = build(ctx);
 */
import { h } from "../../lib/dom.js";
import { displayToken } from "../../lib/text.js";
import { edgeIndex, warmPruning } from "./graph_math/index.js";
import { KIND_NAMES, nodeName } from "./read.js";
import { nodeAt, visibleNodes } from "./draw.js";
import { endNode, focusNode } from "./proxies.js";

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
  "Intervening needs the kernel, and the graph's model, tokenizer and transcoders in it: this view has no kernel " +
  "(a saved notebook or an exported page). Run the cell again with graph.widget(model=..., tokenizer=..., " +
  "transcoders=...).";

/** Greedy continuation length and top-k rows asked for with each intervention. */
export const INTERVENE_TOKENS = 8;
export const INTERVENE_TOP_K = 10;

const percent = (p) => `${(100 * Number(p)).toFixed(1)}%`;
const signed = (x) => `${Number(x) >= 0 ? "+" : "−"}${Math.abs(Number(x)).toFixed(2)}`;

/**
 * Render an intervention's answer into `box`: the top-k next tokens before and after (with the logit change) and
 * the continuations side by side. Token text is untrusted: every string goes in through text nodes (`h`).
 */
export function renderIntervention(box, msg) {
  const factor = Number(msg.factor);
  const what = factor === 0 ? "ablated" : `scaled ×${factor}`;
  const nodes = Array.isArray(msg.nodes) ? msg.nodes.map(String) : [];
  const rows = (Array.isArray(msg.top) ? msg.top : []).map((row) =>
    h("tr", {}, [
      h("td", { class: "iw-circuit-result-token" }, displayToken(String(row.token ?? ""))),
      h("td", {}, percent(row.p_before)),
      h("td", {}, percent(row.p_after)),
      h("td", {}, signed(row.logit_change)),
    ]),
  );
  const table = h("table", { class: "iw-circuit-result-top" }, [
    h("caption", {}, "Top next tokens after the intervention"),
    h("thead", {}, h("tr", {}, [h("th", { scope: "col" }, "token"), h("th", { scope: "col" }, "p before"), h("th", { scope: "col" }, "p after"), h("th", { scope: "col" }, "Δ logit")])), // prettier-ignore
    h("tbody", {}, rows),
  ]);
  const side = (title, text, cls) =>
    h("div", { class: `iw-circuit-continuation ${cls}` }, [h("h4", {}, title), h("pre", {}, String(text ?? ""))]);
  box.replaceChildren(
    h("p", { class: "iw-circuit-result-what" }, `${nodes.join(", ")} ${what}, attention ${msg.freeze_attention ? "frozen" : "free"}, at the graph's positions${msg.at_generated ? " and at every generated token" : ""}.`), // prettier-ignore
    table,
    h("div", { class: "iw-circuit-continuations" }, [
      side("Original continuation", msg.base_continuation, "iw-circuit-base-continuation"),
      side("After the intervention", msg.continuation, "iw-circuit-new-continuation"),
    ]),
  );
  box.hidden = false;
}

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

/** Ask to intervene on the selected node (or its group), setting its features to `factor` × their activation
 * (0 ablates); says what is needed when it cannot. */
export function intervene(ctx, factor = 0) {
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
  if (!Number.isFinite(factor)) {
    parts.status.textContent = "The factor must be a number (0 ablates, 2 doubles).";
    return;
  }
  parts.status.textContent = `Asking the kernel to intervene on ${group ? `supernode ${JSON.stringify(group.name)}` : selected}…`; // prettier-ignore
  const freeze = parts.freeze.checked;
  const atGenerated = parts.atGenerated.checked;
  state.interveneId = askKernel(
    ctx,
    {
      type: "intervene",
      nodes,
      factor,
      freeze_attention: freeze,
      at_generated: atGenerated,
      max_new_tokens: INTERVENE_TOKENS,
      top_k: INTERVENE_TOP_K,
    },
    () => {
      // prettier-ignore
      parts.status.textContent = NEEDS_KERNEL;
    },
  );
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
  const toolbar = h("div", { class: "iw-toolbar iw-circuit-toolbar" }, [
    nodeSlider.box, edgeSlider.box, pinButton, groupName, groupButton,
  ]); // prettier-ignore
  const interveneButton = h("button", { type: "button", class: "iw-button iw-circuit-intervene", title: "Ablate the selected feature or supernode in the model (needs the kernel)" }, "Ablate"); // prettier-ignore
  const doubleButton = h("button", { type: "button", class: "iw-button iw-circuit-double", title: "Double the selected feature or supernode in the model (needs the kernel)" }, "×2"); // prettier-ignore
  const factor = h("input", { type: "number", step: "0.5", value: "-1", class: "iw-circuit-factor", "aria-label": "Scale factor (0 ablates)" }); // prettier-ignore
  const scaleButton = h("button", { type: "button", class: "iw-button iw-circuit-scale", title: "Set the selected features to this factor times their activation" }, "Scale"); // prettier-ignore
  const freeze = h("input", { type: "checkbox", class: "iw-circuit-freeze", checked: true });
  const atGenerated = h("input", { type: "checkbox", class: "iw-circuit-at-generated" });
  const result = h("div", { class: "iw-circuit-result", "aria-live": "polite", hidden: true });
  const intervenePanel = h("div", { class: "iw-circuit-intervene-panel", role: "group", "aria-label": "Intervene on the selected node or supernode" }, [
    h("div", { class: "iw-toolbar iw-circuit-intervene-bar" }, [
      h("span", { class: "iw-circuit-intervene-title" }, "Intervene:"), interveneButton, doubleButton, factor, scaleButton,
      h("label", { class: "iw-circuit-freeze-box" }, [freeze, " frozen attention"]),
      h("label", { class: "iw-circuit-at-generated-box", title: "Also scale the features at every generated token of the continuation (off: only at the graph's positions)" }, [atGenerated, " also at generated tokens"]),
    ]),
    result,
  ]); // prettier-ignore
  const scores = h("div", { class: "iw-circuit-scores", "aria-live": "polite" });
  const status = h("div", { class: "iw-circuit-status", role: "status", "aria-live": "polite" });
  const base = h("canvas", { class: "iw-circuit-base", "aria-hidden": "true" });
  const overlay = h("canvas", { class: "iw-circuit-overlay", "aria-hidden": "true" });
  // the tooltip repeats the focused option's name for the eye: hidden from assistive technology
  const tip = h("div", { class: "iw-circuit-tip", "aria-hidden": "true", hidden: true });
  const nodes = h("div", {
    class: "iw-circuit-nodes",
    role: "listbox",
    "aria-label": "Attribution graph nodes: arrow keys move between nodes, Home and End go to the first and last, Enter pins, Space shows details, G groups the pinned nodes, Escape clears the selection",
  }); // prettier-ignore
  // the stage is no tab stop (tabindex -1): a click on the canvas, or stage.focus(), hands the focus to the node
  // options' tab stop (proxies.js), which is the graph's one tab stop
  const stage = h("div", { class: "iw-circuit-stage", tabindex: -1 }, [base, overlay, nodes, tip]);
  const suggestions = h("div", { class: "iw-circuit-suggestions" });
  const groupsBox = h("div", { class: "iw-circuit-groups" });
  const pane = h("div", { class: "iw-circuit-pane", "aria-live": "polite" });
  const root = h("div", { class: "iw-root iw-circuit" }, [
    toolbar, scores, status, intervenePanel, h("div", { class: "iw-circuit-main" }, [stage, pane]), suggestions, groupsBox,
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
    if (i >= 0) {
      state.focus = i;
      focusNode(ctx, i, { preventScroll: true });
    }
    select(i);
  })); // prettier-ignore
  // the node options (proxies.js): DOM focus on an option is the focused node
  nodes.addEventListener("focus", safely((event) => {
    const i = Number(event.target?.dataset?.node);
    if (!Number.isInteger(i) || i < 0 || i >= ctx.data.n) return;
    state.focus = i;
    state.hover = -1;
    ctx.request(1);
  }), true); // prettier-ignore
  stage.addEventListener("keydown", safely((event) => {
    const key = event.key;
    if (key.startsWith("Arrow")) {
      const next = moveFocus(ctx, state.focus, key);
      if (!focusNode(ctx, next)) {
        state.focus = next; // no options yet: the next draw builds them and focuses this one
        ctx.request(1);
      }
      event.preventDefault();
    } else if (key === "Home" || key === "End") {
      // the first (bottom-left) or last (top-right) drawn node, as in a listbox
      focusNode(ctx, endNode(ctx, key === "End"));
      event.preventDefault();
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
  stage.addEventListener("focus", safely((event) => {
    if (event.target !== stage) return;
    if (state.focus < 0) state.focus = moveFocus(ctx, -1, "ArrowRight");
    if (!focusNode(ctx, state.focus, { preventScroll: true })) ctx.request(1); // no options yet: the draw focuses
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
    safely(() => intervene(ctx, 0)),
  );
  doubleButton.addEventListener(
    "click",
    safely(() => intervene(ctx, 2)),
  );
  scaleButton.addEventListener(
    "click",
    safely(() => intervene(ctx, factor.value.trim() === "" ? NaN : Number(factor.value))),
  );
  factor.addEventListener("keydown", safely((event) => {
    if (event.key === "Enter") intervene(ctx, factor.value.trim() === "" ? NaN : Number(factor.value));
  })); // prettier-ignore
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
      if (msg.id !== undefined && msg.id !== state.interveneId) return; // an older request's answer
      if (msg.error) {
        status.textContent = `Cannot intervene: ${msg.error}`;
      } else {
        status.textContent = "Intervention done: the new top tokens and continuations are above the graph.";
        renderIntervention(result, msg);
      }
    }
  });
  ctx.onCleanup(() => {
    for (const timer of state.waiting.values()) clearTimeout(timer);
  });
  // the first slider move would also compute the full graph's influence (tens of ms at 5,000 nodes): do it when idle,
  // and within 300 ms of the first paint even when the page never idles (frames back to back give no idle period)
  const idle = globalThis.requestIdleCallback ?? ((fn) => setTimeout(fn, 200));
  const cancelIdle = globalThis.cancelIdleCallback ?? clearTimeout;
  const warm = idle(
    safely(() => ctx.data?.graph && warmPruning(ctx.data.graph)),
    { timeout: 300 },
  );
  ctx.onCleanup(() => cancelIdle(warm));
  const resize = typeof ResizeObserver === "function" ? new ResizeObserver(() => ctx.request(1)) : null;
  resize?.observe(stage);
  ctx.onCleanup(() => resize?.disconnect());
  return { root, nodeSlider, edgeSlider, pinButton, groupName, groupButton, interveneButton, doubleButton, factor, scaleButton, freeze, atGenerated, result, scores, status, base, overlay, tip, nodes, stage, suggestions, groupsBox, pane }; // prettier-ignore
}

export { nodeName };
