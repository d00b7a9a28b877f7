"""load_sae / save_sae against the real sae-lens: ours -> SAE.load_from_disk -> the same encodings, and back.

Encodings are compared to 1e-5 (absolute, on coefficients of order 1). Every SAELens architecture load_sae reads
(standard, topk, jumprelu) is built by SAELens itself with random weights, for every input normalisation and
both settings of apply_b_dec_to_input, and saved with SAELens's own save_model; older config layouts are written by
hand in the pre-6 format that SAELens's loader still converts.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from interp_widgets.concepts import (
    BatchTopKSAE,
    JumpReLUSAE,
    SparseAutoencoder,
    collect_activations,
    load_sae,
    save_sae,
)
from interp_widgets.demo import corpus
from sae_lens import SAE
from sae_lens.saes.sae import SAEMetadata

pytestmark = [
    pytest.mark.saelens,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*model_from_pretrained_kwargs.*:UserWarning"),
]
ATOL = 1e-5


@pytest.fixture(scope="module")
def store(gpt2_lm):
    model, tokenizer = gpt2_lm
    return collect_activations(model, tokenizer, corpus()[:30], layer=1, progress=False)


def encode_theirs(sae, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        x = torch.from_numpy(X)
        codes = sae.encode(x)
        return codes.numpy(), sae.decode(codes).numpy() if sae.cfg.normalize_activations == "none" else None


def reconstruct_theirs(sae, X: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        x = torch.from_numpy(X)
        return sae.decode(sae.encode(x)).numpy()  # encode stores the row statistics decode undoes


OURS = {
    "relu": lambda: SparseAutoencoder(
        48, activation="relu", l1_coefficient=3e-2, max_epochs=3, batch_size=128, progress=False
    ),
    "topk": lambda: SparseAutoencoder(48, k=6, max_epochs=3, batch_size=128, progress=False),
    "jumprelu": lambda: JumpReLUSAE(48, l0_coefficient=3e-2, lr=1e-2, max_epochs=3, batch_size=128, progress=False),
    "batchtopk": lambda: BatchTopKSAE(48, k=6, max_epochs=3, batch_size=128, progress=False),
}
ARCHITECTURE = {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu", "batchtopk": "jumprelu"}


@pytest.mark.parametrize("kind", list(OURS))
def test_ours_to_saelens_and_back(kind, store, tmp_path):
    ours = OURS[kind]().fit(store)
    X = store.to_numpy()
    folder = save_sae(ours, tmp_path / "ours", model_name="tiny-gpt2")
    theirs = SAE.load_from_disk(folder)
    assert theirs.cfg.architecture() == ARCHITECTURE[kind]
    assert theirs.cfg.metadata.hook_name == "blocks.1.hook_resid_post"
    assert theirs.cfg.metadata.model_name == "tiny-gpt2"
    codes, recon = encode_theirs(theirs, X)
    mine = ours.transform(X)
    assert (mine > 0).sum() > 0 and (mine == 0).sum() > 0  # a sparse code, not a trivial one
    np.testing.assert_allclose(codes, mine, atol=ATOL)
    np.testing.assert_allclose(recon, ours.inverse_transform(mine), atol=ATOL)

    theirs.save_model(tmp_path / "theirs")  # SAELens's own writer, read back by ours
    back = load_sae(tmp_path / "theirs")
    assert back.layer_ == "layer:1" and back.model_name_ == "tiny-gpt2"
    np.testing.assert_allclose(back.transform(X), mine, atol=ATOL)
    np.testing.assert_allclose(back.inverse_transform(back.transform(X)), recon, atol=ATOL)
    if kind == "batchtopk":  # the inference threshold keeps k concepts per row on average on the monitoring rows
        assert float((codes > 0).sum(1).mean()) == pytest.approx(6, rel=0.25)


def saelens_sae(architecture: str, d_in: int, d_sae: int, *, seed: int, **cfg):
    from sae_lens import JumpReLUSAE as TheirJumpReLU
    from sae_lens import JumpReLUSAEConfig, StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig

    classes = {
        "standard": (StandardSAE, StandardSAEConfig),
        "topk": (TopKSAE, TopKSAEConfig),
        "jumprelu": (TheirJumpReLU, JumpReLUSAEConfig),
    }
    sae_class, cfg_class = classes[architecture]
    metadata = SAEMetadata(model_name="gpt2-small", hook_name="blocks.1.hook_resid_post")
    sae = sae_class(cfg_class(d_in=d_in, d_sae=d_sae, metadata=metadata, **cfg))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sae.named_parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * (0.3 if name.startswith("W") else 0.1))
        if architecture == "jumprelu":
            sae.threshold.copy_(torch.rand(d_sae, generator=generator) * 0.5)
    return sae


CASES = [
    (architecture, normalize, apply_b_dec)
    for architecture in ("standard", "topk", "jumprelu")
    for normalize in ("none", "constant_norm_rescale", "layer_norm")
    for apply_b_dec in (True, False)
]


@pytest.mark.parametrize(("architecture", "normalize", "apply_b_dec"), CASES)
def test_saelens_folders_load_with_the_same_encodings(architecture, normalize, apply_b_dec, store, tmp_path):
    extra = {"k": 5} if architecture == "topk" else {}
    theirs = saelens_sae(
        architecture,
        store.dim,
        40,
        seed=len(tmp_path.name),
        normalize_activations=normalize,
        apply_b_dec_to_input=apply_b_dec,
        **extra,
    )
    theirs.save_model(tmp_path / "sae")
    theirs = SAE.load_from_disk(tmp_path / "sae")  # what a user of SAELens gets from the same folder
    ours = load_sae(tmp_path / "sae")
    X = store.to_numpy() * 3.0 + 0.5  # off-centre, off-scale rows: the normalisations have work to do
    codes = encode_theirs(theirs, X)[0]
    assert 0 < (codes > 0).mean() < 1
    np.testing.assert_allclose(ours.transform(X), codes, atol=ATOL)
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(X), X=X), reconstruct_theirs(theirs, X), atol=1e-4)
    assert ours.rowwise == (normalize != "none")
    if ours.rowwise:
        with pytest.raises(ValueError, match=r"pass X= \(the activations the coefficients came from\)"):
            ours.inverse_transform(ours.transform(X[:3]))
    again = load_sae(save_sae(ours, tmp_path / "again"))  # ours written back: SAELens reads the same SAE
    np.testing.assert_allclose(encode_theirs(SAE.load_from_disk(tmp_path / "again"), X)[0], codes, atol=ATOL)
    np.testing.assert_allclose(again.transform(X), codes, atol=ATOL)


def test_topk_rescaled_by_decoder_norm(store, tmp_path):
    theirs = saelens_sae("topk", store.dim, 40, seed=3, k=4, rescale_acts_by_decoder_norm=True)
    theirs.save_model(tmp_path / "sae")
    theirs = SAE.load_from_disk(tmp_path / "sae")
    X = store.to_numpy()
    ours = load_sae(tmp_path / "sae")
    np.testing.assert_allclose(ours.transform(X), encode_theirs(theirs, X)[0], atol=ATOL)
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(X)), reconstruct_theirs(theirs, X), atol=ATOL)


def test_expected_average_only_in_is_folded_like_saelens(store, tmp_path):
    from sae_lens.training.activation_scaler import ActivationScaler

    theirs = saelens_sae("jumprelu", store.dim, 40, seed=4, normalize_activations="expected_average_only_in")
    theirs.save_model(tmp_path / "sae")
    X = store.to_numpy()
    with pytest.raises(ValueError, match="pass norm_scaling_factor="):
        load_sae(tmp_path / "sae")
    factor = 0.37
    reference = SAE.load_from_disk(tmp_path / "sae")
    reference.fold_activation_norm_scaling_factor(factor)  # what SAE.from_pretrained does with the registry's factor
    expected = encode_theirs(reference, X)[0]
    np.testing.assert_allclose(load_sae(tmp_path / "sae", norm_scaling_factor=factor).transform(X), expected, atol=ATOL)
    ActivationScaler(scaling_factor=factor).save(str(tmp_path / "sae" / "activation_scaler.json"))  # a training run's
    np.testing.assert_allclose(load_sae(tmp_path / "sae").transform(X), expected, atol=ATOL)


def test_covariance_whitening_is_folded_like_saelens(store, tmp_path):
    from sae_lens.training.activation_scaler import ActivationScaler

    theirs = saelens_sae(
        "topk", store.dim, 40, seed=5, k=5, normalize_activations="covariance_whitening", apply_b_dec_to_input=False
    )
    theirs.save_model(tmp_path / "sae")
    X = store.to_numpy()
    scaler = ActivationScaler()
    scaler.estimate_whitening(store.dim, iter([torch.from_numpy(X)]), n_batches_for_norm_estimate=1)
    scaler.save(str(tmp_path / "sae" / "activation_scaler.json"))
    reference = SAE.load_from_disk(tmp_path / "sae")
    reference.fold_activation_whitening(scaler.whitening.mean, scaler.whitening.matrix, scaler.whitening.inverse_matrix)
    ours = load_sae(tmp_path / "sae")
    np.testing.assert_allclose(ours.transform(X), encode_theirs(reference, X)[0], atol=1e-4)


def write_pre_v6(folder, cfg: dict, weights: dict):
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps(cfg))
    save_file({name: t.contiguous() for name, t in weights.items()}, str(folder / "sae_weights.safetensors"))


@pytest.mark.parametrize("layout", ["standard", "topk"])
def test_pre_v6_configs_read_like_saelens(layout, store, tmp_path):
    generator = torch.Generator().manual_seed(6)
    d_in, d_sae = store.dim, 40
    weights = {
        "W_enc": torch.randn(d_in, d_sae, generator=generator) * 0.3,
        "W_dec": torch.randn(d_sae, d_in, generator=generator) * 0.3,
        "b_enc": torch.randn(d_sae, generator=generator) * 0.1,
        "b_dec": torch.randn(d_in, generator=generator) * 0.1,
    }
    cfg = {
        "model_name": "gpt2-small",
        "hook_point": "blocks.1.hook_resid_pre",
        "hook_point_layer": 1,
        "hook_point_head_index": None,
        "d_in": d_in,
        "d_sae": d_sae,
        "dtype": "torch.float32",
        "device": "cpu",
        "activation_fn_str": "relu",
        "apply_b_dec_to_input": True,
        "normalize_activations": False,
        "context_size": 128,
        "l1_coefficient": 8e-05,
        "lr": 0.0004,
        "prepend_bos": True,
    }
    if layout == "topk":  # SAELens 4/5 wrote TopK SAEs as activation_fn topk with its k in activation_fn_kwargs
        cfg.update(activation_fn_str="topk", activation_fn_kwargs={"k": 7}, sae_lens_training_version="4.1.0")
    write_pre_v6(tmp_path / "old", cfg, weights)
    theirs = SAE.load_from_disk(tmp_path / "old")
    assert theirs.cfg.architecture() == layout and theirs.cfg.metadata.hook_name == "blocks.1.hook_resid_pre"
    ours = load_sae(tmp_path / "old")
    assert ours.layer_ == "layer:1.resid_pre" and ours.model_name_ == "gpt2-small"
    assert ours.fit_info_["saelens"]["format"] == "pre-v6"
    X = store.to_numpy()
    np.testing.assert_allclose(ours.transform(X), encode_theirs(theirs, X)[0], atol=ATOL)


def test_saelens_batchtopk_saved_as_jumprelu_loads(store, tmp_path):
    """SAELens's own BatchTopK training SAE, saved for inference (as jumprelu with its threshold), reads the same."""
    from sae_lens import BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig

    cfg = BatchTopKTrainingSAEConfig(
        d_in=store.dim, d_sae=40, k=5.0, metadata=SAEMetadata(model_name="gpt2", hook_name="blocks.1.hook_mlp_out")
    )
    training = BatchTopKTrainingSAE(cfg)
    with torch.no_grad():
        training.topk_threshold.fill_(0.35)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        training.save_inference_model(tmp_path / "btk")
    theirs = SAE.load_from_disk(tmp_path / "btk")
    ours = load_sae(tmp_path / "btk")
    assert type(ours).__name__ == "JumpReLUSAE" and ours.layer_ == "layer:1.mlp_out"
    X = store.to_numpy()
    np.testing.assert_allclose(ours.transform(X), encode_theirs(theirs, X)[0], atol=ATOL)
    assert float(ours.weights_["threshold"].min()) == pytest.approx(0.35)


