"""EleutherAI sparsify transcoder folders into a TranscoderSet, and Transcoder.from_weights.

References:

- the released package, PyPI ``eai-sparsify==1.3.3`` (not the unrelated PyPI ``sparsify``): a folder trained by its
  ``Trainer`` on a CPU loads with no fold and predicts what ``SparseCoder.forward`` outputs;
- the ``clt`` branch of github.com/EleutherAI/sparsify at commit d7f7368ec229cebd8975ff21561459655c0b375a ("Better LR
  for muon", 2025-05-21), whose ``normalize_io`` adds ``in_norm`` / ``out_norm``: its forward pass is written out
  below (:func:`clt_forward`) from ``sparsify/sparse_coder.py``, ``sparsify/fused_encoder.py``, ``sparsify/utils.py``
  and ``sparsify/runner.py`` at that commit, since that branch was never released (it needs triton and
  torch.compile);
- circuit-tracer's per-layer forward (``f = σ(W_enc x + b_enc)``, ``ŷ = f W_dec + b_dec + x W_skipᵀ``), written here.
"""

from __future__ import annotations

import copy
import importlib.metadata
import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from interp_widgets.circuits import TranscoderSet, collect_transcoder_pairs
from interp_widgets.concepts import Transcoder
from interp_widgets.demo import corpus
from tests import tiny_models
from tests.conftest import model_fingerprint

D, N, K = 32, 64, 4  # the tiny Llama's width; latents; active latents
TEXTS = corpus()[:6]

#: cfg.json as eai-sparsify 1.3.3's SparseCoder.save_to_disk writes it (SparseCoderConfig fields plus d_in)
CFG_133 = {"activation": "topk", "expansion_factor": 32, "normalize_decoder": True, "num_latents": N, "k": K,
           "multi_topk": False, "skip_connection": True, "transcode": True, "d_in": D}  # fmt: skip
#: cfg.json of the clt branch at d7f7368 (its SparseCoderConfig has these extra fields)
CFG_CLT = {**CFG_133, "n_targets": 0, "n_sources": 0, "normalize_io": True, "divide_cross_layer": False,
           "train_post_encoder": True, "post_encoder_scale": False, "coalesce_topk": "none", "topk_coalesced": True}  # fmt: skip


def random_tensors(seed: int, *, bias: float = 0.0, skip: bool = True) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {
        "encoder.weight": torch.randn(N, D, generator=g) / math.sqrt(D),
        "encoder.bias": bias + 0.1 * torch.randn(N, generator=g),
        "W_dec": torch.randn(N, D, generator=g) / 4,
        "b_dec": torch.randn(D, generator=g) / 10,
    }
    if skip:
        out["W_skip"] = torch.randn(D, D, generator=g) / math.sqrt(D)
    return out


def write(root, name: str, cfg: dict, tensors: dict[str, torch.Tensor]):
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "cfg.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "sae.safetensors"))
    return path


def mlp_inputs(model, tokenizer) -> dict[int, np.ndarray]:
    return {layer: X for layer, (X, _) in collect_transcoder_pairs(model, tokenizer, TEXTS).items()}


