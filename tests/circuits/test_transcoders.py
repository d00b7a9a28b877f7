"""Transcoders: the mlp_in point, one-pass collection, training, resume, the report, save/load and circuit-tracer's
files; every reference is written in the test (plain torch hooks, numpy least squares, a reader with circuit-tracer
0.5.0's file-loading rules)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from interp_widgets.circuits import TranscoderSet, collect_transcoder_pairs, transcoder_points
from interp_widgets.concepts import Transcoder, collect_activations
from interp_widgets.demo import corpus
from interp_widgets.layers import UnsupportedModelError
from tests import tiny_models
from tests.conftest import model_fingerprint

TEXTS = corpus()[:150]
HELD_OUT = corpus()[200:215]


def small(**settings) -> Transcoder:
    settings = {"k": 4, "max_epochs": 50, "batch_size": 64, "lr": 1e-2, "progress": False, **settings}
    return Transcoder(32, **settings)


def plain_pairs(model, tokenizer, text, layer):
    """The MLP module's input and output for one text, from torch hooks written here."""
    mlp = model.model.layers[layer].mlp if hasattr(model, "model") else model.transformer.h[layer].mlp
    seen = {}
    handles = [
        mlp.register_forward_pre_hook(lambda m, args: seen.__setitem__("x", args[0].detach())),
        mlp.register_forward_hook(lambda m, args, out: seen.__setitem__("y", out.detach())),
    ]
    try:
        with torch.no_grad():
            model(**tokenizer(text, return_tensors="pt"))
    finally:
        for handle in handles:
            handle.remove()
    return seen["x"][0].numpy(), seen["y"][0].numpy()


# ------------------------------------------------------------------------------------------ points and collection
@pytest.mark.parametrize("build", [tiny_models.llama_lm, tiny_models.gpt2_lm])
def test_mlp_in_is_what_the_mlp_module_receives(build):
    model, tokenizer = build()
    before = model_fingerprint(model, tokenizer)
    pairs = collect_transcoder_pairs(model, tokenizer, TEXTS[:1])
    for layer in (0, 1):
        x, y = plain_pairs(model, tokenizer, TEXTS[0], layer)
        np.testing.assert_allclose(pairs[layer][0], x, atol=1e-5)
        np.testing.assert_allclose(pairs[layer][1], y, atol=1e-5)
    assert model_fingerprint(model, tokenizer) == before


def test_intervene_at_mlp_in_edits_what_the_mlp_receives(llama_lm):
    from interp_widgets.interventions import intervene

    model, tokenizer = llama_lm
    ids = tokenizer(TEXTS[0], return_tensors="pt")["input_ids"]
    handle = model.model.layers[1].mlp.register_forward_pre_hook(lambda m, args: (2 * args[0],))
    try:
        with torch.no_grad():
            expected = model(input_ids=ids).logits
    finally:
        handle.remove()
    with intervene(model, {"layer:1.mlp_in": lambda x: 2 * x}), torch.no_grad():
        edited = model(input_ids=ids).logits
    torch.testing.assert_close(edited, expected)
    with torch.no_grad():
        assert not torch.allclose(model(input_ids=ids).logits, expected)


def test_one_pass_equals_per_layer_collection(llama_lm):
    model, tokenizer = llama_lm
    pairs = collect_transcoder_pairs(model, tokenizer, TEXTS[:12], input_point="resid_mid")
    for layer in (0, 1):
        for side, point in enumerate((f"layer:{layer}.resid_mid", f"layer:{layer}.mlp_out")):
            store = collect_activations(model, tokenizer, TEXTS[:12], layer=point, progress=False)
            np.testing.assert_allclose(pairs[layer][side], store.to_numpy(), atol=1e-5)


def test_resid_mid_is_refused_on_parallel_blocks_with_the_fix():
    model, tokenizer = tiny_models.gpt_neox_lm()
    with pytest.raises(UnsupportedModelError, match="input_point='mlp_in'"):
        transcoder_points(model, 0, "resid_mid")
    with pytest.raises(UnsupportedModelError, match="input_point='mlp_in'"):
        TranscoderSet.fit(model, tokenizer, TEXTS[:4], input_point="resid_mid", transcoder=small(max_epochs=1))
    assert transcoder_points(model, 0)[0].path == "gpt_neox.layers.0.mlp"  # mlp_in exists there


