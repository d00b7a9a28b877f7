"""The circuit view: an attribution graph to explore, pin, group and score inside the notebook, with or without a
kernel.

Layers run bottom to top (token embeddings at the bottom, logits on top) and prompt positions left to right, with
the tokens along the bottom axis. Nodes are sized by their logit influence and coloured by kind (token, feature,
error, logit); edges have a width for ``|weight|`` and a colour for the sign. Everything the page needs travels in
:class:`~interp_widgets.widgets.view_data.CircuitData`, compactly (edges as narrow int indices and float16
weights); the feature details (top activating contexts, vocabulary projection, label) travel for the pinned nodes
and the most influential ones, and the view asks the kernel for the others.

What the user does lives in the view state, saved with the notebook and restored by the mime renderer with no
kernel: ``pinned`` (node ids), ``groups`` (supernodes: ``{"name", "members"}``), ``node_threshold`` and
``edge_threshold`` (pruning in the browser), ``selected`` (the node whose details show). :meth:`CircuitView.subgraph`
reads them back.

Intervene from the view: the panel above the graph ablates (``Ablate``), doubles (``×2``) or scales (``Scale``) the
selected feature node, or every feature of its supernode, with frozen attention on by default; the kernel runs
``feature_intervention`` on the graph's model and transcoders (``graph.widget(model=, tokenizer=, transcoders=)``)
and the view shows the top next tokens before and after and both greedy continuations. Without them, or with no
kernel, it says what it needs.

Build it with :meth:`interp_widgets.circuits.AttributionGraph.widget`.

Example:
    >>> from interp_widgets.circuits import example_graph
    >>> view = example_graph().widget()
    >>> view.pin("0_7_1"); view.group("mine", ["0_7_1", "E_10_0"])
    >>> view.subgraph()
    {'pinned': ['0_7_1', 'E_10_0'], 'groups': [{'name': 'mine', 'members': ['0_7_1', 'E_10_0']}]}
"""

from __future__ import annotations

import asyncio
import html
import math
from typing import Any, ClassVar, Iterable, Protocol

import numpy as np
import traitlets

from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._mime import compact_json, output_cap
from interp_widgets.widgets.view_data import CircuitData

__all__ = ["CircuitSource", "CircuitView", "KINDS", "node_ids"]

#: The node kinds, by their ``node_kind`` code.
KINDS = ("feature", "error", "token", "logit", "lorsa")
#: Colour of each kind in the static picture (the live view's CSS variables have the same defaults).
_KIND_COLOURS = ("#4c78a8", "#9d9d9d", "#54a24b", "#e45756", "#b279a2")
#: Nodes and edges drawn in the static picture (the live view draws every edge above its thresholds).
STATIC_NODES = 300
STATIC_EDGES = 1500
#: Features whose labels the static picture writes (the most influential, and the pinned ones).
STATIC_LABELS = 12


class CircuitSource(Protocol):
    """What the live view asks the kernel for (the graph behind the view; ``interp_widgets.circuits`` has one):
    the details of a node whose details did not travel, and an intervention (which says what it needs)."""

    def detail(self, node_id: str) -> dict[str, Any] | None: ...

    def intervene(self, request: dict[str, Any]) -> dict[str, Any]: ...

    # optional: ``pruned(node_threshold, edge_threshold) -> (node mask, edge mask)`` over the view's nodes and edges,
    # which the static picture draws


def node_ids(kind, layer, pos, index) -> list[str]:
    """The node ids of circuit-tracer's graph JSON from the view's node arrays (``E_{token}_{pos}`` for tokens,
    ``{layer}_-1_{pos}`` for errors, ``{layer}_{index}_{pos}`` for features, lorsa features and logits).

    Example:
        >>> node_ids([0, 1, 2, 3], [0, 0, -1, 2], [1, 0, 0, 1], [7, -1, 10, 12])
        ['0_7_1', '0_-1_0', 'E_10_0', '2_12_1']
    """
    out = []
    for k, l, p, i in zip(np.asarray(kind).tolist(), np.asarray(layer).tolist(), np.asarray(pos).tolist(),
                          np.asarray(index).tolist()):  # fmt: skip
        out.append(f"E_{i}_{p}" if k == 2 else f"{l}_-1_{p}" if k == 1 else f"{l}_{i}_{p}")
    return out


