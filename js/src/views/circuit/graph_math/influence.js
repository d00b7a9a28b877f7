/**
 * Node influence on the logits by sparse back-propagation over the edge list (never a dense n x n matrix):
 * Python's `_influence(_row_normalised(A), w)`, i.e. `w (Â + Â² + ...)` with `Â` the row-normalised |A| and `w`
 * the logit probabilities, computed in one pass in reverse topological order (O(nodes + edges)).
 *
 * @example
 *   const influence = nodeInfluence(graph);         // Float64Array, one per node
 *   const fraction = cumulativeInfluence(influence); // Python's pruning.influence (smaller = more important)
 */

/**
 * Each node's influence on the logits: `w · (Â + Â² + ...)`. With `nodeMask`, only the masked nodes and the edges
 * between them count (Python's pruned adjacency: rows and columns of the other nodes zeroed).
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {{nodeMask?: Uint8Array}} [options]
 * @returns {Float64Array}
 * @throws {Error} if the non-zero edges form a cycle (Python raises too)
 * @example nodeInfluence(graph)[0]
 */
export function nodeInfluence(graph, options = {}) {
  throw new Error("not implemented");
}

/**
 * Each node's cumulative influence fraction: the share of all influence held by the nodes at least as
 * influential as it (Python's `pruning.influence`; smaller = more important).
 * @param {ArrayLike<number>} influence
 * @returns {Float64Array}
 * @example cumulativeInfluence([3, 1]) // Float64Array [0.75, 1]
 */
export function cumulativeInfluence(influence) {
  throw new Error("not implemented");
}
