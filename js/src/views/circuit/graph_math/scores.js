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

/**
 * @typedef {object} Scores
 * @property {boolean} computable  false when the graph has nodes the rule does not cover (e.g. lorsa)
 * @property {number} replacement  NaN when not computable (NaN of the formula otherwise reads 0, as Python's)
 * @property {number} completeness
 * @property {string} [reason]  why the scores are not computable
 */

/**
 * The scores of the subgraph of `pinned` nodes (indices; an empty list: the whole graph).
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Iterable<number>} pinned
 * @returns {Scores}
 * @throws {RangeError} for a pin that is no node index
 * @example subgraphScores(graph, []).replacement
 */
export function subgraphScores(graph, pinned) {
  throw new Error("not implemented");
}
