"""Steering against references written here with plain torch hooks: the CAA vector (difference of means), the
residual norm, the damage (KL), the default metric and the greedy generations; scale 0 and a zero Add are exact;
SAE feature edits by delta are bit-identical where they change nothing (decoding plus the error is not); the model
is untouched, also after an exception; bad input is refused with the fix named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.concepts import LinearProbe, NMFConcepts, SparseAutoencoder, collect_activations
from interp_widgets.interventions import (
    Ablate,
    Add,
    Clamp,
    SAEFeature,
    SteeringResult,
    SteeringVector,
    intervene,
    reference_activations,
    steer,
    steering_vector,
)
from interp_widgets.demo import corpus
from tests import tiny_models
from tests.conftest import model_fingerprint

POSITIVE = ["I love this film", "What a great day", "Such a kind person"]
NEGATIVE = ["I hate this film", "What a awful day", "Such a cruel person"]
DAMAGE_TEXTS = corpus()[:12]


@pytest.fixture(scope="module")
def llama():
    return tiny_models.llama_lm()


def _block(model, i):
    return model.model.layers[i]


def _hidden(model, tokenizer, text, block):
    """Block ``block``'s output for ``text`` by a plain forward hook."""
    seen = []
    handle = _block(model, block).register_forward_hook(
        lambda m, i, out: seen.append(out[0] if isinstance(out, tuple) else out)
    )
    try:
        with torch.no_grad():
            model(**tokenizer(text, return_tensors="pt"))
    finally:
        handle.remove()
    return seen[0][0]


def _adding(model, block, vector, start=0):
    """A plain forward hook adding ``vector`` at positions >= ``start`` of block ``block``'s output."""

    def hook(module, inputs, out):
        hidden = out[0] if isinstance(out, tuple) else out
        hidden = hidden.clone()
        hidden[:, start:] += vector
        return (hidden, *out[1:]) if isinstance(out, tuple) else hidden

    return _block(model, block).register_forward_hook(hook)


# ------------------------------------------------------------------ steering_vector


@pytest.mark.parametrize("position", ["last", "mean"])
def test_the_steering_vector_is_the_difference_of_means_of_plain_hook_activations(llama, position):
    model, tok = llama
    sv = steering_vector(model, tok, POSITIVE, NEGATIVE, "layer:1", position=position)

    def mean(texts):
        rows = [_hidden(model, tok, t, 1) for t in texts]
        return torch.stack([r[-1] if position == "last" else r.mean(0) for r in rows]).mean(0)

    expected = mean(POSITIVE) - mean(NEGATIVE)
    assert isinstance(sv, SteeringVector) and sv.layer == "layer:1" and sv.position == position
    torch.testing.assert_close(sv.vector, expected, atol=1e-5, rtol=0)  # batched vs one by one
    assert sv.n_positive == sv.n_negative == 3 and "3 positive / 3 negative" in repr(sv)


def test_a_steering_vector_is_a_direction_of_add_and_clamp(llama):
    model, tok = llama
    sv = steering_vector(model, tok, POSITIVE, NEGATIVE, "layer:0")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with intervene(model, {"layer:0": Add(sv, 0.0)}):
            same = model(input_ids=ids).logits
        handle = _adding(model, 0, 2.0 * sv.vector)
        try:
            expected = model(input_ids=ids).logits
        finally:
            handle.remove()
        with intervene(model, {"layer:0": Add(sv, 2.0)}):
            added = model(input_ids=ids).logits
        with intervene(model, {"layer:0": Clamp(sv, 1.0)}):
            model(input_ids=ids)
    assert torch.equal(plain, same)  # Add(direction, 0): bit-identical
    torch.testing.assert_close(added, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "positive, negative, match",
    [
        (["a", "b"], ["c"], "positive has 2 prompts but negative has 1; CAA pairs"),
        ([], [], "positive is empty"),
        (["a"], [""], "negative is empty or holds an empty prompt"),
        ("a", 3, "negative must be a list of prompt strings"),
    ],
)
def test_steering_vector_refuses_mismatched_or_empty_sets(llama, positive, negative, match):
    model, tok = llama
    with pytest.raises((ValueError, TypeError), match=match):
        steering_vector(model, tok, positive, negative, "layer:0")
    with pytest.raises(ValueError, match="unknown position 'first'; use one of"):
        steering_vector(model, tok, ["a"], ["b"], "layer:0", position="first")


