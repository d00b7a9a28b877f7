"""Issue 36: attention maps and lens tensors are reduced on the device that produced them, layer by layer, before
anything moves to the CPU, and the results equal the previous path (everything moved first, reduced on the CPU).

Without a GPU the "device" is the CPU, so the tests record what is handed to ``Tensor.cpu()`` / ``Tensor.to("cpu")``:
the reduced per-layer tensors, never the ``(rows, heads, T, T)`` maps or the ``(T, d)`` residual streams. A model
dispatched by accelerate (one block on disk, ``tests/test_dispatched_families.py``'s fixtures) still equals the plain
model to 1e-5.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import interp_widgets
from interp_widgets.attribution import (
    AttentionRollout,
    GradientWeightedAttention,
    RawAttention,
    attention_patterns,
)
from interp_widgets.attribution.attention import _keep_layer, attention_rollout, gradient_weighted_rollout
from interp_widgets.lens import collect_residuals, lens_kl, logit_lens
from interp_widgets.lens import tuned as tuned_module
from interp_widgets.lens.head import LensHead
from tests.test_dispatched_families import dispatched, untouched  # noqa: F401  (fixtures)

PROMPT = "The room was clean and"
TEXTS = ["The room was clean and quiet.", "A cat sat on the mat by the door.", "We walked home in the rain."]


@pytest.fixture
def moved(monkeypatch):
    """Shapes of the tensors the package (not transformers' own code) hands to ``.cpu()`` or ``.to("cpu", ...)``."""
    shapes: list[tuple[int, ...]] = []
    cpu, to = torch.Tensor.cpu, torch.Tensor.to
    package = str(Path(interp_widgets.__file__).parent)

    def ours() -> bool:
        return sys._getframe(2).f_code.co_filename.startswith(package)

    def record_cpu(self, *args, **kwargs):
        if ours():
            shapes.append(tuple(self.shape))
        return cpu(self, *args, **kwargs)

    def record_to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu" and ours():
            shapes.append(tuple(self.shape))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "cpu", record_cpu)
    monkeypatch.setattr(torch.Tensor, "to", record_to)
    return shapes


def _previous(method, relevance):
    """The method as it was before issue 36: every head of every layer moved to the CPU, then ``relevance``."""
    method._reduce_layer = _keep_layer
    method._relevance = relevance
    return method


