// Monitor front end: store append/replace with byteOffset buffers, rAF coalescing, M4 decimation, panel and
// layer toggles, hover readouts, zoom, escaping of layer names.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import monitor, { nearestFinite, splitSeries, storeOf } from "../src/monitor.js";
import {
  BandDecimator,
  M4Decimator,
  decimateBand,
  decimateM4,
  emaSmooth,
  logTicks,
  lowerBound,
  niceTicks,
  runsOf,
} from "../src/lib/plot_math.js";
import { SeriesStore, decodeAppend, decodeCheckpoint } from "../src/lib/plot_store.js";
import { dataViewAt, fakeModel } from "./fake_model.js";

let counter = 0;
const f64 = (values, offset = 12) => dataViewAt(Float64Array.from(values), offset);
const f32 = (values, offset = 4) => dataViewAt(Float32Array.from(values), offset);

/** An append message as the kernel sends it: x float64, values float32 series-major, both at odd offsets. */
function appendMessage(start, xs, columns, offsets = [12, 4]) {
  const names = Object.keys(columns);
  return [
    { type: "iw-monitor-append", series: names, start, rows: xs.length },
    [
      f64(xs, offsets[0]),
      f32(
        names.flatMap((n) => columns[n]),
        offsets[1],
      ),
    ],
  ];
}

/** Checkpoint bytes (x float64 then float32 columns) inside a DataView at `offset`. */
function checkpointBytes(xs, columns, offset = 20) {
  const names = Object.keys(columns);
  const body = new Uint8Array(xs.length * 8 + names.length * xs.length * 4);
  new Float64Array(body.buffer, 0, xs.length).set(xs);
  new Float32Array(body.buffer, xs.length * 8).set(names.flatMap((n) => columns[n]));
  return { data: dataViewAt(body, offset), schema: { series: names, rows: xs.length } };
}

function monitorModel(overrides = {}) {
  counter += 1;
  const model = fakeModel({
    stream_id: `test-${counter}`,
    checkpoint: null,
    checkpoint_schema: {},
    layers: ["L0", "L1"],
    x_label: "step",
    title: "run",
    error: "",
    panels: [
      { id: "loss", title: "Loss", kind: "lines", series: ["loss"], scale: "linear" },
      {
        id: "ratio",
        title: "Ratio",
        kind: "lines",
        metric: "energy_ratio",
        band: ["lo", "hi"],
        scale: "log",
        reference: 1,
      },
      { id: "heat", title: "Heat", kind: "heatmap", metric: "energy_ratio", scale: "log" },
    ],
    ...overrides,
  });
  model.emit = (event, ...args) => {
    for (const handler of [...(model.handlers.get(event) ?? [])]) handler(...args);
  };
  return model;
}

