"""Attention patterns (interp_widgets.attribution.patterns) against two independent references: softmax(QKᵀ/√d + mask)
recomputed from hooked queries and keys (GQA included), and the model's own ``output_attentions=True`` under eager
attention. Also: the model is left untouched (attention implementation, hooks), also on errors; bad indices."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interp_widgets.attribution import attention_patterns, record_attention
from interp_widgets.attribution.attention import eager_attention
from interp_widgets.attribution.patterns import attention_modules
from tests import tiny_models
from tests.conftest import model_fingerprint

TEXT = "The room was clean and the staff were kind."


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    """(1, T, n·d) → (n, T, d)."""
    return x[0].reshape(x.shape[1], n, -1).transpose(0, 1)


def _softmax_reference(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(QKᵀ/√d + mask) for q (H, T, d) and k (KV, T, d); query head h reads KV head h // (H / KV)."""
    groups = q.shape[0] // k.shape[0]
    k = k.repeat_interleave(groups, dim=0)
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t = scores.shape[-1]
        scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(scores, dim=-1)


def _llama_reference(model, ids):
    """Queries and keys hooked at q_proj / k_proj, rotated with the model's own RoPE cos/sin."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    config = model.config
    seen, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        handles.append(layer.self_attn.q_proj.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("q", i), o)))
        handles.append(layer.self_attn.k_proj.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("k", i), o)))
    handles.append(model.model.rotary_emb.register_forward_hook(lambda m, a, o: seen.__setitem__("rope", o)))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    cos, sin = seen["rope"]
    refs = []
    for i in range(config.num_hidden_layers):
        q = _heads(seen[("q", i)], config.num_attention_heads)[None]
        k = _heads(seen[("k", i)], config.num_key_value_heads)[None]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        refs.append(_softmax_reference(q[0], k[0], causal=True))
    return refs


def _gpt2_reference(model, ids):
    seen, handles = {}, []
    for i, block in enumerate(model.transformer.h):
        handles.append(block.attn.c_attn.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o)))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    n, d = model.config.n_head, model.config.n_embd
    return [
        _softmax_reference(_heads(seen[i][..., :d], n), _heads(seen[i][..., d : 2 * d], n), causal=True)
        for i in range(model.config.n_layer)
    ]


def _bert_reference(model, ids):
    seen, handles = {}, []
    for i, layer in enumerate(model.bert.encoder.layer):
        handles.append(
            layer.attention.self.query.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("q", i), o))
        )
        handles.append(
            layer.attention.self.key.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("k", i), o))
        )
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    n = model.config.num_attention_heads
    return [
        _softmax_reference(_heads(seen[("q", i)], n), _heads(seen[("k", i)], n), causal=False)
        for i in range(model.config.num_hidden_layers)
    ]


CASES = {
    "llama_gqa": (tiny_models.llama_lm, _llama_reference),
    "gpt2": (tiny_models.gpt2_lm, _gpt2_reference),
    "bert": (tiny_models.bert_classifier, _bert_reference),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_patterns_equal_softmax_of_hooked_queries_and_keys(case):
    build, reference = CASES[case]
    model, tokenizer = build()
    before = model_fingerprint(model, tokenizer)
    patterns = attention_patterns(model, tokenizer, TEXT, progress=False)
    ids = torch.tensor([tokenizer(TEXT).input_ids])
    refs = reference(model, ids)
    assert patterns.n_layers == len(refs) and len(patterns.tokens) == ids.shape[1]
    for layer, ref in enumerate(refs):
        got = patterns.weights[layer]
        assert got.dtype == np.float16 and got.shape == tuple(ref.shape)
        np.testing.assert_allclose(got.astype(np.float64), ref.numpy(), atol=1e-3, rtol=0)  # float16 rounding
    assert model_fingerprint(model, tokenizer) == before


def test_gqa_grouping_matches_the_config():
    model, tokenizer = tiny_models.llama_lm()
    patterns = attention_patterns(model, tokenizer, TEXT, progress=False)
    assert (patterns.n_heads, patterns.n_kv_heads) == (
        model.config.num_attention_heads,
        model.config.num_key_value_heads,
    )
    assert patterns.head_groups == [[0, 1], [2, 3]]
    assert [patterns.kv_head_of(h) for h in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize("build", [tiny_models.llama_lm, tiny_models.gpt2_lm, tiny_models.bert_classifier])
def test_patterns_equal_output_attentions_under_eager(build):
    model, tokenizer = build()
    patterns = attention_patterns(model, tokenizer, TEXT, progress=False)
    ids = torch.tensor([tokenizer(TEXT).input_ids])
    with eager_attention(model), torch.no_grad():
        expected = model(ids, output_attentions=True).attentions
    for got, want in zip(patterns.weights, expected, strict=True):
        np.testing.assert_array_equal(got, want[0].to(torch.float16).numpy())


def test_generation_covers_prompt_and_generated_tokens():
    model, tokenizer = tiny_models.llama_lm()
    patterns = attention_patterns(model, tokenizer, "The room was", max_new_tokens=4, progress=False)
    n_prompt = len(tokenizer("The room was").input_ids)
    assert patterns.generated_mask.tolist() == [False] * n_prompt + [True] * 4
    assert patterns.weights[0].shape[1:] == (n_prompt + 4, n_prompt + 4)
    upper = np.triu(patterns.weights[1].astype(np.float32), 1)
    assert float(np.abs(upper).max()) == 0.0  # causal


def test_aggregations_and_rollout_reuse_the_rollout_method():
    from interp_widgets.attribution.attention import attention_rollout

    model, tokenizer = tiny_models.llama_lm()
    p = attention_patterns(model, tokenizer, TEXT, progress=False)
    w = [x.astype(np.float32) for x in p.weights]
    np.testing.assert_allclose(p.aggregate(1, "mean").astype(np.float32), w[1].mean(0), atol=1e-3)
    np.testing.assert_array_equal(p.aggregate(1, "max"), p.weights[1].max(0))
    stacked = torch.from_numpy(np.stack(w))[:, None]  # (layers, rows=1, heads, T, T)
    np.testing.assert_allclose(
        p.aggregate(-1, "rollout").astype(np.float32), attention_rollout(stacked)[0].numpy(), atol=2e-3
    )
    np.testing.assert_allclose(
        p.aggregate(0, "rollout").astype(np.float32), attention_rollout(stacked[:1])[0].numpy(), atol=2e-3
    )


def test_rollout_is_cached_incrementally_and_equals_attention_rollout(monkeypatch):
    from interp_widgets.attribution.attention import attention_rollout
    from interp_widgets.attribution.patterns import AttentionPatterns

    rng = np.random.default_rng(0)
    raw = rng.random((6, 3, 7, 7)) * np.tril(np.ones((7, 7)))
    weights = [(w / w.sum(-1, keepdims=True)).astype(np.float16) for w in raw]
    stacked = torch.from_numpy(np.stack([w.astype(np.float32) for w in weights]))[:, None]  # (layers, 1, heads, T, T)
    matmuls = []
    original = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: (matmuls.append(1), original(a, b))[1])
    p = AttentionPatterns(tokens=list("abcdefg"), weights=weights, n_kv_heads=1)
    for layer, cost in ((2, 3), (3, 1), (4, 1), (0, 0), (5, 1), (1, 0), (5, 0)):
        before = len(matmuls)
        got = p.aggregate(layer, "rollout")
        assert len(matmuls) - before == cost, (layer, len(matmuls) - before)
        monkeypatch.setattr(torch.Tensor, "__matmul__", original)
        expected = attention_rollout(stacked[: layer + 1])[0].numpy().astype(np.float16)
        monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: (matmuls.append(1), original(a, b))[1])
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.float16 and np.allclose(got.astype(np.float32).sum(-1), 1, atol=1e-2)


def test_bad_layer_head_and_kind_errors():
    model, tokenizer = tiny_models.llama_lm()
    p = attention_patterns(model, tokenizer, "Hi", progress=False)
    with pytest.raises(IndexError, match=r"layer 2 does not exist: the model has 2 attention layers"):
        p.head(2, 0)
    with pytest.raises(IndexError, match=r"head 4 does not exist: each layer has 4 query heads \(use 0..3\)"):
        p.head(0, 4)
    with pytest.raises(IndexError, match="layer -3 does not exist"):
        p.aggregate(-3, "mean")
    with pytest.raises(ValueError, match="how"):
        p.aggregate(0, "median")
    with pytest.raises(ValueError, match="kind='cross' needs an encoder-decoder model"):
        attention_modules(model, "cross")
    with pytest.raises(ValueError, match="longer than the model's context of 128 tokens"):
        attention_patterns(model, tokenizer, "word " * 300, progress=False)


def test_model_untouched_on_exceptions():
    model, tokenizer = tiny_models.llama_lm()
    before = model_fingerprint(model, tokenizer)
    implementation = model.config._attn_implementation
    ids = torch.tensor([tokenizer("Hi there").input_ids])
    with pytest.raises(RuntimeError, match="boom"):
        with record_attention(model) as calls:
            model(ids)
            assert model.config._attn_implementation == "eager" and len(calls[0]) == 2
            raise RuntimeError("boom")
    assert model.config._attn_implementation == implementation
    assert model_fingerprint(model, tokenizer) == before
    # an error raised inside the model's forward (a hook that fails) also leaves it as it was
    layer = model.model.layers[1].mlp
    handle = layer.register_forward_hook(lambda *a: (_ for _ in ()).throw(RuntimeError("inside")))
    try:
        with pytest.raises(RuntimeError, match="inside"):
            attention_patterns(model, tokenizer, "Hi there", progress=False)
    finally:
        handle.remove()
    assert model.config._attn_implementation == implementation
    assert model_fingerprint(model, tokenizer) == before


def test_smollm2_groups_nine_heads_over_three_kv_heads(smollm2):
    model, tokenizer = smollm2
    before = model_fingerprint(model, tokenizer)
    p = attention_patterns(model, tokenizer, "Attention heads share keys.", progress=False)
    assert (p.n_layers, p.n_heads, p.n_kv_heads) == (30, 9, 3)
    assert p.head_groups == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert model_fingerprint(model, tokenizer) == before


@pytest.mark.parametrize("name", ["t5_seq2seq", "bart_seq2seq", "marian_seq2seq"])
def test_encoder_decoder_cross_decoder_and_encoder_patterns_equal_output_attentions(name, request):
    model, tokenizer = request.getfixturevalue(name)
    before = model_fingerprint(model, tokenizer)
    source, target = "the cat sat on the mat", "a dog ran"
    patterns = {kind: attention_patterns(model, tokenizer, source, continuation=target, kind=kind, progress=False)
                for kind in ("cross", "decoder", "encoder")}  # fmt: skip
    src = tokenizer(source, return_tensors="pt").input_ids
    targets = tokenizer(text_target=target)["input_ids"]
    start = model.config.decoder_start_token_id
    decoder = torch.tensor([[start, *targets[:-1]]])
    with eager_attention(model), torch.no_grad():
        out = model(input_ids=src, decoder_input_ids=decoder, output_attentions=True)
    for kind, reference in (("cross", out.cross_attentions), ("decoder", out.decoder_attentions),
                            ("encoder", out.encoder_attentions)):  # fmt: skip
        p = patterns[kind]
        assert p.kind == kind and p.n_layers == len(reference)
        for layer, ref in enumerate(reference):
            np.testing.assert_allclose(p.weights[layer].astype(np.float32), ref[0].numpy(), atol=1e-3)
    cross = patterns["cross"]
    assert cross.tokens == [tokenizer.decode([t]) for t in targets]  # row j: the step that produced target j
    assert cross.key_tokens == [tokenizer.decode([t]) for t in src[0].tolist()]
    assert cross.head(0, 0).shape == (len(targets), src.shape[1]) and not cross.generated_mask.any()
    with pytest.raises(ValueError, match="cross-attention has no rollout"):
        cross.aggregate(0, "rollout")
    assert model_fingerprint(model, tokenizer) == before


def test_encoder_decoder_generated_target_and_errors(t5_seq2seq, gpt2_lm):
    model, tokenizer = t5_seq2seq
    lm, lm_tokenizer = gpt2_lm
    generated = attention_patterns(model, tokenizer, "the cat sat", max_new_tokens=3, progress=False)
    assert generated.generated_mask.all() and 1 <= len(generated.tokens) <= 3
    with pytest.raises(ValueError, match="needs a target"):
        attention_patterns(model, tokenizer, "the cat sat", progress=False)
    with pytest.raises(ValueError, match="not both"):
        attention_patterns(model, tokenizer, "the cat sat", continuation="a", max_new_tokens=2, progress=False)
    with pytest.raises(ValueError, match="continuation is empty"):
        attention_patterns(model, tokenizer, "the cat sat", continuation="  ", progress=False)
    with pytest.raises(ValueError, match="kind"):
        attention_patterns(model, tokenizer, "the cat sat", continuation="a", kind="self", progress=False)
    with pytest.raises(ValueError, match="needs an encoder–decoder model"):
        attention_patterns(lm, lm_tokenizer, "the cat sat", kind="cross", progress=False)
    with pytest.raises(ValueError, match="continuation= is for encoder–decoder"):
        attention_patterns(lm, lm_tokenizer, "the cat sat", continuation=" on", progress=False)
