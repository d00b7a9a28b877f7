"""intervene(freeze=, freeze_on=) against frozen norms and MLPs written out here from the modules' weights."""

from __future__ import annotations

import copy

import pytest
import torch

from interp_widgets.interventions import Add, intervene
from tests import tiny_models
from tests.conftest import model_fingerprint

TOL = 1e-5
PROMPT = torch.tensor([[5, 6, 7, 8, 9, 10]])
OTHER = torch.tensor([[11, 60, 7, 90, 9, 33]])
BERT_PROMPT = torch.tensor([[101, 2204, 2143, 2001, 103, 102]])
BERT_OTHER = torch.tensor([[101, 2919, 2143, 2003, 103, 102]])


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def reference_freeze(model, kind: str, parts):
    """Hooks, written here, that hold what ``parts`` names at its value on PROMPT: the norm scale from the norm's
    input (RMS: sqrt(mean x² + eps); LayerNorm: sqrt(var x + eps)) and the norm applied with the weights; the MLP
    outputs recorded. Returns the handles."""
    norms = [m for m in model.modules() if type(m).__name__ in ("LlamaRMSNorm", "LayerNorm")]
    mlps = [block.mlp for block in (model.model.layers if kind == "llama" else model.transformer.h)]
    scales, outs, handles = {}, {}, []

    def rms(x):
        centred = x - x.mean(-1, keepdim=True) if kind == "gpt2" else x
        eps = model.config.rms_norm_eps if kind == "llama" else model.config.layer_norm_epsilon
        return torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps), centred

    for m in norms:
        handles.append(
            m.register_forward_hook(lambda mod, args, out: scales.update({mod: scales.get(mod, rms(args[0])[0])}))
        )
    for m in mlps:
        handles.append(m.register_forward_hook(lambda mod, args, out: outs.update({mod: outs.get(mod, out.clone())})))
    logits(model, PROMPT)
    for h in handles:
        h.remove()
    handles = []
    if "norms" in parts:
        for m in norms:

            def frozen(mod, args, out):
                _, centred = rms(args[0])
                y = mod.weight * centred / scales[mod]
                return y + mod.bias if kind == "gpt2" else y

            handles.append(m.register_forward_hook(frozen))
    if "mlp" in parts:
        for m in mlps:
            handles.append(m.register_forward_hook(lambda mod, args, out: outs[mod]))
    return handles


@pytest.mark.parametrize("parts", [("norms",), ("mlp",), ("norms", "mlp")], ids=["norms", "mlp", "both"])
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_freezing_matches_hooks_written_from_the_weights(kind, parts):
    model, _ = (tiny_models.llama_lm if kind == "llama" else tiny_models.gpt2_lm)()
    direction = torch.randn(32, generator=torch.Generator().manual_seed(5))
    with intervene(model, {"layer:0.resid_pre": Add(direction, 0.5)}, freeze=parts, freeze_on=PROMPT):
        ours = logits(model, PROMPT)
    handles = reference_freeze(model, kind, parts)
    try:
        with intervene(model, {"layer:0.resid_pre": Add(direction, 0.5)}):
            theirs = logits(model, PROMPT)
    finally:
        for h in handles:
            h.remove()
    with intervene(model, {"layer:0.resid_pre": Add(direction, 0.5)}):
        unfrozen = logits(model, PROMPT)
    assert (ours - unfrozen).abs().max() > 1e-3, "freezing changed nothing: the comparison would be empty"
    # frozen norms are linear, so the edit moves the logits far (to ~1e3 here): float32 agreement is relative
    assert (ours - theirs).abs().max() <= TOL * max(1.0, float(ours.abs().max()))
    # without an edit, the prompt the values were frozen on runs as it does unfrozen
    with intervene(model, {}, freeze=parts, freeze_on=PROMPT):
        frozen_plain = logits(model, PROMPT)
    assert (frozen_plain - logits(model, PROMPT)).abs().max() <= 1e-6


