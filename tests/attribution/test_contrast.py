"""Contrastive targets (``contrast=``): the score is score(target) − score(foil) at every step.

Checked against inseq 0.7 itself (its ``contrast_prob_diff`` step function as the attributed function, with
``contrast_targets`` = prompt + foil and its default right-aligned alignment) on the tiny GPT-2 and Llama models and
on the real SmolLM2-135M-Instruct, for a foil of the same length and foils that are longer and shorter; the
contrastive score itself against log-probabilities computed directly from the model's logits; integrated-gradients
completeness on the contrastive score; every gradient and perturbation method; saving, tables and errors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import (
    METHODS,
    AttributionResult,
    InputXGradient,
    IntegratedGradients,
    KernelShap,
    Occlusion,
    Saliency,
    attribute,
)
from interp_widgets.attribution.base import evaluate_rows
from interp_widgets.attribution.gradient import baseline_embeddings
from interp_widgets.tasks import prepare_inputs
from tests.conftest import model_fingerprint

PROMPT = "The room was"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread for this module, restored afterwards: the tiny models gain nothing from two, and on a
    busy machine two OpenMP threads wait for each other (a SmolLM2 forward pass took 10 s with two, 1 s with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _inseq_scores(model, tokenizer, method, prompt, continuation, foil, *, logprob=True):
    """inseq's contrastive attribution of ``prompt + continuation`` against ``prompt + foil``: (steps, prompt +
    continuation tokens) scores, NaN where a step cannot see a token (L2 norm for saliency, sum for input×gradient).

    (inseq's *step score* ``contrast_prob_diff`` is not compared: as a step score, inseq runs the foil in its own
    context, the prompt plus the earlier foil tokens, while as the attributed function it scores the foil in the
    target's context, as we do; only at the first step do the two agree.)"""
    import inseq

    pad = model.config.pad_token_id  # inseq sets the config's pad_token_id on load; put it back afterwards
    try:
        wrapped = inseq.load_model(model, method, tokenizer=tokenizer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = wrapped.attribute(
                prompt, prompt + continuation, attributed_fn="contrast_prob_diff", contrast_targets=prompt + foil,
                attributed_fn_args={"logprob": logprob}, show_progress=False,
            )  # fmt: skip
    finally:
        model.config.pad_token_id = pad
    seq = out.sequence_attributions[0]
    per_dim = seq.target_attributions.float()  # (tokens, steps, D); NaN for tokens a step cannot see
    values = per_dim.norm(dim=-1) if method == "saliency" else per_dim.sum(dim=-1)
    return values.T.numpy().astype(np.float64)


def _direct_contrast(model, tokenizer, prompt, continuation, foil_ids):
    """log p(target) − log p(foil) at every step, from one forward pass of the model on prompt + continuation."""
    prompt_ids, target_ids = _ids(tokenizer, prompt), _ids(tokenizer, continuation)
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + target_ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    steps = range(len(prompt_ids) - 1, len(prompt_ids) + len(target_ids) - 1)
    return np.array([float(logp[s, t] - logp[s, f]) for s, t, f in zip(steps, target_ids, foil_ids)])


def _assert_matches_inseq(ours: AttributionResult, theirs: np.ndarray, *, rtol=1e-4):
    assert ours.scores.shape == theirs.shape
    np.testing.assert_array_equal(np.isnan(ours.scores), np.isnan(theirs))
    for step, (a, b) in enumerate(zip(ours.scores, theirs)):
        seen = ~np.isnan(a)
        if ours.foil_ids[step] == ours.target_ids[step]:  # the foil is the target: a zero score, zero attributions
            assert not a[seen].any() and not b[seen].any()
        elif seen.sum() > 2:
            assert spearmanr(a[seen], b[seen]).statistic >= 0.9, step
        np.testing.assert_allclose(a[seen], b[seen], rtol=rtol, atol=1e-6 * np.abs(b[seen]).max())


# foils of the same length (2 tokens, as " clean"), longer (" dirty" is 4 tokens) and shorter (" the" is 1 token)
FOILS = {"equal": " cold", "longer": " dirty", "shorter": " the"}


@pytest.mark.parametrize("family", ["gpt2_lm", "llama_lm"])
@pytest.mark.parametrize("method_cls", [Saliency, InputXGradient])
def test_tiny_models_match_inseq_for_foils_of_every_length(request, family, method_cls):
    model, tokenizer = request.getfixturevalue(family)
    assert [len(_ids(tokenizer, f)) for f in FOILS.values()] == [2, 4, 1]
    before = model_fingerprint(model, tokenizer)
    for kind, foil in FOILS.items():
        assert _ids(tokenizer, PROMPT + foil) == _ids(tokenizer, PROMPT) + _ids(tokenizer, foil)  # same split as inseq
        ours = method_cls(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean", contrast=foil)
        _assert_matches_inseq(ours, _inseq_scores(model, tokenizer, method_cls.name, PROMPT, " clean", foil))
        # the explained score, log p(target) − log p(foil), from the probabilities the result records
        direct = _direct_contrast(model, tokenizer, PROMPT, " clean", ours.foil_ids)
        np.testing.assert_allclose(np.log(ours.target_probs) - np.log(ours.foil_probs), direct, rtol=1e-4, atol=1e-5)
    assert model_fingerprint(model, tokenizer) == before


def test_inseq_alignment_rule_of_longer_and_shorter_foils(gpt2_lm):
    model, tokenizer = gpt2_lm
    longer = Saliency(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean", contrast=" dirty")
    assert longer.foil_alignment.tolist() == [2, 3]  # right-aligned: ' d', 'ir' unused
    assert longer.foil_ids.tolist() == _ids(tokenizer, " dirty")[2:]
    shorter = Saliency(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean", contrast=" the")
    assert shorter.foil_alignment.tolist() == [-1, 0]  # step 0 meets the prompt's last token, as in inseq
    assert shorter.foil_ids.tolist() == [_ids(tokenizer, PROMPT)[-1], _ids(tokenizer, " the")[0]]
    pinned = Saliency(progress=False).attribute(
        model, tokenizer, PROMPT, continuation=" clean", contrast=" dirty", contrast_alignment=[(0, 0)]
    )
    assert pinned.foil_alignment.tolist() == [0, 3]
    per_target = Saliency(progress=False).attribute(
        model, tokenizer, PROMPT, continuation=" clean", contrast=[" the", "y"]
    )
    assert per_target.foil_ids.tolist() == [_ids(tokenizer, " the")[0], _ids(tokenizer, "y")[0]]


def test_smollm2_matches_inseq_and_the_direct_log_probability_difference(smollm2):
    model, tokenizer = smollm2
    before = model_fingerprint(model, tokenizer)
    prompt = "The capital of France is"
    # both methods on both foil lengths run on the tiny models above; here one of each keeps the test short
    for method_cls, foil, labels in (
        (Saliency, " Lyon!", [" Lyon", "!"]),
        (InputXGradient, " the city of Lyon", [" of", " Lyon"]),
    ):
        ours = method_cls(progress=False).attribute(model, tokenizer, prompt, continuation=" Paris.", contrast=foil)
        assert ours.foil_labels == labels  # equal length: 1:1; four tokens: right-aligned, " the city" unused
        _assert_matches_inseq(
            ours, _inseq_scores(model, tokenizer, method_cls.name, prompt, " Paris.", foil), rtol=1e-3
        )
        direct = _direct_contrast(model, tokenizer, prompt, " Paris.", ours.foil_ids)
        np.testing.assert_allclose(np.log(ours.target_probs) - np.log(ours.foil_probs), direct, rtol=1e-4, atol=1e-4)
        assert direct[0] > 0  # the model prefers " Paris" to " Lyon" / " of"
    assert model_fingerprint(model, tokenizer) == before


def test_the_row_score_is_the_log_probability_difference_from_the_logits(gpt2_lm):
    model, tokenizer = gpt2_lm
    adapter = ModelAdapter(model, tokenizer)
    for score, pick in (("log_probability", lambda lg: torch.log_softmax(lg, -1)), ("probability", lambda lg: torch.softmax(lg, -1)),
                        ("logit", lambda lg: lg)):  # fmt: skip
        problem = prepare_inputs(adapter, PROMPT, continuation=" clean", contrast=" dirty")[0]
        x = adapter.embed(torch.as_tensor(problem.encoding.input_ids)[None])[0].detach()
        seen = {}

        def build(item, start, stop):
            return x.expand(stop - start, -1, -1), np.arange(start, stop)

        def consume(chunk, scores, grads):
            seen["scores"], seen["grads"] = scores.double().numpy(), grads

        evaluate_rows(adapter, [problem], [problem.n_targets], build, consume, score=score, with_grad=True)
        with torch.no_grad():
            values = pick(model(torch.as_tensor(problem.encoding.input_ids)[None]).logits[0].double())
        expected = [
            float(values[p, t] - values[p, f])
            for p, t, f in zip(problem.target_positions, problem.target_ids, problem.foil_ids)
        ]
        np.testing.assert_allclose(seen["scores"], expected, rtol=1e-5, atol=1e-6)


def test_ig_completeness_holds_on_the_contrastive_score(gpt2_lm):
    model, tokenizer = gpt2_lm
    result = IntegratedGradients(progress=False).attribute(
        model, tokenizer, PROMPT, continuation=" clean", contrast=" dirty"
    )
    assert (result.relative_completeness_error < 0.01).all()
    # Δf is the contrastive score at the input minus at the baseline, both computed directly
    adapter = ModelAdapter(model, tokenizer)
    enc = adapter.encode(PROMPT + " clean")
    base = baseline_embeddings(adapter, enc, "pad", keep_first=True)  # a causal LM keeps its first token (auto)
    with torch.no_grad():
        at_input = torch.log_softmax(model(torch.as_tensor(enc.input_ids)[None]).logits[0].double(), -1)
        at_base = torch.log_softmax(model(inputs_embeds=base[None]).logits[0].double(), -1)
    delta = [
        float((at_input[p, t] - at_input[p, f]) - (at_base[p, t] - at_base[p, f]))
        for p, t, f in zip(result.target_positions, result.target_ids, result.foil_ids)
    ]
    np.testing.assert_allclose(result.score_delta, delta, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.nansum(result.scores, axis=1), delta, rtol=0.01, atol=1e-4)


def test_occlusion_and_kernel_shap_explain_the_difference(gpt2_lm):
    model, tokenizer = gpt2_lm
    adapter = ModelAdapter(model, tokenizer)
    enc = adapter.encode(PROMPT + " clean")
    ids = torch.as_tensor(enc.input_ids)
    pad = adapter.embed(torch.tensor([[tokenizer.pad_token_id]]))[0, 0]
    occlusion = Occlusion(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean", contrast=" cold")
    foil_ids = occlusion.foil_ids

    def contrast(embeds):
        with torch.no_grad():
            logp = torch.log_softmax(model(inputs_embeds=embeds[None]).logits[0].double(), -1)
        return np.array(
            [
                float(logp[p, t] - logp[p, f])
                for p, t, f in zip(occlusion.target_positions, occlusion.target_ids, foil_ids)
            ]
        )

    x = adapter.embed(ids[None])[0].detach()
    for token in range(len(ids) - 1):
        occluded = x.clone()
        occluded[token] = pad
        drop = contrast(x) - contrast(occluded)
        visible = occlusion.target_positions >= token  # target t is predicted at position target_positions[t]
        np.testing.assert_allclose(occlusion.scores[visible, token], drop[visible], rtol=1e-4, atol=1e-6)
    shap = KernelShap(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean", contrast=" cold")
    assert np.abs(shap.completeness_error).max() < 1e-6
    empty = x.clone()
    empty[:] = pad
    np.testing.assert_allclose(shap.score_delta, contrast(x) - contrast(empty), rtol=1e-4, atol=1e-6)


FAST = {"integrated_gradients": {"n_steps": 8}, "smoothgrad": {"n_samples": 4}, "vargrad": {"n_samples": 4},
        "squaregrad": {"n_samples": 4}, "gradient_shap": {"n_samples": 4}, "lime": {"n_samples": 16},
        "kernel_shap": {"n_samples": 16}, "sobol": {"n_samples": 4}}  # fmt: skip


def test_every_gradient_and_perturbation_method_takes_a_foil(gpt2_lm, llama_lm):
    names = [name for name, cls in METHODS.items() if cls.family in ("gradient", "perturbation")]
    assert {"saliency", "input_x_gradient", "integrated_gradients", "occlusion", "lime", "kernel_shap"} <= set(names)
    for model, tokenizer in (gpt2_lm, llama_lm):
        before = model_fingerprint(model, tokenizer)
        for name in names + ["gradient_weighted_attention"]:
            params = {"progress": False, **FAST.get(name, {})}
            plain = attribute(model, tokenizer, PROMPT, method=name, method_params=params, continuation=" clean")
            foiled = attribute(
                model, tokenizer, PROMPT, method=name, method_params=params, continuation=" clean", contrast=" cold"
            )
            assert foiled.is_contrastive and foiled.foil_labels == [" co", "ld"], name
            seen = ~np.isnan(foiled.scores)
            assert np.isfinite(foiled.scores[seen]).all(), name
            assert not np.allclose(plain.scores[seen], foiled.scores[seen]), name  # the foil changes the explanation
        assert model_fingerprint(model, tokenizer) == before


def test_masked_lm_foil_is_the_logit_difference_at_the_mask(bert_masked_lm):
    model, tokenizer = bert_masked_lm
    text = "The food was [MASK]."
    result = InputXGradient(progress=False).attribute(model, tokenizer, text, target="good", contrast="bad")
    assert result.target_labels == ["good"] and result.foil_labels == ["bad"]
    enc = tokenizer(text, return_tensors="pt")
    embeds = model.get_input_embeddings()(enc.input_ids).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds, attention_mask=enc.attention_mask).logits[0, 4]
    good, bad = tokenizer.convert_tokens_to_ids(["good", "bad"])
    (grad,) = torch.autograd.grad(logits[good] - logits[bad], embeds)
    np.testing.assert_allclose(result.scores[0], (grad * embeds).sum(-1)[0].detach().numpy(), rtol=1e-4, atol=1e-6)
    probs = torch.softmax(logits.detach(), -1)
    np.testing.assert_allclose(result.foil_probs, [float(probs[bad])], rtol=1e-5)
    by_id = InputXGradient(progress=False).attribute(model, tokenizer, text, target="good", contrast=[bad])
    np.testing.assert_array_equal(by_id.scores, result.scores)
    assert InputXGradient(progress=False).attribute(
        model, tokenizer, text, target="good", contrast=["bad"]
    ).foil_labels == ["bad"]
    with pytest.raises(ValueError, match="contrast lists 2 foil tokens for 1 target; a masked LM explains one token"):
        InputXGradient().attribute(model, tokenizer, text, target="good", contrast=["bad", "nice"])
    with pytest.raises(ValueError, match="contrast 'awfulness' is 2 tokens; a masked-LM foil must be a single token"):
        InputXGradient().attribute(model, tokenizer, text, target="good", contrast="awfulness")


def test_a_generated_continuation_and_a_batch_with_one_foil_per_input(gpt2_lm):
    model, tokenizer = gpt2_lm
    generated = Saliency(progress=False).attribute(model, tokenizer, PROMPT, max_new_tokens=3, contrast=" dirty")
    assert len(generated.target_ids) == 3
    assert generated.foil_alignment.tolist() == [1, 2, 3]
    batch = Saliency(progress=False).attribute(
        model, tokenizer, [PROMPT, "The bed is"], continuation=" clean", contrast=[" cold", [5, 6]]
    )
    assert batch[0].foil_labels == [" co", "ld"] and batch[1].foil_ids.tolist() == [5, 6]
    single = Saliency(progress=False).attribute(model, tokenizer, "The bed is", continuation=" clean", contrast=[5, 6])
    np.testing.assert_allclose(batch[1].scores, single.scores, rtol=1e-5, atol=1e-7)


def test_results_record_the_foil_in_tables_and_files(tmp_path, gpt2_lm):
    model, tokenizer = gpt2_lm
    result = InputXGradient(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean", contrast=" cold")
    assert "contrast=' cold'" in repr(result)
    frame = result.to_dataframe()
    assert frame.columns.tolist()[:4] == ["target", "target_prob", "foil", "foil_prob"]
    assert frame.groupby("target", sort=False).foil.first().tolist() == [" co", "ld"]
    again = AttributionResult.load(result.save(tmp_path / "contrast.safetensors"))
    assert again.contrast == " cold" and again.foil_labels == result.foil_labels
    for name in ("foil_ids", "foil_probs", "foil_alignment", "scores"):
        np.testing.assert_array_equal(getattr(again, name), getattr(result, name))
    words = result.aggregate("word")
    assert words.foil_labels == result.foil_labels and words.is_contrastive


def test_bad_foils_get_clear_errors(gpt2_lm, bert_classifier):
    model, tokenizer = gpt2_lm
    forced = {"continuation": " clean"}
    with pytest.raises(ValueError, match="contrast is an empty string; pass the foil continuation"):
        Saliency().attribute(model, tokenizer, PROMPT, contrast="", **forced)
    with pytest.raises(ValueError, match="contrast is empty; pass the foil as text"):
        Saliency().attribute(model, tokenizer, PROMPT, contrast=[], **forced)
    with pytest.raises(ValueError, match="contrast lists 3 foil tokens for 2 targets; pass one foil token per target"):
        Saliency().attribute(model, tokenizer, PROMPT, contrast=[" a", " b", " c"], **forced)
    with pytest.raises(ValueError, match="contrast has 3 foils for 2 inputs; pass one foil per input"):
        Saliency().attribute(model, tokenizer, [PROMPT, "The bed"], contrast=[" a", " b", " c"], **forced)
    with pytest.raises(ValueError, match="foil 0 .' dirty'. is 4 tokens; a per-target foil must be exactly one token"):
        Saliency().attribute(model, tokenizer, PROMPT, contrast=[" dirty", "y"], **forced)
    with pytest.raises(ValueError, match="token id 99999 outside the vocabulary"):
        Saliency().attribute(model, tokenizer, PROMPT, contrast=[99999], **forced)
    with pytest.raises(ValueError, match="foil index 7 is outside the foil's 2 tokens"):
        Saliency().attribute(model, tokenizer, PROMPT, contrast=" cold", contrast_alignment=[(0, 7)], **forced)
    with pytest.raises(ValueError, match="contrast_alignment aligns a foil with the targets; pass the foil too"):
        Saliency().attribute(model, tokenizer, PROMPT, contrast_alignment=[(0, 0)], **forced)
    with pytest.raises(ValueError, match="raw_attention does not depend on the explained score"):
        attribute(model, tokenizer, PROMPT, method="raw_attention", contrast=" cold", **forced)
    classifier, wordpiece = bert_classifier
    with pytest.raises(ValueError, match=r"sequence classifier.*pass target=\[A, B\] with score='logit' and subtract"):
        Saliency().attribute(classifier, wordpiece, "Not bad.", target="positive", contrast="negative")


def test_the_classifier_advice_is_exact(bert_classifier):
    """What the classifier error recommends: the row difference of a signed method is the contrastive attribution."""
    model, tokenizer = bert_classifier
    both = InputXGradient(score="logit", progress=False).attribute(
        model, tokenizer, "Not bad.", target=["positive", "negative"]
    )
    enc = tokenizer("Not bad.", return_tensors="pt")
    embeds = model.get_input_embeddings()(enc.input_ids).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds, attention_mask=enc.attention_mask).logits[0]
    (grad,) = torch.autograd.grad(logits[2] - logits[0], embeds)
    np.testing.assert_allclose(
        both.scores[0] - both.scores[1], (grad * embeds).sum(-1)[0].detach().numpy(), rtol=1e-4, atol=1e-6
    )


EVIL = "<img src=x onerror=alert(1)>"


def test_the_generation_view_shows_target_foil_pairs_and_escapes_them(gpt2_lm):

    from interp_widgets.widgets import GenerationWidget

    model, tokenizer = gpt2_lm
    result = InputXGradient(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean", contrast=" cold")
    widget = result.widget(selected_step=1)
    assert isinstance(widget, GenerationWidget)
    assert widget.foil_tokens == [" co", "ld"] and widget.contrast == " cold"
    assert widget.foil_probs == pytest.approx(result.foil_probs.tolist())
    assert widget.score_meaning.endswith("explains log p(target) − log p(foil)")
    pairs = widget.step_pairs()
    assert [(t, f) for t, f, _ in pairs] == [(" cle", " co"), ("an", "ld")]
    assert [r for _, _, r in pairs] == pytest.approx(np.log(result.target_probs) - np.log(result.foil_probs))
    assert "rather than 'ld'" in repr(widget)
    svg = widget.static_svg()
    assert '"an" (p = ' in svg and 'rather than "ld" (p = ' in svg
    assert "orange pushes towards the generated token, blue towards the foil" in svg
    assert ">an vs ld<" in svg  # heatmap rows name the pair
    evil = result.replace(foil_labels=[EVIL, "ld"], contrast=EVIL)
    svg = GenerationWidget(evil).static_svg()
    assert EVIL not in svg and "&lt;img src=x onerror=alert(1)&gt;" in svg
    plain = InputXGradient(progress=False).attribute(model, tokenizer, PROMPT, continuation=" clean").widget()
    assert plain.foil_tokens == [] and "rather than" not in plain.static_svg()
    with pytest.raises(ValueError, match="foil_labels has 1 entries for 2 generated tokens"):
        GenerationWidget(_one_foil(result))


def _one_foil(result):
    from types import SimpleNamespace

    fields = {
        name: getattr(result, name)
        for name in (
            "text",
            "tokens",
            "offsets",
            "scores",
            "special_mask",
            "target_labels",
            "target_probs",
            "generated_mask",
            "target_positions",
        )
    }
    return SimpleNamespace(**fields, foil_labels=["x"])


def test_a_masked_lm_foil_labels_the_token_view(bert_masked_lm):
    model, tokenizer = bert_masked_lm
    result = Saliency(progress=False).attribute(model, tokenizer, "The food was [MASK].", target="good", contrast="bad")
    assert result.widget().target_labels == ["good vs bad"]


def test_generation_payloads_of_version_1_still_load():
    from interp_widgets.widgets.view_data import GenerationData

    data = GenerationData.from_flat(
        tokens=["a", "b"],
        spaces_before=["", " "],
        special_mask=[False, False],
        generated_mask=[False, True],
        scores=[[1.0, np.nan]],
        step_tokens=[1],
        foil_tokens=["c"],
        foil_probs=[0.25],
        contrast="c",
    )
    payload = data.to_json()
    assert payload["version"] == 4  # 3 added chat turns (turn_ids, turn_roles); 4 word/sentence ids, source_mask
    again = GenerationData.from_json(payload)
    assert (again.foil_tokens, again.foil_probs, again.contrast) == (["c"], [0.25], "c")
    old = {
        **payload,
        "version": 1,
        "data": {k: v for k, v in payload["data"].items() if k not in ("foil_tokens", "foil_probs", "contrast")},
    }
    assert GenerationData.from_json(old).foil_tokens == []
    two = {**payload, "version": 2, "data": {k: v for k, v in payload["data"].items() if not k.startswith("turn_")}}
    assert GenerationData.from_json(two).turn_roles == [] and GenerationData.from_json(two).foil_tokens == ["c"]
    three = {
        **payload,
        "version": 3,
        "data": {k: v for k, v in payload["data"].items() if k not in ("word_ids", "sentence_ids", "source_mask")},
    }
    assert GenerationData.from_json(three).source_mask is None and GenerationData.from_json(three).turn_roles == []