# ------------------------------------------------------------------------------- eai-sparsify 1.3.3, trained here
def test_a_folder_trained_by_eai_sparsify_1_3_3_loads_with_no_fold_and_equals_its_forward(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSIFY_DISABLE_TRITON", "1")  # its eager decoder; the command line hard-codes CUDA
    assert importlib.metadata.version("eai-sparsify") == "1.3.3"
    from sparsify import SparseCoder, SparseCoderConfig, TrainConfig, Trainer

    model, tokenizer = tiny_models.llama_lm()
    before = model_fingerprint(model, tokenizer)
    trained_on = copy.deepcopy(model)  # the Trainer freezes the model it is given (requires_grad_(False))
    rows = [ids[:16] for ids in tokenizer(corpus()[:40])["input_ids"] if len(ids) >= 16][:16]
    dataset = [{"input_ids": torch.tensor(row)} for row in rows]  # 4 batches of 4 sequences
    cfg = TrainConfig(SparseCoderConfig(num_latents=N, k=K, transcode=True, skip_connection=True), batch_size=4,
                      hookpoints=["layers.*.mlp"], log_to_wandb=False, save_dir=str(tmp_path), run_name="run",
                      save_every=10**6, lr=1e-2)  # fmt: skip
    precision = torch.get_float32_matmul_precision()
    try:
        with torch.random.fork_rng(devices=[]):  # the Trainer seeds torch's global generator (init_seeds)
            Trainer(cfg, dataset, trained_on).fit()
    finally:
        torch.set_float32_matmul_precision(precision)  # fit() sets "high" for the whole process
    run = tmp_path / "run"
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["layers.0.mlp", "layers.1.mlp"]

    tcs = TranscoderSet.from_sparsify(run, model=model, progress=False)
    assert (tcs.layers, tcs.input_point, tcs.d_model, tcs.n_layers) == ([0, 1], "mlp_in", D, 2)
    assert "in_norm" not in tcs[0].fit_info_  # 1.3.3 has no normalisation: nothing folded
    X = mlp_inputs(model, tokenizer)
    for layer in (0, 1):
        reference = SparseCoder.load_from_disk(run / f"layers.{layer}.mlp")
        assert (
            float(reference.W_dec.detach().abs().sum()) > 0
        )  # trained: sparsify initialises a transcoder's W_dec at 0
        x = torch.from_numpy(X[layer])
        with torch.no_grad():
            out = reference(x)
        np.testing.assert_allclose(tcs[layer].predict(X[layer]), out.sae_out.numpy(), atol=1e-5, rtol=0)
        dense = torch.zeros(len(x), N).scatter(1, out.latent_indices, out.latent_acts).numpy()
        np.testing.assert_allclose(tcs[layer].transform(X[layer]), dense, atol=1e-5, rtol=0)
        # the raw weights, exactly (no fold): circuit-tracer's layout is sparsify's
        folded = tcs[layer].folded()
        np.testing.assert_array_equal(folded["W_enc"].numpy(), reference.encoder.weight.detach().numpy())
        np.testing.assert_array_equal(folded["W_skip"].numpy(), reference.W_skip.detach().numpy())
    assert model_fingerprint(model, tokenizer) == before


def test_relu_then_top_k_gives_the_same_features_as_top_k_then_relu():
    """sparsify keeps the top k of ReLU(pre); our TopK keeps the top k of pre, then ReLU: the same vector, also on
    rows with fewer than k positive pre-activations (there the top k of ReLU(pre) holds zeros that add nothing)."""
    pre = torch.randn(500, N, generator=torch.Generator().manual_seed(0)) - 2.0
    assert int(((pre > 0).sum(1) < K).sum()) > 100  # many rows with fewer than k positive values
    values, indices = torch.relu(pre).topk(K, dim=-1)
    sparsify = torch.zeros_like(pre).scatter(-1, indices, values)
    values, indices = pre.topk(K, dim=-1)
    ours = torch.zeros_like(pre).scatter(-1, indices, torch.relu(values))
    assert torch.equal(sparsify, ours)


# ------------------------------------------------------------------------------- the clt branch, in_norm/out_norm
def clt_forward(folder, x: torch.Tensor) -> torch.Tensor:
    """The output of the clt branch at d7f7368 for a per-layer transcoder (n_targets = 0), line by line. At that
    commit ``SparseCoder.forward(x)`` itself stops on ``assert 0 <= index < n_targets`` when n_targets = 0; its
    trainer runs a per-layer transcoder as ``runner.CrossLayerRunner.decode`` does: ``forward(x,
    return_mid_decoder=True)`` then ``MidDecoder.__call__(y)``, which is what follows. ``encode`` normalises (``normalize_input``: ``x * (√d / in_norm)``), takes no ``b_dec`` off
    (``transcode``), and ``FusedEncoder.forward`` keeps the top k of ``relu(linear(x, W, b))``; ``forward``
    normalises ``x`` again for the ``MidDecoder``, whose ``current_latent_acts`` add ``post_enc[indices]`` (and
    multiply by ``post_enc_scale[indices]`` with ``post_encoder_scale``); ``decode`` is ``eager_decode``
    (``embedding_bag(indices, W_dec, per_sample_weights=acts, mode="sum")``) ``+ b_dec``; the MidDecoder adds
    ``x̃ @ W_skip.mT`` (the normalised ``x``) and ``denormalize_output`` multiplies by ``out_norm / √d`` (``d`` the
    last dimension of the output).

    Checked once against that commit's own code (outside the suite: torch.compile disabled, its triton-only
    ``sparsify.kernels`` replaced, as it is used only in the backward pass): identical outputs on this file's
    clt_folder."""
    from safetensors.torch import load_file

    cfg = json.loads((folder / "cfg.json").read_text())
    w = load_file(str(folder / "sae.safetensors"))
    normalize_input = (lambda v: v * (v.shape[-1] ** 0.5 / w["in_norm"])) if cfg["normalize_io"] else (lambda v: v)
    pre_acts = torch.nn.functional.relu(torch.nn.functional.linear(normalize_input(x), w["encoder.weight"],
                                                                   w["encoder.bias"]))  # fmt: skip
    top_acts, top_indices = pre_acts.topk(cfg["k"], dim=1, sorted=False)
    x = normalize_input(x)
    latent_acts = top_acts + w["post_enc"][top_indices]
    if cfg["post_encoder_scale"]:
        latent_acts = latent_acts * w["post_enc_scale"][top_indices]
    sae_out = torch.nn.functional.embedding_bag(top_indices, w["W_dec"], per_sample_weights=latent_acts, mode="sum")
    sae_out = sae_out + w["b_dec"]
    if cfg["skip_connection"]:
        sae_out += x @ w["W_skip"].mT
    if cfg["normalize_io"]:
        sae_out = sae_out * (w["out_norm"] / (sae_out.shape[-1] ** 0.5))
    return sae_out


def clt_folder(root, *, scale: bool = False):
    """Two hookpoints saved as the clt branch saves them: in_norm / out_norm buffers and the (untrained) post_enc;
    block 1 also with post_encoder_scale. Biases of −2 leave many tokens with fewer than k positive latents."""
    for layer in (0, 1):
        tensors = random_tensors(10 + layer, bias=-2.0)
        g = torch.Generator().manual_seed(20 + layer)
        tensors.update(in_norm=torch.tensor([3.7 + layer]), out_norm=torch.tensor([0.45]), post_enc=torch.zeros(N))
        cfg = dict(CFG_CLT)
        if layer == 1 and scale:
            cfg["post_encoder_scale"] = True
            tensors["post_enc_scale"] = 0.5 + torch.rand(N, generator=g)
        write(root, f"model.layers.{layer}.mlp", cfg, tensors)
    return root


def test_a_clt_folder_with_in_norm_and_out_norm_folds_into_the_weights_and_equals_the_clt_forward(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    run = clt_folder(tmp_path / "run", scale=True)
    tcs = TranscoderSet.from_sparsify(run, model=model, progress=False)
    assert tcs[1].fit_info_["in_norm"] == pytest.approx(4.7) and tcs[0].fit_info_["out_norm"] == pytest.approx(0.45)
    X = mlp_inputs(model, tokenizer)
    g = torch.Generator().manual_seed(1)
    for layer in (0, 1):
        folder = run / f"model.layers.{layer}.mlp"
        for x in (torch.from_numpy(X[layer]), 3 * torch.randn(200, D, generator=g)):
            expected = clt_forward(folder, x)
            np.testing.assert_allclose(tcs[layer].predict(x.numpy()), expected.numpy(), atol=1e-5, rtol=0)
            # circuit-tracer's per-layer forward on the folded weights gives the same
            w = tcs[layer].folded()
            pre = x @ w["W_enc"].T + w["b_enc"]
            f = torch.zeros_like(pre).scatter(-1, pre.topk(K).indices, pre.topk(K).values.relu())
            np.testing.assert_allclose((f @ w["W_dec"] + w["b_dec"] + x @ w["W_skip"].T).numpy(), expected.numpy(),
                                       atol=1e-5, rtol=0)  # fmt: skip
        pre = X[layer] @ tcs[layer].folded()["W_enc"].numpy().T + tcs[layer].folded()["b_enc"].numpy()
        positive = (pre > 0).sum(1)
        assert (positive < K).any() and (positive >= K).any()  # both cases of ReLU before / after the top k
    # the fold matters: read without it, the prediction is far off
    unfolded = clt_folder(tmp_path / "plain")
    for layer in (0, 1):
        cfg_path = unfolded / f"model.layers.{layer}.mlp" / "cfg.json"
        cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "normalize_io": False}))
    x = torch.from_numpy(X[0])
    off = clt_forward(unfolded / "model.layers.0.mlp", x) - clt_forward(run / "model.layers.0.mlp", x)
    assert float(off.abs().max()) > 0.1


