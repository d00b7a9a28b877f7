"""Feature explanations of a transcoder set (TranscoderSet.explain -> FeatureExplanations) and their place in graphs:
every number is checked against a brute-force computation written here (all activations of the corpus in memory,
sorted; the vocabulary projection by torch.topk), the cache by counting the model's forward calls, the detail files
against circuit-tracer's own pydantic models of ``frontend/feature_models.py`` (copied below from 4bb8c0e)."""

from __future__ import annotations

import json

import numpy as np
import pydantic
import pytest
import torch

from interp_widgets.circuits import (
    AttributionGraph,
    FeatureExplanations,
    TranscoderSet,
    cantor_pair,
    collect_transcoder_pairs,
    load_graph,
)
from interp_widgets.concepts import LMLabeler, Transcoder
from interp_widgets.demo import corpus
from interp_widgets.targets import Targets
from tests import tiny_models
from tests.conftest import model_fingerprint

TRAIN = corpus()[:80]
TEXTS = corpus()[300:330]
HOSTILE = "<img src=x onerror=alert(1)>"
K, WINDOW, BINS, TOP = 5, 3, 16, 7


# circuit-tracer 0.5.0 / 4bb8c0e circuit_tracer/frontend/feature_models.py, the models its front end's files follow
class CTExample(pydantic.BaseModel):
    tokens_acts_list: list[float]
    train_token_ind: int
    is_repeated_datapoint: bool
    tokens: list[str]


class CTExamplesQuantile(pydantic.BaseModel):
    quantile_name: str
    examples: list[CTExample]


class CTModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")  # strict here: only its fields, plus our label below

    transcoder_id: str
    index: int
    examples_quantiles: list[CTExamplesQuantile]
    top_logits: list[str]
    bottom_logits: list[str]
    act_min: float
    act_max: float
    quantile_values: list[float]
    histogram: list[float]
    activation_frequency: float
    label: str = ""


@pytest.fixture(scope="module")
def llama():
    return tiny_models.llama_lm()


@pytest.fixture(scope="module")
def tcs(llama):
    model, tokenizer = llama
    tc = Transcoder(32, k=4, max_epochs=5, batch_size=64, lr=1e-2, progress=False)
    return TranscoderSet.fit(model, tokenizer, TRAIN, transcoder=tc, buffer_tokens=400)


