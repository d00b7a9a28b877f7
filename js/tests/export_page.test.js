import { afterEach, describe, expect, it, vi } from "vitest";
import { base64ToDataView, createModelShim, mountAll, mountWidget, restoreBuffers } from "../src/lib/export_page.js";
import * as tokenHighlight from "../src/token_highlight.js";

function base64(typed) {
  return Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength).toString("base64");
}

function exportedState() {
  return {
    state: {
      tokens: ["Hello", "world"],
      spaces_before: ["", " "],
      special_mask: { dtype: "bool", shape: [2] },
      word_ids: { dtype: "int32", shape: [2] },
      sentence_ids: { dtype: "int32", shape: [2] },
      scores: { dtype: "float32", shape: [1, 2] },
      target_labels: ["positive"],
      target_probs: [0.9],
      selected_target: 0,
      selected_token: -1,
      hovered_token: -1,
      granularity: "token",
      show_special_tokens: false,
      method: "saliency",
      score_meaning: "",
      completeness_error: [],
      error: "",
    },
    buffers: [
      { path: ["special_mask", "data"], data: base64(new Uint8Array(2)) },
      { path: ["word_ids", "data"], data: base64(Int32Array.from([0, 1])) },
      { path: ["sentence_ids", "data"], data: base64(new Int32Array(2)) },
      { path: ["scores", "data"], data: base64(Float32Array.from([0.25, -0.5])) },
    ],
  };
}

afterEach(() => {
  document.body.replaceChildren();
});

describe("export page boot", () => {
  it("decodes base64 buffers into DataViews at their state paths", () => {
    expect(Array.from(new Float32Array(base64ToDataView(base64(Float32Array.from([1.5, -2]))).buffer))).toEqual([
      1.5, -2,
    ]);
    const state = restoreBuffers({ a: { data: null }, b: [0, { x: 1 }] }, [
      { path: ["a", "data"], data: base64(Uint8Array.from([7])) },
      { path: ["b", 1, "x"], data: base64(Uint8Array.from([9])) },
    ]);
    expect(state.a.data).toBeInstanceOf(DataView);
    expect(state.a.data.getUint8(0)).toBe(7);
    expect(state.b[1].x.getUint8(0)).toBe(9);
  });

  it("gives a read-only model shim: local set notifies, save_changes and send go nowhere", () => {
    const model = createModelShim({ granularity: "token" });
    const handler = vi.fn();
    model.on("change:granularity", handler);
    model.set("granularity", "word");
    expect(model.get("granularity")).toBe("word");
    expect(handler).toHaveBeenCalledTimes(1);
    model.off("change:granularity", handler);
    model.set("granularity", "sentence");
    expect(handler).toHaveBeenCalledTimes(1);
    expect(model.save_changes()).toBeUndefined();
    expect(model.send({ any: "thing" })).toBeUndefined();
  });

  it("renders the widget module from exported state, and stays interactive", async () => {
    const container = document.createElement("div");
    document.body.append(container);
    const model = await mountWidget(container, exportedState(), async () => tokenHighlight);
    const spans = Array.from(container.querySelectorAll(".iw-token"));
    expect(spans.map((s) => s.textContent)).toEqual(["Hello", "world"]);
    expect(spans[1].style.backgroundColor).toBe("rgb(33, 102, 172)");
    const select = container.querySelector(".iw-granularity-select");
    select.value = "sentence";
    select.dispatchEvent(new Event("change"));
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(model.get("granularity")).toBe("sentence");
    expect(Array.from(container.querySelectorAll(".iw-token"), (s) => s.textContent)).toEqual(["Hello world"]);
  });

  it("shows a message in place of a widget whose data block is missing", async () => {
    document.body.innerHTML = '<div class="iw-export-widget" data-iw-esm="nope" data-iw-state="nope2"></div>';
    await mountAll(document);
    const box = document.querySelector(".iw-export-widget .iw-error");
    expect(box.getAttribute("role")).toBe("alert");
    expect(box.textContent).toContain("missing embedded data block #nope");
  });
});
