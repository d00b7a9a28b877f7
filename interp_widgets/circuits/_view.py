"""The circuit view's data from an :class:`~interp_widgets.circuits.AttributionGraph`: nodes, compact edges, the
feature details that travel with the notebook (pinned nodes and the most influential features), and the graph
behind the live view (details on request; interventions say what they need). ``graph.py`` calls it from
``AttributionGraph.widget()``.

Feature details come from ``features``: a directory of circuit-tracer's ``features/{scan}/{index}.json`` files (what
:meth:`~interp_widgets.circuits.AttributionGraph.to_json` writes, and circuit-tracer's front end reads), a mapping
``{(layer, feature): detail}`` or a function ``(layer, feature) -> detail | None``, a detail being such a file's
dict (``examples_quantiles``, ``top_logits``, ``bottom_logits``, optionally ``label``); without any, the graph's own
prompt is each feature's one example.

Example:
    >>> from interp_widgets.circuits import example_graph
    >>> data = view_data(example_graph())
    >>> data.node_kind.tolist(), data.edge_src.tolist(), data.edge_dst.tolist()
    ([0, 1, 1, 2, 2, 3], [3, 0, 4], [0, 5, 5])
    >>> np.frombuffer(data.edge_weights, "<f2").tolist(), sorted(data.details)
    ([2.0, 1.5, -0.5], ['0_7_1'])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from interp_widgets.circuits import _graph_json
from interp_widgets.circuits._runner import intervention_runner
from interp_widgets.widgets.view_data import CircuitData, CircuitEdgesPart, CircuitNodesPart, TokenLayoutPart

#: Features whose details travel with the notebook besides the pinned ones (the most influential).
DETAIL_TOP = 300
#: Contexts kept per feature, and tokens kept around each context's activating token.
CONTEXTS = 4
CONTEXT_WINDOW = 12
#: Tokens of each side of the vocabulary projection.
VOCAB = 8
_FLOAT16_MAX = 65504.0
_KIND_CODES = {"feature": 0, "error": 1, "token": 2, "logit": 3}

FeatureSource = "str | Path | Mapping[tuple[int, int], dict] | Callable[[int, int], dict | None] | None"


def node_influence(graph) -> np.ndarray:
    """Each node's logit influence (circuit-tracer's ``compute_node_influence``: the logit probabilities times
    Â + Â² + ..., Â the row-normalised |adjacency|), plus the probability for the logits themselves.

    Example:
        >>> from interp_widgets.circuits import example_graph
        >>> [round(float(x), 3) for x in node_influence(example_graph())]
        [0.675, 0.0, 0.0, 0.675, 0.225, 0.9]
    """
    return graph._node_influence()


def _round(values: Iterable[float], digits: int = 3) -> list[float | None]:
    out = []
    for v in values:
        v = float(v)
        out.append(None if not np.isfinite(v) else float(f"{v:.{digits}g}"))
    return out


def view_detail(detail: Mapping[str, Any] | None, label: str = "", source: str = "") -> dict[str, Any]:
    """A feature detail file's dict (circuit-tracer's ``feature_models.py`` fields) as the view shows it: at most
    :data:`CONTEXTS` contexts, each :data:`CONTEXT_WINDOW` tokens either side of its most active token, activations to
    3 significant digits, :data:`VOCAB` tokens of each side of the vocabulary projection.

    Example:
        >>> detail = {"examples_quantiles": [{"examples": [{"tokens": ["a", "b"], "tokens_acts_list": [0.0, 2.5]}]}],
        ...           "top_logits": ["x"], "bottom_logits": []}
        >>> view_detail(detail, label="b-ness")["contexts"]
        [{'tokens': ['a', 'b'], 'acts': [0.0, 2.5]}]
    """
    detail = dict(detail or {})
    contexts = []
    for quantile in detail.get("examples_quantiles") or []:
        for example in quantile.get("examples") or []:
            if len(contexts) >= CONTEXTS:
                break
            tokens = [str(t) for t in example.get("tokens", [])]
            acts = np.nan_to_num(np.asarray(example.get("tokens_acts_list", [0.0] * len(tokens)), dtype=np.float64))
            if not tokens or len(acts) != len(tokens):
                continue
            at = int(np.argmax(acts))
            lo, hi = max(0, at - CONTEXT_WINDOW), min(len(tokens), at + CONTEXT_WINDOW + 1)
            contexts.append({"tokens": tokens[lo:hi], "acts": _round(acts[lo:hi])})
    return {
        "label": str(detail.get("label") or label or ""),
        "source": source,
        "contexts": contexts,
        "top_logits": [str(t) for t in (detail.get("top_logits") or [])[:VOCAB]],
        "bottom_logits": [str(t) for t in (detail.get("bottom_logits") or [])[:VOCAB]],
    }


class GraphSource:
    """The graph behind a live circuit view: the details of any feature node (:meth:`detail`) and the answer to an
    intervention request (:meth:`intervene`), which says what it needs.

    Example:
        >>> from interp_widgets.circuits import example_graph
        >>> source = GraphSource(example_graph())
        >>> source.detail("0_7_1")["source"], source.detail("E_10_0")
        ('this prompt', None)
        >>> source.intervene({"nodes": ["0_-1_0"]})["error"][:52]
        "'0_-1_0' is an error node: interventions act on feat"
    """

    def __init__(
        self,
        graph,
        features: Any = None,
        labels: Mapping[str, str] | None = None,
        *,
        model=None,
        tokenizer=None,
        transcoders=None,
    ):
        self.graph = graph
        # held by this kernel-side object only: never part of the view's data
        self.model, self.tokenizer, self.transcoders = model, tokenizer, transcoders
        self.features = features
        self.labels = dict(labels or {})
        self._index = graph._index_map()
        if isinstance(features, (str, Path)):
            folder = Path(features)
            if (folder / "features").is_dir():
                folder = folder / "features"
            if graph.scan and (folder / str(graph.scan)).is_dir():
                folder = folder / str(graph.scan)
            if not folder.is_dir():
                raise FileNotFoundError(
                    f"no feature detail folder at {features}; pass the folder of circuit-tracer's "
                    f"features/{{scan}}/{{index}}.json files (graph.to_json(directory) writes them)"
                )
            self._folder = folder
        elif features is None or callable(features) or isinstance(features, Mapping):
            self._folder = None
        else:
            raise TypeError(
                f"features must be a folder of feature JSON files, a mapping {{(layer, feature): detail}} or a "
                f"function (layer, feature) -> detail, got {type(features).__name__}"
            )

    def _raw(self, layer: int, feature: int) -> tuple[dict | None, str]:
        features = self.features
        if self._folder is not None:
            path = self._folder / f"{_graph_json.cantor_pair(layer, feature)}.json"
            if not path.is_file():
                return None, f"no file {path.name}"
            return json.loads(path.read_text()), path.name
        if isinstance(features, Mapping):
            return features.get((layer, feature)), "given"
        if callable(features):
            return features(layer, feature), "given"
        return _graph_json.feature_detail(self.graph, layer, feature, str(self.graph.scan or "")), "this prompt"

    def _row(self, node_id: str) -> int:
        """The row of a node id the view sends: the view speaks the graph's own ids (``{layer}_-1_{pos}`` errors), so
        an exact id wins over circuit-tracer 0.5.0's old error id form (layer 0's features share it)."""
        found = self._index.index.get(str(node_id))
        return found if found is not None else self._index.resolve(node_id)

    def detail(self, node_id: str) -> dict[str, Any] | None:
        """The view's detail of a feature node (None for other nodes).

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> GraphSource(example_graph(), labels={"0_7_1": "a-detector"}).detail("0_7_1")["label"]
            'a-detector'
        """
        i = self._row(node_id)
        if i >= len(self.graph.features):
            return None
        layer, _, feature = self.graph.features[i].tolist()
        raw, source = self._raw(layer, feature)
        return view_detail(raw, label=self.labels.get(self.graph.node_ids[i], ""), source=source)

    def pruned(self, node_threshold: float, edge_threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """The nodes and edges (in the view's order: node order, and the graph's non-zero edges row by row) that
        ``graph.prune(node_threshold, edge_threshold)`` keeps, as boolean masks (the static picture's pruned graph).

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> nodes, edges = GraphSource(example_graph()).pruned(0.8, 0.98)
            >>> nodes.tolist(), edges.tolist()
            ([True, False, False, True, True, True], [True, True, True])
        """
        graph = self.graph
        pruned = graph.prune(node_threshold, edge_threshold)
        rows = np.array([graph.node_index(i) for i in pruned.node_ids], dtype=np.int64)
        nodes = np.zeros(graph.n_nodes, bool)
        nodes[rows] = True
        kept = np.zeros((graph.n_nodes, graph.n_nodes), bool)
        dst, src = np.nonzero(pruned.adjacency)
        kept[rows[dst], rows[src]] = True
        targets, sources = np.nonzero(graph.adjacency)
        return nodes, kept[targets, sources]

    def intervene(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run an intervention asked for by the view: ``{"nodes": feature node ids, "factor": f, "freeze_attention":
        bool, "at_generated": bool, "max_new_tokens": n, "top_k": k}`` sets each feature to ``f`` times its activation
        (0 ablates) with :func:`~interp_widgets.circuits.feature_intervention` at the graph's positions (and, with
        ``at_generated``, scales it by ``f`` at every generated token too: ``generated_scale``), and answers the top-k
        next tokens before and after and both greedy continuations (as text). An error or token node is refused,
        naming the nodes that can be intervened on; without the graph's model, tokenizer and transcoders in the
        kernel the answer says so. Errors come back as text (``{"error": ...}``).

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> GraphSource(example_graph()).intervene({"nodes": ["0_7_1"]})["error"][:62]
            "interventions from the view need the kernel and the graph's mo"
        """
        nodes = [str(n) for n in request.get("nodes") or []]
        if not nodes:
            return {"error": "pick a feature node or a supernode of features to intervene on"}
        kinds = self.graph.node_kinds
        rows = []
        for node in nodes:
            try:
                row = self._row(node)
            except ValueError as exc:
                return {"error": str(exc)}
            kind = kinds[row]
            if kind != "feature":
                return {
                    "error": f"{node!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind} node: interventions act on "
                    "feature nodes (transcoder features, ids {layer}_{feature}_{pos}) and supernodes of them, "
                    "not on error, token or logit nodes"
                }
            rows.append(row)
        missing = [name for name in ("model", "tokenizer", "transcoders") if getattr(self, name) is None]
        if missing:
            return {
                "error": "interventions from the view need the kernel and the graph's model, tokenizer and "
                f"transcoders in it; this view was opened without {', '.join(missing)}: pass them, e.g. "
                "graph.widget(model=model, tokenizer=tokenizer, transcoders=transcoders) (a graph imported from "
                "another model's file is view-only)"
            }
        try:
            factor = float(request.get("factor", 0.0))
            if not np.isfinite(factor):
                raise ValueError(f"the factor must be a finite number, got {factor}")
            freeze = bool(request.get("freeze_attention", True))
            at_generated = bool(request.get("at_generated", False))
            new_tokens = int(request.get("max_new_tokens", 8))
            top_k = int(request.get("top_k", 10))
            if not 0 <= new_tokens <= 64:
                raise ValueError(f"max_new_tokens must be in 0..64, got {new_tokens}")
            if not 1 <= top_k <= 100:
                raise ValueError(f"top_k must be in 1..100, got {top_k}")
            return self._intervene(rows, factor, freeze, at_generated, new_tokens, top_k)
        except (ValueError, TypeError, RuntimeError, KeyError, IndexError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _intervene(
        self, rows: list[int], factor: float, freeze: bool, at_generated: bool, new_tokens: int, top_k: int
    ) -> dict:
        graph = self.graph
        if int(self.transcoders.n_layers) != int(graph.n_layers):
            raise ValueError(
                f"the transcoders cover {self.transcoders.n_layers} layers and the graph {graph.n_layers}: this graph "
                "comes from another model (an imported graph is view-only); pass the graph's own model and transcoders"
            )
        plan = [
            (*(int(v) for v in graph.features[r]), factor * float(graph.activations[r])) for r in rows
        ]  # (layer, pos, feature, value)
        outcome = intervention_runner()(
            self.model, self.tokenizer, graph, self.transcoders, plan,
            freeze_attention=freeze, max_new_tokens=new_tokens, generated_scale=factor if at_generated else None,
        )  # fmt: skip
        top = outcome.top(top_k)

        def text(ids: list[int]) -> str:
            return self.tokenizer.decode(list(ids)) if ids else ""

        return {
            "nodes": [graph.node_ids[r] for r in rows],
            "factor": factor,
            "freeze_attention": freeze,
            "at_generated": at_generated,
            "max_new_tokens": new_tokens,
            "top": [
                {"token": str(t), "id": int(i), "p_before": float(b), "p_after": float(a), "logit_change": float(c)}
                for t, i, b, a, c in zip(top["token"], top["id"], top["p_before"], top["p_after"], top["logit_change"])
            ],
            "continuation": text(outcome.continuation),
            "base_continuation": text(outcome.base_continuation),
        }


def view_data(
    graph,
    *,
    features: Any = None,
    labels: Mapping[str, str] | None = None,
    pinned: Iterable[str] = (),
    top: int | None = None,
    source: GraphSource | None = None,
) -> CircuitData:
    """The :class:`~interp_widgets.widgets.view_data.CircuitData` of ``graph``: every node and non-zero edge
    (float16 weights), the labels (``labels``: node id -> label), the details of the pinned features and of the
    ``top`` most influential ones (default :data:`DETAIL_TOP`), and the graph's own scores as Python computes them.

    Example:
        >>> from interp_widgets.circuits import example_graph
        >>> data = view_data(example_graph(), labels={"0_7_1": "<b>"})
        >>> data.node_labels[0], data.graph_info["scores_of"], data.logit_tokens
        ('<b>', 'the unpruned graph in Python', ['c'])
    """
    source = source or GraphSource(graph, features, labels)
    labels = dict(labels or {})
    ids = graph.node_ids
    index = graph._index_map()
    pinned_rows = [index.resolve(p, what="pinned id") for p in pinned]
    n_f, n_e, n_t, n_l = len(graph.features), len(graph.errors), len(graph.token_ids), len(graph.logits)
    kind = np.repeat([0, 1, 2, 3], [n_f, n_e, n_t, n_l])
    layer = np.concatenate(
        [graph.features[:, 0], graph.errors[:, 0], np.full(n_t, -1), np.full(n_l, graph.n_layers + 1)]
    )
    pos = np.concatenate([graph.features[:, 1], graph.errors[:, 1], np.arange(n_t), np.full(n_l, n_t - 1)])
    feature_index = np.concatenate([graph.features[:, 2], np.full(n_e, -1), graph.token_ids, graph.logits.ids])
    activation = np.full(graph.n_nodes, np.nan, np.float32)
    activation[:n_f] = graph.activations
    influence = node_influence(graph)
    targets, sources = np.nonzero(graph.adjacency)
    weights = np.clip(graph.adjacency[targets, sources], -_FLOAT16_MAX, _FLOAT16_MAX).astype("<f2")
    top = DETAIL_TOP if top is None else int(top)
    order = np.argsort(-influence[:n_f], kind="stable")[:top].tolist()
    detailed = sorted(set(order) | {r for r in pinned_rows if r < n_f})
    details = {ids[r]: source.detail(ids[r]) for r in detailed}
    layout = graph.input.layout
    scores = graph.scores()
    pruning = graph.pruning
    info = {
        "scan": str(graph.scan or ""),
        "pruned": pruning is not None,
        "node_threshold": None if pruning is None else pruning.node_threshold,
        "edge_threshold": None if pruning is None else pruning.edge_threshold,
        "replacement": scores.replacement,
        "completeness": scores.completeness,
        "scores_of": "the unpruned graph in Python"
        if pruning is None
        else f"the graph pruned at {pruning.node_threshold} in Python",
        "kernel": "details",
    }
    word_ids = getattr(layout, "word_ids", None)
    return CircuitData(
        layout=TokenLayoutPart(
            tokens=list(layout.tokens),
            spaces_before=[""] * n_t,
            special_mask=np.zeros(n_t, bool),
            word_ids=np.arange(n_t) if word_ids is None else word_ids,
            sentence_ids=np.zeros(n_t, np.int64),
        ),
        nodes=CircuitNodesPart(
            node_kind=kind,
            node_layer=layer,
            node_pos=pos,
            node_index=feature_index,
            node_influence=influence,
            node_activation=activation,
            node_labels=[str(labels.get(i, "")) for i in ids],
        ),
        edges=CircuitEdgesPart(edge_src=sources, edge_dst=targets, edge_weights=weights.tobytes()),
        n_layers=int(graph.n_layers),
        logit_tokens=list(graph.logits.labels),
        logit_probs=[float(p) for p in graph.logits.probs],
        details=details,
        graph_info=info,
    )


_DOC_KINDS = {_graph_json.FEATURE: 0, _graph_json.ERROR: 1, _graph_json.TOKEN: 2, _graph_json.LOGIT: 3,
              "lorsa error": 1}  # fmt: skip
NOT_COMPUTABLE = (
    "the graph has lorsa nodes, which the replacement and completeness rule (circuit-tracer's compute_graph_scores, "
    "Neuronpedia's score.worker.ts) does not cover"
)


class _ImportedSource:
    """The kernel side of a view of a file whose graph the package cannot hold (lorsa nodes): no details beyond the
    file, and no interventions (the graph of another model is view-only)."""

    def detail(self, node_id: str) -> dict[str, Any] | None:
        return None

    def intervene(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"error": "this graph was imported from a file with lorsa nodes: it is view-only (interventions need "
                         "the graph's model and transcoders in the kernel)"}  # fmt: skip


def _document_view(path: Path, doc: dict, labels: dict[str, str], **options):
    """A view-only circuit view of a Neuronpedia graph JSON with nodes the graph cannot hold (lorsa): the file's
    nodes in its order, its own ids, sizes from its cumulative influence (1 - influence), scores not computable."""
    from interp_widgets.widgets.circuit import CircuitView

    nodes = doc["nodes"]
    meta = doc["metadata"]
    n_pos = len(meta["prompt_tokens"])
    ids = [str(n["node_id"]) for n in nodes]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: node ids collide; every node needs its own id")
    where = {node_id: k for k, node_id in enumerate(ids)}
    kind = np.array([_DOC_KINDS.get(n["feature_type"], 4) for n in nodes])
    logit_rows = np.flatnonzero(kind == 3)
    layers = [int(n["layer"]) for n in nodes if str(n["layer"]) != "E"]
    n_layers = (max(int(nodes[k]["layer"]) for k in logit_rows) - 1) if len(logit_rows) else max(layers, default=0) + 1
    layer = np.array([-1 if str(n["layer"]) == "E" else int(n["layer"]) for n in nodes])
    pos = np.array([int(n["ctx_idx"]) for n in nodes])

    def index_of(n: dict) -> int:
        parts = str(n["node_id"]).split("_")
        try:
            return int(parts[1]) if len(parts) == 3 else int(n.get("feature") or -1)
        except ValueError:
            return -1

    index = np.array([index_of(n) if n["feature_type"] != _graph_json.LOGIT else int(n["feature"]) for n in nodes])
    influence = np.array([np.nan if n.get("influence") is None else 1.0 - float(n["influence"]) for n in nodes])
    probs = [float(nodes[k].get("token_prob", 0.0)) for k in logit_rows]
    influence[logit_rows] = probs
    activation = np.array([np.nan if n.get("activation") is None else float(n["activation"]) for n in nodes])
    src, dst, weights = [], [], []
    for link in doc["links"]:
        for end in ("source", "target"):
            if str(link[end]) not in where:
                raise ValueError(f"{path}: a link's {end} {link[end]!r} is no node of the file")
        src.append(where[str(link["source"])])
        dst.append(where[str(link["target"])])
        weights.append(link["weight"])
    weights = np.clip(np.asarray(weights, np.float64), -_FLOAT16_MAX, _FLOAT16_MAX).astype("<f2")
    tokens = [str(t) for t in meta["prompt_tokens"]]
    data = CircuitData(
        layout=TokenLayoutPart(tokens=tokens, spaces_before=[""] * n_pos, special_mask=np.zeros(n_pos, bool),
                               word_ids=np.arange(n_pos), sentence_ids=np.zeros(n_pos, np.int64)),
        nodes=CircuitNodesPart(node_kind=kind, node_layer=layer, node_pos=pos, node_index=index,
                               node_influence=np.nan_to_num(influence), node_activation=activation,
                               node_labels=[labels.get(i, "") for i in ids], node_ids=ids),
        edges=CircuitEdgesPart(edge_src=np.asarray(src, np.int64), edge_dst=np.asarray(dst, np.int64),
                               edge_weights=weights.tobytes()),
        n_layers=int(n_layers),
        logit_tokens=[_graph_json.parse_logit_label(nodes[k].get("clerp", "")) for k in logit_rows],
        logit_probs=probs,
        details={},
        graph_info={"scan": str(meta.get("scan") or ""), "pruned": True, "node_threshold": meta.get("node_threshold"),
                    "edge_threshold": None, "replacement": None, "completeness": None,
                    "scores_of": "not computable", "kernel": "none"},
        scores_note=NOT_COMPUTABLE,
    )  # fmt: skip
    for name in ("model", "tokenizer", "transcoders"):  # an imported graph of another model is view-only
        options.pop(name, None)
    view = doc.get("qParams") or {}
    pinned = [str(p) for p in view.get("pinnedIds") or []]
    groups = [{"name": str(s[0]), "members": [str(m) for m in s[1:]]} for s in view.get("supernodes") or []]
    return CircuitView(data, source=_ImportedSource(), pinned=pinned, groups=groups, **options)
