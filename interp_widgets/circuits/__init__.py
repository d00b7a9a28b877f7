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
- :func:`attribution_graph`: the graph of a prompt computed here from a :class:`TranscoderSet` (the local
  replacement model, batched backward passes, a feature cap by influence; :mod:`interp_widgets.circuits.attribution`).
- :func:`feature_intervention`: set graph features to values in the real model (attention frozen or not) or in
  the constrained replacement model (the graph's direct effects); new top logits and greedy continuations.
- :func:`qk_attribution`: one head's pre-softmax score at (query, key) as a table over pairs of graph nodes (the
  attention a graph freezes, explained).
- :func:`load_graph`: a graph JSON (circuit-tracer or Neuronpedia, pins and supernodes included) or a saved graph.
- :class:`TranscoderSet` (:mod:`interp_widgets.circuits.transcoders`): per-layer transcoders trained on your own
  model from one forward pass over a corpus (resumable), their :class:`TranscoderReport` on held-out texts, our
  safetensors file, circuit-tracer 0.5.0's per-layer files, and EleutherAI sparsify folders
  (:meth:`TranscoderSet.from_sparsify`).
- :class:`CrossLayerTranscoderSet` (:mod:`interp_widgets.circuits.cross_layer`): a cross-layer transcoder (a feature
  of layer ``l`` writes to every MLP output from ``l`` on) loaded from circuit-tracer's CLT directory
  (:meth:`CrossLayerTranscoderSet.from_circuit_tracer`) or raw weights, our safetensors file; ``attribution_graph``,
  ``feature_intervention`` and ``qk_attribution`` take it in place of a ``TranscoderSet``.
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
from interp_widgets.circuits.attribution import attribution_graph
from interp_widgets.circuits.cross_layer import CrossLayerTranscoderSet
from interp_widgets.circuits.feature_intervention import FeatureInterventionResult, feature_intervention
from interp_widgets.circuits.qk import QKAttribution, qk_attribution
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
    "attribution_graph",
    "CrossLayerTranscoderSet",
    "FeatureInterventionResult",
    "feature_intervention",
    "QKAttribution",
    "qk_attribution",
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
