"""attribution_patching() against independent references written here: plain torch hooks with ``retain_grad`` for
the gradients, plain hooks patching a_corr + eps (a_clean - a_corr) for the first-order check (the error must be a
second-order remainder), per-pair means; the untouched model; bad input."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.interventions import attribution_patching
from tests import tiny_models
from tests.conftest import model_fingerprint
from tests.interventions.test_intervene import FAMILIES, plain_hook, where

CLEAN, CORRUPT = "the cat sat on the", "the dog sat on the"
ANSWER, FOIL = 507, 97
KINDS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "head")
HEAD_KINDS = ("q", "k", "v", "pattern")
#: per family, written out by hand: the module whose output holds q / k / v (and which third of a fused one), and
#: the attention module whose output[1] is the pattern (batch, heads, query, key) under eager attention
QKV = {
    "llama": {"q": ("self_attn.q_proj", None), "k": ("self_attn.k_proj", None), "v": ("self_attn.v_proj", None)},
    "gpt2": {"q": ("attn.c_attn", 0), "k": ("attn.c_attn", 1), "v": ("attn.c_attn", 2)},
}
ATTENTION = {"llama": "self_attn", "gpt2": "attn"}


def float64(family: str, eager: bool = False):
    """The family's tiny model as a float64 copy (the test's own, eager attention if asked), with its tokenizer."""
    model, tokenizer = FAMILIES[family].build()
    twin = copy.deepcopy(model).double().eval()
    if eager:
        twin.set_attn_implementation("eager")
    return twin, tokenizer


def ids_of(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor([tokenizer(text)["input_ids"]])


def metric(logits: torch.Tensor) -> torch.Tensor:
    """logit(answer) - logit(foil) at the last position, one per row."""
    return logits[:, -1, ANSWER] - logits[:, -1, FOIL]


def spec(kind: str, layer: int, unit: int = 0) -> str:
    return f"layer:{layer}.head:{unit}" if kind == "head" else f"layer:{layer}.{kind}"


def grab(model, family: str, kind: str, layer: int, store: dict, retain: bool):
    """A plain hook that keeps the tensor at (kind, layer) (the whole o_proj input for heads, the whole projection
    output for q / k / v), optionally with ``retain_grad``; returns its handle."""
    block = model.get_submodule(FAMILIES[family].blocks)[layer]
    if kind in QKV[family]:
        module, site, index = block.get_submodule(QKV[family][kind][0]), "output", None
    elif kind == "pattern":
        module, site, index = block.get_submodule(ATTENTION[family]), "output", 1
    else:
        module, site, index, _ = where(model, FAMILIES[family], spec(kind, layer))

    def keep(tensor):
        if retain:
            tensor.retain_grad()
        store[kind, layer] = tensor

    if site == "input":
        return module.register_forward_pre_hook(
            lambda m, args, kwargs: keep(args[0] if args else kwargs["hidden_states"]), with_kwargs=True
        )
    return module.register_forward_hook(lambda m, args, out: keep(out[index] if index is not None else out))


def n_layers(model) -> int:
    return model.config.num_hidden_layers


def n_units(model, kind: str) -> int:
    if kind in ("k", "v"):
        return getattr(model.config, "num_key_value_heads", model.config.num_attention_heads)
    return model.config.num_attention_heads if kind in ("head", "q", "pattern") else 1


def activations(model, family, ids, kinds, *, retain=False, score=metric):
    store: dict = {}
    handles = [grab(model, family, k, i, store, retain) for k in kinds for i in range(n_layers(model))]
    try:
        if retain:
            value = score(model(input_ids=ids).logits)
            value.sum().backward()
        else:
            with torch.no_grad():
                value = score(model(input_ids=ids).logits)
    finally:
        for handle in handles:
            handle.remove()
    return store, value.detach()


def reference(model, family, run_ids, source_ids, kinds, score=metric) -> dict[str, np.ndarray]:
    """(a_source - a_run) . dM/da at every cell, from plain hooks and ``.backward()`` on the test's own copy:
    {kind: (layers, units, positions)} (one pair)."""
    source, _ = activations(model, family, source_ids, kinds)
    run, _ = activations(model, family, run_ids, kinds, retain=True, score=score)
    out = {}
    for kind in kinds:
        per_layer = []
        for layer in range(n_layers(model)):
            a, grad = run[kind, layer], run[kind, layer].grad
            diff = (source[kind, layer] - a.detach()) * grad
            if kind == "pattern":  # (batch, heads, query, key): a unit is a head, a position its query
                per_layer.append(diff.sum(-1)[0])
                continue
            third = QKV[family].get(kind, (None, None))[1]
            if third is not None:  # GPT-2's fused c_attn: [q | k | v]
                width = model.config.hidden_size
                diff = diff[..., third * width : (third + 1) * width]
            per_layer.append(diff.unflatten(-1, (n_units(model, kind), -1)).sum(-1)[0].T)  # (units, positions)
        out[kind] = torch.stack(per_layer).numpy()
    return out


@pytest.mark.parametrize("direction", ["denoise", "noise"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_estimates_equal_a_plain_hook_autograd_reference(family, direction):
    model, tokenizer = float64(family)
    clean, corrupt = ids_of(tokenizer, CLEAN), ids_of(tokenizer, CORRUPT)
    result = attribution_patching(
        model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=KINDS, direction=direction
    )
    run, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    expected = reference(model, family, run, source, KINDS)
    _, m_run = activations(model, family, run, ())
    base = result.baseline.corrupt_metrics if direction == "denoise" else result.baseline.clean_metrics
    assert abs(base[0] - float(m_run[0])) < 1e-9
    for kind in KINDS:
        panel = result.panel(kind)
        got = panel.raw.astype(np.float64) - base[0]
        assert got.shape == expected[kind].shape == (n_layers(model), n_units(model, kind), clean.shape[1])
        assert np.abs(expected[kind]).max() > 1e-3, f"{kind}: the reference is empty"
        np.testing.assert_allclose(got, expected[kind], atol=2e-6, rtol=0)
        clean_m, corrupt_m = result.baseline.clean_metric, result.baseline.corrupt_metric
        np.testing.assert_allclose(panel.values, (panel.raw - corrupt_m) / (clean_m - corrupt_m), atol=1e-5)
    assert result.setting.method == "attribution" and result.panels[0].top_ids is None


def exact_change(model, family, kind, layer, unit, position, value, run_ids, m_run) -> float:
    """The metric change of the run with ``value`` set at one cell, by a plain hook written in the test suite."""
    point = spec(kind, layer, unit)
    handle = plain_hook(model, FAMILIES[family], point, lambda x: value.expand_as(x), [position])
    try:
        with torch.no_grad():
            return float(metric(model(input_ids=run_ids).logits)[0] - m_run)
    finally:
        handle.remove()


@pytest.mark.parametrize(
    "kind, direction", [*[(kind, "denoise") for kind in KINDS], ("resid_pre", "noise"), ("head", "noise")]
)
def test_the_error_of_the_estimate_is_second_order(kind, direction):
    """Patch a_run + eps (a_source - a_run) exactly at every cell: |exact - eps * estimate| summed over the cells
    must fall by >= 3.5x at each halving of eps (a first-order estimate leaves an O(eps^2) remainder)."""
    family = "llama"
    model, tokenizer = float64(family)
    clean, corrupt = ids_of(tokenizer, CLEAN), ids_of(tokenizer, CORRUPT)
    run_ids, source_ids = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    result = attribution_patching(
        model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=(kind,), direction=direction
    )
    base = result.baseline.corrupt_metrics[0] if direction == "denoise" else result.baseline.clean_metrics[0]
    linear = result.panel(kind).raw.astype(np.float64) - base
    source, _ = activations(model, family, source_ids, (kind,))
    run, m_run = activations(model, family, run_ids, (kind,))
    width = model.config.hidden_size // n_units(model, kind)
    errors = []
    for eps in (0.1, 0.05, 0.025):
        total, moved = 0.0, 0.0
        for layer in range(n_layers(model)):
            for unit in range(n_units(model, kind)):
                cols = slice(unit * width, (unit + 1) * width)
                for position in range(clean.shape[1]):
                    a_run, a_source = run[kind, layer][0, position, cols], source[kind, layer][0, position, cols]
                    value = a_run + eps * (a_source - a_run)
                    exact = exact_change(model, family, kind, layer, unit, position, value, run_ids, m_run[0])
                    total += abs(exact - eps * linear[layer, unit, position])
                    moved += abs(exact)
        assert moved > 1e-4, "the patches change nothing: the check would be empty"
        errors.append(total)
    assert errors[0] / errors[1] >= 3.5, errors
    assert errors[1] / errors[2] >= 3.5, errors


def test_pairs_give_the_mean_and_spread_of_single_pairs():
    model, tokenizer = tiny_models.llama_lm()
    cleans, corrupts = [CLEAN, "the dog sat on a"], [CORRUPT, "the cat sat on a"]
    both = attribution_patching(model, tokenizer, cleans, corrupts, answer=ANSWER, foil=FOIL, points=("head",))
    singles = [
        attribution_patching(model, tokenizer, c, r, answer=ANSWER, foil=FOIL, points=("head",))
        for c, r in zip(cleans, corrupts)
    ]
    values = np.stack([s.panel("head").values for s in singles])
    raws = np.stack([s.panel("head").raw for s in singles])
    np.testing.assert_allclose(both.panel("head").values, values.mean(0), atol=1e-5)
    np.testing.assert_allclose(both.panel("head").spread, values.std(0), atol=1e-5)
    np.testing.assert_allclose(both.panel("head").raw, raws.mean(0), atol=1e-5)
    assert both.pair.n_pairs == 2 and np.abs(both.panel("head").spread).max() > 1e-3


def test_all_positions_is_the_sum_over_positions():
    model, tokenizer = tiny_models.llama_lm()
    each = attribution_patching(model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=("resid_pre",))
    every = attribution_patching(
        model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=("resid_pre",), positions="all"
    )
    base = each.baseline.corrupt_metric
    assert every.panel("resid_pre").positions == ["all"]
    np.testing.assert_allclose(
        every.panel("resid_pre").raw[..., 0] - base, (each.panel("resid_pre").raw - base).sum(-1), atol=1e-5
    )


class Boom(Exception):
    pass


@pytest.mark.parametrize("setup", ["plain", "frozen params with a grad", "training mode", "metric raises"])
def test_the_model_is_untouched(setup):
    model, tokenizer = copy.deepcopy(tiny_models.llama_lm()[0]), tiny_models.llama_lm()[1]
    if setup == "frozen params with a grad":
        for p in model.parameters():
            p.requires_grad_(False)
        model.lm_head.weight.grad = torch.full_like(model.lm_head.weight, 7.0)
        model.model.norm.weight.requires_grad_(True)
    if setup == "training mode":
        model.train()
    before = model_fingerprint(model, tokenizer)
    grad_before = None if model.lm_head.weight.grad is None else model.lm_head.weight.grad.clone()

    def explode(logits, pair):
        raise Boom()

    kwargs = {"metric": explode} if setup == "metric raises" else {"answer": ANSWER, "foil": FOIL}
    if setup == "metric raises":
        with pytest.raises(Boom):
            attribution_patching(model, tokenizer, CLEAN, CORRUPT, points=KINDS + HEAD_KINDS, **kwargs)
    else:
        result = attribution_patching(model, tokenizer, CLEAN, CORRUPT, points=KINDS + HEAD_KINDS, **kwargs)
        assert np.abs(result.panel("head").values).max() > 0
    assert model_fingerprint(model, tokenizer) == before
    assert model.config._attn_implementation == "sdpa"  # "pattern" ran on eager attention, then switched back
    from transformers import AttentionInterface

    from interp_widgets.interventions.patching import _PATTERN_EDITS

    assert not _PATTERN_EDITS and "interp_widgets_patched_pattern" not in AttentionInterface._global_mapping
    if grad_before is not None:
        assert torch.equal(model.lm_head.weight.grad, grad_before)


def test_bad_input_names_the_fix():
    model, tokenizer = tiny_models.llama_lm()
    with pytest.raises(ValueError, match="gradient is exactly zero.*direction='denoise'"):
        attribution_patching(model, tokenizer, CLEAN, CORRUPT, metric="kl", direction="noise")
    with pytest.raises(ValueError, match="same token count"):  # the check shared with activation patching
        attribution_patching(model, tokenizer, CLEAN, "the elephant sat on the", answer=ANSWER, foil=FOIL)
    with pytest.raises(ValueError, match="point"):
        attribution_patching(model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=("neurons",))
    with pytest.raises(ValueError, match="does not separate"):
        attribution_patching(model, tokenizer, CLEAN, CLEAN, answer=ANSWER, foil=FOIL)
    neox, neox_tokenizer = tiny_models.gpt_neox_lm()
    with pytest.raises(TypeError, match="no resid_mid"):
        attribution_patching(neox, neox_tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=("resid_mid",))


@pytest.mark.parametrize("positions", ["each", "all"])
def test_verify_reruns_the_top_cells_exactly(positions, tmp_path):
    family = "llama"
    model, tokenizer = float64(family)
    clean, corrupt = ids_of(tokenizer, CLEAN), ids_of(tokenizer, CORRUPT)
    result = attribution_patching(
        model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=KINDS, positions=positions
    )
    check = result.verify(top_k=6, sample=4, seed=1)
    frame = check.to_dataframe()
    assert frame["chosen"].tolist() == ["top"] * 6 + ["sample"] * 4
    every = np.concatenate([np.abs(panel.values).reshape(-1) for panel in result.panels])
    np.testing.assert_allclose(np.sort(np.abs(frame["estimate"][:6])), np.sort(every)[-6:], atol=1e-7)
    source, _ = activations(model, family, clean, KINDS)
    clean_m, corrupt_m = result.baseline.clean_metric, result.baseline.corrupt_metric
    width = model.config.hidden_size // model.config.num_attention_heads
    for row in frame.itertuples():
        unit = int(row.unit[1:]) if row.point == "head" else 0
        cols = slice(unit * width, (unit + 1) * width) if row.point == "head" else slice(None)
        value = source[row.point, row.layer][:, :, cols]
        where = list(range(clean.shape[1])) if positions == "all" else [row.position]
        handle = plain_hook(model, FAMILIES[family], spec(row.point, row.layer, unit), lambda x: value[:, where], where)
        try:
            with torch.no_grad():
                exact = float(metric(model(input_ids=corrupt).logits)[0])
        finally:
            handle.remove()
        assert abs(row.exact_raw - exact) < 1e-9
        assert abs(row.exact - (exact - corrupt_m) / (clean_m - corrupt_m)) < 1e-9
        assert abs(row.error - (row.estimate - row.exact)) < 1e-12
    assert frame["exact"].abs().max() > 0.1
    loaded = type(result).load(result.save(tmp_path / "estimate.safetensors"))
    with pytest.raises(ValueError, match="Run attribution_patching"):
        loaded.verify()


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_agreement_with_exact_patching_on_a_tiny_llama(direction):
    from scipy.stats import spearmanr

    from interp_widgets.interventions import activation_patching

    model, tokenizer = tiny_models.llama_lm()
    common = dict(answer=ANSWER, foil=FOIL, points=KINDS, direction=direction)
    estimate = attribution_patching(model, tokenizer, CLEAN, CORRUPT, **common)
    exact = activation_patching(model, tokenizer, CLEAN, CORRUPT, progress=False, **common)
    agreement = estimate.agreement(exact, k=5)
    frame = agreement.to_dataframe()
    assert frame["point"].tolist() == list(KINDS)
    base = 0.0 if direction == "denoise" else 1.0
    for kind in KINDS:
        a = estimate.panel(kind).values.reshape(-1).astype(np.float64) - base
        b = exact.panel(kind).values.reshape(-1).astype(np.float64) - base
        row = agreement[kind]
        assert row["spearman"] == pytest.approx(spearmanr(a, b).statistic, abs=1e-9)
        top_a, top_b = set(np.argsort(-np.abs(a), kind="stable")[:5]), set(np.argsort(-np.abs(b), kind="stable")[:5])
        assert row["top_k_overlap"] == pytest.approx(len(top_a & top_b) / 5)
        assert row["cells"] == a.size and row["k"] == 5
    assert set(agreement.to_dict()) == set(KINDS)
    # the estimate ranks the cells of this tiny random model roughly as exact patching does (0.39-0.97 per point)
    assert min(frame["spearman"]) > 0.3 and frame["top_k_overlap"].mean() >= 0.6, frame
    with pytest.raises(ValueError, match="differ in direction"):
        estimate.agreement(
            activation_patching(
                model,
                tokenizer,
                CLEAN,
                CORRUPT,
                progress=False,
                **{**common, "direction": "noise" if direction == "denoise" else "denoise"},
            )
        )


@pytest.mark.parametrize("name", ["answer_prob", "kl", "custom"])
def test_other_metrics_equal_the_reference(name):
    family = "llama"
    model, tokenizer = float64(family)
    clean, corrupt = ids_of(tokenizer, CLEAN), ids_of(tokenizer, CORRUPT)
    with torch.no_grad():
        clean_logprobs = torch.log_softmax(model(input_ids=clean).logits[:, -1], -1)
    scores = {
        "answer_prob": lambda logits: torch.softmax(logits[:, -1], -1)[:, ANSWER],
        "kl": lambda logits: (clean_logprobs.exp() * (clean_logprobs - torch.log_softmax(logits[:, -1], -1))).sum(-1),
        "custom": lambda logits: logits[:, -1, ANSWER] * 2 - logits[:, -1].logsumexp(-1),
    }
    given = (lambda logits, pair: scores["custom"](logits[:, None])) if name == "custom" else name
    direction = "noise" if name == "custom" else "denoise"
    result = attribution_patching(
        model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, points=KINDS, metric=given, direction=direction
    )
    run, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    expected = reference(model, family, run, source, KINDS, score=scores[name])
    base = result.baseline.corrupt_metrics[0] if direction == "denoise" else result.baseline.clean_metrics[0]
    for kind in KINDS:
        assert np.abs(expected[kind]).max() > 1e-4
        np.testing.assert_allclose(result.panel(kind).raw.astype(np.float64) - base, expected[kind], atol=2e-6)
    assert result.setting.metric == name


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_query_key_value_and_pattern_estimates_equal_the_reference(family):
    """q per query head, k and v per key / value head (2 of 4 on the tiny Llama; GPT-2's fused c_attn) and the
    pattern (eager attention) against plain hooks with ``retain_grad``, all from the same one backward pass."""
    model, tokenizer = float64(family, eager=True)
    clean, corrupt = ids_of(tokenizer, CLEAN), ids_of(tokenizer, CORRUPT)
    result = attribution_patching(model, tokenizer, CLEAN, CORRUPT, answer=ANSWER, foil=FOIL, points=HEAD_KINDS)
    expected = reference(model, family, corrupt, clean, HEAD_KINDS)
    base = result.baseline.corrupt_metrics[0]
    for kind in HEAD_KINDS:
        panel = result.panel(kind)
        assert panel.units == [f"{'KV' if kind in 'kv' else 'H'}{j}" for j in range(n_units(model, kind))]
        assert np.abs(expected[kind]).max() > 1e-4, f"{kind}: the reference is empty"
        np.testing.assert_allclose(panel.raw.astype(np.float64) - base, expected[kind], atol=2e-6, rtol=0)
    assert model.config._attn_implementation == "eager"


def test_verify_equals_exact_patching_at_its_cells_for_every_point_type():
    from interp_widgets.interventions import activation_patching

    model, tokenizer = tiny_models.llama_lm()
    common = dict(answer=ANSWER, foil=FOIL, points=KINDS + HEAD_KINDS, direction="noise")
    estimate = attribution_patching(model, tokenizer, CLEAN, CORRUPT, **common)
    exact = activation_patching(model, tokenizer, CLEAN, CORRUPT, progress=False, **common)
    frame = estimate.verify(top_k=12, sample=12, seed=3).to_dataframe()
    assert len(set(frame["point"])) >= 4
    for row in frame.itertuples():
        panel = exact.panel(row.point)
        cell = (panel.layers.index(row.layer), panel.units.index(row.unit), row.position)
        assert abs(row.exact - panel.values[cell]) < 1e-4, row
        assert abs(row.exact_raw - panel.raw[cell]) < 1e-4, row
