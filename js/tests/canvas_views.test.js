// Every view drawn with a 2D canvas context present (jsdom has none): a recording stub context, so the canvas paths
// (heatmaps, grids, plots) run here too and an error in them shows as the view's error box.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { fakeModel, settle } from "./fake_model.js";
import { VIEWS } from "./view_states.js";

/** A 2D context that accepts every call and property; createImageData gives real pixel arrays. */
function stubContext(canvas) {
  const calls = [];
  const target = {
    canvas,
    calls,
    createImageData: (w, h) => ({ width: w, height: h, data: new Uint8ClampedArray(w * h * 4) }),
    measureText: (text) => ({ width: 6 * String(text).length }),
  };
  return new Proxy(target, {
    get(t, key) {
      if (key in t) return t[key];
      return (...args) => {
        calls.push([key, args]);
      };
    },
    set(t, key, value) {
      t[key] = value;
      return true;
    },
  });
}

let el;
let cleanups = [];
beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
  vi.spyOn(HTMLCanvasElement.prototype, "getContext").mockImplementation(function () {
    return stubContext(this);
  });
});
afterEach(() => {
  for (const cleanup of cleanups) cleanup?.();
  cleanups = [];
  el.remove();
  vi.restoreAllMocks();
});

describe.each(VIEWS)("$file", ({ widget, state }) => {
  it("draws on a canvas context, in every view mode, without an error", async () => {
    const model = fakeModel(state);
    cleanups.push(widget.initialize?.({ model }), widget.render({ model, el }));
    await settle();
    expect(el.querySelector(".iw-error")?.textContent ?? null).toBeNull();
    for (const [name, value] of [
      ["view", "heatmap"],
      ["view", "model"],
      ["pattern_style", "lines"],
      ["focus", 0],
    ])
      if (name in state) model.set(name, value);
    await settle();
    for (const node of el.querySelectorAll("canvas"))
      for (const type of ["mousemove", "click", "mouseleave"])
        node.dispatchEvent(new MouseEvent(type, { bubbles: true }));
    await new Promise((resolve) => setTimeout(resolve, 50)); // animation frames (the monitor)
    expect(el.querySelector(".iw-error")?.textContent ?? null).toBeNull();
  });
});
