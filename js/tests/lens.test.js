// Grid maths of the lens view, and the view on a fake model: hover text is escaped, the switch needs no kernel.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import lens from "../src/lens.js";
import {
  cellAt,
  cellValue,
  flatIndex,
  gridLayout,
  intensityRgb,
  rankIntensity,
  rowOfLayer,
  trajectories,
  visibleColumns,
} from "../src/lib/lens_grid.js";
import { fakeModel, payload, settle } from "./fake_model.js";

const f32 = (values, shape) => payload(Float32Array.from(values), "float32", shape);
const i32 = (values, shape) => payload(Int32Array.from(values), "int32", shape);

describe("lens grid maths", () => {
  const layout = gridLayout({ layers: 30, positions: 1000 });
  it("lays out 30 layers x 1,000 positions", () => {
    expect(layout.fullWidth).toBe(layout.left + 1000 * layout.width);
    expect(layout.fullHeight).toBe(layout.top + 30 * layout.height + layout.bottom);
  });
  it("draws only the columns in view", () => {
    expect(visibleColumns(layout, 0, 800)).toEqual({
      start: 0,
      end: Math.ceil((800 - layout.left) / layout.width) + 1,
    });
    const far = visibleColumns(layout, 500 * layout.width + 3, 800);
    expect(far.start).toBe(500);
    expect(far.end - far.start).toBeLessThan(20);
    expect(visibleColumns(layout, 1e9, 800)).toEqual({ start: 1000, end: 1000 });
  });
  it("finds the cell under the pointer, last layer on top", () => {
    expect(cellAt(layout, layout.left + 1, layout.top + 1, 0)).toEqual({ layer: 29, position: 0 });
    expect(cellAt(layout, layout.left + 2 * layout.width + 1, layout.top + 29 * layout.height + 1, 10)).toEqual({
      layer: 0,
      position: 12,
    });
    expect(cellAt(layout, 5, 20, 0)).toBeNull(); // the layer labels
    expect(cellAt(layout, layout.left + 1, layout.top + 30 * layout.height + 1, 0)).toBeNull(); // the token row
    expect(rowOfLayer(layout, 29)).toBe(0);
  });
  it("indexes C-order arrays and colours ranks on a log scale", () => {
    expect(flatIndex([2, 3, 4], 1, 2, 3)).toBe(23);
    expect(rankIntensity(1, 1000)).toBe(1);
    expect(rankIntensity(1000, 1000)).toBe(0);
    expect(rankIntensity(10, 1000)).toBeCloseTo(2 / 3, 6);
    expect(Number.isNaN(rankIntensity(0, 1000))).toBe(true);
    expect(intensityRgb(0)).toEqual([255, 255, 255]);
    expect(intensityRgb(1)).toEqual([33, 102, 172]);
    expect(intensityRgb(NaN)).toEqual([238, 238, 238]);
  });
  it("reads cell values and trajectories per lens", () => {
    // N=2 lenses, L=2 layers, T=2 positions, K=1, M=2
    const data = {
      dims: { N: 2, L: 2, T: 2, K: 1, M: 2 },
      vocabSize: 100,
      topProbs: Float32Array.from([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]),
      targetProbs: Float32Array.from(Array.from({ length: 16 }, (_, i) => i / 16)),
      targetRanks: Int32Array.from(Array.from({ length: 16 }, (_, i) => i + 1)),
    };
    expect(cellValue(data, { lens: 1, layer: 0, position: 1, colourBy: "top1_prob", target: 0 })).toBeCloseTo(0.6);
    expect(cellValue(data, { lens: 0, layer: 1, position: 0, colourBy: "target_prob", target: 1 })).toBeCloseTo(5 / 16);
    expect(cellValue(data, { lens: 0, layer: 0, position: 0, colourBy: "target_rank", target: 0 })).toBe(1);
    const [line] = trajectories(data, 1, 1, [1]);
    expect(line.ranks).toEqual([12, 16]); // flat indices 11 and 15, ranks i + 1
    expect(line.probs[1]).toBeCloseTo(15 / 16);
  });
});

describe("lens view", () => {
  let el;
  beforeEach(() => {
    el = document.createElement("div");
    document.body.append(el);
  });
  afterEach(() => el.remove());

  const state = () => ({
    error: "", tokens: ["<b>", "&x"], layers: ["layer:0", "layer:1"], lenses: ["logit", "tuned"], vocab: ["<img src=x onerror=alert(1)>", "y"],
    top_vocab: i32([0, 1, 1, 0, 1, 1, 0, 0], [2, 2, 2, 1]), top_probs: f32([0.5, 0.2, 0.3, 0.9, 0.6, 0.1, 0.4, 0.8], [2, 2, 2, 1]),
    kl: f32([1, 2, 0, 0, 0.5, 1, 0, 0], [2, 2, 2]), target_labels: ["next token"], target_vocab: i32([1, -1], [2, 1]),
    target_probs: f32([0.2, NaN, 0.3, NaN, 0.25, NaN, 0.3, NaN], [2, 2, 2, 1]), target_ranks: i32([2, 0, 1, 0, 3, 0, 1, 0], [2, 2, 2, 1]),
    generated_mask: payload(Uint8Array.from([0, 1]), "bool", [2]), vocab_size: 10, model_name: "m", lens: "logit", colour_by: "top1_prob",
    target: 0, selected_position: -1, plotted_targets: [0],
  }); // prettier-ignore

  it("switches lens in the browser and plots a clicked position; token text stays text", async () => {
    const model = fakeModel(state());
    const cleanup = lens.render({ model, el });
    await settle();
    expect(el.querySelector(".iw-error")).toBeNull();
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector(".iw-caption").textContent).toContain("logit lens");
    const select = el.querySelector(".iw-lens-select");
    select.value = "tuned";
    select.dispatchEvent(new Event("change"));
    await settle();
    expect(model.get("lens")).toBe("tuned");
    expect(model.send).not.toHaveBeenCalled(); // no custom message: the tuned arrays are already here
    expect(el.querySelector(".iw-caption").textContent).toContain("tuned lens");
    model.set("selected_position", 0);
    await settle();
    expect(el.querySelectorAll("polyline").length).toBe(2); // probability and rank lines of the one target
    expect(el.querySelector(".iw-lens-plot").textContent).toContain('"<b>"');
    expect(el.querySelector("img")).toBeNull();
    cleanup?.();
  });
});
