"""AttentionWidget: what travels (one head per request, float16), what is saved (pinned heads as top-32 keys per
query, thumbnails), the kernel message protocol, the static fallback (mean over heads, escaped text), bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ipywidgets.embed import dependency_state, embed_data

from interp_widgets.attribution.patterns import AttentionPatterns
from interp_widgets.widgets import AttentionWidget
from interp_widgets.widgets.attention import top_keys


def _patterns(n=300, layers=3, heads=6, kv=2, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.tril(np.ones((n, n), dtype=bool))
    weights = []
    for _ in range(layers):
        logits = np.where(mask, rng.normal(size=(heads, n, n)) * 3, -np.inf)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        weights.append((w / w.sum(-1, keepdims=True)).astype(np.float16))
    tokens = [f"<t{i}>" for i in range(n)]
    return AttentionPatterns(tokens=tokens, weights=weights, n_kv_heads=kv)


def _saved_bytes(widget) -> int:
    state = embed_data(views=[widget], state=dependency_state([widget], drop_defaults=False), drop_defaults=False)
    return len(json.dumps(state["manager_state"], separators=(",", ":")).encode())


def test_reply_sends_the_exact_float16_head_and_errors_as_text():
    p = _patterns(n=40)
    w = AttentionWidget(p)
    content, buffers = w.reply({"type": "request", "id": 7, "layer": 2, "head": 5})
    assert content == {"type": "pattern", "id": 7, "layer": 2, "head": 5, "dtype": "float16", "shape": [40, 40]}
    np.testing.assert_array_equal(np.frombuffer(buffers[0], dtype="<f2").reshape(40, 40), p.head(2, 5))
    content, buffers = w.reply({"type": "request", "id": 8, "layer": 1, "head": "max"})
    np.testing.assert_array_equal(np.frombuffer(buffers[0], dtype="<f2").reshape(40, 40), p.aggregate(1, "max"))
    assert w.reply({"type": "request", "id": 9, "layer": 3, "head": 0})[0]["error"].startswith("layer 3 does not exist")
    assert w.reply({"type": "request", "id": 9, "layer": 0, "head": 6})[0]["error"].startswith("head 6 does not exist")
    assert "unknown how 'median'" in w.reply({"type": "request", "id": 9, "layer": 0, "head": "median"})[0]["error"]


def test_messages_from_the_view_are_answered_and_pin(monkeypatch):
    w = AttentionWidget(_patterns(n=20))
    sent = []
    monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append((content, buffers)))
    w._on_message(w, {"type": "request", "id": 1, "layer": 0, "head": 3}, [])
    assert sent[-1][0]["shape"] == [20, 20] and len(sent[-1][1][0]) == 20 * 20 * 2
    w._on_message(w, {"type": "pin", "layer": 1, "head": 2}, [])
    assert w.pinned == [{"layer": 1, "head": 2}]
    w._on_message(w, {"type": "pin", "layer": 9, "head": 2}, [])
    assert sent[-1][0]["type"] == "pin-error" and "layer 9 does not exist" in sent[-1][0]["error"]
    w._on_message(w, {"type": "unpin", "layer": 1, "head": 2}, [])
    assert w.pinned == []


def test_pinned_heads_keep_the_top_32_keys_of_every_query():
    p = _patterns(n=300)
    w = AttentionWidget(p, pin=[(0, 1), (2, "mean")])
    assert w.pinned == [{"layer": 0, "head": 1}, {"layer": 2, "head": "mean"}]
    assert w.pinned_keys.shape == (2, 300, 32) and w.pinned_keys.dtype == np.int16
    head = p.head(0, 1).astype(np.float32)
    keys, weights = w.pinned_keys[0], w.pinned_weights[0]
    np.testing.assert_array_equal(np.take_along_axis(head, keys.astype(np.int64), 1), weights)
    # they are the 32 largest of each row
    np.testing.assert_array_equal(np.sort(weights, 1)[:, ::-1], -np.sort(-head, 1)[:, :32])
    k, v = top_keys(np.array([[0.1, 0.7, 0.2]]), k=32)  # fewer keys than k: all of them
    assert k.tolist() == [[1, 2, 0]]


def test_saved_state_holds_only_pinned_heads_and_thumbnails():
    p = _patterns(n=300, layers=3, heads=6)
    plain = AttentionWidget(p)
    bare = _saved_bytes(plain)
    pinned = _saved_bytes(AttentionWidget(p, pin=[(1, 1)]))
    one_head_raw = 300 * 300 * 2
    assert pinned - bare < 300 * 32 * (2 + 4) * 4 / 3 + 2000  # one top-32 head, base64
    assert pinned - bare < one_head_raw
    assert (
        bare - len(json.dumps(plain._esm)) - len(json.dumps(plain._css)) < 3 * 6 * 16 * 16 * 4 / 3 + 40_000
    )  # thumbnails + tokens + traits


def test_static_fallback_is_the_escaped_mean_of_the_chosen_layer():
    p = _patterns(n=12, layers=2, heads=2, kv=1)
    w = AttentionWidget(p, layer=1)
    svg = w.static_svg()
    assert "<t3>" not in svg and "&lt;t3&gt;" in svg
    assert "layer 1 of 2" in svg and "mean over 2 heads" in svg and "Only pinned heads are kept" in svg
    mean = p.aggregate(1, "mean").astype(np.float32)
    assert f"&lt;t5&gt; → &lt;t2&gt;: {mean[5, 2]:.3f}" in svg
    long = AttentionWidget(_patterns(n=300, layers=1, heads=2, kv=1)).static_svg()
    assert "each cell is the maximum of a block" in long


def test_bad_layer_or_option_errors():
    with pytest.raises(IndexError, match="layer 5 does not exist: the model has 3 attention layers"):
        AttentionWidget(_patterns(n=10), layer=5)
    with pytest.raises(IndexError, match="head 8 does not exist"):
        AttentionWidget(_patterns(n=10), pin=[(0, 8)])
    with pytest.raises(ValueError, match="head must be a head index or one of"):
        AttentionWidget(_patterns(n=10)).pin(0, "median")