def test_freezing_leaves_the_model_untouched_and_refuses_bad_input():
    model, tokenizer = tiny_models.llama_lm()
    before = model_fingerprint(model, tokenizer)
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(model, {}, freeze=("attention", "norms", "mlp"), freeze_on={"input_ids": PROMPT}):
            logits(model, OTHER)
            raise RuntimeError("boom")
    assert model_fingerprint(model, tokenizer) == before
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(ValueError, match=r"already frozen by an enclosing intervene"):
        with intervene(model, {}, freeze="attention", freeze_on=PROMPT):
            with intervene(model, {}, freeze="attention", freeze_on=PROMPT):
                pass
    assert model_fingerprint(model, tokenizer) == before and model.config._attn_implementation == "sdpa"
    with pytest.raises(
        ValueError, match=r"frozen on a prompt of 6 tokens .* this forward pass has 3 tokens .*; freeze on"
    ):
        with intervene(model, {}, freeze="mlp", freeze_on=PROMPT):
            logits(model, PROMPT[:, :3])
    with pytest.raises(ValueError, match=r"freeze= and freeze_on= go together"):
        with intervene(model, {}, freeze="mlp"):
            pass
    with pytest.raises(ValueError, match=r"unknown freeze 'mlps'"):
        with intervene(model, {}, freeze=("mlps",), freeze_on=PROMPT):
            pass
    with pytest.raises(ValueError, match=r"pattern of LlamaAttention was frozen on a prompt of 6 tokens .*same length"):
        with intervene(model, {}, freeze=("attention",), freeze_on=PROMPT):
            logits(model, PROMPT[:, :4])
    with pytest.raises(TypeError, match=r"freeze_on must be the prompt"):
        with intervene(model, {}, freeze="norms", freeze_on="The room"):
            pass
    assert model_fingerprint(model, tokenizer) == before


def eager_patterns(model, ids) -> list[torch.Tensor]:
    """The attention patterns of every layer on ``ids``, from an eager copy of the model (output_attentions)."""
    twin = copy.deepcopy(model)
    twin.set_attn_implementation("eager")
    with torch.no_grad():
        return list(twin(input_ids=ids, output_attentions=True).attentions)