describe("store and buffer decoding", () => {
  it("appends float64/float32 buffers that start at non-zero, unaligned byteOffsets", () => {
    const store = new SeriesStore();
    const [content, buffers] = appendMessage(
      0,
      [0, 5, 10],
      { loss: [3, 2, 1], "energy_ratio|L0": [NaN, 4, NaN] },
      [5, 3],
    );
    expect(buffers[0].byteOffset).toBe(5);
    expect(store.append(decodeAppend(content, buffers))).toBe(3);
    expect(Array.from(store.x.subarray(0, 3))).toEqual([0, 5, 10]);
    expect(Array.from(store.column("loss").subarray(0, 3))).toEqual([3, 2, 1]);
    expect(Array.from(store.column("energy_ratio|L0").subarray(0, 3))).toEqual([NaN, 4, NaN]);
    // a later block without energy_ratio leaves NaN there; a new series is NaN for earlier rows
    const [c2, b2] = appendMessage(3, [15, 20], { loss: [0.5, 0.25], lr: [0.1, 0.2] });
    store.append(decodeAppend(c2, b2));
    expect(store.n).toBe(5);
    expect(Array.from(store.column("energy_ratio|L0").subarray(3, 5))).toEqual([NaN, NaN]);
    expect(Array.from(store.column("lr").subarray(0, 5))).toEqual([NaN, NaN, NaN, Math.fround(0.1), Math.fround(0.2)]);
  });

  it("grows past its initial capacity and keeps every row", () => {
    const store = new SeriesStore();
    for (let block = 0; block < 30; block += 1) {
      const xs = Array.from({ length: 10 }, (_, i) => block * 10 + i);
      store.append(decodeAppend(...appendMessage(block * 10, xs, { loss: xs.map((v) => v / 2) })));
    }
    expect(store.n).toBe(300);
    expect(store.column("loss")[299]).toBe(149.5);
    expect(store.x[123]).toBe(123);
  });

  it("rejects buffers whose size does not match the header", () => {
    const [content, buffers] = appendMessage(0, [0, 1], { loss: [1, 2] });
    expect(() => decodeAppend({ ...content, rows: 3 }, buffers)).toThrow(RangeError);
    expect(() => decodeAppend(content, [buffers[0]])).toThrow(/2 buffers/);
  });

  it("replaces everything with a checkpoint and skips rows it already holds afterwards", () => {
    const store = new SeriesStore();
    store.append(decodeAppend(...appendMessage(0, [0, 1], { loss: [9, 9] })));
    const { data, schema } = checkpointBytes(
      [0, 1, 2, 3],
      { loss: [4, 3, 2, 1], "isoscore|L1": [NaN, 0.5, NaN, 0.25] },
      13,
    );
    const listener = vi.fn();
    store.subscribe(listener);
    store.replace(decodeCheckpoint(data, schema));
    expect(listener).toHaveBeenCalledTimes(1);
    expect(store.n).toBe(4);
    expect(Array.from(store.column("loss").subarray(0, 4))).toEqual([4, 3, 2, 1]);
    expect(Array.from(store.column("isoscore|L1").subarray(0, 4))).toEqual([NaN, 0.5, NaN, 0.25]);
    // an append that overlaps the checkpoint (rows 2..5) adds only rows 4 and 5
    expect(store.append(decodeAppend(...appendMessage(2, [2, 3, 4, 5], { loss: [2, 1, 0.5, 0.25] })))).toBe(2);
    expect(Array.from(store.x.subarray(0, store.n))).toEqual([0, 1, 2, 3, 4, 5]);
    expect(store.append(decodeAppend(...appendMessage(0, [0], { loss: [4] })))).toBe(0); // fully known: ignored
    expect(listener).toHaveBeenCalledTimes(2);
  });

  it("decodes an empty checkpoint to an empty store", () => {
    const store = new SeriesStore();
    store.replace(decodeCheckpoint(null, {}));
    expect(store.n).toBe(0);
  });
});

