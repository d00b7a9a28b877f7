/**
 * The circuit view's in-browser maths, free of DOM: the graph ({@link makeGraph}), influence, pruning, live scores
 * and supernode suggestions.
 *
 * @example
 *   import { makeGraph, pruneGraph, subgraphScores, suggestSupernodes } from "./graph_math/index.js";
 */
export { KIND, makeGraph, edgeIndex } from "./graph.js";
export { nodeInfluence, cumulativeInfluence, logitWeights, normalisedEdges, propagate } from "./influence.js";
export { pruneGraph, warmPruning } from "./prune.js";
export { pinMask, subgraphScores } from "./scores.js";
export { MAX_CANDIDATES, suggestSupernodes, supernodeSuggestions } from "./suggest.js";
