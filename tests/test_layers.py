"""Canonical layer names, sub-points and hooks (interp_widgets.layers), checked against the models' own arithmetic."""

from __future__ import annotations

import copy

import pytest
import torch

from interp_widgets import layers
from interp_widgets.layers import capture, from_hook_name, hooks, layer_names, resolve_layer, to_hook_name
from tests.conftest import model_fingerprint


def points(model, input_ids, names):
    with capture(model, names) as acts, torch.no_grad():
        model(input_ids=input_ids)
    return {name: acts[name][0] for name in names}


@pytest.mark.parametrize("fixture", ["gpt2_lm", "llama_lm"])
def test_pre_norm_sub_points_add_up_to_the_residual_stream(fixture, request):
    model, tokenizer = request.getfixturevalue(fixture)
    ids = torch.tensor([tokenizer("The hotel was quiet and clean.")["input_ids"]])
    before = model_fingerprint(model, tokenizer)
    for block in (0, 1):
        names = [f"layer:{block}.{p}" for p in ("resid_pre", "attn_out", "resid_mid", "mlp_out")] + [f"layer:{block}"]
        got = points(model, ids, names)
        pre, attn, mid, mlp, post = (got[n] for n in names)
        torch.testing.assert_close(mid, pre + attn, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(post, mid + mlp, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # a copy: transformers 5 adds permanent capture hooks on first output_hidden_states=True
        hidden = copy.deepcopy(model)(input_ids=ids, output_hidden_states=True).hidden_states
    torch.testing.assert_close(points(model, ids, ["layer:0"])["layer:0"], hidden[1])
    torch.testing.assert_close(points(model, ids, ["layer:1.resid_pre"])["layer:1.resid_pre"], hidden[1])
    assert model_fingerprint(model, tokenizer) == before


def test_post_norm_sub_points_rebuild_the_block_output(bert_classifier):
    model, tokenizer = bert_classifier
    ids = torch.tensor([tokenizer("Not bad at all.")["input_ids"]])
    names = ["layer:1.resid_mid", "layer:1.mlp_out", "layer:1", "layer:1.attn_out", "layer:1.resid_pre"]
    got = points(model, ids, names)
    norm = model.bert.encoder.layer[1].output.LayerNorm
    with torch.no_grad():
        torch.testing.assert_close(norm(got["layer:1.mlp_out"] + got["layer:1.resid_mid"]), got["layer:1"])
        attention_norm = model.bert.encoder.layer[1].attention.output.LayerNorm
        torch.testing.assert_close(
            attention_norm(got["layer:1.attn_out"] + got["layer:1.resid_pre"]), got["layer:1.resid_mid"]
        )
    assert resolve_layer(model, "layer:1.attn_out").path == "bert.encoder.layer.1.attention.output.dense"


def test_every_spelling_resolves_to_one_canonical_name(bert_classifier, gpt2_lm):
    model, _ = bert_classifier
    for spec in (
        "layer:1",
        1,
        -1,
        "bert.encoder.layer.1",
        "blocks.1.hook_resid_post",
        " layer:1 ",
        model.bert.encoder.layer[1],
        "layer:1.resid_post",
    ):
        assert resolve_layer(model, spec).name == "layer:1", spec
    assert resolve_layer(model, "bert.encoder.layer.1.attention").name == "bert.encoder.layer.1.attention"
    assert resolve_layer(gpt2_lm[0], "transformer.h.0").name == "layer:0"
    assert resolve_layer(gpt2_lm[0], "layer:0.resid_mid").site == "input"
    assert layer_names(model)[:5] == [
        "layer:0",
        "layer:0.resid_pre",
        "layer:0.attn_out",
        "layer:0.resid_mid",
        "layer:0.mlp_out",
    ]


def test_hook_name_mapping_round_trips():
    for name in ("layer:0", "layer:8", "layer:3.resid_pre", "layer:3.resid_mid", "layer:3.attn_out", "layer:3.mlp_out"):
        assert from_hook_name(to_hook_name(name)) == name
    assert to_hook_name("layer:8") == "blocks.8.hook_resid_post"
    with pytest.raises(ValueError, match="hook_resid_pre, hook_resid_mid"):
        from_hook_name("blocks.0.attn.hook_z")
    with pytest.raises(ValueError, match="not a canonical block name"):
        to_hook_name("encoder.layer:1")


def test_bad_layers_name_the_fix(bert_classifier):
    model, _ = bert_classifier
    with pytest.raises(ValueError, match=r"out of range; this model has 2 blocks \(layer:0..layer:1\)"):
        resolve_layer(model, "layer:2")
    with pytest.raises(ValueError, match="similar names"):
        resolve_layer(model, "bert.encoder.layr.0")
    with pytest.raises(TypeError, match="int block index"):
        resolve_layer(model, 1.5)
    with pytest.raises(ValueError, match="not part of this model"):
        resolve_layer(model, torch.nn.Linear(2, 2))


def test_input_point_hook_replaces_the_hidden_state_and_hooks_leave_on_errors(gpt2_lm):
    model, tokenizer = gpt2_lm
    ids = torch.tensor([tokenizer("The staff were lovely.")["input_ids"]])
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with hooks(model, {"layer:1.resid_pre": lambda m, args, hidden: hidden * 0}):
            zeroed = model(input_ids=ids).logits
        with hooks(model, {"layer:1.resid_pre": lambda m, args, hidden: None}):
            same = model(input_ids=ids).logits
    assert not torch.allclose(plain, zeroed)
    torch.testing.assert_close(plain, same)
    before = model_fingerprint(model, tokenizer)
    with pytest.raises(RuntimeError, match="boom"):
        with hooks(model, {"layer:0": lambda *a: None, "layer:1.resid_mid": lambda *a: None}):
            raise RuntimeError("boom")
    assert model_fingerprint(model, tokenizer) == before


def test_encoder_decoder_layers_name_their_stack(wordpiece_tokenizer):
    from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    t5 = T5ForConditionalGeneration(
        T5Config(
            vocab_size=64,
            d_model=16,
            d_kv=4,
            d_ff=32,
            num_layers=2,
            num_decoder_layers=3,
            num_heads=2,
            decoder_start_token_id=0,
        )
    ).eval()
    bart = BartForConditionalGeneration(
        BartConfig(
            vocab_size=64,
            d_model=16,
            encoder_layers=2,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
        )
    ).eval()
    assert resolve_layer(t5, "encoder.layer:1").path == "encoder.block.1"
    assert resolve_layer(t5, "decoder.layer:-1").name == "decoder.layer:2"
    assert resolve_layer(t5, "decoder.block.0").name == "decoder.layer:0"
    assert resolve_layer(bart, "encoder.layer:0").path == "model.encoder.layers.0"
    assert resolve_layer(bart, "model.decoder.layers.0").name == "decoder.layer:0"
    assert [n for n in layer_names(bart) if ":" in n and "." not in n.split(":")[-1]] == [
        "encoder.layer:0",
        "encoder.layer:1",
        "decoder.layer:0",
    ]
    with pytest.raises(ValueError, match="name the stack"):
        resolve_layer(t5, 1)
    with pytest.raises(ValueError, match="name the stack"):
        layers.blocks(t5)
    with pytest.raises(ValueError, match="one stack of blocks"):
        layers.blocks(torch.nn.Sequential(), "encoder")


def test_qkv_projection_finds_separate_and_fused_projections_and_names_the_missing_ones(llama_lm, gpt2_lm, t5_seq2seq):
    from interp_widgets.layers import UnsupportedModelError, qkv_projection

    model = llama_lm[0]
    path, fused = qkv_projection(model, -1, "q")
    assert fused is None and dict(model.named_modules())[path] is model.model.layers[-1].self_attn.q_proj
    lm = gpt2_lm[0]
    assert [qkv_projection(lm, 0, kind) for kind in "qkv"] == [("transformer.h.0.attn.c_attn", i) for i in range(3)]
    with pytest.raises(ValueError, match="kind"):
        qkv_projection(lm, 0, "o")
    with pytest.raises(UnsupportedModelError, match="cannot find the k projection.*; patch 'head' instead"):
        qkv_projection(t5_seq2seq[0], "encoder.layer:0", "k", hint="patch 'head' instead")