CASES = {
    "raw": (lambda: RawAttention(layer=0, progress=False), lambda a, g: a[0].mean(dim=1), 1),
    "rollout": (lambda: AttentionRollout(progress=False), lambda a, g: attention_rollout(a), 2),
    "gradient": (lambda: GradientWeightedAttention(progress=False), gradient_weighted_rollout, 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_attention_methods_move_head_averaged_maps_and_equal_the_previous_path(llama_lm, moved, case):
    model, tokenizer = llama_lm
    make, relevance, layers_moved = CASES[case]
    new = make().attribute(model, tokenizer, PROMPT)
    T = len(new.tokens)
    rows = new.scores.shape[0] if case == "gradient" else 1
    maps = [s for s in moved if len(s) == 4 and s[-2:] == (T, T)]
    assert maps == [(rows, 1, T, T)] * layers_moved  # one head-averaged map per layer read, nothing per head
    moved.clear()
    old = _previous(make(), relevance).attribute(model, tokenizer, PROMPT)
    assert [s for s in moved if len(s) == 4 and s[-2:] == (T, T)] == [
        (rows, model.config.num_attention_heads, T, T)
    ] * (4 if case == "gradient" else 2)  # every head of both layers (and of their gradients)
    np.testing.assert_array_equal(new.scores, old.scores)


def test_attention_patterns_layers_and_queries_move_only_their_slice(llama_lm, moved):
    model, tokenizer = llama_lm
    full = attention_patterns(model, tokenizer, PROMPT, progress=False)
    T, H = len(full.tokens), full.n_heads
    assert [s for s in moved if len(s) == 4] == [(1, H, T, T)] * 2  # float16 per layer, as before
    moved.clear()
    part = attention_patterns(model, tokenizer, PROMPT, layers=[-1], queries=slice(-2, None), progress=False)
    assert [s for s in moved if len(s) == 4] == [(1, H, 2, T)]  # only that layer's two rows left the device
    assert part.layer_indices == [1] and part.query_positions.tolist() == [T - 2, T - 1]
    assert part.tokens == full.tokens[-2:] and part.key_tokens == full.tokens
    assert part.layer_names == full.layer_names[-1:]
    np.testing.assert_array_equal(part.weights[0], full.weights[1][:, -2:])
    np.testing.assert_array_equal(part.aggregate(0, "max"), full.aggregate(1, "max")[-2:])
    with pytest.raises(ValueError, match="rollout composes every layer"):
        part.aggregate(0, "rollout")
    with pytest.raises(IndexError, match="must name attention layers of 0..1"):
        attention_patterns(model, tokenizer, PROMPT, layers=[2], progress=False)


def test_logit_lens_moves_only_the_per_cell_readout(llama_lm, moved):
    model, tokenizer = llama_lm
    result = logit_lens(model, tokenizer, PROMPT, targets=[" the"], top_k=3, chunk_tokens=4, progress=False)
    vocab, d = LensHead(model).vocab_size, model.config.hidden_size
    assert moved and all(s[-1] not in (vocab, d) for s in moved)  # no logits, no residual stream
    assert max(int(np.prod(s)) for s in moved) <= 4 * max(3, 2)  # a chunk's top-k, or its targets' numbers
    assert result.readout.top_probs.dtype == np.float32


def _previous_lens_kl(model, tokenizer, texts, *, tokens, seq_len, batch_tokens):
    """lens_kl before issue 36: every layer's residual stream collected on the CPU in float32, then decoded."""
    head = LensHead(model)
    names = [f"layer:{i}" for i in range(model.config.num_hidden_layers)]
    cache = collect_residuals(model, tokenizer, texts, names, tokens=tokens, seq_len=seq_len, dtype=torch.float32,
                              progress=False)  # fmt: skip
    n, sums = cache[names[-1]].shape[0], np.zeros(len(names))
    with torch.no_grad():
        for start in range(0, n, batch_tokens):
            sl = slice(start, min(n, start + batch_tokens))
            final_logp = head(cache[names[-1]][sl]).float().log_softmax(-1)
            for i, name in enumerate(names):
                logq = head(cache[name][sl]).float().log_softmax(-1)
                sums[i] += float((final_logp.exp() * (final_logp - logq)).sum(-1).clamp_min(0).sum())
    return sums / n, n


def test_lens_kl_decodes_on_the_device_and_equals_the_cached_path(llama_lm, moved, monkeypatch):
    model, tokenizer = llama_lm
    # 3 windows of 16 tokens, two per forward pass: passes of 32 and 16 rows, decoded in slices of 20 that cross them
    monkeypatch.setattr(tuned_module, "_PASS_TOKENS", 32)
    got = lens_kl(model, tokenizer, TEXTS * 4, tokens=48, seq_len=16, batch_tokens=20, progress=False)
    assert not [s for s in moved if s and s[-1] == model.config.hidden_size]  # no residual stream left the device
    expected, n = _previous_lens_kl(model, tokenizer, TEXTS * 4, tokens=48, seq_len=16, batch_tokens=20)
    assert got["tokens"] == n == 48
    np.testing.assert_array_equal(got["logit"], expected)


def test_dispatched_model_equals_the_plain_one(llama_lm, untouched):  # noqa: F811
    model, tokenizer = llama_lm
    for make, _, _ in CASES.values():
        np.testing.assert_allclose(make().attribute(untouched, tokenizer, PROMPT).scores,
                                   make().attribute(model, tokenizer, PROMPT).scores, rtol=1e-5, atol=1e-6)  # fmt: skip
    got = attention_patterns(untouched, tokenizer, PROMPT, layers=[1], queries=[0, 3], progress=False)
    expected = attention_patterns(model, tokenizer, PROMPT, layers=[1], queries=[0, 3], progress=False)
    np.testing.assert_allclose(got.weights[0].astype(np.float32), expected.weights[0].astype(np.float32), atol=1e-3)
    a = lens_kl(untouched, tokenizer, TEXTS * 4, tokens=48, seq_len=16, batch_tokens=20, progress=False)
    b = lens_kl(model, tokenizer, TEXTS * 4, tokens=48, seq_len=16, batch_tokens=20, progress=False)
    np.testing.assert_allclose(a["logit"], b["logit"], rtol=1e-5, atol=1e-7)
