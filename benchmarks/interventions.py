"""Interventions speed (issue 31): activation patching, attribution patching and the patching view.

SmolLM2-135M (``demo.load_lm``), 2 threads, an IOI pair of 16 tokens ("When Mary and John went to the big store, John
gave a cold drink to" against "... Mary gave ...", answer " Mary", foil " John"). Prints ``bench:`` / ``info:`` lines:

Part ``exact``:
1. exact_patching_over_one_per_pass: exact resid_pre patching of all 30 layers × every position (480 patched runs),
   ``activation_patching`` (batched rows that start at their block) ÷ our own one-patch-per-forward-pass path
   (``batched=False``: one ``intervene`` and one whole-model forward per patch). Goal <= 0.3. The two results'
   largest raw difference is printed (it must be <= 1e-4).
2. info: ours ÷ nnsight 0.7 with all 480 patches as invokes of one trace (a barrier orders the clean invoke's read
   before the writes); for information, no goal.

Part ``attribution``:
1. attribution_patching_over_forward_backward: attribution patching of the same pair, every point type (resid_pre,
   attn_out, mlp_out, resid_mid, head, q, k, v, pattern) from its one backward pass, ÷ one plain forward + backward
   of the model on the corrupt prompt (the gradient taken with respect to the input embeddings only). Goal <= 2.0.
2. info: its Spearman correlation and top-20 overlap against exact activation patching, per point type (no goal:
   report what it is).

Part ``view`` (``benchmarks/_patching_view.py``): the patching view of 30 layers × 1,000 positions in headless
chromium: first paint < 150 ms and hover < 50 ms.

``--tiny`` runs every part on the tiny Llama of ``tests/tiny_models.py`` (a check that the script runs; its
numbers mean nothing).

Example:
    $ python benchmarks/interventions.py
    $ python benchmarks/interventions.py --parts exact --tiny
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import numpy as np
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(2)

import _repo  # noqa: E402,F401  (the repository root on sys.path)

from interp_widgets.interventions import activation_patching, attribution_patching  # noqa: E402
from interp_widgets.layers import blocks  # noqa: E402

from _patching_view import view as view_part  # noqa: E402

PARTS = ("exact", "attribution", "view")
CLEAN = "When Mary and John went to the big store, John gave a cold drink to"
CORRUPT = "When Mary and John went to the big store, Mary gave a cold drink to"
TINY_CLEAN, TINY_CORRUPT = "the cat sat on the", "the dog sat on the"


def timed(fn, repeats: int = 1):
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def load(tiny: bool):
    if tiny:
        from tests import tiny_models

        model, tokenizer = tiny_models.llama_lm()
        return model, tokenizer, TINY_CLEAN, TINY_CORRUPT, {}
    from interp_widgets import demo

    model, tokenizer = demo.load_lm(progress=False)
    for text in (CLEAN, CORRUPT):
        n = len(tokenizer(text)["input_ids"])
        assert n == 16, f"the benchmark pair must be 16 SmolLM2 tokens, {text!r} is {n}"
    return model, tokenizer, CLEAN, CORRUPT, {"answer": " Mary", "foil": " John"}


def nnsight_all_invokes(model, tokenizer, clean: str, corrupt: str) -> list[torch.Tensor]:
    """The logits of every resid_pre patch (layer-major, then position) from nnsight 0.7: one trace, one invoke per
    patch, on a copy of the model (nnsight wraps the modules it traces)."""
    from nnsight import LanguageModel

    path, found = blocks(model)
    twin = copy.deepcopy(model)
    traced = LanguageModel(twin, tokenizer=tokenizer)
    clean_ids = tokenizer(clean)["input_ids"]
    corrupt_ids = tokenizer(corrupt)["input_ids"]
    n_layers, n_tokens = len(found), len(clean_ids)

    def block(i):
        envoy = traced
        for part in path.split("."):
            envoy = getattr(envoy, part)
        return envoy[i]

    outs = []
    with torch.no_grad(), traced.trace() as tracer:
        # one barrier per layer: the clean invoke reads the layer's input, then that layer's patches write it
        barriers = [tracer.barrier(1 + n_tokens) for _ in range(n_layers)]
        cleans = {}
        with tracer.invoke(clean_ids):
            for layer in range(n_layers):
                cleans[layer] = block(layer).input.clone()
                barriers[layer]()
        for layer in range(n_layers):
            for position in range(n_tokens):
                with tracer.invoke(corrupt_ids):
                    barriers[layer]()
                    block(layer).input[:, position] = cleans[layer][:, position]
                    # the model's output is the whole batch's: this invoke's row is 1 + its patch index
                    outs.append(traced.output.logits[1 + layer * n_tokens + position, -1].save())
    return outs


def exact_part(model, tokenizer, clean, corrupt, answers, repeats):
    options = dict(points=("resid_pre",), positions="each", progress=False, **answers)
    activation_patching(model, tokenizer, clean, corrupt, layers=[0], **options)  # warm-up
    ours_t, ours = timed(lambda: activation_patching(model, tokenizer, clean, corrupt, **options), repeats)
    plain_t, plain = timed(lambda: activation_patching(model, tokenizer, clean, corrupt, batched=False, **options), 1)
    difference = float(np.abs(ours.panels[0].raw - plain.panels[0].raw).max())
    n_layers, _, n_tokens = ours.panels[0].shape
    print(f"info: {n_layers} layers x {n_tokens} positions = {n_layers * n_tokens} patched runs")
    print(f"info: ours {ours_t:.2f}s, one patch per pass {plain_t:.2f}s, max |raw difference| {difference:.2e}")
    print(f"bench: exact_patching_over_one_per_pass = {ours_t / plain_t:.3f} (goal <= 0.3)")
    nnsight_t, outs = timed(lambda: nnsight_all_invokes(model, tokenizer, clean, corrupt), 1)
    answer, foil = int(ours.pair.answer_ids[0]), int(ours.pair.foil_ids[0])
    theirs = np.array([float(out[answer] - out[foil]) for out in outs]).reshape(n_layers, n_tokens)
    difference = float(np.abs(ours.panels[0].raw[:, 0] - theirs).max())
    print(f"info: nnsight, every patch an invoke of one trace, {nnsight_t:.2f}s, max |raw difference| {difference:.2e}")
    print(f"info: exact_patching_over_nnsight = {ours_t / nnsight_t:.3f} (no goal)")


# ---------------------------------------------------------------------------------------------------------------------
# part "attribution" (helper attrpatch): attribution patching on the same pair, every point type from one backward
# pass, ÷ one forward + backward (goal <= 2.0), and its Spearman against exact patching per point type.
# ---------------------------------------------------------------------------------------------------------------------
ATTRIBUTION_POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "head", "q", "k", "v", "pattern")


def attribution_part(model, tokenizer, clean, corrupt, answers, repeats, points=ATTRIBUTION_POINTS):
    options = dict(points=points, **answers)
    result = attribution_patching(model, tokenizer, clean, corrupt, **options)  # warm-up; its answer and foil
    answer, foil = int(result.pair.answer_ids[0]), int(result.pair.foil_ids[0])
    ids = tokenizer(corrupt, return_tensors="pt")["input_ids"]

    def forward_backward():
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds).logits[:, -1]
        torch.autograd.grad((logits[:, answer] - logits[:, foil]).sum(), embeds)

    forward_backward()
    ours_t, _ = timed(lambda: attribution_patching(model, tokenizer, clean, corrupt, **options), repeats)
    floor_t, _ = timed(forward_backward, repeats)
    print(
        f"info: attribution patching of {len(points)} point types {ours_t:.3f}s, one forward + backward {floor_t:.3f}s"
    )
    print(f"bench: attribution_patching_over_forward_backward = {ours_t / floor_t:.3f} (goal <= 2.0)")
    exact = activation_patching(model, tokenizer, clean, corrupt, progress=False, **options)
    for point, row in result.agreement(exact, k=20).to_dict().items():
        print(
            f"info: attribution vs exact, {point}: spearman = {row['spearman']:.3f}, top-{row['k']} overlap = "
            f"{row['top_k_overlap']:.2f} ({row['cells']} cells)"
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to run (default: all)")
    parser.add_argument("--tiny", action="store_true", help="a tiny Llama instead of SmolLM2: checks the script runs")
    args = parser.parse_args(argv)
    model, tokenizer, clean, corrupt, answers = load(args.tiny)
    if "exact" in args.parts:
        exact_part(model, tokenizer, clean, corrupt, answers, repeats=1 if args.tiny else 2)
    if "attribution" in args.parts:
        attribution_part(model, tokenizer, clean, corrupt, answers, repeats=1 if args.tiny else 5)
    if "view" in args.parts:
        view_part(model, tokenizer)


if __name__ == "__main__":
    main()
