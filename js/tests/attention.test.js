// The attention view's maths (float16, pinned top-k, focus state machine, grid lookup) and its kernel protocol on a
// fake model: a head is requested by custom message, painted from the reply, pinned heads shown without a kernel.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import attention from "../src/attention.js";
import {
  combineHeads,
  decodeFloat16,
  denseFromTopK,
  float16ToFloat32,
  gridCellAt,
  gridLayout,
  heatmapCellAt,
  lineSegments,
  nextFocus,
  paintWeights,
  weightRamp,
} from "../src/lib/attention_math.js";
import { dataViewAt, fakeModel, payload, settle } from "./fake_model.js";

describe("attention maths", () => {
  it("decodes float16 (normal, subnormal, zero, sign, inf) and honours byteOffset", () => {
    const bits = Uint16Array.of(0x3c00, 0x3800, 0x0001, 0x0000, 0xc000, 0x7c00, 0x3555);
    const values = float16ToFloat32(bits);
    expect(Array.from(values.slice(0, 6))).toEqual([1, 0.5, 2 ** -24, 0, -2, Infinity]);
    expect(values[6]).toBeCloseTo(1 / 3, 3);
    expect(Array.from(decodeFloat16(dataViewAt(bits, 13)))).toEqual(Array.from(values)); // odd offset: copied
  });
  it("makes a pinned top-k head dense, zeros where weights were dropped", () => {
    // two pinned heads of 2 queries x 1 kept key over 3 keys
    const dense = denseFromTopK([2, 0, 1, 1], [0.9, 0.8, 0.7, 0.6], 1, 2, 1, 3);
    expect(Array.from(dense).map((v) => Number(v.toFixed(2)))).toEqual([0, 0.7, 0, 0, 0.6, 0]);
  });
  it("combines heads by mean and max", () => {
    const a = Float32Array.of(0, 1, 0.5);
    const b = Float32Array.of(1, 1, 0);
    expect(Array.from(combineHeads([a, b], "mean"))).toEqual([0.5, 1, 0.25]);
    expect(Array.from(combineHeads([a, b], "max"))).toEqual([1, 1, 0.5]);
    expect(combineHeads([a])).toBe(a);
  });
  it("focuses on hover, locks on click, unlocks on a second click or Escape", () => {
    let s = { focus: -1, locked: false };
    s = nextFocus(s, { type: "hover", token: 2 });
    expect(s).toEqual({ focus: 2, locked: false });
    s = nextFocus(s, { type: "click", token: 2 });
    expect(s).toEqual({ focus: 2, locked: true });
    expect(nextFocus(s, { type: "hover", token: 5 })).toEqual(s); // hover never overrides a lock
    expect(nextFocus(s, { type: "leave" })).toEqual(s);
    expect(nextFocus(s, { type: "click", token: 4 })).toEqual({ focus: 4, locked: true }); // lock moves
    expect(nextFocus(s, { type: "click", token: 2 })).toEqual({ focus: 2, locked: false });
    expect(nextFocus(s, { type: "escape" })).toEqual({ focus: 2, locked: false });
    expect(nextFocus({ focus: 3, locked: false }, { type: "leave" })).toEqual({ focus: -1, locked: false });
  });
  it("finds heatmap cells and model-view thumbnails, none in gaps", () => {
    expect(heatmapCellAt(15, 5, { tq: 4, tk: 4, scale: 10 })).toEqual({ query: 0, key: 1 });
    expect(heatmapCellAt(45, 5, { tq: 4, tk: 4, scale: 10 })).toBeNull();
    const grid = gridLayout({ layers: 3, heads: 6, kvHeads: 2, cell: 10, gap: 2, groupGap: 8, label: 30 });
    expect(grid.x(3) - grid.x(2)).toBe(12 + 8); // KV groups are separated
    expect(gridCellAt(grid.x(4) + 1, grid.y(2) + 1, grid)).toEqual({ layer: 2, head: 4 });
    expect(gridCellAt(grid.x(2) + 11, grid.y(0) + 1, grid)).toBeNull();
    expect(gridCellAt(5, 5, grid)).toBeNull();
  });
  it("keeps only lines above the threshold, only the focus's for long inputs", () => {
    const v = Float32Array.of(1, 0, 0.4, 0.6);
    expect(lineSegments(v, 2, 2, -1, 0.5)).toEqual([
      [0, 0, 1],
      [1, 1, Math.fround(0.6)],
    ]);
    expect(lineSegments(v, 2, 2, 1, 0.3)).toEqual([
      [1, 0, Math.fround(0.4)],
      [1, 1, Math.fround(0.6)],
    ]);
    expect(lineSegments(v, 2, 2, -1, 0.5, 1)).toEqual([]);
  });
  it("paints weights through the ramp, the maximum at the ramp's end", () => {
    const lut = weightRamp("light");
    const px = new Uint8ClampedArray(8);
    paintWeights(px, Float32Array.of(0, 0.5), 0.5, lut);
    expect(Array.from(px.slice(0, 3))).toEqual([247, 247, 247]);
    expect(Array.from(px.slice(4, 7))).toEqual([230, 97, 1]);
  });
});

