/**
 * Circuit, read: the synced traits -> the plain state the view draws: the node arrays, the edges (float16 weights
 * decoded), the node ids, the graph the maths reads (graph_math's `makeGraph`) and the layout (`layoutNodes`:
 * layers bottom to top, positions left to right, the nodes of one cell side by side).
 *
 * @example
 *   const data = read(model); // {n, kind, layer, pos, index, influence, activation, labels, ids, src, dst, weight, graph, layout, ...}
 */
import { decodeArray } from "../../lib/codec.js";
import { decodeFloat16 } from "../../lib/attention_math.js";
import { makeGraph } from "./graph_math/index.js";

/** Kind names by `node_kind` code. */
export const KIND_NAMES = ["feature", "error", "token", "logit", "lorsa"];

/**
 * The node ids of circuit-tracer's graph JSON from the node arrays (as Python's `node_ids`).
 * @returns {string[]}
 */
export function nodeIds(kind, layer, pos, index) {
  const ids = new Array(kind.length);
  for (let i = 0; i < kind.length; i++) {
    const k = kind[i];
    ids[i] =
      k === 2 ? `E_${index[i]}_${pos[i]}` : k === 1 ? `${layer[i]}_-1_${pos[i]}` : `${layer[i]}_${index[i]}_${pos[i]}`;
  }
  return ids;
}

/**
 * Layout of the nodes in unit space: `row[i]` (0 = token embeddings, `layer + 1` for transcoder layers, the last
 * row for logits), `col[i]` (the prompt position plus an offset in (-0.4, 0.4) that sets the nodes of one
 * (row, position) cell side by side, most influential in the middle) and the grid size.
 * @param {{kind: ArrayLike<number>, layer: ArrayLike<number>, pos: ArrayLike<number>, influence: ArrayLike<number>,
 *   nLayers: number, nPos: number}} nodes
 * @returns {{row: Float32Array, col: Float32Array, rows: number, cols: number, cellMax: number}}
 */
export function layoutNodes({ kind, layer, pos, influence, nLayers, nPos }) {
  const n = kind.length;
  const rows = nLayers + 3;
  const row = new Float32Array(n);
  const col = new Float32Array(n);
  const cells = new Map();
  for (let i = 0; i < n; i++) {
    const r = kind[i] === 2 ? 0 : kind[i] === 3 ? rows - 1 : Math.min(rows - 2, Math.max(1, layer[i] + 1));
    row[i] = r;
    const key = r * (nPos + 1) + pos[i];
    let members = cells.get(key);
    if (!members) cells.set(key, (members = []));
    members.push(i);
  }
  let cellMax = 1;
  for (const members of cells.values()) {
    cellMax = Math.max(cellMax, members.length);
    // most influential in the middle, the others alternating outwards (deterministic: ties by node order)
    members.sort((a, b) => (influence[b] || 0) - (influence[a] || 0) || a - b);
    const m = members.length;
    for (let j = 0; j < m; j++) {
      const slot = j === 0 ? 0 : (j % 2 ? 1 : -1) * Math.ceil(j / 2);
      col[members[j]] = pos[members[j]] + (m === 1 ? 0 : (0.8 * slot) / (m + 1));
    }
  }
  return { row, col, rows, cols: nPos, cellMax };
}

/** Read and check the synced data. */
export function read(model) {
  const kind = decodeArray(model.get("node_kind")).values;
  const n = kind.length;
  const layer = decodeArray(model.get("node_layer")).values;
  const pos = decodeArray(model.get("node_pos")).values;
  const index = decodeArray(model.get("node_index")).values;
  const influence = decodeArray(model.get("node_influence")).values;
  const activation = decodeArray(model.get("node_activation")).values;
  for (const [name, values] of [
    ["node_layer", layer],
    ["node_pos", pos],
    ["node_index", index],
    ["node_influence", influence],
    ["node_activation", activation],
  ])
    // prettier-ignore
    if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} nodes`);
  const src = decodeArray(model.get("edge_src")).values;
  const dst = decodeArray(model.get("edge_dst")).values;
  const raw = model.get("edge_weights");
  const weight = raw && raw.byteLength ? decodeFloat16(raw) : new Float32Array(0);
  if (src.length !== dst.length || src.length !== weight.length)
    throw new RangeError(`edges: ${src.length} sources, ${dst.length} targets and ${weight.length} weights`);
  const tokens = model.get("tokens") ?? [];
  const nLayers = model.get("n_layers") ?? 0;
  const logitTokens = model.get("logit_tokens") ?? [];
  const logitProbs = model.get("logit_probs") ?? [];
  const labels = model.get("node_labels") ?? [];
  const probs = new Float32Array(n);
  let l = 0;
  for (let i = 0; i < n; i++) if (kind[i] === 3) probs[i] = logitProbs[l++] ?? 0;
  const given = model.get("node_ids") ?? [];
  if (given.length && given.length !== n) throw new RangeError(`node_ids has ${given.length} ids for ${n} nodes`);
  const ids = given.length ? given : nodeIds(kind, layer, pos, index);
  const logitOf = new Int32Array(n).fill(-1);
  l = 0;
  for (let i = 0; i < n; i++) if (kind[i] === 3) logitOf[i] = l++;
  const graph = makeGraph({
    kind: Uint8Array.from(kind),
    layer: Int16Array.from(layer),
    position: Int32Array.from(pos),
    logitProbs: probs,
    src: Int32Array.from(src),
    dst: Int32Array.from(dst),
    weight,
  });
  let maxInfluence = 0;
  for (let i = 0; i < n; i++) if (influence[i] > maxInfluence) maxInfluence = influence[i];
  let maxWeight = 0;
  for (let e = 0; e < weight.length; e++) maxWeight = Math.max(maxWeight, Math.abs(weight[e]));
  return {
    n, kind, layer, pos, index, influence, activation, labels, ids, idIndex: new Map(ids.map((id, i) => [id, i])),
    src, dst, weight, tokens, nLayers, logitTokens, logitProbs, logitOf, graph, maxInfluence, maxWeight,
    details: model.get("details") ?? {}, info: model.get("graph_info") ?? {}, scoresNote: model.get("scores_note") ?? "",
    layout: layoutNodes({ kind, layer, pos, influence, nLayers, nPos: Math.max(1, tokens.length) }),
  }; // prettier-ignore
}

/** The text that names node `i` (its label, else what it is). */
export function nodeName(data, i) {
  const label = data.labels[i];
  const k = data.kind[i];
  if (k === 2) return `token ${JSON.stringify(data.tokens[data.pos[i]] ?? "")} @${data.pos[i]}`;
  if (k === 3) return `logit ${JSON.stringify(data.logitTokens[data.logitOf[i]] ?? "")}`;
  if (k === 1) return `error L${data.layer[i]} @${data.pos[i]}`;
  return label ? label : `${KIND_NAMES[k]} L${data.layer[i]} #${data.index[i]} @${data.pos[i]}`;
}
