"""Layer-wise views: the lens widget in headless Debian chromium, and a tuned lens fitted on SmolLM2.

Prints ``bench:`` lines:

- ``lens_widget_first_paint_ms``: a 30 layers × 1,000 positions lens view (two lenses, top-5, two targets), from
  ``render()`` to the end of the next frame, median of 5 fresh pages (goal < 150);
- ``lens_widget_hover_ms``: pointer move over a cell to the tooltip on screen at the next frame, median of 40 moves
  over different cells (goal < 50);
- ``tuned_lens_kl_ratio``: a tuned lens fitted on ``TRAIN_TOKENS`` tokens of the train split of
  ``interp_widgets.demo.load_text_corpus()`` on SmolLM2-135M-Instruct, then measured on ``EVAL_TOKENS`` tokens of
  the held-out (test) split: the mean over layers 0 … L−2 of KL(final ‖ tuned) ÷ the same mean for the logit lens
  (goal <= 0.5);
- ``tuned_lens_training_s``: its training time (residual caching included).

The lens evaluation decodes every layer of every token through SmolLM2's 49,152-token unembedding, so 20k held-out
tokens cost about 65 TFLOP (tens of minutes on two shared CPU cores). ``EVAL_TOKENS`` (default 20480),
``TRAIN_TOKENS`` (default 40000), ``STEPS``, ``BATCH`` and ``LR`` are read from the environment; the bench lines say
what was used.

Usage: PYTHONPATH=. nice -n 10 python -u benchmarks/layer_views.py [widget|tuned]
"""

from __future__ import annotations

import _repo  # noqa: F401  (the repository root on sys.path: these import tests.browser.harness)

import json
import os
import statistics
import sys
import time

import numpy as np
from _browser import MOUNT, chromium, open_page

TRIALS = 5

HOVER = """async () => {
  const canvas = document.querySelector(".iw-lens-canvas");
  const tip = document.querySelector(".iw-tooltip");
  const box = canvas.getBoundingClientRect();
  const times = [];
  for (let k = 0; k < 40; k++) {
    const x = box.left + 120 + 56 * (k % 12) + 10, y = box.top + 4 + 18 * (k % 30) + 5;
    const t0 = performance.now();
    canvas.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: x, clientY: y}));
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    times.push(performance.now() - t0);
    if (tip.hidden) throw new Error("no tooltip on hover");
  }
  times.sort((a, b) => a - b);
  return {median: times[20], worst: times[39]};
}"""


def synthetic_result(layers: int = 30, positions: int = 1000, k: int = 5, vocab: int = 2000):
    """A LensResult of the shape of SmolLM2 on a 1,000-token text (random numbers, deterministic)."""
    from interp_widgets.lens import LensResult
    from interp_widgets.targets import Targets

    rng = np.random.default_rng(0)
    N, M = 2, 2
    top_probs = np.sort(rng.dirichlet(np.ones(k + 3), size=(N, layers, positions))[..., :k], axis=-1)[..., ::-1]
    return LensResult.from_flat(
        tokens=[f"t{i % 97}" for i in range(positions)],
        token_ids=np.arange(positions) % vocab,
        layers=[f"layer:{i}" for i in range(layers)],
        lenses=["logit", "tuned"],
        top_ids=rng.integers(0, vocab, size=(N, layers, positions, k)).astype(np.int32),
        top_probs=np.ascontiguousarray(top_probs, dtype=np.float32),
        kl=rng.random((N, layers, positions)).astype(np.float32),
        target_ids=rng.integers(0, vocab, size=(positions, M)),
        targets=Targets(["next token", " the"]),
        target_probs=rng.random((N, layers, positions, M)).astype(np.float32),
        target_ranks=rng.integers(1, vocab, size=(N, layers, positions, M)).astype(np.int32),
        vocab_ids=np.arange(vocab),
        vocab_text=[f"v{i}" for i in range(vocab)],
        generated_mask=np.zeros(positions, bool),
        model_name="synthetic",
        params={"vocab_size": 49152},
    )


def bench_widget() -> None:
    from interp_widgets.widgets.export import export_state

    widget = synthetic_result().widget()
    payload = json.loads(json.dumps(export_state(widget)))
    paints, hovers, worst = [], [], []
    with chromium() as browser:
        for _ in range(TRIALS):
            page = open_page(browser, widget._css, "width:1000px")
            paints.append(page.evaluate(MOUNT, {"esm": widget._esm, "payload": payload}))
            hover = page.evaluate(HOVER)
            hovers.append(hover["median"])
            worst.append(hover["worst"])
            page.close()
    print(
        f"bench: lens_widget_first_paint_ms = {statistics.median(paints):.1f} (goal < 150)  "
        f"[30 layers x 1000 positions, 2 lenses, trials {[round(p, 1) for p in paints]}]",
        flush=True,
    )
    print(
        f"bench: lens_widget_hover_ms = {statistics.median(hovers):.1f} (goal < 50)  "
        f"[median of 40 moves per page; worst {max(worst):.1f}]",
        flush=True,
    )


def bench_tuned() -> None:
    import torch

    from interp_widgets.demo import load_lm, load_text_corpus
    from interp_widgets.lens import TunedLens, lens_kl

    torch.manual_seed(0)
    train_tokens = int(os.environ.get("TRAIN_TOKENS", 40_000))
    eval_tokens = int(os.environ.get("EVAL_TOKENS", 20_480))
    steps, batch = int(os.environ.get("STEPS", 200)), int(os.environ.get("BATCH", 64))
    lr = float(os.environ.get("LR", 2e-3))
    model, tokenizer = load_lm(progress=False)
    train, test = load_text_corpus("train"), load_text_corpus("test")
    t0 = time.perf_counter()
    lens = TunedLens.for_model(model).fit(
        model, tokenizer, train, tokens=train_tokens, seq_len=256, steps=steps, batch_size=batch, lr=lr
    )
    seconds = time.perf_counter() - t0
    print(
        f"tuned lens: {lens.describe()}; KL over training (mean over layers) first/last 10 steps: "
        f"{lens.history['kl'][:10].mean():.3f} / {lens.history['kl'][-10:].mean():.3f}",
        flush=True,
    )
    out = lens_kl(model, tokenizer, test, tuned=lens, tokens=eval_tokens, seq_len=256)
    logit, tuned = out["logit"][:-1].mean(), out["tuned"][:-1].mean()
    per_layer = ", ".join(f"{i}: {a:.2f}/{b:.2f}" for i, (a, b) in enumerate(zip(out["logit"], out["tuned"])))
    print(f"held-out KL per layer (logit/tuned): {per_layer}", flush=True)
    print(
        f"bench: tuned_lens_kl_ratio = {tuned / logit:.3f} (goal <= 0.5)  [mean KL over layers 0..L-2: tuned "
        f"{tuned:.3f} / logit {logit:.3f} nats, {out['tokens']} held-out tokens, trained on "
        f"{lens.history['tokens']} tokens, {steps} steps x {batch}, lr {lr}]",
        flush=True,
    )
    print(f"bench: tuned_lens_training_s = {seconds:.1f} (goal <= 1800)  [residual caching included]", flush=True)


if __name__ == "__main__":
    parts = sys.argv[1:] or ["widget", "tuned"]
    if "widget" in parts:
        bench_widget()
    if "tuned" in parts:
        bench_tuned()