const f16 = (values) => {
  // exact float16 bit patterns of small dyadic numbers, for the fake kernel's replies
  const out = new Uint16Array(values.length);
  values.forEach((v, i) => {
    if (v === 0) return;
    const e = Math.floor(Math.log2(v));
    out[i] = ((e + 15) << 10) | Math.round((v / 2 ** e - 1) * 1024);
  });
  return out;
};

function state(extra = {}) {
  return {
    error: "", tokens: ["<b>a</b>", "b", "c"], key_tokens: ["<b>a</b>", "b", "c"], generated_mask: payload(Uint8Array.from([0, 0, 1]), "bool", [3]),
    n_layers: 2, n_heads: 2, n_kv_heads: 1, layer_names: ["l0", "l1"], kind: "self", model_name: "m",
    thumbnails: payload(new Int8Array(2 * 2 * 2 * 2).fill(64), "int8", [2, 2, 2, 2]),
    pinned: [{ layer: 1, head: 1 }], pinned_keys: payload(Int8Array.from([0, 1, 1, 0, 2, 1]), "int8", [1, 3, 2]),
    pinned_weights: payload(Float32Array.from([1, 0, 0.75, 0.25, 0.5, 0.5]), "float32", [1, 3, 2]), pinned_top_k: 2,
    view: "head", layer: 0, heads: [0], aggregate: "", pattern_style: "heatmap", focus: -1, locked: false, ...extra,
  }; // prettier-ignore
}

