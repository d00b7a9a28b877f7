"""The demo decoder: a GPT-2-style LM and byte-level BPE tokenizer trained from scratch on the shipped corpus."""

from __future__ import annotations

import collections
import math
import re
import time

import pytest
import torch

from interp_widgets import demo
from interp_widgets.demo import decoder


@pytest.fixture(scope="module")
def trained():
    return decoder.load_decoder(progress=False)


def _unigram_perplexity(tokenizer, train_texts, test_texts) -> float:
    """Add-one smoothed token frequencies from the training sentences, scored on the test sentences."""
    counts = collections.Counter(t for seq in decoder.encode_texts(tokenizer, train_texts) for t in seq[1:])
    total, vocab = sum(counts.values()), len(tokenizer)
    nll, n = 0.0, 0
    for seq in decoder.encode_texts(tokenizer, test_texts):
        for token in seq[1:]:
            nll -= math.log((counts[token] + 1) / (total + vocab))
            n += 1
    return math.exp(nll / n)


def test_model_and_tokenizer_are_the_projects_own(trained):
    model, tokenizer = trained
    assert model.config.model_type == "gpt2" and not model.training
    assert model.config.vocab_size == len(tokenizer) == decoder.DECODER["vocab_size"]
    assert model.config.n_layer == decoder.DECODER["n_layer"] and model.config.n_embd == decoder.DECODER["n_embd"]
    enc = tokenizer("The hotel was", return_offsets_mapping=True, return_special_tokens_mask=True)
    assert enc["input_ids"][0] == tokenizer.bos_token_id == tokenizer.eos_token_id
    assert enc["special_tokens_mask"] == [1] + [0] * (len(enc["input_ids"]) - 1)
    text = "The hotel was"
    assert "".join(text[a:b] for a, b in enc["offset_mapping"][1:]).replace(" ", "") == text.replace(" ", "")
    assert tokenizer.decode(enc["input_ids"], skip_special_tokens=True) == text
    report = decoder.decoder_report()
    assert report["n_parameters"] == sum(p.numel() for p in model.parameters())
    assert report["n_test_texts"] == len(demo.load_dataset("test"))


def test_held_out_perplexity_is_far_below_a_unigram_baseline(trained):
    model, tokenizer = trained
    train_texts = demo.load_dataset("train")["text"].tolist()
    test_texts = demo.load_dataset("test")["text"].tolist()
    ppl = decoder.perplexity(model, tokenizer, test_texts)
    assert ppl == pytest.approx(decoder.decoder_report()["test_perplexity"], rel=1e-6)
    unigram = _unigram_perplexity(tokenizer, train_texts, test_texts)
    assert ppl < 0.5 * unigram, (ppl, unigram)
    assert decoder.decoder_report()["train_perplexity"] < ppl  # it has fitted its training sentences


def test_perplexity_matches_a_manual_per_sentence_computation(trained):
    model, tokenizer = trained
    texts = demo.load_dataset("test")["text"].tolist()[:5]
    nll, n = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
            nll -= sum(float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1))
            n += len(ids) - 1
    assert decoder.perplexity(model, tokenizer, texts, batch_size=2) == pytest.approx(math.exp(nll / n), rel=1e-5)


def test_greedy_generation_is_deterministic_and_review_like(trained):
    model, tokenizer = trained
    ids = tokenizer("The hotel was", return_tensors="pt").input_ids
    runs = [
        model.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=tokenizer.pad_token_id) for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])
    text = tokenizer.decode(runs[0][0], skip_special_tokens=True)
    assert text.startswith("The hotel was ")
    words = re.findall(r"[A-Za-z']+", text[len("The hotel was") :])
    assert len(words) >= 3, text
    known = {w.lower() for t in demo.load_dataset("train")["text"] for w in re.findall(r"[A-Za-z']+", t)}
    assert sum(w.lower() in known for w in words) >= 0.8 * len(words), text


def test_second_load_reuses_the_cache(trained):
    model, _ = trained
    weights = decoder._target() / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    start = time.perf_counter()
    again, _ = decoder.load_decoder(progress=False)
    assert time.perf_counter() - start < 15
    assert weights.stat().st_mtime_ns == stamp
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)


def test_cache_key_follows_data_and_configuration(monkeypatch):
    key = decoder._fingerprint()
    monkeypatch.setitem(decoder.DECODER_TRAINING, "epochs", decoder.DECODER_TRAINING["epochs"] + 1)
    assert decoder._fingerprint() != key
    monkeypatch.undo()
    assert decoder._fingerprint() == key
    assert decoder._target().parent == demo.cache_dir()


def test_tokenizer_training_is_deterministic():
    texts = demo.corpus()[:200]
    a, b = decoder.train_tokenizer(texts, vocab_size=400), decoder.train_tokenizer(texts, vocab_size=400)
    assert a.get_vocab() == b.get_vocab() and len(a) == 400
