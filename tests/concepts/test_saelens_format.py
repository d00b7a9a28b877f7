"""SAELens folders in the main venv (no sae-lens here; tests/saelens compares against the real package): the round
trip of our SAEs, the base-model checks at load and use time, quality on load, and the errors for bad input."""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from interp_widgets.concepts import (
    BatchTopKSAE,
    JumpReLUSAE,
    PCAConcepts,
    SAEQualityWarning,
    SparseAutoencoder,
    collect_activations,
    concept_importance,
    interpret_concepts,
    load_sae,
    save_sae,
    splice_quality,
    text_concepts,
)
from interp_widgets.concepts.saelens import read_config
from interp_widgets.demo import corpus
from interp_widgets.layers import capture
from tests.conftest import model_fingerprint

TEXTS = corpus()[:30]


@pytest.fixture(scope="module")
def lm_store(gpt2_lm):
    model, tokenizer = gpt2_lm
    return collect_activations(model, tokenizer, TEXTS, layer=1, progress=False)


@pytest.fixture(scope="module")
def trained(lm_store):
    return SparseAutoencoder(64, k=16, lr=3e-3, max_epochs=20, batch_size=128, progress=False).fit(lm_store)


def named(model, name: str):
    twin = copy.deepcopy(model)  # our own copy: the shared fixture's config stays as it was
    twin.config._name_or_path = name
    return twin


def write_folder(folder, cfg: dict, weights: dict | None = None, d_in: int = 32, d_sae: int = 48):
    folder.mkdir(parents=True)
    (folder / "cfg.json").write_text(json.dumps(cfg))
    if weights is None:
        g = torch.Generator().manual_seed(0)
        weights = {
            "W_enc": torch.randn(d_in, d_sae, generator=g),
            "W_dec": torch.randn(d_sae, d_in, generator=g),
            "b_enc": torch.zeros(d_sae),
            "b_dec": torch.zeros(d_in),
        }
    save_file(weights, str(folder / "sae_weights.safetensors"))
    return folder


def v6_cfg(**changes) -> dict:
    cfg = {
        "d_in": 32,
        "d_sae": 48,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "architecture": "standard",
        "metadata": {
            "sae_lens_version": "6.12.0",
            "model_name": "gpt2",
            "hook_name": "blocks.1.hook_resid_post",
            "model_from_pretrained_kwargs": {},
        },
    }
    metadata = {key: changes.pop(key) for key in list(changes) if key in cfg["metadata"] or key == "hook_head_index"}
    cfg.update(changes)
    cfg["metadata"].update(metadata)
    return cfg


@pytest.mark.parametrize("kind", ["relu", "topk", "jumprelu", "batchtopk"])
def test_round_trip_keeps_encodings_layer_and_model(kind, lm_store, tmp_path):
    sae = (
        {
            "relu": lambda: SparseAutoencoder(32, activation="relu", l1_coefficient=3e-2, max_epochs=2),
            "topk": lambda: SparseAutoencoder(32, k=4, max_epochs=2),
            "jumprelu": lambda: JumpReLUSAE(32, lr=1e-2, max_epochs=2),
            "batchtopk": lambda: BatchTopKSAE(32, k=4, max_epochs=2),
        }[kind]()
        .set_params(progress=False)
        .fit(lm_store)
    )
    folder = save_sae(sae, tmp_path / kind, model_name="openai-community/gpt2")
    cfg = read_config(folder)
    assert cfg["architecture"] == {"relu": "standard", "topk": "topk"}.get(kind, "jumprelu")
    assert (cfg["d_in"], cfg["d_sae"], cfg["hook_name"], cfg["format"]) == (32, 32, "blocks.1.hook_resid_post", "v6")
    loaded = load_sae(folder)
    X = lm_store.to_numpy()
    np.testing.assert_allclose(loaded.transform(X), sae.transform(X), atol=1e-5)
    np.testing.assert_allclose(
        loaded.inverse_transform(loaded.transform(X)), sae.inverse_transform(sae.transform(X)), atol=1e-5
    )
    assert loaded.layer_ == "layer:1" and loaded.model_name_ == "openai-community/gpt2"
    assert loaded.fit_info_["saelens"]["architecture"] == cfg["architecture"]


