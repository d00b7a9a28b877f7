"""The logit and tuned lenses against independent references: the model's own logits, Interpreto's ``LogitLens`` and
the ``tuned-lens`` package (0.2.0) with the same translator weights."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.layers import UnsupportedModelError
from interp_widgets.lens import LensHead, LensResult, TunedLens, lens_kl, logit_lens
from tests import tiny_models
from tests.conftest import model_fingerprint

TEXT = "The cat sat on the mat because it was warm."
FAMILIES = ["gpt2_lm", "llama_lm", "qwen3_lm", "mistral_lm", "gemma2_lm", "phi3_lm", "gpt_neox_lm", "bert_masked_lm"]


def _hidden_states(model, tokenizer, text):
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    return enc["input_ids"], out


@pytest.mark.parametrize("family", FAMILIES)
def test_last_layer_lens_is_the_models_own_logits(family):
    model, tokenizer = getattr(tiny_models, family)()
    ids, out = _hidden_states(model, tokenizer, TEXT)  # transformers keeps its output-recording hooks after this
    before = model_fingerprint(model, tokenizer)
    result = logit_lens(model, tokenizer, TEXT, top_k=4, progress=False)
    assert result.token_ids.tolist() == ids[0].tolist()
    logp = out.logits[0].float().log_softmax(-1)
    top_logp, top_ids = logp.topk(4, dim=-1)
    np.testing.assert_array_equal(result.top_ids[0, -1], top_ids.numpy())
    np.testing.assert_allclose(result.top_probs[0, -1], top_logp.exp().numpy(), atol=1e-5)
    # the head on the captured last block output, against the model's logits, elementwise
    from interp_widgets.layers import capture

    with capture(model, [f"layer:{model.config.num_hidden_layers - 1}"]) as acts, torch.no_grad():
        model(input_ids=ids)
    with torch.no_grad():
        mine = LensHead(model)(next(iter(acts.values()))[0])
    np.testing.assert_allclose(mine.numpy(), out.logits.numpy(), atol=1e-5, rtol=0)
    assert float(np.abs(result.kl[0, -1]).max()) < 1e-5
    if family == "gemma2_lm":
        assert "softcap 30.0" in result.params["head"]
    if family == "bert_masked_lm":  # a masked LM's target is the token in place
        assert result.target_labels[0] == "token itself"
        np.testing.assert_array_equal(result.target_ids[:, 0], ids[0].numpy())
    assert model_fingerprint(model, tokenizer) == before


@pytest.mark.parametrize("family", ["gpt2_lm", "llama_lm"])
def test_intermediate_layers_match_hf_hidden_states(family):
    """layer:i (i < last) is HF's hidden_states[i + 1]; decoding it through norm and head by hand gives our cells."""
    model, tokenizer = getattr(tiny_models, family)()
    result = logit_lens(model, tokenizer, TEXT, top_k=3, progress=False)
    ids, out = _hidden_states(model, tokenizer, TEXT)
    norm = model.transformer.ln_f if family == "gpt2_lm" else model.model.norm
    with torch.no_grad():
        logits = model.lm_head(norm(out.hidden_states[1]))[0]
    final = out.logits[0].log_softmax(-1)
    logq = logits.log_softmax(-1)
    kl = (final.exp() * (final - logq)).sum(-1)
    np.testing.assert_allclose(result.kl[0, 0], kl.numpy(), atol=1e-5)
    nxt = ids[0, 1:]
    np.testing.assert_allclose(
        result.target_probs[0, 0, :-1, 0], logq[:-1].exp().gather(1, nxt[:, None])[:, 0], atol=1e-6
    )
    ranks = 1 + (logits[:-1] > logits[:-1].gather(1, nxt[:, None])).sum(-1)
    np.testing.assert_array_equal(result.target_ranks[0, 0, :-1, 0], ranks.numpy())
    assert np.isnan(result.target_probs[0, 0, -1, 0]) and result.target_ranks[0, 0, -1, 0] == 0