# ------------------------------------------------------------------ steer


def _plain_norm(model, tok, block, texts, n_tokens):
    """Mean norm of block ``block``'s output over the first ``n_tokens`` tokens of ``texts`` (first token of each
    text left out), by plain hooks."""
    norms, total = [], 0
    for text in texts:
        ids = tok(text, return_tensors="pt")["input_ids"][:, : n_tokens - total]
        if ids.shape[1] < 2:
            continue
        total += ids.shape[1]
        seen = []
        handle = _block(model, block).register_forward_hook(
            lambda m, i, out: seen.append(out[0] if isinstance(out, tuple) else out)
        )
        try:
            with torch.no_grad():
                model(input_ids=ids)
        finally:
            handle.remove()
        norms.append(seen[0][0, 1:].norm(dim=-1))
        if total >= n_tokens:
            break
    return float(torch.cat(norms).mean()), total


def _plain_damage(model, tok, block, texts, n_tokens, vector):
    kl, count, total = 0.0, 0, 0
    for text in texts:
        ids = tok(text, return_tensors="pt")["input_ids"][:, : n_tokens - total]
        if ids.shape[1] < 2:
            continue
        total += ids.shape[1]
        with torch.no_grad():
            p = torch.log_softmax(model(input_ids=ids).logits, -1)
            handle = _adding(model, block, vector)
            try:
                q = torch.log_softmax(model(input_ids=ids).logits, -1)
            finally:
                handle.remove()
        kl += float((p.exp() * (p - q)).sum())
        count += ids.shape[1]
        if total >= n_tokens:
            break
    return kl / count


def _greedy(model, tok, prompt, n_new, vector=None, block=1, from_prompt_end=True):
    """Greedy decoding without a cache, the vector added by a plain hook to the generated positions (or all)."""
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    n_prompt, new = ids.shape[1], []
    for _ in range(n_new):
        handle = None if vector is None else _adding(model, block, vector, start=n_prompt if from_prompt_end else 0)
        try:
            with torch.no_grad():
                nxt = int(model(input_ids=ids).logits[0, -1].argmax())
        finally:
            if handle is not None:
                handle.remove()
        new.append(nxt)
        if nxt == tok.eos_token_id:
            break
        ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return new


@pytest.fixture(scope="module")
def steered(llama):
    model, tok = llama
    sv = steering_vector(model, tok, POSITIVE, NEGATIVE, "layer:1")
    result = steer(
        model, tok, "The film was", sv, "layer:1", scales=[0.0, 1.0, -2.0], behaviour=" the", anti_behaviour=" a",
        eval_prompts=["It was", "The day was", "She is"], max_new_tokens=5, damage_texts=DAMAGE_TEXTS,
        damage_tokens=64, progress=False,
    )  # fmt: skip
    return sv, result


def test_scales_are_in_units_of_the_mean_residual_norm_of_plain_hooks(llama, steered):
    model, tok = llama
    sv, result = steered
    norm, total = _plain_norm(model, tok, 1, DAMAGE_TEXTS, 64)
    assert total == 64
    assert result.run.unit == "residual_norm" and result.run.residual_norm == pytest.approx(norm, rel=1e-5)
    assert "mean residual norm at layer:1" in result.run.scale_meaning
    unit = sv.vector / sv.vector.norm()
    np.testing.assert_allclose(result.run.vector(1.0), (norm * unit).numpy(), rtol=1e-5, atol=1e-6)


