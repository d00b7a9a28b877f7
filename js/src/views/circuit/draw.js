/**
 * Circuit, draw: the base canvas (every edge above the thresholds, width |w|, colour by sign, in a few batched
 * paths; the nodes sized by influence and coloured by kind; pins ringed; the token labels along the bottom axis and
 * the layers on the left) is repainted only when what it shows changes; the overlay (the hovered or focused node's
 * incoming and outgoing edges) on every hover. Pruning, the live scores and the suggestions come from graph_math.
 * All text goes through canvas text or `textContent`: labels and tokens are never parsed as HTML.
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { h } from "../../lib/dom.js";
import { scoreColours } from "../../lib/colour.js";
import { displayToken } from "../../lib/text.js";
import { edgeIndex, pruneGraph, subgraphScores, supernodeSuggestions } from "./graph_math/index.js";
import { detailOf, groupPinned, strongest } from "./build.js";
import { KIND_NAMES, nodeName } from "./read.js";
import { markProxies, syncProxies } from "./proxies.js";

const LEFT = 44;
const BOTTOM = 48;
const TOP = 10;
const RIGHT = 10;
/** Colours by theme: node kinds (feature, error, token, logit, lorsa), positive / negative edges, text, grid. */
export const COLOURS = {
  light: { kinds: ["#4c78a8", "#9d9d9d", "#54a24b", "#e45756", "#b279a2"], pos: "33,102,172", neg: "178,24,43", text: "#1f2328", grid: "rgba(0,0,0,0.06)", ring: "#1f2328", hover: "#f58518" }, // prettier-ignore
  dark: { kinds: ["#7aa7d8", "#8a8a8a", "#7cc46f", "#ff8a80", "#d4a6c8"], pos: "120,170,230", neg: "255,120,120", text: "#e6edf3", grid: "rgba(255,255,255,0.07)", ring: "#f0f6fc", hover: "#ffb454" }, // prettier-ignore
};

/** The geometry of the graph in CSS pixels for the stage's width. */
export function geometry(ctx) {
  const { data, parts } = ctx;
  const { rows, cols, cellMax } = data.layout;
  const width = Math.max(320, parts.stage.clientWidth || 900);
  const rowH = Math.max(14, Math.min(28, 640 / rows));
  const height = TOP + rows * rowH + BOTTOM;
  const cellW = (width - LEFT - RIGHT) / Math.max(1, cols);
  const rMax = Math.max(2.5, Math.min(8, cellW / Math.max(2, Math.sqrt(cellMax) * 1.6), rowH / 2.2));
  return { width, height, rowH, cellW, rows, rMax };
}

const xOf = (g, data, i) => LEFT + (data.layout.col[i] + 0.5) * g.cellW;
const yOf = (g, data, i) => TOP + (g.rows - 1 - data.layout.row[i] + 0.5) * g.rowH;
const radius = (g, data, i) =>
  1.5 + (g.rMax - 1.5) * Math.sqrt(Math.max(0, data.influence[i]) / (data.maxInfluence || 1));

/** Node `i`'s centre and radius in CSS pixels of the stage (where its keyboard proxy sits). */
export function nodeBox(g, data, i) {
  return { x: xOf(g, data, i), y: yOf(g, data, i), r: radius(g, data, i) };
}

/** The pruning at the current thresholds (graph_math), cached per thresholds; null at 1, 1 (everything). */
export function currentPruning(ctx) {
  const { model, state, data } = ctx;
  const nodeThreshold = model.get("node_threshold") ?? 1;
  const edgeThreshold = model.get("edge_threshold") ?? 1;
  const key = `${nodeThreshold}|${edgeThreshold}`;
  if (state.prunedKey !== key || state.prunedData !== data) {
    state.prunedKey = key;
    state.prunedData = data;
    state.pruned = nodeThreshold >= 1 && edgeThreshold >= 1 ? null : pruneGraph(data.graph, { nodeThreshold, edgeThreshold }); // prettier-ignore
  }
  return state.pruned;
}

/** Per node: 1 when drawn (kept by the pruning, or pinned). */
export function visibleNodes(ctx) {
  const { data, model } = ctx;
  const pruned = currentPruning(ctx);
  const visible = pruned ? Uint8Array.from(pruned.nodeMask) : new Uint8Array(data.n).fill(1);
  for (const id of model.get("pinned") ?? []) {
    const i = data.idIndex.get(id);
    if (i !== undefined) visible[i] = 1;
  }
  return visible;
}

