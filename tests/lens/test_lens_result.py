"""LensResult is made of a few parts (issue 30): its token layout is a TokenLayout, its targets a Targets, and 0.1's
flat fields stay readable, buildable (from_flat) and saved."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest

from interp_widgets.lens import LensResult, logit_lens
from interp_widgets.lens.result import FLAT_ATTRIBUTES
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout
from tests import tiny_models

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "saved_v0_1"
#: The fields of 0.1's LensResult constructor.
OLD_FIELDS = ("tokens", "token_ids", "layers", "lenses", "top_ids", "top_probs", "kl", "target_ids", "targets",
              "target_probs", "target_ranks", "vocab_ids", "vocab_text", "generated_mask", "prompt_length",
              "model_name", "task", "params")  # fmt: skip


@pytest.fixture(scope="module")
def generated():
    model, tokenizer = tiny_models.gpt2_lm()
    result = logit_lens(model, tokenizer, "The room was", targets=[" the"], continuation=" quiet",
                        max_new_tokens=2, progress=False)  # fmt: skip
    return result, tokenizer


def test_the_constructor_takes_a_few_parts_and_every_old_field_still_reads(generated):
    result, _ = generated
    assert len(inspect.signature(LensResult).parameters) <= 8
    assert [f.name for f in dataclasses.fields(LensResult)] == ["layout", "positions", "targets", "readout", "vocab",
                                                                 "run"]  # fmt: skip
    assert isinstance(result.layout, TokenLayout) and isinstance(result.targets, Targets)
    assert set(OLD_FIELDS) - set(FLAT_ATTRIBUTES) == {"targets"}  # a part of its own
    for name in OLD_FIELDS:
        getattr(result, name)
    with pytest.raises(AttributeError):
        result.tokens = ["x"]  # flat attributes are read-only: change a result with replace()


def test_the_layout_covers_the_prompt_the_continuation_and_the_generated_tokens(generated):
    result, tokenizer = generated
    layout = result.layout
    assert layout.text == tokenizer.decode(result.token_ids.tolist())
    assert layout.text.startswith("The room was quiet")
    assert result.tokens == [tokenizer.decode([i]) for i in result.token_ids]
    assert all(layout.text[a:b] in token for (a, b), token in zip(layout.offsets, result.tokens))
    assert layout.offsets[-2:].tolist() == [[18, 19], [19, 20]]  # the generated tokens, after the continuation
    assert result.prompt_length == 3 and result.generated_mask.tolist() == [False] * 6 + [True] * 2
    assert len(layout.word_ids) == len(result.tokens) and not layout.special_mask.any()


def test_a_masked_lm_layout_marks_its_special_tokens():
    model, tokenizer = tiny_models.bert_masked_lm()
    result = logit_lens(model, tokenizer, "The cat sat.", progress=False)
    assert result.layout.text == "The cat sat."
    assert result.layout.special_mask.tolist() == [True, False, False, False, False, True]
    assert result.tokens[0] == tokenizer.decode([tokenizer.cls_token_id])


def test_from_flat_and_replace_build_the_same_result(generated, tmp_path):
    result, _ = generated
    old = {name: getattr(result, name) for name in OLD_FIELDS}
    again = LensResult.from_flat(**old)  # 0.1's keywords: the text is the tokens joined
    assert again.tokens == result.tokens and again.target_labels == result.target_labels
    assert again.layout.text == "".join(result.tokens)
    np.testing.assert_array_equal(again.target_token_ids, result.targets.ids)
    changed = result.replace(model_name="other", kl=result.kl * 0)
    assert changed.model_name == "other" and not changed.kl.any() and result.kl.any()
    assert changed.layout is result.layout and changed.run is not result.run
    loaded = LensResult.load(result.save(tmp_path / "lens.safetensors"))
    assert loaded.layout.text == result.layout.text
    np.testing.assert_array_equal(loaded.layout.offsets, result.layout.offsets)
    np.testing.assert_array_equal(loaded.layout.word_ids, result.layout.word_ids)


def test_parts_that_do_not_fit_together_are_refused(generated):
    result, _ = generated
    with pytest.raises(ValueError, match="readout has 1 lenses × 2 layers; the run names"):
        result.replace(lenses=["logit", "tuned"])
    with pytest.raises(ValueError, match="target_ids has 2 targets; there are 1"):
        result.replace(targets=Targets(["next token"]))
    with pytest.raises(ValueError, match="kl has shape"):
        result.replace(kl=result.kl[0])
    with pytest.raises(ValueError, match="vocab_ids must be ascending"):
        result.replace(vocab_ids=result.vocab_ids[::-1], vocab_text=result.vocab_text[::-1])
    with pytest.raises(TypeError, match="unknown lens result values \\['colour'\\]"):
        LensResult.from_flat(**{name: getattr(result, name) for name in OLD_FIELDS}, colour="red")


def test_a_file_saved_by_0_1_gets_the_tokens_joined_as_its_text():
    result = LensResult.load(FIXTURES / "lens.safetensors")
    assert result.layout.text == "The room was quiet"
    assert result.layout.offsets.tolist()[:2] == [[0, 3], [3, 8]]
    assert result.target_token_ids.tolist()[0] == -1


def test_a_file_of_a_newer_format_is_refused(generated, tmp_path):
    import json

    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    path = generated[0].save(tmp_path / "lens.safetensors")
    with safe_open(str(path), "np") as f:
        meta = json.loads(f.metadata()["interp_widgets"])
    save_file(load_file(str(path)), str(path), metadata={"interp_widgets": json.dumps({**meta, "version": 99})})
    with pytest.raises(ValueError, match="newer format than this interp_widgets reads; upgrade interp_widgets"):
        LensResult.load(path)
