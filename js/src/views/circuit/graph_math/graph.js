/**
 * The in-memory attribution graph that the circuit view's maths reads: nodes as parallel typed arrays, edges as a
 * COO list (source, target, weight), and a compressed index by target and by source built once per graph.
 *
 * The graph is the one the view holds (the full graph the kernel sent, or a pruned one from a graph JSON), with the
 * float16-rounded weights the view stores decoded to float32 (`float16ToFloat32` of `lib/attention_math.js`), so
 * pruning and scores equal Python's `AttributionGraph.prune()` / `.scores(pinned=...)` on the same rounded weights.
 * An edge `e` is `adjacency[dst[e], src[e]] = weight[e]` of Python's dense adjacency (rows = targets): the direct
 * effect of node `src[e]` on node `dst[e]`. Node order is free (the maths reads `kind`, never the order), but
 * the view keeps Python's (features, errors, tokens, logits) so indices match `graph.node_ids`.
 *
 * @example
 *   const graph = makeGraph({
 *     kind: Uint8Array.of(KIND.feature, KIND.token, KIND.logit),
 *     layer: Int16Array.of(0, -1, 2), position: Int32Array.of(0, 0, 0),
 *     logitProbs: Float32Array.of(0, 0, 0.9),
 *     src: Int32Array.of(1, 0), dst: Int32Array.of(0, 2), weight: Float32Array.of(2, 1.5),
 *   });
 *   graph.nNodes; // 3
 */

/** Node kind codes (the order of Python's `AttributionGraph.node_kinds` blocks); `other` is any kind the maths
 * does not know (a Neuronpedia `lorsa` node): pruning treats it as a feature, the scores call the graph not
 * computable. */
export const KIND = Object.freeze({ feature: 0, error: 1, token: 2, logit: 3, other: 4 });

/**
 * @typedef {object} CircuitGraph
 * @property {number} nNodes  the number of nodes
 * @property {Uint8Array} kind  per node: a {@link KIND} code
 * @property {Int16Array} layer  per node: the transcoder layer of features and errors, -1 for tokens,
 *   `n_layers + 1` for logits (Python's `to_dataframe()` layer column)
 * @property {Int32Array} position  per node: the prompt position (`ctx_idx`)
 * @property {Float32Array} logitProbs  per node: the logit target's probability for logit nodes, 0 elsewhere
 *   (Python's `logits.probs`, float32: the weights of the logit influence)
 * @property {Int32Array} src  per edge: the source node
 * @property {Int32Array} dst  per edge: the target node
 * @property {Float32Array} weight  per edge: the direct effect (float16-rounded as the view stores it); zero
 *   weights are allowed and count as no edge; at most one edge per (src, dst)
 */

/**
 * @typedef {object} EdgeIndex  compressed rows of the edges by target and by source (CSR), over non-zero edges
 * @property {Int32Array} inStart  per node + 1: `inEdges[inStart[t] .. inStart[t + 1])` are the edges into `t`
 * @property {Int32Array} inEdges  edge ids grouped by target, each group in edge order
 * @property {Int32Array} outStart  per node + 1: `outEdges[outStart[s] .. outStart[s + 1])` are the edges out of `s`
 * @property {Int32Array} outEdges  edge ids grouped by source, each group in edge order
 */

/**
 * Check and freeze the parts of a graph into a {@link CircuitGraph} (typed arrays are kept, not copied; plain
 * arrays are converted).
 * @param {{kind: ArrayLike<number>, layer: ArrayLike<number>, position: ArrayLike<number>,
 *   logitProbs: ArrayLike<number>, src: ArrayLike<number>, dst: ArrayLike<number>, weight: ArrayLike<number>}} parts
 * @returns {CircuitGraph}
 * @throws {RangeError} for arrays of different lengths or an edge to no node
 * @example makeGraph({kind: [2, 3], layer: [-1, 1], position: [0, 0], logitProbs: [0, 1], src: [0], dst: [1],
 *   weight: [0.5]}).nNodes // 2
 */
export function makeGraph(parts) {
  if (parts === null || typeof parts !== "object")
    throw new TypeError("makeGraph needs an object of node and edge arrays");
  const nodeArrays = { kind: Uint8Array, layer: Int16Array, position: Int32Array, logitProbs: Float32Array };
  const edgeArrays = { src: Int32Array, dst: Int32Array, weight: Float32Array };
  const graph = {};
  for (const [name, Type] of Object.entries({ ...nodeArrays, ...edgeArrays })) {
    const values = parts[name];
    if (values === undefined || values === null || typeof values.length !== "number") {
      throw new TypeError(
        `makeGraph needs "${name}" (an array of numbers); the graph's parts are ${Object.keys({ ...nodeArrays, ...edgeArrays }).join(", ")}`,
      );
    }
    graph[name] = values instanceof Type ? values : Type.from(values);
  }
  const nNodes = graph.kind.length;
  for (const name of Object.keys(nodeArrays)) {
    if (graph[name].length !== nNodes) {
      throw new RangeError(`"${name}" has ${graph[name].length} entries for ${nNodes} nodes (the length of "kind")`);
    }
  }
  const nEdges = graph.src.length;
  for (const name of Object.keys(edgeArrays)) {
    if (graph[name].length !== nEdges) {
      throw new RangeError(`"${name}" has ${graph[name].length} entries for ${nEdges} edges (the length of "src")`);
    }
  }
  for (let i = 0; i < nNodes; i += 1) {
    if (graph.kind[i] > KIND.other)
      throw new RangeError(`node ${i} has kind ${graph.kind[i]}; kinds are the KIND codes 0..4`);
  }
  for (let e = 0; e < nEdges; e += 1) {
    const s = graph.src[e];
    const t = graph.dst[e];
    if (s < 0 || s >= nNodes || t < 0 || t >= nNodes) {
      throw new RangeError(`edge ${e} joins nodes ${s} -> ${t}, outside 0..${nNodes - 1}`);
    }
  }
  graph.nNodes = nNodes;
  return Object.freeze(graph);
}

const INDEX = new WeakMap();

/** Group the edges that pass `use` by `key` (counting sort: each group keeps edge order). */
function compress(nNodes, key, use) {
  const start = new Int32Array(nNodes + 1);
  for (let e = 0; e < key.length; e += 1) if (use(e)) start[key[e] + 1] += 1;
  for (let i = 0; i < nNodes; i += 1) start[i + 1] += start[i];
  const edges = new Int32Array(start[nNodes]);
  const fill = start.slice(0, nNodes);
  for (let e = 0; e < key.length; e += 1) if (use(e)) edges[fill[key[e]]++] = e;
  return { start, edges };
}

/**
 * The edge index of a graph over its non-zero, finite edges (built on first use, then cached for that graph
 * object).
 * @param {CircuitGraph} graph
 * @returns {EdgeIndex}
 * @example edgeIndex(graph).inStart[graph.nNodes] // the number of non-zero edges
 */
export function edgeIndex(graph) {
  let index = INDEX.get(graph);
  if (index) return index;
  const { weight } = graph;
  const use = (e) => weight[e] !== 0 && Number.isFinite(weight[e]);
  const incoming = compress(graph.nNodes, graph.dst, use);
  const outgoing = compress(graph.nNodes, graph.src, use);
  index = { inStart: incoming.start, inEdges: incoming.edges, outStart: outgoing.start, outEdges: outgoing.edges };
  INDEX.set(graph, index);
  return index;
}
