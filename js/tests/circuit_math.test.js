// The circuit view's in-browser maths against Python: pruning node for node and edge for edge, live scores to 1e-9,
// on the float16 weights the view stores (fixtures from scripts/circuit_fixtures.py); supernode suggestions against
// Neuronpedia's own tests of supernode-suggestions.ts and a planted graph.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { float16ToFloat32 } from "../src/lib/attention_math.js";
import {
  KIND,
  cumulativeInfluence,
  edgeIndex,
  makeGraph,
  nodeInfluence,
  pruneGraph,
  subgraphScores,
  suggestSupernodes,
  supernodeSuggestions,
} from "../src/views/circuit/graph_math/index.js";

const FIXTURES = JSON.parse(readFileSync(resolve(__dirname, "fixtures/circuit_math.json"), "utf8"));

/** A fixture graph as the view holds it: float16 weights decoded to float32. */
function fixtureGraph(fixture) {
  return makeGraph({
    kind: fixture.kind,
    layer: fixture.layer,
    position: fixture.position,
    logitProbs: fixture.logit_probs,
    src: fixture.edges.src,
    dst: fixture.edges.dst,
    weight: float16ToFloat32(Uint16Array.from(fixture.edges.weight_f16)),
  });
}

const indices = (mask) => Array.from(mask, (kept, i) => (kept ? i : -1)).filter((i) => i >= 0);
const relative = (a, b) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-300);

/** The same graph with its nodes permuted (`order[new] = old`) and its edges reversed. */
function permuted(fixture, order) {
  const place = new Int32Array(order.length);
  order.forEach((old, i) => (place[old] = i));
  const pick = (values) => order.map((old) => values[old]);
  const n = fixture.edges.src.length;
  const edgeOrder = Array.from({ length: n }, (_, e) => n - 1 - e);
  return makeGraph({
    kind: pick(fixture.kind),
    layer: pick(fixture.layer),
    position: pick(fixture.position),
    logitProbs: pick(fixture.logit_probs),
    src: edgeOrder.map((e) => place[fixture.edges.src[e]]),
    dst: edgeOrder.map((e) => place[fixture.edges.dst[e]]),
    weight: float16ToFloat32(Uint16Array.from(edgeOrder.map((e) => fixture.edges.weight_f16[e]))),
  });
}

/** The six-node graph of Python's `example_graph()`. */
function exampleGraph() {
  return makeGraph({
    kind: [KIND.feature, KIND.error, KIND.error, KIND.token, KIND.token, KIND.logit],
    layer: [0, 0, 0, -1, -1, 2],
    position: [1, 0, 1, 0, 1, 1],
    logitProbs: [0, 0, 0, 0, 0, 0.9],
    src: [3, 0, 4],
    dst: [0, 5, 5],
    weight: [2, 1.5, -0.5],
  });
}

/** A seeded random graph of about `nNodes` nodes and `nEdges` edges over 30 layers x 24 positions. */
function randomGraph(nNodes, nEdges, seed = 1) {
  let state = seed;
  const random = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const [layers, positions, logits] = [30, 24, 10];
  const errors = layers * positions;
  const features = nNodes - errors - positions - logits;
  const kind = [];
  const layer = [];
  const position = [];
  for (let i = 0; i < features; i += 1) {
    kind.push(KIND.feature);
    layer.push(Math.floor((i * layers) / features));
    position.push(Math.floor(random() * positions));
  }
  for (let i = 0; i < errors; i += 1)
    (kind.push(KIND.error), layer.push(Math.floor(i / positions)), position.push(i % positions));
  for (let p = 0; p < positions; p += 1) (kind.push(KIND.token), layer.push(-1), position.push(p));
  for (let k = 0; k < logits; k += 1) (kind.push(KIND.logit), layer.push(layers), position.push(positions - 1));
  const n = kind.length;
  const logitProbs = kind.map((k) => (k === KIND.logit ? 0.05 : 0));
  const seen = new Set();
  const [src, dst, weight] = [[], [], []];
  while (src.length < nEdges) {
    const t = Math.floor(random() * n);
    const s = Math.floor(random() * n);
    if (!(kind[t] === KIND.feature || kind[t] === KIND.logit) || kind[s] === KIND.logit || layer[s] >= layer[t])
      continue;
    if (seen.has(t * n + s)) continue;
    seen.add(t * n + s);
    (src.push(s), dst.push(t), weight.push((random() - 0.3) * 4));
  }
  return makeGraph({ kind, layer, position, logitProbs, src, dst, weight });
}