/** The visible node under (x, y) in CSS pixels of the stage, -1 for none. */
export function nodeAt(ctx, x, y) {
  const { data, state } = ctx;
  const g = state.geometry ?? geometry(ctx);
  const visible = state.visible ?? visibleNodes(ctx);
  let best = -1;
  let bestD = Infinity;
  const row = g.rows - 1 - Math.floor((y - TOP) / g.rowH);
  for (let i = 0; i < data.n; i++) {
    if (!visible[i] || Math.abs(data.layout.row[i] - row) > 0) continue;
    const dx = xOf(g, data, i) - x;
    const dy = yOf(g, data, i) - y;
    const d = dx * dx + dy * dy;
    const r = Math.max(radius(g, data, i) + 3, 6);
    if (d < bestD && d <= r * r) [best, bestD] = [i, d];
  }
  return best;
}

function sizeCanvas(canvas, g, win) {
  const ratio = win?.devicePixelRatio || 1;
  const w = Math.round(g.width * ratio);
  const hgt = Math.round(g.height * ratio);
  if (canvas.width !== w || canvas.height !== hgt) {
    canvas.width = w;
    canvas.height = hgt;
    canvas.style.width = `${g.width}px`;
    canvas.style.height = `${g.height}px`;
  }
  const c = canvas.getContext("2d");
  if (c) c.setTransform(ratio, 0, 0, ratio, 0, 0);
  return c;
}

/** Edge widths by bucket of |w| / the largest |w| (below 0.1, 0.25, 0.5, above): thin edges stay under a pixel wide
 * (hairlines, which the canvas strokes about twice as fast); the few strong ones are wide. */
const WIDTHS = [0.5, 0.9, 1.8, 3];
const bucketOf = (t) => (t < 0.1 ? 0 : t < 0.25 ? 1 : t < 0.5 ? 2 : 3);
/** Segments per stroke() of a wide bucket (one long path of overlapping wide segments is slow to stroke). */
const WIDE_CHUNK = 64;

/** Stroke edges `edges[0..count)` in batched paths: 2 signs x 4 width buckets. */
function strokeEdges(c, g, data, edges, count, colours, alpha, scale = 1) {
  const buckets = WIDTHS.length;
  const paths = Array.from({ length: 2 * buckets }, () => []);
  const top = data.maxWeight || 1;
  for (let j = 0; j < count; j++) {
    const e = edges[j];
    const w = data.weight[e];
    if (w === 0) continue;
    paths[(w < 0 ? buckets : 0) + bucketOf(Math.abs(w) / top)].push(e);
  }
  const { src, dst } = data;
  for (let p = 0; p < paths.length; p++) {
    const list = paths[p];
    if (!list.length) continue;
    const width = WIDTHS[p % buckets] * scale;
    const chunk = width > 1 ? WIDE_CHUNK : Infinity;
    c.strokeStyle = `rgba(${p < buckets ? colours.pos : colours.neg},${alpha})`;
    c.lineWidth = width;
    c.beginPath();
    let k = 0;
    for (const e of list) {
      c.moveTo(xOf(g, data, src[e]), yOf(g, data, src[e]));
      c.lineTo(xOf(g, data, dst[e]), yOf(g, data, dst[e]));
      if (++k % chunk === 0) {
        c.stroke();
        c.beginPath();
      }
    }
    c.stroke();
  }
}

