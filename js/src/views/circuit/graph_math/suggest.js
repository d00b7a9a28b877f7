/**
 * Supernode suggestions as Neuronpedia's `supernode-suggestions.ts`: among the pinned feature nodes (features and
 * other transcoder kinds such as lorsa; not already in a supernode), each node's signed incoming and outgoing edge
 * profiles (neighbour -> summed weight, over every edge of the graph) are compared by cosine. A pair may share a
 * group when the mean of the cosines both nodes have a profile for is at least `minCosine` (0.75), they share at
 * least `minShared` (2) neighbours in those profiles, and they are of the same node kind. Pairs merge groups
 * strongest first, by complete linkage (every cross pair must pass), into groups of 2 to `maxSize` (8) members.
 * Deterministic: nodes are ordered by `nodeIds` when given (as Neuronpedia orders its string ids), else by index,
 * so the same graph and pins give the same groups in the same order whatever the order of pins or edges.
 * Suggestions only: the view shows them and never applies them by itself.
 *
 * @example
 *   suggestSupernodes(graph, pinnedIndices); // [[3, 8, 11], [5, 9]]: node indices, strongest group first
 *   supernodeSuggestions(graph, pinnedIndices); // [{label: "Suggested group 1", members: [3, 8, 11], minCohesion: 0.93, ...}, ...]
 */
import { edgeIndex, KIND } from "./graph.js";
import { pinMask } from "./scores.js";

/** Neuronpedia's cap on the pins it considers (the first 200 pins). */
export const MAX_CANDIDATES = 200;

/**
 * @typedef {object} Suggestion
 * @property {string} label  "Suggested group k", k from 1 in the order returned
 * @property {number[]} members  node indices, in node order
 * @property {number} minCohesion  the lowest pair score in the group
 * @property {number} meanCohesion  the mean pair score
 * @property {number} minSharedIncoming  the fewest shared incoming neighbours of a pair
 * @property {number} minSharedOutgoing  the fewest shared outgoing neighbours of a pair
 */

/**
 * @typedef {object} SuggestOptions
 * @property {number} [minCosine]  0.75: the least pair score (Neuronpedia's `similarityThreshold`)
 * @property {number} [minShared]  2: the fewest shared neighbours (`minSharedNeighbors`)
 * @property {number} [maxSize]  8: the largest group (`maxGroupSize`, at least 2)
 * @property {"both" | "incoming" | "outgoing"} [profile]  "both": which edge profiles count
 * @property {boolean} [sameKind]  true: only nodes of the same kind group (`sameFeatureTypeOnly`)
 * @property {Iterable<number>} [grouped]  nodes already in a supernode: never suggested again
 * @property {ArrayLike<string>} [nodeIds]  per node: the id that orders nodes (Neuronpedia's string order)
 */

const clamp = (value, low, high) => Math.min(high, Math.max(low, value));
const finiteOr = (value, fallback) => (Number.isFinite(value) ? value : fallback);

function cosine(left, right) {
  let leftSquared = 0;
  let rightSquared = 0;
  let dot = 0;
  for (const [key, value] of left) {
    leftSquared += value * value;
    dot += value * (right.get(key) ?? 0);
  }
  for (const value of right.values()) rightSquared += value * value;
  if (leftSquared === 0 || rightSquared === 0) return 0;
  return clamp(dot / Math.sqrt(leftSquared * rightSquared), -1, 1);
}

function shared(left, right) {
  const [small, large] = left.size <= right.size ? [left, right] : [right, left];
  let count = 0;
  for (const key of small.keys()) if (large.has(key)) count += 1;
  return count;
}

function addTo(profile, neighbour, value) {
  const sum = (profile.get(neighbour) ?? 0) + value;
  if (sum === 0) profile.delete(neighbour);
  else profile.set(neighbour, sum);
}

/**
 * The members of each supernode suggestion among the pinned feature nodes ({@link supernodeSuggestions} has the
 * evidence too).
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Iterable<number>} pinned  node indices (the first 200 count); pins that are no feature are ignored
 * @param {SuggestOptions} [options]
 * @returns {number[][]}  groups of node indices in node order, the strongest group (highest `minCohesion`) first
 * @throws {RangeError} for a pin that is no node index
 * @example suggestSupernodes(graph, [0, 1, 2]) // [[0, 2]]
 */
export function suggestSupernodes(graph, pinned, options = {}) {
  return supernodeSuggestions(graph, pinned, options).map((suggestion) => suggestion.members);
}

/**
 * Supernode suggestions among the pinned feature nodes, with their evidence (cohesion, shared neighbours) and
 * Neuronpedia's labels.
 * @param {import("./graph.js").CircuitGraph} graph
 * @param {Iterable<number>} pinned  node indices (the first 200 count); pins that are no feature are ignored
 * @param {SuggestOptions} [options]
 * @returns {Suggestion[]}  strongest (highest `minCohesion`) first
 * @throws {RangeError} for a pin that is no node index
 * @example supernodeSuggestions(graph, [0, 1, 2])[0].minCohesion
 */
