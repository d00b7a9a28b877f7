"""The hook-name mapping and the TransformerLens processing rules, checked against transformer-lens itself.

A tiny GPT-2 (LayerNorm) and a tiny Llama (RMSNorm, grouped-query attention) are built from configs, saved to a
temporary folder and converted by TransformerLens's own loading code (``get_pretrained_model_config`` and
``get_pretrained_state_dict`` read a local folder, so nothing downloads). Every ``blocks.i.hook_*`` point that
``from_hook_name`` maps must hold TransformerLens's cached activation, with and without each processing option of
``from_pretrained``.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch

from interp_widgets.concepts import transformer_lens_processing
from interp_widgets._model_names import same_model_name
from interp_widgets.layers import capture, from_hook_name, resolve_layer, to_hook_name

pytestmark = [
    pytest.mark.saelens,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
POINTS = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")
TEXT = "The soup was cold, but the staff were friendly and quick."


def hooked(hf_model, tokenizer, tmp_path, **processing):
    """TransformerLens's HookedTransformer of ``hf_model``, with ``processing`` as in ``from_pretrained``."""
    import transformer_lens.loading_from_pretrained as loading
    from transformer_lens import HookedTransformer

    folder = tmp_path / "model"  # TransformerLens picks the Llama branch by name: keep "llama" out of the path
    if not folder.exists():
        hf_model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        config = json.loads((folder / "config.json").read_text())
        config.setdefault("n_ctx", config.get("n_positions", config.get("max_position_embeddings")))
        (folder / "config.json").write_text(json.dumps(config))  # the copy only: the user's model is untouched
    options = {
        "fold_ln": False,
        "center_writing_weights": False,
        "center_unembed": False,
        "fold_value_biases": False,
        "refactor_factored_attn_matrices": False,
        **processing,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = loading.get_pretrained_model_config(str(folder), device="cpu", fold_ln=options["fold_ln"])
        model = HookedTransformer(cfg, None, move_to_device=False)
        state = loading.get_pretrained_state_dict(str(folder), cfg, hf_model=hf_model)
        model.load_and_process_state_dict(state, **options)
    return model.eval()


def ours(hf_model, ids) -> dict[str, np.ndarray]:
    names = {
        f"blocks.{i}.hook_{point}": resolve_layer(hf_model, f"blocks.{i}.hook_{point}").name
        for i in range(hf_model.config.num_hidden_layers)
        for point in POINTS
    }
    with torch.no_grad(), capture(hf_model, list(names.values())) as captured:
        out = hf_model(input_ids=ids, output_hidden_states=True)
    return {hook: captured[name][0][0].numpy() for hook, name in names.items()} | {
        "hf_last_hidden": out.hidden_states[-1][0].numpy()
    }


@pytest.fixture(params=["gpt2", "llama"])
def family(request, gpt2_lm, llama_lm):
    return request.param, *(gpt2_lm if request.param == "gpt2" else llama_lm)


def test_hook_names_hold_transformer_lens_activations(family, tmp_path):
    name, hf_model, tokenizer = family
    tl = hooked(hf_model, tokenizer, tmp_path)
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        tl_logits, cache = tl.run_with_cache(ids)
        hf_logits = hf_model(input_ids=ids).logits
    np.testing.assert_allclose(tl_logits.numpy(), hf_logits.numpy(), atol=1e-4)  # the conversion is faithful
    mine = ours(hf_model, ids)
    n_layers = hf_model.config.num_hidden_layers
    for i in range(n_layers):
        for point in POINTS:
            hook = f"blocks.{i}.hook_{point}"
            assert to_hook_name(from_hook_name(hook)) == hook
            np.testing.assert_allclose(mine[hook], cache[hook][0].numpy(), atol=1e-5, err_msg=f"{name} {hook}")
    # the last block's hook_resid_post is before the final norm; Hugging Face's last hidden state is after it
    last = f"blocks.{n_layers - 1}.hook_resid_post"
    assert from_hook_name(last) == f"layer:{n_layers - 1}"
    np.testing.assert_allclose(mine["hf_last_hidden"], cache["ln_final.hook_normalized"][0].numpy(), atol=1e-4)
    assert np.abs(mine["hf_last_hidden"] - cache[last][0].numpy()).max() > 0.1


PROCESSING = [
    {"center_writing_weights": True},
    {"fold_ln": True},
    {"fold_ln": True, "center_writing_weights": True},
    {"center_unembed": True},
    {"fold_value_biases": True},
    {"refactor_factored_attn_matrices": True},
    {"fold_ln": True, "center_writing_weights": True, "center_unembed": True, "fold_value_biases": True},  # defaults
]


# TransformerLens refuses to refactor the QK circuit of a rotary model (Llama), so no SAE was trained on one
CASES = [
    (name, processing)
    for name in ("gpt2", "llama")
    for processing in PROCESSING
    if not (name == "llama" and "refactor_factored_attn_matrices" in processing)
]


@pytest.mark.parametrize(("name", "processing"), CASES, ids=lambda p: p if isinstance(p, str) else "+".join(p))
def test_processing_rules_match_transformer_lens(name, processing, gpt2_lm, llama_lm, tmp_path):
    hf_model, tokenizer = gpt2_lm if name == "gpt2" else llama_lm
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        _, cache = hooked(hf_model, tokenizer, tmp_path, **processing).run_with_cache(ids)
    center = transformer_lens_processing(hf_model, processing)
    assert center == (name == "gpt2" and processing.get("center_writing_weights", False))
    mine = ours(hf_model, ids)
    for i in range(hf_model.config.num_hidden_layers):
        for point in POINTS:
            hook = f"blocks.{i}.hook_{point}"
            expected = mine[hook] - mine[hook].mean(-1, keepdims=True) if center else mine[hook]
            np.testing.assert_allclose(expected, cache[hook][0].numpy(), atol=1e-4, err_msg=f"{name} {hook}")


def test_centred_sae_reads_transformer_lens_activations(gpt2_lm, tmp_path):
    """An SAE folder whose config asks for center_writing_weights, loaded onto the Hugging Face model, encodes
    what the SAE sees on TransformerLens's processed model."""
    from sae_lens import SAE, StandardSAE, StandardSAEConfig
    from sae_lens.saes.sae import SAEMetadata

    from interp_widgets.concepts import load_sae, text_concepts

    hf_model, tokenizer = gpt2_lm
    metadata = SAEMetadata(
        model_name="gpt2",
        hook_name="blocks.1.hook_resid_mid",
        model_from_pretrained_kwargs={"center_writing_weights": True},
    )
    theirs = StandardSAE(StandardSAEConfig(d_in=32, d_sae=48, metadata=metadata))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in theirs.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    theirs.save_model(tmp_path / "sae")
    theirs = SAE.load_from_disk(tmp_path / "sae")
    with pytest.raises(ValueError, match="pass model= so load_sae can tell"):
        load_sae(tmp_path / "sae")
    sae = load_sae(tmp_path / "sae", model=hf_model)
    assert sae.preprocessing_["center"]
    tl = hooked(hf_model, tokenizer, tmp_path, center_writing_weights=True)
    text = "The room was quiet."
    ids = torch.as_tensor(tokenizer(text).input_ids)[None]
    with torch.no_grad():
        _, cache = tl.run_with_cache(ids)
        expected = theirs.encode(cache["blocks.1.hook_resid_mid"][0]).numpy()
    np.testing.assert_allclose(text_concepts(sae, hf_model, tokenizer, text).coefficients, expected, atol=1e-4)


def test_model_names_of_saelens_releases_match_their_hub_names():
    """Every model an SAELens release names matches the Hub name TransformerLens resolves it to."""
    from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory
    from transformer_lens.loading_from_pretrained import get_official_model_name

    names = sorted({release.model for release in get_pretrained_saes_directory().values()})
    assert len(names) > 20
    checked = 0
    for name in names:
        try:
            official = get_official_model_name(name)
        except ValueError:
            continue  # a Hub id TransformerLens does not list (HookedProxyLM models): compared as it is
        assert same_model_name(name, official), (name, official)
        checked += 1
    assert checked > 15
    assert same_model_name("gpt2-small", get_official_model_name("gpt2-small"))
    assert not same_model_name("pythia-70m", "EleutherAI/pythia-70m-deduped")
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # nothing here downloads
