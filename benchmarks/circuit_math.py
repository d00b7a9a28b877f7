"""The circuit view's in-browser maths (js/src/views/circuit/graph_math) on a graph of 5,000 nodes and 50,000 edges
(30 layers x 24 positions, a seeded generator below), in Node: the first pruning (the full graph's influence
included), a node and an edge threshold slider move, the live scores of a pinned subgraph and supernode suggestions
among 100 pins. Each figure is the best of 7 runs.

Prints ``bench:`` lines (benchmarks/run.py collects them). ``--small`` runs a small graph (a check that the script
works, not a figure).

Example:
    $ python benchmarks/circuit_math.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

MODULE = Path(__file__).resolve().parent.parent / "js" / "src" / "views" / "circuit" / "graph_math" / "index.js"

SCRIPT = r"""
const { makeGraph, pruneGraph, subgraphScores, suggestSupernodes, KIND } = await import(process.argv[1]);
const { nNodes, nEdges } = JSON.parse(process.argv[2]);
let state = 12345;
const random = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
const [layers, positions, logits] = [30, 24, 10];
const features = nNodes - layers * positions - positions - logits;
const kind = [], layer = [], position = [];
for (let i = 0; i < features; i += 1) {
  kind.push(KIND.feature); layer.push(Math.floor((i * layers) / features)); position.push(Math.floor(random() * positions));
}
for (let i = 0; i < layers * positions; i += 1) {
  kind.push(KIND.error); layer.push(Math.floor(i / positions)); position.push(i % positions);
}
for (let p = 0; p < positions; p += 1) { kind.push(KIND.token); layer.push(-1); position.push(p); }
for (let k = 0; k < logits; k += 1) { kind.push(KIND.logit); layer.push(layers); position.push(positions - 1); }
const n = kind.length;
const seen = new Set();
const src = [], dst = [], weight = [];
while (src.length < nEdges) {
  const t = Math.floor(random() * n), s = Math.floor(random() * n);
  if (!(kind[t] === KIND.feature || kind[t] === KIND.logit) || kind[s] === KIND.logit || layer[s] >= layer[t]) continue;
  if (position[s] > position[t] || seen.has(t * n + s)) continue;
  seen.add(t * n + s); src.push(s); dst.push(t); weight.push(Math.fround((random() - 0.3) * 4));
}
const logitProbs = kind.map((k) => (k === KIND.logit ? 0.08 : 0));
const graph = makeGraph({ kind, layer, position, logitProbs, src, dst, weight });
const time = (f) => { const t0 = performance.now(); f(); return performance.now() - t0; };
const best = (f) => { let m = Infinity; for (let r = 0; r < 7; r += 1) m = Math.min(m, time(() => f(r))); return m; };
const first = time(() => pruneGraph(graph));
const pins = Array.from({ length: 100 }, (_, i) => (i * 37) % features);
console.log(JSON.stringify({
  n: graph.nNodes, edges: graph.src.length, kept: pruneGraph(graph).nNodes,
  first,
  node_slider: best((r) => pruneGraph(graph, { nodeThreshold: r % 2 ? 0.8 : 0.85 })),
  edge_slider: best((r) => pruneGraph(graph, { nodeThreshold: 0.8, edgeThreshold: r % 2 ? 0.98 : 0.97 })),
  scores_100_pins: best(() => subgraphScores(graph, pins)),
  scores_no_pins: best(() => subgraphScores(graph, [])),
  suggest_100_pins: best(() => suggestSupernodes(graph, pins)),
}));
"""


def measure(n_nodes: int, n_edges: int) -> dict:
    """Run the maths in Node on a seeded graph and return the times (ms) and sizes."""
    node = shutil.which("node")
    if node is None:
        raise SystemExit("benchmarks/circuit_math.py needs Node (20.19+) on the PATH")
    args = json.dumps({"nNodes": n_nodes, "nEdges": n_edges})
    out = subprocess.run(
        [node, "--input-type=module", "-e", SCRIPT, MODULE.as_uri(), args],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    small = "--small" in sys.argv[1:]
    result = measure(1000, 5000) if small else measure(5000, 50000)
    size = f"{result['n']} nodes, {result['edges']} edges; {result['kept']} kept at 0.8 / 0.98"
    print(f"bench: circuit_first_prune_ms = {result['first']:.1f} (goal <= 100; {size}; influence included)")
    print(f"bench: circuit_node_slider_ms = {result['node_slider']:.1f} (goal < 50; {size})")
    print(f"bench: circuit_edge_slider_ms = {result['edge_slider']:.1f} (goal < 50; {size})")
    print(f"bench: circuit_live_scores_100_pins_ms = {result['scores_100_pins']:.1f} (goal < 50; {size})")
    print(f"bench: circuit_live_scores_no_pins_ms = {result['scores_no_pins']:.1f} (goal < 50; {size})")
    print(f"bench: circuit_suggestions_100_pins_ms = {result['suggest_100_pins']:.1f} (goal < 100; {size})")


if __name__ == "__main__":
    main()
