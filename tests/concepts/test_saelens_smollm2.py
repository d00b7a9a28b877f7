"""SAELens folders on the real SmolLM2 (demo.load_lm): the model's Hub name in saved folders, and the quality check on
load leaving the attention-sink rows alone (SmolLM2's first token at layer 15 is over 100 times the median norm)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from interp_widgets.concepts import SAEQualityWarning, SparseAutoencoder, collect_activations, load_sae, save_sae
from interp_widgets.concepts import splice_quality
from interp_widgets.concepts.saelens import read_config
from interp_widgets.demo import load_text_corpus
from interp_widgets.demo.lm import HUB_NAME
from tests.conftest import model_fingerprint

LAYER = "layer:15"


@pytest.fixture(scope="module")
def train_store(smollm2):
    model, tokenizer = smollm2
    return collect_activations(model, tokenizer, load_text_corpus("train", seed=0)[:6], layer=LAYER, progress=False)


def test_saved_folder_names_the_hub_model_and_the_model_is_untouched(smollm2, train_store, tmp_path):
    model, tokenizer = smollm2
    before = model_fingerprint(model, tokenizer)
    cache_path = model.config._name_or_path
    sae = SparseAutoencoder(16, k=4, max_epochs=1, progress=False).fit(train_store)
    assert sae.model_name_ == HUB_NAME == "HuggingFaceTB/SmolLM2-135M-Instruct"
    folder = save_sae(sae, tmp_path / "smollm2")
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["metadata"]["model_name"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert cfg["metadata"]["hook_name"] == "blocks.15.hook_resid_post"
    assert model.config._name_or_path == cache_path and "HuggingFaceTB" not in cache_path  # the config is not edited
    loaded = load_sae(folder, model=model)  # the name check passes against the real model
    assert loaded.model_name_ == HUB_NAME
    assert model_fingerprint(model, tokenizer) == before
    # a folder for another SmolLM2 is refused, naming both
    cfg["metadata"]["model_name"] = "HuggingFaceTB/SmolLM2-360M-Instruct"
    (folder / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(
        ValueError,
        match=r"'HuggingFaceTB/SmolLM2-360M-Instruct'.*not of "
        r"'HuggingFaceTB/SmolLM2-135M-Instruct'",
    ):
        load_sae(folder, model=model)
    # an explicit name still wins
    assert read_config(save_sae(sae, tmp_path / "named", model_name="my-smollm"))["model_name"] == "my-smollm"


def sink_blind_folder(folder, store, channels):
    """A standard SAE exact on every channel but ``channels``, which it decodes as their mean over the non-sink
    rows: as good as an SAE can be on ordinary tokens, hopeless on attention sinks (whose norm sits in those
    channels)."""
    X = store.to_numpy()
    ordinary = X[store.positions > 0]
    d = X.shape[1]
    mask = torch.ones(d)
    mask[channels] = 0.0
    D = torch.diag(mask)
    b_dec = torch.zeros(d)
    b_dec[channels] = torch.as_tensor(ordinary[:, channels].mean(0))
    weights = {
        "W_enc": torch.cat([D, -D], 1),
        "W_dec": torch.cat([D, -D], 0),
        "b_enc": torch.zeros(2 * d),
        "b_dec": b_dec,
    }
    cfg = {
        "d_in": d,
        "d_sae": 2 * d,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": False,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "architecture": "standard",
        "metadata": {
            "sae_lens_version": "6.12.0",
            "model_name": HUB_NAME,
            "hook_name": "blocks.15.hook_resid_post",
            "model_from_pretrained_kwargs": {},
        },
    }
    folder.mkdir(parents=True)
    (folder / "cfg.json").write_text(json.dumps(cfg))
    save_file(weights, str(folder / "sae_weights.safetensors"))
    return folder


def test_quality_on_load_leaves_attention_sinks_alone(smollm2, train_store, tmp_path):
    model, tokenizer = smollm2
    X, first = train_store.to_numpy(), train_store.positions == 0
    norms = np.linalg.norm(X, axis=1)
    assert norms[first].min() > 50 * np.median(norms[~first])  # the sinks this is about
    channels = np.argsort(-(X[first] ** 2).sum(0))[:2]  # where the sinks' norm sits
    folder = sink_blind_folder(tmp_path / "sink-blind", train_store, channels)
    probe = [load_text_corpus("test", seed=0)[i] for i in (1, 2, 4)]  # three short paragraphs (15-20 tokens)
    before = model_fingerprint(model, tokenizer)

    with warnings.catch_warnings():
        warnings.simplefilter("error", SAEQualityWarning)
        sae = load_sae(folder, model=model, tokenizer=tokenizer, texts=probe, progress=False)  # default "auto"
    quality = sae.fit_info_["quality"]
    assert quality["n_skipped"] == len(probe) and quality["fvu"] < 0.1 and quality["loss_recovered"] > 0.9
    # "auto" found exactly the first tokens: the same figures as skipping one position
    by_position = splice_quality(sae, model, tokenizer, probe, skip_positions=1, progress=False).to_dict()
    assert {k: v for k, v in quality.items() if k != "n_skipped"} == {
        k: v for k, v in by_position.items() if k != "n_skipped"
    }

    # without skipping, the sinks are spliced and the same SAE looks broken: the warning the default avoids
    with pytest.warns(SAEQualityWarning, match="the SAE reconstructs layer:15 badly"):
        blind = load_sae(folder, model=model, tokenizer=tokenizer, texts=probe, progress=False, skip_positions=0)
    assert blind.fit_info_["quality"]["n_skipped"] == 0 and blind.fit_info_["quality"]["fvu"] > 0.5
    assert model_fingerprint(model, tokenizer) == before

    with pytest.raises(ValueError, match="skip_positions must be a number of leading positions or 'auto'"):
        load_sae(folder, model=model, tokenizer=tokenizer, texts=probe, progress=False, skip_positions="first")
