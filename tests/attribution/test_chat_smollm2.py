"""Chat templates on the real pretrained SmolLM2-135M-Instruct (a dequantised Q4_1 copy): its own template applied
once, its default system prompt shown and attributed as the system turn, template tokens special in strings and in
conversations, turn sums, and the reply the model generates. Kept to a few short forward passes."""

from __future__ import annotations

import numpy as np
import torch

from tests.conftest import record_perturbed_rows

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import InputXGradient, Occlusion
from interp_widgets.text_units import encode

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def test_smollm2_template_once_default_system_turn_and_special_markers(smollm2):
    model, tokenizer = smollm2
    adapter = ModelAdapter(model, tokenizer)
    enc = adapter.encode(QUESTION, add_generation_prompt=True)
    assert enc.input_ids.tolist() == tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)["input_ids"]
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert enc.input_ids.tolist().count(start) == 3 and enc.input_ids[0] == start != enc.input_ids[1]  # no 2nd BOS
    assert enc.turn_roles == ["system", "user"] and enc.sentences == [SMOLLM_SYSTEM, QUESTION[0]["content"]]
    assert "".join(t for t, s in zip(enc.tokens, enc.special_mask) if s) == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
    )
    # the same template text passed as a string: its markers are special tokens, not words
    text = tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    plain = encode(tokenizer, text)
    assert plain.input_ids.tolist() == enc.input_ids.tolist()
    assert [t for t, s in zip(plain.tokens, plain.special_mask) if s] == ["<|im_start|>", "<|im_end|>"] * 2 + [
        "<|im_start|>"
    ]


def test_smollm2_forced_reply_turns_and_untouched_template(smollm2, monkeypatch):
    model, tokenizer = smollm2
    messages = [*QUESTION, {"role": "assistant", "content": "Paris."}]  # two targets keep this test short
    result = InputXGradient(progress=False).attribute(model, tokenizer, messages)
    assert [tokenizer.decode([i]) for i in result.target_ids] == ["Paris", "."]
    turns = result.aggregate("turn")
    assert turns.tokens == [SMOLLM_SYSTEM, QUESTION[0]["content"], "Paris."]
    assert turns.turn_roles == ["system", "user", "assistant"]
    content = result.scores[:, ~result.special_mask]
    np.testing.assert_allclose(np.nansum(turns.scores, 1), np.nansum(content, 1), rtol=1e-9)
    assert np.abs(turns.scores[:, 0]).max() > 0  # the default system prompt is attributed like any turn
    # occlusion of whole turns: the template's tokens keep their embeddings in every row
    captured = record_perturbed_rows(monkeypatch)
    occluded = Occlusion(baseline="zero", progress=False).attribute(model, tokenizer, messages, granularity="turn")
    assert occluded.tokens == turns.tokens and occluded.scores.shape == (2, 3)
    adapter = ModelAdapter(model, tokenizer)
    enc = adapter.encode(messages, continue_final_message=True)
    special = torch.as_tensor(enc.special_mask)
    x = adapter.embed(torch.as_tensor(enc.input_ids)[None])[0].detach()
    rows = torch.cat(captured)
    assert torch.equal(rows[:, special], x[special].expand(len(rows), -1, -1))
    assert (rows[:, ~special] == 0).all(-1).any()


def test_smollm2_generated_reply_is_the_assistant_turn(smollm2):
    model, tokenizer = smollm2
    result = InputXGradient(progress=False).attribute(model, tokenizer, QUESTION, max_new_tokens=2)
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)["input_ids"]
    with torch.no_grad():
        reference = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                   max_new_tokens=2, do_sample=False)  # fmt: skip
    assert result.target_ids.tolist() == reference[0, len(prompt) :].tolist()
    assert result.turn_roles == ["system", "user", "assistant"]
    assert set(result.turn_ids[result.generated_mask].tolist()) == {2}
    drawn = result.widget().static_svg()
    assert "system:" in drawn and "user:" in drawn and "assistant:" in drawn