def test_matryoshka_both_forms_round_trip(store, tmp_path):
    """Ours -> SAELens's MatryoshkaBatchTopKTrainingSAE (same batch codes, same per-width losses) -> its inference
    form (jumprelu, with matryoshka_widths in the metadata) -> ours: the same encodings and the widths kept."""
    from sae_lens import MatryoshkaBatchTopKTrainingSAE, MatryoshkaBatchTopKTrainingSAEConfig
    from sae_lens.saes.sae import TrainStepInput

    from interp_widgets.concepts import MatryoshkaSAE

    ours = MatryoshkaSAE(48, k=6, prefixes=(8, 24), max_epochs=3, batch_size=128, progress=False).fit(store)
    X = store.to_numpy()
    folder = save_sae(ours, tmp_path / "ours", model_name="tiny-gpt2")
    inference = SAE.load_from_disk(folder)  # the inference form, as SAELens reads our folder
    assert inference.cfg.architecture() == "jumprelu"
    details = inference.cfg.metadata.training_architecture_details
    assert inference.cfg.metadata.training_architecture == "matryoshka_batchtopk"
    assert details["matryoshka_widths"] == [8, 24, 48] and details["k"] == 6.0
    np.testing.assert_allclose(encode_theirs(inference, X)[0], ours.transform(X), atol=ATOL)

    # the training form, from our folder's config and weights
    metadata = SAEMetadata(model_name="tiny-gpt2", hook_name=inference.cfg.metadata.hook_name)
    cfg = MatryoshkaBatchTopKTrainingSAEConfig(
        d_in=store.dim,
        d_sae=48,
        k=details["k"],
        matryoshka_widths=details["matryoshka_widths"],
        rescale_acts_by_decoder_norm=False,  # our decoder rows are unit norm in our units, not in SAELens's
        metadata=metadata,
    )
    training = MatryoshkaBatchTopKTrainingSAE(cfg)
    with torch.no_grad():
        for name in ("W_enc", "W_dec", "b_enc", "b_dec"):
            getattr(training, name).copy_(getattr(inference, name))
        training.topk_threshold.fill_(float(ours.weights_["threshold"][0]))
    batch = torch.from_numpy(X[:128])  # k × rows = 768 kept by both (SAELens floors, we round)
    with torch.no_grad():
        theirs_codes = training.encode(batch)
        theirs_codes = theirs_codes.to_dense() if theirs_codes.is_sparse else theirs_codes
        w = {name: t.clone() for name, t in ours.weights_.items()}
        xn = ours._normalise(batch, w)
        our_codes = ours._encode(xn, w, training=True)
        np.testing.assert_allclose(theirs_codes.numpy(), our_codes.numpy(), atol=ATOL)  # the global BatchTopK
        step = training.training_forward_pass(
            TrainStepInput(
                sae_in=batch, coefficients={}, dead_neuron_mask=None, n_training_steps=0, is_logging_step=False
            )
        )
        # each width reconstructs from its own latents; SAELens sums squared errors over features in input units
        # where we average them in units of scale_, so ours × d × scale² is theirs
        theirs_total = step.losses["mse_loss"] + sum(v for key, v in step.losses.items() if key.startswith("inner_mse"))
        assert sorted(key for key in step.losses if key.startswith("inner_mse")) == [
            "inner_mse_loss_24",
            "inner_mse_loss_8",
        ]
        ours_total = ours._loss(xn, w).loss * store.dim * ours.scale_**2
        assert float(ours_total) == pytest.approx(float(theirs_total), rel=1e-4)
        training.topk_threshold.fill_(float(ours.weights_["threshold"][0]))  # the step moved it (a running average)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        training.save_inference_model(tmp_path / "inference")  # SAELens's own inference form of its training SAE
    cfg_json = json.loads((tmp_path / "inference" / "cfg.json").read_text())
    assert cfg_json["architecture"] == "jumprelu"
    back = load_sae(tmp_path / "inference")
    assert type(back) is MatryoshkaSAE and back.prefixes_ == [8, 24, 48] and back.k_ == 6.0
    np.testing.assert_allclose(back.transform(X), ours.transform(X), atol=ATOL)
    np.testing.assert_allclose(
        back.transform(X), encode_theirs(SAE.load_from_disk(tmp_path / "inference"), X)[0], atol=ATOL
    )


