"""Perturbation methods checked against definitions computed here from the model on hand-built masked inputs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import KernelShap, Lime, Occlusion, Saliency, Sobol, attribute
from tests.conftest import model_fingerprint, record_perturbed_rows

TEXT = "An unbelievably dull film, honestly."


@pytest.fixture(scope="module")
def bert(wordpiece_tokenizer):
    """A tiny BERT classifier with a wide initialisation, so that every word moves the logits visibly."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=wordpiece_tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=3,
        initializer_range=0.2,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    torch.manual_seed(0)
    return BertForSequenceClassification(config).eval(), wordpiece_tokenizer


@pytest.fixture(scope="module")
def gpt2(bpe_tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(bpe_tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=128,
        initializer_range=0.2,
        bos_token_id=bpe_tokenizer.bos_token_id,
        eos_token_id=bpe_tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval(), bpe_tokenizer


def masked_logits(model, tokenizer, text, keep_units, units, baseline_id):
    """Logits of ``text`` with the tokens of every unit not in ``keep_units`` replaced by ``baseline_id``'s
    embedding, for each kept set; built directly from the embedding table."""
    ids = torch.as_tensor(tokenizer(text)["input_ids"])
    table = model.get_input_embeddings().weight.detach()
    rows = []
    for kept in keep_units:
        embeds = table[ids].clone()
        for unit, tokens in enumerate(units):
            if unit not in kept:
                embeds[tokens] = table[baseline_id]
        rows.append(embeds)
    with torch.no_grad():
        return model(inputs_embeds=torch.stack(rows)).logits.double().numpy()


def word_units(tokenizer, text):
    """Token indices of each word, from the tokenizer's own offsets (independent of the adapter's unit logic)."""
    enc = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    spans = [(m.start(), m.end()) for m in __import__("re").finditer(r"\w+|[^\w\s]", text)]
    units = []
    for start, end in spans:
        units.append(
            [
                i
                for i, (a, b) in enumerate(enc["offset_mapping"])
                if not enc["special_tokens_mask"][i] and start <= a < end
            ]
        )
    return units


def shapley_by_definition(value, n):
    """φ_i = Σ_S |S|! (n − |S| − 1)! / n! · (v(S ∪ {i}) − v(S)) over every S ⊆ N \\ {i}."""
    phi = np.zeros(n)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for subset in itertools.combinations(others, size):
                phi[i] += weight * (value[frozenset(subset) | {i}] - value[frozenset(subset)])
    return phi


@pytest.fixture(scope="module")
def exact_shapley(bert):
    model, tokenizer = bert
    units = word_units(tokenizer, TEXT)
    subsets = [frozenset(s) for size in range(len(units) + 1) for s in itertools.combinations(range(len(units)), size)]
    logits = masked_logits(model, tokenizer, TEXT, subsets, units, tokenizer.pad_token_id)
    values = [{s: logits[k, target] for k, s in enumerate(subsets)} for target in (0, 2)]
    return np.stack([shapley_by_definition(v, len(units)) for v in values]), values


def test_exact_kernel_shap_equals_brute_force_shapley_values(bert, exact_shapley):
    model, tokenizer = bert
    expected, values = exact_shapley
    result = KernelShap(progress=False).attribute(model, tokenizer, TEXT, target=[0, 2], granularity="word")
    assert result.tokens == ["An", "unbelievably", "dull", "film", ",", "honestly", "."]
    np.testing.assert_allclose(result.scores, expected, atol=1e-5)
    n = len(result.tokens)
    full, empty = frozenset(range(n)), frozenset()
    np.testing.assert_allclose(result.score_delta, [v[full] - v[empty] for v in values], atol=1e-5)
    assert np.abs(result.completeness_error).max() < 1e-9
    np.testing.assert_allclose(result.scores.sum(1), result.score_delta, atol=1e-9)
    assert result.params["exact"] is True


def test_sampled_kernel_shap_converges_and_keeps_efficiency(bert, exact_shapley):
    model, tokenizer = bert
    expected = exact_shapley[0]
    errors = []
    for n_samples in (8, 32, 120):
        result = KernelShap(n_samples=n_samples, exact_max_units=0, progress=False).attribute(
            model, tokenizer, TEXT, target=[0, 2], granularity="word"
        )
        assert np.abs(result.completeness_error).max() < 1e-9 and result.params["exact"] is False
        errors.append(np.abs(result.scores - expected).mean())
    assert errors[2] < errors[1] < errors[0]
    assert errors[2] < 0.1 * np.abs(expected).mean()


def test_occlusion_equals_manual_masking(bert):
    model, tokenizer = bert
    result = Occlusion(window=2, baseline="mask", progress=False).attribute(model, tokenizer, TEXT, target="positive")
    enc = tokenizer(TEXT, return_special_tokens_mask=True)
    tokens = [[i] for i, special in enumerate(enc["special_tokens_mask"]) if not special]
    n = len(tokens)
    windows = [set(range(s, s + 2)) for s in range(n - 1)]
    keeps = [set(range(n))] + [set(range(n)) - w for w in windows]
    logits = masked_logits(model, tokenizer, TEXT, keeps, tokens, tokenizer.mask_token_id)[:, 2]
    expected = np.array(
        [np.mean([logits[0] - logits[1 + k] for k, w in enumerate(windows) if u in w]) for u in range(n)]
    )
    assert len(result.tokens) == n
    np.testing.assert_allclose(result.scores[0], expected, atol=1e-5)


def test_lime_equals_a_direct_weighted_sklearn_fit(bert):
    from sklearn.linear_model import Lasso

    model, tokenizer = bert
    units = word_units(tokenizer, TEXT)
    lime = Lime(n_samples=64, kernel_width=0.5, model=Lasso(alpha=1e-3), seed=3, progress=False)
    result = lime.attribute(model, tokenizer, TEXT, target=0, granularity="word")
    masks = lime.masks(len(units))
    assert masks[0].all() and (~masks[1:]).any(axis=1).all()
    f = masked_logits(model, tokenizer, TEXT, [set(np.flatnonzero(m)) for m in masks], units, tokenizer.pad_token_id)[
        :, 0
    ]
    kept = masks.sum(1)
    cosine = np.where(kept > 0, kept / (np.sqrt(np.maximum(kept, 1)) * np.sqrt(len(units))), 0.0)
    weights = np.sqrt(np.exp(-((1 - cosine) ** 2) / 0.5**2))
    expected = Lasso(alpha=1e-3).fit(masks.astype(float), f, sample_weight=weights).coef_
    np.testing.assert_allclose(result.scores[0], expected, atol=1e-5)
    assert np.abs(expected).max() > 1e-2
    again = lime.attribute(model, tokenizer, TEXT, target=0, granularity="word")
    np.testing.assert_array_equal(again.scores, result.scores)
    other = Lime(n_samples=64, kernel_width=0.5, model=Lasso(alpha=1e-3), seed=4, progress=False)
    assert not np.allclose(other.attribute(model, tokenizer, TEXT, target=0, granularity="word").scores, result.scores)


def test_sobol_total_indices_match_brute_force_variance(bert):
    model, tokenizer = bert
    text = "Dull film, honestly."
    units = word_units(tokenizer, text)
    n = len(units)
    masks = np.array(list(itertools.product([False, True], repeat=n)))
    f = masked_logits(model, tokenizer, text, [set(np.flatnonzero(m)) for m in masks], units, tokenizer.pad_token_id)[
        :, 1
    ]
    value = {tuple(m): v for m, v in zip(masks, f)}
    expected = []
    for i in range(n):  # E[Var(f | x_~i)] / Var(f) with independent fair coins: mean of (f(x_i=1) − f(x_i=0))² / 4
        diffs = [value[m[:i] + (True,) + m[i + 1 :]] - value[m[:i] + (False,) + m[i + 1 :]] for m in value if not m[i]]
        expected.append(np.mean(np.square(diffs)) / 4 / np.var(f))
    result = Sobol(n_samples=2048, progress=False).attribute(model, tokenizer, text, target=1, granularity="word")
    assert (result.scores >= 0).all()
    np.testing.assert_allclose(result.scores[0], expected, atol=0.03)
    again = Sobol(n_samples=2048, progress=False).attribute(model, tokenizer, text, target=1, granularity="word")
    np.testing.assert_array_equal(again.scores, result.scores)


def test_sobol_gives_zero_to_a_unit_equal_to_its_baseline(bert):
    model, tokenizer = bert
    result = Sobol(n_samples=32, baseline="mask", progress=False).attribute(
        model, tokenizer, "Great [MASK] here, slow service.", target=0
    )
    assert result.tokens[1] == "[MASK]"
    assert abs(result.scores[0, 1]) < 1e-6
    assert result.scores[0].max() > 0.01


def test_word_level_perturbation_masks_whole_words(bert, monkeypatch):
    model, tokenizer = bert
    captured = record_perturbed_rows(monkeypatch)
    adapter = ModelAdapter(model, tokenizer)
    enc = adapter.encode(TEXT)
    KernelShap(n_samples=40, exact_max_units=0, baseline="zero", progress=False).attribute(
        adapter, inputs=TEXT, granularity="word"
    )
    rows = torch.cat(captured)
    x = adapter.embed(torch.as_tensor(enc.input_ids)[None])[0].detach()
    replaced = (rows == 0).all(-1)
    assert torch.equal((rows == x).all(-1) | replaced, torch.ones_like(replaced))
    assert not replaced[:, torch.as_tensor(enc.special_mask)].any()
    multi_token_word = np.flatnonzero(enc.word_ids == 1)
    assert len(multi_token_word) > 2
    for word in set(enc.word_ids[enc.word_ids >= 0].tolist()):
        members = replaced[:, torch.as_tensor(np.flatnonzero(enc.word_ids == word))]
        assert torch.equal(members.all(1), members.any(1))
    assert replaced.any() and (~replaced[:, 1:-1]).any()


@pytest.mark.parametrize(
    "method",
    [
        Occlusion(window=2, progress=False),
        Lime(n_samples=40, progress=False),
        KernelShap(n_samples=40, progress=False),
        Sobol(n_samples=8, progress=False),
    ],
)
def test_generation_target_never_depends_on_later_sources(gpt2, method):
    model, tokenizer = gpt2
    prompt = "The room was"
    first, second = [
        tokenizer(" quiet and warm", add_special_tokens=False)["input_ids"],
        tokenizer(" quiet and cold", add_special_tokens=False)["input_ids"],
    ]
    same = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    results = [method.attribute(model, tokenizer, prompt, continuation=ids) for ids in (first, second)]
    n_prompt = len(tokenizer(prompt)["input_ids"])
    for result in results:
        for t in range(len(result.target_labels)):
            visible = n_prompt + t
            assert np.isnan(result.scores[t, visible:]).all()
            assert np.isfinite(result.scores[t, :visible]).all()
    assert same >= 2
    shared = (slice(0, same), slice(0, n_prompt + same))  # same targets, same visible sources, different later ones
    np.testing.assert_allclose(results[0].scores[shared], results[1].scores[shared], atol=1e-5)
    assert np.nanmax(np.abs(results[0].scores)) > 1e-3


def test_generation_kernel_shap_is_exact_per_target(gpt2):
    model, tokenizer = gpt2
    result = KernelShap(progress=False).attribute(
        model, tokenizer, "The room was", continuation=" quiet and warm", granularity="word"
    )
    assert np.abs(result.completeness_error).max() < 1e-9
    np.testing.assert_allclose(np.nansum(result.scores, axis=1), result.score_delta, atol=1e-9)
    assert np.isnan(result.scores[0, -3:]).all()
    assert np.isfinite(result.scores[-1, :-1]).all() and np.isnan(result.scores[-1, -1])


def test_results_have_the_structure_of_aggregated_results(bert):
    model, tokenizer = bert
    for granularity in ("token", "word", "sentence"):
        ours = Occlusion(progress=False).attribute(model, tokenizer, "Good. Not bad at all!", granularity=granularity)
        reference = Saliency().attribute(model, tokenizer, "Good. Not bad at all!").aggregate(granularity)
        assert ours.tokens == reference.tokens and ours.granularity == granularity
        np.testing.assert_array_equal(ours.offsets, reference.offsets)
        assert ours.params["baseline"] == "pad" and "aggregation" not in ours.params


def test_results_do_not_depend_on_batching_or_companions(bert):
    model, tokenizer = bert
    texts = ["Good.", TEXT, "Not bad at all. Really!"]
    method = Lime(n_samples=50, progress=False)
    together = method.attribute(model, tokenizer, texts, target=[0, 2], max_batch_tokens=64)
    alone = method.attribute(model, tokenizer, TEXT, target=2, max_batch_tokens=100_000)
    np.testing.assert_allclose(together[1].scores[1], alone.scores[0], atol=1e-5)


def test_other_tasks_and_the_functional_entry_point(llama_lm, bert_masked_lm, gpt2_classifier):
    result = attribute(*llama_lm, "The room was", method="occlusion", continuation=" warm")
    assert result.scores.shape[0] == len(result.target_labels) and np.isnan(result.scores[0, -1])
    masked = attribute(
        *bert_masked_lm,
        "The room was [MASK].",
        method="kernel_shap",
        granularity="word",
        method_params={"progress": False},
    )
    assert np.abs(masked.completeness_error).max() < 1e-9
    decoder = attribute(
        *gpt2_classifier, ["Good film.", "Bad."], method="sobol", target=[0, 1], method_params={"n_samples": 8}
    )
    assert all(r.scores.shape[0] == 2 and (r.scores >= 0).all() for r in decoder)


def test_models_are_left_untouched(bert, gpt2):
    for (model, tokenizer), kwargs in ((bert, {"target": [0, 1]}), (gpt2, {"max_new_tokens": 3})):
        model.train()
        before = model_fingerprint(model, tokenizer)
        for method in (Occlusion(), Lime(n_samples=16), KernelShap(n_samples=16), Sobol(n_samples=4)):
            method.progress = False
            method.attribute(model, tokenizer, "Not bad.", **kwargs)
        assert model_fingerprint(model, tokenizer) == before
        model.eval()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Occlusion(window=0), "window must be an integer >= 1"),
        (lambda: Occlusion(window=1.5), "window must be an integer >= 1"),
        (lambda: KernelShap(n_samples=0), "n_samples must be an integer >= 1"),
        (lambda: KernelShap(exact_max_units=30), "exact_max_units"),
        (lambda: Lime(n_samples=-3), "n_samples must be an integer >= 1"),
        (lambda: Lime(kernel_width=0), "kernel_width must be a number > 0"),
        (lambda: Sobol(n_samples=0), "n_samples must be an integer >= 1"),
        (lambda: Sobol(seed=-1), "seed must be an integer >= 0"),
        (lambda: Occlusion(baseline="blank"), "unknown baseline 'blank'"),
    ],
)
def test_bad_parameters_raise_clear_value_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_lime_rejects_models_that_cannot_be_weighted():
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsRegressor

    with pytest.raises(TypeError, match="linear regressor"):
        Lime(model=LogisticRegression())
    with pytest.raises(TypeError, match="sample_weight"):
        Lime(model=KNeighborsRegressor())
