"""Interop with Captum and Interpreto outputs, and insertion/deletion faithfulness curves."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from interp_widgets.attribution import IntegratedGradients, Saliency
from interp_widgets.attribution.faithfulness import faithfulness
from interp_widgets.attribution.interop import from_captum, from_interpreto

TEXT = "The soup was cold, but the bread was wonderful."


def test_from_captum_tensor_matches_our_ig(bert_classifier):
    from captum.attr import LayerIntegratedGradients

    model, tokenizer = bert_classifier
    enc = tokenizer(TEXT, return_tensors="pt", return_special_tokens_mask=True)
    ids = enc["input_ids"]
    ref = torch.where(enc["special_tokens_mask"].bool(), ids, torch.full_like(ids, tokenizer.pad_token_id))
    lig = LayerIntegratedGradients(lambda x: model(input_ids=x).logits, model.bert.embeddings.word_embeddings)
    attributions = lig.attribute(ids, baselines=ref, target=2, n_steps=16, method="riemann_middle")
    converted = from_captum(attributions, tokenizer, TEXT, target_label="positive")
    ours = IntegratedGradients(n_steps=16, method="riemann_middle").attribute(model, tokenizer, TEXT, target=2)
    assert converted.tokens == ours.tokens
    np.testing.assert_array_equal(converted.word_ids, ours.word_ids)
    np.testing.assert_allclose(converted.scores, ours.scores, atol=1e-4)
    assert "application/vnd.jupyter.widget-view+json" in converted._repr_mimebundle_()[0]
    with pytest.raises(ValueError, match="attributions cover"):
        from_captum(attributions, tokenizer, TEXT + " extra")


def test_from_captum_llm_result(gpt2_lm):
    from captum.attr import FeatureAblation, LLMAttribution, TextTokenInput

    model, tokenizer = gpt2_lm
    llm = LLMAttribution(FeatureAblation(model), tokenizer)
    prompt = TextTokenInput("The hotel was", tokenizer)
    captum_result = llm.attribute(prompt, target=" very clean")
    result = from_captum(captum_result, text=" very clean")
    n_in, n_out = len(captum_result.input_tokens), len(captum_result.output_tokens)
    assert result.scores.shape == (n_out, n_in + n_out)
    np.testing.assert_allclose(result.scores[:, :n_in], captum_result.token_attr.numpy())
    assert np.isnan(result.scores[:, n_in:]).all()
    assert result.generated_mask.sum() == n_out
    assert result.text.startswith("The hotel was")
    assert result.text.endswith(" very clean")


@pytest.mark.parametrize("method_name", ["Saliency", "Occlusion"])
def test_from_interpreto_real_attribution_output(bert_classifier, method_name):
    import copy

    import interpreto

    model, tokenizer = bert_classifier
    explainer = getattr(interpreto, method_name)(copy.deepcopy(model), tokenizer)
    output = explainer(TEXT, targets=torch.tensor([[2, 0]]))[0]
    assert isinstance(output, interpreto.attributions.base.AttributionOutput)
    labels = ["negative", "neutral", "positive"]
    plain = from_interpreto(output, labels=labels, method=method_name)
    assert plain.tokens == output.elements and plain.granularity == "word"
    np.testing.assert_allclose(plain.scores, output.attributions.double().numpy())
    assert plain.target_labels == ["positive", "negative"] and plain.target_ids.tolist() == [2, 0]
    assert plain.method == f"interpreto:{method_name}"
    assert plain.signed == (method_name == "Occlusion")  # Interpreto's gradient scores are magnitudes
    located = from_interpreto(output, labels=labels, text=TEXT, method=method_name)
    assert located.text == TEXT
    assert located.tokens == ["The", "soup", "was", "cold", ",", "but", "the", "bread", "was", "wonderful", "."]
    assert [TEXT[a:b] for a, b in located.offsets] == located.tokens
    np.testing.assert_allclose(located.scores, plain.scores)
    assert "application/vnd.jupyter.widget-view+json" in located._repr_mimebundle_()[0]
    if method_name == "Occlusion":  # a word's score is the target logit lost when that word is masked
        ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
        masked = ids.clone()
        masked[0, 2] = tokenizer.mask_token_id  # "soup", word 1, token 2 after [CLS] "the"
        with torch.no_grad():
            full, occluded = model(input_ids=ids).logits[0, 2], model(input_ids=masked).logits[0, 2]
        assert located.scores[0, 1] == pytest.approx(float(full - occluded), abs=1e-5)
    with pytest.raises(ValueError, match="is not the next part of text"):
        from_interpreto(output, text="The soup was hot.")


def test_from_interpreto_real_generation_output(gpt2_lm):
    import copy

    import interpreto

    model, tokenizer = gpt2_lm
    # Interpreto may add a pad token to the tokenizer and write the model's config: it gets copies of both
    explainer = interpreto.Occlusion(copy.deepcopy(model), copy.deepcopy(tokenizer))
    output = explainer("The hotel was", targets=" very clean")[0]
    scores = output.attributions.double().numpy()
    result = from_interpreto(output, text="The hotel was very clean", method="Occlusion")
    n_out = scores.shape[0]
    assert result.scores.shape == scores.shape and n_out >= 2
    np.testing.assert_allclose(result.scores, scores)  # NaN cells included
    assert result.generated_mask.sum() == n_out and not result.generated_mask[: len(output.elements) - n_out].any()
    assert result.target_labels == [
        f"{e!r}@{len(output.elements) - n_out + j}" for j, e in enumerate(output.elements[-n_out:])
    ]
    # Interpreto's targets are the continuation's token ids, its rows are words: ids are unknown (-1) then
    expected_ids = output.targets.tolist() if len(output.targets) == n_out else [-1] * n_out
    assert result.target_ids.tolist() == expected_ids
    assert result.text == "The hotel was very clean"
    assert "".join(result.text[a:b] for a, b in result.offsets).replace(" ", "") == "Thehotelwasveryclean"
    assert "application/vnd.jupyter.widget-view+json" in result._repr_mimebundle_()[0]


def test_from_interpreto_classification_and_generation():
    classification = SimpleNamespace(
        attributions=torch.tensor([[0.1, 0.5, 0.2], [0.3, 0.1, 0.0]]),
        elements=["Great", "film", "!"],
        targets=torch.tensor([1, 0]),
        model_task=SimpleNamespace(name="CLASSIFICATION"),
        granularity=SimpleNamespace(name="WORD"),
    )
    result = from_interpreto(classification, labels=["negative", "positive"])
    assert result.target_labels == ["positive", "negative"] and not result.signed
    assert result.text == "Great film !" and result.granularity == "word"
    nan = float("nan")
    generation = SimpleNamespace(
        attributions=torch.tensor([[0.2, -0.4, nan, nan], [0.1, 0.3, 0.5, nan]]),
        elements=["I", " am", " very", " glad"],
        targets=torch.tensor([7, 9]),
        model_task=SimpleNamespace(name="GENERATION"),
    )
    gen = from_interpreto(generation)
    assert gen.signed and gen.generated_mask.tolist() == [False, False, True, True]
    assert gen.text == "I am very glad"
    with pytest.raises(TypeError, match="expected an Interpreto AttributionOutput"):
        from_interpreto(object())


def test_faithfulness_curves_match_manual_deletion(bert_classifier):
    model, tokenizer = bert_classifier
    result = Saliency(reduce="sum").attribute(model, tokenizer, TEXT, granularity="word")
    curves = faithfulness(model, tokenizer, result, baseline="mask", max_steps=50)
    n_words = len(result.tokens)
    assert len(curves.fractions[0]) == n_words + 1
    # manual: delete the two highest-scoring words by replacing their token ids with [MASK]
    enc = tokenizer(TEXT, return_offsets_mapping=True)
    from interp_widgets.adapter import ModelAdapter

    word_ids = ModelAdapter(model, tokenizer).encode(TEXT).word_ids
    top2 = np.argsort(-result.scores[0], kind="stable")[:2]
    ids = torch.tensor(enc["input_ids"])
    ids[torch.as_tensor(np.isin(word_ids, top2))] = tokenizer.mask_token_id
    with torch.no_grad():
        p = torch.softmax(model(input_ids=ids[None]).logits, -1)[0, result.target_ids[0]]
    assert curves.deletion[0][2] == pytest.approx(float(p), abs=1e-5)
    assert curves.deletion[0][0] == pytest.approx(float(result.target_probs[0]), abs=1e-5)
    assert curves.insertion[0][-1] == pytest.approx(float(result.target_probs[0]), abs=1e-5)
    frame = curves.to_dataframe()
    assert set(frame["curve"]) == {"deletion", "insertion"}
    assert curves.chart().to_dict()["mark"]["type"] == "line"
    summary = curves.summary()
    assert summary["deletion_aopc"] == pytest.approx(np.mean(curves.deletion[0][0] - curves.deletion[0][1:]))


def test_faithfulness_rejects_language_models(gpt2_lm):
    result = Saliency().attribute(*gpt2_lm, "The hotel", max_new_tokens=2)
    with pytest.raises(ValueError, match="defined here for sequence classifiers"):
        faithfulness(*gpt2_lm, result)
