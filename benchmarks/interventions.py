"""Interventions benchmarks on SmolLM2-135M (2 threads): ``python benchmarks/interventions.py [part ...]``.

Parts:

- ``attribution``: attribution patching of a 16-token SmolLM2 pair, every point type from one backward pass, divided
  by one plain forward + backward of the model on the same prompt (the gradient taken with respect to the input
  embeddings only). Goal <= 2.0. Then its Spearman correlation and top-20 overlap against exact activation patching,
  per point type (info, no goal: report what it is).

Example:
    $ python benchmarks/interventions.py attribution
"""

from __future__ import annotations

import os
import sys
import time

import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(2)

import _repo  # noqa: E402, F401

from interp_widgets import demo  # noqa: E402
from interp_widgets.interventions import attribution_patching  # noqa: E402

#: a 16-token IOI pair on SmolLM2 (both prompts tokenise to 16 tokens; asserted below)
ATTRIBUTION_PAIR = (
    "When Mary and John went to the shop yesterday, John gave a cold drink to",
    "When Mary and John went to the shop yesterday, Mary gave a cold drink to",
)
ATTRIBUTION_ANSWER, ATTRIBUTION_FOIL = " Mary", " John"
ATTRIBUTION_POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "head")


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def attribution(model, tokenizer, repeat: int = 5, points=ATTRIBUTION_POINTS) -> None:
    """Attribution patching (every point type, one backward pass) over one forward + backward; Spearman vs exact.
    ``points`` and ``repeat`` shrink it for a quick check that it runs."""
    from interp_widgets.interventions import activation_patching

    clean, corrupt = ATTRIBUTION_PAIR
    ids = tokenizer(corrupt, return_tensors="pt")["input_ids"]
    assert ids.shape[1] == len(tokenizer(clean)["input_ids"]) == 16, "the benchmark pair must be 16 tokens each"
    answer, foil = (
        tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (ATTRIBUTION_ANSWER, ATTRIBUTION_FOIL)
    )

    def estimate():
        return attribution_patching(
            model,
            tokenizer,
            clean,
            corrupt,
            answer=ATTRIBUTION_ANSWER,
            foil=ATTRIBUTION_FOIL,
            points=points,
        )

    def forward_backward():
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds).logits[:, -1]
        torch.autograd.grad((logits[:, answer] - logits[:, foil]).sum(), embeds)

    result = estimate()  # warm-up
    forward_backward()
    ours = _best(estimate, repeat)
    floor = _best(forward_backward, repeat)
    print(
        f"info: attribution patching of {len(points)} point types {ours * 1000:.1f} ms, one forward + backward {floor * 1000:.1f} ms"
    )
    print(f"bench: attribution_patching_over_forward_backward = {ours / floor:.3f} (goal <= 2.0)")

    exact = activation_patching(
        model, tokenizer, clean, corrupt, answer=ATTRIBUTION_ANSWER, foil=ATTRIBUTION_FOIL, points=points,
        progress=False,
    )  # fmt: skip
    agreement = result.agreement(exact, k=20)
    for point, row in agreement.to_dict().items():
        print(
            f"info: attribution_vs_exact {point}: spearman = {row['spearman']:.3f}, "
            f"top-{row['k']} overlap = {row['top_k_overlap']:.2f} ({row['cells']} cells)"
        )


PARTS = {"attribution": attribution}


def main(names: list[str]) -> None:
    unknown = [name for name in names if name not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part(s) {unknown}; choose from {list(PARTS)}")
    model, tokenizer = demo.load_lm(progress=False)
    for name in names or list(PARTS):
        print(f"-- {name}", flush=True)
        PARTS[name](model, tokenizer)


if __name__ == "__main__":
    main(sys.argv[1:])
