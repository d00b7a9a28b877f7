"""ChatLM's greedy decoding with the key-value cache of the last prompt: the same tokens and logits as transformers'
``generate`` without it, an early stop, and a cache that is dropped when the weights change in place."""

from __future__ import annotations

import torch

from interp_widgets.concepts import ChatLM
from tests import tiny_models

SYSTEM = "You judge texts. " * 12  # a long shared beginning, as the scorer's instructions and few-shot examples


def _prompt(text: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def _reference(model, tokenizer, chat: ChatLM, prompt, max_new_tokens: int):
    batch = tokenizer(chat.render(prompt), return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
    return out.sequences[0, batch["input_ids"].shape[1] :].tolist(), out.scores


def test_cached_decoding_equals_generate_and_stops_early():
    model, tokenizer = tiny_models.chat_llama_lm()
    chat = ChatLM(model, tokenizer, max_new_tokens=6)
    for text in ("the soup was cold", "the soup was warm", "a dog", "the soup was cold"):
        new, logits = chat.complete(_prompt(text), scores=True)
        want, want_logits = _reference(model, tokenizer, chat, _prompt(text), 6)
        assert new == want and len(logits) == len(want_logits)
        for got, expected in zip(logits, want_logits):
            torch.testing.assert_close(got, expected.float(), rtol=1e-4, atol=1e-4)
    held = len(chat._prefix[1])  # the cache holds the last prompt and all but the last new token
    assert held == len(tokenizer(chat.render(_prompt("the soup was cold")), add_special_tokens=False)["input_ids"]) + 5
    seen = []
    stopped, _ = chat.complete(_prompt("a cat"), stop=lambda ids: seen.append(list(ids)) or len(ids) == 2)
    assert len(stopped) == 2 and seen == [stopped[:1], stopped[:2]]


def test_the_cache_is_dropped_when_the_weights_change_in_place():
    model, tokenizer = tiny_models.chat_llama_lm()
    model = type(model)(model.config)  # a copy to change: the shared tiny model stays as it is
    model.load_state_dict(tiny_models.chat_llama_lm()[0].state_dict())
    model.eval()
    chat = ChatLM(model, tokenizer, max_new_tokens=4)
    chat.complete(_prompt("the soup was cold"))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # an optimizer step changes the weights in place
    new, logits = chat.complete(_prompt("the soup was warm"), scores=True)
    want, want_logits = _reference(model, tokenizer, chat, _prompt("the soup was warm"), 4)
    assert new == want
    torch.testing.assert_close(logits[0], want_logits[0].float(), rtol=1e-4, atol=1e-4)
