/**
 * Pruning with node and edge thresholds, as Python's `AttributionGraph.prune` (= circuit-tracer 0.5.0's
 * `prune_graph`): keep the nodes holding `nodeThreshold` of the logit influence (tokens and logits always), score
 * the edges of that subgraph as Â'·(I' + w) and keep those holding `edgeThreshold` of the edge score, then
 * repeatedly drop features lacking a kept incoming or outgoing edge and errors lacking a kept outgoing edge.
 *
 * @example
 *   const pruned = pruneGraph(graph, { nodeThreshold: 0.8, edgeThreshold: 0.98 });
 *   pruned.nodeMask; // Uint8Array, 1 = kept (equals Python's kept nodes)
 *   pruned.edgeMask; // Uint8Array per edge, 1 = kept
 */

/**
 * @typedef {object} Pruned
 * @property {Uint8Array} nodeMask  per node: 1 = kept
 * @property {Uint8Array} edgeMask  per edge of the graph: 1 = kept (both ends kept, score at the threshold or above)
 * @property {number} nNodes  kept nodes
 * @property {number} nEdges  kept edges
 * @property {Float64Array} influence  each node's influence on the logits in the full graph
 * @property {Float64Array} cumulative  each node's cumulative influence fraction (Python's `pruning.influence`)
 */

/**
 * The nodes and edges that Python's `.prune(node_threshold, edge_threshold)` keeps. The full graph's influence is
 * cached per graph, so a slider move costs one influence pass over the node-pruned graph and one sort of its edges.
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {{nodeThreshold?: number, edgeThreshold?: number}} [options]  fractions in (0, 1]; 0.8 and 0.98 by default
 * @returns {Pruned}
 * @throws {RangeError} for a threshold outside (0, 1]
 * @example pruneGraph(graph, { nodeThreshold: 0.9 }).nNodes
 */
export function pruneGraph(graph, options = {}) {
  throw new Error("not implemented");
}
