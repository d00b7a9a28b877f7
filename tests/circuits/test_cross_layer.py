"""CrossLayerTranscoderSet: circuit-tracer's CLT directory read as written (tensors, activation, hooks), our own file
and circuit-tracer's written back, the prediction against the definition, and every refusal naming its problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from interp_widgets.circuits import CrossLayerTranscoderSet, attribution_graph
from tests import tiny_models

L, N, D = 2, 24, 32


def write_directory(folder, *, n_layers=L, n=N, d=D, threshold=True, config=None, seed=0):
    """circuit-tracer's CLT layout, written here from its description (reference §2.2), as generate.py writes it."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_layers):
        enc = {
            f"W_enc_{i}": torch.randn(n, d, generator=g) / 4,
            f"b_enc_{i}": torch.randn(n, generator=g) * 0.1,
            f"b_dec_{i}": torch.randn(d, generator=g) * 0.05,
        }
        if threshold:
            enc[f"threshold_{i}"] = torch.rand(n, generator=g) * 0.3
        save_file(enc, str(folder / f"W_enc_{i}.safetensors"))
        save_file(
            {f"W_dec_{i}": torch.randn(n, n_layers - i, d, generator=g) / 6}, str(folder / f"W_dec_{i}.safetensors")
        )
    lines = config or {"model_kind": "cross_layer_transcoder", "feature_input_hook": "mlp.hook_in",
                       "feature_output_hook": "hook_mlp_out"}  # fmt: skip
    (folder / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    return folder


def test_the_directory_loads_as_written_and_predicts_by_the_definition(tmp_path):
    folder = write_directory(tmp_path / "clt")
    clt = CrossLayerTranscoderSet.from_circuit_tracer(folder)
    assert (clt.n_layers, clt.n_features, clt.d_model, clt.activation, clt.input_point) == (
        L,
        N,
        D,
        "jumprelu",
        "mlp_in",
    )
    for i in range(L):
        enc, dec = load_file(str(folder / f"W_enc_{i}.safetensors")), load_file(str(folder / f"W_dec_{i}.safetensors"))
        w = clt.replacement_weights(i)
        for name in ("W_enc", "b_enc", "b_dec", "threshold"):
            assert torch.equal(w[name], enc[f"{name}_{i}"])
        assert torch.equal(w["W_dec"], dec[f"W_dec_{i}"])
    # the prediction of layer l': Σ_{l ≤ l'} JumpReLU(W_enc x + b_enc) W_dec[l][:, l' - l] + b_dec[l'], from the files
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(5, D, generator=g) for _ in range(L)]
    acts = []
    for i in range(L):
        enc = load_file(str(folder / f"W_enc_{i}.safetensors"))
        pre = xs[i] @ enc[f"W_enc_{i}"].T + enc[f"b_enc_{i}"]
        acts.append(pre * (pre > enc[f"threshold_{i}"]))
    assert all(bool((a > 0).any()) for a in acts)
    for target, y in enumerate(clt.predict(xs)):
        expected = load_file(str(folder / f"W_enc_{target}.safetensors"))[f"b_dec_{target}"].clone()
        for source in range(target + 1):
            expected = expected + acts[source] @ load_file(str(folder / f"W_dec_{source}.safetensors"))[
                f"W_dec_{source}"][:, target - source]  # fmt: skip
        torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)
    # per layer: the encoder with the decoder to its own layer
    torch.testing.assert_close(clt[1].predict_torch(xs[1]), acts[1] @ clt.replacement_weights(1)["W_dec"][:, 0]
                               + clt.replacement_weights(1)["b_dec"], rtol=1e-5, atol=1e-6)  # fmt: skip
    relu = CrossLayerTranscoderSet.from_circuit_tracer(write_directory(tmp_path / "relu", threshold=False))
    assert relu.activation == "relu" and relu.threshold is None