describe("pruning equals Python's AttributionGraph.prune", () => {
  for (const fixture of FIXTURES.graphs) {
    const graph = fixtureGraph(fixture);
    for (const expected of fixture.prune) {
      const { node_threshold: nodeThreshold, edge_threshold: edgeThreshold } = expected;
      it(`${fixture.name} at ${nodeThreshold} / ${edgeThreshold}: the same nodes, edges and influence`, () => {
        const pruned = pruneGraph(graph, { nodeThreshold, edgeThreshold });
        expect(indices(pruned.nodeMask)).toEqual(expected.nodes);
        expect(indices(pruned.edgeMask)).toEqual(expected.edges);
        expect([pruned.nNodes, pruned.nEdges]).toEqual([expected.nodes.length, expected.edges.length]);
        expected.nodes.forEach((node, k) => {
          expect(relative(pruned.cumulative[node], expected.cumulative[k])).toBeLessThan(1e-5);
        });
      });
    }
    it(`${fixture.name}: pruning does not depend on the order of nodes or edges`, () => {
      const n = fixture.kind.length;
      const order = Array.from({ length: n }, (_, i) => (i * 7919) % n);
      expect(new Set(order).size).toBe(n);
      const shuffled = permuted(fixture, order);
      for (const expected of fixture.prune) {
        const { node_threshold: nodeThreshold, edge_threshold: edgeThreshold } = expected;
        const kept = indices(pruneGraph(shuffled, { nodeThreshold, edgeThreshold }).nodeMask).map((i) => order[i]);
        expect(kept.sort((a, b) => a - b)).toEqual(expected.nodes);
      }
    });
  }

  it("drops a feature whose only output went to a dropped feature, in a second round, as Python does", () => {
    const cascade = FIXTURES.graphs.find((fixture) => fixture.name === "cascade");
    const [twoRounds, none] = cascade.prune;
    expect(twoRounds.nodes).toEqual([2, 6, 7]); // Python drops f0 (1), then fp (0)
    expect(none.nodes).toEqual([0, 1, 2, 6, 7]);
    const graph = fixtureGraph(cascade);
    for (const expected of [twoRounds, none]) {
      const { node_threshold: nodeThreshold, edge_threshold: edgeThreshold } = expected;
      expect(indices(pruneGraph(graph, { nodeThreshold, edgeThreshold }).nodeMask)).toEqual(expected.nodes);
    }
  });

  it("prunes Python's example_graph as its docstring says", () => {
    const pruned = pruneGraph(exampleGraph(), { nodeThreshold: 0.9 });
    expect(indices(pruned.nodeMask)).toEqual([0, 3, 4, 5]);
    expect(Array.from([0, 3, 4, 5], (i) => Number(pruned.cumulative[i].toFixed(3)))).toEqual([0.429, 0.857, 1, 1]);
  });

  it("refuses thresholds outside (0, 1]", () => {
    expect(() => pruneGraph(exampleGraph(), { nodeThreshold: 0 })).toThrow(
      /nodeThreshold must be a fraction in \(0, 1\]/,
    );
    expect(() => pruneGraph(exampleGraph(), { edgeThreshold: 1.5 })).toThrow(/edgeThreshold/);
  });

  it("keeps what Python keeps when the thresholds land on zero scores", () => {
    // at threshold 1 the last non-zero score is the threshold (Python: ['0_7_1', 'E_10_0', 'E_11_1', '2_12_1'])
    const graph = exampleGraph();
    const all = pruneGraph(graph, { nodeThreshold: 1, edgeThreshold: 1 });
    expect([indices(all.nodeMask), indices(all.edgeMask)]).toEqual([
      [0, 3, 4, 5],
      [0, 1, 2],
    ]);
    // no logit probability: every score is 0, so is each threshold, and every entry of the dense score matrix
    // passes, absent edges too: Python keeps all six nodes (the edgeless errors too) and the three edges
    const flat = makeGraph({ ...graph, logitProbs: [0, 0, 0, 0, 0, 0] });
    const none = pruneGraph(flat);
    expect([indices(none.nodeMask), indices(none.edgeMask)]).toEqual([
      [0, 1, 2, 3, 4, 5],
      [0, 1, 2],
    ]);
  });

  it("influence is w (Â + Â² + ...), computed without a dense matrix, and refuses a cycle", () => {
    const influence = nodeInfluence(exampleGraph());
    // the logit (p = 0.9) reads 3/4 from the feature and 1/4 from token b; the feature reads all from token a
    expect(Array.from(influence, (x) => Number(x.toFixed(6)))).toEqual([0.675, 0, 0, 0.675, 0.225, 0]);
    expect(Array.from(cumulativeInfluence([1, 3]))).toEqual([1, 0.75]);
    const cycle = makeGraph({ kind: [0, 0, 3], layer: [0, 1, 2], position: [0, 0, 0], logitProbs: [0, 0, 1],
      src: [0, 1, 1], dst: [1, 0, 2], weight: [1, 1, 1] }); // prettier-ignore
    expect(() => nodeInfluence(cycle)).toThrow(/cycle/);
  });

  it("prunes a graph of 5,000 nodes and 50,000 edges, every edge above the threshold kept", () => {
    const graph = randomGraph(5000, 50000);
    expect(edgeIndex(graph).inStart[graph.nNodes]).toBe(50000);
    const pruned = pruneGraph(graph, { nodeThreshold: 0.8, edgeThreshold: 0.98 });
    expect(pruned.nNodes).toBeGreaterThan(0);
    for (let e = 0; e < 50000; e += 1) {
      const between = pruned.nodeMask[graph.src[e]] && pruned.nodeMask[graph.dst[e]];
      if (pruned.edgeMask[e]) expect(between).toBe(1);
    }
    const looser = pruneGraph(graph, { nodeThreshold: 0.8, edgeThreshold: 0.99 });
    expect(looser.nEdges).toBeGreaterThanOrEqual(pruned.nEdges);
  });

  it("checks the graph's arrays", () => {
    expect(() => makeGraph({ kind: [0], layer: [0, 1], position: [0], logitProbs: [0], src: [], dst: [], weight: [] }))
      .toThrow(/"layer" has 2 entries for 1 nodes/); // prettier-ignore
    expect(() => makeGraph({ kind: [0], layer: [0], position: [0], logitProbs: [0], src: [0], dst: [3], weight: [1] }))
      .toThrow(/edge 0 joins nodes 0 -> 3/); // prettier-ignore
    expect(() => makeGraph({ kind: [0] })).toThrow(/makeGraph needs "layer"/);
  });
});