@pytest.fixture(scope="module")
def decoder():
    """The demo decoder (a GPT-2 trained on the review corpus; trained once, then cached) and an untrained model of
    the same architecture and name: metadata cannot tell them apart, the activations can."""
    from transformers import GPT2LMHeadModel

    from interp_widgets.demo.decoder import load_decoder

    model, tokenizer = load_decoder(progress=False)
    torch.manual_seed(0)
    untrained = GPT2LMHeadModel(copy.deepcopy(model.config)).eval()  # config copied: the same _name_or_path
    return model, untrained, tokenizer


def test_quality_on_load_passes_the_right_model_and_warns_on_the_wrong_one(decoder, tmp_path):
    model, untrained, tokenizer = decoder
    texts, probe = corpus()[:30], corpus()[40:50]
    fit = lambda m: SparseAutoencoder(256, k=16, lr=3e-3, max_epochs=20, batch_size=128, progress=False).fit(  # noqa: E731
        collect_activations(m, tokenizer, texts, layer=1, progress=False)
    )
    folder = save_sae(fit(model), tmp_path / "trained")
    assert read_config(folder)["model_name"] == model.config._name_or_path
    before = model_fingerprint(model, tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SAEQualityWarning)
        good = load_sae(folder, model=model, tokenizer=tokenizer, texts=probe, progress=False)
    assert model_fingerprint(model, tokenizer) == before
    matched = good.fit_info_["quality"]
    assert matched["fvu"] < 0.3 and matched["loss_recovered"] > 0.9 and matched["l0"] == 16

    # the same name, another model: the untrained checkpoint's activations are nothing like the trained one's
    with pytest.warns(
        SAEQualityWarning,
        match=r"the SAE reconstructs layer:1 badly: .* of its variance is "
        r"unexplained .* more likely, it was trained on another model",
    ):
        load_sae(folder, model=untrained, tokenizer=tokenizer, texts=probe, progress=False)
    # and the other way round: an SAE of the untrained model spliced into the trained one costs far more loss
    other = save_sae(fit(untrained), tmp_path / "untrained")
    with pytest.warns(SAEQualityWarning, match=r"raises the next-token loss by .* nats, recovering \d+% of the loss"):
        wrong = load_sae(other, model=model, tokenizer=tokenizer, texts=probe, progress=False)
    mismatched = wrong.fit_info_["quality"]
    assert mismatched["delta_loss"] > 3 * matched["delta_loss"] > 0
    assert mismatched["loss_recovered"] < 0.85 < 0.9 < matched["loss_recovered"]


def test_splice_quality_matches_a_hand_computation_and_removes_hooks_on_errors(gpt2_lm, trained):
    model, tokenizer = gpt2_lm
    text = TEXTS[3]
    q = splice_quality(trained, model, tokenizer, [text], progress=False)
    ids = torch.as_tensor(tokenizer(text).input_ids)[None]
    with torch.no_grad(), capture(model, ["layer:1"]) as captured:
        out = model(input_ids=ids)
    h = captured["layer:1"][0][0]
    recon = torch.as_tensor(trained.inverse_transform(trained.transform(h.numpy())))

    def loss_with(replacement):
        def hook(module, inputs, output):
            return (replacement[None], *output[1:]) if isinstance(output, tuple) else replacement[None]

        handle = model.transformer.h[1].register_forward_hook(hook)
        try:
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, :-1].double()
        finally:
            handle.remove()
        return float(torch.nn.functional.cross_entropy(logits, ids[0, 1:]))

    clean = float(torch.nn.functional.cross_entropy(out.logits[0, :-1].double(), ids[0, 1:]))
    assert q.loss_clean == pytest.approx(clean, rel=1e-9)
    assert q.loss_spliced == pytest.approx(loss_with(recon), rel=1e-6)
    assert q.loss_ablated == pytest.approx(loss_with(torch.zeros_like(h)), rel=1e-6)
    fvu = float(((h - recon) ** 2).sum() / ((h - h.mean(0)) ** 2).sum())
    assert q.fvu == pytest.approx(fvu, rel=1e-4) and q.n_tokens == len(h)

    class Failing(SparseAutoencoder):
        calls = 0

        def _transform(self, X):
            Failing.calls += 1
            if Failing.calls == 2:
                raise RuntimeError("boom")
            return super()._transform(X)

    failing = copy.copy(trained)
    failing.__class__ = Failing
    before = model_fingerprint(model, tokenizer)
    with pytest.raises(RuntimeError, match="boom"):
        splice_quality(failing, model, tokenizer, TEXTS[:4], progress=False)
    assert model_fingerprint(model, tokenizer) == before  # no hook left behind