def _check_groups(groups: Any, known: set[str], *, check_members: bool = True) -> list[dict[str, Any]]:
    out = []
    for group in groups or []:
        if not isinstance(group, dict) or not isinstance(group.get("name"), str):
            raise ValueError(f"each group must be {{'name': str, 'members': [node ids]}}, got {group!r}")
        members = [str(m) for m in group.get("members", [])]
        unknown = [m for m in members if m not in known] if check_members else []
        if unknown:
            raise ValueError(f"group {group['name']!r} has members {unknown[:5]} that are no nodes of the graph")
        out.append({"name": group["name"], "members": members})
    return out


class CircuitView(InterpWidget, data=CircuitData):
    """An attribution graph (see the module docstring): hover a node for its label and activation and its edges,
    click it for its details, pin nodes (Enter), group pinned nodes into named supernodes (G), prune with the
    threshold sliders, read the pinned subgraph's live scores.

    Built by :meth:`interp_widgets.circuits.AttributionGraph.widget` (which gives it the graph as ``source``);
    ``pinned`` and ``groups`` set the initial pins and supernodes.

    Raises ``ValueError`` when the saved view would exceed the output cap (prune the graph first) or a pin or group
    member is no node of the graph.

    Example:
        >>> from interp_widgets.circuits import example_graph
        >>> view = CircuitView(example_graph().widget().view_data(), pinned=["0_7_1"])
        >>> view
        CircuitView(6 nodes, 3 edges, 1 pinned, 0 groups)
    """

    _payload_schema: ClassVar[dict[str, Any]] = {
        "details": {"map": {"object": {
            "label": "str", "source": "str",
            "contexts": {"list": {"object": {"tokens": {"list": "str"}, "acts": {"list": {"nullable": "num"}}}}},
            "top_logits": {"list": "str"}, "bottom_logits": {"list": "str"}}}},
        "graph_info": {"object": {
            "scan": "str", "pruned": "bool", "node_threshold": {"nullable": "num"},
            "edge_threshold": {"nullable": "num"}, "replacement": {"nullable": "num"},
            "completeness": {"nullable": "num"}, "scores_of": "str", "kernel": "str"}},
        "groups": {"list": {"object": {"name": "str", "members": {"list": "str"}}}},
    }  # fmt: skip

    pinned = traitlets.List(traitlets.Unicode(), help="Pinned node ids (written by the view).").tag(sync=True)
    groups = traitlets.List(
        traitlets.Dict(), help="Supernodes: [{name, members: node ids}] (written by the view)."
    ).tag(sync=True)
    node_threshold = traitlets.Float(1.0, help="Node threshold of the browser's pruning, in (0, 1] (written).").tag(
        sync=True
    )
    edge_threshold = traitlets.Float(1.0, help="Edge threshold of the browser's pruning, in (0, 1] (written).").tag(
        sync=True
    )
    selected = traitlets.Unicode("", help="Node id whose details show, '' for none (written).").tag(sync=True)

    def __init__(
        self,
        data: CircuitData,
        *,
        source: CircuitSource | None = None,
        pinned: Iterable[str] = (),
        groups: Iterable[dict[str, Any]] = (),
        **options: Any,
    ):
        if not isinstance(data, CircuitData):
            raise TypeError(
                f"data must be a CircuitData, got {type(data).__name__}; build the view with graph.widget()"
            )
        size = len(compact_json(data.to_json()).encode("utf-8"))
        cap = output_cap()
        if size > cap:
            raise ValueError(
                f"this graph's view would save {size:,} bytes with the notebook, over the output cap of {cap:,} bytes "
                f"({len(data.node_kind):,} nodes, {len(data.edge_src):,} edges); prune it first to keep it "
                f"interactive in a saved notebook, e.g. graph.prune(node_threshold=0.8, edge_threshold=0.98)"
                f".widget(), or raise the cap with interp_widgets.widgets.set_output_cap(nbytes)"
            )
        self._source = source
        ids = list(data.node_ids) or node_ids(data.node_kind, data.node_layer, data.node_pos, data.node_index)
        if len(ids) != len(data.node_kind):
            raise ValueError(f"node_ids has {len(ids)} ids for {len(data.node_kind)} nodes")
        self._ids = ids
        known = set(ids)
        pins = [str(p) for p in pinned]
        unknown = [p for p in pins if p not in known]
        if unknown:
            raise ValueError(f"pinned ids {unknown[:5]} are no nodes of the graph (graph.node_ids lists them)")
        super().__init__(**data.to_traits(), **options)
        with self.hold_sync():
            self.pinned = list(dict.fromkeys(pins))
            self.groups = _check_groups(list(groups), known)
        self.on_msg(self._on_message)
        self._handle = None
        self._refresh_pending = False
        self._pruned_cache = None
        self.observe(self._schedule_refresh, names=["pinned", "groups", "node_threshold", "edge_threshold", "selected"])

    @traitlets.validate("node_threshold", "edge_threshold")
    def _check_threshold(self, proposal):
        value = float(proposal["value"])
        if not (0 < value <= 1):
            raise ValueError(f"{proposal['trait'].name} must be in (0, 1], got {value} (1 and 1 show the whole graph)")
        return value

    @traitlets.validate("groups")
    def _check_groups_trait(self, proposal):
        ids = getattr(self, "_ids", None) or []
        return _check_groups(proposal["value"], set(ids), check_members=bool(ids))

    # ------------------------------------------------------------------ display
    def _ipython_display_(self) -> None:
        """Display the view and keep its output's handle, so the output's saved payload follows the view state (pins,
        groups, thresholds, selection): a notebook saved without widget state and reopened with no kernel shows
        them."""
        from IPython.display import display

        data, metadata = self._repr_mimebundle_()
        self._handle = display(data, metadata=metadata, raw=True, display_id=True)

    def _schedule_refresh(self, change=None) -> None:
        if self._handle is None or self._refresh_pending:
            return
        self._refresh_pending = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a plain script): refresh at once
            self._refresh_output()
            return
        loop.call_later(1.0, self._refresh_output)  # a slider drag refreshes the output once, after it

    def _refresh_output(self) -> None:
        self._refresh_pending = False
        if self._handle is not None:
            data, metadata = self._repr_mimebundle_()
            self._handle.update(data, metadata=metadata, raw=True)

    # ------------------------------------------------------------------ state
    def pin(self, *node_ids: str) -> None:
        """Pin nodes (by id); pinning twice keeps one copy.

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> view = example_graph().widget(); view.pin("0_7_1", "0_7_1"); view.pinned
            ['0_7_1']
        """
        unknown = [n for n in node_ids if n not in set(self._ids)]
        if unknown:
            raise ValueError(f"{unknown[:5]} are no nodes of the graph; ids look like {self._ids[:3]}")
        self.pinned = list(dict.fromkeys([*self.pinned, *node_ids]))

    def group(self, name: str, members: Iterable[str]) -> None:
        """Group nodes into a supernode called ``name`` (they are pinned too); a group of that name is replaced.

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> view = example_graph().widget(); view.group("start", ["E_10_0", "0_7_1"]); view.groups[0]["name"]
            'start'
        """
        members = [str(m) for m in members]
        self.pin(*members)
        groups = [g for g in self.groups if g["name"] != name]
        self.groups = [*groups, *_check_groups([{"name": str(name), "members": members}], set(self._ids))]

    def subgraph(self) -> dict[str, Any]:
        """What is pinned in the view: ``{"pinned": node ids, "groups": [{"name", "members"}]}``.
        ``AttributionGraph.subgraph()`` turns it into a graph.

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> example_graph().widget(pinned=["E_11_1"]).subgraph()["pinned"]
            ['E_11_1']
        """
        return {"pinned": list(self.pinned), "groups": [dict(g) for g in self.groups]}

    # ------------------------------------------------------------------ kernel messages
    def reply(self, content: dict[str, Any]) -> dict[str, Any]:
        """The answer to a message of the view: ``{"type": "detail", "id", "node"}`` gets the node's details;
        ``{"type": "intervene", "id", "nodes"}`` gets what the intervention needs or did. Errors travel as text.

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> view = example_graph().widget()
            >>> view.reply({"type": "detail", "id": 1, "node": "0_7_1"})["detail"]["contexts"][0]["tokens"]
            ['a', 'b']
            >>> view.reply({"type": "detail", "id": 2, "node": "9_9_9"})["error"]
            "'9_9_9' is no node of this graph"
        """
        kind = content.get("type")
        base = {"type": kind, "id": content.get("id")}
        if self._source is None:
            return {**base, "error": "this view has no graph in the kernel (it was built from saved data)"}
        if kind == "detail":
            node = str(content.get("node", ""))
            if node not in set(self._ids):
                return {**base, "node": node, "error": f"{node!r} is no node of this graph"}
            try:
                return {**base, "node": node, "detail": self._source.detail(node)}
            except (ValueError, KeyError, OSError) as exc:
                return {**base, "node": node, "error": str(exc)}
        if kind == "intervene":
            return {**base, **self._source.intervene(content)}
        return {**base, "error": f"unknown request {kind!r}"}

    def _on_message(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("type") in ("detail", "intervene"):
            self.send(self.reply(content))

    # ------------------------------------------------------------------ fallback
    def static_svg(self) -> str:
        """The graph as a picture (layers × positions, escaped labels): the pinned nodes and the most influential
        ones, with the strongest edges between them; the caption says how many.

        Example:
            >>> from interp_widgets.circuits import example_graph
            >>> svg = example_graph().replace(prompt_tokens=["<img src=x onerror=alert(1)>", "b"]).widget().static_svg()
            >>> "<img" in svg, "&lt;img" in svg
            (False, True)
        """
        esc = html.escape
        kind = np.asarray(self.node_kind, dtype=np.int64)
        layer = np.asarray(self.node_layer, dtype=np.int64)
        pos = np.asarray(self.node_pos, dtype=np.int64)
        influence = np.nan_to_num(np.asarray(self.node_influence, dtype=np.float64))
        n = len(kind)
        always = set(np.flatnonzero((kind == 2) | (kind == 3)).tolist())
        index = {node_id: i for i, node_id in enumerate(self._ids)}
        always |= {index[p] for p in self.pinned if p in index}
        src, dst = np.asarray(self.edge_src, np.int64), np.asarray(self.edge_dst, np.int64)
        weights = np.frombuffer(bytes(self.edge_weights), dtype="<f2").astype(np.float32)
        kept_nodes, kept_edges, what = self._pruned()
        order = np.argsort(-np.where(kept_nodes, influence, -np.inf), kind="stable")
        order = order[kept_nodes[order]]
        shown = sorted(always | set(order[: max(0, STATIC_NODES - len(always))].tolist()))
        keep = np.zeros(n, bool)
        keep[shown] = True
        inside = np.flatnonzero(keep[src] & keep[dst] & kept_edges)
        strongest = inside[np.argsort(-np.abs(weights[inside]), kind="stable")[:STATIC_EDGES]]
        n_pos = max(len(self.tokens), 1)
        rows = self.n_layers + 3  # tokens, layers 0..n-1, (the error row shares its layer), logits
        cell_w, cell_h, left, top = max(24.0, min(60.0, 900.0 / n_pos)), 22.0, 30.0, 40.0
        width, height = left + cell_w * n_pos + 20, top + cell_h * rows + 60

        slots: dict[tuple[int, int], list[int]] = {}
        for i in shown:  # the nodes of one cell (layer, position) side by side
            slots.setdefault((int(layer[i]), int(pos[i])), []).append(i)
        offset = {}
        for members in slots.values():
            for j, i in enumerate(members):
                offset[i] = (j + 0.5) / len(members) - 0.5

        def xy(i: int) -> tuple[float, float]:
            row = int(layer[i]) + 1 if kind[i] != 2 else 0
            x = left + (pos[i] + 0.5 + 0.8 * offset.get(i, 0.0)) * cell_w
            return x, top + (rows - 1 - row + 0.5) * cell_h

        top_w = float(np.abs(weights[strongest]).max()) if len(strongest) else 1.0
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="attribution graph" '
            f'font-family="system-ui, sans-serif" font-size="11">',
            f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff" rx="6"/>',
            f'<text x="8" y="16" font-weight="bold">{esc(self._caption())}</text>',
            f'<text x="8" y="30" fill="#57606a">{esc(what)}: {len(shown)} of {n} nodes (pinned, tokens, logits and '
            f"the most influential) and the {len(strongest)} strongest of their {len(inside)} edges; run the cell to "
            f"explore every edge</text>",
        ]
        paths: dict[tuple[bool, int], list[str]] = {}  # edges batched by sign and width (a small picture)
        for e in strongest.tolist():
            (x1, y1), (x2, y2) = xy(int(src[e])), xy(int(dst[e]))
            w = float(weights[e])
            bucket = min(3, int(4 * math.sqrt(abs(w) / (top_w or 1.0))))
            paths.setdefault((w >= 0, bucket), []).append(f"M{x1:.0f} {y1:.0f}L{x2:.0f} {y2:.0f}")
        for (positive, bucket), segments in sorted(paths.items()):
            colour = "#2166ac" if positive else "#b2182b"
            parts.append(f'<path d="{"".join(segments)}" fill="none" stroke="{colour}" '
                         f'stroke-width="{0.4 + 0.8 * bucket:.1f}" stroke-opacity="0.45"/>')  # fmt: skip
        top_inf = float(influence[shown].max()) if shown else 1.0
        pinned = set(self.pinned)
        labels = self.node_labels
        named = set(order[:STATIC_LABELS].tolist()) | {index[p] for p in self.pinned if p in index}
        for i in shown:
            x, y = xy(i)
            r = 2.0 + 4.0 * math.sqrt(max(influence[i], 0.0) / (top_inf or 1.0))
            ring = ' stroke="#1f2328" stroke-width="1.5"' if self._ids[i] in pinned else ""
            parts.append(f'<circle cx="{x:.0f}" cy="{y:.0f}" r="{r:.1f}" fill="{_KIND_COLOURS[int(kind[i])]}"{ring}/>')
            if i in named and kind[i] in (0, 4) and i < len(labels) and labels[i]:
                parts.append(f'<text x="{x + r + 2:.0f}" y="{y + 3:.0f}" font-size="9">{esc(labels[i][:40])}</text>')
        for p, token in enumerate(self.tokens):
            x = left + (p + 0.5) * cell_w
            parts.append(f'<text x="{x:.1f}" y="{top + cell_h * rows + 14:.1f}" text-anchor="middle">'
                         f"{esc(token[:12])}</text>")  # fmt: skip
        legend = " ".join(f"{name}" for name in KINDS[:4])
        parts.append(f'<text x="8" y="{height - 10:.0f}" fill="#57606a">kinds: {esc(legend)} (blue, grey, green, '
                     "red); edges blue +, red −; tokens at the bottom, logits on top</text>")  # fmt: skip
        parts.append("</svg>")
        return "".join(parts)

    def _pruned(self) -> tuple[np.ndarray, np.ndarray, str]:
        """The nodes and edges the view's thresholds keep (the graph in the kernel prunes, as the browser does), and
        what the picture shows; everything at thresholds of 1 or without a graph in the kernel."""
        n, m = len(self.node_kind), len(self.edge_src)
        thresholds = (self.node_threshold, self.edge_threshold)
        prune = getattr(self._source, "pruned", None)
        if thresholds == (1.0, 1.0) or prune is None:
            return np.ones(n, bool), np.ones(m, bool), "the graph"
        if self._pruned_cache is None or self._pruned_cache[0] != thresholds:
            nodes, edges = prune(*thresholds)
            self._pruned_cache = (thresholds, np.asarray(nodes, bool), np.asarray(edges, bool))
        _, nodes, edges = self._pruned_cache
        return nodes, edges, f"pruned at node threshold {thresholds[0]:g}, edge threshold {thresholds[1]:g}"

    def _caption(self) -> str:
        logits = ", ".join(f"{t!r} {p:.2f}" for t, p in zip(self.logit_tokens[:3], self.logit_probs[:3]))
        return f"Attribution graph, {self.n_layers} layers × {len(self.tokens)} positions; logits {logits}"

    def __repr__(self) -> str:
        return (
            f"CircuitView({len(self.node_kind)} nodes, {len(self.edge_src)} edges, {len(self.pinned)} pinned, "
            f"{len(self.groups)} groups)"
        )
