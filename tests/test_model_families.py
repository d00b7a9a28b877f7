"""Architecture coverage: every method family, IG completeness, activations, one monitored training step and an
untouched model, on a tiny random model of each common decoder and encoder family (``tests/tiny_models.py``).

Every test is parametrized by family, so a failure names it (``test_activations[gemma2]``). References are
independent of the package: Captum's Saliency and Occlusion on the model's own ``inputs_embeds`` forward, the
attention maps of an eager deep copy, ``output_hidden_states``, the residual-stream arithmetic of each block layout,
and the training loss of the same step without the monitor.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch

from interp_widgets import layers
from interp_widgets.attribution import IntegratedGradients, Occlusion, RawAttention, Saliency
from interp_widgets.concepts import collect_activations
from interp_widgets.geometry import AnisotropyMonitor
from interp_widgets.layers import UnsupportedModelError
from tests import tiny_models
from tests.conftest import model_fingerprint

CAUSAL, CLASSIFIER, MASKED = "causal-lm", "classifier", "masked-lm"
# how a block adds its sublayers to the residual stream (written here, not read from the package)
PRE, PARALLEL, POST = "pre-norm", "parallel", "post-norm"


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable
    task: str
    residual: str
    reads: str = "first"  # the position a classifier's head reads: [CLS] ("first") or the last token ("last")


FAMILIES = [
    Family("llama", tiny_models.llama_lm, CAUSAL, PRE),
    Family("qwen2", tiny_models.qwen2_lm, CAUSAL, PRE),
    Family("qwen3", tiny_models.qwen3_lm, CAUSAL, PRE),
    Family("mistral", tiny_models.mistral_lm, CAUSAL, PRE),
    Family("gemma2", tiny_models.gemma2_lm, CAUSAL, PRE),  # sandwich norms: the sublayer outputs are normalised
    Family("phi3", tiny_models.phi3_lm, CAUSAL, PRE),
    Family("gpt2", tiny_models.gpt2_lm, CAUSAL, PRE),
    Family("gpt_neox", tiny_models.gpt_neox_lm, CAUSAL, PARALLEL),
    Family("llama_classifier", tiny_models.llama_classifier, CLASSIFIER, PRE, reads="last"),
    Family("bert", tiny_models.bert_classifier, CLASSIFIER, POST),
    Family("roberta", tiny_models.roberta_classifier, CLASSIFIER, POST),
    Family("deberta_v2", tiny_models.deberta_v2_classifier, CLASSIFIER, POST),
    Family("modernbert", tiny_models.modernbert_classifier, CLASSIFIER, PRE),
    Family("bert_masked_lm", tiny_models.bert_masked_lm, MASKED, POST),
]
PROMPT, CONTINUATION = "The room was quiet and", " the"  # " the" is one BPE token
CLASS_TEXT, MASKED_TEXT = "The room was quiet.", "The room was [MASK]."
TEXTS = ["The room was quiet.", "A long and dull film, far too slow.", "Good."]

by_family = pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])


def untouched_state(model, tokenizer) -> dict:
    """The model fingerprint plus the attention implementation of every configuration (eager switches restore it)."""
    state = model_fingerprint(model, tokenizer)
    state["attn_implementation"] = [
        getattr(m.config, "_attn_implementation", None) for m in model.modules() if hasattr(m, "config")
    ]
    return state


def call(family: Family, method, model, tokenizer):
    text = {CAUSAL: PROMPT, CLASSIFIER: CLASS_TEXT, MASKED: MASKED_TEXT}[family.task]
    options = {"continuation": CONTINUATION} if family.task == CAUSAL else {}
    return method.attribute(model, tokenizer, text, **options)


def logits_of(model, embeds):
    return model(inputs_embeds=embeds, attention_mask=torch.ones(embeds.shape[:2], dtype=torch.long)).logits


def targets_of(family: Family, model, tokenizer, ids) -> list[tuple[int, int]]:
    """``(target id, position whose logits score it)`` of every target, found here: the forced continuation tokens
    of a causal LM, the predicted class of a classifier (read at [CLS] or the last token), the predicted token at the
    mask of a masked LM."""
    embeds = embed(model, ids)
    if family.task == CAUSAL:
        start = len(tokenizer(PROMPT)["input_ids"])
        return [(int(ids[p]), p - 1) for p in range(start, len(ids))]
    with torch.no_grad():
        logits = logits_of(model, embeds)[0]
    if family.task == CLASSIFIER:
        return [(int(logits.argmax()), 0 if family.reads == "first" else len(ids) - 1)]
    mask = int(np.flatnonzero(ids == tokenizer.mask_token_id)[0])
    return [(int(logits[mask].argmax()), mask)]


def score_function(family: Family, model, target_id: int, position: int):
    """``f(embeds (B, T, D)) -> (B,)``: the score the package explains (the logit, or the log-probability for causal
    LMs, the package's defaults), written from scratch."""

    def f(embeds):
        logits = logits_of(model, embeds)
        if family.task == CLASSIFIER:
            return logits[:, target_id]
        if family.task == MASKED:
            return logits[:, position, target_id]
        return torch.log_softmax(logits[:, position].float(), dim=-1)[:, target_id]

    return f


def embed(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model.get_input_embeddings()(torch.as_tensor(ids)[None]).detach()


def pad_baseline(model, tokenizer, ids, special) -> torch.Tensor:
    """The package's default baseline, written here: special tokens keep their embedding, others get the pad's."""
    embeds = embed(model, ids)
    pad = embed(model, [tokenizer.pad_token_id])[0, 0]
    return torch.where(torch.as_tensor(np.asarray(special, bool))[:, None], embeds[0], pad)[None]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """d = 32 matrices gain nothing from intra-op threads, and on a busy machine two OpenMP threads wait for each
    other (a 32 × 64 linear took 25 ms with two threads and 0.3 ms with one, under load): one thread here, restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models(one_thread):
    return {family.name: family.build() for family in FAMILIES}


_TWINS: dict[int, torch.nn.Module] = {}


def eager_twin(model):
    """An eager deep copy of ``model`` for references: asking a transformers 5 model for ``output_attentions`` or
    ``output_hidden_states`` installs output-capturing hooks on it for good, which would show up as leftover hooks."""
    if id(model) not in _TWINS:
        _TWINS[id(model)] = copy.deepcopy(model).eval()
        _TWINS[id(model)].set_attn_implementation("eager")
    return _TWINS[id(model)]


def ids_of(family: Family, tokenizer) -> np.ndarray:
    """The token ids the package explains: the prompt plus the forced continuation for causal LMs."""
    if family.task == CAUSAL:
        return np.asarray(
            tokenizer(PROMPT)["input_ids"] + tokenizer(CONTINUATION, add_special_tokens=False)["input_ids"]
        )
    return np.asarray(tokenizer(CLASS_TEXT if family.task == CLASSIFIER else MASKED_TEXT)["input_ids"])


# ------------------------------------------------------------------------------------------------ method families
@by_family
def test_gradient_perturbation_and_attention_methods_match_references(family, models):
    from captum.attr import Occlusion as CaptumOcclusion
    from captum.attr import Saliency as CaptumSaliency

    model, tokenizer = models[family.name]
    before = untouched_state(model, tokenizer)
    ids = ids_of(family, tokenizer)
    saliency = call(family, Saliency(progress=False), model, tokenizer)
    occlusion = call(family, Occlusion(progress=False), model, tokenizer)
    attention = call(family, RawAttention(progress=False), model, tokenizer)
    assert untouched_state(model, tokenizer) == before
    model.train()  # a model in train mode is explained in eval mode (no dropout) and handed back in train mode
    try:
        in_training = call(family, Saliency(progress=False), model, tokenizer)
        assert all(m.training for m in model.modules())
    finally:
        model.eval()
    np.testing.assert_array_equal(in_training.scores, saliency.scores)
    targets = targets_of(family, model, tokenizer, ids)
    for result in (saliency, occlusion, attention):
        assert result.target_ids.tolist() == [target for target, _ in targets]
    assert saliency.scores.shape == attention.scores.shape == (len(targets), len(ids))

    embeds = embed(model, ids)
    special = np.asarray(saliency.special_mask, bool)
    added = [tokenizer.bos_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id]  # [MASK] is a real position
    assert special.tolist() == [family.task != CAUSAL and i in added for i in ids.tolist()]
    with torch.no_grad():
        maps = eager_twin(model)(input_ids=torch.as_tensor(ids)[None], output_attentions=True).attentions
    last_layer = maps[-1][0].mean(0).double().numpy()  # (T, T), heads averaged
    for t, (target_id, position) in enumerate(targets):
        f = score_function(family, model, target_id, position)
        visible = slice(0, position + 1 if family.task == CAUSAL else len(ids))  # a causal LM target sees its prefix
        gradient = CaptumSaliency(f).attribute(embeds.clone().requires_grad_(), abs=False)[0]
        np.testing.assert_allclose(
            saliency.scores[t, visible], gradient.norm(dim=-1).double().numpy()[visible], rtol=1e-4, atol=1e-6
        )
        assert np.isnan(saliency.scores[t, visible.stop :]).all()

        drops = CaptumOcclusion(f).attribute(
            embeds.clone(),
            sliding_window_shapes=(1, embeds.shape[-1]),
            baselines=pad_baseline(model, tokenizer, ids, special),
        )[0, :, 0]
        kept = ~special
        kept[visible.stop :] = False  # a later token cannot move this target: NaN
        expected = np.where(kept[~special], drops.double().numpy()[~special], np.nan)  # one unit per word piece
        np.testing.assert_allclose(occlusion.scores[t], expected, rtol=1e-4, atol=1e-5)

        np.testing.assert_allclose(attention.scores[t, visible], last_layer[position, visible], atol=1e-6)


@by_family
def test_integrated_gradients_completeness(family, models):
    model, tokenizer = models[family.name]
    before = untouched_state(model, tokenizer)
    # keep_first=False: the reference baseline below (pad_baseline) replaces the first token too
    result = call(family, IntegratedGradients(progress=False, keep_first=False), model, tokenizer)
    assert untouched_state(model, tokenizer) == before
    ids = ids_of(family, tokenizer)
    embeds, baseline = embed(model, ids), pad_baseline(model, tokenizer, ids, result.special_mask)
    targets = targets_of(family, model, tokenizer, ids)
    assert result.target_ids.tolist() == [target for target, _ in targets]
    with torch.no_grad():
        for t, (target_id, position) in enumerate(targets):
            f = score_function(family, model, target_id, position)
            delta = float(f(embeds)[0] - f(baseline)[0])  # f(x) − f(baseline), computed here
            total = float(np.nansum(result.scores[t]))
            assert abs(total - delta) <= 0.01 * max(abs(delta), 1e-3), (family.name, t, total, delta)
            np.testing.assert_allclose(result.score_delta[t], delta, rtol=1e-4, atol=1e-6)
    assert (result.relative_completeness_error <= 0.01).all()


# ------------------------------------------------------------------------------------------------ activations
def _block_arithmetic(family, model, got):
    pre, attn, mlp, out = (got[f"layer:0{p}"] for p in (".resid_pre", ".attn_out", ".mlp_out", ""))
    if family.residual == PARALLEL:
        torch.testing.assert_close(out, pre + attn + mlp, atol=1e-5, rtol=1e-5)
        return
    mid = got["layer:0.resid_mid"]
    if family.residual == PRE:
        torch.testing.assert_close(mid, pre + attn, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out, mid + mlp, atol=1e-5, rtol=1e-5)
    else:  # post-norm: each sum goes through the block's own LayerNorm
        block = layers.blocks(model)[1][0]
        with torch.no_grad():
            torch.testing.assert_close(mid, block.attention.output.LayerNorm(pre + attn), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out, block.output.LayerNorm(mid + mlp), atol=1e-5, rtol=1e-5)


@by_family
def test_activations_by_canonical_layer_name(family, models):
    """The store at ``layer:0`` (block 0 of 2: its output is ``hidden_states[1]``, before any final norm) holds the
    model's own hidden states, and the sub-points obey the residual arithmetic of the block layout."""
    model, tokenizer = models[family.name]
    before = untouched_state(model, tokenizer)
    store = collect_activations(model, tokenizer, TEXTS, layer="layer:0", progress=False)
    assert store.layer == "layer:0" and store.dim == 32
    block_path = layers.blocks(model)[0]
    assert layers.resolve_layer(model, f"{block_path}.0").name == layers.resolve_layer(model, 0).name == "layer:0"
    for text_id, text in enumerate(TEXTS):
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            hidden = eager_twin(model)(
                **{k: v for k, v in enc.items() if k != "token_type_ids"}, output_hidden_states=True
            ).hidden_states[1][0]
        rows = store.text_rows(text_id)
        np.testing.assert_allclose(store[rows], hidden[store.positions[rows]].numpy(), atol=1e-5)
    special = set(tokenizer.all_special_ids)
    assert not special & set(store.token_ids.tolist())

    points = [".resid_pre", ".attn_out", ".mlp_out", ""] + ([] if family.residual == PARALLEL else [".resid_mid"])
    got = {}
    for point in points:
        one = collect_activations(
            model, tokenizer, TEXTS[1], layer=f"layer:0{point}", include_special=True, progress=False
        )
        assert one.layer == f"layer:0{point}"
        got[f"layer:0{point}"] = torch.as_tensor(one.to_numpy())
    _block_arithmetic(family, model, got)
    if family.residual == PARALLEL:
        with pytest.raises(UnsupportedModelError, match="in parallel.*resid_pre \\+ attn_out \\+ mlp_out"):
            layers.resolve_layer(model, "layer:0.resid_mid")
        assert "layer:0.resid_mid" not in layers.layer_names(model)
    assert untouched_state(model, tokenizer) == before


# ------------------------------------------------------------------------------------------------ training
def _batch(family, tokenizer):
    enc = tokenizer(TEXTS, padding=True, return_tensors="pt")
    batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    if family.task == CLASSIFIER:
        batch["labels"] = torch.tensor([2, 0, 1])
    elif family.task == CAUSAL:
        batch["labels"] = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    else:
        labels = torch.full_like(enc["input_ids"], -100)
        labels[:, 2] = enc["input_ids"][:, 2]
        batch["input_ids"] = enc["input_ids"].clone()
        batch["input_ids"][:, 2] = tokenizer.mask_token_id
        batch["labels"] = labels
    return batch


def _one_step(model, batch, monitored: bool, special_ids):
    model = copy.deepcopy(model).train()  # dropout on
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    monitor = None
    if monitored:
        # a fixed proxy basis, so that the one step is measured (the default first fits the proxy on early steps)
        basis = torch.linalg.qr(torch.randn(32, 4, generator=torch.Generator().manual_seed(0)))[0]
        monitor = AnisotropyMonitor(
            model,
            ["layer:0"],
            rank=4,
            n_controls=5,
            fit="fixed",
            basis=basis,
            max_tokens=64,
            optimizer=optimizer,
            special_token_ids=special_ids,
        )
    torch.manual_seed(7)
    if monitor is not None:
        with monitor:
            monitor.track(0)
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
    else:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
    return model, loss.detach(), monitor


@by_family
def test_one_monitored_training_step_is_bit_identical(family, models):
    model, tokenizer = models[family.name]
    before = untouched_state(model, tokenizer)
    batch = _batch(family, tokenizer)
    plain, plain_loss, _ = _one_step(model, batch, False, tokenizer.all_special_ids)
    watched, loss, monitor = _one_step(model, batch, True, tokenizer.all_special_ids)
    assert torch.equal(loss, plain_loss)  # bit for bit
    for (name, a), b in zip(plain.named_parameters(), watched.parameters()):
        assert torch.equal(a, b), name
    assert monitor.steps.tolist() == [0]
    steps, ratio = monitor.series("energy_ratio|layer:0")
    assert np.isfinite(ratio).all() and ratio[0] > 0
    # the hooks the model had before (the shared tiny models may carry transformers' own output-capturing hooks)
    assert untouched_state(watched, tokenizer)["hooks"] == before["hooks"] and watched.training
    assert untouched_state(model, tokenizer) == before


@by_family
def test_attention_methods_name_the_fix_when_eager_attention_is_unavailable(family, models):
    """SDPA models switch to eager attention for the call and back; one that cannot switch at run time (transformers
    only logs a warning) gets an error that says how to reload it, and is left as it was."""
    model, tokenizer = models[family.name]
    stuck = copy.deepcopy(model)
    stuck._can_set_attn_implementation = lambda: False
    before = untouched_state(stuck, tokenizer)
    if stuck.config._attn_implementation == "eager":  # Gemma 2 and DeBERTa-v2 default to eager: nothing to switch
        assert call(family, RawAttention(progress=False), stuck, tokenizer).scores.size
    else:
        with pytest.raises(
            UnsupportedModelError,
            match="cannot switch to eager at run time. Reload it with "
            r"from_pretrained\(\.\.\., attn_implementation='eager'\)",
        ):
            call(family, RawAttention(progress=False), stuck, tokenizer)
    assert untouched_state(stuck, tokenizer) == before
