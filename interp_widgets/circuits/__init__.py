"""Attribution graphs (circuit-tracer's method): the graph as data, pruning and scores exactly as circuit-tracer
computes them, and circuit-tracer's / Neuronpedia's graph files in and out.

- :class:`AttributionGraph`: nodes (features, errors, tokens, logits; ids in :mod:`interp_widgets.circuits.graph`),
  the dense direct-effect adjacency, ``prune()``, ``scores()`` (also of a pinned subgraph, as Neuronpedia computes
  it), ``to_dataframe()``, ``save()`` / ``load()`` (safetensors), ``to_json()`` (circuit-tracer's / Neuronpedia's
  graph JSON and feature detail files). It is made of parts (:class:`GraphInput`, :class:`GraphNodes`, the
  logits' ``Targets``, the adjacency, :class:`GraphProvenance`) whose values read as flat attributes too
  (:data:`FLAT_ATTRIBUTES`).
- :func:`circuit_view`: the circuit view of a graph or of a graph JSON (Neuronpedia files with lorsa nodes open
  view-only); ``AttributionGraph.widget()`` and ``.subgraph()`` are the graph's own.
- :func:`load_graph`: a graph JSON (circuit-tracer or Neuronpedia, pins and supernodes included) or a saved graph.
- :class:`TranscoderSet` (:mod:`interp_widgets.circuits.transcoders`): per-layer transcoders trained on your own
  model from one forward pass over a corpus (resumable), their :class:`TranscoderReport` on held-out texts, our
  safetensors file and circuit-tracer 0.5.0's per-layer files.
- :class:`FeatureExplanations` (:mod:`interp_widgets.circuits.features`, from ``TranscoderSet.explain``): every
  feature's top activating contexts over a corpus, density and histogram, decoder vocabulary projection and label,
  from one forward pass and cached; ``graph.with_explanations(...)`` puts them on a graph's feature nodes (the
  detail files and ``clerp`` labels of ``to_json``, the circuit view's details).

Example:
    >>> from interp_widgets.circuits import example_graph
    >>> example_graph().prune()
    AttributionGraph(1 features, 0 errors, 2 tokens, 1 logits; pruned at 0.8)
"""

from interp_widgets.circuits._open import circuit_view
from interp_widgets.circuits.features import ExplanationRun, FeatureExplanations, LayerFeatures
from interp_widgets.circuits.graph import (
    FLAT_ATTRIBUTES,
    AttributionGraph,
    FeatureCap,
    GraphExplanations,
    GraphInput,
    GraphNodes,
    GraphProvenance,
    GraphScores,
    Pruning,
    cantor_pair,
    example_graph,
    load_graph,
)
from interp_widgets.circuits.transcoders import (
    TranscoderReport,
    TranscoderSet,
    collect_transcoder_pairs,
    transcoder_points,
)

__all__ = [
    "ExplanationRun",
    "FeatureExplanations",
    "LayerFeatures",
    "TranscoderReport",
    "TranscoderSet",
    "collect_transcoder_pairs",
    "transcoder_points",
    "FLAT_ATTRIBUTES",
    "AttributionGraph",
    "FeatureCap",
    "GraphExplanations",
    "GraphInput",
    "GraphNodes",
    "GraphProvenance",
    "GraphScores",
    "Pruning",
    "cantor_pair",
    "circuit_view",
    "example_graph",
    "load_graph",
]
