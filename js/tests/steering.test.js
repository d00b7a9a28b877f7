// The steering view: read checks the data, the chart geometry, and the view on a fake model (toggles, escaping).
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import steering from "../src/steering.js";
import { panelGeometry, scaleText, shownScales } from "../src/views/steering/draw.js";
import { read } from "../src/views/steering/read.js";
import { fakeModel, payload, settle } from "./fake_model.js";

const f32 = (values) => payload(Float32Array.from(values), "float32", [values.length]);

const state = () => ({
  error: "", prompt: "The <b>room</b>", layer: "layer:1", scale_meaning: "scale × mean residual norm at layer:1 (2.5)",
  prompt_tokens: ["The", " <b>room</b>"], unsteered_tokens: [" was", " quiet"],
  steered_tokens: [[" was", " loud"], [" was", " quiet"], [" was", "<img src=x onerror=alert(1)>", "!"]],
  changed: [[false, true], [false, false], [false, true, true]],
  scales: f32([-2, 0, 2]), metric_mean: f32([-2, 0.5, 3]), metric_spread: f32([1, 0.5, 1]), damage: f32([0.5, 0, 0.7]),
  metric_name: "logit difference", damage_tokens: 4096, positions: "generated", hidden_scales: [],
}); // prettier-ignore

describe("steering read and chart maths", () => {
  it("reads one entry per scale and refuses inconsistent data", () => {
    const data = read(fakeModel(state()));
    expect(data.S).toBe(3);
    expect(data.scales).toEqual([-2, 0, 2]);
    expect(data.damage[2]).toBeCloseTo(0.7);
    expect(() => read(fakeModel({ ...state(), damage: f32([0, 1]) }))).toThrow(/damage has 2 entries for 3 scales/);
    expect(() => read(fakeModel({ ...state(), changed: [[false], [false, false], [false, true, true]] }))).toThrow(
      /changed\[0\] has 1 entries for 2 tokens/,
    );
    expect(() => read(fakeModel({ ...state(), scales: f32([]) }))).toThrow(/no scales/);
  });
  it("places the points in scale order with the spread band around them", () => {
    const box = { x: 0, y: 0, width: 100, height: 60 };
    const geo = panelGeometry([2, -2, 0], [3, -2, 0.5], [1, 1, 0.5], box);
    expect(geo.lo).toBe(-3); // -2 - 1
    expect(geo.hi).toBe(4); // 3 + 1
    expect(geo.points.map((p) => p.k)).toEqual([1, 2, 0]);
    expect(geo.points[0].x).toBe(0);
    expect(geo.points[2].x).toBe(100);
    expect(geo.points[2].y).toBeCloseTo(60 * (1 - (3 - -3) / 7));
    expect(geo.band.split(" ").length).toBe(6);
    const none = panelGeometry([0, 1], [NaN, NaN], null, box);
    expect(none.points).toEqual([]);
    expect(shownScales([1, 7], 3)).toEqual([0, 2]);
    expect(scaleText(-0.5)).toBe("-0.5");
  });
});

describe("steering view", () => {
  let el;
  beforeEach(() => {
    el = document.createElement("div");
    document.body.append(el);
  });
  afterEach(() => el.remove());

  it("draws a column per shown scale with changed tokens marked, toggles scales, keeps token text as text", async () => {
    const model = fakeModel(state());
    const cleanup = steering.render({ model, el });
    await settle();
    expect(el.querySelector(".iw-error")).toBeNull();
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector("b")).toBeNull();
    const columns = () => [...el.querySelectorAll(".iw-steer-column h4")].map((n) => n.textContent);
    expect(columns()).toEqual(["unsteered", "scale -2", "scale 0", "scale 2"]);
    const changed = [...el.querySelectorAll(".iw-steer-column[data-column='scale 2'] .iw-steer-changed")];
    expect(changed.map((n) => n.textContent)).toEqual(["<img src=x onerror=alert(1)>", "!"]);
    expect(el.querySelectorAll(".iw-steer-chart polyline").length).toBe(2); // metric and damage
    expect(el.querySelectorAll(".iw-steer-chart polygon").length).toBe(1); // the metric's spread band
    const buttons = [...el.querySelectorAll(".iw-steer-toggles button")];
    expect(buttons.map((b) => b.getAttribute("aria-pressed"))).toEqual(["true", "true", "true"]);
    buttons[2].click();
    await settle();
    expect(model.get("hidden_scales")).toEqual([2]);
    expect(columns()).toEqual(["unsteered", "scale -2", "scale 0"]);
    expect(el.querySelector(".iw-steer-toggles button[data-scale='2']").getAttribute("aria-pressed")).toBe("false");
    expect(el.querySelectorAll(".iw-steer-chart circle.iw-steer-hidden").length).toBe(2); // hollow in both panels
    el.querySelector(".iw-steer-toggles button[data-scale='2']").click();
    await settle();
    expect(model.get("hidden_scales")).toEqual([]);
    expect(columns()).toHaveLength(4);
    cleanup?.();
  });
});