# ------------------------------------------------------------------------------------------ training
def test_transcoder_beats_the_linear_map_on_a_planted_sparse_target():
    rng = np.random.default_rng(0)
    d, n_true = 16, 48
    X = rng.normal(size=(6000, d)).astype(np.float32)
    E = rng.normal(size=(d, n_true)).astype(np.float32) / np.sqrt(d)
    D = rng.normal(size=(n_true, d)).astype(np.float32)
    Y = (np.maximum(X @ E - 1.2, 0) @ D).astype(np.float32)  # sparse features of X, decoded
    train, test = slice(0, 5000), slice(5000, None)
    tc = Transcoder(96, k=8, skip=True, lr=3e-3, max_epochs=60, batch_size=256, progress=False).fit(X[train], Y[train])
    fvu = ((Y[test] - tc.predict(X[test])) ** 2).sum() / ((Y[test] - Y[test].mean(0)) ** 2).sum()
    A = np.hstack([X, np.ones((len(X), 1), np.float32)])
    W = np.linalg.lstsq(A[train], Y[train], rcond=None)[0]
    linear = ((Y[test] - A[test] @ W) ** 2).sum() / ((Y[test] - Y[test].mean(0)) ** 2).sum()
    assert fvu < 0.5 * linear, (fvu, linear)


def test_set_trains_every_layer_from_one_pass_and_leaves_the_model_alone(llama_lm):
    model, tokenizer = llama_lm
    before = model_fingerprint(model, tokenizer)
    tokens = []  # the real (unpadded) tokens of every forward pass
    handle = model.register_forward_pre_hook(
        lambda m, args, kwargs: tokens.append(int(kwargs["attention_mask"].sum())), with_kwargs=True
    )
    try:
        after_hook = model_fingerprint(model, tokenizer)
        tcs = TranscoderSet.fit(model, tokenizer, TEXTS, transcoder=small(max_epochs=50), buffer_tokens=300)
    finally:
        handle.remove()
    assert sum(tokens) == sum(len(tokenizer(text)["input_ids"]) for text in TEXTS)  # every text once: one pass
    assert model_fingerprint(model, tokenizer) == before and after_hook != before
    pairs = collect_transcoder_pairs(model, tokenizer, TEXTS)
    for layer in (0, 1):
        history = tcs[layer].fit_info_["history"]
        assert history[-1]["monitor_fvu"] < 0.9 * history[0]["monitor_fvu"]
        assert tcs[layer].fit_info_["rows"] == len(pairs[layer][0]) - tcs.fit_info["monitor_rows"]
    assert tcs.fit_info["windows"] == len(tcs[0].fit_info_["history"]) > 1


def test_layers_can_have_their_own_settings_and_share_the_windows(llama_lm):
    model, tokenizer = llama_lm
    texts = TEXTS[:60]
    both = TranscoderSet.fit(model, tokenizer, texts, transcoder={0: small(skip=False, k=2), 1: small(skip=True)},
                             buffer_tokens=300)  # fmt: skip
    assert (both[0].skip, both[0].k_, both[1].skip, both[1].k_) == (False, 2, True, 4)
    alone = TranscoderSet.fit(model, tokenizer, texts, layers=[0], transcoder=small(skip=False, k=2), buffer_tokens=300)
    for name, weight in alone[0].weights_.items():  # the same windows and minibatches as when trained alone
        assert torch.allclose(weight, both[0].weights_[name], atol=1e-6), name
    with pytest.raises(ValueError, match=r"no entry for layers \[1\]"):
        TranscoderSet.fit(model, tokenizer, texts, transcoder={0: small()})
    with pytest.raises(ValueError, match="must share their training settings"):
        TranscoderSet.fit(model, tokenizer, texts, transcoder={0: small(), 1: small(lr=1e-3)})
    with pytest.raises(ValueError, match="restarts=2, but a TranscoderSet trains each layer once"):
        TranscoderSet.fit(model, tokenizer, texts, transcoder=small(restarts=2))
    with pytest.raises(TypeError, match="got 'topk' for layer 1"):
        TranscoderSet.fit(model, tokenizer, texts, transcoder={0: small(), 1: "topk"})


