"""Open a circuit view of a graph or a graph JSON file (:func:`circuit_view`): files the graph holds through
:func:`~interp_widgets.circuits.load_graph`, Neuronpedia files with lorsa nodes view-only (``_view``).

Example:
    >>> from interp_widgets.circuits import example_graph
    >>> circuit_view(example_graph())
    CircuitView(6 nodes, 3 edges, 0 pinned, 0 groups)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from interp_widgets.circuits import _graph_json
from interp_widgets.circuits.graph import load_graph

__all__ = ["circuit_view"]


def circuit_view(source, *, features: Any = None, labels: Mapping[str, str] | None = None, **options):
    """The circuit view of an attribution graph or a graph JSON file (circuit-tracer's or Neuronpedia's).

    A file that :func:`~interp_widgets.circuits.load_graph` reads becomes a graph and then its
    :meth:`~interp_widgets.circuits.AttributionGraph.widget`, with the features' ``clerp`` labels of the file (and
    ``features`` defaults to the file's ``features/`` folder when there is one). A Neuronpedia file with node types
    the graph cannot hold (``lorsa``, ``lorsa error``) opens view-only: its own node ids, sizes from its influence,
    the scores "not computable", no interventions. Options go to the view (``pinned``, ``groups``, thresholds).

    Raises ``ValueError`` for a file of an unknown schema version or that is no graph JSON.

    Example:
        >>> from interp_widgets.circuits import example_graph
        >>> path = example_graph().to_json(getfixture("tmp_path"))
        >>> circuit_view(path)
        CircuitView(4 nodes, 3 edges, 0 pinned, 0 groups)
    """
    if not isinstance(source, (str, Path)):
        return source.widget(features=features, labels=labels, **options)
    path = Path(source)
    if path.suffix != ".json":
        return load_graph(path).widget(features=features, labels=labels, **options)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it as a graph JSON ({exc})") from None
    if not isinstance(doc, dict) or not {"metadata", "nodes", "links"} <= doc.keys():
        raise ValueError(f"{path} is not a graph JSON: it needs 'metadata', 'nodes' and 'links'")
    version = doc["metadata"].get("schema_version")
    if version not in _graph_json.KNOWN_SCHEMA_VERSIONS:
        load_graph(path)  # raises the one message for an unknown schema version
    given = {str(n["node_id"]): str(n.get("clerp") or "") for n in doc["nodes"]
             if n.get("feature_type") not in (_graph_json.LOGIT,) and n.get("clerp")}  # fmt: skip
    given.update(labels or {})
    if any(n.get("feature_type") not in _graph_json.KNOWN_TYPES for n in doc["nodes"]):
        from interp_widgets.circuits._view import _document_view  # the view's data types need the widgets

        return _document_view(path, doc, given, **options)
    if features is None and (path.parent / "features").is_dir():
        features = path.parent / "features"
    return load_graph(path).widget(features=features, labels=given, **options)
