"""The model adapter: task detection, tokenization units, batching, targets, layers, hooks, and no mutation."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.adapter import ModelAdapter, UnsupportedModelError
from interp_widgets.layers import capture, evaluation, resolve_layer
from interp_widgets.tasks import task_for
from tests.conftest import model_fingerprint


def test_detects_each_supported_task(bert_classifier, gpt2_lm, llama_lm, bert_masked_lm):
    tasks = [task_for(ModelAdapter(*pair)).name for pair in (bert_classifier, gpt2_lm, llama_lm, bert_masked_lm)]
    assert tasks == ["sequence-classification", "causal-lm", "causal-lm", "masked-lm"]


def test_unsupported_model_names_class_and_alternatives(wordpiece_tokenizer):
    from transformers import BertConfig, BertModel

    model = BertModel(
        BertConfig(vocab_size=100, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8)
    )
    with pytest.raises(UnsupportedModelError, match="unsupported model class BertModel; supported: sequence"):
        task_for(ModelAdapter(model, wordpiece_tokenizer))


def test_encode_offsets_words_and_sentences(bert_classifier):
    adapter = ModelAdapter(*bert_classifier)
    text = "It isn't bad.  Really good!\nWow"
    enc = adapter.encode(text)
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"
    assert enc.special_mask.tolist() == [True] + [False] * (len(enc) - 2) + [True]
    for tok, (a, b), special in zip(enc.tokens, enc.offsets, enc.special_mask):
        if not special:
            assert text[a:b] == tok
    assert enc.words == ["It", "isn't", "bad", ".", "Really", "good", "!", "Wow"]
    # every piece of "isn't" maps to the same word
    isnt = [w for t, w in zip(enc.tokens, enc.word_ids) if t in ("isn", "'", "t")]
    assert len(set(isnt)) == 1 and len(isnt) == 3
    assert enc.sentences == ["It isn't bad.", "Really good!", "Wow"]
    assert sorted(set(enc.sentence_ids.tolist())) == [-1, 0, 1, 2]


def test_bpe_offsets_and_words(gpt2_lm):
    adapter = ModelAdapter(*gpt2_lm)
    text = "The staff were lovely, honestly."
    enc = adapter.encode(text)
    words = {}
    for tok, w in zip(enc.tokens, enc.word_ids):
        words.setdefault(int(w), "")
        words[int(w)] += tok
    assert [s.strip() for s in words.values()] == ["The", "staff", "were", "lovely", ",", "honestly", "."]


@pytest.mark.parametrize("bad", ["", "   \n "])
def test_empty_text_is_a_clear_error(bert_classifier, bad):
    with pytest.raises(ValueError, match="empty or only whitespace"):
        ModelAdapter(*bert_classifier).encode(bad)


def test_too_long_text_is_a_clear_error(bert_classifier):
    with pytest.raises(
        ValueError,
        match=r"the text is 302 tokens, longer than the model's context of 128 tokens "
        r"\(config.max_position_embeddings = 128\)\. Shorten it or split it",
    ):
        ModelAdapter(*bert_classifier).encode("word " * 300)


def test_encode_many_names_the_bad_index(bert_classifier):
    with pytest.raises(ValueError, match="text 1: text is empty"):
        ModelAdapter(*bert_classifier).encode_many(["fine", " "])


def test_resolve_targets(bert_classifier):
    adapter = task_for(ModelAdapter(*bert_classifier))
    logits = torch.tensor([[0.1, 2.0, -1.0]])
    assert adapter.resolve_targets(None, logits) == [1]
    assert adapter.resolve_targets("positive") == [2]
    assert adapter.resolve_targets("POSITIVE") == [2]
    assert adapter.resolve_targets([0, "neutral"]) == [0, 1]
    with pytest.raises(
        ValueError, match=r"unknown label 'great'; valid labels are \['negative', 'neutral', 'positive'\]"
    ):
        adapter.resolve_targets("great")
    with pytest.raises(ValueError, match="class index 3 is out of range; valid indices are 0..2"):
        adapter.resolve_targets(3)


def test_layer_lookup_by_index_shortcut_and_path(bert_classifier, gpt2_lm, llama_lm):
    model = bert_classifier[0]
    assert resolve_layer(model, "layer:1").path == "bert.encoder.layer.1"
    assert resolve_layer(model, -1).path == "bert.encoder.layer.1"
    assert resolve_layer(model, "bert.encoder.layer.0.attention").path == "bert.encoder.layer.0.attention"
    with pytest.raises(ValueError, match=r"unknown layer 'bert.encoder.layr.0'; use one of \['layer:0', 'layer:1'\]"):
        resolve_layer(model, "bert.encoder.layr.0")
    with pytest.raises(ValueError, match="out of range; this model has 2 blocks"):
        resolve_layer(model, "layer:5")
    assert resolve_layer(gpt2_lm[0], "layer:0").path == "transformer.h.0"
    assert resolve_layer(llama_lm[0], "layer:1").path == "model.layers.1"


def test_hooks_removed_on_exception_and_keyboard_interrupt(bert_classifier):
    model, tokenizer = bert_classifier
    adapter = ModelAdapter(model, tokenizer)
    before = model_fingerprint(model, tokenizer)
    for error in (RuntimeError, KeyboardInterrupt):
        with pytest.raises(error):
            with capture(model, ["layer:0", "layer:1"]):
                raise error()
    assert model_fingerprint(model, tokenizer) == before


def test_capture_records_hidden_states(bert_classifier):
    adapter = ModelAdapter(*bert_classifier)
    ids = torch.as_tensor(adapter.encode("good film").input_ids)[None]
    with capture(adapter.model, ["layer:1"]) as acts, torch.no_grad():
        logits = adapter.forward_embeds(adapter.embed(ids))
    # a private copy: transformers 5 installs permanent output-capturing hooks on first output_hidden_states=True
    direct = copy.deepcopy(adapter.model)(input_ids=ids, output_hidden_states=True)
    torch.testing.assert_close(acts["layer:1"][0], direct.hidden_states[2])
    torch.testing.assert_close(logits, direct.logits)


def test_evaluation_restores_mixed_modes(bert_classifier):
    model, tokenizer = bert_classifier
    model.train()
    model.bert.encoder.layer[0].eval()
    modes = [m.training for m in model.modules()]
    try:
        with evaluation(model):
            assert not model.training
        assert [m.training for m in model.modules()] == modes
    finally:
        model.eval()


def test_length_buckets_respect_budget(bert_classifier):
    adapter = ModelAdapter(*bert_classifier, max_batch_tokens=400)
    lengths = [5, 200, 7, 190, 6, 50]
    batches = adapter.length_buckets(lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 400
    # the short items share one pass, the two long ones share another
    assert [sorted(b) for b in batches] == [[0, 2, 4, 5], [1, 3]]


def test_length_buckets_bound_padding(bert_classifier):
    adapter = ModelAdapter(*bert_classifier, max_batch_tokens=10_000)
    lengths = np.random.default_rng(0).integers(1, 300, size=500).tolist()
    for max_padding in (0.0, 0.05, 0.3):
        batches = adapter.length_buckets(lengths, max_padding=max_padding)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for batch in batches:
            longest, real = max(lengths[i] for i in batch), sum(lengths[i] for i in batch)
            assert len(batch) * longest <= 10_000 or len(batch) == 1
            assert len(batch) * longest - real <= max_padding * len(batch) * longest + 1e-9
        padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
        assert padded <= sum(lengths) / (1 - max_padding) + 1e-9
    assert len(adapter.length_buckets(lengths, max_padding=0.3)) < len(adapter.length_buckets(lengths, max_padding=0.0))
    unbounded = adapter.length_buckets(lengths)  # without the bound, few wide batches pad far more than 5 %
    assert sum(len(b) * max(lengths[i] for i in b) for b in unbounded) > 1.1 * sum(lengths)
    with pytest.raises(ValueError, match="max_padding"):
        adapter.length_buckets(lengths, max_padding=-0.1)


def test_generate_greedy_matches_transformers(gpt2_lm):
    model, tokenizer = gpt2_lm
    adapter = ModelAdapter(model, tokenizer)
    prompt = adapter.encode("The hotel was").input_ids
    ids, probs = task_for(adapter).generate(prompt, max_new_tokens=6, stop_at_eos=False)
    reference = model.generate(
        torch.as_tensor(prompt)[None], max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    assert ids.tolist() == reference[0, len(prompt) :].tolist()
    assert np.all((probs > 0) & (probs <= 1))


def test_generate_on_classifier_is_a_clear_error(bert_classifier):
    with pytest.raises(ValueError, match="generation needs a causal LM"):
        task_for(ModelAdapter(*bert_classifier)).generate([1, 2, 3])


def test_non_fast_tokenizer_is_rejected(bert_classifier):
    class SlowTokenizer:
        is_fast = False

    with pytest.raises(TypeError, match="not a fast tokenizer"):
        ModelAdapter(bert_classifier[0], SlowTokenizer())
