"""Transcoder files exported by interp_widgets, loaded by circuit-tracer 0.5.0's own loader in its venv.

``TranscoderSet.to_circuit_tracer`` writes the files here; ``read_transcoders.py`` runs in circuit-tracer's venv
(``CIRCUIT_TRACER_VENV``, default ``$CIRCUIT_TRACER_FILES/venv-ct``, which ``make_files.sh`` builds), loads them with
``load_transcoders(config)`` and writes its features and reconstructions back; they must equal ours.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from interp_widgets.circuits import TranscoderSet, collect_transcoder_pairs
from interp_widgets.concepts import Transcoder
from interp_widgets.demo import corpus
from tests import tiny_models

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def ct_python() -> Path:
    venv = os.environ.get("CIRCUIT_TRACER_VENV") or (
        os.path.join(os.environ["CIRCUIT_TRACER_FILES"], "venv-ct") if os.environ.get("CIRCUIT_TRACER_FILES") else ""
    )
    python = Path(venv, "bin", "python")
    if not venv or not python.is_file():
        pytest.fail(
            "set CIRCUIT_TRACER_VENV to circuit-tracer 0.5.0's venv (or CIRCUIT_TRACER_FILES to the folder that "
            "`bash tests/circuit_tracer/make_files.sh /tmp/ct-files` wrote, with its venv-ct)"
        )
    return python


@pytest.mark.parametrize("activation", ["jumprelu", "relu"])
def test_circuit_tracer_loads_our_files_to_the_same_transcoders(ct_python, tmp_path, activation):
    model, tokenizer = tiny_models.llama_lm()
    transcoder = Transcoder(32, activation=activation, skip=activation == "jumprelu", max_epochs=10, batch_size=64,
                            lr=1e-2, progress=False)  # fmt: skip
    tcs = TranscoderSet.fit(model, tokenizer, corpus()[:100], transcoder=transcoder, buffer_tokens=400)
    out = tcs.to_circuit_tracer(tmp_path / "ct")
    pairs = collect_transcoder_pairs(model, tokenizer, corpus()[300:310])
    np.savez(out / "inputs.npz", **{f"x_{layer}": pairs[layer][0] for layer in tcs.layers})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [str(ct_python), str(HERE / "read_transcoders.py"), str(out)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out / "circuit_tracer.npz") as ct:
        expected = "JumpReLU" if activation == "jumprelu" else "function"  # F.relu for a file without a threshold
        assert list(ct["activation"]) == [expected, expected]
        assert list(ct["hooks"]) == ["mlp.hook_in", "hook_mlp_out"]
        for layer in tcs.layers:
            X = pairs[layer][0]
            np.testing.assert_allclose(ct[f"acts_{layer}"], tcs[layer].transform(X), atol=1e-5)
            np.testing.assert_allclose(ct[f"out_{layer}"], tcs[layer].predict(X), atol=1e-5)
            assert (ct[f"acts_{layer}"] > 0).any()


@pytest.mark.parametrize("threshold", [True, False], ids=["jumprelu", "relu"])
def test_circuit_tracer_loads_our_cross_layer_directory_to_the_same_transcoder(ct_python, tmp_path, threshold):
    import torch

    from interp_widgets.circuits import CrossLayerTranscoderSet

    g = torch.Generator().manual_seed(0)
    n_layers, n, d, tokens = 3, 40, 32, 12
    clt = CrossLayerTranscoderSet.from_weights(
        W_enc=[torch.randn(n, d, generator=g) / 4 for _ in range(n_layers)],
        b_enc=[torch.randn(n, generator=g) * 0.1 for _ in range(n_layers)],
        W_dec=[torch.randn(n, n_layers - i, d, generator=g) / 6 for i in range(n_layers)],
        b_dec=[torch.randn(d, generator=g) * 0.05 for _ in range(n_layers)],
        threshold=[torch.rand(n, generator=g) * 0.3 for _ in range(n_layers)] if threshold else None,
        input_point="resid_mid",
    )
    out = clt.to_circuit_tracer(tmp_path / "clt")
    x = torch.randn(n_layers, tokens, d, generator=g)
    np.savez(out / "inputs.npz", x=x.numpy())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(ct_python), str(HERE / "read_clt.py"), str(out)], capture_output=True, text=True,
                          env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out / "circuit_tracer.npz") as ct:
        assert str(ct["kind"]) == "CrossLayerTranscoder"
        assert str(ct["activation"]) == ("JumpReLU" if threshold else "function")  # F.relu without thresholds
        assert list(ct["hooks"]) == ["hook_resid_mid", "hook_mlp_out"]
        ours = clt.encode(list(x))
        for layer in range(n_layers):
            np.testing.assert_allclose(ct["acts"][layer], ours[layer].numpy(), atol=1e-5)
            assert (ours[layer] > 0).any(1).all()  # every token has a feature: circuit-tracer's decode keeps them all
        assert ct["out"].shape == (n_layers, tokens, d)
        for layer, predicted in enumerate(clt.predict(list(x))):
            np.testing.assert_allclose(ct["out"][layer], predicted.numpy(), atol=1e-5)
