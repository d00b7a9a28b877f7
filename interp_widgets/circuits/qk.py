"""``qk_attribution``: why a head attends where it does, in the terms of an attribution graph's nodes.

A graph freezes attention, so its edges say nothing about a pattern. This takes one head ``h`` of one block and one
(query, key) pair of positions and writes the head's pre-softmax score there as a sum over pairs of nodes:

    score(q, k) = scaling · Σᵢⱼ Qᵢ · Kⱼ,  Qᵢ = RoPE_q(W_Q,h cᵢ(q)),  Kⱼ = RoPE_k(W_K,g cⱼ(k))

where ``cᵢ(p)`` is node i's direct contribution to the attention input (after the frozen norm) at position p in the
local replacement model (attention and norms frozen, every feature held: the graph's edges are made of the same
paths), and ``g`` the key head of ``h`` (grouped-query attention). The nodes are the prompt's active features and
error nodes of earlier blocks and its tokens, plus one ``"constant"`` node per side that carries biases, b_dec and
position 0's MLP outputs. The model being linear in the sources, the table sums to the score exactly (to float
error). Contributions are measured by batched forward passes, one source per batch row, stopped at the block.

Supported: blocks with separate ``q_proj`` / ``k_proj`` and rotary or no position embeddings given to the attention
module (Llama, Mistral, Qwen2, SmolLM2, ...). Query/key norms (Qwen3, Gemma 3) are not linear: refused.

Example:
    >>> from interp_widgets.circuits import TranscoderSet
    >>> from interp_widgets.concepts import Transcoder
    >>> tcs = TranscoderSet.fit(chat_lm, chat_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1,
    ...                         progress=False))
    >>> table = qk_attribution(chat_lm, chat_tokenizer, "The cat sat on the", tcs, layer=1, head=0, query_pos=4,
    ...                        key_pos=2)
    >>> bool(abs(table.matrix.sum() - table.score) < 1e-4), table.to_dataframe().columns.tolist()[:3]
    (True, ['query_node', 'key_node', 'contribution'])
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import numpy as np
import torch

from interp_widgets.circuits.attribution import _check_inputs, _decoder, _frozen, _record, _skip, graph_prompt
from interp_widgets.circuits.cross_layer import CrossLayerTranscoderSet
from interp_widgets.circuits.graph import AttributionGraph
from interp_widgets.circuits.transcoders import TranscoderSet, transcoder_points
from interp_widgets.concepts.activations import _StopForward
from interp_widgets.layers import UnsupportedModelError, register, register_edit, resolve_layer
from interp_widgets.validation import check_int

__all__ = ["QKAttribution", "qk_attribution"]


@dataclass(frozen=True, eq=False)
class QKAttribution:
    """The pre-softmax ``score`` of head ``head`` of block ``layer`` at (``query_pos``, ``key_pos``), written as
    ``matrix[i, j]``: query-side node ``query_nodes[i]`` times key-side node ``key_nodes[j]`` (graph node ids, and
    ``"constant"``). ``matrix.sum()`` equals ``score``.

    Example:
        >>> table = QKAttribution(np.array([[1.0, -0.5], [0.25, 0.0]]), ["3_7_2", "constant"], ["E_5_1", "constant"],
        ...                       0.75, layer=4, head=1, query_pos=2, key_pos=1)
        >>> table.to_dataframe()[["query_node", "key_node"]].values[0].tolist(), float(table.to_dataframe()["contribution"][0])
        (['3_7_2', 'E_5_1'], 1.0)
    """

    matrix: np.ndarray
    query_nodes: list[str]
    key_nodes: list[str]
    score: float
    layer: int
    head: int
    query_pos: int
    key_pos: int

    def to_dataframe(self, top: int | None = None):
        """The pairs by decreasing |contribution| (``top`` of them; None: all non-zero), a pandas DataFrame with
        ``query_node``, ``key_node`` and ``contribution``.

        Example:
            >>> QKAttribution(np.eye(2), ["a", "b"], ["c", "d"], 2.0, 0, 0, 1, 0).to_dataframe()["key_node"].tolist()
            ['c', 'd']
        """
        import pandas as pd

        flat = self.matrix.reshape(-1)
        order = np.argsort(-np.abs(flat), kind="stable")
        order = order[flat[order] != 0] if top is None else order[:top]
        rows, cols = np.divmod(order, self.matrix.shape[1])
        return pd.DataFrame({
            "query_node": [self.query_nodes[i] for i in rows],
            "key_node": [self.key_nodes[j] for j in cols],
            "contribution": flat[order].astype(float),
        })  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"QKAttribution(layer {self.layer}, head {self.head}, query {self.query_pos} -> key {self.key_pos}: "
            f"score {self.score:.4g} over {len(self.query_nodes)} x {len(self.key_nodes)} nodes)"
        )


def _attention_parts(model, layer: int):
    attention = resolve_layer(model, f"layer:{layer}.attn_out").module
    module = sys.modules[type(attention).__module__]
    rotate_half = getattr(module, "rotate_half", None)
    if not all(hasattr(attention, name) for name in ("q_proj", "k_proj", "head_dim", "scaling")):
        raise UnsupportedModelError(
            f"qk_attribution reads q_proj, k_proj, head_dim and scaling of the attention module; "
            f"{type(attention).__name__} lacks some (Llama-family attention has them)"
        )
    if any(getattr(attention, name, None) is not None for name in ("q_norm", "k_norm")):
        raise UnsupportedModelError(
            f"{type(attention).__name__} normalises its queries and keys (q_norm / k_norm), which is not linear, so "
            "the score does not split into node pairs; qk_attribution supports attention without them"
        )
    return attention, rotate_half


def qk_attribution(
    model,
    tokenizer,
    prompt,
    transcoders: TranscoderSet | CrossLayerTranscoderSet,
    *,
    layer: int,
    head: int,
    query_pos: int,
    key_pos: int,
    batch_size: int = 64,
) -> QKAttribution:
    """The QK attribution of head ``head`` of block ``layer`` at (``query_pos``, ``key_pos``) of ``prompt`` (a
    text, token ids, or an :class:`AttributionGraph`, whose prompt is used): the module docstring says what it is.

    Positions index the graph's tokens (a prompt with no leading special token gets a BOS, as the graph does).

    Example:
        >>> from interp_widgets.circuits import TranscoderSet
        >>> from interp_widgets.concepts import Transcoder
        >>> tcs = TranscoderSet.fit(chat_lm, chat_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1,
        ...                         progress=False))
        >>> qk_attribution(chat_lm, chat_tokenizer, "The cat sat", tcs, layer=1, head=2, query_pos=3, key_pos=3)
        QKAttribution(layer 1, head 2, query 3 -> key 3: ...)
    """
    _check_inputs(model, transcoders)
    ids, _ = graph_prompt(tokenizer, prompt.token_ids if isinstance(prompt, AttributionGraph) else prompt)
    n_pos, n_layers = ids.shape[1], transcoders.n_layers
    check_int("batch_size", batch_size, minimum=1)
    check_int("layer", layer)
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer {layer} is out of range; this model has {n_layers} blocks (0..{n_layers - 1})")
    config = model.config
    n_heads = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
    if not 0 <= head < n_heads:
        raise ValueError(f"head {head} does not exist; block {layer} has {n_heads} query heads (0..{n_heads - 1})")
    for name, pos in (("query_pos", query_pos), ("key_pos", key_pos)):
        if not 0 <= pos < n_pos:
            raise ValueError(f"{name} {pos} is outside the prompt's {n_pos} tokens (0..{n_pos - 1})")
    if key_pos > query_pos:
        raise ValueError(
            f"key_pos {key_pos} comes after query_pos {query_pos}: a causal head attends only to earlier keys"
        )
    attention, rotate_half = _attention_parts(model, layer)
    kv_head = head // (n_heads // n_kv)
    points = [transcoder_points(model, i, transcoders.input_point) for i in range(n_layers)]
    with _frozen(model, ids):
        state = _record(model, ids, transcoders)
        sources = _sources(state, layer, query_pos, tokens=ids[0].tolist())
        captured = _contributions(model, ids, state, points, attention, layer, sources, batch_size)
    device = state.final.device
    contributions, (cos, sin) = captured
    constant = contributions[0]
    parts = contributions[1:] - constant
    d_head = attention.head_dim

    def side(position: int, proj, index: int) -> torch.Tensor:
        vectors = torch.cat([parts[:, position], constant[None, position]])  # (n + 1, d): the constant last
        projected = vectors @ proj.weight.T
        if proj.bias is not None:
            projected[-1] += proj.bias
        projected = projected[:, index * d_head : (index + 1) * d_head]
        if cos is None:
            return projected
        c, s = cos[0, position].to(device), sin[0, position].to(device)
        return projected * c + rotate_half(projected) * s

    with torch.no_grad():
        queries = side(query_pos, attention.q_proj, head)
        keys = side(key_pos, attention.k_proj, kv_head)
    matrix = (queries @ keys.T * attention.scaling).double().cpu().numpy()
    names = [*sources.names, "constant"]
    query_rows = [i for i, pos in enumerate([*sources.positions, 0]) if pos <= query_pos]
    key_rows = [i for i, pos in enumerate([*sources.positions, 0]) if pos <= key_pos]
    matrix = matrix[np.ix_(query_rows, key_rows)]
    score = float((queries.sum(0) @ keys.sum(0)) * attention.scaling)
    return QKAttribution(
        matrix=matrix,
        query_nodes=[names[i] for i in query_rows],
        key_nodes=[names[i] for i in key_rows],
        score=score,
        layer=layer,
        head=head,
        query_pos=query_pos,
        key_pos=key_pos,
    )


@dataclass
class _SourceList:
    names: list[str]
    positions: list[int]
    kinds: list[tuple]  # ("token", pos) | ("feature", layer, pos, feature) | ("error", layer, pos)


def _sources(state, layer: int, last: int, tokens: list[int]) -> _SourceList:
    found = _SourceList([], [], [])
    for pos in range(last + 1):
        found.names.append(f"E_{tokens[pos]}_{pos}")
        found.positions.append(pos)
        found.kinds.append(("token", pos))
    for src_layer in range(layer):
        for pos, feature in torch.nonzero(state.acts[src_layer][: last + 1]).tolist():
            found.names.append(f"{src_layer}_{feature}_{pos}")
            found.positions.append(pos)
            found.kinds.append(("feature", src_layer, pos, feature))
        for pos in range(1, last + 1):
            found.names.append(f"{src_layer}_-1_{pos}")
            found.positions.append(pos)
            found.kinds.append(("error", src_layer, pos))
    return found


def _contributions(model, ids, state, points, attention, layer, sources: _SourceList, batch_size: int):
    """The attention input of block ``layer`` (n_sources + 1, T, d) with nothing on (row 0) and each source alone,
    and the rotary (cos, sin) given to the attention module (None, None without)."""
    device = state.final.device
    n_pos, width = state.final.shape
    rows = [None, *sources.kinds]
    out = torch.zeros(len(rows), n_pos, width, device=device)
    rotary: list = [None, None]
    base = []
    for src_layer in range(layer):
        constant = state.weights[src_layer]["b_dec"].expand(n_pos, width).clone()
        constant[0] = state.constants[src_layer][0]  # position 0's MLP output minus its skip term
        base.append(constant)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        b = len(chunk)
        token_gate = torch.zeros(b, n_pos, 1, device=device)
        writes = [torch.zeros(b, n_pos, width, device=device) for _ in range(layer)]
        for r, kind in enumerate(chunk):
            if kind is None:
                continue
            if kind[0] == "token":
                token_gate[r, kind[1]] = 1.0
            elif kind[0] == "feature":  # to its own layer's MLP output, and to later ones for a cross-layer set
                _, src_layer, pos, feature = kind
                for target in range(src_layer, layer):
                    decoder = _decoder(state.weights, src_layer, target)
                    if decoder is not None:
                        writes[target][r, pos] = state.acts[src_layer][pos, feature] * decoder[feature]
            else:
                _, src_layer, pos = kind
                writes[src_layer][r, pos] = state.errors[src_layer][pos]
        out[start : start + b] = _attention_input(model, ids, state, points, base, attention, layer, token_gate,
                                                  writes, rotary)  # fmt: skip
    return out, tuple(rotary)


def _attention_input(model, ids, state, points, base, attention, layer, token_gate, writes, rotary) -> torch.Tensor:
    """One batch of the replacement model up to block ``layer``'s attention: token embeddings gated by
    ``token_gate`` (b, T, 1), each earlier MLP output its base plus live skip plus ``writes`` (b, T, d); returns the
    attention's input (b, T, d) and fills ``rotary`` with its (cos, sin)."""
    captured: dict = {}
    live: dict = {}

    def capture(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        captured["x"] = hidden.detach()
        embeddings = kwargs.get("position_embeddings")
        if embeddings is not None:
            rotary[:] = [t.detach() for t in embeddings]
        raise _StopForward

    def mlp_output(i: int):
        w = state.weights[i]
        return lambda h: base[i] + _skip(w, live[i]) + writes[i]

    handles = [register_edit(resolve_layer(model, "layer:0.resid_pre"), lambda h: h * token_gate)]
    try:
        for i in range(layer):
            x_point, y_point = points[i]
            handles.append(register(x_point, lambda m, inputs, h, i=i: live.__setitem__(i, h)))
            handles.append(register_edit(y_point, mlp_output(i)))
        handles.append(attention.register_forward_pre_hook(capture, with_kwargs=True))
        with torch.no_grad(), contextlib.suppress(_StopForward):
            model(input_ids=ids.to(token_gate.device).expand(len(token_gate), -1))
    finally:
        for handle in handles:
            handle.remove()
    return captured["x"]
