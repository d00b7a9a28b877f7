"""Issue 16 inputs: replay refuses checkpoints of different architectures; the frequency analysis refuses too few
tokens and reports confidence intervals (checked against scipy)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy import stats

from interp_widgets.geometry import frequency_analysis, frequency_by_layer, frequency_chart
from interp_widgets.geometry.monitor.replay import replay
from tests import tiny_models

PROBE = ["the cat sat on the mat", "a dog ran", "stocks fell sharply today", "it rained"]


def test_replay_refuses_models_of_different_architectures(gpt2_lm):
    gpt2_lm, bpe_tokenizer = gpt2_lm
    other = tiny_models.llama_lm()[0]
    with pytest.raises(ValueError, match=r"checkpoint 1 is a LlamaForCausalLM but checkpoint 0 is a GPT2LMHeadModel"):
        replay([gpt2_lm, other], PROBE, ["layer:0"], tokenizer=bpe_tokenizer, rank=2, n_controls=3, progress=False)


def test_replay_refuses_a_directory_of_another_architecture(gpt2_lm, tmp_path):
    import transformers

    gpt2_lm, bpe_tokenizer = gpt2_lm
    config = copy.deepcopy(gpt2_lm.config)
    config.n_embd *= 2
    bigger = transformers.GPT2LMHeadModel(config)
    bigger.save_pretrained(tmp_path / "big")
    with pytest.raises(ValueError, match=r"has n_embd = .* different architectures"):
        replay(
            [gpt2_lm, tmp_path / "big"],
            PROBE,
            ["layer:0"],
            model=gpt2_lm,
            tokenizer=bpe_tokenizer,
            rank=2,
            n_controls=3,
            progress=False,
        )


def test_replay_refuses_a_state_dict_of_another_shape(gpt2_lm):
    import transformers

    gpt2_lm, bpe_tokenizer = gpt2_lm
    config = copy.deepcopy(gpt2_lm.config)
    config.n_layer += 1
    deeper = transformers.GPT2LMHeadModel(config)
    with pytest.raises(ValueError, match=r"checkpoint 1 has a different architecture .* extra parameter"):
        replay([gpt2_lm, deeper], PROBE, ["layer:0"], tokenizer=bpe_tokenizer, rank=2, n_controls=3, progress=False)


def test_frequency_analysis_refuses_too_few_tokens():
    with pytest.raises(
        ValueError,
        match=r"over 12 token\(s\) cannot work: it needs at least 4 token types seen 5 "
        r"times each, so at least 20 tokens; pass more text",
    ):
        frequency_analysis(torch.randn(12, 3), torch.arange(12) % 3)
    with pytest.raises(ValueError, match=r"only 3 token type\(s\) occur at least 5 times in 40 tokens"):
        frequency_analysis(torch.randn(40, 3), torch.cat([torch.arange(30) % 3, torch.arange(10) + 100]))


def test_frequency_intervals_match_scipy():
    g = torch.Generator().manual_seed(1)
    ids = torch.cat([torch.full((int(200 / (r + 1)),), r) for r in range(30)])
    spread = 1 + 0.1 * ids.double()
    H = torch.randn(ids.shape[0], 6, generator=g, dtype=torch.float64) * spread[:, None]
    result = frequency_analysis(H, ids)
    logs, dist = np.log(result.counts.astype(float)), result.distances
    reference = stats.pearsonr(logs, dist)
    low, high = reference.confidence_interval(0.95)
    assert result.pearson == pytest.approx(reference.statistic)
    assert result.pearson_ci == pytest.approx((low, high), rel=1e-9)
    rho = stats.spearmanr(logs, dist).statistic
    se = math.sqrt((1 + rho**2 / 2) / (result.n_types - 3))
    assert result.spearman_ci == pytest.approx(
        (math.tanh(math.atanh(rho) - 1.959963984540054 * se), math.tanh(math.atanh(rho) + 1.959963984540054 * se))
    )
    assert result.spearman < 0 and result.spearman_ci[1] < 0  # frequent types pinned: a clear negative relation


def test_frequency_by_layer_matches_direct_analysis(gpt2_lm):
    gpt2_lm, bpe_tokenizer = gpt2_lm
    texts = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 6
    before = gpt2_lm.training
    results = frequency_by_layer(gpt2_lm, bpe_tokenizer, texts, [0, 2], min_count=5, progress=False)
    assert gpt2_lm.training == before
    enc = bpe_tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = gpt2_lm(**enc, output_hidden_states=True).hidden_states[2]
    keep = enc["attention_mask"].bool()
    direct = frequency_analysis(states[keep], enc["input_ids"][keep], min_count=5)
    assert results[2].pearson == pytest.approx(direct.pearson, abs=1e-6)
    assert type(frequency_chart({"gpt2": results})).__name__ == "LayerChart"
    with pytest.raises(ValueError, match="layer 9 is out of range"):
        frequency_by_layer(gpt2_lm, bpe_tokenizer, texts, [9], progress=False)
