/**
 * Pruning with node and edge thresholds, as Python's `AttributionGraph.prune` (= circuit-tracer 0.5.0's
 * `prune_graph`): keep the nodes holding `nodeThreshold` of the logit influence (tokens and logits always), score
 * the edges of that subgraph as Â'·(I' + w) and keep those holding `edgeThreshold` of the edge score, then
 * repeatedly drop features lacking a kept incoming or outgoing edge and errors lacking a kept outgoing edge.
 *
 * Python computes in float32; this computes the influences in float64 and rounds them to float32 where Python
 * compares them (the scores, the cumulative sums that place a threshold: float64 sums rounded to float32, divided by
 * the float32 total, as torch's `cumsum` and `searchsorted` do), so a kept set differs from Python's only where two
 * scores are within float32 rounding of each other at the threshold. At a threshold of exactly 1 the cut hangs on
 * the last bit of Python's float32 total (a cumulative share of 0.99999994 falls through to the zero scores and
 * keeps everything); this takes the correctly rounded total, so the last positive score is the threshold.
 * A threshold of 1 is therefore not "no pruning": nodes without influence and edges of score 0 still go.
 *
 * @example
 *   const pruned = pruneGraph(graph, { nodeThreshold: 0.8, edgeThreshold: 0.98 });
 *   pruned.nodeMask; // Uint8Array, 1 = kept (equals Python's kept nodes)
 *   pruned.edgeMask; // Uint8Array per edge, 1 = kept
 */
import { edgeIndex, KIND } from "./graph.js";
import { cumulativeInfluence, logitWeights, nodeInfluence, normalisedEdges, propagate } from "./influence.js";

/**
 * @typedef {object} Pruned
 * @property {Uint8Array} nodeMask  per node: 1 = kept
 * @property {Uint8Array} edgeMask  per edge of the graph: 1 = kept (both ends kept, score at the threshold or above)
 * @property {number} nNodes  kept nodes
 * @property {number} nEdges  kept edges
 * @property {Float64Array} influence  each node's influence on the logits in the full graph
 * @property {Float64Array} cumulative  each node's cumulative influence fraction (Python's `pruning.influence`)
 * @property {Float32Array} edgeScores  per edge: its score Â'·(I' + w) in the node-pruned graph (0: no edge there)
 */

const fround = Math.fround;
const FULL = new WeakMap();
const NODE_STAGE = new WeakMap();

/** The full graph's influence and cumulative fractions, once per graph. */
function fullInfluence(graph) {
  let found = FULL.get(graph);
  if (!found) {
    const influence = nodeInfluence(graph);
    found = { influence, cumulative: cumulativeInfluence(influence) };
    FULL.set(graph, found);
  }
  return found;
}

/**
 * Compute and cache the full graph's influence now, and run the pruning once (the view calls it when the browser is
 * idle after the first paint, so that the first slider move pays neither for the influence nor for cold code).
 * @param {import("./graph.js").CircuitGraph} graph
 */
export function warmPruning(graph) {
  fullInfluence(graph);
  // run the pruning once at circuit-tracer's defaults so that the browser has compiled its loops, then forget that
  // stage: the first slider move computes its own, with warm code (cold, the first move took twice the later ones)
  pruneGraph(graph);
  NODE_STAGE.delete(graph);
}

/**
 * circuit-tracer's `find_threshold` on float32 scores: sort descending, cumulative = float32(running float64 sum)
 * / float32(total), the first score whose cumulative reaches `fraction` (torch's `searchsorted`, left; none: the
 * last). `nZeros` zero scores follow the given (non-negative) ones.
 * @param {Float32Array} ascending  non-negative scores, sorted ascending
 * @param {number} nZeros
 * @param {number} fraction
 * @returns {number}
 */
function threshold(ascending, nZeros, fraction) {
  let total = 0;
  for (let i = 0; i < ascending.length; i += 1) total += ascending[i];
  const total32 = fround(total);
  let running = 0;
  for (let i = ascending.length - 1; i >= 0; i -= 1) {
    running += ascending[i];
    if (fround(fround(running) / total32) >= fraction) return ascending[i];
  }
  if (nZeros > 0) return 0; // the cumulative stays below the fraction through the zeros: the last (0)
  return ascending.length ? ascending[0] : 0;
}

function checkFraction(name, value) {
  if (typeof value !== "number" || !(value > 0 && value <= 1)) {
    throw new RangeError(
      `${name} must be a fraction in (0, 1], got ${value}; circuit-tracer's defaults are 0.8 and 0.98`,
    );
  }
}

/**
 * The node threshold's stage (kept per graph for the last node threshold, so an edge slider move skips it): the
 * nodes at or above the influence threshold (tokens and logits always), and the scores Â'·(I' + w) of the edges of
 * that node-pruned graph, with the positive ones sorted.
 */