@pytest.mark.parametrize("family", ["gpt2_lm", "llama_lm"])
def test_logit_lens_equals_interpreto(family):
    from interpreto import AllLayersSplitter, LogitLens

    model, tokenizer = getattr(tiny_models, family)()
    splitter = AllLayersSplitter(copy.deepcopy(model), tokenizer=tokenizer)
    theirs = LogitLens(splitter, top_k=5).explain(TEXT, align=False)
    ours = logit_lens(model, tokenizer, TEXT, top_k=5, progress=False)
    names = splitter.activation_names[1:]  # their first entry is the first block's input
    assert len(names) == len(ours.layers)
    for i, name in enumerate(names):
        np.testing.assert_array_equal(ours.top_ids[0, i], theirs[name]["top_indices"][0].numpy())
        np.testing.assert_allclose(ours.top_probs[0, i], theirs[name]["top_scores"][0].numpy(), atol=1e-5)


def test_tuned_lens_equals_the_tuned_lens_package():
    """Same translator weights -> same KL as tuned-lens 0.2.0's TunedLens (h + translator(h), Unembed)."""
    from tuned_lens.nn.lenses import TunedLens as PackageLens

    model, tokenizer = tiny_models.llama_lm()
    ours = TunedLens.for_model(model)
    rng = np.random.default_rng(0)
    ours.weights = rng.normal(0, 0.1, ours.weights.shape).astype(np.float32)
    ours.biases = rng.normal(0, 0.1, ours.biases.shape).astype(np.float32)
    result = logit_lens(model, tokenizer, TEXT, tuned=ours, progress=False)
    assert result.lenses == ["logit", "tuned"]

    theirs = PackageLens.from_model(copy.deepcopy(model))
    with torch.no_grad():
        for i, name in enumerate(ours.layers):  # our layer:i is their hidden_states index i + 1
            block = int(name.split(":")[1])
            theirs.layer_translators[block + 1].weight.copy_(torch.from_numpy(ours.weights[i]))
            theirs.layer_translators[block + 1].bias.copy_(torch.from_numpy(ours.biases[i]))
        _, out = _hidden_states(model, tokenizer, TEXT)
        final = out.logits[0].log_softmax(-1)
        for i, name in enumerate(ours.layers):
            block = int(name.split(":")[1])
            logq = theirs(out.hidden_states[block + 1][0], block + 1).log_softmax(-1)
            kl = (final.exp() * (final - logq)).sum(-1)
            np.testing.assert_allclose(result.kl[1, i], kl.numpy(), atol=1e-5)
        logq = theirs.unembed(out.hidden_states[1][0]).log_softmax(-1)  # their logit lens on layer:0
        np.testing.assert_allclose(result.kl[0, 0], (final.exp() * (final - logq)).sum(-1).numpy(), atol=1e-5)


