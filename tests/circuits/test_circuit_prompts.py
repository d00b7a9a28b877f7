"""``benchmarks/circuits_prompts.json``: the 8 prompts of the SmolLM2 circuit benchmark, checked with the SmolLM2
tokenizer (8-24 tokens, a one-token answer with its leading space as tokenized) and on the model (the answer is the
top-1 next token, with and without the BOS an attribution graph prepends, at the recorded probability)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

PROMPTS = Path(__file__).resolve().parents[2] / "benchmarks" / "circuits_prompts.json"


@pytest.fixture(scope="module")
def prompts() -> list[dict]:
    data = json.loads(PROMPTS.read_text(encoding="utf-8"))
    assert data["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    return data["prompts"]


def test_eight_prompts_of_every_kind(prompts):
    assert len(prompts) == 8
    assert len({p["prompt"] for p in prompts}) == 8
    kinds = Counter(p["kind"] for p in prompts)
    assert set(kinds) == {"factual_recall", "arithmetic", "rhyme", "multi_step"}
    assert kinds["factual_recall"] >= 3
    for p in prompts:
        assert set(p) == {"kind", "prompt", "answer", "answer_id", "tokens", "probability", "probability_with_bos"}
        assert 0 < p["probability"] <= 1 and 0 < p["probability_with_bos"] <= 1


def test_token_counts_and_one_token_answers(prompts, smollm2):
    _, tokenizer = smollm2
    for p in prompts:
        ids = tokenizer(p["prompt"]).input_ids
        assert ids[0] != tokenizer.bos_token_id  # counted without a BOS
        assert 8 <= len(ids) <= 24 and len(ids) == p["tokens"], p["prompt"]
        full = tokenizer(p["prompt"] + p["answer"]).input_ids
        # the answer is exactly one token after the prompt's own tokens, as the tokenizer splits prompt + answer
        assert full[: len(ids)] == ids and full[len(ids) :] == [p["answer_id"]], p["prompt"]
        assert tokenizer.decode([p["answer_id"]]) == p["answer"]
        assert tokenizer(p["answer"], add_special_tokens=False).input_ids == [p["answer_id"]]


def test_smollm2_predicts_each_answer_top1(prompts, smollm2):
    model, tokenizer = smollm2
    for p in prompts:
        ids = tokenizer(p["prompt"]).input_ids
        for row, recorded in ((ids, p["probability"]), ([tokenizer.bos_token_id, *ids], p["probability_with_bos"])):
            with torch.no_grad():
                probs = model(torch.tensor([row])).logits[0, -1].softmax(-1)
            assert int(probs.argmax()) == p["answer_id"], p["prompt"]
            assert float(probs[p["answer_id"]]) == pytest.approx(recorded, abs=0.01), p["prompt"]
