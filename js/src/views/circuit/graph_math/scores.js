/**
 * Live replacement and completeness scores of a pinned subgraph, as Neuronpedia's `score.worker.ts` and Python's
 * `AttributionGraph.scores(pinned=...)` compute them: each unpinned feature's outgoing edges move to the error node
 * at its (layer, position) (summed with that error's own edge to the same target), the feature's edges go, and
 * replacement = token influence / (token + error influence), completeness = the influence-weighted share of each
 * node's normalised input that comes from no error node. No pins: the whole graph's scores.
 *
 * @example
 *   const s = subgraphScores(graph, [0, 4, 7]); // node indices of the pins
 *   s.computable ? s.replacement : s.reason;
 */
import { edgeIndex, KIND } from "./graph.js";
import { logitWeights, propagate } from "./influence.js";

/**
 * @typedef {object} Scores
 * @property {boolean} computable  false when the graph has nodes the rule does not cover (e.g. lorsa)
 * @property {number} replacement  NaN when not computable (NaN of the formula otherwise reads 0, as Python's)
 * @property {number} completeness
 * @property {string} [reason]  why the scores are not computable
 */

/**
 * Node indices from a list of pins, checked.
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Iterable<number>} pinned
 * @returns {Uint8Array} per node: 1 = pinned
 */
export function pinMask(graph, pinned) {
  if (pinned === null || pinned === undefined || typeof pinned[Symbol.iterator] !== "function") {
    throw new TypeError("pinned must be a list of node indices (an empty list: the whole graph)");
  }
  const mask = new Uint8Array(graph.nNodes);
  for (const i of pinned) {
    if (!Number.isInteger(i) || i < 0 || i >= graph.nNodes) {
      throw new RangeError(`pinned node ${i} is not a node index of this graph (0..${graph.nNodes - 1})`);
    }
    mask[i] = 1;
  }
  return mask;
}

/**
 * The scores of the subgraph of `pinned` nodes (indices; an empty list: the whole graph). Computed in float64 on
 * the edge list (a map of the merged entries, never a dense matrix).
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Iterable<number>} pinned
 * @returns {Scores}
 * @throws {RangeError} for a pin that is no node index
 * @example subgraphScores(graph, []).replacement
 */
export function subgraphScores(graph, pinned) {
  const pins = pinMask(graph, pinned);
  const { nNodes, kind, layer, position, src, dst, weight } = graph;
  for (let i = 0; i < nNodes; i += 1) {
    if (kind[i] === KIND.other) {
      return {
        computable: false,
        replacement: NaN,
        completeness: NaN,
        reason:
          "not computable: the graph has nodes other than features, errors, tokens and logits (lorsa), which the " +
          "replacement and completeness rule does not cover",
      };
    }
  }
  let anyPin = false;
  for (let i = 0; i < nNodes && !anyPin; i += 1) anyPin = pins[i] === 1;
  const dropped = (i) => anyPin && kind[i] === KIND.feature && !pins[i];

  // each dropped feature's outgoing edges move to the error node at its (layer, position), if the graph has one
  const errorAt = new Map();
  for (let i = 0; i < nNodes; i += 1) if (kind[i] === KIND.error) errorAt.set(`${layer[i]}|${position[i]}`, i);
  const merged = new Map(); // dst * nNodes + src -> weight
  const { inStart, inEdges } = edgeIndex(graph);
  for (let t = 0; t < nNodes; t += 1) {
    if (dropped(t)) continue; // its row is zeroed
    for (let k = inStart[t]; k < inStart[t + 1]; k += 1) {
      const e = inEdges[k];
      let s = src[e];
      if (dropped(s)) {
        s = errorAt.get(`${layer[s]}|${position[s]}`);
        if (s === undefined) continue;
      }
      const key = t * nNodes + s;
      merged.set(key, (merged.get(key) ?? 0) + weight[e]);
    }
  }
  const size = merged.size;
  const mSrc = new Int32Array(size);
  const mDst = new Int32Array(size);
  const mValue = new Float64Array(size);
  const rowSum = new Float64Array(nNodes);
  let m = 0;
  for (const [key, value] of merged) {
    const t = Math.floor(key / nNodes);
    mDst[m] = t;
    mSrc[m] = key - t * nNodes;
    mValue[m] = Math.abs(value);
    rowSum[t] += mValue[m];
    m += 1;
  }
  const fromError = new Float64Array(nNodes); // per target: the normalised input share of error nodes
  for (let e = 0; e < size; e += 1) {
    mValue[e] /= Math.max(rowSum[mDst[e]], 1e-10);
    if (kind[mSrc[e]] === KIND.error) fromError[mDst[e]] += mValue[e];
  }
  const weights = logitWeights(graph);
  const influence = propagate(nNodes, mSrc, mDst, mValue, weights);
  let tokens = 0;
  let errors = 0;
  let covered = 0;
  let total = 0;
  for (let i = 0; i < nNodes; i += 1) {
    if (kind[i] === KIND.token) tokens += influence[i];
    else if (kind[i] === KIND.error) errors += influence[i];
    const output = influence[i] + weights[i];
    covered += (1 - fromError[i]) * output;
    total += output;
  }
  const replacement = tokens / (tokens + errors);
  const completeness = covered / total;
  return {
    computable: true,
    replacement: Number.isNaN(replacement) ? 0 : replacement,
    completeness: Number.isNaN(completeness) ? 0 : completeness,
  };
}