def test_model_name_is_checked_at_load_and_use(gpt2_lm, trained, tmp_path):
    model, tokenizer = gpt2_lm
    folder = save_sae(trained, tmp_path / "sae", model_name="gpt2-small")
    gpt2 = named(model, "openai-community/gpt2")
    sae = load_sae(folder, model=gpt2)  # the TransformerLens alias of the same model: fine
    assert sae.model_name_ == "gpt2-small"
    distilled = named(model, "/data/models--distilbert--distilgpt2/snapshots/abc123/")
    with pytest.raises(
        ValueError,
        match=r"fitted on activations of 'gpt2-small' \(model_name in .*cfg.json\), not "
        r"of 'distilbert/distilgpt2'; use it with gpt2-small",
    ):
        load_sae(folder, model=distilled)
    for use in (
        lambda: text_concepts(sae, distilled, tokenizer, "A text."),
        lambda: concept_importance(sae, distilled, tokenizer, "A text."),
        lambda: splice_quality(sae, distilled, tokenizer, ["A text."], progress=False),
    ):
        with pytest.raises(ValueError, match="fitted on activations of 'gpt2-small'"):
            use()
    other_store = collect_activations(distilled, tokenizer, TEXTS[:3], layer=1, progress=False)
    with pytest.raises(ValueError, match="not of 'distilbert/distilgpt2'"):
        interpret_concepts(sae, other_store, progress=False)
    renamed = load_sae(folder, model=distilled, model_name="distilgpt2")  # the override says which model it is
    assert renamed.model_name_ == "distilgpt2"
    # any concept model fitted on a named model's store checks the name too (SAELens #436)
    pca = PCAConcepts(4).fit(collect_activations(gpt2, tokenizer, TEXTS[:5], layer=1, progress=False))
    assert pca.model_name_ == "openai-community/gpt2"
    with pytest.raises(ValueError, match="this PCAConcepts was fitted on activations of 'openai-community/gpt2'"):
        text_concepts(pca, distilled, tokenizer, "A text.")


def test_hook_point_and_width_are_checked(gpt2_lm, tmp_path):
    model, tokenizer = gpt2_lm
    folder = write_folder(tmp_path / "deep", v6_cfg(hook_name="blocks.7.hook_resid_post"))
    with pytest.raises(
        ValueError,
        match=r"the SAE's hook point 'layer:7' \(hook blocks.7.hook_resid_post\) is not "
        r"in this GPT2LMHeadModel: layer index 7 is out of range; this model has 2",
    ):
        load_sae(folder, model=model)
    wide = write_folder(tmp_path / "wide", v6_cfg(d_in=64), d_in=64)
    with pytest.raises(
        ValueError,
        match=r"the SAE reads 64-wide activations \(d_in=64\) but layer:1 of this "
        r"GPT2LMHeadModel is 32 wide",
    ):
        load_sae(wide, model=model)
    with pytest.raises(ValueError, match="fitted on 32 features .* but got 64"):
        load_sae(tmp_path / "deep").transform(np.zeros((2, 64), np.float32))
    mid = load_sae(write_folder(tmp_path / "mid", v6_cfg(hook_name="blocks.0.hook_resid_mid")), model=model)
    assert mid.layer_ == "layer:0.resid_mid"
    with pytest.raises(ValueError, match="fitted on layer layer:0.resid_mid, not layer:1"):
        text_concepts(mid, model, tokenizer, "A text.", layer=1)


