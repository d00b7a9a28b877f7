"""Token widget performance in headless Debian chromium (Playwright, offline), and the size of a saved widget.

Prints ``bench:`` lines (medians over 5 fresh pages, so one slow trial on a shared machine does not decide):

- first paint (``render()`` to the end of the next frame) at 1k and at 10k tokens;
- hover-to-tooltip latency on the 10k view;
- the worst frame (largest ``requestAnimationFrame`` delta) while scrolling programmatically from the top to the
  bottom of the 10k view, 200 px per frame, once every block is built;
- hover over a generated token in a generation view of 200, 1,000 and 2,000 tokens (half prompt, half generated):
  from the event to the next frame (it recolours every source token), median and worst of 40 hovers;
- the bytes one saved widget adds to a notebook: its widget state as ipywidgets saves it (``embed_data`` of the
  widget alone, binary buffers as base64) including the ESM and CSS the state carries, for 1k and 100 tokens.

It also prints the size of every ESM bundle (each saved widget embeds its own). Run with ``python -u`` and note
the machine load it prints.

Usage: PYTHONPATH=. python -u benchmarks/widgets.py
"""

from __future__ import annotations

import _repo  # noqa: F401  (the repository root on sys.path: these import tests.browser.harness)

import json
import os
import statistics

import numpy as np
from _browser import MOUNT, chromium, open_page
from ipywidgets.embed import dependency_state, embed_data

from interp_widgets.widgets import GenerationWidget, TokenHighlightWidget
from interp_widgets.widgets.export import STATIC_DIR
from interp_widgets.widgets.export import export_state

TRIALS = 5
_STYLE = "height:400px;overflow:auto"  # the view scrolls inside its box

INTERACT = """async (n) => {
  const el = document.getElementById("el");
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const built = () => el.querySelectorAll(".iw-token").length === n && el.querySelectorAll(".iw-sr-table tr").length === n + 1;
  for (let k = 0; k < 600 && !built(); k++) await new Promise((r) => setTimeout(r, 25));
  if (!built()) throw new Error("the view did not finish building");
  const token = el.querySelectorAll(".iw-token")[200];
  const t1 = performance.now();
  token.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  await frame();
  const hover = performance.now() - t1;
  if (el.querySelector(".iw-tooltip").hidden) throw new Error("no tooltip on hover");
  await new Promise((r) => setTimeout(r, 200));
  const deltas = [];
  let last = await new Promise((r) => requestAnimationFrame(r));
  while (el.scrollTop + el.clientHeight < el.scrollHeight - 1) {
    el.scrollTop += 200;
    const now = await new Promise((r) => requestAnimationFrame(r));
    deltas.push(now - last);
    last = now;
  }
  return {hover, worst: Math.max(...deltas), frames: deltas.length};
}"""


def widget(n: int) -> TokenHighlightWidget:
    """A two-class token widget over ``n`` words with random scores (deterministic)."""
    rng = np.random.default_rng(0)
    words = [f"w{i % 97}" for i in range(n)]
    text, offsets = "", []
    for w in words:
        start = len(text) + (1 if text else 0)
        text += (" " if text else "") + w
        offsets.append((start, start + len(w)))
    return TokenHighlightWidget.from_arrays(text, words, offsets, rng.normal(size=(2, n)), target_labels=["neg", "pos"])


GENERATION_HOVER = """async (n) => {
  const el = document.getElementById("el");
  for (let k = 0; k < 600 && el.querySelectorAll(".iw-token").length < n; k++) await new Promise((r) => setTimeout(r, 25));
  await new Promise((r) => setTimeout(r, 300));
  const generated = Array.from(el.querySelectorAll(".iw-generated"));
  const times = [];
  let restyled = 0;  // token spans whose style changed between the event and the next frame
  const seen = new Set();
  const watcher = new MutationObserver((records) => {
    for (const r of records) if (r.target.classList?.contains("iw-token")) seen.add(r.target);
  });
  watcher.observe(el, {subtree: true, attributes: true, attributeFilter: ["style"]});
  for (let k = 0; k < 40; k++) {
    const span = generated[(k * 7) % generated.length];
    const t0 = performance.now();
    span.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));  // recolours that step's sources
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));  // style, layout and paint included
    times.push(performance.now() - t0);
    watcher.takeRecords().forEach((r) => r.target.classList?.contains("iw-token") && seen.add(r.target));
    restyled += seen.size;
    seen.clear();
  }
  watcher.disconnect();
  times.sort((a, b) => a - b);
  return {median: times[20], worst: times[39], restyled: restyled / 40};
}"""