def test_a_loaded_set_saves_and_loads_in_our_format(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    tcs = TranscoderSet.from_sparsify(clt_folder(tmp_path / "run"), model=model, progress=False)
    again = TranscoderSet.load(tcs.save(tmp_path / "set.safetensors"), model=model)
    X = mlp_inputs(model, tokenizer)[1]
    np.testing.assert_array_equal(again[1].predict(X), tcs[1].predict(X))
    assert again.fit_info["source"] == "sparsify" and again[0].fit_info_["hookpoint"] == "model.layers.0.mlp"


def test_layers_loads_a_chosen_subset_and_a_single_hookpoint_folder_loads_alone(tmp_path):
    run = clt_folder(tmp_path / "run")
    assert TranscoderSet.from_sparsify(run, layers=[1], progress=False).layers == [1]
    single = TranscoderSet.from_sparsify(run / "model.layers.1.mlp", progress=False)
    assert single.layers == [1] and single.n_layers == 2 and single.model_name is None


# ------------------------------------------------------------------------------- Transcoder.from_weights
def test_from_weights_of_a_fitted_transcoders_folded_weights_predicts_as_it_does():
    X = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    for activation in ("topk", "jumprelu", "relu"):
        tc = Transcoder(12, activation=activation, skip=True, max_epochs=3, progress=False).fit(X, np.tanh(X))
        w = tc.folded()
        rebuilt = Transcoder.from_weights(**w, activation=activation, k=tc.k_, layer="layer:0.mlp_in")
        np.testing.assert_allclose(rebuilt.predict(X), tc.predict(X), atol=1e-5, rtol=0)
        np.testing.assert_allclose(rebuilt.transform(X), tc.transform(X), atol=1e-5, rtol=0)
        np.testing.assert_allclose(rebuilt.inverse_transform(tc.transform(X)), tc.inverse_transform(tc.transform(X)),
                                   atol=1e-5, rtol=0)  # fmt: skip
        for name, value in rebuilt.folded().items():
            np.testing.assert_array_equal(value.numpy(), w[name].numpy())
        assert rebuilt.layer_ == "layer:0.mlp_in" and rebuilt.fit_info_["source"] == "weights"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"W_dec": torch.zeros(8, 16)}, "W_dec must have one row per feature"),
        ({"b_enc": torch.zeros(5)}, r"b_enc must have shape \(n,\) = \(16,\)"),
        ({"W_skip": torch.zeros(8, 4)}, r"W_skip must have shape \(d_out, d_in\) = \(8, 8\)"),
        ({"b_dec": torch.full((8,), float("nan"))}, "b_dec contains NaN"),
        ({"k": None}, "needs k="),
        ({"activation": "jumprelu", "k": None}, "needs threshold="),
        ({"activation": "jumprelu", "k": None, "threshold": -torch.ones(16)}, "negative values"),
        ({"threshold": torch.ones(16)}, "threshold= belongs to activation='jumprelu'"),
        ({"activation": "relu"}, "k= belongs to activation='topk'"),
        ({"activation": "groupmax"}, "activation"),
        ({"k": 17}, "k must be between 1 and n_concepts=16"),
    ],
)
def test_from_weights_refuses_bad_weights(change, message):
    weights = {"W_enc": torch.zeros(16, 8), "b_enc": torch.zeros(16), "W_dec": torch.zeros(16, 8),
               "b_dec": torch.zeros(8), "activation": "topk", "k": 2}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        Transcoder.from_weights(**{**weights, **change})


