"""AttributionResult is a few composed parts (layout, scores, targets, method run, contrast, generation, granularity,
true label); its 0.1 attributes are read-only properties from one table, and its saved files keep the flat names."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from safetensors import safe_open

from interp_widgets.attribution import AttributionResult, Contrast, Generation, IntegratedGradients, MethodRun, Saliency
from interp_widgets.attribution.result import FLAT_ATTRIBUTES
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is None and b is None or np.array_equal(np.asarray(a), np.asarray(b), equal_nan=a.dtype.kind == "f")
    return a == b


def test_the_result_has_at_most_eight_fields_each_a_part():
    names = [f.name for f in dataclasses.fields(AttributionResult)]
    assert names == ["layout", "scores", "targets", "run", "contrast_info", "generation", "granularity", "true_label"]
    assert len(names) <= 8


def test_the_flat_attributes_read_through_to_the_parts_and_cannot_be_set(bert_classifier):
    model, tokenizer = bert_classifier
    result = Saliency(progress=False).attribute(model, tokenizer, "Not bad.", target=["negative", "positive"])
    assert isinstance(result.layout, TokenLayout) and isinstance(result.targets, Targets)
    assert isinstance(result.run, MethodRun) and result.contrast_info is None and result.generation is None
    assert result.tokens is result.layout.tokens and result.target_labels == result.targets.labels
    assert result.method == result.run.name == "saliency" and result.score_meaning == result.run.score_meaning
    assert result.foil_ids is None and result.generated_mask is None and result.contrast is None
    for name in FLAT_ATTRIBUTES:
        with pytest.raises(AttributeError):
            setattr(result, name, None)
    changed = result.replace(word_ids=np.arange(len(result.tokens)), method="renamed")
    assert changed.method == "renamed" and changed.word_ids.tolist() == list(range(len(result.tokens)))
    assert result.method == "saliency" and changed.layout is not result.layout
    with pytest.raises(TypeError, match=r"unknown attribution result values \['reduce_'\]"):
        result.replace(reduce_="x")


def test_a_contrastive_generation_keeps_its_parts_through_aggregation_and_saving(gpt2_lm, tmp_path):
    model, tokenizer = gpt2_lm
    result = IntegratedGradients(n_steps=4, progress=False).attribute(
        model, tokenizer, "The room was", continuation=" quiet", contrast=" loud"
    )
    assert isinstance(result.contrast_info, Contrast) and isinstance(result.generation, Generation)
    assert result.foil_labels == result.contrast_info.foils.labels and result.contrast == " loud"
    words = result.aggregate("word")
    assert words.contrast_info is result.contrast_info and words.targets is result.targets
    assert words.generated_mask.sum() >= 1 and words.params["aggregation"] == "sum"
    path = result.save(tmp_path / "r.safetensors")
    with safe_open(str(path), "np") as handle:
        meta = json.loads(handle.metadata()["interp_widgets"])
    assert meta["version"] == 2 and "score_meaning" in meta and "reduce" not in meta
    again = AttributionResult.load(path)
    for name in [*FLAT_ATTRIBUTES, "scores", "granularity", "true_label"]:
        assert _same(getattr(again, name), getattr(result, name)), name


def test_an_encoder_decoder_result_keeps_its_sides_and_cross_attention(t5_seq2seq, tmp_path):
    from interp_widgets.attribution import RawAttention

    model, tokenizer = t5_seq2seq
    result = RawAttention().attribute(model, tokenizer, "The room.", continuation=" room")
    assert result.generation.source_mask is not None and result.cross_attentions is not None
    again = AttributionResult.load(result.save(tmp_path / "s.safetensors"))
    assert _same(again.source_mask, result.source_mask) and _same(again.cross_attentions, result.cross_attentions)
    kept = result.aggregate("token")
    assert kept.cross_attentions.shape[-1] == int(kept.source_mask.sum())


def test_parts_check_that_they_fit_together():
    layout = TokenLayout(text="a b", tokens=["a", "b"], offsets=[(0, 1), (2, 3)], special_mask=[False, False])
    with pytest.raises(ValueError, match="scores have 3 columns but there are 2 tokens"):
        AttributionResult(layout, np.zeros((1, 3)), Targets(["t"]), MethodRun("m"))
    with pytest.raises(ValueError, match="2 targets for 1 rows of scores"):
        AttributionResult(layout, np.zeros((1, 2)), Targets(["t", "u"]), MethodRun("m"))
    with pytest.raises(ValueError, match="1 foils for 2 targets"):
        AttributionResult(layout, np.zeros((2, 2)), Targets(["t", "u"]), MethodRun("m"), Contrast(Targets(["f"])))
    with pytest.raises(ValueError, match="generated_mask has 1 entries for 2 units"):
        AttributionResult(layout, np.zeros((1, 2)), Targets(["t"]), MethodRun("m"), generation=Generation([True]))


def test_text_concepts_hold_a_layout_and_a_file_without_unit_ids_still_loads(tmp_path):
    from interp_widgets.concepts import TextConcepts
    from interp_widgets.concepts._io import save_bundle

    arrays = {"offsets": np.array([[0, 0], [0, 5], [6, 10], [10, 11], [0, 0]]), "special_mask": np.array([1, 0, 0, 0, 1], bool),
              "coefficients": np.arange(10.0).reshape(5, 2)}  # fmt: skip
    meta = {"text": "Great food.", "tokens": ["[CLS]", "Great", "food", ".", "[SEP]"], "layer": "layer:1",
            "method": "NMF", "params": {}}  # fmt: skip
    path = save_bundle(tmp_path / "tc.safetensors", "interp_widgets.TextConcepts", arrays, meta)  # as 0.1 wrote it
    loaded = TextConcepts.load(path)
    assert isinstance(loaded.layout, TokenLayout) and loaded.tokens == meta["tokens"] and loaded.text == meta["text"]
    assert loaded.layout.word_ids.tolist() == [-1, 0, 1, 2, -1] and loaded.layout.sentence_ids.tolist() == [
        -1,
        0,
        0,
        0,
        -1,
    ]
    again = TextConcepts.load(loaded.save(tmp_path / "again.safetensors"))
    assert again.layout.word_ids.tolist() == [-1, 0, 1, 2, -1] and np.array_equal(
        again.coefficients, loaded.coefficients
    )
