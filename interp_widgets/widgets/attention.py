"""Attention patterns view: a head view (one layer, any subset of heads, heatmap or lines between query and key
tokens) and a model view (layers × heads small multiples), for texts of thousands of tokens.

The notebook never receives every head. The live view asks the kernel for the layer and head it shows (an anywidget
custom message ``{"type": "request", "layer", "head"}``, answered with the ``(queries, keys)`` probabilities as one
float16 little-endian buffer), and keeps the last heads in a small cache. What is saved with the notebook, and what
the exported page holds, is only:

- the heads the user **pinned** (the "Pin" button or :meth:`AttentionWidget.pin`), stored compactly as the
  **top-32 keys of every query** (``pinned_keys`` int16/int32 and ``pinned_weights`` float32; the other weights are
  dropped, and the view says so);
- a small overview for the model view: every head max-pooled to ``thumb_size`` × ``thumb_size`` cells, quantised to
  0..127 (``thumbnails``, int8).

The static fallback is the mean over heads of the chosen layer (downsampled beyond 80 tokens), with escaped token
labels.

Example:
    >>> from interp_widgets.attribution import attention_patterns
    >>> w = attention_patterns(lm, lm_tokenizer, "The room was clean.", progress=False).widget()
    >>> w.pin(1, 0)
    >>> w.pinned, w.pinned_keys.shape[2] == len(w.tokens)  # fewer than 32 keys: all kept
    ([{'layer': 1, 'head': 0}], True)
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, Sequence

import numpy as np
import traitlets

from interp_widgets.widgets.view_data import AttentionData, PinnedHeadsPart
from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._colour import hex_colour, score_rgb
from interp_widgets.widgets._svg import SvgFigure

#: Keys kept per query for a pinned head.
PINNED_TOP_K = 32
#: Cells per side of a model-view thumbnail.
THUMB_SIZE = 16
#: Rows and columns of the static picture (longer inputs are max-pooled to this).
STATIC_CELLS = 80
AGGREGATIONS = ("mean", "max", "rollout")


class AttentionSource(Protocol):
    """What the view reads (:class:`interp_widgets.attribution.AttentionPatterns` is one)."""

    tokens: list[str]
    key_tokens: list[str]
    n_kv_heads: int
    kind: str
    layer_names: list[str]
    model_name: str
    generated_mask: Any

    @property
    def n_layers(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    def head(self, layer: int, head: int) -> np.ndarray: ...

    def aggregate(self, layer: int, how: str = "mean") -> np.ndarray: ...


def _pool(matrix: np.ndarray, size: int) -> np.ndarray:
    """Max-pool ``matrix`` to at most ``size`` × ``size`` cells (each cell the maximum of its block)."""
    rows, cols = matrix.shape
    r_edges = np.linspace(0, rows, min(rows, size) + 1).astype(int)
    c_edges = np.linspace(0, cols, min(cols, size) + 1).astype(int)
    return np.maximum.reduceat(np.maximum.reduceat(matrix, r_edges[:-1], axis=0), c_edges[:-1], axis=1)


def top_keys(matrix: np.ndarray, k: int = PINNED_TOP_K) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest weights of each query row and their key indices, ``(keys, weights)`` of shape
    ``(queries, min(k, n_keys))``, in decreasing weight order.

    Example:
        >>> keys, weights = top_keys(np.array([[0.1, 0.7, 0.2], [1.0, 0.0, 0.0]]), k=2)
        >>> keys.tolist(), weights.astype(float).round(2).tolist()
        ([[1, 2], [0, 1]], [[0.7, 0.2], [1.0, 0.0]])
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    k = min(int(k), matrix.shape[1])
    part = np.argpartition(-matrix, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(matrix, part, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    keys = np.take_along_axis(part, order, axis=1)
    # ties (e.g. the zeros of a causal mask) in ascending key order, so the result is deterministic
    weights = np.take_along_axis(vals, order, axis=1)
    return keys, weights


class AttentionWidget(InterpWidget, data=AttentionData):
    """Head view and model view of attention patterns (see the module docstring for what travels and what is saved).

    Hover a token to focus it (its query row; the token strip shows where it attends), click to lock the focus,
    click again or press Esc to unlock. Switch layers, heads (grouped by their KV head) and aggregations
    (mean, max, rollout) in the browser; each switch asks the kernel for that head only.

    Example:
        >>> from interp_widgets.attribution import attention_patterns
        >>> w = AttentionWidget(attention_patterns(lm, lm_tokenizer, "Hi there", progress=False), layer=1)
        >>> w.reply({"type": "request", "id": 3, "layer": 1, "head": 0})[0]["shape"] == [len(w.tokens)] * 2
        True
        >>> w.reply({"type": "request", "id": 4, "layer": 7, "head": 0})[0]["error"]
        'layer 7 does not exist: the model has 2 attention layers (use 0..1, or negative indices from the end).'
    """

    _payload_schema: ClassVar[dict[str, Any]] = {
        "pinned": {"list": {"object": {"layer": "int", "head": {"oneOf": ["int", {"enum": list(AGGREGATIONS)}]}}}},
    }

    view = traitlets.Unicode("head", help="'head' or 'model' (written by the view).").tag(sync=True)
    layer = traitlets.Int(0, help="Layer shown in the head view (written).").tag(sync=True)
    heads = traitlets.List(traitlets.Int(), [0], help="Heads shown (written).").tag(sync=True)
    aggregate = traitlets.Unicode("", help="'' (the heads), 'mean', 'max' or 'rollout' (written).").tag(sync=True)
    pattern_style = traitlets.Unicode(
        "heatmap", help="'heatmap' or 'lines' (written; `style` is ipywidgets' StyleModel reference)."
    ).tag(sync=True)
    focus = traitlets.Int(-1, help="Focused query token, -1: none (written).").tag(sync=True)
    locked = traitlets.Bool(False, help="The focus is locked by a click (written).").tag(sync=True)

    def __init__(self, patterns: AttentionSource, *, pin: Sequence[tuple[int, int | str]] = (), **options: Any):
        self._source = patterns
        n_layers, n_heads = patterns.n_layers, patterns.n_heads
        thumbs = np.zeros((n_layers, n_heads, 0, 0), dtype=np.int8)
        for layer in range(n_layers):
            for head in range(n_heads):
                pooled = _pool(patterns.head(layer, head).astype(np.float32), THUMB_SIZE)
                if thumbs.shape[2] == 0:
                    thumbs = np.zeros((n_layers, n_heads) + pooled.shape, dtype=np.int8)
                thumbs[layer, head] = np.rint(np.clip(pooled, 0, 1) * 127)
        data = AttentionData(
            tokens=list(patterns.tokens), key_tokens=list(patterns.key_tokens),
            generated_mask=np.asarray(patterns.generated_mask, dtype=bool), n_layers=n_layers, n_heads=n_heads,
            n_kv_heads=int(patterns.n_kv_heads), layer_names=list(patterns.layer_names), kind=patterns.kind,
            model_name=patterns.model_name, thumbnails=thumbs,
            pins=PinnedHeadsPart(pinned=[], pinned_keys=np.zeros((0, len(patterns.tokens), 0), dtype=np.int16),
                                 pinned_weights=np.zeros((0, len(patterns.tokens), 0), dtype=np.float32)))  # fmt: skip
        super().__init__(**data.to_traits(), **options)
        self._matrix(self.layer, "mean")  # a bad layer= fails here, with the source's message
        for layer, head in pin:
            self.pin(layer, head)
        self.on_msg(self._on_message)

    # ------------------------------------------------------------------ data
    def _matrix(self, layer: int, head: int | str) -> np.ndarray:
        if isinstance(head, str):
            return self._source.aggregate(layer, head)
        return self._source.head(layer, head)

    def reply(self, content: dict) -> tuple[dict, list[bytes]]:
        """The answer to a message of the view: for ``{"type": "request", "id", "layer", "head"}`` (``head`` an
        index or ``"mean"`` / ``"max"`` / ``"rollout"``) the pattern as float16 bytes; errors travel as text.

        Example:
            >>> from interp_widgets.attribution import attention_patterns
            >>> w = attention_patterns(lm, lm_tokenizer, "Hi there", progress=False).widget()
            >>> content, buffers = w.reply({"type": "request", "id": 1, "layer": 0, "head": "mean"})
            >>> content["dtype"], len(buffers[0]) == 2 * len(w.tokens) ** 2
            ('float16', True)
        """
        base = {"type": "pattern", "id": content.get("id"), "layer": content.get("layer"), "head": content.get("head")}
        try:
            matrix = np.ascontiguousarray(self._matrix(int(content["layer"]), content["head"]), dtype="<f2")
        except (IndexError, ValueError, TypeError, KeyError) as exc:
            return {**base, "error": str(exc).strip("'\"")}, []
        return {**base, "dtype": "float16", "shape": list(matrix.shape)}, [matrix.tobytes()]

    def _on_message(self, widget, content, buffers) -> None:
        if not isinstance(content, dict):
            return
        if content.get("type") == "request":
            reply, out = self.reply(content)
            self.send(reply, out)
        elif content.get("type") == "pin":
            try:
                self.pin(int(content["layer"]), content["head"])
            except (IndexError, ValueError, TypeError, KeyError) as exc:
                self.send({"type": "pin-error", "error": str(exc).strip("'\"")})
        elif content.get("type") == "unpin":
            self.unpin(int(content["layer"]), content["head"])

    def pin(self, layer: int, head: int | str) -> None:
        """Keep this head (or aggregation) in the saved notebook and exported page, as its top-32 keys per query.

        Example:
            >>> from interp_widgets.attribution import attention_patterns
            >>> w = attention_patterns(lm, lm_tokenizer, "Hi there", progress=False).widget()
            >>> w.pin(0, "mean"); w.pin(0, "mean"); w.pinned  # pinning twice keeps one copy
            [{'layer': 0, 'head': 'mean'}]
            >>> w.pin(0, 5)
            Traceback (most recent call last):
              ...
            IndexError: head 5 does not exist: each layer has 2 query heads (use 0..1).
        """
        if isinstance(head, str) and head not in AGGREGATIONS:
            raise ValueError(f"head must be a head index or one of {AGGREGATIONS}, got {head!r}")
        layer = int(layer) % self.n_layers if -self.n_layers <= int(layer) < self.n_layers else int(layer)
        matrix = self._matrix(layer, head if isinstance(head, str) else int(head))
        entry = {"layer": layer, "head": head if isinstance(head, str) else int(head)}
        if entry in self.pinned:
            return
        keys, weights = top_keys(matrix, self.pinned_top_k)
        old_k = self.pinned_keys.shape[2] if len(self.pinned) else keys.shape[1]
        if len(self.pinned) and old_k != keys.shape[1]:
            raise ValueError("pinned heads must have the same number of keys")
        with self.hold_sync():
            self.pinned_keys = np.concatenate([self.pinned_keys.reshape(-1, *keys.shape).astype(np.int32), keys[None]])
            self.pinned_weights = np.concatenate([self.pinned_weights.reshape(-1, *weights.shape), weights[None]])
            self.pinned = [*self.pinned, entry]

    def unpin(self, layer: int, head: int | str) -> None:
        """Drop a pinned head.

        Example:
            >>> from interp_widgets.attribution import attention_patterns
            >>> w = attention_patterns(lm, lm_tokenizer, "Hi there", progress=False).widget(pin=[(0, 1)])
            >>> w.unpin(0, 1); w.pinned, w.pinned_keys.shape[0]
            ([], 0)
        """
        entry = {"layer": int(layer), "head": head}
        if entry not in self.pinned:
            return
        keep = [i for i, e in enumerate(self.pinned) if e != entry]
        with self.hold_sync():
            self.pinned_keys = self.pinned_keys[keep]
            self.pinned_weights = self.pinned_weights[keep]
            self.pinned = [self.pinned[i] for i in keep]

    # ------------------------------------------------------------------ fallback
    def static_svg(self) -> str:
        """The mean over heads of the chosen layer as a heatmap (max-pooled to 80 × 80 cells beyond 80 tokens).

        Example:
            >>> from interp_widgets.attribution import attention_patterns
            >>> w = attention_patterns(lm, lm_tokenizer, "<b>bold</b>", progress=False).widget()
            >>> svg = w.static_svg(); "<b>" in svg, "&lt;" in svg
            (False, True)
        """
        matrix = self._source.aggregate(self.layer, "mean").astype(np.float32)
        pooled = _pool(matrix, STATIC_CELLS)
        top = float(pooled.max()) or 1.0
        n_q, n_k = matrix.shape
        figure = SvgFigure(label=f"attention of layer {self.layer}, mean over heads")
        figure.text(
            f"Attention, layer {self.layer} of {self.n_layers} ({self.kind}), mean over {self.n_heads} heads "
            f"({self.n_kv_heads} KV heads): {n_q} queries × {n_k} keys",
            bold=True,
        )
        if pooled.shape != matrix.shape:
            figure.text(
                f"each cell is the maximum of a block of about {n_q / pooled.shape[0]:.0f} × "
                f"{n_k / pooled.shape[1]:.0f} weights (rows: queries, columns: keys)"
            )
            labels = [f"{int(i * n_q / pooled.shape[0])}" for i in range(pooled.shape[0])]
            key_names = [f"{int(j * n_k / pooled.shape[1])}" for j in range(pooled.shape[1])]
        else:
            labels, key_names = list(self.tokens), list(self.key_tokens)
        cells = [[(hex_colour(score_rgb(float(v), top, signed=False)),
                   f"{labels[r]} → {key_names[c]}: {float(v):.3f}") for c, v in enumerate(row)]
                 for r, row in enumerate(pooled)]  # fmt: skip
        figure.heatmap(cells, labels)
        figure.legend(top, signed=False, title="attention weight")
        figure.text("Only pinned heads are kept in a saved notebook; run the cell to explore every layer and head.")
        return figure.render()

    def __repr__(self) -> str:
        return (
            f"AttentionWidget({self.kind} attention, {self.n_layers} layers × {self.n_heads} heads "
            f"({self.n_kv_heads} KV heads), {len(self.tokens)} tokens, layer={self.layer}, heads={self.heads}, "
            f"pinned={len(self.pinned)})"
        )
