"""Encoder–decoder models (task ``seq2seq-lm``): detection, the joined source + target axis, every method family.

Tiny random T5, BART and Marian models built from configs (``tests/tiny_models.py``) with a BPE tokenizer trained
offline. Checked against: the model's own logits from ids (the ``inputs_embeds`` path, Marian's encoder-only
``embed_scale`` included), Captum's ``IntegratedGradients`` on ``(inputs_embeds, decoder_inputs_embeds)`` through a
wrapper with one joint path, inseq 0.7 (input × gradient and integrated gradients at equal steps), the model's
``output_attentions=True`` maps, IG completeness over both sides, and the untouched-model fingerprint.

inseq multiplies the embeddings of *both* sides by the encoder's ``embed_scale``; Marian's decoder scales its
``decoder_inputs_embeds`` again, so inseq's Marian decoder sees embeddings scaled twice (``test_inseq_scales_marian
_decoder_twice`` shows it). The inseq comparison therefore runs on T5 and BART, where no side is rescaled.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.layers import resolve_layer
from interp_widgets.tasks import detect_task, prepare_inputs, task_for
from interp_widgets.tasks.seq2seq import Seq2SeqLMTask
from interp_widgets.attribution import (
    AttentionRollout,
    AttributionResult,
    GradientWeightedAttention,
    InputXGradient,
    IntegratedGradients,
    Occlusion,
    RawAttention,
    Saliency,
)
from interp_widgets.attribution.gradient import baseline_embeddings
from interp_widgets.layers import UnsupportedModelError
from tests.conftest import model_fingerprint

FAMILIES = ["t5_seq2seq", "bart_seq2seq", "marian_seq2seq"]
SOURCE, TARGET = "The room was clean.", " The room."


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _ids_logits(model, tokenizer, source, decoder_ids):
    with torch.no_grad():
        return (
            model(
                input_ids=torch.tensor([tokenizer(source)["input_ids"]]), decoder_input_ids=torch.tensor([decoder_ids])
            )
            .logits[0]
            .double()
        )


# ---------------------------------------------------------------------------------------------- detection
def test_detection_of_every_encoder_decoder_family():
    """T5, BART, mBART, Marian and M2M100 are seq2seq-lm; BART and mBART, listed in transformers' masked-LM
    mapping, are no longer taken for masked LMs."""
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        M2M100Config,
        M2M100ForConditionalGeneration,
        MarianConfig,
        MarianMTModel,
        MBartConfig,
        MBartForConditionalGeneration,
        T5Config,
        T5ForConditionalGeneration,
    )
    from transformers.models.auto import modeling_auto as auto

    masked = set(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES.values())
    assert {"BartForConditionalGeneration", "MBartForConditionalGeneration"} <= masked  # the trap being fixed
    small = dict(
        vocab_size=64,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_position_embeddings=32,
        pad_token_id=1,
        decoder_start_token_id=1,
    )
    models = [
        T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=16, num_layers=1, num_heads=2)),
        BartForConditionalGeneration(BartConfig(**small)),
        MBartForConditionalGeneration(MBartConfig(**small)),
        MarianMTModel(MarianConfig(**small)),
        M2M100ForConditionalGeneration(M2M100Config(**small)),
    ]
    assert [detect_task(m) for m in models] == [Seq2SeqLMTask.name] * 5


@pytest.mark.parametrize("family", FAMILIES)
def test_embeds_path_equals_ids_path(request, family):
    """forward_embeds from the shared embedding equals the model run on ids; Marian needs its encoder scale."""
    model, tokenizer = request.getfixturevalue(family)
    adapter = ModelAdapter(model, tokenizer)
    source = tokenizer(SOURCE)["input_ids"]
    decoder = [task_for(adapter).decoder_start_token_id] + tokenizer(text_target=TARGET)["input_ids"]
    ids = torch.tensor([source + decoder])
    reference = _ids_logits(model, tokenizer, SOURCE, decoder)
    with torch.no_grad():
        ours = adapter.forward_embeds(adapter.embed(ids), source_length=len(source))[0].double()
        picked = adapter.forward_ids(ids, source_length=len(source), positions=torch.tensor([[len(source) + 2]]))
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(picked[0, 0].double(), reference[2], rtol=1e-5, atol=1e-5)
    if family == "marian_seq2seq":  # without the encoder's scale the logits differ: the scale is needed
        scale = model.get_encoder().embed_scale
        assert scale != 1.0
        with torch.no_grad():
            unscaled = (
                model(
                    inputs_embeds=adapter.embed(ids)[:, : len(source)],
                    decoder_inputs_embeds=adapter.embed(ids)[:, len(source) :],
                )
                .logits[0]
                .double()
            )
        assert (unscaled - reference).abs().max() > 1e-2


# ---------------------------------------------------------------------------------------------- the result
def test_forced_target_on_one_axis(t5_seq2seq):
    model, tokenizer = t5_seq2seq
    r = Saliency(progress=False).attribute(model, tokenizer, SOURCE, continuation=TARGET)
    source_tokens = tokenizer.convert_ids_to_tokens(tokenizer(SOURCE)["input_ids"])
    target_ids = tokenizer(text_target=TARGET)["input_ids"]
    assert r.is_seq2seq and r.source_mask.tolist() == [True] * len(source_tokens) + [False] * (len(target_ids) + 1)
    assert r.tokens[len(source_tokens)] == "<pad>"  # the decoder's start token
    assert r.target_ids.tolist() == target_ids and r.target_ids[-1] == tokenizer.eos_token_id
    assert r.source_scores.shape == (len(target_ids), len(source_tokens))
    assert r.target_scores.shape == (len(target_ids), len(target_ids) + 1)
    # target t sees the whole source and the decoder tokens before it (start token, targets < t)
    assert not np.isnan(r.source_scores).any()
    assert np.isnan(r.target_scores).tolist() == [
        [j > t for j in range(len(target_ids) + 1)] for t in range(len(target_ids))
    ]
    # the recorded probabilities are the model's
    decoder = [0] + target_ids
    probs = torch.softmax(_ids_logits(model, tokenizer, SOURCE, decoder), -1)
    np.testing.assert_allclose(r.target_probs, [float(probs[t, i]) for t, i in enumerate(target_ids)], rtol=1e-5)
    frame = r.to_dataframe()
    assert frame.columns.tolist()[:5] == ["target", "target_prob", "position", "side", "unit"]
    assert (frame.side == "source").sum() == len(target_ids) * len(source_tokens)
    assert r.chart().mark == "bar"


def test_generated_target_is_the_greedy_output(t5_seq2seq):
    model, tokenizer = t5_seq2seq
    r = InputXGradient(progress=False).attribute(model, tokenizer, SOURCE, max_new_tokens=4)
    source = tokenizer(SOURCE, return_tensors="pt").input_ids
    with torch.no_grad():
        greedy = model.generate(source, max_new_tokens=4, do_sample=False, num_beams=1, min_new_tokens=4)
    assert r.target_ids.tolist() == greedy[0, 1:].tolist()
    assert r.generated_mask.sum() == 4


def test_word_and_sentence_units_stay_on_their_side(bart_seq2seq):
    model, tokenizer = bart_seq2seq
    r = InputXGradient(progress=False).attribute(model, tokenizer, SOURCE, continuation=" The room was tidy.")
    words = r.aggregate("word")
    assert words.tokens == ["The", "room", "was", "clean", ".", "The", "room", "was", "tidy", "."]
    assert words.source_mask.tolist() == [True] * 5 + [False] * 5
    sentences = r.aggregate("sentence")
    assert sentences.tokens == [SOURCE, "The room was tidy."] and sentences.source_mask.tolist() == [True, False]
    # a unit sums its tokens, per side
    np.testing.assert_allclose(np.nansum(sentences.scores, 1), np.nansum(np.where(r.special_mask, 0, r.scores), 1))


def test_save_load_round_trip(tmp_path, t5_seq2seq):
    model, tokenizer = t5_seq2seq
    r = RawAttention(progress=False).attribute(model, tokenizer, SOURCE, continuation=TARGET)
    again = AttributionResult.load(r.save(tmp_path / "t5.safetensors"))
    assert again.source_mask.dtype == bool and np.array_equal(again.source_mask, r.source_mask)
    np.testing.assert_array_equal(again.scores, r.scores)
    np.testing.assert_array_equal(again.cross_attentions, r.cross_attentions)
    assert again.cross_attentions.dtype == np.float16


# ---------------------------------------------------------------------------------------------- gradient methods
@pytest.mark.parametrize("family", FAMILIES)
def test_integrated_gradients_completeness_over_both_sides(request, family):
    model, tokenizer = request.getfixturevalue(family)
    before = model_fingerprint(model, tokenizer)
    r = IntegratedGradients(n_steps=64, progress=False).attribute(model, tokenizer, SOURCE, continuation=TARGET)
    totals = r.side_totals
    assert (np.abs(totals["source"]) > 1e-3).all() and (np.abs(totals["target"]) > 1e-3).any()  # both sides count
    assert (r.relative_completeness_error <= 0.01).all(), r.relative_completeness_error
    np.testing.assert_allclose(totals["source"] + totals["target"] - r.score_delta, r.completeness_error, atol=1e-5)
    assert model_fingerprint(model, tokenizer) == before


@pytest.mark.parametrize("family", FAMILIES)
def test_integrated_gradients_equals_captum_on_the_joint_path(request, family):
    """Captum's IntegratedGradients on (inputs_embeds, decoder_inputs_embeds): one path moves both sides at once."""
    from captum.attr import IntegratedGradients as CaptumIG

    model, tokenizer = request.getfixturevalue(family)
    n_steps = 16
    ours = IntegratedGradients(n_steps=n_steps, method="gausslegendre", progress=False).attribute(
        model, tokenizer, SOURCE, continuation=TARGET
    )
    adapter = ModelAdapter(model, tokenizer)
    problem = prepare_inputs(adapter, SOURCE, continuation=TARGET)[0]
    split = problem.source_length
    with torch.no_grad():
        x = adapter.embed(torch.as_tensor(problem.encoding.input_ids)[None]).detach()
        base = baseline_embeddings(adapter, problem.encoding, "pad")[None].detach()
    scale = adapter._encoder_embed_scale()  # the model's own inputs_embeds for the encoder (Marian: scaled)

    def forward(inputs_embeds, decoder_inputs_embeds, step):
        logits = model(inputs_embeds=inputs_embeds, decoder_inputs_embeds=decoder_inputs_embeds).logits
        return torch.log_softmax(logits[:, step].float(), -1)[:, int(problem.target_ids[step])]

    theirs = np.full_like(ours.scores, np.nan)
    for step in range(problem.n_targets):
        source_attr, decoder_attr = CaptumIG(forward).attribute(
            (x[:, :split] * scale, x[:, split:]),
            baselines=(base[:, :split] * scale, base[:, split:]),
            additional_forward_args=(step,),
            n_steps=n_steps,
            method="gausslegendre",
        )
        row = torch.cat([source_attr, decoder_attr], dim=1)[0].sum(-1).double().numpy()
        theirs[step, : problem.visible[step]] = row[: problem.visible[step]]
    np.testing.assert_allclose(ours.scores, theirs, rtol=1e-4, atol=1e-4 * np.nanmax(np.abs(theirs)))