@pytest.fixture(scope="module")
def explained(tcs, llama):
    model, tokenizer = llama
    # small passes (64 tokens), so that the top-k merge and the histogram's doubling run many times
    return tcs.explain(model, tokenizer, TEXTS, n_examples=K, window=WINDOW, bins=BINS, vocab_top=TOP,
                       max_batch_tokens=64, progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def brute(tcs, llama):
    """Every activation of every feature over the corpus, and each row's text, position and token id."""
    model, tokenizer = llama
    pairs = collect_transcoder_pairs(model, tokenizer, TEXTS)
    texts, positions, ids = [], [], []
    for t, text in enumerate(TEXTS):
        enc = tokenizer(text)["input_ids"]
        special = set(tokenizer.all_special_ids)
        keep = [p for p, i in enumerate(enc) if i not in special]
        texts += [t] * len(keep)
        positions += keep
        ids += [enc[p] for p in keep]
    codes = {layer: tcs[layer].transform(X) for layer, (X, _) in pairs.items()}
    return codes, np.array(texts), np.array(positions), np.array(ids)


def test_top_contexts_are_the_maxima_with_their_windows(explained, brute):
    codes, texts, positions, ids = brute
    for layer, C in codes.items():
        part = explained.layers[layer]
        assert part.n_features == C.shape[1]
        for f in range(C.shape[1]):
            column = C[:, f]
            firing = np.flatnonzero(column > 0)
            expected = np.sort(column[firing])[::-1][:K]
            got = part.top_values[f][np.isfinite(part.top_values[f])]
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
            assert len(got) == min(K, len(firing))  # a feature that never fired has no contexts at all
            for j, example in enumerate(explained.examples(layer, f)):
                rows = np.flatnonzero((texts == example["text_id"]) & (positions == example["position"]))
                assert len(rows) == 1
                row = rows[0]
                assert column[row] == pytest.approx(example["activation"], rel=1e-5)
                span = np.arange(row - WINDOW, row + WINDOW + 1)
                span = span[(span >= 0) & (span < len(texts))]
                span = span[texts[span] == texts[row]]  # the same text only
                assert example["context"] == [explained.vocab[i] for i in ids[span]]
                np.testing.assert_allclose(example["context_activations"], column[span], rtol=1e-5, atol=1e-6)
                assert example["context"][example["center"]] == example["token"]
                assert list(part.context_ids[f, j][part.context_ids[f, j] >= 0]) == list(ids[span])


def test_density_mean_maximum_and_histogram_are_exact(explained, brute):
    codes, *_ = brute
    for layer, C in codes.items():
        part = explained.layers[layer]
        np.testing.assert_allclose(part.density, (C > 0).mean(0))
        np.testing.assert_allclose(part.mean, C.mean(0, dtype=np.float64), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(part.act_max, C.max(0), rtol=1e-6)
        for f in range(C.shape[1]):
            values = C[:, f][C[:, f] > 0].astype(np.float64)
            counts, edges = explained.histogram(layer, f)
            if not len(values):
                assert len(counts) == 0
                continue
            top = 2.0 ** (np.floor(np.log2(values.max())) + 1)  # the smallest power of two above the maximum
            assert part.hist_top[f] == top
            expected = np.bincount(np.floor(values * BINS / top).astype(int), minlength=BINS)
            np.testing.assert_array_equal(part.hist_counts[f], expected)
            assert counts.sum() == len(values) and counts[-1] > 0 and edges[-1] > values.max() >= edges[-2]
            quantiles = explained.quantile_values(layer, f)
            assert len(quantiles) == 100 and quantiles[-1] == pytest.approx(values.max())
            width = edges[1] - edges[0]
            for q in (0.25, 0.5, 0.9):  # read from the histogram: in the bin of the exact quantile
                exact = np.quantile(values, q, method="inverted_cdf")  # the smallest value with F >= q
                assert abs(quantiles[int(q * 100) - 1] - exact) <= width + 1e-9


def test_vocabulary_projection_is_the_decoder_through_the_unembedding(explained, tcs, llama):
    model, tokenizer = llama
    W_U = model.get_output_embeddings().weight.detach().float()
    for layer, part in explained.layers.items():
        W_dec = tcs[layer].folded()["W_dec"].float()  # raw units: not unit-norm
        logits = W_dec @ W_U.T
        high, low = torch.topk(logits, TOP, dim=1), torch.topk(-logits, TOP, dim=1)
        np.testing.assert_array_equal(part.top_logit_ids, high.indices.numpy())
        np.testing.assert_allclose(part.top_logit_values, high.values.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(part.bottom_logit_ids, low.indices.numpy())
        np.testing.assert_allclose(part.bottom_logit_values, -low.values.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(part.decoder_norm, W_dec.norm(dim=1).numpy(), rtol=1e-6)
        detail = explained.detail(layer, 0)
        assert detail["top_logits"] == [tokenizer.decode([i]) for i in high.indices[0].tolist()]


def test_one_pass_leaves_the_model_alone_and_bad_input_is_refused(tcs, llama):
    model, tokenizer = llama
    before = model_fingerprint(model, tokenizer)
    rows = []

    def count(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        rows.append(int(ids.shape[0]))

    handle = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        tcs.explain(model, tokenizer, TEXTS[:6], n_examples=2, progress=False)
    finally:
        handle.remove()
    assert sum(rows) == 6  # each text through the model once, every layer read from that pass
    assert model_fingerprint(model, tokenizer) == before
    with pytest.raises(ValueError, match="power of two"):
        tcs.explain(model, tokenizer, TEXTS[:2], bins=10, progress=False)
    with pytest.raises(ValueError, match=r"layers \[5\] have no transcoder.*\[0, 1\]"):
        tcs.explain(model, tokenizer, TEXTS[:2], layers=[5], progress=False)
    wider = tiny_models._decoder(*_llama_classes(), hidden_size=48, num_attention_heads=4, num_key_value_heads=2)[0]
    with pytest.raises(ValueError, match="width 32.*width 48"):
        tcs.explain(wider, tokenizer, TEXTS[:2], progress=False)


def _llama_classes():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaConfig, LlamaForCausalLM


def test_cache_is_reused_without_the_model_and_a_corrupted_one_names_the_fix(tcs, llama, tmp_path):
    model, tokenizer = llama
    calls = []
    handle = model.register_forward_pre_hook(lambda *a: calls.append(1))
    options = dict(n_examples=3, progress=False, cache_dir=tmp_path, max_batch_tokens=256)
    try:
        first = tcs.explain(model, tokenizer, TEXTS[:12], **options)
        ran = len(calls)
        again = tcs.explain(model, tokenizer, TEXTS[:12], **options)
        assert ran > 0 and len(calls) == ran  # read back: no forward pass
        other = tcs.explain(model, tokenizer, TEXTS[:11], **options)  # another corpus: another key, computed
        assert len(calls) > ran and other.run.key != first.run.key
    finally:
        handle.remove()
    assert again.run == first.run and again.detail(1, 3) == first.detail(1, 3)
    files = sorted(tmp_path.glob("feature-explanations-*.safetensors"))
    assert len(files) == 2
    path = next(p for p in files if first.run.key[:24] in p.name)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF  # one changed byte in the last array
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"cannot be used.*corrupted.*Delete that file and call explain again"):
        tcs.explain(model, tokenizer, TEXTS[:12], **options)
    path.write_bytes(bytes(raw[: len(raw) // 2]))  # truncated
    with pytest.raises(ValueError, match=r"cannot be used.*Delete that file"):
        tcs.explain(model, tokenizer, TEXTS[:12], **options)
    path.unlink()
    assert tcs.explain(model, tokenizer, TEXTS[:12], **options).detail(1, 3) == first.detail(1, 3)
    # a labeller on a cached set: labels every feature that fired, no forward pass, and the cache keeps the labels
    asked, calls = [], []
    handle = model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        named = tcs.explain(model, tokenizer, TEXTS[:12], labeller=_Shout(asked), **options)
        assert calls == [] and len(asked) == sum(int((p.density > 0).sum()) for p in first.layers.values())
        again = tcs.explain(model, tokenizer, TEXTS[:12], labeller=_Shout(asked), **options)
        assert calls == [] and len(asked) == sum(int((p.density > 0).sum()) for p in first.layers.values())
    finally:
        handle.remove()
    assert named.run.label_source == again.run.label_source == "shout" and again.label(1, 3) == named.label(1, 3)
    live = int(np.flatnonzero(first.layers[1].density > 0)[0])
    assert named.label(1, live) == first.examples(1, live)[0]["token"].upper()


class _Shout:
    name = "shout"

    def __init__(self, asked):
        self.asked = asked

    def __call__(self, feature, examples):
        self.asked.append(feature)
        return examples[0]["token"].upper()


def test_save_load_round_trip(explained, tmp_path):
    again = FeatureExplanations.load(explained.save(tmp_path / "x.safetensors"))
    assert again.run == explained.run and again.vocab == explained.vocab
    for layer, part in explained.layers.items():
        other = again.layers[layer]
        for name, value in vars(part).items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(getattr(other, name), value)
        assert other.labels == part.labels
    assert again.to_dataframe().equals(explained.to_dataframe())
    assert (
        repr(again)
        == repr(explained)
        == (
            f"FeatureExplanations(2 layers, 32 features each, {K} contexts each over {explained.run.n_tokens} tokens, "
            "labels from top tokens)"
        )
    )
    with pytest.raises(ValueError, match="not FeatureExplanations"):
        FeatureExplanations.load(AttributionGraph.save(_graph(explained), tmp_path / "g.safetensors"))


def _graph(explained) -> AttributionGraph:
    """A small graph over features the explanations cover: three features, their errors, four tokens, one logit."""
    live = [(layer, f) for layer, part in explained.layers.items() for f in np.flatnonzero(part.density > 0)]
    chosen = sorted([(live[0][0], 1, live[0][1]), (live[1][0], 2, live[1][1]), (live[-1][0], 3, live[-1][1])])
    n = 3 + 2 * 4 + 4 + 1
    adjacency = np.zeros((n, n), np.float32)
    adjacency[0, 11], adjacency[1, 0], adjacency[2, 1], adjacency[-1, 2], adjacency[-1, 14] = 1.0, 0.8, 0.7, 0.9, 0.2
    return AttributionGraph.from_flat(
        adjacency,
        features=chosen,
        activations=[1.0, 2.0, 3.0],
        logits=Targets(["x"], ids=[5], probs=[0.7]),
        prompt="abcd",
        prompt_tokens=["a", "b", "c", HOSTILE],
        token_ids=[10, 11, 12, 13],
        n_layers=2,
        scan="tiny",
    )


def test_graph_json_detail_files_and_clerps(explained, tmp_path):
    graph = _graph(explained).with_explanations(explained)
    path = graph.to_json(tmp_path, slug="g", node_threshold=1.0, edge_threshold=1.0)
    doc = json.loads(path.read_text())
    for node in doc["nodes"]:
        if node["feature_type"] == "cross layer transcoder":
            layer, f = int(node["layer"]), int(node["node_id"].split("_")[1])
            assert node["clerp"] == explained.label(layer, f) != ""
            detail = json.loads((tmp_path / "features" / "tiny" / f"{cantor_pair(layer, f)}.json").read_text())
            CTModel(**detail)  # circuit-tracer's own models read it
            assert detail["transcoder_id"] == "tiny" and detail["index"] == node["feature"]
            top, prompt = detail["examples_quantiles"]
            assert top["quantile_name"] == "Top activations" and prompt["quantile_name"] == "This prompt"
            examples = explained.examples(layer, f)
            assert [e["tokens"] for e in top["examples"]] == [e["context"] for e in examples]
            assert [e["tokens_acts_list"] for e in top["examples"]] == [e["context_activations"] for e in examples]
            assert [e["train_token_ind"] for e in top["examples"]] == [e["center"] for e in examples]
            assert prompt["examples"][0]["tokens"] == ["a", "b", "c", HOSTILE]  # data: nothing escaped
            part = explained.layers[layer]
            assert detail["top_logits"] == [explained.vocab[i] for i in part.top_logit_ids[f]]
            assert detail["bottom_logits"] == [explained.vocab[i] for i in part.bottom_logit_ids[f]]
            assert detail["act_max"] == pytest.approx(part.act_max[f]) and detail["act_min"] == 0.0
            assert detail["histogram"] == explained.histogram(layer, f)[0].tolist()
            assert detail["activation_frequency"] == pytest.approx(part.density[f])
    loaded = load_graph(path)  # the clerps come back as labels, and go out again
    assert loaded.node_ids == graph.prune(1.0, 1.0).node_ids
    assert loaded.feature_labels == graph.prune(1.0, 1.0).feature_labels and loaded.explanations.source == "graph JSON"
    again = json.loads(loaded.to_json(tmp_path / "again", slug="g").read_text())
    assert again["nodes"] == doc["nodes"]
    # the circuit view shows the explanations: labels and corpus contexts
    view = graph.widget()
    assert view.node_labels[: len(graph.features)] == graph.feature_labels
    first = view.details[graph.node_ids[0]]
    assert first["source"] == "given" and first["contexts"] and first["top_logits"]


def test_graph_save_load_keeps_the_explanations_and_displays_escape(explained, tmp_path):
    graph = _graph(explained).with_explanations(explained)
    again = AttributionGraph.load(graph.save(tmp_path / "g.safetensors"))
    assert again.explanations.details == graph.explanations.details
    assert again.feature_labels == graph.feature_labels and again.prune().feature_labels == graph.prune().feature_labels
    assert AttributionGraph.load(_graph(explained).save(tmp_path / "plain.safetensors")).explanations is None
    hostile = FeatureExplanations.load(explained.save(tmp_path / "x.safetensors"))
    hostile.relabel(lambda f, ex: HOSTILE, source="test", progress=False)
    shown = graph.with_explanations(hostile)
    assert HOSTILE not in shown._repr_html_() and "&lt;img" in shown._repr_html_()
    assert HOSTILE not in hostile._repr_html_() and "&lt;img" in hostile._repr_html_()
    path = shown.to_json(tmp_path / "json", slug="h", node_threshold=1.0, edge_threshold=1.0)
    assert HOSTILE in {n["clerp"] for n in json.loads(path.read_text())["nodes"]}  # JSON is data: kept as it is
    with pytest.raises(KeyError, match="no explanations for layer 1"):
        _graph(explained).with_explanations(_only_layer_0(explained))


def _only_layer_0(explained):
    return FeatureExplanations({0: explained.layers[0]}, explained.vocab, explained.run)


def test_a_labeller_labels_just_the_graph_features(explained, tmp_path):
    model, tokenizer = tiny_models.chat_llama_lm()
    labeller = LMLabeler(model, tokenizer, n_examples=2, max_new_tokens=4)
    asked = []

    def counting(feature, examples):
        asked.append(feature)
        return labeller(feature, examples)

    copy = FeatureExplanations.load(explained.save(tmp_path / "x.safetensors"))
    graph = _graph(copy).with_explanations(copy, labeller=counting, progress=False)
    keys = sorted({(layer, f) for layer, _, f in graph.features.tolist()})
    assert sorted(asked) == sorted(f for _, f in keys)  # the graph's features only
    for layer, f in keys:
        expected = labeller(f, copy.examples(layer, f))
        assert copy.label(layer, f) == expected == graph.explanations.label(layer, f) and expected.strip()
    assert copy.run.label_source == "custom"