function paintBase(ctx, g, visible) {
  const { data, parts, model, doc } = ctx;
  const colours = COLOURS[ctx.theme] ?? COLOURS.light;
  const c = sizeCanvas(parts.base, g, doc.defaultView);
  if (!c) return;
  c.clearRect(0, 0, g.width, g.height);
  // grid rows and the axes' labels (canvas text: never HTML)
  c.fillStyle = colours.grid;
  for (let r = 0; r < g.rows; r += 2) c.fillRect(LEFT, TOP + (g.rows - 1 - r) * g.rowH, g.width - LEFT - RIGHT, g.rowH);
  c.fillStyle = colours.text;
  c.font = "10px system-ui, sans-serif";
  c.textAlign = "right";
  c.textBaseline = "middle";
  const every = Math.max(1, Math.ceil(12 / g.rowH));
  for (let r = 0; r < g.rows; r += every) {
    const name = r === 0 ? "emb" : r === g.rows - 1 ? "logit" : `L${r - 1}`;
    c.fillText(name, LEFT - 4, TOP + (g.rows - 1 - r + 0.5) * g.rowH);
  }
  c.textAlign = "right";
  const axisY = TOP + g.rows * g.rowH + 4;
  for (let p = 0; p < data.tokens.length; p++) {
    const x = LEFT + (p + 0.5) * g.cellW;
    c.save();
    c.translate(x, axisY);
    c.rotate(-Math.PI / 4);
    c.fillText(displayToken(String(data.tokens[p])).slice(0, 14), 0, 0);
    c.restore();
  }
  // edges: every edge kept by the pruning (or every edge) whose ends are drawn; no top-N cap
  const pruned = currentPruning(ctx);
  const ids = new Int32Array(data.src.length);
  let count = 0;
  for (let e = 0; e < data.src.length; e++) {
    if (pruned ? pruned.edgeMask[e] : visible[data.src[e]] && visible[data.dst[e]]) ids[count++] = e;
  }
  ctx.state.drawnEdges = count;
  strokeEdges(c, g, data, ids, count, colours, 0.3);
  // nodes, batched by kind
  for (let k = 0; k < colours.kinds.length; k++) {
    c.fillStyle = colours.kinds[k];
    c.beginPath();
    for (let i = 0; i < data.n; i++) {
      if (!visible[i] || data.kind[i] !== k) continue;
      const x = xOf(g, data, i);
      const y = yOf(g, data, i);
      const r = radius(g, data, i);
      c.moveTo(x + r, y);
      c.arc(x, y, r, 0, 2 * Math.PI);
    }
    c.fill();
  }
  // pins and groups ringed
  const grouped = new Set((model.get("groups") ?? []).flatMap((gr) => gr.members));
  c.strokeStyle = colours.ring;
  c.lineWidth = 1.5;
  for (const id of model.get("pinned") ?? []) {
    const i = data.idIndex.get(id);
    if (i === undefined) continue;
    c.beginPath();
    c.arc(xOf(g, data, i), yOf(g, data, i), radius(g, data, i) + 2, 0, 2 * Math.PI);
    if (grouped.has(id)) c.setLineDash([2, 2]);
    c.stroke();
    c.setLineDash([]);
  }
}

function paintOverlay(ctx, g) {
  const { data, parts, state, model, doc } = ctx;
  const colours = COLOURS[ctx.theme] ?? COLOURS.light;
  const c = sizeCanvas(parts.overlay, g, doc.defaultView);
  if (!c) return;
  c.clearRect(0, 0, g.width, g.height);
  const marks = [];
  const selected = data.idIndex.get(model.get("selected") || "");
  if (selected !== undefined) marks.push([selected, colours.ring, 3]);
  const i = state.hover >= 0 ? state.hover : state.focus;
  if (i >= 0) {
    const index = edgeIndex(data.graph);
    const pruned = currentPruning(ctx);
    const edges = [];
    for (const [start, list] of [
      [index.inStart, index.inEdges],
      [index.outStart, index.outEdges],
    ])
      for (let j = start[i]; j < start[i + 1]; j++) if (!pruned || pruned.edgeMask[list[j]]) edges.push(list[j]);
    strokeEdges(c, g, data, edges, edges.length, colours, 0.9, 1.6);
    marks.push([i, colours.hover, 2.5]);
  }
  for (const [k, colour, width] of marks) {
    c.strokeStyle = colour;
    c.lineWidth = width;
    c.beginPath();
    c.arc(xOf(g, data, k), yOf(g, data, k), radius(g, data, k) + 3, 0, 2 * Math.PI);
    c.stroke();
  }
}

function fmt(x, digits = 3) {
  return Number.isFinite(x) ? Number(x).toPrecision(digits) : "—";
}

function showTip(ctx, g) {
  const { data, parts, state } = ctx;
  const i = state.hover >= 0 ? state.hover : state.focus;
  if (i < 0) {
    parts.tip.hidden = true;
    return;
  }
  const lines = [
    nodeName(data, i),
    `${KIND_NAMES[data.kind[i]]} ${data.ids[i]}`,
    data.kind[i] === 0 || data.kind[i] === 4 ? `activation ${fmt(data.activation[i])}` : data.kind[i] === 3 ? `p = ${fmt(data.logitProbs[data.logitOf[i]])}` : "", // prettier-ignore
    `influence ${fmt(data.influence[i])}`,
  ].filter(Boolean);
  parts.tip.replaceChildren(...lines.map((line) => h("div", {}, line)));
  parts.tip.hidden = false;
  parts.tip.style.left = `${Math.min(g.width - 200, xOf(g, data, i) + 10)}px`;
  parts.tip.style.top = `${yOf(g, data, i) + 10}px`;
}

