"""circuit-tracer's graph JSON (the Neuronpedia front end's format) as plain data: nodes and links out of a graph,
and the arguments of a graph out of a file. ``graph.py`` builds on it; this module imports nothing of it.

The format (circuit-tracer 0.5.0 ``frontend/graph_models.py``; Neuronpedia ``graph-schema.json``): ``metadata``
(``slug``, ``scan``, ``prompt_tokens``, ``prompt``, ``node_threshold``, ``schema_version``), ``qParams`` (the saved
view: ``pinnedIds``, ``supernodes`` = ``[label, node_id, ...]`` lists, ``linkType``, ``clickedId``, ``sg_pos``),
``nodes`` and ``links`` (``{source, target, weight}``: node ids and the signed direct effect). Schema version 1 (and
files without one, written before it) are read; a feature's index comes from its node id, its ``feature`` field
is the Cantor pair of (layer, index) in version 1.

Example:
    >>> parse_logit_label('Output " the" (p=0.412)')
    ' the'
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

KNOWN_SCHEMA_VERSIONS = (None, 1)
FEATURE, ERROR, TOKEN, LOGIT = "cross layer transcoder", "mlp reconstruction error", "embedding", "logit"
#: The node types an AttributionGraph holds (Neuronpedia also writes ``lorsa`` and ``lorsa error``).
KNOWN_TYPES = (FEATURE, ERROR, TOKEN, LOGIT)
_CLERP = re.compile(r'^Output "(.*)" \(p=[^)]*\)$', re.DOTALL)


def cantor_pair(layer: int, feature: int) -> int:
    """The JSON ``feature`` id of a transcoder feature (graph JSON schema version 1): the Cantor pair
    ``(layer + feature)(layer + feature + 1) / 2 + feature``, a Python int (it passes 2**31 for wide transcoders).

    Example:
        >>> cantor_pair(3, 5), cantor_pair(29, 73727)
        (41, 2720084373)
    """
    s = int(layer) + int(feature)
    return s * (s + 1) // 2 + int(feature)


def parse_logit_label(clerp: str) -> str:
    """The token of a logit node's ``clerp`` (``Output "tok" (p=0.123)``, which both front ends parse), else the
    clerp itself.

    Example:
        >>> parse_logit_label('Output "a "quoted" b" (p=0.100)'), parse_logit_label("my label")
        ('a "quoted" b', 'my label')
    """
    found = _CLERP.match(clerp or "")
    return found.group(1) if found else clerp


def _node(
    node_id, feature, layer, ctx_idx, kind, js_id, *, influence, activation=None, prob=0.0, target=False, clerp=""
):
    return {
        "node_id": node_id,
        "feature": feature,
        "layer": layer,
        "ctx_idx": ctx_idx,
        "feature_type": kind,
        "token_prob": prob,
        "is_target_logit": target,
        "run_idx": 0,
        "reverse_ctx_idx": 0,
        "jsNodeId": js_id,
        "clerp": clerp,
        "influence": influence,
        "activation": activation,
    }


def graph_document(graph, *, slug: str, legacy_errors: bool, extra_metadata: dict) -> dict:
    """The graph JSON of a pruned graph (nodes in node order, links in row-major order of the adjacency, as
    circuit-tracer writes them)."""
    influence = [None if np.isnan(x) else float(x) for x in graph.pruning.influence.tolist()]
    n_f, n_e, n_t = len(graph.features), len(graph.errors), len(graph.token_ids)
    last = n_t - 1
    ids = graph._ids(legacy_errors=legacy_errors)
    nodes = []
    labels = graph.feature_labels  # the features' explanations' labels ('' without): the front ends' clerp
    for k, ((layer, pos, f), act) in enumerate(zip(graph.features.tolist(), graph.activations.tolist())):
        nodes.append(
            _node(
                ids[k],
                cantor_pair(layer, f),
                str(layer),
                pos,
                FEATURE,
                f"{layer}_{f}-0",
                influence=influence[k],
                activation=None if np.isnan(act) else float(act),
                clerp=labels[k],
            )
        )
    for k, (layer, pos) in enumerate(graph.errors.tolist(), start=n_f):
        nodes.append(_node(ids[k], -1, str(layer), pos, ERROR, f"{layer}_{pos}-0", influence=influence[k]))
    for pos, token in enumerate(graph.token_ids.tolist()):
        k = n_f + n_e + pos
        nodes.append(_node(ids[k], pos, "E", pos, TOKEN, f"E_{token}-{pos}", influence=influence[k]))
    logit_layer = str(graph.n_layers + 1)
    for j, (label, vocab, prob) in enumerate(zip(graph.logits.labels, graph.logits.ids.tolist(), graph.logits.probs)):
        k = n_f + n_e + n_t + j
        nodes.append(
            _node(
                ids[k],
                vocab,
                logit_layer,
                last,
                LOGIT,
                f"L_{vocab}-{last}",
                influence=None,
                prob=float(prob),
                target=j == 0,
                clerp=f'Output "{label}" (p={float(prob):.3f})',
            )
        )
    targets, sources = np.nonzero(graph.adjacency)
    weights = graph.adjacency[targets, sources].tolist()
    links = [
        {"source": ids[s], "target": ids[t], "weight": w}
        for t, s, w in zip(targets.tolist(), sources.tolist(), weights)
    ]
    metadata = {
        "slug": slug,
        "scan": graph.scan,
        "transcoder_list": [],
        "prompt_tokens": list(graph.prompt_tokens),
        "prompt": graph.prompt,
        "node_threshold": graph.pruning.node_threshold,
        "schema_version": 1,
        **extra_metadata,
    }
    view = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": "", **graph.view}
    return {"metadata": metadata, "qParams": view, "nodes": nodes, "links": links}


def feature_detail(graph, layer: int, feature: int, scan: str) -> dict:
    """A ``features/{scan}/{feature}.json`` detail file (circuit-tracer's ``frontend/feature_models.py`` fields)
    from what the graph knows: this prompt as the one example, with the feature's activation at each position
    (0 where it is not a node of the graph), and its activation range and share of active positions on it."""
    acts = np.zeros(len(graph.token_ids))
    rows = (graph.features[:, 0] == layer) & (graph.features[:, 2] == feature)
    acts[graph.features[rows, 1]] = graph.activations[rows]
    acts = np.nan_to_num(acts)
    example = {
        "tokens_acts_list": acts.tolist(),
        "train_token_ind": int(np.argmax(acts)),
        "is_repeated_datapoint": False,
        "tokens": list(graph.prompt_tokens),
    }
    return {
        "transcoder_id": scan,
        "index": cantor_pair(layer, feature),
        "examples_quantiles": [{"quantile_name": "This prompt", "examples": [example]}],
        "top_logits": [],
        "bottom_logits": [],
        "act_min": float(min(acts.min(), 0.0)),
        "act_max": float(acts.max()),
        "quantile_values": [],
        "histogram": [],
        "activation_frequency": float((acts > 0).mean()),
    }


def add_to_index(directory: Path, metadata: dict) -> None:
    """Enter a graph in ``graph-metadata.json`` (the front end's list of graphs), replacing one of the same slug."""
    index_path = directory / "graph-metadata.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {"graphs": []}
    index["graphs"] = [g for g in index.get("graphs", []) if g.get("slug") != metadata["slug"]] + [metadata]
    index_path.write_text(json.dumps(index, indent=2))


def _fail(path, message: str) -> ValueError:
    return ValueError(f"{path}: {message}")


def read_document(path: Path) -> dict:
    """The flat values of an :class:`AttributionGraph` (a pruned one; for its ``from_flat``) from a graph JSON file,
    and ``feature_labels``: the features' non-empty ``clerp`` by ``(layer, feature)``."""
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise _fail(path, f"is not JSON ({err}); pass a graph JSON written by circuit-tracer or to_json()") from None
    if not isinstance(doc, dict) or not {"metadata", "nodes", "links"} <= doc.keys():
        raise _fail(path, "is not a graph JSON: it needs 'metadata', 'nodes' and 'links'")
    meta = doc["metadata"]
    version = meta.get("schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise _fail(
            path,
            f"graph JSON schema version {version!r} is unknown; interp_widgets reads versions "
            f"{[v for v in KNOWN_SCHEMA_VERSIONS if v is not None]} (and files without one)",
        )
    owners: dict[str, list[dict]] = {}
    for node in doc["nodes"]:
        owners.setdefault(str(node["node_id"]), []).append(node)
    colliding = {i: nodes for i, nodes in owners.items() if len(nodes) > 1}
    if colliding:
        node_id, nodes = next(iter(colliding.items()))
        kinds = ", ".join(f"{n['feature_type']} (layer {n['layer']}, position {n['ctx_idx']})" for n in nodes)
        raise _fail(
            path,
            f"node ids collide: {node_id!r} names {kinds} ({len(colliding)} such ids), so its links are ambiguous; "
            f"circuit-tracer before PR #102 gives error nodes the id 0_{{layer}}_{{pos}}, which can equal a layer-0 "
            f"feature's: regenerate the file with error ids {{layer}}_-1_{{pos}}",
        )
    features, errors, tokens, logits, labels = [], [], {}, [], {}
    for node in doc["nodes"]:
        kind, node_id = node["feature_type"], str(node["node_id"])
        influence = node.get("influence")
        influence = np.nan if influence is None else float(influence)
        if kind == FEATURE:
            layer, pos = int(node["layer"]), int(node["ctx_idx"])
            index = int(node_id.split("_")[1])
            if version == 1 and int(node["feature"]) != cantor_pair(layer, index):
                raise _fail(
                    path, f"feature node {node_id!r} has feature {node['feature']}, not cantor({layer}, {index})"
                )
            act = node.get("activation")
            if node.get("clerp"):
                labels[(layer, index)] = str(node["clerp"])
            features.append(((layer, pos, index), np.nan if act is None else float(act), influence, node_id))
        elif kind == ERROR:
            errors.append(((int(node["layer"]), int(node["ctx_idx"])), influence, node_id))
        elif kind == TOKEN:
            tokens[int(node["ctx_idx"])] = (int(node_id.split("_")[1]), influence, node_id)
        elif kind == LOGIT:
            logits.append((node, influence, node_id))
        else:
            raise _fail(
                path,
                f"node {node_id!r} has feature_type {kind!r}; interp_widgets reads {FEATURE!r}, {ERROR!r}, "
                f"{TOKEN!r} and {LOGIT!r} nodes (not lorsa)",
            )
    n_pos = len(meta["prompt_tokens"])
    missing = sorted(set(range(n_pos)) - set(tokens))
    if missing or not logits:
        raise _fail(path, f"a graph JSON needs every token node and a logit node (missing token positions {missing})")
    features.sort(key=lambda item: item[0])
    errors.sort(key=lambda item: item[0])
    order = [f[3] for f in features] + [e[2] for e in errors] + [tokens[p][2] for p in range(n_pos)]
    order += [item[2] for item in logits]
    index_of = {node_id: k for k, node_id in enumerate(order)}  # ids are unique here (checked above)
    adjacency = np.zeros((len(order), len(order)), np.float32)
    for link in doc["links"]:
        for end in ("source", "target"):
            if str(link[end]) not in index_of:
                raise _fail(path, f"a link's {end} {link[end]!r} is no node of the file")
        adjacency[index_of[str(link["target"])], index_of[str(link["source"])]] = link["weight"]
    influence = [f[2] for f in features] + [e[1] for e in errors] + [tokens[p][1] for p in range(n_pos)]
    influence += [item[1] for item in logits]
    logit_layers = {int(node["layer"]) for node, _, _ in logits}
    if len(logit_layers) != 1:
        raise _fail(path, f"logit nodes have layers {sorted(logit_layers)}; they all have n_layers + 1")
    pruning_settings = meta.get("pruning_settings") or {}
    return {
        "adjacency": adjacency,
        "features": np.array([f[0] for f in features], dtype=np.int64).reshape(-1, 3),
        "activations": np.array([f[1] for f in features], dtype=np.float32),
        "errors": np.array([e[0] for e in errors], dtype=np.int64).reshape(-1, 2),
        "token_ids": np.array([tokens[p][0] for p in range(n_pos)], dtype=np.int64),
        "logits": (
            [parse_logit_label(node.get("clerp", "")) for node, _, _ in logits],
            [int(node["feature"]) for node, _, _ in logits],
            [float(node.get("token_prob", 0.0)) for node, _, _ in logits],
        ),
        "prompt": meta["prompt"],
        "prompt_tokens": list(meta["prompt_tokens"]),
        "n_layers": logit_layers.pop() - 1,
        "scan": meta.get("scan"),
        "pruning": (meta.get("node_threshold"), pruning_settings.get("edge_threshold"), np.array(influence)),
        "view": dict(doc.get("qParams") or {}),
        "feature_labels": labels,
    }