function nodeStage(graph, nodeThreshold) {
  const cached = NODE_STAGE.get(graph);
  if (cached && cached.nodeThreshold === nodeThreshold) return cached;
  const { nNodes, kind, src, dst } = graph;
  const { influence } = fullInfluence(graph);
  const nodeScores = new Float32Array(influence);
  const nodeLimit = threshold(nodeScores.slice().sort(), 0, nodeThreshold);
  const nodeMask = new Uint8Array(nNodes);
  for (let i = 0; i < nNodes; i += 1) {
    nodeMask[i] = kind[i] === KIND.token || kind[i] === KIND.logit || nodeScores[i] >= nodeLimit ? 1 : 0;
  }
  const normalised = normalisedEdges(graph, nodeMask);
  const weights = logitWeights(graph, nodeMask);
  const pruned = propagate(nNodes, src, dst, normalised, weights, edgeIndex(graph));
  const edgeScores = new Float32Array(src.length);
  let nPositive = 0;
  for (let e = 0; e < src.length; e += 1) {
    if (normalised[e] === 0) continue;
    const t = dst[e];
    edgeScores[e] = fround(normalised[e] * (pruned[t] + weights[t]));
    if (edgeScores[e] > 0) nPositive += 1;
  }
  const positive = new Float32Array(nPositive);
  for (let e = 0, k = 0; e < src.length; e += 1) if (edgeScores[e] > 0) positive[k++] = edgeScores[e];
  positive.sort();
  const stage = { nodeThreshold, nodeMask, edgeScores, positive };
  NODE_STAGE.set(graph, stage);
  return stage;
}

/**
 * The nodes and edges that Python's `.prune(node_threshold, edge_threshold)` keeps. The full graph's influence is
 * cached per graph and the node threshold's stage for the last node threshold, so a node slider move costs one
 * influence pass over the node-pruned graph and one sort of its edges' scores, and an edge slider move less.
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {{nodeThreshold?: number, edgeThreshold?: number}} [options]  fractions in (0, 1]; 0.8 and 0.98 by default
 * @returns {Pruned}
 * @throws {RangeError} for a threshold outside (0, 1]
 * @example pruneGraph(graph, { nodeThreshold: 0.9 }).nNodes
 */
export function pruneGraph(graph, options = {}) {
  const { nodeThreshold = 0.8, edgeThreshold = 0.98 } = options;
  checkFraction("nodeThreshold", nodeThreshold);
  checkFraction("edgeThreshold", edgeThreshold);
  const { nNodes, src, dst, weight } = graph;
  const { influence, cumulative } = fullInfluence(graph);
  const stage = nodeStage(graph, nodeThreshold);
  const nodeMask = stage.nodeMask.slice();
  const { edgeScores, positive } = stage;
  // thresholded over all n² entries of the dense score matrix (zeros included), as Python does
  const edgeLimit = threshold(positive, nNodes * nNodes - positive.length, edgeThreshold);
  const edgeMask = new Uint8Array(src.length);
  if (edgeLimit === 0) {
    // every entry passes, absent edges too: every masked node has a kept edge both ways, so none is dropped, and
    // every edge between kept nodes stays
    for (let e = 0; e < src.length; e += 1) {
      edgeMask[e] = weight[e] !== 0 && nodeMask[src[e]] && nodeMask[dst[e]] ? 1 : 0;
    }
  } else {
    for (let e = 0; e < src.length; e += 1) edgeMask[e] = edgeScores[e] >= edgeLimit ? 1 : 0;
    dropUnconnected(graph, nodeMask, edgeMask);
  }
  let keptNodes = 0;
  let keptEdges = 0;
  for (let i = 0; i < nNodes; i += 1) keptNodes += nodeMask[i];
  for (let e = 0; e < src.length; e += 1) keptEdges += edgeMask[e];
  return { nodeMask, edgeMask, nNodes: keptNodes, nEdges: keptEdges, influence, cumulative, edgeScores };
}

/**
 * Drop features without a kept incoming and outgoing edge, and errors (and other non-token, non-logit nodes:
 * Python's graphs have none) without a kept outgoing edge, until none is left; the edges of a dropped node go with
 * it. Python drops in rounds; a worklist reaches the same set (the largest one in which every node has its edges:
 * a node lacking them among more nodes lacks them among fewer). Then every kept edge joins kept nodes.
 */
function dropUnconnected(graph, nodeMask, edgeMask) {
  const { nNodes, kind, src, dst } = graph;
  const { inStart, inEdges, outStart, outEdges } = edgeIndex(graph);
  const keptIn = new Int32Array(nNodes);
  const keptOut = new Int32Array(nNodes);
  for (let e = 0; e < src.length; e += 1) {
    if (edgeMask[e]) {
      keptOut[src[e]] += 1;
      keptIn[dst[e]] += 1;
    }
  }
  // edges that touch a node dropped by the node threshold score 0 and were never kept
  const fails = (i) =>
    nodeMask[i] &&
    kind[i] !== KIND.token &&
    kind[i] !== KIND.logit &&
    (keptOut[i] === 0 || (keptIn[i] === 0 && (kind[i] === KIND.feature || kind[i] === KIND.other)));
  const stack = [];
  for (let i = 0; i < nNodes; i += 1) if (fails(i)) stack.push(i);
  while (stack.length) {
    const i = stack.pop();
    if (!nodeMask[i]) continue;
    nodeMask[i] = 0;
    for (let k = inStart[i]; k < inStart[i + 1]; k += 1) {
      const e = inEdges[k];
      if (!edgeMask[e]) continue;
      edgeMask[e] = 0;
      keptOut[src[e]] -= 1;
      if (fails(src[e])) stack.push(src[e]);
    }
    for (let k = outStart[i]; k < outStart[i + 1]; k += 1) {
      const e = outEdges[k];
      if (!edgeMask[e]) continue;
      edgeMask[e] = 0;
      keptIn[dst[e]] -= 1;
      if (fails(dst[e])) stack.push(dst[e]);
    }
  }
  for (let e = 0; e < src.length; e += 1) if (!nodeMask[src[e]] || !nodeMask[dst[e]]) edgeMask[e] = 0;
}