describe("decimation and plot maths", () => {
  it("M4 keeps first, min, max and last of every pixel column and nothing else", () => {
    const n = 10000;
    const x = Float64Array.from({ length: n }, (_, i) => i);
    const y = Float32Array.from({ length: n }, (_, i) => Math.sin(i / 37) + ((i * 7919) % 13) / 13);
    y[5000] = NaN;
    const width = 100;
    const columnOf = (v) => Math.floor((v / n) * width); // the plotter's pixel column of x = v
    const { xs, ys, count } = decimateM4(x, y, 0, n, 0, n, width);
    expect(count).toBeLessThanOrEqual(4 * width);
    for (let c = 0; c < width; c += 1) {
      const members = [];
      for (let i = 0; i < n; i += 1) if (columnOf(x[i]) === c && !Number.isNaN(y[i])) members.push(i);
      const kept = [];
      for (let k = 0; k < count; k += 1) if (columnOf(xs[k]) === c) kept.push(k);
      const values = members.map((i) => y[i]);
      const keptValues = kept.map((k) => ys[k]);
      expect(Math.min(...keptValues)).toBe(Math.min(...values));
      expect(Math.max(...keptValues)).toBe(Math.max(...values));
      expect(xs[kept[0]]).toBe(members[0]);
      expect(xs[kept[kept.length - 1]]).toBe(members[members.length - 1]);
      for (const k of kept) expect(ys[k]).toBe(y[xs[k]]); // only real points
    }
    for (let k = 1; k < count; k += 1) expect(xs[k]).toBeGreaterThan(xs[k - 1]); // index order
  });

  it("M4 returns every finite point when there are fewer than the pixels, and skips ≤ 0 on log axes", () => {
    const x = Float64Array.of(0, 1, 2, 3, 4);
    const y = Float32Array.of(1, NaN, -1, 0, 2);
    const all = decimateM4(x, y, 0, 5, 0, 4, 500);
    expect(Array.from(all.xs.subarray(0, all.count))).toEqual([0, 2, 3, 4]);
    const log = decimateM4(x, y, 0, 5, 0, 4, 500, { positiveOnly: true });
    expect(Array.from(log.ys.subarray(0, log.count))).toEqual([1, 2]);
  });

  it("resumed and widened decimators give exactly the points of a fresh pass", () => {
    const n = 5000;
    const x = Float64Array.from({ length: n }, (_, i) => i * 0.75);
    const y = Float32Array.from({ length: n }, (_, i) =>
      i % 17 === 0 ? NaN : Math.cos(i / 50) * (1 + ((i * 31) % 7)),
    );
    const lo = Float32Array.from(y, (v) => v - 1);
    const hi = Float32Array.from(y, (v) => v + 2);
    const same = (a, b) => {
      expect(a.count).toBe(b.count);
      expect(Array.from(a.xs.subarray(0, a.count))).toEqual(Array.from(b.xs.subarray(0, b.count)));
      expect(Array.from((a.ys ?? a.lo).subarray(0, a.count))).toEqual(Array.from((b.ys ?? b.lo).subarray(0, b.count)));
      if (a.hi) expect(Array.from(a.hi.subarray(0, a.count))).toEqual(Array.from(b.hi.subarray(0, b.count)));
    };
    // streamed in uneven blocks while the span doubles 1024 -> 2048 -> 4096 (x reaches 3749)
    let m4 = new M4Decimator(0, 1024, 300);
    let band = new BandDecimator(0, 1024, 300);
    let rows = 0;
    for (const block of [7, 500, 1, 865, 1200, 2427]) {
      rows += block;
      while (x[rows - 1] > m4.x1) {
        m4 = M4Decimator.widen(m4, 2 * m4.x1);
        band = BandDecimator.widen(band, 2 * band.x1);
      }
      m4.extend(x, y, 0, rows);
      band.extend(x, lo, hi, 0, rows);
      same(m4.result(), decimateM4(x, y, 0, rows, 0, m4.x1, 300));
      same(band, decimateBand(x, lo, hi, 0, rows, 0, band.x1, 300));
    }
    expect(m4.x1).toBe(4096);
  });

  it("band decimation covers the widest extent per column", () => {
    const x = Float64Array.of(0, 1, 2, 3);
    const band = decimateBand(x, Float32Array.of(1, 0.5, 2, NaN), Float32Array.of(2, 3, 2.5, 4), 0, 4, 0, 4, 2);
    expect(band.count).toBe(2);
    expect([band.lo[0], band.hi[0], band.lo[1], band.hi[1]]).toEqual([0.5, 3, 2, 2.5]);
  });

  it("EMA smoothing is debiased and keeps NaN gaps", () => {
    const out = emaSmooth(Float32Array.of(1, NaN, 3), 3, 0.5);
    expect(out[0]).toBe(1);
    expect(Number.isNaN(out[1])).toBe(true);
    expect(out[2]).toBeCloseTo((0.5 * 0.5 * 1 + 0.5 * 3) / (1 - 0.25), 6);
    expect(Array.from(emaSmooth(Float32Array.of(4, 5), 2, 0))).toEqual([4, 5]);
  });

  it("ticks, runs and binary search", () => {
    expect(niceTicks(0, 1, 5)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(logTicks(0.5, 200)).toEqual([1, 10, 100]);
    expect(logTicks(1.5, 4)).toEqual([2]);
    expect(runsOf(Float32Array.of(0, 1, 1, 0, 1), 5)).toEqual([
      [1, 2],
      [4, 4],
    ]);
    expect(lowerBound(Float64Array.of(1, 2, 4), 3, 3)).toBe(2);
    expect(nearestFinite(Float64Array.of(0, 1, 2, 3), Float32Array.of(NaN, NaN, 5, NaN), 4, 0, 0, 10)).toBe(2);
    expect(nearestFinite(Float64Array.of(0, 1, 2, 3), Float32Array.of(NaN, NaN, 5, NaN), 4, 0, 0, 1)).toBe(-1);
    expect(splitSeries("isoscore|blocks|3")).toEqual(["isoscore", "blocks|3"]);
  });
});

describe("monitor view", () => {
  let el;
  let cleanups;
  let frames;
  let calls;
  beforeEach(() => {
    el = document.createElement("div");
    document.body.append(el);
    cleanups = [];
    frames = [];
    calls = [];
    // jsdom has no 2D canvas: a context that records method calls, so the painting code runs for real
    vi.spyOn(HTMLCanvasElement.prototype, "getContext").mockImplementation(
      () =>
        new Proxy(
          {},
          { get: (target, key) => (key in target ? target[key] : (...args) => calls.push([key, ...args])) },
        ),
    );
    vi.spyOn(window, "requestAnimationFrame").mockImplementation((fn) => {
      frames.push(fn);
      return frames.length;
    });
  });
  afterEach(() => {
    for (const fn of cleanups.reverse()) fn?.();
    el.remove();
    vi.restoreAllMocks();
  });
  const runFrames = () => {
    const pending = frames.splice(0);
    for (const fn of pending) fn();
    return pending.length;
  };
  const mount = (model) => {
    cleanups.push(monitor.initialize({ model }));
    cleanups.push(monitor.render({ model, el }));
    return el.querySelector(".iw-monitor");
  };
  const feed = (model, start, count) => {
    const xs = Array.from({ length: count }, (_, i) => start + i);
    model.emit(
      "msg:custom",
      ...appendMessage(start, xs, {
        loss: xs.map((s) => 1 / (s + 1)),
        "energy_ratio|L0": xs.map((s) => 2 + (s % 3)),
        "energy_ratio|L1": xs.map(() => 0.5),
        "lo|L0": xs.map(() => 0.8),
        "hi|L0": xs.map(() => 1.25),
        fitting: xs.map((s) => (s < 5 ? 1 : 0)),
      }),
    );
  };

  // first in this block on purpose: the warm-up runs once per page, after the first view that stays mounted
  it("warms its drawing paths once per page on a hidden copy that leaves the real view and store alone", async () => {
    const model = monitorModel();
    const root = mount(model);
    calls.length = 0;
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(Number(root.dataset.iwWarmUpMs)).toBeGreaterThan(0);
    expect(calls.filter(([name]) => name === "lineTo").length).toBeGreaterThan(100); // the hidden copy painted
    expect(frames.length).toBe(0); // synchronously, with no frame requested for the real view
    expect(storeOf(model).n).toBe(0);
    expect(root.dataset.iwRows).toBe("0");
    expect(document.querySelectorAll(".iw-monitor").length).toBe(1);
    const second = document.createElement("div");
    document.body.append(second);
    cleanups.push(monitor.render({ model, el: second }), () => second.remove());
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(second.querySelector(".iw-monitor").dataset.iwWarmUpMs).toBe("0.0"); // once per page
  });

  it("keeps rows that arrive before any view, and one store per model", () => {
    const model = monitorModel();
    cleanups.push(monitor.initialize({ model }));
    feed(model, 0, 10);
    const root = (() => {
      cleanups.push(monitor.render({ model, el }));
      return el.querySelector(".iw-monitor");
    })();
    expect(root.dataset.iwRows).toBe("10");
    expect(storeOf(model)).toBe(storeOf(model));
    expect(storeOf(monitorModel())).not.toBe(storeOf(model));
  });

  it("coalesces many messages into one redraw per animation frame", () => {
    const model = monitorModel();
    const root = mount(model);
    expect(root.dataset.iwRows).toBe("0");
    for (let k = 0; k < 20; k += 1) feed(model, k * 5, 5);
    expect(frames.length).toBe(1); // twenty messages, one frame requested
    expect(root.dataset.iwRows).toBe("0"); // nothing drawn before the frame
    calls.length = 0;
    expect(runFrames()).toBe(1);
    expect(root.dataset.iwRows).toBe("100");
    expect(calls.filter(([name]) => name === "lineTo").length).toBeGreaterThan(100); // curves were painted
    expect(calls.filter(([name]) => name === "fillText").map((c) => c[1])).toContain("L1"); // heatmap row label
    expect(frames.length).toBe(0);
    feed(model, 100, 5);
    expect(runFrames()).toBe(1);
    expect(root.dataset.iwRows).toBe("105");
    expect(root.querySelector(".iw-monitor-status").textContent).toBe("step 104 · 105 logged");
  });

  it("replaces its data when the checkpoint trait changes", () => {
    const model = monitorModel();
    const root = mount(model);
    feed(model, 0, 50);
    const { data, schema } = checkpointBytes([0, 10, 20], { loss: [3, 2, 1] });
    model.state.checkpoint_schema = schema;
    model.set("checkpoint", data);
    runFrames();
    expect(root.dataset.iwRows).toBe("3");
  });

  it("toggles panels and layers and shows hover readouts with the band", () => {
    const model = monitorModel();
    const root = mount(model);
    feed(model, 0, 20);
    runFrames();
    const panel = (id) => root.querySelector(`.iw-monitor-panel[data-panel="${id}"]`);
    expect(root.querySelectorAll(".iw-monitor-panel").length).toBe(3);
    const points = Number(root.dataset.iwPoints);
    const toggle = root.querySelector('.iw-monitor-panel-toggles input[data-panel="ratio"]');
    toggle.checked = false;
    toggle.dispatchEvent(new Event("change"));
    runFrames();
    expect(panel("ratio").hidden).toBe(true);
    expect(Number(root.dataset.iwPoints)).toBeLessThan(points);
    toggle.checked = true;
    toggle.dispatchEvent(new Event("change"));
    runFrames();
    // hover at step 7 in the ratio panel: readouts for both layers, L0 with its band
    const canvas = panel("ratio").querySelector("canvas");
    canvas.getBoundingClientRect = () => ({ left: 0, top: 0, width: 600, height: 170 });
    const px = (step) => 54 + (step / 32) * (600 - 54 - 10); // follow mode: 20 steps on [0, 32]
    canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: px(7), clientY: 50 }));
    runFrames();
    const readout = panel("ratio").querySelector(".iw-monitor-readout").textContent;
    expect(readout).toContain("step 7");
    expect(readout).toContain("L0: 3 [0.8, 1.25]");
    expect(readout).toContain("L1: 0.5");
    expect(panel("loss").querySelector(".iw-monitor-readout").textContent).toContain("loss: 0.125");
    const layerBox = root.querySelector('.iw-monitor-layers input[data-layer="L1"]');
    layerBox.checked = false;
    layerBox.dispatchEvent(new Event("change"));
    runFrames();
    expect(panel("ratio").querySelector(".iw-monitor-readout").textContent).not.toContain("L1");
  });

  it("zooms on a drag, keeps the zoom while data streams in, and resets on double-click", () => {
    const model = monitorModel();
    const root = mount(model);
    feed(model, 0, 100);
    runFrames();
    const canvas = root.querySelector('.iw-monitor-panel[data-panel="loss"] canvas');
    canvas.getBoundingClientRect = () => ({ left: 0, top: 0, width: 600, height: 170 });
    const all = Number(root.dataset.iwPoints);
    canvas.dispatchEvent(new MouseEvent("mousedown", { clientX: 100, clientY: 50, button: 0 }));
    canvas.dispatchEvent(new MouseEvent("mouseup", { clientX: 200, clientY: 50, button: 0 }));
    runFrames();
    const zoomed = Number(root.dataset.iwPoints);
    expect(zoomed).toBeLessThan(all / 2);
    expect(root.querySelector(".iw-monitor-reset").disabled).toBe(false);
    feed(model, 100, 100); // new steps land outside the zoomed range
    runFrames();
    expect(Number(root.dataset.iwPoints)).toBe(zoomed);
    canvas.dispatchEvent(new MouseEvent("dblclick"));
    runFrames();
    expect(Number(root.dataset.iwPoints)).toBeGreaterThan(all);
  });

  it("smoothing changes the readout of the loss", () => {
    const model = monitorModel();
    const root = mount(model);
    feed(model, 0, 20);
    runFrames();
    const slider = root.querySelector(".iw-monitor-smoothing");
    slider.value = "0.9";
    slider.dispatchEvent(new Event("input"));
    const canvas = root.querySelector('.iw-monitor-panel[data-panel="loss"] canvas');
    canvas.getBoundingClientRect = () => ({ left: 0, top: 0, width: 600, height: 170 });
    canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: 54 + (19 / 32) * 536, clientY: 50 }));
    runFrames();
    const shown = Number(
      /loss: ([\d.]+)/.exec(root.querySelector('[data-panel="loss"] .iw-monitor-readout').textContent)[1],
    );
    const expected = emaSmooth(
      Float32Array.from({ length: 20 }, (_, s) => 1 / (s + 1)),
      20,
      0.9,
    )[19];
    expect(shown).toBeCloseTo(expected, 3);
    expect(shown).toBeGreaterThan(0.06); // raw value at step 19 is 0.05
  });

  it("shows layer names and titles as text, never markup", () => {
    window.__xss = 0;
    const evil = "<img src=x onerror=window.__xss=1>";
    const model = monitorModel({ layers: [evil], title: evil });
    const root = mount(model);
    expect(root.querySelector("img")).toBeNull();
    expect(root.querySelector(".iw-monitor-layer").textContent).toBe(evil);
    expect(root.querySelector(".iw-monitor-title").textContent).toBe(evil);
    expect(window.__xss).toBe(0);
  });

  it("removes its listeners on cleanup", () => {
    const model = monitorModel();
    const stopModel = monitor.initialize({ model });
    const stopView = monitor.render({ model, el });
    expect(model.listenerCount()).toBeGreaterThan(2);
    stopView();
    stopModel();
    expect(model.listenerCount()).toBe(0);
  });
});