def _matryoshka_checkpoint(store, folder, normalize: str, factor: float):
    """A Matryoshka BatchTopK training SAE written by SAELens as its trainer checkpoints it (save_model, and the
    activation scaler's json): three training steps move its topk_threshold; decoder rows of uneven norms."""
    from sae_lens import MatryoshkaBatchTopKTrainingSAE, MatryoshkaBatchTopKTrainingSAEConfig
    from sae_lens.saes.sae import TrainStepInput
    from sae_lens.training.activation_scaler import ActivationScaler

    cfg = MatryoshkaBatchTopKTrainingSAEConfig(
        d_in=store.dim,
        d_sae=40,
        k=5.0,
        matryoshka_widths=[6, 16, 40],
        normalize_activations=normalize,
        metadata=SAEMetadata(model_name="gpt2", hook_name="blocks.1.hook_resid_post"),
    )
    torch.manual_seed(0)
    training = MatryoshkaBatchTopKTrainingSAE(cfg)  # rescale_acts_by_decoder_norm=True, SAELens's default
    assert training.cfg.rescale_acts_by_decoder_norm
    with torch.no_grad():
        training.W_dec.mul_(torch.rand(40, 1) + 0.5)
        training.b_enc.normal_(0.0, 0.02)
        training.b_dec.normal_(0.0, 0.02)
        scaler = ActivationScaler(scaling_factor=factor if normalize == "expected_average_only_in" else None)
        for start in (0, 128, 256):  # the trainer feeds scaled activations
            batch = scaler.scale(torch.from_numpy(store.to_numpy()[start : start + 128]))
            training.training_forward_pass(
                TrainStepInput(
                    sae_in=batch, coefficients={}, dead_neuron_mask=None, n_training_steps=0, is_logging_step=False
                )
            )
    assert float(training.topk_threshold) > 0
    training.save_model(folder)  # what SAETrainer.save_checkpoint writes, beside the trainer state
    scaler.save(str(folder / "activation_scaler.json"))
    return scaler