export function supernodeSuggestions(graph, pinned, options = {}) {
  const minCosine = clamp(finiteOr(options.minCosine ?? 0.75, 0.75), -1, 1);
  const minShared = Math.max(0, Math.floor(finiteOr(options.minShared ?? 2, 2)));
  const maxSize = clamp(Math.floor(finiteOr(options.maxSize ?? 8, 8)), 2, MAX_CANDIDATES);
  const profile = options.profile ?? "both";
  if (!["both", "incoming", "outgoing"].includes(profile)) {
    throw new RangeError(`profile must be "both", "incoming" or "outgoing", got ${JSON.stringify(profile)}`);
  }
  const sameKind = options.sameKind ?? true;
  const { nodeIds } = options;
  const compare = nodeIds
    ? (a, b) => (nodeIds[a] < nodeIds[b] ? -1 : nodeIds[a] > nodeIds[b] ? 1 : a - b)
    : (a, b) => a - b;
  const { kind, src, dst, weight } = graph;
  const grouped = pinMask(graph, options.grouped ?? []);
  const first = [...pinned].slice(0, MAX_CANDIDATES);
  pinMask(graph, first); // checks the indices
  const candidates = [...new Set(first)]
    .filter((i) => (kind[i] === KIND.feature || kind[i] === KIND.other) && !grouped[i])
    .sort(compare);

  // signed profiles over every edge of the graph
  const slot = new Map(candidates.map((node, k) => [node, k]));
  const incoming = candidates.map(() => new Map());
  const outgoing = candidates.map(() => new Map());
  const { inStart, inEdges, outStart, outEdges } = edgeIndex(graph);
  candidates.forEach((node, k) => {
    for (let j = inStart[node]; j < inStart[node + 1]; j += 1) {
      const e = inEdges[j];
      if (src[e] !== node) addTo(incoming[k], src[e], weight[e]);
    }
    for (let j = outStart[node]; j < outStart[node + 1]; j += 1) {
      const e = outEdges[j];
      if (dst[e] !== node) addTo(outgoing[k], dst[e], weight[e]);
    }
  });
  const nodes = candidates.filter((node) => incoming[slot.get(node)].size > 0 || outgoing[slot.get(node)].size > 0);
  if (nodes.length < 2) return [];

  // pair evidence, for every pair of candidates (i < j in node order)
  const n = nodes.length;
  const evidence = new Array(n * n).fill(null);
  const pairs = [];
  for (let i = 0; i < n; i += 1) {
    for (let j = i + 1; j < n; j += 1) {
      const a = slot.get(nodes[i]);
      const b = slot.get(nodes[j]);
      if (sameKind && kind[nodes[i]] !== kind[nodes[j]]) continue;
      const hasIn = incoming[a].size > 0 && incoming[b].size > 0;
      const hasOut = outgoing[a].size > 0 && outgoing[b].size > 0;
      const sharedIn = shared(incoming[a], incoming[b]);
      const sharedOut = shared(outgoing[a], outgoing[b]);
      const scores = [];
      let sharedCount = 0;
      if (profile !== "outgoing" && hasIn) {
        scores.push(cosine(incoming[a], incoming[b]));
        sharedCount += sharedIn;
      }
      if (profile !== "incoming" && hasOut) {
        scores.push(cosine(outgoing[a], outgoing[b]));
        sharedCount += sharedOut;
      }
      if (scores.length === 0) continue;
      const score = scores.reduce((x, y) => x + y, 0) / scores.length;
      const pair = { i, j, score, sharedIn, sharedOut, passes: score >= minCosine && sharedCount >= minShared };
      evidence[i * n + j] = evidence[j * n + i] = pair;
      if (pair.passes) pairs.push(pair);
    }
  }
  pairs.sort((x, y) => y.score - x.score || x.i - y.i || x.j - y.j);

  // complete linkage: merge two groups when every cross pair passes and the union fits
  const groupOf = Array.from({ length: n }, (_, i) => i);
  const members = Array.from({ length: n }, (_, i) => [i]);
  for (const { i, j } of pairs) {
    const left = groupOf[i];
    const right = groupOf[j];
    if (left === right || members[left].length + members[right].length > maxSize) continue;
    const linked = members[left].every((x) => members[right].every((y) => evidence[x * n + y]?.passes));
    if (!linked) continue;
    const union = [...members[left], ...members[right]].sort((x, y) => x - y);
    members[left] = members[right] = null;
    members[union[0]] = union;
    for (const x of union) groupOf[x] = union[0];
  }

  const suggestions = [];
  for (const group of members) {
    if (!group || group.length < 2) continue;
    const evidences = [];
    for (let x = 0; x < group.length; x += 1) {
      for (let y = x + 1; y < group.length; y += 1) evidences.push(evidence[group[x] * n + group[y]]);
    }
    const scores = evidences.map((pair) => pair.score);
    suggestions.push({
      order: group,
      members: group.map((k) => nodes[k]),
      minCohesion: Math.min(...scores),
      meanCohesion: scores.reduce((x, y) => x + y, 0) / scores.length,
      minSharedIncoming: Math.min(...evidences.map((pair) => pair.sharedIn)),
      minSharedOutgoing: Math.min(...evidences.map((pair) => pair.sharedOut)),
    });
  }
  const lexical = (x, y) => {
    for (let k = 0; k < Math.min(x.length, y.length); k += 1) if (x[k] !== y[k]) return x[k] - y[k];
    return x.length - y.length;
  };
  suggestions.sort((x, y) => y.minCohesion - x.minCohesion || lexical(x.order, y.order));
  return suggestions.map(({ order, ...rest }, k) => ({ label: `Suggested group ${k + 1}`, ...rest }));
}
