"""The attribution graph as data: its nodes, its dense adjacency, pruning and scores as circuit-tracer computes them.

**Nodes**, in circuit-tracer 0.5.0's order (the order of the adjacency's rows and columns):

1. features, one per active transcoder feature kept in the graph, sorted by ``(layer, pos, feature)``;
2. error nodes (the transcoder's reconstruction error at ``(layer, pos)``), sorted by ``(layer, pos)``: every
   ``layer x pos`` in a full graph, the kept ones in a pruned graph;
3. token (embedding) nodes, one per prompt position;
4. logit nodes, in target order (circuit-tracer's salient targets: by descending probability).

The **adjacency** is dense, rows = targets and columns = sources: ``adjacency[t, s]`` is the direct effect of node
``s`` on node ``t`` (on a feature's pre-activation, or on a demeaned logit). Only feature and logit rows are non-zero.

**Node ids** are the node ids of circuit-tracer's graph JSON, which the Neuronpedia front end reads
(``L`` layers, ``T`` prompt positions):

=========  ==============================  ======================================================================
node       id                              example
=========  ==============================  ======================================================================
feature    ``{layer}_{feature}_{pos}``     ``3_5102_7``: feature 5102 of layer 3's transcoder at position 7
error      ``{layer}_-1_{pos}``            ``3_-1_7`` (circuit-tracer 0.5.0 writes ``0_{layer}_{pos}``, which
                                           collides with feature ``layer`` of layer 0; both forms are read)
token      ``E_{token_id}_{pos}``          ``E_504_0``: token id 504 at position 0
logit      ``{L+1}_{token_id}_{T-1}``      ``31_2395_6`` for a 30-layer model and a 7-token prompt
=========  ==============================  ======================================================================

A logit target that is no vocabulary token (circuit-tracer's ``CustomTarget``) has a virtual id ``>= vocab size``.
Feature indices are int64: the JSON's ``feature`` field is the Cantor pair of (layer, feature), which passes 2**31
for wide transcoders (layer 29, feature 73,727: about 2.7e9).

Pruning and the scores are computed in float32 with the same operations as circuit-tracer's ``prune_graph`` and
``compute_graph_scores``, so the kept nodes and edges are the same; the scores of a subgraph of pinned nodes follow
Neuronpedia's ``score.worker.ts`` (float64, like JavaScript numbers).

Example:
    >>> graph = example_graph()
    >>> graph.node_ids
    ['0_7_1', '0_-1_0', '0_-1_1', 'E_10_0', 'E_11_1', '2_12_1']
    >>> round(graph.scores().replacement, 3), graph.prune().node_ids
    (1.0, ['0_7_1', 'E_10_0', 'E_11_1', '2_12_1'])
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from interp_widgets._files import output_path, read_saved
from interp_widgets._flat import group_flat, install_flat_properties, replace_flat
from interp_widgets.circuits import _graph_json
from interp_widgets.circuits._graph_json import cantor_pair
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout, joined_layout
from interp_widgets.validation import check_fraction

__all__ = [
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
    "example_graph",
    "load_graph",
]

_FORMAT = "AttributionGraph"
_VERSION = 1
_KINDS = ("feature", "error", "token", "logit")


@dataclass(frozen=True)
class Pruning:
    """How a pruned graph was pruned: the thresholds and each kept node's cumulative influence fraction (the JSON's
    ``influence``: the share of all influence held by the nodes at least as influential; smaller = more important).
    ``edge_threshold`` is None when a loaded file does not say it; ``influence`` has NaN where a file had none.

    Example:
        >>> example_graph().prune().pruning.node_threshold
        0.8
    """

    node_threshold: float | None
    edge_threshold: float | None
    influence: np.ndarray


@dataclass(frozen=True)
class FeatureCap:
    """What a ``max_feature_nodes`` cap left out: ``n_active`` active features, of which the graph kept the rows
    and columns of only some, and ``lost_influence``, the share of the logits' influence that went to the dropped
    features (None where the graph's maker did not measure it: circuit-tracer drops their columns unmeasured).

    Example:
        >>> FeatureCap(n_active=120, lost_influence=None).n_active
        120
    """

    n_active: int
    lost_influence: float | None = None


@dataclass(frozen=True)
class GraphScores:
    """The replacement and completeness scores of a graph (circuit-tracer's ``compute_graph_scores``; Neuronpedia's
    live scores for a pinned subgraph), with ``n_dropped_features`` and ``lost_influence`` from a feature cap.

    Example:
        >>> scores = example_graph().scores()
        >>> round(scores.completeness, 3), scores.n_dropped_features
        (1.0, 0)
    """

    replacement: float
    completeness: float
    n_dropped_features: int = 0
    lost_influence: float | None = None


def _as_int_table(name: str, values, width: int) -> np.ndarray:
    table = np.asarray(values if values is not None else np.zeros((0, width)), dtype=np.int64)
    if table.size == 0:
        table = table.reshape(0, width)
    if table.ndim != 2 or table.shape[1] != width:
        raise ValueError(f"{name} must be an integer array of shape (n, {width}), got shape {table.shape}")
    return table


def _sorted_unique(name: str, table: np.ndarray, columns: str) -> None:
    if len(table) > 1:
        keys = np.lexsort(table.T[::-1])
        if not np.array_equal(keys, np.arange(len(table))) or (np.diff(table, axis=0) == 0).all(axis=1).any():
            raise ValueError(
                f"{name} must be sorted by {columns} with no repeats (circuit-tracer's node order); "
                f"sort them (and the adjacency with them) first"
            )


@dataclass(frozen=True, eq=False)
class GraphInput:
    """The prompt of a graph: its ``text`` as given, the ``layout`` of its tokens (a
    :class:`~interp_widgets.text_units.TokenLayout` of the tokens decoded one by one, as circuit-tracer's JSON holds
    them: its text is those tokens joined, which may differ from ``text`` by a BOS token or spaces) and their
    ``token_ids``. :meth:`of` builds one from the text, the decoded tokens and the ids.

    Example:
        >>> prompt = GraphInput.of("ab", ["a", "b"], [10, 11])
        >>> prompt.layout.tokens, prompt.token_ids.tolist(), len(prompt)
        (['a', 'b'], [10, 11], 2)
    """

    text: str
    layout: TokenLayout
    token_ids: np.ndarray

    def __post_init__(self) -> None:
        if not isinstance(self.layout, TokenLayout):
            raise TypeError(
                f"layout must be a TokenLayout (interp_widgets.text_units), got {type(self.layout).__name__}; "
                f"GraphInput.of(text, tokens, token_ids) builds one from the decoded tokens"
            )
        token_ids = np.asarray(self.token_ids, dtype=np.int64).reshape(-1)
        if len(self.layout) != len(token_ids):
            raise ValueError(f"prompt_tokens has {len(self.layout)} entries for {len(token_ids)} token ids")
        object.__setattr__(self, "text", str(self.text))
        object.__setattr__(self, "token_ids", token_ids)

    @classmethod
    def of(cls, text: str, tokens: Iterable[str], token_ids) -> GraphInput:
        """The input of a prompt ``text`` whose tokens, decoded one by one, are ``tokens`` (the layout's text is
        them joined: :func:`~interp_widgets.text_units.joined_layout`).

        Example:
            >>> GraphInput.of("The cat", ["<s>", "The", " cat"], [1, 450, 6635]).layout.text
            '<s>The cat'
        """
        return cls(text, joined_layout(tokens), token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, eq=False)
class GraphNodes:
    """The transcoder nodes of a graph: the ``features`` (int64 ``(n_features, 3)``: ``(layer, pos, feature)``,
    sorted) with their ``activations``, the ``errors`` (int64 ``(n_errors, 2)``: ``(layer, pos)``, sorted; None:
    every layer and position of the prompt, filled in by the graph, which knows the positions), the model's
    ``n_layers`` (the logit nodes' layer is ``n_layers + 1`` in ids) and the transcoder set's name ``scan`` (the
    JSON's ``scan``).

    Example:
        >>> nodes = GraphNodes(features=[[0, 1, 7]], activations=[2.0], n_layers=1, scan="toy")
        >>> nodes.features.dtype, nodes.errors, len(nodes)
        (dtype('int64'), None, 1)
    """

    features: np.ndarray
    activations: np.ndarray
    n_layers: int
    errors: np.ndarray | None = None
    scan: str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        n_layers = int(self.n_layers)
        features = _as_int_table("features", self.features, 3)
        tables = [("features", features)]
        if self.errors is not None:
            tables.append(("errors", _as_int_table("errors", self.errors, 2)))
        for name, table in tables:
            if len(table) and not ((table[:, 0] >= 0).all() and (table[:, 0] < n_layers).all()):
                raise ValueError(f"{name} has a layer outside 0..{n_layers - 1} (n_layers={n_layers})")
        if len(features) and (features[:, 2] < 0).any():
            raise ValueError("features has a negative feature index")
        _sorted_unique("features", features, "(layer, pos, feature)")
        if self.errors is not None:
            _sorted_unique("errors", tables[1][1], "(layer, pos)")
            put(self, "errors", tables[1][1])
        activations = np.asarray(self.activations, dtype=np.float32).reshape(-1)
        if len(activations) != len(features):
            raise ValueError(f"activations has {len(activations)} entries for {len(features)} features")
        put(self, "features", features)
        put(self, "activations", activations)
        put(self, "n_layers", n_layers)

    def __len__(self) -> int:
        return len(self.features)


@dataclass(frozen=True, eq=False)
class GraphProvenance:
    """Where a graph has been: how it was pruned (``pruning``, None: unpruned), what a ``max_feature_nodes`` cap
    left out (``cap``, None: no cap), the ``view`` state a graph JSON saved (``qParams``: ``pinnedIds``,
    ``supernodes``, ...) and the ``settings`` of the computation that made it (JSON values:
    :func:`~interp_widgets.circuits.attribution_graph` records ``bos_added``, ``batch_size``, ...).

    Example:
        >>> GraphProvenance().pruning, GraphProvenance(cap=FeatureCap(120)).cap.n_active
        (None, 120)
    """

    pruning: Pruning | None = None
    cap: FeatureCap | None = None
    view: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class GraphExplanations:
    """What a graph's features mean: ``details`` maps ``(layer, feature)`` to a feature detail dict, the fields of
    circuit-tracer's ``features/{scan}/{index}.json`` files (``examples_quantiles``, ``top_logits``,
    ``bottom_logits``, ``act_min``, ``act_max``, ``quantile_values``, ``histogram``, ``activation_frequency``) plus
    ``label``; ``source`` says where the labels came from. :meth:`AttributionGraph.with_explanations` makes one from
    a transcoder set's :class:`~interp_widgets.circuits.features.FeatureExplanations`.

    Example:
        >>> part = GraphExplanations({(0, 7): {"label": "says a", "top_logits": ["a"]}}, source="mine")
        >>> part.label(0, 7), part.label(0, 8), (0, 7) in part
        ('says a', '', True)
    """

    details: dict
    source: str = ""

    def __post_init__(self) -> None:
        details = {}
        for key, detail in dict(self.details).items():
            layer, feature = (int(x) for x in key)
            if not isinstance(detail, dict):
                raise TypeError(
                    f"the detail of feature {feature} of layer {layer} must be a dict, got {type(detail).__name__}"
                )
            details[(layer, feature)] = detail
        object.__setattr__(self, "details", details)

    def __contains__(self, key) -> bool:
        return tuple(int(x) for x in key) in self.details

    def label(self, layer: int, feature: int) -> str:
        """The label of a feature, '' where there is none.

        Example:
            >>> GraphExplanations({(1, 2): {"label": "x"}}).label(1, 2)
            'x'
        """
        return str((self.details.get((int(layer), int(feature))) or {}).get("label") or "")


#: Each flat attribute of an :class:`AttributionGraph` (the names of its fields before it was made of parts, and of
#: its saved files) as ``(part, attribute of the part)``: ``graph.features`` is ``graph.nodes.features``. The one
#: table behind the read-only properties, :meth:`AttributionGraph.from_flat` and :meth:`AttributionGraph.replace`.
#: ``adjacency`` and ``logits`` are fields of the graph itself.
FLAT_ATTRIBUTES: dict[str, tuple[str, str]] = {
    "prompt": ("input", "text"), "prompt_tokens": ("input", "layout.tokens"), "token_ids": ("input", "token_ids"),
    **{name: ("nodes", name) for name in ("features", "activations", "errors", "n_layers", "scan")},
    **{name: ("provenance", name) for name in ("pruning", "cap", "view")},
}  # fmt: skip
_REQUIRED = ("prompt", "prompt_tokens", "token_ids", "features", "activations", "n_layers")
_PARTS = {"input": GraphInput, "nodes": GraphNodes, "logits": Targets, "provenance": GraphProvenance}


@dataclass(frozen=True, eq=False)
class AttributionGraph:
    """An attribution graph: nodes (module docstring: their order and ids), the dense direct-effect adjacency
    (rows = targets, columns = sources), feature activations, the logit targets with their probabilities and the
    prompt. A pruned graph (from :meth:`prune` or a graph JSON) also has ``pruning``.

    A graph is made of a few parts: the ``input`` (:class:`GraphInput`: the prompt text, its tokens' layout and
    their ids), the transcoder ``nodes`` (:class:`GraphNodes`: features, their activations, error nodes, the layer
    count, the transcoder set), the ``logits`` (a :class:`~interp_widgets.targets.Targets`: token strings, token ids
    (virtual ids for custom targets), probabilities), the ``adjacency`` (float32 ``(n, n)``,
    ``n = features + errors + tokens + logits``), the ``provenance`` (:class:`GraphProvenance`: pruning, a
    feature cap, a saved view) and, optionally, the features' ``explanations`` (:class:`GraphExplanations`, from
    :meth:`with_explanations`). The parts' values read as flat attributes too (``prompt``, ``prompt_tokens``,
    ``token_ids``, ``features``, ``activations``, ``errors``, ``n_layers``, ``scan``, ``pruning``, ``cap``,
    ``view``); see :data:`FLAT_ATTRIBUTES`. :meth:`from_flat` builds a graph from those names.

    Example:
        >>> A = np.zeros((6, 6), np.float32); A[0, 3], A[5, 0], A[5, 4] = 2.0, 1.5, -0.5
        >>> graph = AttributionGraph(input=GraphInput.of("ab", ["a", "b"], [10, 11]),
        ...     nodes=GraphNodes(features=[[0, 1, 7]], activations=[2.0], n_layers=1),
        ...     logits=Targets(["c"], ids=[12], probs=[0.9]), adjacency=A)
        >>> graph, graph.prompt_tokens, graph.errors.tolist()
        (AttributionGraph(1 features, 2 errors, 2 tokens, 1 logits; unpruned), ['a', 'b'], [[0, 0], [0, 1]])
    """

    input: GraphInput
    nodes: GraphNodes
    logits: Targets
    adjacency: np.ndarray
    provenance: GraphProvenance = field(default_factory=GraphProvenance)
    explanations: GraphExplanations | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.explanations is not None and not isinstance(self.explanations, GraphExplanations):
            raise TypeError(
                f"explanations must be a GraphExplanations, got {type(self.explanations).__name__}; "
                "graph.with_explanations(transcoders.explain(...)) makes one"
            )
        for name, kind in _PARTS.items():
            if not isinstance(getattr(self, name), kind):
                raise TypeError(
                    f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}; "
                    f"AttributionGraph.from_flat(adjacency, features=..., ...) builds a graph from flat values"
                )
        n_pos = len(self.input)
        nodes = self.nodes
        if nodes.errors is None:
            layer, pos = np.divmod(np.arange(nodes.n_layers * n_pos), max(n_pos, 1))
            nodes = replace(nodes, errors=np.stack([layer, pos], axis=1))
            put(self, "nodes", nodes)
        for name, table in (("features", nodes.features), ("errors", nodes.errors)):
            if len(table) and not ((table[:, 1] >= 0).all() and (table[:, 1] < n_pos).all()):
                raise ValueError(f"{name} has a position outside 0..{n_pos - 1} ({n_pos} prompt tokens)")
        if len(self.logits) == 0:
            raise ValueError("logits must be a Targets with at least one logit target (labels, ids, probs)")
        if not np.isfinite(self.logits.probs).all():
            raise ValueError("every logit target needs a probability (logits.probs has NaN)")
        n = len(nodes.features) + len(nodes.errors) + n_pos + len(self.logits)
        adjacency = np.asarray(self.adjacency, dtype=np.float32)
        if adjacency.shape != (n, n):
            raise ValueError(
                f"adjacency must be ({n}, {n}) for {len(nodes.features)} features, {len(nodes.errors)} errors, "
                f"{n_pos} tokens and {len(self.logits)} logits, got {adjacency.shape}"
            )
        put(self, "adjacency", adjacency)
        pruning = self.provenance.pruning
        if pruning is not None and len(pruning.influence) != n:
            raise ValueError(f"pruning.influence has {len(pruning.influence)} entries for {n} nodes")
        ids = self.node_ids
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            repeated = sorted({i for i in ids if i in seen or seen.add(i)})
            raise ValueError(
                f"colliding node ids {repeated[:5]}: every node needs its own id (two logit targets "
                f"with the same token id?); give each logit target its own id"
            )

    @classmethod
    def from_flat(cls, adjacency: np.ndarray, **values) -> AttributionGraph:
        """A graph from flat values: the ``adjacency``, the ``logits`` (a :class:`~interp_widgets.targets.Targets`)
        and the names of :data:`FLAT_ATTRIBUTES` (``prompt``, ``prompt_tokens``, ``token_ids``, ``features``,
        ``activations`` and ``n_layers`` are required; ``errors``, ``scan``, ``pruning``, ``cap`` and ``view``
        optional). The layout of the prompt tokens is them joined (:meth:`GraphInput.of`).

        Raises ``TypeError`` for a missing or unknown name.

        Example:
            >>> A = np.zeros((6, 6), np.float32); A[0, 3], A[5, 0], A[5, 4] = 2.0, 1.5, -0.5
            >>> AttributionGraph.from_flat(A, features=[[0, 1, 7]], activations=[2.0], n_layers=1, prompt="ab",
            ...     prompt_tokens=["a", "b"], token_ids=[10, 11], logits=Targets(["c"], ids=[12], probs=[0.9]))
            AttributionGraph(1 features, 2 errors, 2 tokens, 1 logits; unpruned)
            >>> flat = {name: getattr(example_graph(), name) for name in FLAT_ATTRIBUTES}
            >>> AttributionGraph.from_flat(example_graph().adjacency, logits=example_graph().logits, **flat).node_ids
            ['0_7_1', '0_-1_0', '0_-1_1', 'E_10_0', 'E_11_1', '2_12_1']
        """
        grouped = group_flat(FLAT_ATTRIBUTES, values, what="attribution graph", extra=("logits",))
        missing = [name for name in (*_REQUIRED, "logits") if name not in values]
        if missing:
            raise TypeError(f"AttributionGraph.from_flat needs {missing}; {_REQUIRED} and logits are required")
        prompt = grouped["input"]
        return cls(
            input=GraphInput.of(prompt["text"], prompt["layout.tokens"], prompt["token_ids"]),
            nodes=GraphNodes(**grouped["nodes"]),
            logits=values["logits"],
            adjacency=adjacency,
            provenance=GraphProvenance(**grouped.get("provenance", {})),
        )

    def replace(self, **changes) -> AttributionGraph:
        """A copy with some values changed, by part (``nodes=``, ``adjacency=``) or by flat name (``scan=``,
        ``features=``); new ``prompt_tokens`` get a new joined layout (:meth:`GraphInput.of`).

        Example:
            >>> graph = example_graph()
            >>> graph.replace(scan="other").scan, graph.scan, graph.replace(prompt_tokens=["x", "y"]).input.layout.text
            ('other', 'toy', 'xy')
        """
        if "prompt_tokens" in changes:
            if "input" in changes:
                raise TypeError("pass input= or its values by name (prompt, prompt_tokens, token_ids), not both")
            changes["input"] = GraphInput.of(
                changes.pop("prompt", self.input.text),
                changes.pop("prompt_tokens"),
                changes.pop("token_ids", self.input.token_ids),
            )
        return replace_flat(self, FLAT_ATTRIBUTES, changes, what="attribution graph")

    def with_explanations(self, explanations, *, labeller=None, progress: bool = True) -> AttributionGraph:
        """A copy whose feature nodes carry their explanations (:class:`GraphExplanations`): each feature's top
        activating contexts, vocabulary projection, histogram and label, from a transcoder set's
        :class:`~interp_widgets.circuits.features.FeatureExplanations` (``transcoders.explain(...)``) or a mapping
        ``{(layer, feature): detail}``. Only the graph's own features are kept. :meth:`to_json` writes them as the
        feature detail files and the labels as the nodes' ``clerp``; :meth:`save` keeps them; the circuit view shows
        them.

        ``labeller`` (e.g. :class:`~interp_widgets.concepts.LMLabeler`) labels exactly the graph's features first
        (and keeps the labels in ``explanations`` too): far fewer than the set's.

        Raises ``KeyError`` for a feature the explanations do not cover (name the layer when explaining).

        Example:
            >>> graph = example_graph().with_explanations({(0, 7): {"label": "says a", "top_logits": ["c"]}})
            >>> graph.feature_labels, graph.explanations.details[(0, 7)]["top_logits"]
            (['says a'], ['c'])
        """
        keys = sorted({(layer, feature) for layer, _, feature in self.features.tolist()})
        if hasattr(explanations, "detail"):
            if labeller is not None:
                explanations.relabel(labeller, features=keys, progress=progress)
            details = {key: explanations.detail(*key, scan=str(self.scan or "")) for key in keys}
            source = explanations.run.label_source
        else:
            if labeller is not None:
                raise TypeError("labeller= needs FeatureExplanations (TranscoderSet.explain), not a mapping of details")
            missing = [key for key in keys if key not in explanations]
            if missing:
                raise KeyError(f"no detail for features {missing[:5]} (layer, feature) of this graph")
            details = {key: dict(explanations[key]) for key in keys}
            source = "given"
        return replace(self, explanations=GraphExplanations(details, source))

    def _detail(self, layer: int, feature: int) -> dict:
        """A feature's detail file: its explanation (corpus contexts first), then this prompt as one more example."""
        detail = _graph_json.feature_detail(self, layer, feature, str(self.scan or ""))
        if self.explanations is None or (layer, feature) not in self.explanations:
            return detail
        explained = self.explanations.details[(int(layer), int(feature))]
        return {
            **detail,
            **explained,
            "transcoder_id": detail["transcoder_id"],
            "index": detail["index"],
            "examples_quantiles": [*explained.get("examples_quantiles", []), *detail["examples_quantiles"]],
        }

    @property
    def feature_labels(self) -> list[str]:
        """The label of each feature node, in node order ('' without explanations).

        Example:
            >>> example_graph().feature_labels
            ['']
        """
        if self.explanations is None:
            return [""] * len(self.features)
        return [self.explanations.label(layer, feature) for layer, _, feature in self.features.tolist()]

    # ------------------------------------------------------------------ nodes
    @property
    def n_nodes(self) -> int:
        """The number of nodes (the adjacency's side).

        Example:
            >>> example_graph().n_nodes
            6
        """
        return len(self.adjacency)

    def _block(self, kind: str) -> slice:
        sizes = [len(self.features), len(self.errors), len(self.token_ids), len(self.logits)]
        i = _KINDS.index(kind)
        start = sum(sizes[:i])
        return slice(start, start + sizes[i])

    @property
    def node_kinds(self) -> list[str]:
        """Each node's kind: ``feature``, ``error``, ``token`` or ``logit``.

        Example:
            >>> example_graph().node_kinds
            ['feature', 'error', 'error', 'token', 'token', 'logit']
        """
        return [kind for kind in _KINDS for _ in range(self._block(kind).stop - self._block(kind).start)]

    @property
    def node_ids(self) -> list[str]:
        """Every node's id, in node order (module docstring: the scheme; errors in the ``{layer}_-1_{pos}`` form).

        Example:
            >>> example_graph().node_ids[1]
            '0_-1_0'
        """
        return self._ids(legacy_errors=False)

    def _ids(self, *, legacy_errors: bool) -> list[str]:
        last = len(self.token_ids) - 1
        errors = [f"0_{l}_{p}" if legacy_errors else f"{l}_-1_{p}" for l, p in self.errors.tolist()]
        return (
            [f"{l}_{f}_{p}" for l, p, f in self.features.tolist()]
            + errors
            + [f"E_{t}_{p}" for p, t in enumerate(self.token_ids.tolist())]
            + [f"{self.n_layers + 1}_{v}_{last}" for v in self.logits.ids.tolist()]
        )

    def node_index(self, node_id: str) -> int:
        """The row/column of a node id. An error id may use either form (``{layer}_-1_{pos}`` or circuit-tracer
        0.5.0's ``0_{layer}_{pos}``); the old form is refused where it also names a feature of the graph.

        Example:
            >>> graph = example_graph()
            >>> graph.node_index("0_-1_1"), graph.node_index("0_0_1"), graph.node_index("E_11_1")
            (2, 2, 4)
        """
        return self._index_map().resolve(node_id)

    def _index_map(self) -> "_NodeIds":
        return _NodeIds(self.node_ids, self._ids(legacy_errors=True), self._block("error"))

    # ------------------------------------------------------------------ pruning and scores
    def _logit_weights(self, dtype) -> torch.Tensor:
        weights = torch.zeros(self.n_nodes, dtype=dtype)
        weights[self._block("logit")] = torch.as_tensor(self.logits.probs.astype(np.float32)).to(dtype)
        return weights

    def _node_influence(self) -> np.ndarray:
        """Each node's logit influence plus its logit weight (the circuit view's node sizes)."""
        adjacency = torch.as_tensor(self.adjacency)
        weights = self._logit_weights(adjacency.dtype)
        return (_influence(_row_normalised(adjacency), weights) + weights).numpy()

    def prune(self, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> "AttributionGraph":
        """The pruned graph that circuit-tracer 0.5.0's ``prune_graph`` and ``create_graph_files`` keep: nodes
        holding ``node_threshold`` of the logit influence (tokens and logits always), edges holding
        ``edge_threshold`` of the edge influence, then, repeatedly, no feature without a kept incoming and outgoing
        edge and no error without a kept outgoing edge; last, no node without a kept edge except tokens and logits.
        The pruned adjacency keeps the weights of the kept edges only; ``pruning.influence`` is each kept node's
        cumulative influence fraction.

        Raises ``ValueError`` for a threshold outside (0, 1].

        Example:
            >>> pruned = example_graph().prune(node_threshold=0.9)
            >>> pruned.node_ids, [round(float(x), 3) for x in pruned.pruning.influence]
            (['0_7_1', 'E_10_0', 'E_11_1', '2_12_1'], [0.429, 0.857, 1.0, 1.0])
        """
        hint = "circuit-tracer's defaults are node_threshold=0.8, edge_threshold=0.98"
        node_threshold = check_fraction("node_threshold", node_threshold, hint=hint)
        edge_threshold = check_fraction("edge_threshold", edge_threshold, hint=hint)
        node_mask, edge_mask, cumulative = _prune_masks(self, node_threshold, edge_threshold)
        edge_mask &= node_mask[:, None] & node_mask[None, :]
        always = np.zeros(self.n_nodes, bool)
        always[self._block("token").start :] = True
        keep = node_mask & (edge_mask.any(0) | edge_mask.any(1) | always)
        adjacency = np.where(edge_mask, self.adjacency, np.float32(0))[np.ix_(keep, keep)]
        return self._kept(keep, adjacency, pruning=Pruning(node_threshold, edge_threshold, cumulative[keep]))

    def _kept(self, keep: np.ndarray, adjacency: np.ndarray, **changes) -> AttributionGraph:
        """The graph of the nodes of the mask ``keep``: ``adjacency`` (already cut to them), their features,
        activations and error nodes, and ``changes``."""
        kinds = np.asarray(self.node_kinds)
        feature_keep, error_keep = keep[kinds == "feature"], keep[kinds == "error"]
        return self.replace(
            adjacency=adjacency,
            features=self.features[feature_keep],
            activations=self.activations[feature_keep],
            errors=self.errors[error_keep],
            **changes,
        )

    def total_effects(self) -> np.ndarray:
        """Each node's total effect on each logit target, (n_logits, n_nodes): its direct edge plus every path
        through features. A feature passes its input on linearly (an active ReLU, TopK or JumpReLU feature's
        activation moves with its pre-activation) and its outgoing edges scale with its activation, so the edges of
        feature f per unit of activation are ``A[:, f] / a_f``; the totals solve ``T = A + W T`` over the feature
        rows (the graph has no cycles). Zeroing node s moves target t by about ``−T[t, s]`` with attention frozen:
        exactly so while no feature switches on or off; ``feature_intervention`` measures it. On a pruned graph the
        paths are those of the kept edges.

        Example:
            >>> example_graph().total_effects().tolist()  # token "a" reaches "c" through the feature (2.0 × 1.5 / 2)
            [[1.5, 0.0, 0.0, 1.5, -0.5, 0.0]]
        """
        adjacency = self.adjacency.astype(np.float64)
        n_f, n_l = len(self.features), len(self.logits)
        activations = self.activations.astype(np.float64)
        per_unit = adjacency[:, :n_f] / np.where(activations == 0, 1.0, activations)[None]
        into_features = np.linalg.solve(np.eye(n_f) - per_unit[:n_f], adjacency[:n_f])
        return adjacency[self.n_nodes - n_l :] + per_unit[self.n_nodes - n_l :] @ into_features

    def scores(self, pinned: Iterable[str] | None = None) -> GraphScores:
        """The replacement and completeness scores.

        Without ``pinned``: exactly circuit-tracer 0.5.0's ``compute_graph_scores`` on this graph (call it on the
        unpruned graph for circuit-tracer's numbers; on a pruned one it gives Neuronpedia's full-graph numbers).
        Replacement = token influence / (token + error influence); completeness = the influence-weighted share of
        each node's normalised input that comes from no error node.

        With ``pinned`` (node ids): the score of that subgraph as Neuronpedia's ``score.worker.ts`` computes it:
        each unpinned feature's outgoing column is added to the error node at its (layer, position) (if the graph
        has one), then the feature's row and column are zeroed, and the same formulas run in float64 (NaN: 0).

        Raises ``ValueError`` for an id that is not a node of the graph.

        Example:
            >>> graph = example_graph()
            >>> round(graph.scores(pinned=[]).replacement, 3), round(graph.scores(pinned=["E_10_0"]).replacement, 3)
            (1.0, 0.25)
        """
        n_dropped = (self.cap.n_active - len(self.features)) if self.cap is not None else 0
        lost = self.cap.lost_influence if self.cap is not None else None
        if pinned is None:
            replacement, completeness = _scores(
                self, torch.as_tensor(self.adjacency), self._logit_weights(torch.float32)
            )
            return GraphScores(replacement, completeness, n_dropped, lost)
        if isinstance(pinned, str):
            raise TypeError("pinned must be a list of node ids, not one string; wrap it: pinned=[node_id]")
        index = self._index_map()
        keep = {index.resolve(node_id, what="pinned id") for node_id in pinned}
        matrix = torch.as_tensor(self.adjacency, dtype=torch.float64).clone()
        errors = {(l, p): self._block("error").start + i for i, (l, p) in enumerate(self.errors.tolist())}
        dropped = [i for i in range(len(self.features)) if keep and i not in keep]  # no pins: the whole graph
        for i in dropped:
            layer, pos, _ = self.features[i].tolist()
            if (layer, pos) in errors:
                matrix[:, errors[(layer, pos)]] += matrix[:, i]
        matrix[dropped] = 0
        matrix[:, dropped] = 0
        replacement, completeness = np.nan_to_num(_scores(self, matrix, self._logit_weights(torch.float64)), nan=0.0)
        return GraphScores(float(replacement), float(completeness), n_dropped, lost)

    # ------------------------------------------------------------------ tables and display
    def to_dataframe(self):
        """One row per node, in node order: ``node_id``, ``kind``, ``layer`` (-1 for tokens, ``n_layers + 1`` for
        logits), ``pos``, ``feature`` (-1 but for features), ``token`` (tokens and logits), ``activation``
        (features), ``probability`` (logits), ``influence`` (pruned graphs) and the summed ``input`` and ``output``
        direct effect.

        Example:
            >>> example_graph().to_dataframe()[["node_id", "kind", "layer", "pos", "feature"]].iloc[[0, 3, 5]]
              node_id     kind  layer  pos  feature
            0   0_7_1  feature      0    1        7
            3  E_10_0    token     -1    0       -1
            5  2_12_1    logit      2    1       -1
        """
        import pandas as pd

        n_f, n_e, n_t, n_l = len(self.features), len(self.errors), len(self.token_ids), len(self.logits)
        nan = np.full(self.n_nodes, np.nan)
        activation, probability = nan.copy(), nan.copy()
        activation[:n_f] = self.activations
        probability[self.n_nodes - n_l :] = self.logits.probs
        return pd.DataFrame(
            {
                "node_id": self.node_ids,
                "kind": self.node_kinds,
                "layer": np.concatenate(
                    [self.features[:, 0], self.errors[:, 0], np.full(n_t, -1), np.full(n_l, self.n_layers + 1)]
                ).astype(np.int64),
                "pos": np.concatenate(
                    [self.features[:, 1], self.errors[:, 1], np.arange(n_t), np.full(n_l, n_t - 1)]
                ).astype(np.int64),
                "feature": np.concatenate([self.features[:, 2], np.full(n_e + n_t + n_l, -1)]).astype(np.int64),
                "token": [""] * (n_f + n_e) + list(self.prompt_tokens) + list(self.logits.labels),
                "activation": activation,
                "probability": probability,
                "influence": self.pruning.influence if self.pruning is not None else nan,
                "input": self.adjacency.sum(axis=1, dtype=np.float64),
                "output": self.adjacency.sum(axis=0, dtype=np.float64),
            }
        )

    def __repr__(self) -> str:
        state = "unpruned" if self.pruning is None else f"pruned at {self.pruning.node_threshold}"
        return (
            f"AttributionGraph({len(self.features)} features, {len(self.errors)} errors, {len(self.token_ids)} "
            f"tokens, {len(self.logits)} logits; {state})"
        )

    def _repr_html_(self) -> str:
        esc = html.escape
        tokens = "".join(
            f'<code title="position {p}, id {t}" style="margin-right:2px">{esc(tok)}</code>'
            for p, (tok, t) in enumerate(zip(self.prompt_tokens, self.token_ids.tolist()))
        )
        logit_rows = "".join(
            f"<tr><td><code>{esc(label)}</code></td><td>{int(i)}</td><td>{p:.3f}</td></tr>"
            for label, i, p in zip(self.logits.labels, self.logits.ids, self.logits.probs)
        )
        counts = esc(repr(self).removeprefix("AttributionGraph"))
        edges = int(np.count_nonzero(self.adjacency))
        scan = f", scan <code>{esc(self.scan)}</code>" if self.scan else ""
        adjacency = torch.as_tensor(self.adjacency)
        influence = _influence(_row_normalised(adjacency), self._logit_weights(adjacency.dtype)).numpy()
        top = np.argsort(-influence[: len(self.features)], kind="stable")[:8]
        labels = self.feature_labels
        feature_rows = "".join(
            f"<tr><td>{esc(self.node_ids[k])}</td><td>{self.features[k, 0]}</td><td>{self.features[k, 1]} "
            f"<code>{esc(self.prompt_tokens[self.features[k, 1]])}</code></td><td>{self.features[k, 2]}</td>"
            f"<td>{self.activations[k]:.3g}</td><td>{influence[k]:.3g}</td><td>{esc(labels[k])}</td></tr>"
            for k in top
        )
        return (
            f'<div class="iw-attribution-graph"><strong>AttributionGraph</strong> {counts}: {edges} edges{scan}'
            f"<div>prompt: {tokens}</div>"
            f"<table><thead><tr><th>logit target</th><th>id</th><th>probability</th></tr></thead>"
            f"<tbody>{logit_rows}</tbody></table>"
            f"<table><thead><tr><th>feature</th><th>layer</th><th>position</th><th>index</th><th>activation</th>"
            f"<th>logit influence</th><th>label</th></tr></thead><tbody>{feature_rows}</tbody></table></div>"
        )

    # ------------------------------------------------------------------ the circuit view
    def widget(
        self,
        *,
        features=None,
        labels: dict[str, str] | None = None,
        pinned: Iterable[str] | None = None,
        groups: Iterable[dict] | None = None,
        model=None,
        tokenizer=None,
        transcoders=None,
        **options,
    ):
        """The circuit view of this graph (:class:`~interp_widgets.widgets.CircuitView`): layers × positions, pins,
        supernodes, pruning sliders and live scores in the browser, saved with the notebook.

        ``features`` gives the feature details (a folder of circuit-tracer's ``features/{scan}/{index}.json``
        files, a mapping ``{(layer, feature): detail}`` or a function; default: the graph's explanations
        (:meth:`with_explanations`), else this prompt as each feature's example); those of the pinned features and
        the 300 most influential travel with the notebook, the view asks the kernel for the others. ``labels`` maps
        node ids to labels (default: the explanations' labels). ``pinned`` and ``groups`` (``[{"name",
        "members"}]``) default to the graph's saved view (``qParams`` ``pinnedIds`` and ``supernodes``). ``model``,
        ``tokenizer`` and ``transcoders`` (the graph's own) let the view ablate or scale a feature or a supernode in
        the model (``feature_intervention``); the kernel's widget holds them, they are never saved. Without them
        the view says that interventions need them. Other options (``node_threshold``, ``edge_threshold``,
        ``selected``) set the view state.

        Raises ``ValueError`` when the saved view would exceed the output cap: prune the graph first.

        Example:
            >>> view = example_graph().widget(labels={"0_7_1": "says a"}, pinned=["0_7_1"])
            >>> view, view.node_labels[0]
            (CircuitView(6 nodes, 3 edges, 1 pinned, 0 groups), 'says a')
        """
        from interp_widgets.circuits._view import GraphSource, view_data
        from interp_widgets.widgets.circuit import CircuitView

        if pinned is None:
            pinned = [str(p) for p in self.view.get("pinnedIds") or []]
        if groups is None:
            groups = [
                {"name": str(s[0]), "members": [str(m) for m in s[1:]]} for s in self.view.get("supernodes") or []
            ]
        index = self._index_map()
        ids = self.node_ids
        pinned = [ids[index.resolve(p, what="pinned id")] for p in pinned]  # old error ids read, new ones kept
        groups = [{"name": g["name"], "members": [ids[index.resolve(m, what="group member")] for m in g["members"]]}
                  for g in groups]  # fmt: skip
        if self.explanations is not None:  # the graph's own explanations, unless others are given
            if features is None:
                features = self._detail
            if labels is None:
                labels = {i: label for i, label in zip(self.node_ids, self.feature_labels) if label}
        source = GraphSource(self, features, labels, model=model, tokenizer=tokenizer, transcoders=transcoders)
        data = view_data(self, labels=labels, pinned=pinned, source=source)
        view = CircuitView(data, source=source, pinned=pinned, groups=groups, **options)
        object.__setattr__(self, "_last_view", view)
        return view

    def subgraph(self, view=None, *, ids: bool = False):
        """What is pinned in a circuit view of this graph (``view``; default: the last :meth:`widget`), read from the
        view's state: the pinned node ids (``ids=True``), else a graph of the pinned features and errors with every
        token and logit, whose saved view (``qParams``) holds the pins and the supernodes, so :meth:`to_json`
        carries them to circuit-tracer's and Neuronpedia's front ends.

        Example:
            >>> graph = example_graph()
            >>> view = graph.widget(); view.group("path", ["0_7_1", "2_12_1"])
            >>> graph.subgraph(ids=True), graph.subgraph().node_ids
            (['0_7_1', '2_12_1'], ['0_7_1', 'E_10_0', 'E_11_1', '2_12_1'])
            >>> graph.subgraph().view["supernodes"]
            [['path', '0_7_1', '2_12_1']]
        """
        view = view if view is not None else getattr(self, "_last_view", None)
        if view is None:
            raise ValueError("no circuit view of this graph yet: show graph.widget(), pin nodes, then call subgraph()")
        state = view.subgraph()
        index = self._index_map()
        rows = sorted({index.resolve(p, what="pinned id") for p in state["pinned"]})
        pinned = [self.node_ids[r] for r in rows]
        if ids:
            return pinned
        keep = np.zeros(self.n_nodes, bool)
        keep[rows] = True
        keep[self._block("token").start :] = True
        pruning = self.pruning
        if pruning is not None:
            pruning = Pruning(pruning.node_threshold, pruning.edge_threshold, np.asarray(pruning.influence)[keep])
        supernodes = [[g["name"], *g["members"]] for g in state["groups"]]
        view = {**self.view, "pinnedIds": pinned, "supernodes": supernodes}
        return self._kept(keep, self.adjacency[np.ix_(keep, keep)], pruning=pruning, view=view)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the whole graph (the full adjacency included) to one ``.safetensors`` file whose header holds the
        rest as JSON. Never pickles.

        Example:
            >>> graph = example_graph()
            >>> again = AttributionGraph.load(graph.save(getfixture("tmp_path") / "graph.safetensors"))
            >>> bool(np.array_equal(again.adjacency, graph.adjacency)), again.node_ids == graph.node_ids
            (True, True)
        """
        from safetensors.numpy import save_file

        path = output_path(path)
        arrays = {
            "adjacency": np.ascontiguousarray(self.adjacency),
            "features": np.ascontiguousarray(self.features),
            "activations": self.activations,
            "errors": np.ascontiguousarray(self.errors),
            "token_ids": self.token_ids,
            "logit_ids": self.logits.ids,
            "logit_probs": self.logits.probs,
        }
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "prompt": self.prompt,
            "prompt_tokens": self.prompt_tokens,
            "logit_labels": self.logits.labels,
            "n_layers": self.n_layers,
            "scan": self.scan,
            "view": self.view,
            "settings": self.provenance.settings,
            "cap": None if self.cap is None else [self.cap.n_active, self.cap.lost_influence],
            "pruning": None if self.pruning is None else [self.pruning.node_threshold, self.pruning.edge_threshold],
        }
        if self.explanations is not None:
            meta["explanations"] = {
                "source": self.explanations.source,
                "details": [[layer, feature, detail] for (layer, feature), detail in self.explanations.details.items()],
            }
        if self.pruning is not None:
            arrays["influence"] = np.asarray(self.pruning.influence, dtype=np.float64)
        save_file(arrays, str(path), metadata={"interp_widgets": json.dumps(meta)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> "AttributionGraph":
        """Read a graph written by :meth:`save`.

        Raises ``ValueError`` for a file of another kind or of an unknown schema version.

        Example:
            >>> graph = example_graph().prune()
            >>> AttributionGraph.load(graph.save(getfixture("tmp_path") / "g.safetensors")).pruning.edge_threshold
            0.98
        """
        meta, arrays = read_saved(path, name="AttributionGraph", format=_FORMAT)
        if meta.get("version") != _VERSION:
            raise ValueError(
                f"{path} has AttributionGraph schema version {meta.get('version')!r}, which this interp_widgets "
                f"does not know (it reads version {_VERSION}); load it with the interp_widgets that wrote it"
            )
        pruning = None
        if meta["pruning"] is not None:
            pruning = Pruning(*meta["pruning"], influence=arrays["influence"])
        explained = meta.get("explanations")
        graph = cls.from_flat(
            adjacency=arrays["adjacency"],
            features=arrays["features"],
            activations=arrays["activations"],
            errors=arrays["errors"],
            logits=Targets(meta["logit_labels"], ids=arrays["logit_ids"], probs=arrays["logit_probs"]),
            prompt=meta["prompt"],
            prompt_tokens=meta["prompt_tokens"],
            token_ids=arrays["token_ids"],
            n_layers=meta["n_layers"],
            scan=meta["scan"],
            pruning=pruning,
            cap=None if meta["cap"] is None else FeatureCap(*meta["cap"]),
            view=meta["view"],
        )
        graph = replace(graph, provenance=replace(graph.provenance, settings=meta.get("settings", {})))
        if explained is not None:
            details = {(int(layer), int(feature)): detail for layer, feature, detail in explained["details"]}
            graph = replace(graph, explanations=GraphExplanations(details, explained.get("source", "")))
        return graph

    def to_json(
        self,
        directory: str | Path,
        *,
        slug: str = "graph",
        node_threshold: float = 0.8,
        edge_threshold: float = 0.98,
        error_ids: str = "layer",
        feature_json_base_url: str | None = None,
    ) -> Path:
        """Write circuit-tracer's graph JSON (the Neuronpedia front end's format) of the pruned graph to
        ``directory/{slug}.json``, enter it in ``directory/graph-metadata.json`` (the front end's list) and write a
        ``directory/features/{scan}/{feature}.json`` detail file per feature (this prompt as its example: the
        graph knows no other; circuit-tracer's front end shows no feature without one). An unpruned graph is
        pruned first with the thresholds; a pruned one is written as it is. Returns the graph file's path.

        ``error_ids="layer"`` names error nodes ``{layer}_-1_{pos}`` (circuit-tracer PRs #100/#102);
        ``"legacy"`` writes circuit-tracer 0.5.0's ``0_{layer}_{pos}``, and refuses a graph where that id would
        also name a layer-0 feature. ``feature_json_base_url`` goes to ``metadata.feature_details`` for Neuronpedia.

        Example:
            >>> path = example_graph().to_json(getfixture("tmp_path"), slug="toy")
            >>> path.name, sorted(p.name for p in (path.parent / "features" / "toy").iterdir())
            ('toy.json', ['35.json'])
            >>> load_graph(path).node_ids
            ['0_7_1', 'E_10_0', 'E_11_1', '2_12_1']
        """
        from interp_widgets.validation import check_choice

        check_choice("error_ids", error_ids, ("layer", "legacy"))
        if not self.scan:
            raise ValueError(
                "the graph JSON needs a scan (the transcoder set's name): set it, e.g. graph.replace(scan=...)"
            )
        graph = self if self.pruning is not None else self.prune(node_threshold, edge_threshold)
        legacy = error_ids == "legacy"
        if legacy and len(set(graph._ids(legacy_errors=True))) < graph.n_nodes:
            raise ValueError(
                "with error_ids='legacy' an error node's id 0_{layer}_{pos} would equal a layer-0 feature's id in "
                "this graph; use error_ids='layer'"
            )
        extra = {}
        if graph.pruning.edge_threshold is not None:
            extra["pruning_settings"] = {
                "node_threshold": graph.pruning.node_threshold,
                "edge_threshold": graph.pruning.edge_threshold,
            }
        if feature_json_base_url:
            extra["feature_details"] = {"feature_json_base_url": feature_json_base_url}
        document = _graph_json.graph_document(graph, slug=slug, legacy_errors=legacy, extra_metadata=extra)
        directory = Path(directory)
        path = output_path(directory / f"{slug}.json", suffix_hint=".json")
        path.write_text(json.dumps(document, indent=2))
        _graph_json.add_to_index(directory, document["metadata"])
        feature_dir = directory / "features" / str(self.scan)
        feature_dir.mkdir(parents=True, exist_ok=True)
        for layer, feature in sorted({(l, f) for l, _, f in graph.features.tolist()}):
            detail = self._detail(layer, feature)
            (feature_dir / f"{detail['index']}.json").write_text(json.dumps(detail))
        return path

    @classmethod
    def from_circuit_tracer(cls, graph, *, tokenizer=None, prompt_tokens: list[str] | None = None):
        """An :class:`AttributionGraph` from a circuit-tracer ``Graph`` (read by its attributes; circuit-tracer is
        not imported). ``tokenizer`` decodes each prompt token (as circuit-tracer's JSON does), or give the decoded
        ``prompt_tokens``. A ``max_feature_nodes`` cap becomes ``cap`` (its lost influence unknown).

        Example:
            >>> from types import SimpleNamespace
            >>> ct = SimpleNamespace(adjacency_matrix=torch.zeros(6, 6), active_features=torch.tensor([[0, 1, 7]]),
            ...     selected_features=torch.tensor([0]), activation_values=torch.tensor([2.0]),
            ...     logit_targets=[("c", 12)], logit_probabilities=torch.tensor([0.9]), input_string="ab",
            ...     input_tokens=torch.tensor([10, 11]), cfg=SimpleNamespace(n_layers=1), scan="toy")
            >>> AttributionGraph.from_circuit_tracer(ct, prompt_tokens=["a", "b"]).node_ids[0]
            '0_7_1'
        """
        if (tokenizer is None) == (prompt_tokens is None):
            raise ValueError("give exactly one of tokenizer (to decode each prompt token) and prompt_tokens")
        token_ids = np.asarray(graph.input_tokens.cpu(), dtype=np.int64).reshape(-1)
        if prompt_tokens is None:
            prompt_tokens = [tokenizer.decode(int(t)) for t in token_ids]
        targets = graph.logit_targets
        if isinstance(targets, torch.Tensor):  # graphs saved before LogitTarget records: ids only
            labels, ids = [""] * len(targets), targets.tolist()
        else:
            labels, ids = [str(t[0]) for t in targets], [int(t[1]) for t in targets]
        selected = graph.selected_features.cpu().long()
        active = graph.active_features.cpu().long()
        scan = graph.scan
        if isinstance(scan, (list, tuple)):
            raise ValueError("this graph's scan is a list of transcoders; set graph.scan to one name first")
        return cls.from_flat(
            adjacency=graph.adjacency_matrix.detach().cpu().float().numpy(),
            features=active[selected].numpy(),
            activations=graph.activation_values.detach().cpu()[selected].float().numpy(),
            logits=Targets(labels, ids=ids, probs=graph.logit_probabilities.detach().cpu().float().numpy()),
            prompt=graph.input_string,
            prompt_tokens=list(prompt_tokens),
            token_ids=token_ids,
            n_layers=int(graph.cfg.n_layers),
            scan=scan,
            cap=FeatureCap(len(active)) if len(selected) < len(active) else None,
        )


install_flat_properties(AttributionGraph, FLAT_ATTRIBUTES)


def load_graph(path: str | Path) -> AttributionGraph:
    """Read an attribution graph: circuit-tracer's or Neuronpedia's graph JSON (a pruned graph; both error-id
    forms; ``qParams`` pins and supernodes kept in ``view`` and checked against the nodes; the features' ``clerp``
    labels as labels-only ``explanations``) or a ``.safetensors`` file written by :meth:`AttributionGraph.save`.

    Raises ``ValueError`` for an unknown schema version, node ids that collide (circuit-tracer 0.5.0 can write an
    error id equal to a layer-0 feature's), a link or pin to no node, or a node type other than features, errors,
    tokens and logits.

    Example:
        >>> graph = load_graph(example_graph().to_json(getfixture("tmp_path")))
        >>> graph.pruning.node_threshold, graph.logits.labels, graph.features.dtype
        (0.8, ['c'], dtype('int64'))
    """
    path = Path(path)
    if path.suffix == ".safetensors":
        return AttributionGraph.load(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}; pass a graph JSON or a saved AttributionGraph")
    args = _graph_json.read_document(path)
    clerps = args.pop("feature_labels")
    labels, ids, probs = args.pop("logits")
    node_threshold, edge_threshold, influence = args.pop("pruning")
    graph = AttributionGraph.from_flat(
        **args,
        logits=Targets(labels, ids=ids, probs=probs),
        pruning=Pruning(node_threshold, edge_threshold, influence),
    )
    if clerps:  # the features' labels come back as labels-only explanations, so to_json writes them again
        graph = replace(
            graph, explanations=GraphExplanations({k: {"label": v} for k, v in clerps.items()}, "graph JSON")
        )
    index = graph._index_map()
    for node_id in graph.view.get("pinnedIds") or []:
        index.resolve(node_id, what=f"{path}: pinned id")
    for supernode in graph.view.get("supernodes") or []:
        for node_id in supernode[1:]:
            index.resolve(node_id, what=f"{path}: supernode {supernode[0]!r} member")
    return graph


class _NodeIds:
    """Node id -> index, with circuit-tracer 0.5.0's error ids read where they name no feature."""

    def __init__(self, ids: list[str], legacy: list[str], error_block: slice):
        self.index = {node_id: i for i, node_id in enumerate(ids)}
        self.legacy = {legacy[i]: i for i in range(error_block.start, error_block.stop)}

    def resolve(self, node_id: str, *, what: str = "node id") -> int:
        node_id = str(node_id)
        found = self.index.get(node_id)
        old = self.legacy.get(node_id)
        if found is not None and old is not None and found != old:
            raise ValueError(
                f"{what} {node_id!r} names both a feature of layer 0 and an error node in circuit-tracer 0.5.0's old "
                f"error id form; name the error node as '{{layer}}_-1_{{pos}}'"
            )
        if found is None and old is None:
            raise ValueError(
                f"{what} {node_id!r} is not a node of this graph; ids are '{{layer}}_{{feature}}_{{pos}}', "
                f"'{{layer}}_-1_{{pos}}', 'E_{{token_id}}_{{pos}}' and '{{n_layers+1}}_{{token_id}}_{{last pos}}' "
                f"(graph.node_ids lists them)"
            )
        return found if found is not None else old


def _row_normalised(matrix: torch.Tensor) -> torch.Tensor:
    absolute = matrix.abs()
    return absolute / absolute.sum(dim=1, keepdim=True).clamp(min=1e-10)


def _influence(normalised: torch.Tensor, weights: torch.Tensor, max_steps: int = 1000) -> torch.Tensor:
    """weights · (Â + Â² + ...), summed until a step is exactly zero (an acyclic graph's powers vanish)."""
    step = weights @ normalised
    total = step.clone()
    for _ in range(max_steps):
        if not step.any():
            return total
        step = step @ normalised
        total += step
    if step.any():
        raise RuntimeError(f"influence did not vanish after {max_steps} steps: the graph has a cycle")
    return total


def _threshold(scores: torch.Tensor, fraction: float) -> torch.Tensor:
    """The smallest score among the top scores that hold ``fraction`` of their total (circuit-tracer's rule)."""
    ordered = torch.sort(scores, descending=True).values
    cumulative = torch.cumsum(ordered, dim=0) / torch.sum(ordered)
    at = min(int(torch.searchsorted(cumulative, fraction).item()), len(cumulative) - 1)
    return ordered[at]


def _prune_masks(graph: AttributionGraph, node_threshold: float, edge_threshold: float):
    adjacency = torch.as_tensor(graph.adjacency)
    weights = graph._logit_weights(adjacency.dtype)
    influence = _influence(_row_normalised(adjacency), weights)
    node_mask = influence >= _threshold(influence, node_threshold)
    inner = graph._block("token").start  # features and errors come first; tokens and logits are always kept
    node_mask[inner:] = True
    pruned = adjacency.clone()
    pruned[~node_mask] = 0
    pruned[:, ~node_mask] = 0
    normalised = _row_normalised(pruned)
    edge_scores = normalised * (_influence(normalised, weights) + weights)[:, None]
    edge_mask = edge_scores >= _threshold(edge_scores.flatten(), edge_threshold)
    n_features = len(graph.features)

    def require_edges():
        node_mask[:inner] &= edge_mask[:, :inner].any(0)  # features and errors need an outgoing edge
        node_mask[:n_features] &= edge_mask[:n_features].any(1)  # features also an incoming one

    before = node_mask.clone()
    require_edges()
    while not torch.equal(node_mask, before):
        before = node_mask.clone()
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        require_edges()
    ordered, order = torch.sort(influence, descending=True)
    cumulative = torch.zeros_like(influence)
    cumulative[order] = torch.cumsum(ordered, dim=0) / torch.sum(ordered)
    return node_mask.numpy(), edge_mask.numpy(), cumulative.numpy()


def _scores(graph: AttributionGraph, adjacency: torch.Tensor, weights: torch.Tensor) -> tuple[float, float]:
    errors, tokens = graph._block("error"), graph._block("token")
    normalised = _row_normalised(adjacency)
    influence = _influence(normalised, weights)
    token_influence = influence[tokens].sum()
    error_influence = influence[errors].sum()
    replacement = token_influence / (token_influence + error_influence)
    non_error = 1 - normalised[:, errors].sum(dim=-1)
    output = influence + weights
    completeness = (non_error * output).sum() / output.sum()
    return replacement.item(), completeness.item()


def example_graph() -> AttributionGraph:
    """A six-node graph for examples: token "a" drives feature 7 of layer 0 at position 1, which drives the logit
    "c" (p = 0.9); token "b" drives the logit directly, with a smaller negative weight.

    Example:
        >>> example_graph().adjacency[5].tolist()
        [1.5, 0.0, 0.0, 0.0, -0.5, 0.0]
    """
    adjacency = np.zeros((6, 6), np.float32)
    adjacency[0, 3], adjacency[5, 0], adjacency[5, 4] = 2.0, 1.5, -0.5
    return AttributionGraph.from_flat(
        adjacency,
        features=[[0, 1, 7]],
        activations=[2.0],
        logits=Targets(["c"], ids=[12], probs=[0.9]),
        prompt="ab",
        prompt_tokens=["a", "b"],
        token_ids=[10, 11],
        n_layers=1,
        scan="toy",
    )
