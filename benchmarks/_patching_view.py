"""Part ``view`` of the interventions benchmarks: the patching view in headless Debian chromium.

Prints ``bench:`` lines:

- ``patching_view_first_paint_ms``: a 30 layers × 1,000 positions resid_pre patching view (every cell's top-5
  stored, 30,000 cells), from ``render()`` to the end of the next frame, median of 5 fresh pages (goal < 150);
- ``patching_view_hover_ms``: pointer move over a cell to its tooltip on screen at the next frame, median of 40
  moves over different cells (goal < 50).

It mounts the view from its exported state as ``benchmarks/layer_views.py`` does for the lens view (``MOUNT`` of
``benchmarks/widgets.py``). ``LAYERS`` and ``POSITIONS`` (default 30 and 1000) are read from the environment, for a
quick check at a small size; the bench lines say what was used.

Usage: PYTHONPATH=. nice -n 10 python -u benchmarks/_patching_view.py
(``benchmarks/interventions.py`` runs it as its part ``view``: ``from _patching_view import view``, ``PARTS["view"] =
view``.)
"""

from __future__ import annotations

import _repo  # noqa: F401  (the repository root on sys.path: these import tests.browser.harness)

import json
import os
import statistics
from types import SimpleNamespace

import numpy as np
from _browser import MOUNT, chromium, open_page

TRIALS = 5

HOVER = """async (layers) => {
  const canvas = document.querySelector(".iw-patching-canvas");
  const tip = document.querySelector(".iw-tooltip");
  const box = canvas.getBoundingClientRect();
  const times = [];
  for (let k = 0; k < 40; k++) {
    const x = box.left + 96 + 44 * (k % 15) + 10, y = box.top + 4 + 16 * (k % layers) + 5;
    const t0 = performance.now();
    canvas.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: x, clientY: y}));
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    times.push(performance.now() - t0);
    if (tip.hidden) throw new Error("no tooltip on hover");
  }
  times.sort((a, b) => a - b);
  return {median: times[20], worst: times[39]};
}"""


def synthetic_view(layers: int = 30, positions: int = 1000, vocab: int = 2000):
    """A PatchingView of the shape of SmolLM2 on a 1,000-token pair (random numbers, deterministic)."""
    from interp_widgets.text_units import joined_layout
    from interp_widgets.widgets import PatchingView
    from interp_widgets.widgets.patching import patching_data, patching_panels
    from interp_widgets.widgets.view_data import PatchingRunsPart

    rng = np.random.default_rng(0)
    shape = (layers, 1, positions)
    values = rng.uniform(-0.2, 1.1, shape).astype(np.float32)
    probs = np.sort(rng.dirichlet(np.ones(8), size=shape)[..., :5], axis=-1)[..., ::-1]
    tokens = [f"t{i % 97}" for i in range(positions)]
    panel = SimpleNamespace(point="resid_pre", layers=list(range(layers)), units=["stream"], positions=tokens,
                            values=values, raw=3 * values - 1, spread=np.zeros(shape, np.float32),
                            top_ids=rng.integers(0, vocab, (*shape, 5)), top_probs=probs)  # fmt: skip
    runs = PatchingRunsPart(result_labels=["exact"], result_methods=["exact"], result_directions=["denoise"],
                            result_metrics=["logit_diff"], clean_metrics=[2.0], corrupt_metrics=[-1.0])  # fmt: skip
    data = patching_data(joined_layout(tokens), tokens, patching_panels([[panel]], {i: f"v{i}" for i in range(vocab)},
                         n_positions=positions), runs, answer=" Paris", foil=" Rome", model_name="synthetic")  # fmt: skip
    return PatchingView(data)


def bench_view() -> None:
    from interp_widgets.widgets.export import export_state

    layers, positions = int(os.environ.get("LAYERS", 30)), int(os.environ.get("POSITIONS", 1000))
    widget = synthetic_view(layers, positions)
    payload = json.loads(json.dumps(export_state(widget)))
    paints, hovers, worst = [], [], []
    with chromium() as browser:
        for _ in range(TRIALS):
            page = open_page(browser, widget._css, "width:1000px")
            paints.append(page.evaluate(MOUNT, {"esm": widget._esm, "payload": payload}))
            hover = page.evaluate(HOVER, layers)
            hovers.append(hover["median"])
            worst.append(hover["worst"])
            page.close()
    size = f"{layers} layers x {positions} positions, top-5 of every cell stored"
    print(
        f"bench: patching_view_first_paint_ms = {statistics.median(paints):.1f} (goal < 150)  "
        f"[{size}, trials {[round(p, 1) for p in paints]}]",
        flush=True,
    )
    print(
        f"bench: patching_view_hover_ms = {statistics.median(hovers):.1f} (goal < 50)  "
        f"[median of 40 moves per page; worst {max(worst):.1f}]",
        flush=True,
    )


def view(model=None, tokenizer=None) -> None:
    """Part ``view`` of ``benchmarks/interventions.py`` (its parts take the model and tokenizer; this one needs
    neither)."""
    bench_view()


if __name__ == "__main__":
    bench_view()