def test_damage_is_exactly_zero_at_scale_zero_and_the_plain_hook_kl_elsewhere(llama, steered):
    model, tok = llama
    _, result = steered
    assert result.damage[0] == 0.0
    for k in (1, 2):
        vector = torch.as_tensor(result.run.vector(result.scales[k]))
        expected = _plain_damage(model, tok, 1, DAMAGE_TEXTS, 64, vector)
        assert expected > 0 and result.damage[k] == pytest.approx(expected, rel=1e-4, abs=1e-7)


def test_the_default_metric_is_the_logit_difference_on_the_eval_prompts(llama, steered):
    model, tok = llama
    _, result = steered
    good, bad = tok(" the")["input_ids"], tok(" a")["input_ids"]
    assert len(good) == len(bad) == 1  # one token each: the score is the logit difference

    def diffs(vector):
        out = []
        for prompt in ["It was", "The day was", "She is"]:
            handle = None if vector is None else _adding(model, 1, vector)
            try:
                with torch.no_grad():
                    logits = model(**tok(prompt, return_tensors="pt")).logits[0, -1]
            finally:
                if handle is not None:
                    handle.remove()
            out.append(float(logits[good[0]] - logits[bad[0]]))
        return np.array(out)

    np.testing.assert_allclose(result.metric.unsteered, diffs(None), atol=1e-4)
    for k, scale in enumerate(result.scales):
        expected = diffs(torch.as_tensor(result.run.vector(scale)))
        np.testing.assert_allclose(result.metric.values[k], expected, atol=1e-4)
        assert result.metric.mean[k] == pytest.approx(expected.mean(), abs=1e-4)
        assert result.metric.spread[k] == pytest.approx(expected.std(ddof=1), abs=1e-4)
    np.testing.assert_array_equal(result.metric.values[0], result.metric.unsteered)  # scale 0 changes nothing


def test_completions_of_several_tokens_score_their_summed_log_probabilities(llama):
    model, tok = llama
    good, bad = tok(" good")["input_ids"], tok(" bad")["input_ids"]
    assert len(good) == len(bad) == 2

    def logprob(prompt, completion):
        ids = tok(prompt, return_tensors="pt")["input_ids"]
        full = torch.cat([ids, torch.tensor([completion])], dim=1)
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=full).logits[0], -1)
        n = ids.shape[1]
        return sum(float(logp[n - 1 + j, c]) for j, c in enumerate(completion))

    result = steer(model, tok, "Hi", torch.ones(32), "layer:0", scales=[0.0], behaviour=" good", anti_behaviour=" bad",
                   eval_prompts=["It was", "The day was"], max_new_tokens=1, damage_texts=DAMAGE_TEXTS,
                   damage_tokens=16, progress=False)  # fmt: skip
    expected = [logprob(p, good) - logprob(p, bad) for p in ["It was", "The day was"]]
    np.testing.assert_allclose(result.metric.unsteered, expected, atol=1e-4)


@pytest.mark.parametrize("positions", ["generated", "all"])
def test_generations_are_the_greedy_decoding_of_plain_hooks(llama, positions):
    model, tok = llama
    direction = torch.randn(32, generator=torch.Generator().manual_seed(0))
    result = steer(model, tok, "The film was", direction, "layer:1", scales=[0.0, 3.0], positions=positions,
                   max_new_tokens=6, damage_texts=DAMAGE_TEXTS, damage_tokens=16, progress=False)  # fmt: skip
    assert result.generations.unsteered_ids == _greedy(model, tok, "The film was", 6)
    assert result.generations.steered_ids[0] == result.generations.unsteered_ids
    vector = torch.as_tensor(result.run.vector(3.0))
    expected = _greedy(model, tok, "The film was", 6, vector, from_prompt_end=positions == "generated")
    assert result.generations.steered_ids[1] == expected
    assert result.generations.steered[1] == [tok.decode([i]) for i in expected]
    if positions == "generated":  # the first new token is predicted from the unsteered prompt
        assert result.generations.steered_ids[1][0] == result.generations.unsteered_ids[0]