def value_heads(model, kind: str, layer: int, captured: dict) -> torch.Tensor:
    """(batch, heads, tokens, head_dim) values of one layer from its projection's captured output, GQA repeated."""
    config = model.config
    heads = config.num_attention_heads
    if kind == "llama":
        v = captured[layer]
        kv = config.num_key_value_heads
        v = v.unflatten(-1, (kv, v.shape[-1] // kv)).transpose(1, 2)
        return v.repeat_interleave(heads // kv, dim=1)
    v = captured[layer].split(config.hidden_size, dim=-1)[2] if kind == "gpt2" else captured[layer]
    return v.unflatten(-1, (heads, v.shape[-1] // heads)).transpose(1, 2)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "bert"])
def test_frozen_attention_is_the_prompts_pattern_times_the_new_values(kind):
    build = {"llama": tiny_models.llama_lm, "gpt2": tiny_models.gpt2_lm, "bert": tiny_models.bert_masked_lm}[kind]
    model, tokenizer = build()
    prompt, other = (PROMPT, OTHER) if kind != "bert" else (BERT_PROMPT, BERT_OTHER)
    before = model_fingerprint(model, tokenizer)
    implementation = model.config._attn_implementation
    with intervene(model, {}, freeze="attention", freeze_on=prompt):
        ours = logits(model, other)
        same = logits(model, prompt)
    assert model_fingerprint(model, tokenizer) == before and model.config._attn_implementation == implementation
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert "interp_widgets_frozen_attention" not in AttentionInterface._global_mapping
    assert "interp_widgets_frozen_attention" not in AttentionMaskInterface._global_mapping
    patterns = eager_patterns(model, prompt)
    blocks = model.get_submodule({"llama": "model.layers", "gpt2": "transformer.h", "bert": "bert.encoder.layer"}[kind])
    value_of = {"llama": "self_attn.v_proj", "gpt2": "attn.c_attn", "bert": "attention.self.value"}[kind]
    out_of = {"llama": "self_attn.o_proj", "gpt2": "attn.c_proj", "bert": "attention.output.dense"}[kind]
    captured, handles = {}, []
    for i, block in enumerate(blocks):
        handles.append(
            block.get_submodule(value_of).register_forward_hook(lambda m, args, out, i=i: captured.__setitem__(i, out))
        )
        handles.append(
            block.get_submodule(out_of).register_forward_pre_hook(
                lambda m, args, i=i: (
                    (patterns[i] @ value_heads(model, kind, i, captured)).transpose(1, 2).flatten(2),
                    *args[1:],
                )
            )
        )
    try:
        theirs = logits(model, other)
    finally:
        for h in handles:
            h.remove()
    assert (ours - logits(model, other)).abs().max() > 1e-3, "freezing changed nothing: the comparison would be empty"
    assert (ours - theirs).abs().max() <= TOL
    assert (same - logits(model, prompt)).abs().max() <= TOL


FAMILIES = {
    "llama": tiny_models.llama_lm,
    "qwen3": tiny_models.qwen3_lm,
    "gemma2": tiny_models.gemma2_lm,
    "phi3": tiny_models.phi3_lm,
    "gpt_neox": tiny_models.gpt_neox_lm,
    "gpt2": tiny_models.gpt2_lm,
    "bert": tiny_models.bert_masked_lm,
    "roberta": tiny_models.roberta_classifier,
    "deberta_v2": tiny_models.deberta_v2_classifier,
    "modernbert": tiny_models.modernbert_classifier,
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_freezing_everything_on_the_prompt_itself_changes_nothing_and_then_holds(family):
    """On its own prompt the frozen model is the model; on another it differs; or freezing is refused by name."""
    model, tokenizer = FAMILIES[family]()
    before = model_fingerprint(model, tokenizer)
    ids = torch.tensor([tokenizer("The room was quiet and")["input_ids"]])
    other = ids.clone()
    other[0, 1:-1] = ids[0, 1:-1].flip(0)  # the same tokens (and specials) in another order
    try:
        with intervene(model, {}, freeze=("attention", "norms", "mlp"), freeze_on=ids):
            same, changed = logits(model, ids), logits(model, other)
    except Exception as err:  # noqa: BLE001 -- the refusal must name the part to leave out
        assert "leave 'attention' out of freeze=" in str(err), err
        with intervene(model, {}, freeze=("norms", "mlp"), freeze_on=ids):
            same, changed = logits(model, ids), logits(model, other)
    assert (same - logits(model, ids)).abs().max() <= TOL
    assert (changed - logits(model, other)).abs().max() > 1e-4
    assert model_fingerprint(model, tokenizer) == before


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma2", "phi3", "gpt2", "bert", "modernbert"])
def test_a_resid_mid_edit_reaches_the_block_output_exactly(family):
    """With the MLP outputs held, block output = resid_mid + mlp_out, so adding s·d at resid_mid moves the block
    output by exactly s·d: the edit is in the residual stream, not only in what the MLP reads (post-norm BERT
    normalises after the sum, so there the edit must move the output at all)."""
    from interp_widgets.layers import capture

    model, tokenizer = FAMILIES[family]()
    ids = torch.tensor([tokenizer("The room was quiet and")["input_ids"]])
    d = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(7))
    outputs = []
    for scale in (0.0, 0.5):
        with intervene(model, {"layer:1.resid_mid": Add(d, scale)}, freeze="mlp", freeze_on=ids):
            with capture(model, ["layer:1"]) as acts:
                logits(model, ids)
        outputs.append(acts["layer:1"][0])
    shift = outputs[1] - outputs[0]
    if family == "bert":
        assert shift.abs().max() > 1e-3
    else:
        assert (shift - 0.5 * d).abs().max() <= TOL