def test_our_file_and_circuit_tracers_round_trip(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    clt = CrossLayerTranscoderSet.from_circuit_tracer(write_directory(tmp_path / "clt"), model=model)
    again = CrossLayerTranscoderSet.load(clt.save(tmp_path / "clt.safetensors"), model=model)
    back = CrossLayerTranscoderSet.from_circuit_tracer(clt.to_circuit_tracer(tmp_path / "out"), model=model)
    assert again.checksum() == clt.checksum() == back.checksum() and back.activation == "jumprelu"
    one = attribution_graph(model, tokenizer, "The cat sat on the mat", clt, progress=False)
    two = attribution_graph(model, tokenizer, "The cat sat on the mat", again, progress=False)
    np.testing.assert_array_equal(one.adjacency, two.adjacency)
    # a corrupted file is refused
    path = tmp_path / "clt.safetensors"
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata()
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118 - a safe_open handle
    tensors["W_enc_0"][0, 0] += 1.0
    save_file(tensors, str(path), metadata=meta)
    with pytest.raises(ValueError, match="corrupted"):
        CrossLayerTranscoderSet.load(path)


def test_bad_directories_are_refused_naming_the_problem(tmp_path):
    model, _ = tiny_models.llama_lm()
    base = {"model_kind": "cross_layer_transcoder", "feature_input_hook": "hook_resid_mid",
            "feature_output_hook": "hook_mlp_out"}  # fmt: skip

    def load(folder, **kwargs):
        return CrossLayerTranscoderSet.from_circuit_tracer(folder, **kwargs)

    with pytest.raises(ValueError, match="made for a model of 3 blocks; this one has 2"):
        load(write_directory(tmp_path / "deep", n_layers=3), model=model)
    with pytest.raises(ValueError, match="width 16"):
        load(write_directory(tmp_path / "narrow", d=16), model=model)
    missing = write_directory(tmp_path / "missing")
    (missing / "W_dec_1.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"W_dec_1\.safetensors"):
        load(missing)
    gap = write_directory(tmp_path / "gap", n_layers=3)
    (gap / "W_enc_1.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"W_enc_1\.safetensors"):
        load(gap)
    with pytest.raises(ValueError, match="no TopK"):
        load(write_directory(tmp_path / "topk", config={**base, "activation": "topk", "k": 8}))
    with pytest.raises(ValueError, match="'gelu'"):
        load(write_directory(tmp_path / "gelu", config={**base, "activation": "gelu"}))
    with pytest.raises(ValueError, match="says activation relu but the files hold thresholds"):
        load(write_directory(tmp_path / "relu", config={**base, "activation": "relu"}))
    with pytest.raises(ValueError, match="'transcoder_set'.*per-layer set"):
        load(write_directory(tmp_path / "plt", config={**base, "model_kind": "transcoder_set"}))
    with pytest.raises(ValueError, match="ln2.hook_normalized"):
        load(write_directory(tmp_path / "ln2", config={**base, "feature_input_hook": "ln2.hook_normalized"}))
    with pytest.raises(ValueError, match="no feature_output_hook"):
        load(write_directory(tmp_path / "nohook", config={"model_kind": "cross_layer_transcoder",
                                                           "feature_input_hook": "mlp.hook_in"}))  # fmt: skip
    shapes = write_directory(tmp_path / "shape")
    save_file({"W_dec_1": torch.zeros(N, 2, D)}, str(shapes / "W_dec_1.safetensors"))  # layer 1 writes to 1 layer
    with pytest.raises(ValueError, match=r"W_dec\[1\] must have shape \(n, L - l, d\) = \(24, 1, 32\)"):
        load(shapes)
    widths = write_directory(tmp_path / "widths")
    enc = load_file(str(widths / "W_enc_1.safetensors"))
    enc["W_enc_1"] = torch.zeros(N + 1, D)
    save_file(enc, str(widths / "W_enc_1.safetensors"))
    with pytest.raises(ValueError, match=r"W_enc\[1\] must have shape"):
        load(widths)
    renamed = write_directory(tmp_path / "renamed")
    enc = load_file(str(renamed / "W_enc_0.safetensors"))
    enc["W_enc"] = enc.pop("W_enc_0")
    save_file(enc, str(renamed / "W_enc_0.safetensors"))
    with pytest.raises(ValueError, match="no tensor 'W_enc_0'"):
        load(renamed)
    negative = write_directory(tmp_path / "negative")
    enc = load_file(str(negative / "W_enc_0.safetensors"))
    enc["threshold_0"] = -enc["threshold_0"]
    save_file(enc, str(negative / "W_enc_0.safetensors"))
    with pytest.raises(ValueError, match="negative"):
        load(negative)
    no_config = write_directory(tmp_path / "noconfig")
    (no_config / "config.yaml").unlink()
    with pytest.raises(FileNotFoundError, match="config.yaml"):
        load(no_config)


def test_attribution_refuses_a_cross_layer_transcoder_for_another_model(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    clt = CrossLayerTranscoderSet.from_circuit_tracer(write_directory(tmp_path / "deep", n_layers=3))
    with pytest.raises(ValueError, match="made for a model of 3 blocks"):
        attribution_graph(model, tokenizer, "The cat", clt, progress=False)


def test_features_are_explained_and_carried_by_a_graph(tmp_path):
    from interp_widgets.circuits import collect_transcoder_pairs
    from interp_widgets.demo import corpus

    model, tokenizer = tiny_models.llama_lm()
    clt = CrossLayerTranscoderSet.from_circuit_tracer(write_directory(tmp_path / "clt"), model=model)
    texts = corpus()[:12]
    explained = clt.explain(model, tokenizer, texts, n_examples=3, progress=False)
    pairs = collect_transcoder_pairs(model, tokenizer, texts)
    acts = clt.encode([torch.from_numpy(pairs[layer][0]) for layer in clt.layers])
    for layer in clt.layers:  # the top activation of every feature is its maximum over the corpus' tokens
        np.testing.assert_allclose(explained.layers[layer].top_values[:, 0], acts[layer].max(0).values.numpy(),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
    graph = attribution_graph(model, tokenizer, "The cat sat on the mat", clt, progress=False)
    labelled = graph.with_explanations(explained, progress=False)
    assert len(labelled.feature_labels) == len(graph.features) and all(labelled.feature_labels)
