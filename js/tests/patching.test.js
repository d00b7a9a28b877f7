// The patching view: its grid maths (independent expectations from the fixture's formulas), read's checks, and the
// view on a fake model: hover shows the exact value and raw metric, a click lists the stored top-5 (escaped, no
// kernel), the keyboard moves and selects, noising is labelled, results sit side by side with their agreement, and
// cells whose top-5 is not stored are asked of the kernel (the view says so when none answers).
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import patching from "../src/patching.js";
import { PATCHING_CELL, cellAt, cellNumbers, csvRows, flatCell, maxAbs, moveCell, panelColumns, storedTop } from "../src/views/patching/grid.js"; // prettier-ignore
import { read } from "../src/views/patching/read.js";
import { fakeModel, payload, settle } from "./fake_model.js";
import { TOP, VALUES, VOCAB, patchingState } from "./patching_state.js";

const i32 = (values, shape = [values.length]) => payload(Int32Array.from(values), "int32", shape);
const f32 = (values, shape = [values.length]) => payload(Float32Array.from(values), "float32", shape);

describe("patching grid maths", () => {
  const data = read(fakeModel(patchingState()));
  const [resid, heads] = data.panels;
  it("reads the panels' shapes and offsets", () => {
    expect([resid.L, resid.U, resid.P, resid.cellStart, resid.topStart]).toEqual([2, 1, 2, 0, 0]);
    expect([heads.L, heads.U, heads.P, heads.cellStart, heads.topStart]).toEqual([2, 2, 2, 4, 4]);
    expect(resid.positions).toEqual(["<b>", "&x"]); // empty position labels: the clean tokens
    expect(heads.range.normalised).toBeCloseTo(1.2, 6);
  });
  it("shows positions for one unit, heads at a position for many", () => {
    expect(panelColumns(resid, -1)).toEqual({ count: 2, labels: ["<b>", "&x"], position: -1 });
    expect(panelColumns(heads, -1)).toEqual({ count: 2, labels: ["H0", "H1"], position: 1 }); // -1: the last position
    expect(panelColumns(heads, 0).position).toBe(0);
    expect(cellAt(heads, 1, 1, 0)).toEqual({ layer: 1, unit: 1, position: 0 });
    expect(cellAt(resid, 1, 1, 0)).toEqual({ layer: 1, unit: 0, position: 1 });
  });
  it("indexes cells and their stored top-5", () => {
    const cell = { layer: 1, unit: 1, position: 0 }; // head (1, 1, 0): 0.5 + 0.1·(4 + 2 + 0)
    expect(flatCell(heads, cell)).toBe(6);
    expect(cellNumbers(data, heads, cell).value).toBeCloseTo(1.1, 6);
    expect(cellNumbers(data, heads, cell).raw).toBeCloseTo(2 + 3 * 1.1, 5);
    const top = storedTop(data, heads, cell); // global cell 10
    expect(top.map((t) => t.text)).toEqual(TOP[10].map((i) => VOCAB[i]));
    expect(top[0].prob).toBeCloseTo(0.5, 6);
  });
  it("moves the keyboard cell, last layer on top, clamped", () => {
    expect(moveCell({ layer: 0, column: 0 }, "ArrowUp", 2, 5)).toEqual({ layer: 1, column: 0 });
    expect(moveCell({ layer: 1, column: 0 }, "ArrowUp", 2, 5)).toEqual({ layer: 1, column: 0 });
    expect(moveCell({ layer: 1, column: 4 }, "ArrowRight", 2, 5)).toEqual({ layer: 1, column: 4 });
    expect(moveCell({ layer: 1, column: 2 }, "Home", 2, 5)).toEqual({ layer: 1, column: 0 });
    expect(moveCell({ layer: 1, column: 2 }, "x", 2, 5)).toBeNull();
    expect(maxAbs(Float32Array.from([0.2, -3, NaN]), 0, 3)).toBe(3);
    expect(maxAbs(Float32Array.from([0, 0]), 0, 2)).toBe(1);
  });
  it("exports every cell as CSV", () => {
    const rows = csvRows(data);
    expect(rows.length).toBe(1 + 12);
    expect(rows[1].slice(1, 7)).toEqual(["resid_pre", "0", "stream", 0, "<b>", VALUES[0]]);
  });
  it("refuses inconsistent offsets with a readable error", () => {
    expect(() => read(fakeModel(patchingState({ cell_offsets: i32([0, 4, 11]) })))).toThrow(/has 7 cells, expected 2 layers × 2 units × 2 positions/); // prettier-ignore
  });
});

