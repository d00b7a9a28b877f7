"""activation_patching() against independent references: plain torch hooks written here (tests/interventions/
test_intervene.py's site table) and nnsight 0.7 (every patch an invoke of one trace), on tiny Llama (4 query / 2 KV
heads), GPT-2 and BERT masked-LM models and on SmolLM2; the batched path against the one-patch-per-pass path;
resid_pre at every position gives the clean run; noising is denoising with the prompts swapped; lists of pairs;
bad input; the untouched model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.interventions import PatchingResult, activation_patching
from interp_widgets.layers import UnsupportedModelError
from tests import tiny_models
from tests.conftest import model_fingerprint
from tests.interventions.test_intervene import FAMILIES, Sites, plain_hook, where

TOL = 1e-5
PROMPTS = {
    "llama": ("the cat sat on the", "the dog sat on the"),
    "gpt2": ("the cat sat on the", "the dog sat on the"),
    "bert": ("the cat sat on the [MASK] .", "the dog sat on the [MASK] ."),
}
POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "head")


def ids_of(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor([tokenizer(text)["input_ids"]])


def scored_position(tokenizer, ids: torch.Tensor) -> int:
    mask = getattr(tokenizer, "mask_token_id", None)
    hits = (ids[0] == mask).nonzero().flatten().tolist() if mask is not None else []
    return hits[0] if len(hits) == 1 else ids.shape[1] - 1


def name_of(point: str, layer: int, head: int) -> str:
    return f"layer:{layer}.head:{head}" if point == "head" else f"layer:{layer}.{point}"


def captured(model, sites: Sites, name: str, ids: torch.Tensor) -> torch.Tensor:
    """The activation at ``name`` on ``ids``, read by a plain hook written here (full width, heads side by side)."""
    module, site, index, _ = where(model, sites, name)
    store = {}
    if site == "input":

        def pre(mod, args, kwargs):
            store["x"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

        handle = module.register_forward_pre_hook(pre, with_kwargs=True)
    else:

        def post(mod, args, output):
            store["x"] = (output[0] if isinstance(output, tuple) else output).detach().clone()

        handle = module.register_forward_hook(post)
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        handle.remove()
    return store["x"]


def hook_patched_logits(model, sites, name, clean_ids, corrupt_ids, position) -> torch.Tensor:
    """Logits of the corrupt run with the clean activation at ``name`` and ``position`` set by a plain hook."""
    clean = captured(model, sites, name, clean_ids)
    _, _, _, cols = where(model, sites, name)
    cols = slice(None) if cols is None else cols
    handle = plain_hook(model, sites, name, lambda x: clean[:, [position], cols].expand_as(x), [position])
    try:
        with torch.no_grad():
            return model(input_ids=corrupt_ids).logits
    finally:
        handle.remove()


def nnsight_patched_logits(model, tokenizer, sites, name, clean_ids, corrupt_ids, positions) -> list[torch.Tensor]:
    """Logits of nnsight 0.7 patching the clean activation into the corrupt run at each position, every patch an
    invoke of one trace (a barrier orders the clean invoke's read before the writes), on a copy of the model."""
    from nnsight import LanguageModel

    twin = copy.deepcopy(model)
    traced = LanguageModel(twin, tokenizer=tokenizer)
    layer, _, sub = name.partition(".")
    path = f"{sites.blocks}.{layer.split(':')[1]}"
    site, tuple_index, cols = "output", None, slice(None)
    if sub == "resid_pre":
        site = "input"
    elif sub.startswith("head:"):
        path, site = f"{path}.{sites.out_proj}", "input"
        cols = where(model, sites, name)[3]
    else:
        inner, site, tuple_index = getattr(sites, sub)
        path = f"{path}.{inner}"

    def target():
        envoy = traced
        for part in path.split("."):
            envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
        if site == "input":
            return envoy.input
        value = envoy.nns_output if hasattr(twin.get_submodule(path), "output") else envoy.output
        return value[tuple_index] if tuple_index is not None else value

    outs = []
    with torch.no_grad(), traced.trace() as tracer:
        barrier = tracer.barrier(1 + len(positions))
        with tracer.invoke(clean_ids[0].tolist()):
            clean = target().clone()
            barrier()
        for position in positions:
            with tracer.invoke(corrupt_ids[0].tolist()):
                barrier()
                x = target()
                x[:, position, cols] = clean[:, position, cols]
                outs.append(traced.output.logits.save())
    return [out[1 + i] for i, out in enumerate(outs)]


def metric_and_top(logits: torch.Tensor, position: int, answer: int, foil: int):
    scored = logits[0, position] if logits.dim() == 3 else logits[0]
    probs = torch.softmax(scored, -1).topk(5)
    return float(scored[answer] - scored[foil]), probs.values.numpy(), probs.indices.numpy()


@pytest.mark.filterwarnings("ignore:Module .* has pre-defined a `output` attribute:UserWarning")  # nnsight on BERT
@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_runs_match_a_plain_hook_and_nnsight(family):
    sites = FAMILIES[family]
    model, tokenizer = sites.build()
    clean_text, corrupt_text = PROMPTS[family]
    clean_ids, corrupt_ids = ids_of(tokenizer, clean_text), ids_of(tokenizer, corrupt_text)
    position = scored_position(tokenizer, clean_ids)
    result = activation_patching(model, tokenizer, clean_text, corrupt_text, points=POINTS, layers=[1], heads=[1],
                                 progress=False)  # fmt: skip
    answer, foil = int(result.pair.answer_ids[0]), int(result.pair.foil_ids[0])
    changed = 0.0
    for panel in result.panels:
        name = name_of(panel.point, 1, 1)
        theirs_nn = nnsight_patched_logits(
            model, tokenizer, sites, name, clean_ids, corrupt_ids, range(clean_ids.shape[1])
        )
        for p in range(clean_ids.shape[1]):
            reference = hook_patched_logits(model, sites, name, clean_ids, corrupt_ids, p)
            assert (reference - theirs_nn[p]).abs().max() <= TOL, (name, p)
            value, top_probs, top_ids = metric_and_top(reference, position, answer, foil)
            assert abs(panel.raw[0, 0, p] - value) <= TOL, (name, p)
            np.testing.assert_allclose(panel.top_probs[0, 0, p], top_probs, atol=TOL)
            assert (panel.top_ids[0, 0, p] == top_ids).all()
            changed = max(changed, abs(value - result.baseline.corrupt_metric))
    assert changed > 1e-3, "no patch changed the metric: the comparison would be empty"


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert"])
@pytest.mark.parametrize("positions", ["each", "all"])
def test_batched_path_equals_one_patch_per_pass(family, positions):
    model, tokenizer = FAMILIES[family].build()
    clean, corrupt = PROMPTS[family]
    options = dict(points=POINTS, positions=positions, direction="noise", metric="kl", progress=False)
    batched = activation_patching(model, tokenizer, [clean, corrupt], [corrupt, clean], **options)
    plain = activation_patching(model, tokenizer, [clean, corrupt], [corrupt, clean], batched=False, **options)
    for a, b in zip(batched.panels, plain.panels):
        assert np.abs(a.raw - b.raw).max() <= TOL
        assert np.abs(a.top_probs - b.top_probs).max() <= TOL


def test_a_small_batch_budget_gives_the_same_numbers():
    model, tokenizer = tiny_models.llama_lm()
    clean, corrupt = PROMPTS["llama"]
    big = activation_patching(model, tokenizer, clean, corrupt, points=("head",), progress=False)
    small = activation_patching(model, tokenizer, clean, corrupt, points=("head",), max_batch_tokens=8, progress=False)
    assert np.abs(big.panels[0].raw - small.panels[0].raw).max() <= TOL


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert"])
def test_resid_pre_at_every_position_gives_the_clean_run_at_every_layer(family):
    model, tokenizer = FAMILIES[family].build()
    clean, corrupt = PROMPTS[family]
    result = activation_patching(model, tokenizer, clean, corrupt, positions="all", progress=False)
    assert np.abs(result.panels[0].raw[:, 0, 0] - result.baseline.clean_metric).max() <= TOL
    assert np.abs(result.panels[0].values - 1).max() <= 1e-4
    noised = activation_patching(model, tokenizer, clean, corrupt, positions="all", direction="noise", progress=False)
    assert np.abs(noised.panels[0].raw[:, 0, 0] - noised.baseline.corrupt_metric).max() <= TOL
    assert np.abs(noised.panels[0].values).max() <= 1e-4


def test_noising_is_denoising_with_the_prompts_swapped():
    model, tokenizer = tiny_models.llama_lm()
    clean, corrupt = PROMPTS["llama"]
    first = activation_patching(model, tokenizer, clean, corrupt, points=POINTS, progress=False)
    answer, foil = int(first.pair.answer_ids[0]), int(first.pair.foil_ids[0])
    noised = activation_patching(model, tokenizer, clean, corrupt, answer=answer, foil=foil, points=POINTS,
                                 direction="noise", progress=False)  # fmt: skip
    swapped = activation_patching(model, tokenizer, corrupt, clean, answer=answer, foil=foil, points=POINTS,
                                  progress=False)  # fmt: skip
    for a, b in zip(noised.panels, swapped.panels):
        assert np.abs(a.raw - b.raw).max() <= TOL
        # the normalisation keeps 0 = corrupt, 1 = clean: swapping the prompts turns v into 1 - v
        assert np.abs(a.values - (1 - b.values)).max() <= 1e-4


def test_lists_of_pairs_give_the_mean_and_the_spread():
    model, tokenizer = tiny_models.gpt2_lm()
    cleans = ["the cat sat on the", "the dog sat on the"]
    corrupts = ["the dog sat on the", "the cat sat on the"]
    both = activation_patching(model, tokenizer, cleans, corrupts, answer=" the", foil=" on", points=("resid_pre", "head"),
                               progress=False)  # fmt: skip
    singles = [
        activation_patching(
            model, tokenizer, c, r, answer=" the", foil=" on", points=("resid_pre", "head"), progress=False
        )
        for c, r in zip(cleans, corrupts)
    ]
    assert both.pair.n_pairs == 2
    assert both.baseline.clean_metric == pytest.approx(np.mean([s.baseline.clean_metric for s in singles]))
    for i, panel in enumerate(both.panels):
        values = np.stack([s.panels[i].values for s in singles])
        np.testing.assert_allclose(panel.values, values.mean(0), atol=1e-4)
        np.testing.assert_allclose(panel.spread, values.std(0), atol=1e-4)
        np.testing.assert_allclose(panel.raw, np.stack([s.panels[i].raw for s in singles]).mean(0), atol=TOL)
        assert panel.spread.max() > 1e-3
    assert (singles[0].panels[0].spread == 0).all()


def test_metrics_answer_prob_kl_and_a_callable():
    model, tokenizer = tiny_models.gpt2_lm()
    clean, corrupt = PROMPTS["gpt2"]
    clean_ids, corrupt_ids = ids_of(tokenizer, clean), ids_of(tokenizer, corrupt)
    with torch.no_grad():
        p_clean = torch.softmax(model(input_ids=clean_ids).logits[0, -1], -1)
        p_corrupt = torch.softmax(model(input_ids=corrupt_ids).logits[0, -1], -1)
    prob = activation_patching(model, tokenizer, clean, corrupt, metric="answer_prob", progress=False)
    assert prob.pair.answer_ids[0] == int(p_clean.argmax())  # the default answer: the clean run's top token
    assert prob.baseline.clean_metric == pytest.approx(float(p_clean.max()), abs=1e-6)
    assert prob.baseline.corrupt_metric == pytest.approx(float(p_corrupt[p_clean.argmax()]), abs=1e-6)
    assert prob.pair.foils is None
    kl = activation_patching(model, tokenizer, clean, corrupt, metric="kl", positions="all", progress=False)
    expected = float((p_clean * (p_clean.log() - p_corrupt.log())).sum())
    assert kl.baseline.corrupt_metric == pytest.approx(expected, abs=1e-5)
    assert kl.baseline.clean_metric == pytest.approx(0.0, abs=1e-6)
    assert np.abs(kl.panels[0].values - 1).max() <= 1e-4
    custom = activation_patching(model, tokenizer, clean, corrupt, metric=lambda logits, pair: logits[:, 261] * 2,
                                 progress=False)  # fmt: skip
    assert custom.setting.metric == "custom"
    with torch.no_grad():
        expected = 2 * float(model(input_ids=clean_ids).logits[0, -1, 261])
    assert custom.baseline.clean_metric == pytest.approx(expected, abs=1e-5)


def test_save_load_and_dataframe(tmp_path):
    model, tokenizer = tiny_models.llama_lm()
    clean, corrupt = PROMPTS["llama"]
    result = activation_patching(model, tokenizer, [clean, corrupt], [corrupt, clean], points=("mlp_out", "head"),
                                 direction="noise", progress=False)  # fmt: skip
    again = PatchingResult.load(result.save(tmp_path / "p.safetensors"))
    assert again.setting == result.setting and again.tokens == result.tokens and again.pair.foils == result.pair.foils
    for a, b in zip(again.panels, result.panels):
        for name in ("values", "raw", "spread", "top_ids", "top_probs", "vocab_ids"):
            assert np.array_equal(getattr(a, name), getattr(b, name))
        assert a.units == b.units and a.positions == b.positions and a.top_tokens == b.top_tokens
    frame = result.to_dataframe()
    assert len(frame) == 2 * 8 + 2 * 4 * 8
    row = frame[(frame.point == "head") & (frame.layer == 1) & (frame.unit == "H2") & (frame.position == 3)].iloc[0]
    assert row.value == result.panel("head").values[1, 2, 3] and row.token == result.tokens[3]


def test_token_text_is_escaped_in_the_html():
    model, tokenizer = tiny_models.gpt2_lm()
    result = activation_patching(model, tokenizer, "<b>the cat sat", "<b>the dog sat", answer=" on", foil=" the",
                                 progress=False)  # fmt: skip
    assert "<b>the" not in result._repr_html_() and "&lt;b&gt;the" in result._repr_html_()


# ---------------------------------------------------------------------------------------------------- bad input
def test_prompts_of_different_lengths_are_refused():
    model, tokenizer = tiny_models.gpt2_lm()
    with pytest.raises(ValueError, match="same token count. Change the corrupt prompt"):
        activation_patching(model, tokenizer, "the cat sat", "the elephant sat", progress=False)
    with pytest.raises(ValueError, match="pair 1 has .* all prompts need the same token count"):
        activation_patching(model, tokenizer, ["the cat sat", "a cat"], ["the dog sat", "a dog"], progress=False)


def test_a_pair_that_does_not_separate_is_refused():
    model, tokenizer = tiny_models.gpt2_lm()
    with pytest.raises(ValueError, match="does not separate the behaviour.*Choose a corrupt prompt"):
        activation_patching(model, tokenizer, "the cat sat", "the cat sat", answer=" on", foil=" the", progress=False)


def test_an_answer_of_several_tokens_is_refused():
    model, tokenizer = tiny_models.gpt2_lm()
    with pytest.raises(ValueError, match="answer ' mat' is 2 tokens .* pass a single token"):
        activation_patching(model, tokenizer, "the cat sat", "the dog sat", answer=" mat", foil=" the", progress=False)
    with pytest.raises(ValueError, match="the answer and the foil are the same token"):
        activation_patching(model, tokenizer, "the cat sat", "the dog sat", answer=" on", foil=" on", progress=False)


def test_a_head_that_does_not_exist_is_refused():
    model, tokenizer = tiny_models.llama_lm()
    with pytest.raises(ValueError, match=r"head 4 does not exist.*use layer:0.head:0 .. layer:0.head:3"):
        activation_patching(model, tokenizer, "the cat sat", "the dog sat", points="head", heads=[4], progress=False)


def test_resid_mid_on_parallel_residual_blocks_is_refused():
    model, tokenizer = tiny_models.gpt_neox_lm()
    with pytest.raises(UnsupportedModelError, match="no resid_mid point.*use 'layer:0.resid_pre'"):
        activation_patching(model, tokenizer, "the cat sat", "the dog sat", points=("resid_mid",), progress=False)
    result = activation_patching(model, tokenizer, "the cat sat", "the dog sat", points=("attn_out", "mlp_out"),
                                 progress=False)  # fmt: skip
    assert result.points == ["attn_out", "mlp_out"]


def test_other_bad_arguments():
    model, tokenizer = tiny_models.gpt2_lm()
    run = lambda **kw: activation_patching(model, tokenizer, "the cat sat", "the dog sat", progress=False, **kw)  # noqa: E731
    with pytest.raises(ValueError, match="point"):
        run(points=("resid_post",))
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        run(layers=[5])
    with pytest.raises(ValueError, match="direction"):
        run(direction="sideways")
    with pytest.raises(ValueError, match="positions"):
        run(positions="some")
    with pytest.raises(ValueError, match="metric"):
        run(metric="accuracy")


def test_the_model_is_untouched_even_after_an_exception():
    model, tokenizer = tiny_models.llama_lm()
    model.train()
    before = model_fingerprint(model, tokenizer)
    activation_patching(model, tokenizer, "the cat sat", "the dog sat", points=POINTS, progress=False)
    assert model_fingerprint(model, tokenizer) == before
    calls = []

    def failing(logits, pair):
        calls.append(1)
        if len(calls) > 3:  # fails inside the patched runs, with their hooks installed
            raise RuntimeError("boom")
        return logits[:, 0]

    for batched in (True, False):
        calls.clear()
        with pytest.raises(RuntimeError, match="boom"):
            activation_patching(model, tokenizer, "the cat sat", "the dog sat", metric=failing, points=POINTS,
                                batched=batched, progress=False)  # fmt: skip
        assert model_fingerprint(model, tokenizer) == before
    model.eval()


def test_smollm2_patched_runs_match_a_plain_hook():
    from interp_widgets import demo

    model, tokenizer = demo.load_lm(progress=False)
    clean, corrupt = "The Eiffel Tower is in the city of", "The Colosseum is in the city of"
    options = dict(answer=" Paris", foil=" Rome", layers=[20], points=("resid_pre", "head"), heads=[0, 7],
                   progress=False)  # fmt: skip
    batched = activation_patching(model, tokenizer, clean, corrupt, **options)
    plain = activation_patching(model, tokenizer, clean, corrupt, batched=False, **options)
    for a, b in zip(batched.panels, plain.panels):
        assert np.abs(a.raw - b.raw).max() <= 1e-4
    sites = Sites(lambda: (model, tokenizer), "model.layers", ("self_attn", "output", 0), ("mlp", "output", None),
                  ("post_attention_layernorm", "input", None), "self_attn.o_proj", None)  # fmt: skip
    clean_ids, corrupt_ids = ids_of(tokenizer, clean), ids_of(tokenizer, corrupt)
    answer, foil = int(batched.pair.answer_ids[0]), int(batched.pair.foil_ids[0])
    for point, unit, name in (("resid_pre", 0, "layer:20.resid_pre"), ("head", 1, "layer:20.head:7")):
        for p in (2, clean_ids.shape[1] - 1):
            logits = hook_patched_logits(model, sites, name, clean_ids, corrupt_ids, p)
            value = metric_and_top(logits, clean_ids.shape[1] - 1, answer, foil)[0]
            assert abs(batched.panel(point).raw[0, unit, p] - value) <= 1e-4


# ---------------------------------------------------------------------------------------------------- q, k, v, pattern
#: (projection module in a block, offset of q / k / v in its output in head widths: a fused c_attn is [q | k | v])
QKV_SITES = {
    "llama": {"q": ("self_attn.q_proj", 0), "k": ("self_attn.k_proj", 0), "v": ("self_attn.v_proj", 0)},
    "gpt2": {"q": ("attn.c_attn", 0), "k": ("attn.c_attn", 1), "v": ("attn.c_attn", 2)},
    "bert": {"q": ("attention.self.query", 0), "k": ("attention.self.key", 0), "v": ("attention.self.value", 0)},
}


def module_output(module, model, ids) -> torch.Tensor:
    store = {}
    handle = module.register_forward_hook(lambda mod, args, out: store.setdefault("x", out.detach().clone()))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        handle.remove()
    return store["x"]


def qkv_reference(model, sites, point, family, unit, clean_ids, corrupt_ids, position):
    """The corrupt run with one q / k / v head's clean projection output at ``position`` (a plain forward hook)."""
    path, offset = QKV_SITES[family][point]
    module = model.get_submodule(sites.blocks)[1].get_submodule(path)
    config = model.config
    width = config.hidden_size // config.num_attention_heads
    start = offset * config.hidden_size + unit * width
    clean = module_output(module, model, clean_ids)

    def post(mod, args, out):
        out = out.clone()
        out[:, position, start : start + width] = clean[:, position, start : start + width]
        return out

    handle = module.register_forward_hook(post)
    try:
        with torch.no_grad():
            return model(input_ids=corrupt_ids).logits
    finally:
        handle.remove()


def pattern_reference(model, sites, family, head, clean_ids, corrupt_ids, position):
    """The corrupt run with head ``head``'s output at ``position`` recomputed from the clean pattern row: the clean
    eager attention weights (a copy of the model switched to eager) times the corrupt run's value vectors (read at
    the value projection), written at the output projection's input by a plain hook."""
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        pattern = eager(input_ids=clean_ids, output_attentions=True).attentions[1][0, head]
    config = model.config
    width = config.hidden_size // config.num_attention_heads
    n_kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    kv = head // (config.num_attention_heads // n_kv)
    path, offset = QKV_SITES[family]["v"]
    values = module_output(model.get_submodule(sites.blocks)[1].get_submodule(path), model, corrupt_ids)
    start = offset * config.hidden_size + kv * width
    row = pattern[position] @ values[0, :, start : start + width]
    handle = plain_hook(model, sites, f"layer:1.head:{head}", lambda x: row.expand_as(x), [position])
    try:
        with torch.no_grad():
            return model(input_ids=corrupt_ids).logits
    finally:
        handle.remove()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_q_k_v_and_pattern_patches_match_independent_references(family):
    sites = FAMILIES[family]
    model, tokenizer = sites.build()
    clean_text, corrupt_text = PROMPTS[family]
    clean_ids, corrupt_ids = ids_of(tokenizer, clean_text), ids_of(tokenizer, corrupt_text)
    position = scored_position(tokenizer, clean_ids)
    implementation = model.config._attn_implementation
    result = activation_patching(model, tokenizer, clean_text, corrupt_text, points=("q", "k", "v", "pattern"),
                                 layers=[1], progress=False)  # fmt: skip
    assert model.config._attn_implementation == implementation
    answer, foil = int(result.pair.answer_ids[0]), int(result.pair.foil_ids[0])
    n_kv = getattr(model.config, "num_key_value_heads", None) or model.config.num_attention_heads
    assert result.panel("k").units == [f"KV{j}" for j in range(n_kv)]
    assert result.panel("q").units == [f"H{h}" for h in range(model.config.num_attention_heads)]
    changed = 0.0
    for point in ("q", "k", "v", "pattern"):
        panel = result.panel(point)
        unit = len(panel.units) - 1
        for p in (1, 2, position):
            if point == "pattern":
                logits = pattern_reference(model, sites, family, unit, clean_ids, corrupt_ids, p)
            else:
                logits = qkv_reference(model, sites, point, family, unit, clean_ids, corrupt_ids, p)
            value = metric_and_top(logits, position, answer, foil)[0]
            assert abs(panel.raw[0, unit, p] - value) <= TOL, (point, p)
            changed = max(changed, abs(value - result.baseline.corrupt_metric))
    assert changed > 1e-3


def test_smollm2_has_three_kv_heads_per_layer():
    from interp_widgets import demo

    model, tokenizer = demo.load_lm(progress=False)
    result = activation_patching(model, tokenizer, "The Eiffel Tower is in", "The Colosseum is in", answer=" Paris",
                                 foil=" Rome", points=("k", "v"), layers=[3], positions="all", progress=False)  # fmt: skip
    assert result.panel("k").units == ["KV0", "KV1", "KV2"] and result.panel("v").values.shape == (1, 3, 1)


def test_patterns_need_eager_attention_and_say_how_to_reload():
    model, tokenizer = tiny_models.llama_lm()
    stuck = copy.deepcopy(model)
    stuck._can_set_attn_implementation = lambda: False  # a model that cannot switch at run time
    before = model_fingerprint(stuck, tokenizer)
    with pytest.raises(UnsupportedModelError, match="only eager attention computes.*attn_implementation='eager'"):
        activation_patching(stuck, tokenizer, "the cat sat", "the dog sat", points="pattern", progress=False)
    assert model_fingerprint(stuck, tokenizer) == before