def test_transformer_lens_processing_is_applied_or_refused(gpt2_lm, llama_lm, bert_classifier, tmp_path):
    cfg = v6_cfg(model_from_pretrained_kwargs={"center_writing_weights": True, "fold_ln": True})
    folder = write_folder(tmp_path / "centred", cfg)
    with pytest.raises(ValueError, match="pass model= so load_sae can tell and centre the inputs"):
        load_sae(folder)
    gpt2 = load_sae(folder, model=gpt2_lm[0])
    llama = load_sae(folder, model=llama_lm[0])
    assert gpt2.preprocessing_["center"] and not llama.preprocessing_["center"]  # RMSNorm: TransformerLens skips it
    X = np.random.default_rng(0).normal(size=(10, 32)).astype(np.float32) + 3.0
    np.testing.assert_allclose(gpt2.transform(X), llama.transform(X - X.mean(1, keepdims=True)), atol=1e-5)
    np.testing.assert_allclose(
        gpt2.inverse_transform(gpt2.transform(X), X=X) - X.mean(1, keepdims=True),
        llama.inverse_transform(llama.transform(X - X.mean(1, keepdims=True))),
        atol=1e-4,
    )
    again = read_config(save_sae(gpt2, tmp_path / "again"))  # the processing is written back
    assert again["model_from_pretrained_kwargs"] == {"center_writing_weights": True, "fold_ln": True}
    with pytest.raises(
        ValueError, match="reproduces for pre-norm LayerNorm models .* BertForSequenceClassification is post-norm"
    ):
        load_sae(folder, model=bert_classifier[0])
    odd = write_folder(tmp_path / "odd", v6_cfg(model_from_pretrained_kwargs={"first_n_layers": 1}))
    with pytest.raises(
        ValueError, match="loaded with first_n_layers=1, whose effect on activations interp_widgets cannot reproduce"
    ):
        load_sae(odd, model=gpt2_lm[0])
    assert not load_sae(odd, cfg_overrides={"model_from_pretrained_kwargs": {}}).preprocessing_["center"]


def test_bad_folders_get_clear_errors(gpt2_lm, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder: .*nowhere; pass the folder of an SAELens SAE"):
        load_sae(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"has no cfg.json \(it holds nothing\)"):
        load_sae(tmp_path / "empty")
    only_cfg = tmp_path / "only-cfg"
    only_cfg.mkdir()
    (only_cfg / "cfg.json").write_text(json.dumps(v6_cfg()))
    with pytest.raises(FileNotFoundError, match="has cfg.json but no sae_weights.safetensors"):
        load_sae(only_cfg)
    (only_cfg / "sae_weights.safetensors").write_bytes(b"garbage" * 10)
    with pytest.raises(ValueError, match="is not SAELens SAE weights: it is not a safetensors file"):
        load_sae(only_cfg)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "cfg.json").write_text("{not json")
    with pytest.raises(ValueError, match="cfg.json is not valid JSON"):
        load_sae(broken)
    with pytest.raises(
        ValueError, match="unknown or unsupported SAE architecture 'gated'; load_sae reads standard, topk, jumprelu"
    ):
        load_sae(write_folder(tmp_path / "gated", v6_cfg(architecture="gated")))
    with pytest.raises(ValueError, match="attention-head SAEs .* read per-head outputs"):
        load_sae(write_folder(tmp_path / "z", v6_cfg(hook_name="blocks.1.attn.hook_z")))
    with pytest.raises(ValueError, match="hook_name 'blocks.1.mlp.hook_post' is not a hook interp_widgets maps"):
        load_sae(write_folder(tmp_path / "post", v6_cfg(hook_name="blocks.1.mlp.hook_post")))
    with pytest.raises(ValueError, match="a topk SAE needs an integer k in \\[1, d_sae=48\\], got None"):
        load_sae(write_folder(tmp_path / "topk", v6_cfg(architecture="topk")))
    with pytest.raises(ValueError, match="unknown normalize_activations 'whiten'"):
        load_sae(write_folder(tmp_path / "norm", v6_cfg(normalize_activations="whiten")))
    with pytest.raises(ValueError, match="pass norm_scaling_factor="):
        load_sae(write_folder(tmp_path / "avg", v6_cfg(normalize_activations="expected_average_only_in")))
    with pytest.raises(ValueError, match="has no 'threshold' tensor"):
        load_sae(write_folder(tmp_path / "jump", v6_cfg(architecture="jumprelu")))
    g = torch.Generator().manual_seed(0)
    bad_shape = {
        "W_enc": torch.randn(48, 32, generator=g),
        "W_dec": torch.randn(48, 32, generator=g),
        "b_enc": torch.zeros(48),
        "b_dec": torch.zeros(32),
    }
    with pytest.raises(
        ValueError,
        match=r"W_enc has shape \(48, 32\) but cfg.json \(d_in=32, d_sae=48\) implies "
        r"\(32, 48\)",
    ):
        load_sae(write_folder(tmp_path / "shape", v6_cfg(), bad_shape))
    with pytest.raises(ValueError, match="names no hook point"):
        load_sae(write_folder(tmp_path / "nohook", v6_cfg(hook_name=None)))