# ------------------------------------------------------------------------------- bad folders
def test_bad_folders_get_clear_errors(tmp_path):
    model, _ = tiny_models.llama_lm()

    def folder(name: str, cfg: dict | None = None, tensors: dict | None = None, *, more=()):
        root = tmp_path / name
        write(root, "layers.0.mlp", cfg or CFG_133, tensors or random_tensors(0))
        for extra in more:
            write(root, extra, CFG_133, random_tensors(1))
        return root

    with pytest.raises(FileNotFoundError, match="is not a folder"):
        TranscoderSet.from_sparsify(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no hookpoint folders"):
        TranscoderSet.from_sparsify(tmp_path / "empty")
    root = folder("no_weights")
    (root / "layers.0.mlp" / "sae.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="sae.safetensors is missing"):
        TranscoderSet.from_sparsify(root, progress=False)
    root = folder("no_cfg")
    (root / "layers.0.mlp" / "cfg.json").unlink()
    with pytest.raises(FileNotFoundError, match="cfg.json is missing"):
        TranscoderSet.from_sparsify(root, progress=False)
    with pytest.raises(FileNotFoundError, match=r"no hookpoint folder for blocks \[1\]"):
        TranscoderSet.from_sparsify(folder("one"), layers=[1], progress=False)

    cases = [
        (folder("sae", {**CFG_133, "transcode": False}), "transcode: false, so this is a sparse autoencoder"),
        (folder("groupmax", {**CFG_133, "activation": "groupmax"}), "activation 'groupmax' is not supported"),
        (folder("gap", more=["layers.2.mlp"]), r"not for \[1\].*pass layers=\[0, 2\]"),
        (folder("attn", more=["layers.1.self_attn"]), "not an MLP .*layers.1.self_attn"),
        (folder("cross", {**CFG_CLT, "normalize_io": False, "n_targets": 2}), "n_targets=2: a cross-layer"),
        (folder("post_enc", {**CFG_CLT, "normalize_io": False}, {**random_tensors(0), "post_enc": torch.ones(N)}),
         "post_enc is not zero"),
        (folder("no_norms", CFG_CLT), "normalize_io: true but sae.safetensors holds neither"),
        (folder("unknown", tensors={**random_tensors(0), "W_gate": torch.zeros(3)}), "does not know .*W_gate"),
        (folder("no_skip", tensors=random_tensors(0, skip=False)), "lacks W_skip"),
        (folder("latents", {**CFG_133, "num_latents": 128}), "gives 128 latents but encoder.weight has 64"),
        (folder("d_in", {**CFG_133, "d_in": 16}), r"encoder.weight has shape \(64, 32\); d_in=16"),
    ]  # fmt: skip
    for root, message in cases:
        with pytest.raises(ValueError, match=message):
            TranscoderSet.from_sparsify(root, progress=False)
    assert TranscoderSet.from_sparsify(tmp_path / "gap", layers=[0, 2], progress=False).layers == [0, 2]

    # against a model: another width, a block it lacks, a hookpoint that is not its MLP
    narrow = {"encoder.weight": torch.zeros(N, 16), "encoder.bias": torch.zeros(N), "W_dec": torch.zeros(N, 16),
              "b_dec": torch.zeros(16), "W_skip": torch.zeros(16, 16)}  # fmt: skip
    with pytest.raises(ValueError, match="reads and writes width 16, but this model's layers have width 32"):
        TranscoderSet.from_sparsify(folder("narrow", {**CFG_133, "d_in": 16}, narrow), model=model, progress=False)
    with pytest.raises(ValueError, match=r"layers.2.mlp is for block 2, but this model has 2 blocks"):
        TranscoderSet.from_sparsify(folder("deep", more=["layers.1.mlp", "layers.2.mlp"]), model=model,
                                    progress=False)  # fmt: skip
    root = tmp_path / "gpt2_names"
    write(root, "h.0.mlp", CFG_133, random_tensors(0))
    with pytest.raises(ValueError, match="h.0.mlp is not the MLP of block 0 of LlamaForCausalLM"):
        TranscoderSet.from_sparsify(root, model=model, progress=False)
