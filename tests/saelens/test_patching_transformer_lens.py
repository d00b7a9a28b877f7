"""``activation_patching`` against TransformerLens's own activation patching (``transformer_lens.patching``).

The tiny GPT-2 of ``tests/tiny_models.py`` (random weights) is converted by TransformerLens's own loading code, with
no weight processing (``fold_ln``, ``center_writing_weights``, ``center_unembed``, ``fold_value_biases`` and
``refactor_factored_attn_matrices`` all off: :func:`hooked`), so that its ``HookedTransformer`` and the Hugging Face
model compute the same function. Our ``resid_pre``, ``attn_out``, ``mlp_out``, ``resid_mid`` and ``head`` panels (one
patch per position) must hold the same raw metric as ``get_act_patch_resid_pre``, ``get_act_patch_attn_out``,
``get_act_patch_mlp_out``, ``get_act_patch_resid_mid`` and ``get_act_patch_attn_head_out_by_pos`` to 1e-5 (and our
``head`` panel with every position patched at once, ``positions="all"``, as ``get_act_patch_attn_head_out_all_pos``),
with the same metric: the logit
difference (answer − foil) at the last position. TransformerLens runs each pair on its own; ours takes both pairs
at once and keeps the mean over pairs (``raw``), and normalises each pair by its own clean and corrupt metrics before
the mean and spread (``values``, ``spread``).

TransformerLens's functions denoise: they run the corrupted tokens and patch in the clean cache. Noising is the same
call with the roles swapped (the clean tokens run, the corrupt cache is patched in).

Axes: ours are ``panel.raw[layer, unit, position]`` (unit: ``"stream"`` for the residual and sublayer points, ``H0``,
``H1``, ... for heads). TransformerLens returns ``[layer, pos]`` for the residual and sublayer points (ours with the
unit axis dropped, ``raw[:, 0, :]``) and ``[layer, pos, head]`` for heads (ours with the last two axes swapped).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.interventions import activation_patching
from tests.saelens.test_transformer_lens_hooks import hooked

pytestmark = [
    pytest.mark.saelens,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

# two pairs of 13 tokens each (asserted below); the first clean prompt is repeated so that the pairs differ only in
# their corruption: a noun swap, and a verb + preposition swap
CLEAN = ["The cat sat on the mat and then the", "The cat sat on the mat and then the"]
CORRUPT = ["The dog sat on the mat and then the", "The cat ran to the mat and then the"]
POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "head")
THEIRS = {
    "resid_pre": "get_act_patch_resid_pre",
    "attn_out": "get_act_patch_attn_out",
    "mlp_out": "get_act_patch_mlp_out",
    "resid_mid": "get_act_patch_resid_mid",
    "head": "get_act_patch_attn_head_out_by_pos",
}
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def gpt2_tl(gpt2_lm, tmp_path_factory):
    hf_model, tokenizer = gpt2_lm
    return hf_model, tokenizer, hooked(hf_model, tokenizer, tmp_path_factory.mktemp("tl"))


def answer_and_foil(hf_model, tokenizer, clean: str, corrupt: str) -> tuple[int, int]:
    """The clean run's top next token, and the corrupt run's top token other than it (chosen here, not by
    ``activation_patching``'s defaults, and passed to both sides as ids)."""
    with torch.no_grad():
        clean_logits = hf_model(**tokenizer(clean, return_tensors="pt")).logits[0, -1]
        corrupt_logits = hf_model(**tokenizer(corrupt, return_tensors="pt")).logits[0, -1]
    answer = int(clean_logits.argmax())
    corrupt_logits[answer] = -torch.inf
    return answer, int(corrupt_logits.argmax())


@pytest.fixture(scope="module")
def transformer_lens_runs(gpt2_tl):
    """``runs(pair, direction)``: TransformerLens's patching of one pair (computed once per module), as
    ``(answer, foil, clean metric, corrupt metric, {point: raw array in TransformerLens's axis order})``."""
    import transformer_lens.patching as tl_patching

    hf_model, tokenizer, tl = gpt2_tl
    done = {}

    def runs(k: int, direction: str):
        if (k, direction) in done:
            return done[k, direction]
        clean_ids = tokenizer(CLEAN[k], return_tensors="pt").input_ids
        corrupt_ids = tokenizer(CORRUPT[k], return_tensors="pt").input_ids
        assert clean_ids.shape == corrupt_ids.shape == (1, 13)
        answer, foil = answer_and_foil(hf_model, tokenizer, CLEAN[k], CORRUPT[k])

        def logit_diff(logits: torch.Tensor) -> torch.Tensor:
            """TransformerLens's patching metric: logits (1, pos, vocab) -> the logit difference at the last
            position (our ``"logit_diff"``)."""
            return logits[0, -1, answer] - logits[0, -1, foil]

        with torch.no_grad():
            clean_logits, clean_cache = tl.run_with_cache(clean_ids)
            corrupt_logits, corrupt_cache = tl.run_with_cache(corrupt_ids)
            # denoising runs the corrupt tokens with the clean cache patched in; noising swaps the roles
            base, source = (corrupt_ids, clean_cache) if direction == "denoise" else (clean_ids, corrupt_cache)
            theirs = {
                point: getattr(tl_patching, name)(tl, base, source, logit_diff).numpy().astype(np.float64)
                for point, name in THEIRS.items()
            }
        done[k, direction] = answer, foil, float(logit_diff(clean_logits)), float(logit_diff(corrupt_logits)), theirs
        return done[k, direction]

    return runs


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-per-pass"])
@pytest.mark.parametrize("direction", ["denoise", "noise"])
@pytest.mark.parametrize("n_pairs", [1, 2], ids=["one-pair", "two-pairs"])
def test_activation_patching_matches_transformer_lens(gpt2_tl, transformer_lens_runs, n_pairs, direction, batched):
    hf_model, tokenizer, _ = gpt2_tl
    tl_pairs = [transformer_lens_runs(k, direction) for k in range(n_pairs)]
    answers = [run[0] for run in tl_pairs]
    foils = [run[1] for run in tl_pairs]
    clean_metrics = np.array([run[2] for run in tl_pairs])
    corrupt_metrics = np.array([run[3] for run in tl_pairs])
    assert (np.abs(clean_metrics - corrupt_metrics) > 0.1).all()  # every pair separates: normalised values mean much
    result = activation_patching(
        hf_model,
        tokenizer,
        CLEAN[:n_pairs] if n_pairs > 1 else CLEAN[0],
        CORRUPT[:n_pairs] if n_pairs > 1 else CORRUPT[0],
        answer=answers if n_pairs > 1 else answers[0],
        foil=foils if n_pairs > 1 else foils[0],
        points=POINTS,
        positions="each",
        metric="logit_diff",
        direction=direction,
        batched=batched,
        progress=False,
    )
    np.testing.assert_allclose(result.baseline.clean_metrics, clean_metrics, atol=TOLERANCE)
    np.testing.assert_allclose(result.baseline.corrupt_metrics, corrupt_metrics, atol=TOLERANCE)
    n_layers, n_heads = hf_model.config.n_layer, hf_model.config.n_head
    for point in POINTS:
        panel = result.panel(point)
        assert panel.layers == list(range(n_layers))
        assert len(panel.positions) == 13
        theirs = np.stack([run[4][point] for run in tl_pairs], axis=-1)  # TransformerLens's axes + (pair,)
        if point == "head":
            assert panel.units == [f"H{h}" for h in range(n_heads)]
            assert theirs.shape == (n_layers, 13, n_heads, n_pairs)
            theirs = theirs.transpose(0, 2, 1, 3)  # TransformerLens's (layer, pos, head) -> ours (layer, head, pos)
        else:
            assert panel.units == ["stream"]
            assert theirs.shape == (n_layers, 13, n_pairs)
            theirs = theirs[:, None]  # TransformerLens's (layer, pos) -> ours (layer, "stream", pos)
        # the patches move the metric (a comparison of constants would prove nothing) ...
        assert np.ptp(theirs) > 0.05, point
        # ... and ours move it by the same amounts: the raw metric is the mean over pairs
        difference = np.abs(panel.raw - theirs.mean(-1)).max()
        assert difference <= TOLERANCE, f"{point} {direction}: max |Δ logit diff| {difference:.2e}"
        # normalised per pair (0 = that pair's corrupt run, 1 = its clean run), then the mean and spread over pairs
        normalised = (theirs - corrupt_metrics) / (clean_metrics - corrupt_metrics)
        atol = 10 * TOLERANCE / np.abs(clean_metrics - corrupt_metrics).min()
        np.testing.assert_allclose(panel.values, normalised.mean(-1), atol=atol, err_msg=point)
        np.testing.assert_allclose(panel.spread, normalised.std(-1), atol=atol, err_msg=point)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-per-pass"])
@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_head_patching_at_all_positions_matches_transformer_lens(gpt2_tl, transformer_lens_runs, direction, batched):
    """positions="all": each head's output patched at every position at once, against
    ``get_act_patch_attn_head_out_all_pos`` ((layer, head); ours (layer, head, "all"))."""
    import transformer_lens.patching as tl_patching

    hf_model, tokenizer, tl = gpt2_tl
    answer, foil, clean_metric, corrupt_metric, _ = transformer_lens_runs(0, direction)

    def logit_diff(logits: torch.Tensor) -> torch.Tensor:
        return logits[0, -1, answer] - logits[0, -1, foil]

    clean_ids = tokenizer(CLEAN[0], return_tensors="pt").input_ids
    corrupt_ids = tokenizer(CORRUPT[0], return_tensors="pt").input_ids
    with torch.no_grad():
        _, cache = tl.run_with_cache(clean_ids if direction == "denoise" else corrupt_ids)
        base = corrupt_ids if direction == "denoise" else clean_ids
        theirs = tl_patching.get_act_patch_attn_head_out_all_pos(tl, base, cache, logit_diff).numpy()
    result = activation_patching(
        hf_model, tokenizer, CLEAN[0], CORRUPT[0], answer=answer, foil=foil, points="head", positions="all",
        direction=direction, batched=batched, progress=False,
    )  # fmt: skip
    panel = result.panel("head")
    n_layers, n_heads = hf_model.config.n_layer, hf_model.config.n_head
    assert theirs.shape == (n_layers, n_heads) and panel.raw.shape == (n_layers, n_heads, 1)
    assert panel.positions == ["all"]
    assert np.ptp(theirs) > 0.05
    difference = np.abs(panel.raw[..., 0] - theirs).max()
    assert difference <= TOLERANCE, f"head, all positions, {direction}: max |Δ logit diff| {difference:.2e}"
    expected = (theirs - corrupt_metric) / (clean_metric - corrupt_metric)
    np.testing.assert_allclose(panel.values[..., 0], expected, atol=10 * TOLERANCE / abs(clean_metric - corrupt_metric))


HEAD_PARTS = ("q", "k", "v", "pattern")


@pytest.fixture(scope="module")
def transformer_lens_head_parts(gpt2_tl, transformer_lens_runs):
    """``runs(direction, positions)``: TransformerLens's patching of the first pair's queries, keys, values and
    attention patterns per head, ``{point: (layer, pos, head) or (layer, head)}`` (computed once per module)."""
    import transformer_lens.patching as tl_patching

    _, tokenizer, tl = gpt2_tl
    done = {}

    def runs(direction: str, positions: str):
        if (direction, positions) in done:
            return done[direction, positions]
        answer, foil, *_ = transformer_lens_runs(0, direction)

        def logit_diff(logits: torch.Tensor) -> torch.Tensor:
            return logits[0, -1, answer] - logits[0, -1, foil]

        clean_ids = tokenizer(CLEAN[0], return_tensors="pt").input_ids
        corrupt_ids = tokenizer(CORRUPT[0], return_tensors="pt").input_ids
        with torch.no_grad():
            _, cache = tl.run_with_cache(clean_ids if direction == "denoise" else corrupt_ids)
            base = corrupt_ids if direction == "denoise" else clean_ids
            suffix = "by_pos" if positions == "each" else "all_pos"
            done[direction, positions] = {
                part: getattr(tl_patching, f"get_act_patch_attn_head_{part}_{suffix}")(tl, base, cache, logit_diff)
                .numpy()
                .astype(np.float64)
                for part in HEAD_PARTS
            }
        return done[direction, positions]

    return runs


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-per-pass"])
@pytest.mark.parametrize("direction", ["denoise", "noise"])
@pytest.mark.parametrize("positions", ["each", "all"])
def test_query_key_value_and_pattern_patching_match_transformer_lens(
    gpt2_tl, transformer_lens_runs, transformer_lens_head_parts, positions, direction, batched
):
    """q, k, v and pattern per head against ``get_act_patch_attn_head_{q,k,v,pattern}_by_pos`` (one query position
    at a time; for the pattern, the row of that query position) and ``..._all_pos``. GPT-2 has as many key / value
    heads as query heads, so TransformerLens's head index is our ``KV`` unit for k and v. Axes: TransformerLens's
    (layer, pos, head) for q, k and v is ours (layer, unit, pos) with the last two swapped; its pattern panel is
    (layer, head, dest pos), ours already; its (layer, head) for every position at once is ours (layer, unit,
    "all")."""
    hf_model, tokenizer, _ = gpt2_tl
    answer, foil, clean_metric, corrupt_metric, _ = transformer_lens_runs(0, direction)
    theirs = transformer_lens_head_parts(direction, positions)
    result = activation_patching(
        hf_model, tokenizer, CLEAN[0], CORRUPT[0], answer=answer, foil=foil, points=HEAD_PARTS, positions=positions,
        direction=direction, batched=batched, progress=False,
    )  # fmt: skip
    n_layers, n_heads = hf_model.config.n_layer, hf_model.config.n_head
    for part in HEAD_PARTS:
        panel = result.panel(part)
        prefix = "KV" if part in ("k", "v") else "H"
        assert panel.units == [f"{prefix}{h}" for h in range(n_heads)]
        if positions == "each" and part == "pattern":
            assert theirs[part].shape == (n_layers, n_heads, 13)  # (layer, head, dest pos): ours already
            expected = theirs[part]
        elif positions == "each":
            assert theirs[part].shape == (n_layers, 13, n_heads)
            expected = theirs[part].transpose(0, 2, 1)  # (layer, pos, head) -> ours (layer, head, pos)
        else:
            assert theirs[part].shape == (n_layers, n_heads) and panel.positions == ["all"]
            expected = theirs[part][..., None]  # (layer, head) -> ours (layer, head, "all")
        assert panel.raw.shape == expected.shape
        assert np.ptp(expected) > 0.05, part
        difference = np.abs(panel.raw - expected).max()
        assert difference <= TOLERANCE, f"{part} {positions} {direction}: max |Δ logit diff| {difference:.2e}"
        normalised = (expected - corrupt_metric) / (clean_metric - corrupt_metric)
        np.testing.assert_allclose(
            panel.values, normalised, atol=10 * TOLERANCE / abs(clean_metric - corrupt_metric), err_msg=part
        )