def test_save_sae_errors_and_old_layout(lm_store, tmp_path):
    with pytest.raises(
        TypeError,
        match="save_sae writes sparse autoencoders .* not a PCAConcepts; save other "
        r"concept models with .save\(path\)",
    ):
        save_sae(PCAConcepts(4).fit(lm_store), tmp_path / "pca")
    on_array = SparseAutoencoder(8, k=2, max_epochs=1, progress=False).fit(lm_store.to_numpy())
    with pytest.raises(ValueError, match="its layer is unknown; pass hook_name="):
        save_sae(on_array, tmp_path / "array")
    folder = save_sae(on_array, tmp_path / "array", hook_name="blocks.3.hook_mlp_out")
    assert load_sae(folder).layer_ == "layer:3.mlp_out"
    with pytest.raises(ValueError, match="is not a TransformerLens hook name of a block"):
        save_sae(on_array, tmp_path / "x", hook_name="ln_final.hook_normalized")
    # a pre-6 config with the old key names, read by the same loader
    old = v6_cfg()
    old.update(
        hook_point=old["metadata"]["hook_name"],
        model_name="gpt2-small",
        normalize_activations=False,
        activation_fn_str="relu",
    )
    del old["metadata"], old["architecture"]
    sae = load_sae(write_folder(tmp_path / "old", old))
    assert sae.fit_info_["saelens"]["format"] == "pre-v6" and sae.layer_ == "layer:1" and sae.activation == "relu"


def test_rowwise_sae_in_concept_importance(gpt2_lm, tmp_path):
    model, tokenizer = gpt2_lm
    g = torch.Generator().manual_seed(2)
    weights = {
        "W_enc": torch.randn(32, 48, generator=g) * 0.3,
        "W_dec": torch.randn(48, 32, generator=g) * 0.3,
        "b_enc": torch.randn(48, generator=g) * 0.1,
        "b_dec": torch.randn(32, generator=g) * 0.1,
    }
    sae = load_sae(write_folder(tmp_path / "ln", v6_cfg(normalize_activations="layer_norm"), weights), model=model)
    text = "The staff were friendly."
    before = model_fingerprint(model, tokenizer)
    imp = concept_importance(sae, model, tokenizer, text)
    assert model_fingerprint(model, tokenizer) == before
    ids = torch.as_tensor(tokenizer(text).input_ids)[None]
    with torch.no_grad():
        clean = model(input_ids=ids).logits[0, -1, imp.target_ids[0]]
    assert imp.target_scores[0] == pytest.approx(float(clean), rel=1e-5)
    assert np.isfinite(imp.gradients).all() and np.abs(imp.gradients).max() > 0
    X = text_concepts(sae, model, tokenizer, text)
    C = torch.as_tensor(X.coefficients, dtype=torch.float32)
    with torch.no_grad(), capture(model, ["layer:1"]) as captured:
        model(input_ids=ids)
    h = captured["layer:1"][0][0]
    np.testing.assert_allclose(sae.decode_torch(C, h).numpy(), sae.inverse_transform(C.numpy(), X=h.numpy()), atol=1e-5)
