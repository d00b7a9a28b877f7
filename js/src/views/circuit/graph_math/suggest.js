/**
 * Supernode suggestions as Neuronpedia's `supernode-suggestions.ts`: among the pinned feature nodes, signed
 * incoming and outgoing edge profiles compared by cosine; two nodes may share a group when the cosine is at least
 * `minCosine` (0.75), they share at least `minShared` (2) neighbours and are of the same node kind; groups grow by
 * complete linkage and have 2 to `maxSize` (8) members. Deterministic: the same graph and pins give the same groups
 * in the same order. Suggestions only: the view shows them and never applies them by itself.
 *
 * @example
 *   suggestSupernodes(graph, pinnedIndices); // [[3, 8, 11], [5, 9]]: node indices, each group sorted
 */

/**
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Iterable<number>} pinned  node indices; non-feature pins are ignored
 * @param {{minCosine?: number, minShared?: number, minSize?: number, maxSize?: number}} [options]
 * @returns {number[][]}  groups of node indices, strongest first
 * @example suggestSupernodes(graph, [0, 1, 2])
 */
export function suggestSupernodes(graph, pinned, options = {}) {
  throw new Error("not implemented");
}