def generation_widget(n: int) -> GenerationWidget:
    """A generation view of ``n / 2`` prompt and ``n / 2`` generated tokens with random scores (deterministic)."""
    from interp_widgets.attribution.result import AttributionResult

    prompt = generated = n // 2
    tokens = [f"t{i}" for i in range(n)]
    offsets = [(3 * i, 3 * i + len(t)) for i, t in enumerate(tokens)]
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(generated, n))
    for step in range(generated):
        scores[step, prompt + step :] = np.nan  # a generated token sees only what came before it
    return GenerationWidget(AttributionResult.from_flat(
        text="".join(t.ljust(3) for t in tokens), tokens=tokens, offsets=np.array(offsets),
        special_mask=np.zeros(n, bool), word_ids=np.arange(n), sentence_ids=np.zeros(n, int), scores=scores,
        target_labels=[f"'{tokens[prompt + s]}'@{prompt + s}" for s in range(generated)],
        target_probs=rng.random(generated), target_ids=np.arange(generated), method="ig", signed=True,
        generated_mask=np.arange(n) >= prompt, target_positions=np.arange(prompt - 1, n - 1)))  # fmt: skip


def saved_bytes(w: TokenHighlightWidget) -> int:
    """Bytes of the widget's saved state (what a notebook stores for it), ESM and CSS included (the front end
    saves every attribute, so nothing is dropped as a default)."""
    state = embed_data(views=[w], state=dependency_state([w], drop_defaults=False), drop_defaults=False)[
        "manager_state"
    ]
    return len(json.dumps(state, separators=(",", ":")).encode())


def main() -> None:
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with chromium() as browser:
        for n in (1000, 10000):
            w = widget(n)
            payload = json.loads(json.dumps(export_state(w)))
            paints, interactions = [], []
            for _ in range(TRIALS):
                page = open_page(browser, w._css, _STYLE, viewport={"width": 1000, "height": 800})
                paints.append(page.evaluate(MOUNT, {"esm": w._esm, "payload": payload}))
                if n == 10000:
                    interactions.append(page.evaluate(INTERACT, n))
                page.close()
            trials = ", ".join(f"{p:.0f}" for p in paints)
            print(
                f"bench: token_widget_first_paint_{n // 1000}k_ms = {statistics.median(paints):.1f} (goal < 150)  [trials {trials}]"
            )
        hovers = [r["hover"] for r in interactions]
        worst = [r["worst"] for r in interactions]
        print(
            f"bench: token_widget_hover_latency_ms = {statistics.median(hovers):.1f} (goal < 50)  "
            f"[trials {', '.join(f'{x:.0f}' for x in hovers)}]"
        )
        print(
            f"bench: token_widget_scroll_worst_frame_ms = {statistics.median(worst):.1f} (goal < 50)  "
            f"[trials {', '.join(f'{x:.0f}' for x in worst)}; {interactions[0]['frames']} frames each]"
        )
        for n in (200, 1000, 2000):
            w = generation_widget(n)
            page = open_page(browser, w._css, _STYLE, viewport={"width": 1000, "height": 800})
            page.evaluate(MOUNT, {"esm": w._esm, "payload": json.loads(json.dumps(export_state(w)))})
            hover = page.evaluate(GENERATION_HOVER, n)
            page.close()
            print(
                f"bench: generation_hover_recolour_{n}_tokens_ms = median {hover['median']:.1f}, worst "
                f"{hover['worst']:.1f} (goal < 50; hover over a generated token until the next frame)"
            )
            print(
                f"bench: generation_hover_restyled_spans_{n}_tokens = {hover['restyled']:.0f} (what one hover "
                f"restyles before the next frame: the blocks in view, not all {n} tokens)"
            )
    for n in (1000, 100):
        print(f"bench: token_widget_saved_bytes_{n} = {saved_bytes(widget(n))} (goal <= 61440)")
    for path in sorted(STATIC_DIR.glob("*.js")):
        print(f"esm: {path.name} = {path.stat().st_size} bytes")
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