describe("live scores equal Python's AttributionGraph.scores(pinned=...)", () => {
  for (const fixture of FIXTURES.graphs) {
    const graph = fixtureGraph(fixture);
    it(`${fixture.name}: every pin set, to 1e-9 (both sides compute in float64)`, () => {
      for (const expected of fixture.scores) {
        const scores = subgraphScores(graph, expected.pinned);
        expect(scores.computable).toBe(true);
        expect(relative(scores.replacement, expected.replacement)).toBeLessThan(1e-9);
        expect(relative(scores.completeness, expected.completeness)).toBeLessThan(1e-9);
      }
    });
    it(`${fixture.name}: no pins gives the full graph's scores (Python's float32 compute_graph_scores)`, () => {
      const scores = subgraphScores(graph, []);
      expect(relative(scores.replacement, fixture.full_scores.replacement)).toBeLessThan(1e-6);
      expect(relative(scores.completeness, fixture.full_scores.completeness)).toBeLessThan(1e-6);
    });
    it(`${fixture.name}: scores do not depend on the order of nodes or edges`, () => {
      const n = fixture.kind.length;
      const order = Array.from({ length: n }, (_, i) => n - 1 - i);
      const place = new Map(order.map((old, i) => [old, i]));
      const shuffled = permuted(fixture, order);
      for (const expected of fixture.scores) {
        const scores = subgraphScores(
          shuffled,
          expected.pinned.map((i) => place.get(i)),
        );
        expect(relative(scores.replacement, expected.replacement)).toBeLessThan(1e-9);
      }
    });
  }

  it("follows score.worker.ts on Python's example_graph: an unpinned feature's edges move to its error node", () => {
    const graph = exampleGraph();
    expect(subgraphScores(graph, [])).toEqual({ computable: true, replacement: 1, completeness: 1 });
    // pinning token a drops the feature into error 0_-1_1: the logit reads 3/4 from an error
    const pinned = subgraphScores(graph, [3]);
    expect(pinned.replacement).toBeCloseTo(0.25, 12);
    // completeness: the logit's input is 1/4 error-free; (0.25 * 0.9 + 0.675 + 0.225) / (0.9 + 0.675 + 0.225)
    expect(pinned.completeness).toBeCloseTo(0.625, 12);
    // with no error node at the feature's cell its edges just go: only token b's edge is left
    const noError = makeGraph({ kind: [0, 2, 2, 3], layer: [0, -1, -1, 2], position: [1, 0, 1, 1],
      logitProbs: [0, 0, 0, 0.9], src: [1, 0, 2], dst: [0, 3, 3], weight: [2, 1.5, -0.5] }); // prettier-ignore
    expect(subgraphScores(noError, [1])).toEqual({ computable: true, replacement: 1, completeness: 1 });
  });

  it("says 'not computable' for a graph with lorsa nodes, as score.worker.ts does", () => {
    const lorsa = makeGraph({ kind: [KIND.other, KIND.token, KIND.logit], layer: [0, -1, 2], position: [0, 0, 0],
      logitProbs: [0, 0, 1], src: [1, 0], dst: [0, 2], weight: [1, 1] }); // prettier-ignore
    const scores = subgraphScores(lorsa, []);
    expect(scores.computable).toBe(false);
    expect(scores.reason).toMatch(/not computable.*lorsa/);
    expect(Number.isNaN(scores.replacement)).toBe(true);
    expect(pruneGraph(lorsa, { nodeThreshold: 1 }).nNodes).toBe(3); // pruning still works
  });

  it("refuses a pin that is no node", () => {
    expect(() => subgraphScores(exampleGraph(), [6])).toThrow(/pinned node 6 is not a node index/);
    expect(() => subgraphScores(exampleGraph(), "0")).toThrow(/pinned node 0 is not a node index/);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Neuronpedia's supernode-suggestions.test.ts (hijohnnylin/neuronpedia, apps/webapp/app/[modelId]/graph), ported:
// nodes are indices here, so ids become `nodeIds` (which orders nodes as Neuronpedia's string ids do), feature types
// become kinds ('embedding' -> token, 'logit' -> logit, 'cross layer transcoder' -> feature, 'lorsa' -> other).

const TYPE_KIND = {
  embedding: KIND.token,
  logit: KIND.logit,
  "cross layer transcoder": KIND.feature,
  lorsa: KIND.other,
};

/** A graph from Neuronpedia-style nodes `{id, type}` and links `[source id, target id, weight]`. */
function npGraph(nodes, links) {
  const index = new Map(nodes.map((node, i) => [node.id, i]));
  const graph = makeGraph({
    kind: nodes.map((node) => TYPE_KIND[node.type ?? "cross layer transcoder"]),
    layer: nodes.map((node) => node.layer ?? 1),
    position: nodes.map((node) => node.ctx ?? 0),
    logitProbs: nodes.map(() => 0),
    src: links.map(([s]) => index.get(s)),
    dst: links.map(([, t]) => index.get(t)),
    weight: links.map(([, , w]) => w),
  });
  const ids = nodes.map((node) => node.id);
  const suggest = (pinned, options = {}) =>
    supernodeSuggestions(
      graph,
      pinned.filter((id) => index.has(id)).map((id) => index.get(id)),
      { ...options, nodeIds: ids, grouped: (options.grouped ?? []).map((id) => index.get(id)) },
    ).map((s) => ({ ...s, members: s.members.map((i) => ids[i]) }));
  return { graph, suggest };
}

/** Candidates each read from the upstream nodes with the given weights. */
function incoming(candidates, upstream) {
  const nodes = [
    ...upstream.map((id) => ({ id, type: "embedding" })),
    ...candidates.map(({ id, type }) => ({ id, type })),
  ];
  const links = candidates.flatMap(({ id, weights }) => weights.map((w, k) => [upstream[k], id, w]));
  return npGraph(nodes, links);
}

describe("supernode suggestions: Neuronpedia's own tests", () => {
  it("groups nodes with identical signed incoming profiles", () => {
    const { suggest } = incoming(
      [
        { id: "left", weights: [1, 0.5] },
        { id: "right", weights: [2, 1] },
      ],
      ["up-1", "up-2"],
    );
    const result = suggest(["left", "right"]);
    expect(result).toHaveLength(1);
    expect(result[0]).toMatchObject({ label: "Suggested group 1", members: ["left", "right"], minSharedIncoming: 2 });
    expect(result[0].minCohesion).toBeCloseTo(1, 12);
  });

  it("does not group profiles with opposite attribution signs", () => {
    const { suggest } = incoming(
      [
        { id: "positive", weights: [1, 1] },
        { id: "negative", weights: [-1, -1] },
      ],
      ["u1", "u2"],
    );
    expect(suggest(["positive", "negative"])).toEqual([]);
  });

  it("supports incoming, outgoing, and combined profile modes independently", () => {
    const nodes = [
      { id: "up-1", type: "embedding" }, { id: "up-2", type: "embedding" }, { id: "left" }, { id: "right" },
      { id: "down-1", type: "logit" }, { id: "down-2", type: "logit" },
    ]; // prettier-ignore
    const links = [
      ["up-1", "left", 1], ["up-1", "right", 1], ["up-2", "left", 1], ["up-2", "right", 1],
      ["left", "down-1", 1], ["left", "down-2", 1], ["right", "down-1", -1], ["right", "down-2", -1],
    ]; // prettier-ignore
    const { suggest } = npGraph(nodes, links);
    expect(suggest(["left", "right"], { profile: "incoming" })).toHaveLength(1);
    expect(suggest(["left", "right"], { profile: "outgoing" })).toEqual([]);
    expect(suggest(["left", "right"], { profile: "both" })).toEqual([]);
  });

  it("requires the configured amount of shared-neighbor evidence", () => {
    const { suggest } = incoming(
      [
        { id: "left", weights: [1] },
        { id: "right", weights: [1] },
      ],
      ["shared"],
    );
    expect(suggest(["left", "right"])).toEqual([]);
    expect(suggest(["left", "right"], { minShared: 1 })).toHaveLength(1);
  });

  it("recovers a human-authored Dallas subgroup from a reduced public graph fixture", () => {
    // Neuronpedia's reduction of the "Response Dallas" supernode of transformer-circuits.pub's capital-state-dallas
    const left = "2_16536263_-0";
    const right = "2_23133920_-0";
    const decoy = "10_8513782_-0";
    const inputs = [
      ["E_28948388_10", 2.2459492683410645, 1.5262408256530762],
      ["1_21862382_10", 1.710408091545105, 1.098325490951538],
      ["1_4418612_10", 0.6796928644180298, 0.5530434846878052],
      ["1_13686348_10", 0.2643650770187378, 0.29762279987335205],
    ];
    const outputs = [
      ["3_27636071_10", 1.0517706871032715, 0.6656948328018188],
      ["3_22886075_10", 0.8075348138809204, 0.5080311894416809],
      ["4_1348861_10", 0.5275150537490845, 0.29129698872566223],
      ["15_21568836_11", 0.6396480202674866, 0.13760587573051453],
    ];
    const context = [...inputs, ...outputs, ["6_24231446_11"], ["15_2811388_11"]].map(([id]) => ({
      id,
      type: "embedding",
    }));
    const links = [
      ...inputs.flatMap(([id, l, r]) => [
        [id, left, l],
        [id, right, r],
      ]),
      ...outputs.flatMap(([id, l, r]) => [
        [left, id, l],
        [right, id, r],
      ]),
      ["6_24231446_11", decoy, 0.4334683120250702],
      [decoy, "15_2811388_11", 1.7817903757095337],
    ];
    const { suggest } = npGraph(
      [
        ...context,
        { id: left, layer: 2, ctx: 10 },
        { id: right, layer: 2, ctx: 10 },
        { id: decoy, layer: 10, ctx: 11 },
      ],
      links,
    );
    const result = suggest([left, right, decoy]);
    expect(result).toHaveLength(1);
    expect(result[0].members).toEqual([left, right]);
    expect(result[0].minCohesion).toBeGreaterThan(0.9);
  });

  it("excludes unsupported, zero-degree, and already grouped nodes (a missing pin is refused here: pins are indices)", () => {
    const { graph, suggest } = incoming(
      [
        { id: "eligible", weights: [1, 1] },
        { id: "unsupported", type: "logit", weights: [1, 1] },
        { id: "grouped", weights: [1, 1] },
        { id: "zero-degree", weights: [] },
      ],
      ["up-1", "up-2"],
    );
    expect(suggest(["eligible", "unsupported", "grouped", "zero-degree", "missing"], { grouped: ["grouped"] })).toEqual(
      [],
    );
    expect(() => suggestSupernodes(graph, [99])).toThrow(/pinned node 99 is not a node index/);
  });

  it("keeps feature types separate by default and can relax that constraint", () => {
    const { suggest } = incoming(
      [
        { id: "mlp", weights: [1, 1] },
        { id: "attention", type: "lorsa", weights: [1, 1] },
      ],
      ["u1", "u2"],
    );
    expect(suggest(["mlp", "attention"])).toEqual([]);
    expect(suggest(["mlp", "attention"], { sameKind: false })).toHaveLength(1);
  });

  it("uses complete-link validation to prevent chain clusters", () => {
    const { suggest } = incoming(
      [
        { id: "a", weights: [1, 0] },
        { id: "b", weights: [1, 1] },
        { id: "c", weights: [0, 1] },
      ],
      ["x", "y"],
    );
    const result = suggest(["a", "b", "c"], { minCosine: 0.7, minShared: 1 });
    expect(result).toHaveLength(1);
    expect(result[0].members).toEqual(["a", "b"]);
  });

  it("enforces maximum group size without assigning a node twice", () => {
    const ids = ["a", "b", "c", "d"];
    const { suggest } = incoming(
      ids.map((id) => ({ id, weights: [1, 1] })),
      ["up-1", "up-2"],
    );
    const result = suggest(ids, { maxSize: 2 });
    const members = result.flatMap((s) => s.members);
    expect(result.length).toBeGreaterThan(0);
    expect(result.every((s) => s.members.length === 2)).toBe(true);
    expect(new Set(members).size).toBe(members.length);
  });

  it("is invariant to node, link, and pinned-ID ordering and does not mutate inputs", () => {
    const candidates = ["a", "b", "c"].map((id) => ({ id, weights: [1, 1] }));
    const forward = incoming(candidates, ["up-1", "up-2"]);
    const nodes = [
      ...["up-1", "up-2"].map((id) => ({ id, type: "embedding" })),
      ...candidates.map(({ id }) => ({ id })),
    ];
    const links = candidates.flatMap(({ id }) => [
      ["up-1", id, 1],
      ["up-2", id, 1],
    ]);
    const reversed = npGraph([...nodes].reverse(), [...links].reverse());
    const pins = [4, 3, 2];
    const before = [...pins];
    const a = forward.suggest(["a", "b", "c"]);
    const b = reversed.suggest(["c", "b", "a"]);
    expect(b).toEqual(a);
    expect(suggestSupernodes(forward.graph, pins)).toEqual([[2, 3, 4]]);
    expect(pins).toEqual(before);
  });
});

describe("supernode suggestions on a planted graph", () => {
  // two groups of features with identical (scaled) signed edge profiles, and a third feature of another profile
  const up = ["t0", "t1", "t2", "t3"];
  const down = ["l0", "l1", "l2"];
  const groupA = ["a1", "a2", "a3"];
  const groupB = ["b1", "b2"];
  const nodes = [
    ...up.map((id) => ({ id, type: "embedding" })),
    ...[...groupA, ...groupB, "odd"].map((id) => ({ id, layer: 3 })),
    ...down.map((id) => ({ id, type: "logit" })),
  ];
  const profile = (id, ins, outs, scale) => [
    ...ins.map((w, k) => [up[k], id, w * scale]).filter(([, , w]) => w !== 0),
    ...outs.map((w, k) => [id, down[k], w * scale]).filter(([, , w]) => w !== 0),
  ];
  const links = [
    ...groupA.flatMap((id, k) => profile(id, [1, -0.5, 2, 0], [1, 0.5, 0], 1 + k)),
    ...groupB.flatMap((id, k) => profile(id, [0, 1, 0, 1.5], [-1, 0, 2], 0.5 + k)),
    ...profile("odd", [1, 1, -1, 0], [0, -1, 1], 1),
  ];
  const pins = [...groupA, ...groupB, "odd"];

  it("finds both groups and leaves the third node out", () => {
    const { suggest } = npGraph(nodes, links);
    const result = suggest(pins);
    expect(result.map((s) => s.members)).toEqual([groupA, groupB]);
    expect(result.map((s) => s.label)).toEqual(["Suggested group 1", "Suggested group 2"]);
    for (const s of result) expect(s.minCohesion).toBeCloseTo(1, 12);
    expect(result.flatMap((s) => s.members)).not.toContain("odd");
  });

  it("is deterministic: the same groups in the same order for any order of pins, nodes and edges", () => {
    const expected = npGraph(nodes, links).suggest(pins);
    let state = 3;
    const random = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const shuffle = (values) =>
      values
        .map((v) => [random(), v])
        .sort((x, y) => x[0] - y[0])
        .map(([, v]) => v);
    for (let trial = 0; trial < 5; trial += 1) {
      const { suggest } = npGraph(shuffle(nodes), shuffle(links));
      expect(suggest(shuffle(pins))).toEqual(expected);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Dense references written from the rules' descriptions (an n x n matrix, rows = targets), on random small graphs:
// the sparse code must agree with them wherever Python is not there to ask.

/** A random small graph: features and some error cells (a pruned graph lacks some), tokens, two logits. */
function smallRandomGraph(seed) {
  let state = seed;
  const random = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const [layers, positions] = [3, 3];
  const kind = [];
  const layer = [];
  const position = [];
  for (let l = 0; l < layers; l += 1)
    for (let p = 0; p < positions; p += 1)
      for (let f = Math.floor(random() * 3); f > 0; f -= 1) (kind.push(KIND.feature), layer.push(l), position.push(p));
  for (let l = 0; l < layers; l += 1)
    for (let p = 0; p < positions; p += 1) if (random() < 0.7) (kind.push(KIND.error), layer.push(l), position.push(p));
  for (let p = 0; p < positions; p += 1) (kind.push(KIND.token), layer.push(-1), position.push(p));
  (kind.push(KIND.logit, KIND.logit), layer.push(layers, layers), position.push(positions - 1, positions - 1));
  const n = kind.length;
  const [src, dst, weight] = [[], [], []];
  for (let t = 0; t < n; t += 1) {
    if (kind[t] !== KIND.feature && kind[t] !== KIND.logit) continue;
    for (let s = 0; s < n; s += 1) {
      if (kind[s] === KIND.logit || layer[s] >= layer[t] || position[s] > position[t] || random() < 0.4) continue;
      (src.push(s), dst.push(t), weight.push(Math.fround((random() - 0.3) * 3)));
    }
  }
  const logitProbs = kind.map((k, i) => (k === KIND.logit ? (i === n - 1 ? 0.25 : 0.5) : 0));
  return makeGraph({ kind, layer, position, logitProbs, src, dst, weight });
}

function dense(graph) {
  const n = graph.nNodes;
  const matrix = Array.from({ length: n }, () => new Float64Array(n));
  for (let e = 0; e < graph.src.length; e += 1) matrix[graph.dst[e]][graph.src[e]] = graph.weight[e];
  return matrix;
}

function denseInfluence(matrix, weights) {
  const n = matrix.length;
  const normalised = matrix.map((row) => {
    const sum = Math.max(
      row.reduce((a, v) => a + Math.abs(v), 0),
      1e-10,
    );
    return row.map((v) => Math.abs(v) / sum);
  });
  let step = new Float64Array(n);
  for (let t = 0; t < n; t += 1) for (let s = 0; s < n; s += 1) step[s] += weights[t] * normalised[t][s];
  const total = new Float64Array(n);
  while (step.some((v) => v !== 0)) {
    total.forEach((_, i) => (total[i] += step[i]));
    const next = new Float64Array(n);
    for (let t = 0; t < n; t += 1) for (let s = 0; s < n; s += 1) next[s] += step[t] * normalised[t][s];
    step = next;
  }
  return { influence: total, normalised };
}

function denseScores(graph, pins) {
  const n = graph.nNodes;
  const { kind, layer, position } = graph;
  const matrix = dense(graph);
  if (pins.length) {
    const pinned = new Set(pins);
    for (let f = 0; f < n; f += 1) {
      if (kind[f] !== KIND.feature || pinned.has(f)) continue;
      const error = [...kind.keys()].find((i) => kind[i] === KIND.error && layer[i] === layer[f] && position[i] === position[f]); // prettier-ignore
      for (let t = 0; t < n; t += 1) {
        if (error !== undefined) matrix[t][error] += matrix[t][f];
        matrix[t][f] = 0;
      }
      matrix[f].fill(0);
    }
  }
  const weights = Array.from(graph.logitProbs);
  const { influence, normalised } = denseInfluence(matrix, weights);
  const sum = (pick) => influence.reduce((a, v, i) => a + (pick(i) ? v : 0), 0);
  const tokens = sum((i) => kind[i] === KIND.token);
  const errors = sum((i) => kind[i] === KIND.error);
  let covered = 0;
  let total = 0;
  for (let t = 0; t < n; t += 1) {
    const fromError = normalised[t].reduce((a, v, s) => a + (kind[s] === KIND.error ? v : 0), 0);
    covered += (1 - fromError) * (influence[t] + weights[t]);
    total += influence[t] + weights[t];
  }
  return { replacement: tokens / (tokens + errors) || 0, completeness: covered / total || 0 };
}

describe("the sparse maths equals dense references", () => {
  it("influence and live scores on 30 random graphs with missing error cells and random pins", () => {
    for (let seed = 1; seed <= 30; seed += 1) {
      const graph = smallRandomGraph(seed);
      const expected = denseInfluence(dense(graph), Array.from(graph.logitProbs)).influence;
      const influence = nodeInfluence(graph);
      expected.forEach((v, i) => expect(Math.abs(influence[i] - v)).toBeLessThan(1e-12 * Math.max(1, v)));
      const features = [...graph.kind.keys()].filter((i) => graph.kind[i] === KIND.feature);
      for (const pins of [[], features.filter((_, k) => k % 2 === seed % 2), [graph.nNodes - 1], features]) {
        const want = denseScores(graph, pins);
        const got = subgraphScores(graph, pins);
        expect(Math.abs(got.replacement - want.replacement)).toBeLessThan(1e-12);
        expect(Math.abs(got.completeness - want.completeness)).toBeLessThan(1e-12);
      }
    }
  });

  it("pruning equals a dense transcription of Python's prune (rounds of drops) on 30 random graphs", () => {
    const fround = Math.fround;
    /** circuit-tracer's find_threshold over every entry, float32 as torch: cumsum in float64 rounded, / float32 sum */
    const findThreshold = (scores, fraction) => {
      const ordered = Float32Array.from(scores).sort().reverse();
      const total = fround(ordered.reduce((a, v) => a + v, 0));
      let running = 0;
      for (let i = 0; i < ordered.length; i += 1) {
        running += ordered[i];
        if (fround(fround(running) / total) >= fraction) return ordered[i];
      }
      return ordered[ordered.length - 1];
    };
    for (let seed = 1; seed <= 30; seed += 1) {
      const graph = smallRandomGraph(seed);
      const { kind } = graph;
      const n = graph.nNodes;
      const matrix = dense(graph);
      const weights = Array.from(graph.logitProbs);
      const { influence } = denseInfluence(matrix, weights);
      for (const [nodeThreshold, edgeThreshold] of [
        [0.8, 0.98],
        [0.6, 0.8],
        [0.95, 0.7],
        [0.5, 0.9],
      ]) {
        const nodeLimit = findThreshold(influence, nodeThreshold);
        const nodes = Uint8Array.from(influence, (v, i) => (kind[i] >= KIND.token || fround(v) >= nodeLimit ? 1 : 0));
        const pruned = matrix.map((row, t) => row.map((v, s) => (nodes[t] && nodes[s] ? v : 0)));
        const inner = denseInfluence(
          pruned,
          weights.map((w, i) => (nodes[i] ? w : 0)),
        );
        const scores = inner.normalised.map((row, t) => row.map((v) => fround(v * (inner.influence[t] + weights[t]))));
        const edgeLimit = findThreshold(
          scores.flatMap((row) => Array.from(row)),
          edgeThreshold,
        );
        const edges = scores.map((row) => row.map((v) => (v >= edgeLimit ? 1 : 0)));
        for (let changed = true; changed;) {
          // every node is tested against the same edges, then the dropped ones' edges go (Python's rounds)
          const hasOut = (i) => edges.some((row) => row[i]);
          const hasIn = (i) => edges[i].some((v) => v);
          const drop = [...nodes.keys()].filter((i) => nodes[i] && kind[i] <= KIND.error && (!hasOut(i) || (kind[i] === KIND.feature && !hasIn(i)))); // prettier-ignore
          for (const i of drop) {
            nodes[i] = 0;
            edges[i].fill(0);
            edges.forEach((row) => (row[i] = 0));
          }
          changed = drop.length > 0;
        }
        const keep = [...nodes.keys()].filter((i) => nodes[i] && (kind[i] >= KIND.token || edges[i].some((v) => v) || edges.some((row) => row[i]))); // prettier-ignore
        const keptEdges = [...graph.src.keys()].filter((e) => nodes[graph.src[e]] && nodes[graph.dst[e]] && edges[graph.dst[e]][graph.src[e]]); // prettier-ignore
        const got = pruneGraph(graph, { nodeThreshold, edgeThreshold });
        expect([seed, nodeThreshold, edgeThreshold, indices(got.nodeMask)]).toEqual([seed, nodeThreshold, edgeThreshold, keep]); // prettier-ignore
        expect(indices(got.edgeMask)).toEqual(keptEdges);
      }
    }
  });
});