# ------------------------------------------------------------------------------------------ resume
class Interrupt(Exception):
    pass


@pytest.mark.parametrize(
    "activation, extra, passes",
    [
        ("topk", {}, 1),
        ("jumprelu", {}, 1),
        ("topk", {"auxk_alpha": 1 / 32, "dead_rows": 40}, 1),
        ("topk", {"resample_rows": 40, "resample_stop_rows": 3000}, 2),  # silence counted across windows
    ],
)
def test_an_interrupted_run_resumes_to_the_same_weights(llama_lm, tmp_path, activation, extra, passes):
    model, tokenizer = llama_lm
    before = model_fingerprint(model, tokenizer)
    settings = dict(
        transcoder=small(activation=activation, max_epochs=20, skip=True, **extra),
        buffer_tokens=250,
        window_passes=passes,
    )
    whole = TranscoderSet.fit(model, tokenizer, TEXTS, checkpoint_dir=tmp_path / "a", **settings)

    def stop_at(step):
        if step == 23:
            raise Interrupt

    with pytest.raises(Interrupt):
        TranscoderSet.fit(model, tokenizer, TEXTS, checkpoint_dir=tmp_path / "b", callback=stop_at, **settings)
    assert model_fingerprint(model, tokenizer) == before  # hooks removed on the exception
    assert (tmp_path / "b" / "checkpoint.safetensors").exists()
    resumed = TranscoderSet.fit(model, tokenizer, TEXTS, checkpoint_dir=tmp_path / "b", **settings)
    for layer in whole.layers:
        for name, weight in whole[layer].weights_.items():
            assert torch.equal(weight, resumed[layer].weights_[name]), (layer, name)
        assert whole[layer].fit_info_["history"] == resumed[layer].fit_info_["history"]
        if "auxk_alpha" in extra:  # the auxiliary-k loss had dead features to train
            assert max(record["auxk_dead"] for record in whole[layer].fit_info_["history"]) > 0
        if "resample_rows" in extra:  # features were resampled, during the first 3,000 training rows only
            history = whole[layer].fit_info_["history"]
            assert sum(record["resampled"] for record in history) > 0
            assert sum(record["resampled"] for record in history[-3:]) == 0
    assert model_fingerprint(model, tokenizer) == before
    finished = TranscoderSet.fit(model, tokenizer, TEXTS, checkpoint_dir=tmp_path / "b", **settings)  # nothing left
    assert finished.fit_info == whole.fit_info
    assert all(torch.equal(finished[1].weights_[n], w) for n, w in whole[1].weights_.items())
    with pytest.raises(ValueError, match="belongs to another run.*buffer_tokens"):
        TranscoderSet.fit(model, tokenizer, TEXTS, checkpoint_dir=tmp_path / "b", **{**settings, "buffer_tokens": 99})
    with pytest.raises(ValueError, match="belongs to another run.*window_passes"):
        TranscoderSet.fit(model, tokenizer, TEXTS, checkpoint_dir=tmp_path / "b", **{**settings, "window_passes": 3})


# ------------------------------------------------------------------------------------------ report
@pytest.fixture(scope="module")
def llama_set():
    model, tokenizer = tiny_models.llama_lm()
    return TranscoderSet.fit(model, tokenizer, TEXTS, transcoder=small(skip=True), buffer_tokens=400)