def test_tuned_lens_fit_lowers_kl_save_load_and_refusals(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    from interp_widgets.demo import corpus

    before = model_fingerprint(model, tokenizer)
    texts = corpus()
    lens = TunedLens.for_model(model).fit(
        model, tokenizer, texts, tokens=1024, seq_len=64, steps=30, batch_size=32, lr=1e-2, progress=False
    )
    assert model_fingerprint(model, tokenizer) == before
    held_out = lens_kl(model, tokenizer, texts[::-1], tuned=lens, tokens=512, seq_len=64, progress=False)
    assert held_out["tuned"][0] < held_out["logit"][0]
    path = lens.save(tmp_path / "lens.safetensors")
    again = TunedLens.load(path, model=model)
    np.testing.assert_array_equal(again.weights, lens.weights)
    assert (again.model_name, again.n_layers, again.d_model) == (lens.model_name, 2, 32)
    other, other_tok = tiny_models.qwen3_lm()
    with pytest.raises(ValueError, match="made for LlamaForCausalLM .* not for Qwen3ForCausalLM"):
        TunedLens.load(path, model=other)
    with pytest.raises(ValueError, match="made for LlamaForCausalLM"):
        logit_lens(other, other_tok, TEXT, tuned=lens, progress=False)
    # same name and shapes, other weights: the unembedding hash tells them apart
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.lm_head.weight.add_(1.0)
    with pytest.raises(ValueError, match="unembedding weights differs"):
        lens.check_model(twin)


def test_bad_input_errors(tmp_path):
    classifier, tok = tiny_models.bert_classifier()
    with pytest.raises(UnsupportedModelError, match="no unembedding.*AutoModelForCausalLM"):
        logit_lens(classifier, tok, TEXT, progress=False)
    with pytest.raises(UnsupportedModelError, match="no unembedding"):
        TunedLens.for_model(classifier)
    model, tokenizer = tiny_models.gpt2_lm()
    with pytest.raises(ValueError, match="layer index 9 is out of range; this model has 2 blocks"):
        logit_lens(model, tokenizer, TEXT, layers=[9], progress=False)
    with pytest.raises(ValueError, match="sublayer's output"):
        logit_lens(model, tokenizer, TEXT, layers=["layer:0.mlp_out"], progress=False)
    with pytest.raises(ValueError, match="longer than the model's context"):
        logit_lens(model, tokenizer, "word " * 300, progress=False)
    with pytest.raises(ValueError, match="is 3 tokens"):
        logit_lens(model, tokenizer, TEXT, targets=[" quiet"], progress=False)
    result = logit_lens(model, tokenizer, TEXT, progress=False)
    with pytest.raises(ValueError, match="layer must be an integer in"):
        result.top_tokens(layer=7, position=0)
    with pytest.raises(ValueError, match="not a LensResult"):
        LensResult.load(TunedLens.for_model(model).save(tmp_path / "lens.safetensors"))


def test_chunking_mid_points_targets_generation_and_persistence(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    whole = logit_lens(
        model,
        tokenizer,
        TEXT,
        mid=True,
        targets=[" the", 5],
        continuation=" It purred.",
        max_new_tokens=3,
        progress=False,
    )
    chunked = logit_lens(
        model,
        tokenizer,
        TEXT,
        mid=True,
        targets=[" the", 5],
        continuation=" It purred.",
        max_new_tokens=3,
        chunk_tokens=2,
        progress=False,
    )
    for name in ("top_ids", "top_probs", "kl", "target_probs", "target_ranks"):
        np.testing.assert_allclose(getattr(whole, name), getattr(chunked, name), atol=1e-6)
    assert whole.layers == ["layer:0.resid_mid", "layer:0", "layer:1.resid_mid", "layer:1"]
    assert whole.target_labels == ["next token", " the", tokenizer.decode([5])]
    assert int(whole.generated_mask.sum()) == 3 and not whole.generated_mask[:-3].any()
    # resid_mid of layer 0 is the input of its post-attention norm
    from interp_widgets.layers import capture

    with capture(model, ["layer:0.resid_mid"]) as acts, torch.no_grad():
        model(input_ids=torch.tensor([whole.token_ids.tolist()]))
        logits = LensHead(model)(acts["layer:0.resid_mid"][0][0])
    np.testing.assert_allclose(whole.top_probs[0, 0, :, 0], logits.softmax(-1).max(-1).values.numpy(), atol=1e-6)
    again = LensResult.load(whole.save(tmp_path / "r.safetensors"))
    assert again.tokens == whole.tokens and again.target_labels == whole.target_labels
    np.testing.assert_array_equal(again.generated_mask, whole.generated_mask)
    frame = whole.to_dataframe()
    assert len(frame) == 4 * len(whole.tokens)
    assert whole.chart("next token_rank").to_dict()["layer"][0]["mark"]["type"] == "rect"
    trajectory = whole.trajectory(2, target=" the")
    assert trajectory["layer"].tolist() == whole.layers
