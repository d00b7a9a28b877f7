"""Every compute family on a model dispatched by accelerate (one block on disk): the same results as the plain model
to 1e-5 in float32, and the dispatched model untouched. ``tests/test_scale.py`` covers attributions and activations;
this covers the lens, attention patterns, patching, steering, attribution graphs and the monitor's replay.
"""

import numpy as np
import pandas as pd
import pytest
import torch

from interp_widgets import ModelAdapter
from tests.conftest import model_fingerprint
from tests.test_scale import _dispatched_llama, _folder_digest, _state

PROMPT = "The room was clean and"


@pytest.fixture(scope="module")
def dispatched(llama_lm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dispatched")
    model = _dispatched_llama(llama_lm, folder)
    assert model.model.layers[1].self_attn.q_proj.weight.device.type == "meta"  # really offloaded to disk
    return model, folder


@pytest.fixture
def untouched(dispatched, llama_lm):
    """Checks, after the test, that accelerate's hooks, the weights and the offload folder are as before."""
    model, folder = dispatched
    _, tokenizer = llama_lm
    before = (_state(model), model_fingerprint(model, tokenizer), _folder_digest(folder))
    yield model
    assert (_state(model), model_fingerprint(model, tokenizer), _folder_digest(folder)) == before
    assert model.model.layers[1].self_attn.q_proj.weight.device.type == "meta"


def frames_close(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert len(got) == len(expected) > 0
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-5, atol=1e-6)


def test_logit_lens_and_attention_patterns(llama_lm, untouched):
    from interp_widgets.attribution.patterns import attention_patterns
    from interp_widgets.lens import logit_lens

    model, tokenizer = llama_lm
    frames_close(logit_lens(untouched, tokenizer, PROMPT, progress=False).to_dataframe(),
                 logit_lens(model, tokenizer, PROMPT, progress=False).to_dataframe())  # fmt: skip
    got = attention_patterns(untouched, tokenizer, PROMPT, progress=False)
    expected = attention_patterns(model, tokenizer, PROMPT, progress=False)
    assert got.tokens == expected.tokens and len(got.weights) == len(expected.weights) == 2
    for a, b in zip(got.weights, expected.weights):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), atol=1e-3)  # float16 storage


def test_activation_patching(llama_lm, untouched):
    from interp_widgets.interventions import activation_patching

    model, tokenizer = llama_lm
    clean, corrupt = "The room was clean and", "The room was cold and"
    for points in (("resid_pre", "mlp_out"), ("head",)):
        got = activation_patching(untouched, tokenizer, clean, corrupt, points=points, progress=False)
        expected = activation_patching(model, tokenizer, clean, corrupt, points=points, progress=False)
        frames_close(got.to_dataframe(), expected.to_dataframe())


def test_steering(llama_lm, untouched):
    from interp_widgets.interventions import steer

    model, tokenizer = llama_lm
    direction = torch.linspace(-1, 1, model.config.hidden_size)
    kwargs = dict(
        scales=(-4.0, 0.0, 4.0), max_new_tokens=3, damage_texts=["The staff was kind."], damage_tokens=6, progress=False
    )
    got = steer(untouched, tokenizer, PROMPT, direction, "layer:1", **kwargs)
    expected = steer(model, tokenizer, PROMPT, direction, "layer:1", **kwargs)
    frames_close(got.to_dataframe(), expected.to_dataframe())


def test_attribution_graph(llama_lm, untouched):
    from interp_widgets.circuits import TranscoderSet, attribution_graph
    from interp_widgets.concepts import Transcoder

    model, tokenizer = llama_lm
    texts = ["The room was clean.", "Slow service, cold food.", "The staff was kind and the food was good."] * 4
    transcoders = TranscoderSet.fit(model, tokenizer, texts, transcoder=Transcoder(16, k=4, max_epochs=2,
                                                                                   progress=False))  # fmt: skip
    got = attribution_graph(untouched, tokenizer, PROMPT, transcoders, progress=False)
    expected = attribution_graph(model, tokenizer, PROMPT, transcoders, progress=False)
    assert got.logits.labels == expected.logits.labels
    np.testing.assert_array_equal(got.features, expected.features)
    np.testing.assert_allclose(got.adjacency, expected.adjacency, rtol=1e-5, atol=1e-6)


def test_monitor_replay(llama_lm, untouched):
    from interp_widgets.geometry import replay

    model, tokenizer = llama_lm
    texts = ["The room was clean.", "Slow service, cold food.", "The staff was kind and the food was good."] * 3
    kwargs = dict(model=None, tokenizer=tokenizer, rank=2, n_controls=5, progress=False)
    got = replay([untouched], texts, ["layer:0", "layer:1"], **kwargs).to_dataframe()
    expected = replay([model], texts, ["layer:0", "layer:1"], **kwargs).to_dataframe()
    timed = got["metric"] == "monitor_ms"  # the monitor's own wall time
    assert timed.sum() == 1
    frames_close(got[~timed].reset_index(drop=True), expected[~timed].reset_index(drop=True))


def test_the_adapter_reads_the_embedding_device(untouched, llama_lm):
    _, tokenizer = llama_lm
    assert ModelAdapter(untouched, tokenizer).device == torch.device("cpu")


def test_an_embedding_left_on_the_meta_device_is_refused_with_the_fix(llama_lm):
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    from interp_widgets.attribution import Saliency
    from interp_widgets.concepts import collect_activations

    model, tokenizer = llama_lm
    with init_empty_weights():
        empty = AutoModelForCausalLM.from_config(model.config)
    message = r"input embedding is on the meta device and no accelerate hook loads it.*offload_folder"
    with pytest.raises(ValueError, match=message):
        Saliency(progress=False).attribute(empty, tokenizer, PROMPT, max_new_tokens=1)
    with pytest.raises(ValueError, match=message):
        collect_activations(empty, tokenizer, [PROMPT], layer=0, progress=False)