def _inseq(model, tokenizer, method, **kwargs):
    import inseq

    pad = model.config.pad_token_id
    try:
        wrapped = inseq.load_model(model, method, tokenizer=tokenizer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = wrapped.attribute(SOURCE, TARGET, attribute_target=True, show_progress=False, **kwargs)
    finally:
        model.config.pad_token_id = pad
    seq = out.sequence_attributions[0]
    source = seq.source_attributions.float().sum(-1).T.double().numpy()  # (steps, source tokens)
    target = seq.target_attributions.float().sum(-1).T.double().numpy()  # (steps, decoder tokens)
    return np.concatenate([source, target], axis=1)


@pytest.mark.parametrize("family", ["t5_seq2seq", "bart_seq2seq"])
@pytest.mark.parametrize("method", ["input_x_gradient", "integrated_gradients"])
def test_agrees_with_inseq(request, family, method):
    """inseq's attributed function is the target probability: score='probability' here; IG at equal steps and
    inseq's baseline."""
    model, tokenizer = request.getfixturevalue(family)
    before = model_fingerprint(model, tokenizer)
    if method == "input_x_gradient":
        ours = InputXGradient(score="probability", progress=False)
        theirs = _inseq(model, tokenizer, method)
    else:
        # inseq's baseline: the unk token for every token but the special ones (end of sequence, decoder start)
        ours = IntegratedGradients(
            n_steps=16, method="gausslegendre", baseline="unk", score="probability", progress=False
        )
        theirs = _inseq(model, tokenizer, method, n_steps=16, internal_batch_size=64)
    r = ours.attribute(model, tokenizer, SOURCE, continuation=TARGET)
    assert r.scores.shape == theirs.shape
    np.testing.assert_array_equal(np.isnan(r.scores), np.isnan(theirs))
    scale = np.nanmax(np.abs(theirs))
    np.testing.assert_allclose(r.scores, theirs, rtol=1e-3, atol=1e-4 * scale)
    assert model_fingerprint(model, tokenizer) == before


def test_inseq_scales_marian_decoder_twice(marian_seq2seq):
    """Why Marian is left out of the inseq comparison: inseq scales the decoder's embeddings, and so does Marian."""
    import inseq

    model, tokenizer = marian_seq2seq
    pad = model.config.pad_token_id
    try:
        wrapped = inseq.load_model(model, "saliency", tokenizer=tokenizer)
    finally:
        model.config.pad_token_id = pad
    scale = model.get_decoder().embed_scale
    assert scale != 1.0 and wrapped.embed_scale == scale
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        theirs = wrapped.embed_ids(ids, as_targets=True)  # what inseq passes as decoder_inputs_embeds
        torch.testing.assert_close(theirs, model.get_input_embeddings()(ids) * scale)  # the decoder multiplies again


# ---------------------------------------------------------------------------------------------- other families
@pytest.mark.parametrize("family", FAMILIES)
def test_raw_attention_equals_output_attentions(request, family):
    model, tokenizer = request.getfixturevalue(family)
    before = model_fingerprint(model, tokenizer)
    r = RawAttention(layer=-1, progress=False).attribute(model, tokenizer, SOURCE, continuation=TARGET)
    decoder = [task_for(ModelAdapter(model, tokenizer)).decoder_start_token_id] + tokenizer(text_target=TARGET)[
        "input_ids"
    ]
    from interp_widgets.attribution.attention import eager_attention

    with eager_attention(model), torch.no_grad():
        out = model(
            input_ids=torch.tensor([tokenizer(SOURCE)["input_ids"]]),
            decoder_input_ids=torch.tensor([decoder]),
            output_attentions=True,
        )
    n = r.n_targets if hasattr(r, "n_targets") else len(r.target_ids)
    cross = out.cross_attentions[-1][0].mean(0)[:n].double().numpy()  # (targets, source)
    self_attn = out.decoder_attentions[-1][0].mean(0)[:n].double().numpy()
    np.testing.assert_allclose(r.source_scores, cross, rtol=1e-5, atol=1e-6)
    visible = ~np.isnan(r.target_scores)
    np.testing.assert_allclose(r.target_scores[visible], self_attn[visible], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(self_attn[~visible], 0, atol=1e-7)  # the causal mask: later tokens get no weight
    # every layer and head, for a head view: (layers, heads, targets, source) float16
    expected = torch.stack([c[0, :, :n] for c in out.cross_attentions]).numpy()
    assert r.cross_attentions.dtype == np.float16 and r.cross_attentions.shape == expected.shape
    np.testing.assert_allclose(r.cross_attentions.astype(np.float32), expected, atol=1e-3)
    assert model_fingerprint(model, tokenizer) == before


def test_stacked_attention_methods_are_refused(t5_seq2seq):
    model, tokenizer = t5_seq2seq
    for method in (AttentionRollout(progress=False), GradientWeightedAttention(progress=False)):
        with pytest.raises(UnsupportedModelError, match="use raw_attention"):
            method.attribute(model, tokenizer, SOURCE, continuation=TARGET)


@pytest.mark.parametrize("family", FAMILIES)
def test_occlusion_is_the_score_change(request, family):
    """Occlusion on each side equals the score drop of the model run on ids with that token replaced by pad."""
    model, tokenizer = request.getfixturevalue(family)
    r = Occlusion(progress=False).attribute(model, tokenizer, SOURCE, continuation=TARGET)
    source = tokenizer(SOURCE)["input_ids"]
    target = tokenizer(text_target=TARGET)["input_ids"]
    start = task_for(ModelAdapter(model, tokenizer)).decoder_start_token_id
    pad = tokenizer.pad_token_id

    def logp(src, dec):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([dec])).logits[0]
        return torch.log_softmax(logits.double(), -1)[torch.arange(len(target)), torch.tensor(target)].numpy()

    full = logp(source, [start] + target)
    src_masked = list(source)
    src_masked[1] = pad
    np.testing.assert_allclose(r.scores[:, 1], full - logp(src_masked, [start] + target), rtol=1e-4, atol=1e-5)
    dec = [start] + target
    dec[1] = pad  # the first target token as the decoder's input
    column = int(r.source_mask.sum())  # special tokens are not units: the first target token follows the source
    assert r.tokens[column] == tokenizer.decode(target[:1])
    expected = full - logp(source, dec)
    np.testing.assert_allclose(r.scores[1:, column], expected[1:], rtol=1e-4, atol=1e-5)
    assert np.isnan(r.scores[0, column])


def test_contrastive_target(t5_seq2seq):
    model, tokenizer = t5_seq2seq
    r = InputXGradient(progress=False).attribute(model, tokenizer, SOURCE, continuation=TARGET, contrast=" The staff.")
    foil = tokenizer(text_target=" The staff.")["input_ids"]
    assert r.foil_ids.tolist() == foil  # same length: aligned step by step
    decoder = [0] + tokenizer(text_target=TARGET)["input_ids"]
    logp = torch.log_softmax(_ids_logits(model, tokenizer, SOURCE, decoder), -1)
    direct = [float(logp[t, i] - logp[t, f]) for t, (i, f) in enumerate(zip(r.target_ids, foil))]
    np.testing.assert_allclose(np.log(r.target_probs) - np.log(r.foil_probs), direct, rtol=1e-4, atol=1e-6)
    same = r.target_ids == r.foil_ids  # ' ', 'The', '.', '</s>': a zero score explained by zero attributions
    assert same.tolist() == [True, True, False, True, True] and not np.nan_to_num(r.scores[same]).any()
    ig = IntegratedGradients(n_steps=64, progress=False).attribute(
        model, tokenizer, SOURCE, continuation=TARGET, contrast=" The staff."
    )
    assert (ig.score_delta[~same] != 0).all() and (ig.relative_completeness_error[~same] <= 0.01).all()


# ---------------------------------------------------------------------------------------------- bad input
def test_targets_the_tokenizer_cannot_build(t5_seq2seq):
    model, tokenizer = t5_seq2seq
    method = Saliency(progress=False)
    for continuation, error, message in [
        ("", ValueError, "continuation is empty"),
        ("</s>", ValueError, "special tokens only"),
        ([3, 10**6], ValueError, "outside the vocabulary"),
        ([[5, 6], [7]], ValueError, "nested"),
        (["a", "b"], TypeError, "not a token id"),
        (3.5, TypeError, "target text or a sequence of token ids"),
    ]:
        with pytest.raises(error, match=message):
            method.attribute(model, tokenizer, SOURCE, continuation=continuation)


def test_options_of_the_other_architecture(t5_seq2seq, gpt2_lm):
    model, tokenizer = t5_seq2seq
    with pytest.raises(ValueError, match="encoder–decoder.*continuation="):
        Saliency(progress=False).attribute(model, tokenizer, SOURCE, target="room")
    with pytest.raises(ValueError, match="mask_position= applies to classifiers and masked LMs"):
        Saliency(progress=False).attribute(model, tokenizer, SOURCE, mask_position=2)
    adapter = ModelAdapter(model, tokenizer)
    with pytest.raises(ValueError, match="name the stack"):
        resolve_layer(model, "layer:0")
    with pytest.raises(ValueError, match="needs source_length"):
        adapter.forward_embeds(adapter.embed(torch.tensor([[5, 6, 1, 0, 7]])))
    lm, lm_tokenizer = gpt2_lm
    lm_adapter = ModelAdapter(lm, lm_tokenizer)
    with pytest.raises(ValueError, match="source_length applies to encoder–decoder models"):
        lm_adapter.forward_embeds(lm_adapter.embed(torch.tensor([[5, 6, 7]])), source_length=2)
    with pytest.raises(ValueError):
        resolve_layer(lm, "encoder.layer:0")


# ---------------------------------------------------------------------------------------------- layers
@pytest.mark.parametrize("family", ["t5_seq2seq", "bart_seq2seq"])
def test_activations_of_encoder_and_decoder_layers(request, family):
    from interp_widgets.concepts import collect_activations

    model, tokenizer = request.getfixturevalue(family)
    texts = [SOURCE, "Slow service and a cold room."]
    start = task_for(ModelAdapter(model, tokenizer)).decoder_start_token_id
    expected = []
    for text in texts:  # output_hidden_states: the blocks' outputs (the last one is after the final norm)
        ids = tokenizer(text)["input_ids"]
        with torch.no_grad():
            out = model(
                input_ids=torch.tensor([ids]),
                decoder_input_ids=torch.tensor([[start] + ids]),
                output_hidden_states=True,
            )
        expected.append((out.encoder_hidden_states[1][0].numpy(), out.decoder_hidden_states[1][0, 1:].numpy()))
    before = model_fingerprint(model, tokenizer)  # after the reference call (transformers adds capture hooks once)
    encoder = collect_activations(
        model, tokenizer, texts, layer="encoder.layer:0", include_special=True, progress=False
    )
    decoder = collect_activations(
        model, tokenizer, texts, layer="decoder.layer:0", include_special=True, progress=False
    )
    assert model_fingerprint(model, tokenizer) == before
    assert encoder.layer == "encoder.layer:0" and decoder.layer == "decoder.layer:0"
    for t, (enc_rows, dec_rows) in enumerate(expected):
        np.testing.assert_allclose(encoder[encoder.text_rows(t)], enc_rows, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(decoder[decoder.text_rows(t)], dec_rows, rtol=1e-5, atol=1e-5)


def test_monitor_watches_encoder_and_decoder_layers(t5_seq2seq):
    import copy

    from interp_widgets.geometry import AnisotropyMonitor

    model, tokenizer = t5_seq2seq
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    enc = tokenizer([SOURCE, "Slow service and a cold room."], return_tensors="pt", padding=True)
    labels = tokenizer(text_target=[TARGET, " The staff."], return_tensors="pt", padding=True).input_ids
    basis = torch.linalg.qr(torch.randn(32, 4, generator=torch.Generator().manual_seed(0)))[0]
    layers = ["encoder.layer:1", "decoder.layer:0"]
    hooks = lambda: sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())  # noqa: E731
    before = hooks()  # transformers' own output-capturing hooks, if an earlier call asked for hidden states
    monitor = AnisotropyMonitor(
        model,
        layers,
        rank=4,
        n_controls=5,
        fit="fixed",
        basis=basis,
        max_tokens=64,
        optimizer=optimizer,
        special_token_ids=tokenizer.all_special_ids,
    )
    with monitor:
        monitor.track(0)
        model(**enc, labels=labels).loss.backward()
        optimizer.step()
    for name in layers:
        steps, ratio = monitor.series(f"energy_ratio|{name}")
        assert steps.tolist() == [0] and np.isfinite(ratio).all() and ratio[0] > 0
    assert hooks() == before