describe("attention view", () => {
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
  const reply = (model, msg, values) => {
    for (const handler of model.handlers.get("msg:custom"))
      handler({ type: "pattern", id: msg.id, layer: msg.layer, head: msg.head, dtype: "float16", shape: [3, 3] }, [
        dataViewAt(f16(values), 6),
      ]);
  };

  it("asks the kernel for the head it shows and paints the reply; escapes token text", async () => {
    const model = fakeModel(state());
    cleanup = attention.render({ model, el });
    await settle();
    expect(model.send).toHaveBeenCalledWith({ type: "request", id: 1, layer: 0, head: 0 });
    expect(el.querySelector(".iw-attn-loading").textContent).toMatch(/Loading from the kernel/);
    expect(el.querySelector(".iw-attn-token").textContent).toBe("<b>a</b>");
    expect(el.querySelector(".iw-attn-token b")).toBeNull();
    reply(model, model.send.mock.calls[0][0], [1, 0, 0, 0.5, 0.5, 0, 0.25, 0.25, 0.5]);
    await settle();
    expect(el.querySelector("canvas.iw-attn-heatmap").dataset.source).toBe("kernel");
    // switching heads requests the other one; switching back is served from the cache
    model.set("heads", [1]);
    await settle();
    expect(model.send).toHaveBeenLastCalledWith({ type: "request", id: 2, layer: 0, head: 1 });
    model.set("heads", [0]);
    await settle();
    expect(model.send).toHaveBeenCalledTimes(2);
  });

  it("focuses on hover, locks on click, unlocks on Escape, and colours the keys by the focus row", async () => {
    const model = fakeModel(state());
    cleanup = attention.render({ model, el });
    reply(model, model.send.mock.calls[0][0], [1, 0, 0, 0.5, 0.5, 0, 0.25, 0.25, 0.5]);
    await settle();
    const tokens = () => el.querySelectorAll(".iw-attn-token");
    tokens()[2].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await settle();
    expect([model.get("focus"), model.get("locked")]).toEqual([2, false]);
    expect(tokens()[2].style.backgroundColor).toBe("rgb(230, 97, 1)"); // weight 0.5 is the row's maximum
    tokens()[2].dispatchEvent(new MouseEvent("click", { bubbles: true }));
    tokens()[0].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await settle();
    expect([model.get("focus"), model.get("locked")]).toEqual([2, true]);
    expect(el.querySelector(".iw-attn-status").textContent).toMatch(/locked/);
    el.querySelector(".iw-attention").dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
    el.querySelector(".iw-attn-tokens").dispatchEvent(new MouseEvent("mouseleave"));
    await settle();
    expect([model.get("focus"), model.get("locked")]).toEqual([-1, false]);
  });

  it("without a kernel, shows pinned heads (and says what was kept) and explains the others", async () => {
    vi.useFakeTimers();
    const model = fakeModel(state({ layer: 1, heads: [1] }));
    cleanup = attention.render({ model, el });
    await vi.runAllTimersAsync();
    expect(el.querySelector("canvas.iw-attn-heatmap").dataset.source).toBe("pinned");
    expect(el.querySelector("figcaption").textContent).toMatch(/pinned: top 2 keys per query/);
    expect(el.querySelector(".iw-attn-note").textContent).toMatch(
      /keep only the pinned heads.*top 2 keys per query.*layer 1 head 1/,
    );
    model.set("heads", [0]);
    await vi.runAllTimersAsync();
    expect(el.querySelector(".iw-attn-loading").textContent).toMatch(/only pinned heads are kept/);
  });

  it("names the axes, labels short axes token by token (as text), and exports the shown head as CSV and HTML", async () => {
    const evil = '<img src=x onerror=alert(1)>,"q"';
    const tokens = ["<b>a</b>", evil, "c"];
    const model = fakeModel(
      state({ layer: 1, heads: [1], tokens, key_tokens: tokens, layer_names: ["l0", "model.layers.1.self_attn"] }),
    );
    cleanup = attention.render({ model, el });
    await settle();
    const panel = el.querySelector(".iw-attn-panel");
    expect(panel.querySelector("figcaption").textContent).toMatch(
      /^layer 1 \(model\.layers\.1\.self_attn\), head 1 \(KV 0\)/,
    );
    expect(panel.querySelector(".iw-attn-axis-y").textContent).toBe("queries 0–2 ↓");
    expect(panel.querySelector(".iw-attn-axis-x").textContent).toBe("keys 0–2 →");
    expect(Array.from(panel.querySelectorAll(".iw-attn-ticks-y > div"), (d) => d.textContent)).toEqual([
      "<b>a</b>",
      evil,
      "c",
    ]);
    expect(panel.querySelectorAll(".iw-attn-ticks-x > div")).toHaveLength(3);
    expect(el.querySelector("img, .iw-attn-panel b")).toBeNull();
    expect(Array.from(el.querySelectorAll("[data-iw-export]"), (b) => b.dataset.iwExport)).toEqual([
      "png",
      "svg",
      "csv",
      "html",
    ]);

    const blobs = [];
    const original = URL.createObjectURL;
    URL.createObjectURL = (blob) => (blobs.push(blob), "blob:test");
    Range.prototype.getClientRects ??= () => []; // jsdom lays nothing out: the scene is then text without boxes
    try {
      el.querySelector('[data-iw-export="csv"]').click();
      el.querySelector('[data-iw-export="html"]').click();
      for (let i = 0; i < 20 && blobs.length < 2; i += 1) await settle();
    } finally {
      URL.createObjectURL = original;
    }
    expect(el.querySelector(".iw-error")).toBeNull();
    const csv = (await blobs[0].text()).split("\r\n");
    expect(csv[0]).toBe("layer,layer_name,head,source,query,query_token,key,key_token,weight");
    const quoted = '"<img src=x onerror=alert(1)>,""q"""';
    // the pinned head made dense (top 2 keys per query): every non-zero weight, zeros (dropped keys) left out
    expect(csv.slice(1, -1)).toEqual([
      "1,model.layers.1.self_attn,1,pinned top-2,0,<b>a</b>,0,<b>a</b>,1",
      "1,model.layers.1.self_attn,1,pinned top-2,1," + quoted + ",0,<b>a</b>,0.25",
      "1,model.layers.1.self_attn,1,pinned top-2,1," + quoted + ",1," + quoted + ",0.75",
      "1,model.layers.1.self_attn,1,pinned top-2,2,c,1," + quoted + ",0.5",
      "1,model.layers.1.self_attn,1,pinned top-2,2,c,2,c,0.5",
    ]);
    const page = new DOMParser().parseFromString(await blobs[1].text(), "text/html");
    expect(page.querySelector("h1").textContent).toBe("self attention of m: layer 1, head 1 (KV 0)");
    expect(page.querySelector("script, img, td b")).toBeNull();
    const rows = Array.from(page.querySelectorAll("tr"), (tr) => Array.from(tr.children, (c) => c.textContent));
    expect(rows[0]).toEqual([
      "layer",
      "layer_name",
      "head",
      "source",
      "query",
      "query_token",
      "rank",
      "key",
      "key_token",
      "weight",
    ]);
    expect(rows.slice(1).map((r) => [r[4], r[6], r[7], r[9]])).toEqual([
      ["0", "1", "0", "1"],
      ["1", "1", "1", "0.75"],
      ["1", "2", "0", "0.25"],
      ["2", "1", "1", "0.5"],
      ["2", "2", "2", "0.5"],
    ]);
    expect(rows[2][5]).toBe(evil);
  });

  it("the model view names its rows and columns", async () => {
    const model = fakeModel(state({ view: "model", n_heads: 2, n_kv_heads: 1 }));
    cleanup = attention.render({ model, el });
    await settle();
    expect(el.querySelector(".iw-attn-model-axes").textContent).toMatch(
      /^Rows: layers 0–1 \(L\)\. Columns: query heads 0–1 \(h\), in 1 KV-head group\. Each thumbnail: queries down, keys across\./,
    );
  });

  it("opens a head from the model view and sends pin requests", async () => {
    const model = fakeModel(state({ view: "model" }));
    cleanup = attention.render({ model, el });
    await settle();
    expect(el.querySelector(".iw-attn-model-box").hidden).toBe(false);
    el.querySelector(".iw-pin").click();
    expect(model.send).toHaveBeenLastCalledWith({ type: "pin", layer: 0, head: 0 });
  });
});