function contextRow(ctx, context) {
  const acts = context.acts.map((a) => (Number.isFinite(a) ? a : 0));
  const top = Math.max(0, ...acts);
  const at = acts.indexOf(top);
  return h("div", { class: "iw-circuit-context" }, context.tokens.map((token, j) => {
    const colours = scoreColours(acts[j], top, ctx.theme, { signed: false });
    const span = h("span", { class: `iw-token${j === at ? " iw-circuit-peak" : ""}`, title: `activation ${fmt(acts[j])}` }, displayToken(String(token))); // prettier-ignore
    span.style.background = colours.background;
    span.style.color = colours.color;
    return span;
  })); // prettier-ignore
}

function paintPane(ctx) {
  const { data, parts, model, state } = ctx;
  const selected = data.idIndex.get(model.get("selected") || "");
  if (selected === undefined) {
    parts.pane.replaceChildren(h("p", { class: "iw-circuit-hint" }, "Click a node (or Space on it) for its details."));
    return;
  }
  const i = selected;
  const detail = detailOf(ctx, i);
  const list = (title, items) =>
    h("div", {}, [h("h4", {}, title), h("ol", {}, items.map(([j, w]) => h("li", {}, `${nodeName(data, j)} (${w >= 0 ? "+" : ""}${fmt(w)})`)))]); // prettier-ignore
  const children = [
    h("h3", {}, nodeName(data, i)),
    h("p", {}, `${KIND_NAMES[data.kind[i]]} ${data.ids[i]}; influence ${fmt(data.influence[i])}${data.kind[i] === 0 ? `; activation ${fmt(data.activation[i])}` : ""}`), // prettier-ignore
  ];
  if (data.kind[i] === 0 || data.kind[i] === 4) {
    if (detail) {
      if (detail.label) children.push(h("p", { class: "iw-circuit-label" }, `Label: ${detail.label}`));
      children.push(h("h4", {}, `Top activating contexts${detail.source ? ` (${detail.source})` : ""}`));
      children.push(...(detail.contexts.length ? detail.contexts.map((cx) => contextRow(ctx, cx)) : [h("p", {}, "none")])); // prettier-ignore
      children.push(h("h4", {}, "Vocabulary projection"));
      children.push(h("p", {}, `top: ${detail.top_logits.map((t) => JSON.stringify(t)).join(" ") || "—"}`));
      children.push(h("p", {}, `bottom: ${detail.bottom_logits.map((t) => JSON.stringify(t)).join(" ") || "—"}`));
    } else {
      children.push(h("p", { class: "iw-circuit-needs-kernel" }, data.kind[i] === 4 ? "This file holds no contexts or vocabulary projection for its lorsa features." : state.noKernel.has(data.ids[i]) ? "This feature's contexts and vocabulary projection need the kernel: only the pinned and the 300 most influential features' details are saved with the notebook." : "Asking the kernel for this feature's details…")); // prettier-ignore
    }
  }
  children.push(
    list("Strongest inputs", strongest(data, i, "in")),
    list("Strongest outputs", strongest(data, i, "out")),
  );
  parts.pane.replaceChildren(...children);
}

function paintScores(ctx) {
  const { data, parts, model, state } = ctx;
  const pinned = (model.get("pinned") ?? []).map((id) => data.idIndex.get(id)).filter((i) => i !== undefined);
  // the scores are of the graph the view holds, not of the pruned one: a slider move leaves them as they are
  const key = pinned.join(",");
  if (state.scoresData === data && state.scoresKey === key) return;
  state.scoresData = data;
  state.scoresKey = key;
  const info = data.info;
  const where = `the graph this view holds (${data.n} nodes${info.pruned ? `, pruned at ${info.node_threshold} in Python` : ""})`; // prettier-ignore
  let live;
  if (data.scoresNote) live = `Scores not computable: ${data.scoresNote}`;
  else {
    const s = subgraphScores(data.graph, pinned);
    live = s.computable
      ? `${pinned.length ? `Pinned subgraph (${pinned.length} nodes)` : "No pins: the whole graph"}: replacement ${fmt(s.replacement)}, completeness ${fmt(s.completeness)}, computed in the browser on ${where}.` // prettier-ignore
      : `Scores not computable: ${s.reason ?? "the graph has nodes the rule does not cover"}.`;
  }
  const full = Number.isFinite(info.replacement) && info.replacement !== null
    ? ` Full graph: replacement ${fmt(info.replacement)}, completeness ${fmt(info.completeness)} (${info.scores_of}).`
    : ""; // prettier-ignore
  parts.scores.textContent = live + full;
}