def test_report_against_references_written_here(llama_set, llama_lm):
    model, tokenizer = llama_lm
    report = llama_set.evaluate(model, tokenizer, HELD_OUT)
    frame = report.to_dataframe()
    pairs = collect_transcoder_pairs(model, tokenizer, HELD_OUT)
    counts = [len(tokenizer(t)["input_ids"]) for t in HELD_OUT]
    text_of_row = np.repeat(np.arange(len(HELD_OUT)), counts)
    for row, layer in enumerate(llama_set.layers):
        X, Y = pairs[layer]
        total = ((Y - Y.mean(0)) ** 2).sum()
        tc = llama_set[layer]
        assert frame["fvu"][row] == pytest.approx(((Y - tc.predict(X)) ** 2).sum() / total, rel=1e-4)
        codes = tc.transform(X)
        assert frame["l0"][row] == pytest.approx((codes > 0).sum(1).mean())
        assert frame["dead_fraction"][row] == pytest.approx(1 - (codes > 0).any(0).mean())
        A = np.hstack([X, np.ones((len(X), 1), np.float32)]).astype(np.float64)
        rss = 0.0
        for fold in (0, 1):
            fit, use = text_of_row % 2 != fold, text_of_row % 2 == fold
            W = np.linalg.lstsq(A[fit], Y[fit], rcond=None)[0]
            rss += ((Y[use] - A[use] @ W) ** 2).sum()
        assert frame["skip_fvu"][row] == pytest.approx(rss / total, rel=1e-3)
    # the loss with the transcoder spliced in, from plain hooks: one text at a time (no padding)
    clean, spliced = [], {0: [], 1: []}
    for text in HELD_OUT:
        ids = tokenizer(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            clean.append(float(model(input_ids=ids, labels=ids).loss) * (ids.shape[1] - 1))
        for layer in (0, 1):
            mlp = model.model.layers[layer].mlp
            handle = mlp.register_forward_hook(lambda m, args, out, tc=llama_set[layer]: tc.predict_torch(args[0]))
            try:
                with torch.no_grad():
                    spliced[layer].append(float(model(input_ids=ids, labels=ids).loss) * (ids.shape[1] - 1))
            finally:
                handle.remove()
    n = sum(counts) - len(HELD_OUT)
    assert report.loss_clean == pytest.approx(sum(clean) / n, rel=1e-5)
    for layer in (0, 1):
        assert report.loss_spliced[layer] == pytest.approx(sum(spliced[layer]) / n, rel=1e-5)
    assert report.tokens == sum(counts)
    assert report.chart().to_dict()["mark"]["type"] == "bar"
    assert "&lt;" not in report._repr_html_() and "held-out tokens" in report._repr_html_()


# ------------------------------------------------------------------------------------------ our own file
def test_save_load_round_trip_and_refusals(llama_set, llama_lm, tmp_path):
    model, tokenizer = llama_lm
    path = llama_set.save(tmp_path / "set.safetensors")
    again = type(llama_set).load(path, model=model)
    X = collect_transcoder_pairs(model, tokenizer, HELD_OUT[:3])[1][0]
    for layer in llama_set.layers:
        np.testing.assert_array_equal(again[layer].predict(X), llama_set[layer].predict(X))
        assert again[layer].get_params() == llama_set[layer].get_params()
    wider = tiny_models._decoder(
        *_llama_classes(), hidden_size=48, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64
    )[0]
    with pytest.raises(ValueError, match="width 32.*width 48.*TranscoderSet.fit"):
        TranscoderSet.load(path, model=wider)
    named = TranscoderSet.load(path)
    named.model_name = "HuggingFaceTB/SmolLM2-135M"
    with pytest.raises(ValueError, match="trained on 'HuggingFaceTB/SmolLM2-135M', not 'gpt2'"):
        named.check_model("gpt2")
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF  # one flipped bit pattern in the last tensor's data
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupted.*save the set again"):
        TranscoderSet.load(bad)
    (tmp_path / "short.safetensors").write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(ValueError):
        TranscoderSet.load(tmp_path / "short.safetensors")


def _llama_classes():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaConfig, LlamaForCausalLM


# ------------------------------------------------------------------------------------------ circuit-tracer's files
def read_like_circuit_tracer_050(directory, layer):
    """circuit-tracer 0.5.0's ``load_relu_transcoder`` rules: JumpReLU(threshold) when
    ``activation_function.threshold`` is in the file (no log thresholds), plain ReLU otherwise; ``f = act(W_enc x +
    b_enc)`` (no transpose of W_enc), ``acts @ W_dec + b_dec``, plus ``x @ W_skip.T`` when W_skip is there."""
    params = {k: torch.from_numpy(v) for k, v in load_file(str(directory / f"layer_{layer}.safetensors")).items()}
    assert "log_thresholds" not in params
    threshold = params.get("activation_function.threshold")

    def forward(x, topk=None):
        pre = torch.nn.functional.linear(x, params["W_enc"], params["b_enc"])
        if topk is not None:  # circuit-tracer's TopK(k): the k largest raw pre-activations, no ReLU
            gate = torch.zeros_like(pre).scatter(-1, pre.topk(topk, dim=-1).indices, 1.0)
            acts = pre * gate
        elif threshold is not None:
            acts = pre * (pre > threshold)
        else:
            acts = torch.relu(pre)
        out = acts @ params["W_dec"] + params["b_dec"]
        return out + x @ params["W_skip"].T if "W_skip" in params else out

    return forward, params


def test_circuit_tracer_export_jumprelu_reads_back(llama_lm, tmp_path):
    model, tokenizer = llama_lm
    tcs = TranscoderSet.fit(
        model, tokenizer, TEXTS, transcoder=small(activation="jumprelu", skip=True), buffer_tokens=400
    )
    out = tcs.to_circuit_tracer(tmp_path / "ct")
    config = (out / "config.yaml").read_text()
    assert 'feature_input_hook: "mlp.hook_in"' in config and 'feature_output_hook: "hook_mlp_out"' in config
    pairs = collect_transcoder_pairs(model, tokenizer, HELD_OUT)
    for layer in tcs.layers:
        forward, params = read_like_circuit_tracer_050(out, layer)
        assert params["W_enc"].shape == (32, 32) and params["W_skip"].shape == (32, 32)
        # raw threshold: the JumpReLU threshold of the normalised encoder, unchanged by the folding of the scales
        torch.testing.assert_close(params["activation_function.threshold"], tcs[layer].weights_["threshold"])
        X = pairs[layer][0]
        np.testing.assert_allclose(forward(torch.from_numpy(X)).numpy(), tcs[layer].predict(X), atol=1e-4, rtol=1e-4)
        assert (tcs[layer].weights_["threshold"] > 0).any()


def test_circuit_tracer_export_of_topk_warns_and_checks_k_positive(llama_lm, tmp_path):
    model, tokenizer = llama_lm
    tcs = TranscoderSet.fit(model, tokenizer, TEXTS, transcoder=small(k=2), buffer_tokens=400)
    with pytest.warns(UserWarning, match="ReLU, never as TopK"), pytest.raises(ValueError, match="pass model="):
        tcs.to_circuit_tracer(tmp_path / "refused")
    shortfall = tcs.topk_shortfall(model, tokenizer, HELD_OUT)
    pairs = collect_transcoder_pairs(model, tokenizer, HELD_OUT)
    for layer in tcs.layers:  # an independent count
        w = tcs[layer].folded()
        pre = torch.from_numpy(pairs[layer][0]) @ w["W_enc"].T + w["b_enc"]
        assert shortfall[layer] == pytest.approx(float(((pre > 0).sum(1) < 2).float().mean()))
    if max(shortfall.values()) == 0:
        with pytest.warns(UserWarning):
            out = tcs.to_circuit_tracer(tmp_path / "ct", model=model, tokenizer=tokenizer, texts=HELD_OUT)
        for layer in tcs.layers:
            forward, _ = read_like_circuit_tracer_050(out, layer)
            X = pairs[layer][0]
            np.testing.assert_allclose(forward(torch.from_numpy(X), topk=2).numpy(), tcs[layer].predict(X), atol=1e-4)
    # k = every feature: some token has a non-positive pre-activation, so the export refuses
    tcs[0].k_ = tcs[0].n_concepts
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="fewer than k positive pre-activations"):
        tcs.to_circuit_tracer(tmp_path / "ct2", model=model, tokenizer=tokenizer, texts=HELD_OUT)


def test_circuit_tracer_export_needs_every_layer(llama_lm, tmp_path):
    model, tokenizer = llama_lm
    tcs = TranscoderSet.fit(model, tokenizer, TEXTS[:20], layers=[1], transcoder=small(activation="relu", max_epochs=2))
    with pytest.raises(ValueError, match="every layer from 0"):
        tcs.to_circuit_tracer(tmp_path / "ct")