def test_a_metric_callable_sees_the_vector_and_gives_mean_and_spread(llama):
    model, tok = llama
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    calls = []

    def top_logit(m, t):
        calls.append(t)
        with torch.no_grad():
            return m(input_ids=ids).logits[:, -1, 11]

    direction = torch.ones(32)
    result = steer(model, tok, "Hi", direction, "layer:0", scales=[0, 2], unit="direction", metric=top_logit,
                   max_new_tokens=2, damage_texts=DAMAGE_TEXTS, damage_tokens=16, progress=False)  # fmt: skip
    assert len(calls) == 3 and calls[0] is tok and result.metric.name == "top_logit"
    with torch.no_grad():
        plain = model(input_ids=ids).logits[:, -1, 11].numpy()
        handle = _adding(model, 0, 2.0 * direction)
        try:
            pushed = model(input_ids=ids).logits[:, -1, 11].numpy()
        finally:
            handle.remove()
    np.testing.assert_array_equal(result.metric.values[0], plain)
    np.testing.assert_allclose(result.metric.values[1], pushed, atol=1e-5)
    assert result.metric.spread[1] == pytest.approx(np.std(pushed, ddof=1), abs=1e-5)
    np.testing.assert_allclose(result.run.vector(2.0), 2.0 * np.ones(32))  # unit="direction": as given


def test_concept_components_sae_features_and_probes_are_directions(llama):
    model, tok = llama
    store = collect_activations(model, tok, DAMAGE_TEXTS, layer="layer:1", progress=False)
    nmf = NMFConcepts(4, nonnegative="shift", estimator_params={"random_state": 0, "max_iter": 400}).fit(store)
    sae = SparseAutoencoder(8, k=2, max_epochs=1, progress=False).fit(store)
    options = dict(scales=[1.0], max_new_tokens=2, damage_texts=DAMAGE_TEXTS, damage_tokens=16, progress=False)
    a = steer(model, tok, "Hi", (nmf, 2), "layer:1", **options)
    np.testing.assert_array_equal(a.run.direction, nmf.components_[2].astype(np.float32))
    assert a.run.direction_label == "NMFConcepts component 2"
    b = steer(model, tok, "Hi", SAEFeature(sae, 5), "layer:1", **options)
    np.testing.assert_array_equal(b.run.direction, sae.components_[5].astype(np.float32))
    store = collect_activations(model, tok, DAMAGE_TEXTS, layer="layer:1", unit="sentence", progress=False)
    probe = LinearProbe("logistic", cv=2).fit(store, [0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1])
    c = steer(model, tok, "Hi", probe.as_concepts(), "layer:1", **options)
    np.testing.assert_allclose(c.run.direction, probe.direction_[0], rtol=1e-6)
    assert c.run.direction_label == "DirectionConcepts direction"
    with pytest.raises(ValueError, match="was made at layer:1 but you steer at layer:0; steer at layer:1"):
        steer(model, tok, "Hi", (nmf, 0), "layer:0", **options)
    with pytest.raises(ValueError, match=r"component 4 does not exist: NMFConcepts has 4 components \(0..3\)"):
        steer(model, tok, "Hi", (nmf, 4), "layer:1", **options)
    with pytest.raises(ValueError, match="has 4 components; pass \\(concepts, index\\)"):
        steer(model, tok, "Hi", nmf, "layer:1", **options)


def test_the_result_saves_loads_and_tabulates(tmp_path, steered):
    _, result = steered
    again = SteeringResult.load(result.save(tmp_path / "steer.safetensors"))
    assert again.generations == result.generations and again.run.residual_norm == result.run.residual_norm
    np.testing.assert_array_equal(again.metric.values, result.metric.values)
    frame = result.to_dataframe()
    assert frame["scale"].tolist() == [0.0, 1.0, -2.0] and frame["changed_tokens"][0] == 0
    assert frame["damage"][0] == 0.0


# ------------------------------------------------------------------ bad input and the untouched model