function paintGroups(ctx) {
  const { data, parts, model, state, save } = ctx;
  const groups = model.get("groups") ?? [];
  parts.groupsBox.replaceChildren(
    ...(groups.length ? [h("h4", {}, "Supernodes")] : []),
    ...groups.map((g) => {
      const remove = h("button", { type: "button", class: "iw-button", "aria-label": `Ungroup ${g.name}` }, "×");
      remove.addEventListener("click", ctx.safely(() => save({ groups: (model.get("groups") ?? []).filter((x) => x.name !== g.name) }))); // prettier-ignore
      return h("div", { class: "iw-circuit-group-row" }, [h("strong", {}, g.name), `: ${g.members.map((m) => nodeName(data, data.idIndex.get(m) ?? 0)).join(", ")} `, remove]); // prettier-ignore
    }),
  );
  // suggestions (graph_math: Neuronpedia's rule among the pinned features not yet in a group), each with an Accept
  // button: never applied by themselves; the label names the group an Accept makes unless a name is typed
  const grouped = new Set(groups.flatMap((g) => g.members));
  const pinned = (model.get("pinned") ?? []).map((id) => data.idIndex.get(id)).filter((i) => i !== undefined);
  const groupedIdx = [...grouped].map((id) => data.idIndex.get(id)).filter((i) => i !== undefined);
  const key = `${pinned.join(",")}|${groupedIdx.join(",")}`;
  if (state.suggestKey !== key || state.suggestData !== data) {
    state.suggestKey = key;
    state.suggestData = data;
    state.suggestions = pinned.length >= 2 ? supernodeSuggestions(data.graph, pinned, { grouped: groupedIdx, nodeIds: data.ids }) : []; // prettier-ignore
  }
  parts.suggestions.replaceChildren(
    ...(state.suggestions.length ? [h("h4", {}, "Suggested supernodes (not applied until you accept)")] : []),
    ...state.suggestions.map((s) => {
      const accept = h("button", { type: "button", class: "iw-button iw-circuit-accept", "aria-label": `Accept ${s.label}` }, "Accept");
      accept.addEventListener("click", ctx.safely(() => groupPinned(ctx, s.members.map((i) => data.ids[i]))));
      return h("div", { class: "iw-circuit-suggestion" }, [`${s.label} (cohesion ${fmt(s.minCohesion)}): ${s.members.map((i) => nodeName(data, i)).join(", ")} `, accept]);
    }),
  ); // prettier-ignore
}

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function draw(ctx, level) {
  const { model, parts, state, data } = ctx;
  parts.root.dataset.iwTheme = ctx.theme;
  const g = geometry(ctx);
  state.geometry = g;
  const pinnedKey = JSON.stringify([model.get("pinned"), model.get("groups")]);
  const key = `${g.width}|${ctx.theme}|${model.get("node_threshold")}|${model.get("edge_threshold")}|${pinnedKey}`;
  for (const [slider, name] of [[parts.nodeSlider, "node_threshold"], [parts.edgeSlider, "edge_threshold"]]) {
    const value = model.get(name) ?? 1;
    if (Number(slider.input.value) !== value) slider.input.value = String(value);
    slider.value.textContent = Number(value).toFixed(2);
  } // prettier-ignore
  if (level >= 2 || key !== state.baseKey || state.baseData !== data) {
    state.baseKey = key;
    state.baseData = data;
    state.visible = visibleNodes(ctx);
    paintBase(ctx, g, state.visible);
    const kept = state.visible.reduce((a, b) => a + b, 0);
    parts.status.dataset.nodes = String(kept);
    const shown = `${kept} of ${data.n} nodes and ${state.drawnEdges} of ${data.src.length} edges shown`;
    parts.stage.setAttribute("aria-description", shown);
    parts.nodes.setAttribute("aria-description", shown);
    syncProxies(ctx, g);
    paintScores(ctx);
    paintGroups(ctx);
  }
  markProxies(ctx);
  paintOverlay(ctx, g);
  showTip(ctx, g);
  const paneKey = `${model.get("selected")}|${state.details.size}|${state.noKernel.size}|${ctx.theme}`;
  if (paneKey !== state.paneKey || level >= 2) {
    state.paneKey = paneKey;
    paintPane(ctx);
  }
}

export function onTheme(ctx) {
  ctx.state.baseKey = "";
}