describe("patching view", () => {
  let el;
  let cleanup;
  beforeEach(() => {
    el = document.createElement("div");
    document.body.append(el);
  });
  afterEach(() => {
    cleanup?.();
    el.remove();
    vi.useRealTimers();
  });
  const mount = async (options) => {
    const model = fakeModel(patchingState(options));
    cleanup = patching.render({ model, el });
    await settle();
    return model;
  };
  // canvas coordinates of grid column c and layer l of a 2-layer panel (jsdom rectangles are at 0, 0)
  const at = (c, l) => ({
    clientX: PATCHING_CELL.left + c * PATCHING_CELL.width + 3,
    clientY: PATCHING_CELL.top + (1 - l) * PATCHING_CELL.height + 3,
  });

  it("hovers a cell: its exact value and raw metric; a click lists the stored top-5, escaped", async () => {
    const model = await mount();
    expect(el.querySelector(".iw-error")).toBeNull();
    expect(el.querySelectorAll(".iw-patching-panel").length).toBe(2);
    const canvas = el.querySelector('.iw-patching-panel[data-point="resid_pre"] canvas');
    canvas.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, ...at(1, 1) }));
    const tip = el.querySelector(".iw-tooltip");
    expect(tip.hidden).toBe(false);
    expect(tip.textContent).toContain("layer 1");
    expect(tip.textContent).toContain('"&x"');
    expect(tip.textContent).toContain("0.3 (normalised"); // resid (1, 1) = 0.1·3
    expect(tip.textContent).toContain("2.9 (logit_diff)"); // raw = 2 + 3·0.3
    expect(tip.textContent).toContain('"&y"'); // the corrupt token at that position
    canvas.dispatchEvent(new MouseEvent("click", { bubbles: true, ...at(1, 1) }));
    await settle();
    expect(model.get("selected_cell")).toEqual([0, 1, 0, 1]);
    const items = [...el.querySelectorAll(".iw-patching-top li")].map((li) => li.textContent);
    expect(items.length).toBe(5);
    expect(items[0]).toBe(`${JSON.stringify(VOCAB[TOP[3][0]])} 50.0%`);
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector("b")).toBeNull();
    expect(model.send).not.toHaveBeenCalled(); // stored: no kernel needed
  });

  it("switches to raw values, and the heads grid to another position", async () => {
    const model = await mount();
    const select = el.querySelector(".iw-patching-scale");
    select.value = "raw";
    select.dispatchEvent(new Event("change"));
    await settle();
    expect(model.get("scale")).toBe("raw");
    expect(el.querySelector(".iw-caption").textContent).toContain("raw values");
    const legend = el.querySelector('.iw-patching-panel[data-point="resid_pre"] .iw-patching-legend').textContent;
    expect(legend).toContain("raw logit_diff");
    expect(legend).toContain("+2.9"); // the largest |raw| of the panel: 2 + 3·0.3
    const position = el.querySelector(".iw-patching-position");
    expect(position.options.length).toBe(2);
    position.value = "0";
    position.dispatchEvent(new Event("change"));
    await settle();
    expect(model.get("unit_position")).toBe(0);
    expect(el.querySelector('.iw-patching-panel[data-point="head"] .iw-patching-heading').textContent).toContain(
      'heads at position 0 "<b>"',
    );
    const canvas = el.querySelector('.iw-patching-panel[data-point="head"] canvas');
    canvas.dispatchEvent(new MouseEvent("click", { bubbles: true, ...at(1, 0) }));
    await settle();
    expect(model.get("selected_cell")).toEqual([1, 0, 1, 0]);
  });

  it("is one tab stop per heatmap: arrows move the cell, Enter selects it", async () => {
    const model = await mount();
    const scroller = el.querySelector('.iw-patching-panel[data-point="resid_pre"] .iw-patching-scroll');
    expect(scroller.getAttribute("tabindex")).toBe("0");
    scroller.dispatchEvent(new FocusEvent("focus"));
    const key = (k) => scroller.dispatchEvent(new KeyboardEvent("keydown", { key: k, bubbles: true }));
    key("ArrowRight");
    key("ArrowDown");
    expect(el.querySelector(".iw-tooltip").textContent).toContain("layer 0");
    key("Enter");
    await settle();
    expect(model.get("selected_cell")).toEqual([0, 0, 0, 1]); // focus starts at the top layer (1), column 0
  });

  it("labels noising results: low = important", async () => {
    await mount({ result_directions: ["noise"] });
    expect(el.querySelector(".iw-patching-heading").textContent).toContain("low = important");
    expect(el.querySelector(".iw-caption").textContent).toContain("noising");
  });

  it("shows exact and attribution patching side by side with their agreement", async () => {
    const model = await mount({
      panel_points: ["resid_pre", "resid_pre"], panel_results: [0, 1], panel_layers: [["0", "1"], ["0", "1"]],
      panel_units: [["stream"], ["stream"]], panel_positions: [[], []], cell_offsets: i32([0, 4, 8]),
      values: f32([0, 0.1, 0.2, 0.3, 0, 0.2, 0.1, 0.4]), raw: f32([0, 0, 0, 0, 0, 0, 0, 0]), spread: f32([0, 0, 0, 0, 0, 0, 0, 0]),
      top_offsets: i32([0, 4, 4]), top_vocab: i32(TOP.slice(0, 4).flat(), [4, 5]), top_probs: f32(Array(20).fill(0.2), [4, 5]),
      result_labels: ["exact", "attribution"], result_methods: ["exact", "attribution"], result_directions: ["denoise", "denoise"],
      result_metrics: ["logit_diff", "logit_diff"], clean_metrics: [5, 5], corrupt_metrics: [2, 2],
      agreement_points: ["resid_pre"], agreement_spearman: [0.8], agreement_overlap: [0.5], agreement_k: 2,
    }); // prettier-ignore
    const row = el.querySelector('.iw-patching-row[data-point="resid_pre"]');
    expect(row.querySelectorAll(".iw-patching-panel").length).toBe(2);
    expect(el.querySelector(".iw-patching-agreement").textContent).toContain("exact vs attribution");
    const cells = [...el.querySelectorAll(".iw-patching-agreement-table td")].map((td) => td.textContent);
    expect(cells).toEqual(["resid_pre", "0.8", "0.5"]);
    model.set("selected_cell", [1, 0, 0, 0]);
    await settle();
    expect(el.querySelector(".iw-patching-detail").textContent).toContain("no patched runs");
    expect(model.send).not.toHaveBeenCalled();
  });

  it("asks the kernel for a top-5 not stored, and says when none answers", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const note = "120,000 cells (over 50,000): the kernel sends them on click";
    const model = fakeModel(patchingState({ top_offsets: i32([0, 0, 0]), top_vocab: i32([], [0, 5]), top_probs: f32([], [0, 5]), vocab: [], top_note: note })); // prettier-ignore
    cleanup = patching.render({ model, el });
    await Promise.resolve();
    expect(el.querySelector(".iw-patching-note").textContent).toBe(note);
    model.set("selected_cell", [0, 1, 0, 1]);
    await Promise.resolve();
    expect(model.send).toHaveBeenCalledWith(expect.objectContaining({ type: "top", panel: 0, layer: 1, unit: 0, position: 1 })); // prettier-ignore
    expect(el.querySelector(".iw-patching-kernel").textContent).toContain("Asking the kernel");
    vi.advanceTimersByTime(2000);
    await Promise.resolve();
    expect(el.querySelector(".iw-patching-kernel").textContent).toContain("kernel is needed");
    for (const handler of model.handlers.get("msg:custom"))
      handler({ type: "top", panel: 0, layer: 1, unit: 0, position: 1, tokens: ["<b>x", " y"], probs: [0.7, 0.1] });
    await Promise.resolve();
    const items = [...el.querySelectorAll(".iw-patching-top li")].map((li) => li.textContent);
    expect(items).toEqual(['"<b>x" 70.0%', '" y" 10.0%']);
    expect(el.querySelector("b")).toBeNull();
  });

  it("follows the host's dark theme, on the canvas too", async () => {
    const fills = [];
    vi.spyOn(HTMLCanvasElement.prototype, "getContext").mockImplementation(function () {
      const g = { fillStyle: "", setTransform() {}, save() {}, restore() {}, beginPath() {}, rect() {}, clip() {},
        fillText() {}, strokeRect() {}, setLineDash() {}, fillRect(x, y, w, h) { fills.push([this.fillStyle, x, y, w, h]); } }; // prettier-ignore
      return g;
    });
    document.body.setAttribute("data-jp-theme-light", "false");
    try {
      await mount();
      expect(el.querySelector(".iw-patching").dataset.iwTheme).toBe("dark");
      expect(fills[0][0]).toBe("#1e1e1e"); // the canvas background
      const darkCells = fills.filter(([, x]) => x >= PATCHING_CELL.left).map(([fill]) => fill);
      fills.length = 0;
      document.body.setAttribute("data-jp-theme-light", "true");
      await settle();
      expect(el.querySelector(".iw-patching").dataset.iwTheme).toBe("light");
      expect(fills[0][0]).toBe("#ffffff");
      const lightCells = fills.filter(([, x]) => x >= PATCHING_CELL.left).map(([fill]) => fill);
      expect(lightCells.length).toBe(darkCells.length);
      expect(lightCells).not.toEqual(darkCells);
    } finally {
      document.body.removeAttribute("data-jp-theme-light");
      vi.restoreAllMocks();
    }
  });
});