def test_bad_input_is_refused_with_the_fix(llama):
    model, tok = llama
    options = dict(max_new_tokens=2, damage_texts=DAMAGE_TEXTS, damage_tokens=16, progress=False)
    with pytest.raises(ValueError, match="scales is empty; pass at least one scale"):
        steer(model, tok, "Hi", torch.ones(32), "layer:0", scales=[], **options)
    with pytest.raises(ValueError, match="the direction has width 16 but layer:0 has width 32; pass a direction of"):
        steer(model, tok, "Hi", torch.ones(16), "layer:0", scales=[1], **options)
    sv = steering_vector(model, tok, ["a"], ["b"], "layer:0")
    with pytest.raises(ValueError, match="steering vector was made at layer:0 but you steer at layer:1"):
        steer(model, tok, "Hi", sv, "layer:1", scales=[1], **options)
    with pytest.raises(ValueError, match="needs behaviour=, anti_behaviour= and eval_prompts= together"):
        steer(model, tok, "Hi", sv, "layer:0", scales=[1], behaviour=" good", **options)
    with pytest.raises(ValueError, match="behaviour must be one completion string for every eval prompt"):
        steer(model, tok, "Hi", sv, "layer:0", scales=[1], behaviour=[" a"], anti_behaviour=" b",
              eval_prompts=["x", "y"], **options)  # fmt: skip
    with pytest.raises(ValueError, match="unknown positions 'prompt'; use one of"):
        steer(model, tok, "Hi", sv, "layer:0", scales=[1], positions="prompt", **options)
    with pytest.raises(ValueError, match="damage_texts hold only .* tokens but damage_tokens=100000"):
        steer(model, tok, "Hi", sv, "layer:0", scales=[1], **{**options, "damage_tokens": 100000})
    with pytest.raises(ValueError, match="direction must be finite and non-zero"):
        steer(model, tok, "Hi", torch.zeros(32), "layer:0", scales=[1], **options)
    with pytest.raises(TypeError, match="damage_texts must be a list of strings"):
        steer(model, tok, "Hi", sv, "layer:0", scales=[1], **{**options, "damage_texts": "one text"})
    masked, masked_tok = tiny_models.bert_masked_lm()
    with pytest.raises(ValueError, match="this model is a masked-lm; pass a causal language model"):
        steer(masked, masked_tok, "Hi", torch.ones(32), "layer:0", scales=[1], **options)


def test_texts_longer_than_the_context_keep_their_first_tokens(llama):
    model, tok = llama
    long_text = " ".join(DAMAGE_TEXTS)  # more than the tiny model's 128 positions
    assert len(tok(long_text)["input_ids"]) > 128
    result = steer(model, tok, "Hi", torch.ones(32), "layer:0", scales=[0.0, 1.0], max_new_tokens=1,
                   damage_texts=[long_text, long_text], damage_tokens=200, progress=False)  # fmt: skip
    assert result.damage[0] == 0.0 and result.damage[1] > 0


def test_the_model_is_untouched_after_steering_and_after_an_exception(llama):
    model, tok = llama
    before = model_fingerprint(model, tok)
    model.train()
    steer(model, tok, "Hi", torch.ones(32), "layer:0", scales=[1.0], max_new_tokens=2, damage_texts=DAMAGE_TEXTS,
          damage_tokens=16, progress=False)  # fmt: skip
    assert model.training
    model.eval()

    def broken(m, t):
        raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError, match="metric failed"):
        steer(model, tok, "Hi", torch.ones(32), "layer:0", scales=[1.0], metric=broken, max_new_tokens=2,
              damage_texts=DAMAGE_TEXTS, damage_tokens=16, progress=False)  # fmt: skip
    assert model_fingerprint(model, tok) == before and not model.training


# ------------------------------------------------------------------ SAE feature edits by delta


@pytest.fixture(scope="module")
def sae_setup(llama):
    model, tok = llama
    rows = reference_activations(model, tok, DAMAGE_TEXTS, "layer:0").numpy()
    sae = SparseAutoencoder(16, k=3, max_epochs=2, progress=False).fit(rows)
    ids = tok("The film was good and the day was kind", return_tensors="pt")["input_ids"]
    return model, sae, ids


