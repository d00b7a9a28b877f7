"""Chat conversations as inputs: the tokenizer's own chat template applied once, template tokens special (kept by
baselines, never perturbed), one turn per message (a default system prompt included), the assistant reply explained
forced or generated, clear errors, and the views' role labels. Tiny models here; SmolLM2 in test_chat_smollm2.py."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import (
    IntegratedGradients, Occlusion, Saliency, attribute, faithfulness,
)  # fmt: skip
from interp_widgets.attribution.gradient import baseline_embeddings
from interp_widgets.attribution.result import AttributionResult
from interp_widgets.concepts import PCAConcepts, collect_activations, concept_importance
from interp_widgets.text_units import encode, encode_chat, render_chat
from interp_widgets.widgets import GenerationWidget, TokenHighlightWidget
from tests.conftest import model_fingerprint, record_perturbed_rows
from tests.tiny_models import CHAT_TEMPLATE

QUESTION = [{"role": "user", "content": "Was the room clean? Tell me."}]
ANSWERED = [*QUESTION, {"role": "assistant", "content": "Yes, it was."}]
DEFAULT_SYSTEM = "You are a tiny helpful assistant."


def _with_template(tokenizer, template: str, *, bos: bool = False):
    """A copy of the tokenizer with another chat template (and, with ``bos``, a post-processor that adds BOS)."""
    from tokenizers import processors

    other = copy.deepcopy(tokenizer)
    other.chat_template = template
    if bos:  # BOS is <|endoftext|>, as Llama 3's <|begin_of_text|>: the template writes it, the post-processor adds it
        other.bos_token = "<|endoftext|>"
        other.backend_tokenizer.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=True),
            processors.TemplateProcessing(single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", other.bos_token_id)]),
        ])  # fmt: skip
    return other


# ---------------------------------------------------------------------------------------------- encoding
def test_the_template_is_applied_once_with_the_ids_of_apply_chat_template(chat_llama_lm):
    _, tokenizer = chat_llama_lm
    for kwargs in ({"add_generation_prompt": True}, {"continue_final_message": True}, {}):
        messages = QUESTION if kwargs.get("add_generation_prompt") else ANSWERED
        enc = encode_chat(tokenizer, messages, **kwargs)
        expected = tokenizer.apply_chat_template(messages, tokenize=True, **kwargs)["input_ids"]
        assert enc.input_ids.tolist() == expected
        assert enc.text == tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    # a template that writes BOS itself, with a tokenizer that adds BOS: still one BOS, the template's
    bos_template = "{{ bos_token }}" + CHAT_TEMPLATE
    with_bos = _with_template(tokenizer, bos_template, bos=True)
    assert with_bos("Hi")["input_ids"][0] == with_bos.bos_token_id  # add_special_tokens would add one more
    enc = encode_chat(with_bos, QUESTION, add_generation_prompt=True)
    assert enc.input_ids.tolist() == with_bos.apply_chat_template(QUESTION, add_generation_prompt=True)["input_ids"]
    assert enc.input_ids[0] == with_bos.bos_token_id and enc.input_ids.tolist().count(with_bos.bos_token_id) == 1
    assert enc.special_mask[0] and enc.tokens[0] == "<|endoftext|>" and enc.turn_roles == ["system", "user"]


def test_turns_roles_template_tokens_and_units(chat_llama_lm):
    _, tokenizer = chat_llama_lm
    enc = encode_chat(tokenizer, ANSWERED)
    assert enc.turn_roles == ["system", "user", "assistant"]  # the template's default system prompt is a turn
    assert enc.messages == ANSWERED
    spans = [enc.offsets[enc.turn_ids == k] for k in range(3)]
    assert [enc.text[s[:, 0].min():s[:, 1].max()] for s in spans] == [DEFAULT_SYSTEM, "Was the room clean? Tell me.",
                                                                      "Yes, it was."]  # fmt: skip
    template = "".join(t for t, s in zip(enc.tokens, enc.special_mask) if s)
    assert template == ("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
                        "<|im_end|>\n")  # fmt: skip
    # template tokens have no unit; words and sentences never cross turns
    assert (enc.turn_ids[enc.special_mask] == -1).all() and (enc.word_ids[enc.special_mask] == -1).all()
    assert enc.sentences == [DEFAULT_SYSTEM, "Was the room clean?", "Tell me.", "Yes, it was."]
    for ids in (enc.word_ids, enc.sentence_ids):
        for unit in set(ids[ids >= 0].tolist()):
            assert len(set(enc.turn_ids[ids == unit].tolist())) == 1
    # a system message of one's own replaces the default one
    own = encode_chat(tokenizer, [{"role": "system", "content": "Be brief."}, *QUESTION])
    assert own.turn_roles == ["system", "user"] and DEFAULT_SYSTEM not in own.text
    layout = render_chat(tokenizer, QUESTION, add_generation_prompt=True)
    assert layout.default_system == [0] and layout.text[slice(*layout.spans[0])] == DEFAULT_SYSTEM


def test_special_tokens_written_in_a_string_are_special(chat_llama_lm, bert_classifier):
    _, tokenizer = chat_llama_lm
    text = tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    enc = encode(tokenizer, text)
    marked = [t for t, s in zip(enc.tokens, enc.special_mask) if s]
    assert marked == ["<|im_start|>", "<|im_end|>", "<|im_start|>", "<|im_end|>", "<|im_start|>"]
    assert not any("im_" in w for w in enc.words)  # no words made of a marker's characters
    # an unknown word that became [UNK] keeps its text and stays a word; [MASK] is a blank of the text
    wordpiece = bert_classifier[1]
    enc = encode(wordpiece, "The \u2603 [MASK] [SEP] ok")
    assert [(t, bool(s)) for t, s in zip(enc.tokens, enc.special_mask)][1:-1] == [
        ("The", False),
        ("\u2603", False),
        ("[MASK]", False),
        ("[SEP]", True),
        ("ok", False),
    ]
    assert wordpiece.convert_ids_to_tokens(int(enc.input_ids[2])) == "[UNK]"


# ---------------------------------------------------------------------------------------------- attribution
def test_forced_reply_targets_the_last_assistant_message(chat_llama_lm):
    model, tokenizer = chat_llama_lm
    result = Saliency(progress=False).attribute(model, tokenizer, ANSWERED)
    ids = tokenizer.apply_chat_template(ANSWERED, continue_final_message=True)["input_ids"]
    reply = tokenizer("Yes, it was.", add_special_tokens=False)["input_ids"]
    assert result.target_ids.tolist() == ids[-len(reply) :] == reply
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    positions = np.arange(len(ids) - len(reply), len(ids))
    expected = torch.softmax(logits, -1)[torch.as_tensor(positions - 1), torch.as_tensor(reply)].numpy()
    np.testing.assert_allclose(result.target_probs, expected, rtol=1e-5)
    assert result.generated_mask.tolist() == [False] * (len(ids) - len(reply)) + [True] * len(reply)
    # a continuation after a user turn is the same forced reply
    again = Saliency(progress=False).attribute(model, tokenizer, QUESTION, continuation="Yes, it was.")
    np.testing.assert_allclose(again.scores, result.scores, rtol=1e-6, equal_nan=True)
    assert again.text == result.text
    # why this reply rather than another: the foil is aligned with the reply's tokens, the turns stay
    foiled = Saliency(progress=False).attribute(model, tokenizer, ANSWERED, contrast="No, it was.")
    foil = tokenizer("No, it was.", add_special_tokens=False)["input_ids"]
    assert foiled.foil_ids.tolist() == foil[-len(reply) :] and foiled.turn_roles == result.turn_roles


def test_generated_reply_follows_the_generation_prompt(chat_llama_lm):
    model, tokenizer = chat_llama_lm
    before = model_fingerprint(model, tokenizer)
    result = Saliency(progress=False).attribute(model, tokenizer, messages=QUESTION, max_new_tokens=4)
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)["input_ids"]
    with torch.no_grad():
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False,
                                   attention_mask=torch.ones(1, len(prompt), dtype=torch.long))  # fmt: skip
    assert result.target_ids.tolist() == reference[0, len(prompt) :].tolist()
    assert result.turn_roles == ["system", "user", "assistant"]
    generated = np.flatnonzero(result.generated_mask)
    assert generated[0] == len(prompt) and set(result.turn_ids[generated][~result.special_mask[generated]]) == {2}
    assert model_fingerprint(model, tokenizer) == before


def test_turn_granularity_sums_tokens_and_ig_stays_complete(chat_llama_lm):
    model, tokenizer = chat_llama_lm
    tokens = IntegratedGradients(n_steps=32, progress=False).attribute(model, tokenizer, ANSWERED)
    assert tokens.relative_completeness_error.max() < 0.02  # template tokens kept by the baseline: they add 0
    turns = tokens.aggregate("turn")
    assert turns.tokens == [DEFAULT_SYSTEM, "Was the room clean? Tell me.", "Yes, it was."]
    assert turns.turn_ids.tolist() == [0, 1, 2] and turns.turn_roles == ["system", "user", "assistant"]
    for k in range(3):
        members = tokens.scores[:, (tokens.turn_ids == k) & ~tokens.special_mask]
        expected = np.where(np.isnan(members).all(1), np.nan, np.nansum(members, 1))
        np.testing.assert_allclose(turns.scores[:, k], expected, rtol=1e-9, equal_nan=True)
    assert np.isnan(turns.scores[0, 2]) and np.isfinite(turns.scores[1:]).all()  # the first reply token sees no reply
    frame = turns.to_dataframe()
    assert frame["role"].tolist()[:3] == ["system", "user", "assistant"]
    # the same through the functional entry point, with the turn unit
    direct = attribute(model, tokenizer, ANSWERED, method="integrated_gradients", granularity="turn",
                       method_params={"n_steps": 32, "progress": False})  # fmt: skip
    np.testing.assert_allclose(direct.scores, turns.scores, rtol=1e-6, equal_nan=True)


def test_baselines_and_perturbations_leave_template_tokens_alone(chat_llama_lm, monkeypatch):
    model, tokenizer = chat_llama_lm
    adapter = ModelAdapter(model, tokenizer)
    enc = adapter.encode(ANSWERED, continue_final_message=True)
    special = torch.as_tensor(enc.special_mask)
    x = adapter.embed(torch.as_tensor(enc.input_ids)[None])[0].detach()
    for baseline in ("pad", "zero"):
        base = baseline_embeddings(adapter, enc, baseline)
        assert torch.equal(base[special], x[special]) and not torch.equal(base[~special], x[~special])
    captured = record_perturbed_rows(monkeypatch)
    result = Occlusion(baseline="zero", progress=False).attribute(adapter, inputs=ANSWERED, granularity="turn")
    assert result.tokens == [DEFAULT_SYSTEM, "Was the room clean? Tell me.", "Yes, it was."]
    rows = torch.cat(captured)
    replaced = (rows == 0).all(-1)
    assert replaced.any() and not replaced[:, special].any()
    assert torch.equal(rows[:, special], x[special].expand(len(rows), -1, -1))
    for k in range(2):  # a turn is masked whole or not at all
        members = replaced[:, torch.as_tensor(enc.turn_ids == k)]
        assert torch.equal(members.all(1), members.any(1)) and members.any()
    reply = replaced[:, torch.as_tensor(enc.turn_ids == 2)].int()  # masked as far as each target sees: a prefix
    assert reply.any() and (reply[:, 1:] <= reply[:, :-1]).all() and not reply[:, -1].any()


def test_mixed_inputs_saving_and_an_untouched_model(chat_llama_lm, tmp_path):
    model, tokenizer = chat_llama_lm
    model.train()
    before = model_fingerprint(model, tokenizer)
    results = Saliency(progress=False).attribute(model, tokenizer, [ANSWERED, "The room was", ANSWERED],
                                                 continuation=None, max_new_tokens=2)  # fmt: skip
    assert [r.turn_roles for r in results] == [["system", "user", "assistant"], [], ["system", "user", "assistant"]]
    np.testing.assert_array_equal(results[0].scores, results[2].scores)
    assert model_fingerprint(model, tokenizer) == before
    model.eval()
    again = AttributionResult.load(results[0].aggregate("word").save(tmp_path / "chat.safetensors"))
    assert again.turn_roles == ["system", "user", "assistant"] and again.messages == ANSWERED
    np.testing.assert_array_equal(again.turn_ids, results[0].aggregate("word").turn_ids)


def test_activation_collection_and_a_chat_classifier(chat_llama_lm):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    model, tokenizer = chat_llama_lm
    store = collect_activations(model, tokenizer, [QUESTION, "The room was clean."], layer=1, progress=False)
    rendered = tokenizer.apply_chat_template(QUESTION, tokenize=False)
    assert store.texts == [rendered, "The room was clean."]
    first = store.text_rows(0)
    enc = encode_chat(tokenizer, QUESTION)
    assert store.tokens(first) == [t for t, s in zip(enc.tokens, enc.special_mask) if not s]  # no template token
    assert store.metadata(first)["start"].min() == rendered.index(DEFAULT_SYSTEM)
    # concept importance scores the first token of the reply: after the template's generation prompt
    concepts = PCAConcepts(2).fit(store)
    importance = concept_importance(concepts, model, tokenizer, QUESTION)
    prompt = tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    assert importance.text == prompt and "".join(importance.tokens[-6:]) == "<|im_start|>assistant\n"
    with torch.no_grad():
        ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)["input_ids"]
        predicted = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
    assert importance.target_ids.tolist() == [predicted]
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=2, pad_token_id=tokenizer.pad_token_id,
                         initializer_range=0.2)  # fmt: skip
    torch.manual_seed(0)
    classifier = LlamaForSequenceClassification(config).eval()
    result = Saliency(progress=False).attribute(classifier, tokenizer, QUESTION, target=1, granularity="turn")
    assert result.tokens == [DEFAULT_SYSTEM, "Was the room clean? Tell me."] and result.turn_roles == ["system", "user"]
    curves = faithfulness(classifier, tokenizer, result, baseline="pad")  # re-encodes the conversation, not its text
    assert [len(f) for f in curves.fractions] == [3]


# ---------------------------------------------------------------------------------------------- errors
def test_errors_name_the_fix(chat_llama_lm, bert_classifier):
    model, tokenizer = chat_llama_lm
    adapter = ModelAdapter(model, tokenizer)
    with pytest.raises(
        ValueError,
        match=r"text 0: the conversation ends with a 'user' message, so there is no "
        r"assistant reply to explain, and generation is off \(max_new_tokens=0\)",
    ):
        Saliency(progress=False).attribute(model, tokenizer, QUESTION, max_new_tokens=0)
    with pytest.raises(ValueError, match="already ends with the assistant reply"):
        Saliency(progress=False).attribute(model, tokenizer, ANSWERED, continuation=" No.")
    with pytest.raises(ValueError, match="the last message \\(role 'assistant'\\) is empty"):
        adapter.encode([*QUESTION, {"role": "assistant", "content": " "}], continue_final_message=True)
    with pytest.raises(TypeError, match="has content of type list"):
        adapter.encode([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    with pytest.raises(TypeError, match='inputs\\[1\\] is a dict without a "role"'):
        Saliency().attribute(model, tokenizer, [ANSWERED, {"content": "Hi"}])
    with pytest.raises(TypeError, match="not both"):
        Saliency().attribute(model, tokenizer, "Hi", messages=ANSWERED)
    # a tokenizer without a template
    with pytest.raises(ValueError, match=r"has no chat template \(tokenizer.chat_template is None\)"):
        Saliency().attribute(*bert_classifier, QUESTION)
    # a role the template does not know: rendered exactly as another role, dropped, or refused
    as_user = _with_template(tokenizer, "{% for m in messages %}{% if m['role'] == 'assistant' %}A: {% else %}U: "
                                        "{% endif %}{{ m['content'] }}\n{% endfor %}")  # fmt: skip
    encode_chat(as_user, ANSWERED)  # known roles are fine
    with pytest.raises(
        ValueError,
        match="role 'narrator', which this tokenizer's chat template does not know: it "
        "renders the message exactly as a 'system' or 'user' message",
    ):
        encode_chat(as_user, [{"role": "narrator", "content": "Once."}, *QUESTION])
    drops = _with_template(tokenizer, "{% for m in messages %}{% if m['role'] in ['user', 'assistant'] %}"
                                      "{{ m['role'] }}: {{ m['content'] }}\n{% endif %}{% endfor %}")  # fmt: skip
    with pytest.raises(
        ValueError, match="message 0 \\(role 'system'\\) is not in the text .* drops messages of role 'system'"
    ):
        encode_chat(drops, [{"role": "system", "content": "Be brief."}, *QUESTION])
    refuses = _with_template(tokenizer, "{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
                                        "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
                                        "{{ m['content'] }}{% endfor %}")  # fmt: skip
    with pytest.raises(
        ValueError,
        match="chat template rejected this conversation .*Only user and assistant roles are "
        "supported!\\); its roles are \\['tool', 'user'\\]",
    ):
        encode_chat(refuses, [{"role": "tool", "content": "42"}, *QUESTION])
    # ChatML writes any role out, so it knows it: a tool turn is a turn like any other
    assert encode_chat(tokenizer, [*QUESTION, {"role": "tool", "content": "42"}]).turn_roles == [
        "system",
        "user",
        "tool",
    ]


# ---------------------------------------------------------------------------------------------- views
def test_views_label_roles_and_escape_them(chat_llama_lm):
    model, tokenizer = chat_llama_lm
    messages = [{"role": "<b>sys</b>", "content": "Be <i>kind</i>."}, *ANSWERED]
    result = Saliency(progress=False).attribute(model, tokenizer, messages)
    widget = TokenHighlightWidget(result.aggregate("token", include_special=True))
    assert widget.turn_roles == ["system", "<b>sys</b>", "user", "assistant"]  # and the default system prompt
    svg, page = widget.static_svg(), widget.static_html()
    for picture in (svg, page):
        assert "&lt;b&gt;sys&lt;/b&gt;:" in picture or "&lt;b&gt;sys&lt;/b&gt;</span>" in picture
        assert "<b>sys" not in picture and "<i>kind" not in picture
    starts = widget.role_starts(widget.units())
    assert list(starts.values()) == ["system", "<b>sys</b>", "user", "assistant"]
    assert [widget.tokens[widget.units()[u][0]] for u in starts] == ["Y", "B", "W", "Y"]
    widget.granularity = "turn"
    assert [widget._unit_text(u) for u in widget.units()] == [DEFAULT_SYSTEM, "Be <i>kind</i>.",
                                                              "Was the room clean? Tell me.", "Yes, it was."]  # fmt: skip
    assert "<|im_start|>" not in widget.static_svg()  # template tokens are folded unless asked for
    widget.show_special_tokens = True
    assert "&lt;|im_start|&gt;" in widget.static_svg()
    generation = result.widget()
    assert isinstance(generation, GenerationWidget) and generation.turn_roles == widget.turn_roles
    drawn = generation.static_svg()
    assert "user:" in drawn and "assistant:" in drawn and "<|im_start|>" not in drawn