@pytest.mark.parametrize("normalize", ["none", "expected_average_only_in"])
def test_matryoshka_training_form_folder_loads_like_saelens_conversion(normalize, store, tmp_path):
    """SAELens's training-form folder of a Matryoshka BatchTopK SAE (architecture matryoshka_batchtopk, the widths,
    topk_threshold in the weights) loads as the MatryoshkaSAE whose encodings and reconstructions equal those of the
    inference SAE SAELens makes from it: the scaler folded as SAETrainer.fit does, then save_inference_model."""
    from sae_lens.saes.sae import TrainingSAE

    from interp_widgets.concepts import MatryoshkaSAE

    checkpoint = tmp_path / "checkpoint"
    scaler = _matryoshka_checkpoint(store, checkpoint, normalize, factor=1.7)
    raw = json.loads((checkpoint / "cfg.json").read_text())
    assert raw["architecture"] == "matryoshka_batchtopk" and raw["matryoshka_widths"] == [6, 16, 40]
    assert raw["normalize_activations"] == normalize

    again = TrainingSAE.load_from_disk(checkpoint)  # SAELens's own conversion of the folder
    if scaler.scaling_factor is not None:
        again.fold_activation_norm_scaling_factor(scaler.scaling_factor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again.save_inference_model(tmp_path / "inference")
    theirs = SAE.load_from_disk(tmp_path / "inference")
    assert theirs.cfg.architecture() == "jumprelu"

    ours = load_sae(checkpoint)
    assert type(ours) is MatryoshkaSAE and ours.prefixes_ == [6, 16, 40] and ours.k_ == 5.0
    assert ours.layer_ == "layer:1" and ours.fit_info_["saelens"]["training_architecture"] == "matryoshka_batchtopk"
    X = store.to_numpy()
    codes, recon = encode_theirs(theirs, X)
    assert 0 < (codes > 0).mean() < 0.5  # some latents fire, most do not
    np.testing.assert_allclose(ours.transform(X), codes, atol=ATOL)
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(X)), recon, atol=ATOL)
    np.testing.assert_allclose(ours.weights_["threshold"].numpy(), theirs.threshold.detach().numpy(), rtol=1e-6)


def test_a_training_form_folder_without_its_threshold_or_scaler_is_refused(store, tmp_path):
    from safetensors.torch import load_file, save_file

    checkpoint = tmp_path / "checkpoint"
    _matryoshka_checkpoint(store, checkpoint, "expected_average_only_in", factor=1.7)
    (checkpoint / "activation_scaler.json").unlink()
    with pytest.raises(ValueError, match="no activation_scaler.json"):
        load_sae(checkpoint)
    weights = load_file(checkpoint / "sae_weights.safetensors")
    del weights["topk_threshold"]
    save_file(weights, checkpoint / "sae_weights.safetensors")
    with pytest.raises(ValueError, match="no 'topk_threshold'"):
        load_sae(checkpoint, norm_scaling_factor=1.7)
