"""Scale: logits only at the scored positions, targets sharing forward and backward passes, dispatched models
(accelerate hooks, a block offloaded to disk), the context limit, and the memory of a 2,048-token saliency."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import InputXGradient, IntegratedGradients, Occlusion, RawAttention, Saliency
from interp_widgets.attribution import gradient as gradient_module
from tests.conftest import model_fingerprint

ROOT = Path(__file__).resolve().parents[1]


class HeadInputs:
    """Records the shape of the hidden states every call of a model's output head computed logits for, inside the
    block (the test's own forward hook, which sees the inputs the head really ran on)."""

    def __init__(self, model):
        self.head, self.shapes = model.get_output_embeddings(), []

    def __enter__(self):
        self.handle = self.head.register_forward_hook(lambda m, args, out: self.shapes.append(tuple(args[0].shape)))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.mark.parametrize("family", ["gpt2_lm", "llama_lm"])
def test_causal_lm_head_runs_only_at_scored_positions(family, request):
    model, tokenizer = request.getfixturevalue(family)
    before = model_fingerprint(model, tokenizer)
    prompt, continuation = "The room was clean and the staff", " were lovely today"
    with HeadInputs(model) as seen:
        saliency = Saliency(progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
    n, length = saliency.scores.shape
    # preparation scores the continuation at its n predicting positions; the attribution pass at the same n
    assert seen.shapes == [(1, n, 32), (1, n, 32)]
    with HeadInputs(model) as seen:
        ig = IntegratedGradients(n_steps=6, progress=False).attribute(
            model, tokenizer, prompt, continuation=continuation
        )
        Occlusion(progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
        generated = Saliency(progress=False).attribute(model, tokenizer, prompt, max_new_tokens=4)
    assert all(shape[1] <= n and shape[1] < length - 1 for shape in seen.shapes)
    assert generated.scores.shape[0] == 4
    assert model_fingerprint(model, tokenizer) == before

    # the same scores from the model's full logits: each target's log-probability, differentiated alone
    ids = torch.as_tensor(saliency.target_ids)
    x = model.get_input_embeddings()(torch.as_tensor(tokenizer(prompt)["input_ids"] + ids.tolist())[None]).detach()
    for t, (position, token) in enumerate(zip(saliency.target_positions, ids)):
        x_t = x.clone().requires_grad_(True)
        score = torch.log_softmax(model(inputs_embeds=x_t).logits[0, position], dim=-1)[token]
        (grad,) = torch.autograd.grad(score, x_t)
        visible = int(position) + 1
        np.testing.assert_allclose(
            saliency.scores[t, :visible], grad[0, :visible].norm(dim=-1).numpy(), rtol=1e-4, atol=1e-6
        )
        assert np.isnan(saliency.scores[t, visible:]).all()
    # IG's endpoint scores, read at the gathered positions, equal the full logits' f(x) - f(baseline)
    pad = model.get_input_embeddings()(torch.tensor([tokenizer.pad_token_id]))[0].detach()
    kept = torch.as_tensor(ig.special_mask).clone()
    kept[0] = True  # keep_first="auto": a causal decoder's first token stays in the baseline
    base = torch.where(kept[:, None], x[0], pad)
    with torch.no_grad():
        full_x = torch.log_softmax(model(inputs_embeds=x).logits[0], dim=-1)
        full_b = torch.log_softmax(model(inputs_embeds=base[None]).logits[0], dim=-1)
    delta = (full_x - full_b)[torch.as_tensor(ig.target_positions), ids].numpy()
    np.testing.assert_allclose(ig.score_delta, delta, rtol=1e-4, atol=1e-5)


def test_masked_lm_head_runs_only_at_the_mask(bert_masked_lm):
    model, tokenizer = bert_masked_lm
    with HeadInputs(model) as seen:
        result = Saliency(progress=False).attribute(model, tokenizer, "The food was [MASK] and cheap.", target="good")
    assert {shape[1] for shape in seen.shapes} == {1}
    enc = tokenizer("The food was [MASK] and cheap.", return_tensors="pt")
    x = model.get_input_embeddings()(enc.input_ids).detach().requires_grad_(True)
    position = int(result.target_positions[0]) if result.target_positions is not None else 4
    logits = model(inputs_embeds=x).logits[0, position]
    (grad,) = torch.autograd.grad(logits[int(result.target_ids[0])], x)
    np.testing.assert_allclose(result.scores[0], grad[0].norm(dim=-1).numpy(), rtol=1e-4, atol=1e-6)


def test_generated_tokens_share_forward_and_backward_passes(llama_lm, monkeypatch):
    model, tokenizer = llama_lm
    prompt, continuation = "The room was clean and", " the staff were"
    saliency = Saliency(progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
    n = saliency.scores.shape[0]
    assert 2 <= n <= gradient_module.MAX_TARGETS_PER_ROW
    longer = Saliency(progress=False).attribute(model, tokenizer, prompt, continuation=" the staff were very kind")
    assert longer.scores.shape[0] == 9 and longer.params["passes"]["forward_rows"] == 2  # rows of 5 + 4 targets
    assert longer.params["passes"]["backward_rows"] == 9
    assert saliency.params["passes"] == {
        "forward": 1,
        "forward_rows": 1,
        "backward": 1,
        "backward_rows": n,
        "targets": n,
        "preparation_forward": 1,
    }
    ig = IntegratedGradients(n_steps=16, progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
    # 16 path rows with gradients in one forward and one backward pass, and f(x), f(baseline) per target from one
    # forward-only pass (2 rows per target: no gradient is taken at the weight-0 endpoints)
    assert ig.params["passes"]["forward_rows"] == 16 + 2 * n and ig.params["passes"]["backward_rows"] == 16 * n
    assert ig.params["passes"]["forward"] == 2 and ig.params["passes"]["backward"] == 1
    # a budget of one row per pass: 16 gradient passes and 2n endpoint passes, each path row serving every target
    length = len(saliency.tokens)
    small = IntegratedGradients(n_steps=16, progress=False).attribute(
        model, tokenizer, prompt, continuation=continuation, max_batch_tokens=length
    )
    assert small.params["passes"]["forward"] == small.params["passes"]["forward_rows"] == 16 + 2 * n
    assert small.params["passes"]["backward"] == 16
    # one target per row (the rows stacked per target) gives the same scores with n times the rows
    monkeypatch.setattr(gradient_module, "MAX_TARGETS_PER_ROW", 1)
    stacked = IntegratedGradients(n_steps=16, progress=False).attribute(
        model, tokenizer, prompt, continuation=continuation
    )
    assert stacked.params["passes"]["forward_rows"] == 16 * n + 2 * n
    np.testing.assert_allclose(ig.scores, stacked.scores, rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(small.scores, stacked.scores, rtol=1e-5, atol=1e-6, equal_nan=True)
    stacked_x = InputXGradient(progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
    monkeypatch.setattr(gradient_module, "MAX_TARGETS_PER_ROW", 8)
    shared_x = InputXGradient(progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
    np.testing.assert_allclose(shared_x.scores, stacked_x.scores, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert shared_x.params["passes"]["forward_rows"] == 1 and stacked_x.params["passes"]["forward_rows"] == n


def test_classes_share_passes(bert_classifier):
    model, tokenizer = bert_classifier
    both = Saliency(progress=False).attribute(model, tokenizer, "Not bad at all.", target=["negative", "positive"])
    alone = [
        Saliency(progress=False).attribute(model, tokenizer, "Not bad at all.", target=t)
        for t in ("negative", "positive")
    ]
    np.testing.assert_allclose(both.scores, np.vstack([r.scores for r in alone]), rtol=1e-5, atol=1e-6)
    assert both.params["passes"]["forward_rows"] == 1 and both.params["passes"]["backward_rows"] == 2


# ---------------------------------------------------------------------------------------------- dispatched models
def _dispatched_llama(llama_lm, tmp_path):
    from transformers import AutoModelForCausalLM

    model, _ = llama_lm
    model.save_pretrained(tmp_path / "model")
    device_map = {
        "model.embed_tokens": "cpu",
        "model.rotary_emb": "cpu",
        "model.layers.0": "cpu",
        "model.layers.1": "disk",
        "model.norm": "cpu",
        "lm_head": "cpu",
    }
    dispatched = AutoModelForCausalLM.from_pretrained(
        tmp_path / "model", device_map=device_map, offload_folder=tmp_path / "offload"
    )
    dispatched.eval()
    return dispatched


def _state(model) -> dict:
    """Accelerate's hooks (the hook objects and the forward methods they installed) and every torch hook."""
    return {
        name: (
            id(getattr(module, "_hf_hook", None)),
            module.__dict__.get("forward"),
            {
                key: list(getattr(module, key, {}))
                for key in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
            },
        )
        for name, module in model.named_modules()
    }


def _folder_digest(folder) -> dict:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_dispatched_model_with_a_block_on_disk(llama_lm, tmp_path, monkeypatch):
    from interp_widgets.concepts import collect_activations

    model, tokenizer = llama_lm
    dispatched = _dispatched_llama(llama_lm, tmp_path)
    assert dispatched.model.layers[1].self_attn.q_proj.weight.device.type == "meta"  # really offloaded
    hooked = [name for name, module in dispatched.named_modules() if hasattr(module, "_hf_hook")]
    assert "model.layers.1" in hooked and "lm_head" in hooked and "model.embed_tokens" in hooked
    before = _state(dispatched)
    fingerprint = model_fingerprint(dispatched, tokenizer)
    offloaded = _folder_digest(tmp_path)  # the disk block is read from the saved safetensors (or offload folder)
    assert any(name.endswith(".safetensors") for name in offloaded)
    adapter = ModelAdapter(dispatched, tokenizer)
    assert adapter.device == torch.device("cpu")

    moved = []
    original_to = torch.nn.Module.to
    ours = set(map(id, dispatched.modules()))

    def guarded_to(self, *args, **kwargs):
        if id(self) in ours:
            moved.append(type(self).__name__)
        return original_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", guarded_to)
    prompt = "The room was clean and"
    calls = [
        (Saliency(progress=False), {"max_new_tokens": 3}),
        (IntegratedGradients(n_steps=8, progress=False), {"continuation": " the staff"}),
        (Occlusion(progress=False), {"max_new_tokens": 3}),
        (RawAttention(progress=False), {"max_new_tokens": 3}),
    ]
    for method, kwargs in calls:
        expected = method.attribute(model, tokenizer, prompt, **kwargs)
        got = method.attribute(dispatched, tokenizer, prompt, **kwargs)
        assert got.target_labels == expected.target_labels, method.name
        np.testing.assert_allclose(
            got.scores, expected.scores, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=method.name
        )
    texts = ["The room was clean.", "Slow service, cold food."]
    for layer in ("layer:0", "layer:1"):
        expected = collect_activations(model, tokenizer, texts, layer=layer, progress=False)
        got = collect_activations(dispatched, tokenizer, texts, layer=layer, progress=False)
        np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=1e-5, atol=1e-6)
        assert got.shape == expected.shape and got.shape[0] > 0
    assert moved == []  # nothing called .to() on the model or its modules
    assert _state(dispatched) == before  # accelerate's hooks remain, ours are all removed
    assert model_fingerprint(dispatched, tokenizer) == fingerprint
    assert _folder_digest(tmp_path) == offloaded  # the weights on disk are untouched
    assert dispatched.model.layers[1].self_attn.q_proj.weight.device.type == "meta"


# ---------------------------------------------------------------------------------------------- context limit
def test_prompt_longer_than_the_context_names_the_limit_and_the_fix(smollm2):
    model, tokenizer = smollm2
    limit = model.config.max_position_embeddings
    assert limit == 8192
    too_long = "word " * (limit + 10)
    with pytest.raises(
        ValueError,
        match=r"the text is \d+ tokens, longer than the model's context of 8192 tokens "
        r"\(config.max_position_embeddings = 8192\)\. Shorten it or split it into "
        r"several texts of at most 8192 tokens",
    ):
        Saliency(progress=False).attribute(model, tokenizer, too_long, continuation=" word")
    near = "word " * (limit - 5)
    n = len(tokenizer(near)["input_ids"])
    with pytest.raises(
        ValueError,
        match=rf"the prompt \({n} tokens\) plus max_new_tokens \(20\) is longer than the "
        rf"model's context of 8192 tokens \(config.max_position_embeddings = 8192\); "
        rf"shorten the prompt or ask for at most {limit - n} new tokens",
    ):
        Saliency(progress=False).attribute(model, tokenizer, near, max_new_tokens=20)
    with pytest.raises(
        ValueError,
        match=r"the prompt plus its continuation is \d+ tokens, longer than the model's "
        r"context of 8192 tokens",
    ):
        Saliency(progress=False).attribute(model, tokenizer, near, continuation=" word" * 20)


# ---------------------------------------------------------------------------------------------- memory
def _probe(kind: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "llm_scale.py"), "--probe", kind, "2048"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_saliency_on_a_2048_token_prompt_peaks_below_the_models_own_forward_backward():
    """Peak RSS growth (a fresh subprocess each, weights paged in first) of Saliency explaining one token after a
    2,048-token SmolLM2 prompt, over the model's own forward+backward (full logits) at that length: <= 1.3."""
    reference, ours = _probe("reference"), _probe("saliency")
    assert reference["tokens"] == ours["tokens"] == 2049
    assert ours["passes"]["forward_rows"] == 1 and ours["passes"]["backward_rows"] == 1
    ratio = ours["growth_mb"] / reference["growth_mb"]
    assert reference["growth_mb"] > 1000, reference  # the measurement sees the activations of 2,048 tokens
    assert ratio <= 1.3, (ours, reference)
    assert ours["peak_mb"] / reference["peak_mb"] <= 1.3


def test_targets_fall_back_to_one_backward_pass_each_without_vmap(llama_lm, monkeypatch):
    """A model whose backward vmap cannot batch still gets every target's own gradient, one pass per target."""
    model, tokenizer = llama_lm
    prompt, continuation = "The room was clean and", " the staff were"
    batched = Saliency(progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
    grad = torch.autograd.grad

    def no_vmap(*args, is_grads_batched=False, **kwargs):
        if is_grads_batched:
            raise RuntimeError("vmap: this operation has no batching rule")
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", no_vmap)
    looped = Saliency(progress=False).attribute(model, tokenizer, prompt, continuation=continuation)
    n = looped.scores.shape[0]
    np.testing.assert_allclose(looped.scores, batched.scores, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert looped.params["passes"]["forward"] == 1 and looped.params["passes"]["backward"] == n
