"""qk_attribution: the node-pair table sums to the head's pre-softmax score, which is checked against the model
itself (its own q_proj / k_proj outputs with its rotary embedding, and the log-ratio of its eager attention
probabilities); bad input."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from interp_widgets.circuits import TranscoderSet
from interp_widgets.circuits.attribution import graph_prompt
from interp_widgets.circuits.qk import qk_attribution
from interp_widgets.concepts import Transcoder
from interp_widgets.demo import corpus
from interp_widgets.layers import UnsupportedModelError, attention_implementation
from tests import tiny_models
from tests.conftest import model_fingerprint

PROMPT = "The cat sat on the mat because"


@pytest.fixture(scope="module")
def setup():
    model, tokenizer = tiny_models.llama_lm()
    tcs = TranscoderSet.fit(model, tokenizer, corpus()[:60], transcoder=Transcoder(48, activation="jumprelu",
                            skip=True, max_epochs=3, progress=False))  # fmt: skip
    return model, tokenizer, tcs


def model_scores(model, ids, layer, head):
    """Head ``head``'s pre-softmax scores (T, T) from the model's own projections and rotary embedding, and its
    eager attention probabilities."""
    attention = model.model.layers[layer].self_attn
    seen = {}
    handles = [
        attention.q_proj.register_forward_hook(lambda m, a, out: seen.__setitem__("q", out)),
        attention.k_proj.register_forward_hook(lambda m, a, out: seen.__setitem__("k", out)),
        attention.register_forward_pre_hook(
            lambda m, a, kw: seen.__setitem__("rope", kw["position_embeddings"]), with_kwargs=True
        ),
    ]
    try:
        with torch.no_grad(), attention_implementation(model, "eager", why="the test reads attention weights"):
            probs = model(input_ids=ids, output_attentions=True).attentions[layer]
    finally:
        for handle in handles:
            handle.remove()
    d, n_heads = attention.head_dim, model.config.num_attention_heads
    group = n_heads // model.config.num_key_value_heads
    q = seen["q"].view(1, ids.shape[1], -1, d).transpose(1, 2)
    k = seen["k"].view(1, ids.shape[1], -1, d).transpose(1, 2)
    rotate = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    q, k = rotate(q, k, *seen["rope"])
    return (q[0, head] @ k[0, head // group].T * attention.scaling).numpy(), probs[0, head].numpy()


@pytest.mark.parametrize("layer, head, query_pos, key_pos", [(1, 0, 6, 2), (1, 3, 7, 7), (0, 1, 5, 1)])
def test_table_sums_to_the_models_score(setup, layer, head, query_pos, key_pos):
    model, tokenizer, tcs = setup
    before = model_fingerprint(model, tokenizer)
    table = qk_attribution(model, tokenizer, PROMPT, tcs, layer=layer, head=head, query_pos=query_pos,
                           key_pos=key_pos)  # fmt: skip
    assert model_fingerprint(model, tokenizer) == before
    ids, _ = graph_prompt(tokenizer, PROMPT)
    scores, probs = model_scores(model, ids, layer, head)
    assert abs(table.matrix.sum() - scores[query_pos, key_pos]) <= 1e-4 * max(1.0, abs(scores[query_pos, key_pos]))
    assert abs(table.score - scores[query_pos, key_pos]) <= 1e-4 * max(1.0, abs(scores[query_pos, key_pos]))
    # the scores are the model's pre-softmax scores: their differences are the log-ratios of its probabilities
    np.testing.assert_allclose(scores[query_pos, : query_pos + 1] - scores[query_pos, 0],
                               np.log(probs[query_pos, : query_pos + 1] / probs[query_pos, 0]), atol=1e-4)  # fmt: skip
    if layer == 1:  # features and errors of block 0 take part
        assert any("_-1_" in n for n in table.query_nodes) and table.to_dataframe(top=5).shape == (5, 3)
    assert table.query_nodes[-1] == table.key_nodes[-1] == "constant"


def test_bad_input(setup):
    model, tokenizer, tcs = setup
    with pytest.raises(ValueError, match="comes after query_pos"):
        qk_attribution(model, tokenizer, PROMPT, tcs, layer=1, head=0, query_pos=2, key_pos=3)
    with pytest.raises(ValueError, match="head 9 does not exist"):
        qk_attribution(model, tokenizer, PROMPT, tcs, layer=1, head=9, query_pos=2, key_pos=1)
    with pytest.raises(ValueError, match="outside the prompt"):
        qk_attribution(model, tokenizer, PROMPT, tcs, layer=1, head=0, query_pos=99, key_pos=1)
    qwen3, qwen3_tokenizer = tiny_models.qwen3_lm()
    tcs3 = TranscoderSet.fit(qwen3, qwen3_tokenizer, corpus()[:20],
                             transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="q_norm"):
        qk_attribution(qwen3, qwen3_tokenizer, PROMPT, tcs3, layer=1, head=0, query_pos=2, key_pos=1)


def test_cross_layer_table_sums_to_the_models_score():
    """A three-block Llama and a random cross-layer transcoder: block 0's features write to blocks 0 and 1, which both
    feed block 2's attention; the table still sums to the model's own score."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.circuits.test_attribution_graph import random_clt

    tokenizer = tiny_models.bpe_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         initializer_range=0.2, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    model = tiny_models.seeded(lambda: LlamaForCausalLM(config))
    clt = random_clt(model)
    ids, _ = graph_prompt(tokenizer, PROMPT)
    scores, _ = model_scores(model, ids, 2, 1)
    table = qk_attribution(model, tokenizer, PROMPT, clt, layer=2, head=1, query_pos=6, key_pos=3)
    assert abs(table.matrix.sum() - scores[6, 3]) <= 1e-4 * max(1.0, abs(scores[6, 3]))
    assert any(n.startswith("0_") and "_-1_" not in n for n in table.query_nodes)  # block 0's features take part