def _acts(model, ids):
    seen = []
    handle = _block(model, 0).register_forward_hook(
        lambda m, i, out: seen.append(out[0] if isinstance(out, tuple) else out)
    )
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits
    finally:
        handle.remove()
    return seen[0], logits


def test_setting_a_feature_to_its_own_value_is_bit_identical(sae_setup):
    model, sae, ids = sae_setup
    x, plain = _acts(model, ids)
    n = x.shape[1]
    feature = SAEFeature(sae, 0)
    for p in range(n):
        own = float(feature.value(x[:, [p]]).item())  # the value on the same (1, 1, width) slice the edit sees
        with torch.no_grad(), intervene(model, {"layer:0": Clamp(feature, own)}, positions=[p]):
            edited = model(input_ids=ids).logits
        assert torch.equal(edited, plain), p


def test_ablating_a_feature_that_is_zero_is_bit_identical_and_a_nonzero_one_is_not(sae_setup):
    model, sae, ids = sae_setup
    x, plain = _acts(model, ids)
    codes = sae.encode_torch(x[0])
    zero = [(i, p) for i in range(16) for p in range(x.shape[1]) if codes[p, i] == 0]
    active = [(i, p) for i in range(16) for p in range(x.shape[1]) if codes[p, i] > 0]
    assert zero and active
    for i, p in zero[:10]:
        with torch.no_grad(), intervene(model, {"layer:0": Ablate(SAEFeature(sae, i))}, positions=[p]):
            assert torch.equal(model(input_ids=ids).logits, plain), (i, p)
    i, p = active[0]
    with torch.no_grad(), intervene(model, {"layer:0": Ablate(SAEFeature(sae, i))}, positions=[p]):
        assert not torch.equal(model(input_ids=ids).logits, plain)


def test_the_edit_is_the_delta_along_the_decoder_row(sae_setup):
    model, sae, ids = sae_setup
    x, _ = _acts(model, ids)
    feature = SAEFeature(sae, 3)
    f = feature.value(x)
    edited = Clamp(feature, 2.5).edit("layer:0")(x)
    row = torch.as_tensor(sae.components_[3])
    torch.testing.assert_close(edited, x + (2.5 - f)[..., None] * row, atol=0, rtol=0)
    torch.testing.assert_close(Add(feature, 0.0).edit("layer:0")(x), x, atol=0, rtol=0)
    added = Add(feature, 1.5).edit("layer:0")(x)
    torch.testing.assert_close(added, x + 1.5 * row, atol=0, rtol=0)


def test_decoding_the_features_and_adding_the_error_back_is_not_exact_in_float32(sae_setup):
    model, sae, ids = sae_setup
    x, _ = _acts(model, ids)
    rows = x[0]
    codes = sae.encode_torch(rows)
    # the same "edit to its own value", done by decoding and adding the reconstruction error back
    via_error = sae.decode_torch(codes) + (rows - sae.decode_torch(codes))
    via_delta = rows + SAEFeature(sae, 0).delta(rows, codes[:, 0] - codes[:, 0])
    assert torch.equal(via_delta, rows)
    assert not torch.equal(via_error, rows)  # float32 rounding: (a + (x - a)) != x
    assert float((via_error - rows).abs().max()) < 1e-5


def test_sae_feature_refusals(sae_setup):
    model, sae, ids = sae_setup
    with pytest.raises(ValueError, match=r"feature 16 does not exist: this SparseAutoencoder has 16 features"):
        SAEFeature(sae, 16)
    with pytest.raises(TypeError, match="SAEFeature needs a fitted SAE or concept model"):
        SAEFeature(object(), 0)
    with pytest.raises(TypeError, match=r"an \(SAE, index\) pair is ambiguous here; pass SAEFeature"):
        Ablate((sae, 0))
    with pytest.raises(ValueError, match="the SAE reads activations of width 32 but layer:0.head:0 has width 8"):
        with torch.no_grad(), intervene(model, {"layer:0.head:0": Clamp(SAEFeature(sae, 0), 1.0)}):
            model(input_ids=ids)
