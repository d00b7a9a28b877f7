/**
 * Node influence on the logits by sparse back-propagation over the edge list (never a dense n x n matrix):
 * Python's `_influence(_row_normalised(A), w)`, i.e. `w (Â + Â² + ...)` with `Â` the row-normalised |A| (rows =
 * targets) and `w` the logit probabilities. The power series of an acyclic graph is finite, so it is summed in one
 * pass in reverse topological order: a node's influence is complete once every node it feeds is done, and
 * `influence[s] = Σ_t Â[t, s] · (influence[t] + w[t])` (O(nodes + edges), float64).
 *
 * @example
 *   const influence = nodeInfluence(graph);         // Float64Array, one per node
 *   const fraction = cumulativeInfluence(influence); // Python's pruning.influence (smaller = more important)
 */
import { edgeIndex } from "./graph.js";

/**
 * The influence of every node through a weighted edge list: `Σ_k w Â^k` (k >= 1) for `Â[dst[e], src[e]] =
 * value[e]` (the caller normalises). Edges whose `value` is 0 are no edges.
 * @param {number} nNodes
 * @param {ArrayLike<number>} src
 * @param {ArrayLike<number>} dst
 * @param {ArrayLike<number>} value  per edge, already normalised
 * @param {ArrayLike<number>} weights  per node: the logit weights `w`
 * @param {{inStart: Int32Array, inEdges: Int32Array}} [byTarget]  the edges grouped by target (a superset of the
 *   edges of non-zero value, e.g. the graph's {@link edgeIndex}), when the caller has them
 * @returns {Float64Array}
 * @throws {Error} if the edges of non-zero value form a cycle (the series never vanishes; Python raises too)
 * @example propagate(2, [0], [1], [1], [0, 0.5]) // Float64Array [0.5, 0]
 */
export function propagate(nNodes, src, dst, value, weights, byTarget) {
  const remaining = new Int32Array(nNodes); // targets of each node not yet done
  for (let e = 0; e < src.length; e += 1) if (value[e] !== 0) remaining[src[e]] += 1;
  const { inStart, inEdges } = byTarget ?? groupByTarget(nNodes, dst, value);
  const influence = new Float64Array(nNodes);
  const queue = new Int32Array(nNodes);
  let tail = 0;
  for (let i = 0; i < nNodes; i += 1) if (remaining[i] === 0) queue[tail++] = i;
  for (let head = 0; head < tail; head += 1) {
    const t = queue[head];
    const out = influence[t] + weights[t];
    for (let k = inStart[t]; k < inStart[t + 1]; k += 1) {
      const e = inEdges[k];
      if (value[e] === 0) continue;
      const s = src[e];
      influence[s] += value[e] * out;
      remaining[s] -= 1;
      if (remaining[s] === 0) queue[tail++] = s;
    }
  }
  if (tail < nNodes) {
    throw new Error(
      `the graph's edges form a cycle (${nNodes - tail} nodes on or above it), so influence never vanishes; ` +
        `an attribution graph's edges run from earlier layers and positions to later ones`,
    );
  }
  return influence;
}

/** The edges of non-zero value grouped by target (counting sort). */
function groupByTarget(nNodes, dst, value) {
  const inStart = new Int32Array(nNodes + 1);
  for (let e = 0; e < dst.length; e += 1) if (value[e] !== 0) inStart[dst[e] + 1] += 1;
  for (let i = 0; i < nNodes; i += 1) inStart[i + 1] += inStart[i];
  const inEdges = new Int32Array(inStart[nNodes]);
  const fill = inStart.slice(0, nNodes);
  for (let e = 0; e < dst.length; e += 1) if (value[e] !== 0) inEdges[fill[dst[e]]++] = e;
  return { inStart, inEdges };
}

/**
 * The logit weights `w`: each logit node's probability, 0 elsewhere (and 0 outside `nodeMask`).
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Uint8Array} [nodeMask]
 * @returns {Float64Array}
 * @example logitWeights(graph)[graph.nNodes - 1] // the last logit's probability
 */
export function logitWeights(graph, nodeMask) {
  const weights = new Float64Array(graph.nNodes);
  for (let i = 0; i < graph.nNodes; i += 1) {
    if (graph.kind[i] === 3 && (!nodeMask || nodeMask[i])) weights[i] = graph.logitProbs[i];
  }
  return weights;
}

/**
 * The row-normalised |weight| of each edge (`|A[t, s]| / max(Σ_s |A[t, s]|, 1e-10)`, Python's `_row_normalised`),
 * over the edges between nodes of `nodeMask` (others: 0).
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Uint8Array} [nodeMask]
 * @returns {Float64Array} per edge
 * @example normalisedEdges(graph)[0]
 */
export function normalisedEdges(graph, nodeMask) {
  const { inStart, inEdges } = edgeIndex(graph);
  const { src, weight } = graph;
  const value = new Float64Array(src.length);
  for (let t = 0; t < graph.nNodes; t += 1) {
    if (nodeMask && !nodeMask[t]) continue;
    let sum = 0;
    for (let k = inStart[t]; k < inStart[t + 1]; k += 1) {
      const e = inEdges[k];
      if (!nodeMask || nodeMask[src[e]]) sum += Math.abs(weight[e]);
    }
    const scale = Math.max(sum, 1e-10);
    for (let k = inStart[t]; k < inStart[t + 1]; k += 1) {
      const e = inEdges[k];
      if (!nodeMask || nodeMask[src[e]]) value[e] = Math.abs(weight[e]) / scale;
    }
  }
  return value;
}

/**
 * Each node's influence on the logits: `w · (Â + Â² + ...)`. With `nodeMask`, only the masked nodes and the edges
 * between them count (Python's pruned adjacency: rows and columns of the other nodes zeroed).
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {{nodeMask?: Uint8Array, normalised?: Float64Array}} [options]  `normalised`: the edges' normalised
 *   values for that mask, when the caller has them already
 * @returns {Float64Array}
 * @throws {Error} if the non-zero edges form a cycle (Python raises too)
 * @example nodeInfluence(graph)[0]
 */
export function nodeInfluence(graph, options = {}) {
  const { nodeMask } = options;
  const value = options.normalised ?? normalisedEdges(graph, nodeMask);
  return propagate(graph.nNodes, graph.src, graph.dst, value, logitWeights(graph, nodeMask), edgeIndex(graph));
}

/**
 * Each node's cumulative influence fraction: the share of all influence held by the nodes at least as
 * influential as it, ties in node order (Python's `pruning.influence`; smaller = more important).
 * @param {ArrayLike<number>} influence
 * @returns {Float64Array}
 * @example cumulativeInfluence([1, 3]) // Float64Array [1, 0.75]
 */
export function cumulativeInfluence(influence) {
  const n = influence.length;
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => influence[b] - influence[a] || a - b);
  let total = 0;
  for (let i = 0; i < n; i += 1) total += influence[i];
  const cumulative = new Float64Array(n);
  let running = 0;
  for (const i of order) {
    running += influence[i];
    cumulative[i] = running / total;
  }
  return cumulative;
}
