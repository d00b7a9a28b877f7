// DOM contracts of the token highlighter's new options, the generation, comparison and example-list views,
// block-by-block rendering of long inputs and the browser export helpers.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import comparison from "../src/comparison.js";
import examples, { visibleOrder } from "../src/example_list.js";
import generation, { heatmapCell, logRatio, unitRow } from "../src/generation.js";
import { unitText } from "../src/lib/aggregate.js";
import { scoreColours } from "../src/lib/colour.js";
import { labelRanks, pageOf, sortIndices, textTable } from "../src/lib/controls.js";
import { sceneToSvgText, staticPage, svgNamespace, toCsv } from "../src/lib/export.js";
import { blockBounds, renderTokenRun } from "../src/lib/paint.js";
import tokens from "../src/token_highlight.js";
import { fakeModel, payload, settle } from "./fake_model.js";

const EVIL = "<img src=x onerror=alert(1)>";
let el;
let cleanup;
beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
  window.__xss = 0;
});
afterEach(() => {
  cleanup?.();
  cleanup = undefined;
  el.remove();
});
const mount = (widget, model) => {
  cleanup = widget.render({ model, el });
  return model;
};
const spans = () => Array.from(el.querySelectorAll(".iw-token"));
const bool = (values, offset = 3) => payload(Uint8Array.from(values), "bool", [values.length], offset);
const i32 = (values, offset = 4) => payload(Int32Array.from(values), "int32", [values.length], offset);
const f32 = (rows, offset = 12) =>
  payload(Float32Array.from(rows.flat()), "float32", [rows.length, rows[0].length], offset);

function tokenState(overrides = {}) {
  return {
    tokens: ["a", "b", "c", EVIL],
    spaces_before: ["", " ", " ", " "],
    special_mask: bool([0, 0, 0, 0]),
    word_ids: payload(Int32Array.from([0, 1, 2, 3]), "int32", [4], 8),
    sentence_ids: payload(Int32Array.from([0, 0, 0, 0]), "int32", [4], 4),
    scores: f32([
      [0.0, 0.5, 1.0, 0.25],
      [4.0, 0, 0, 0],
    ]),
    target_labels: ["x", "y"],
    target_probs: [0.9, 0.1],
    selected_target: 0,
    selected_token: -1,
    hovered_token: -1,
    granularity: "token",
    show_special_tokens: false,
    method: "saliency",
    score_meaning: "L2 norm",
    completeness_error: [],
    signed: false,
    shared_scale: false,
    encoding: "colour",
    high_contrast: false,
    error: "",
    ...overrides,
  };
}

describe("token highlighter options", () => {
  it("uses the sequential scale and a 0..max legend for unsigned scores", () => {
    mount(tokens, fakeModel(tokenState()));
    expect(spans()[2].style.backgroundColor).toBe(scoreColours(1, 1, "light", { signed: false }).background);
    expect(spans()[2].style.backgroundColor).toBe("rgb(230, 97, 1)");
    const labels = Array.from(el.querySelectorAll(".iw-legend-labels span"), (s) => s.textContent);
    expect(labels).toEqual(["0", "1"]);
    expect(el.querySelector(".iw-legend").getAttribute("aria-label")).toContain("from 0 (pale)");
  });

  it("shares the scale across classes when asked, and the toggle writes the trait", async () => {
    const model = mount(tokens, fakeModel(tokenState()));
    el.querySelector(".iw-shared-toggle").click();
    expect(model.state.shared_scale).toBe(true);
    await settle();
    expect(spans()[2].style.backgroundColor).toBe(scoreColours(1, 4, "light", { signed: false }).background);
  });

  it("encodes magnitude by underline weight and sign by a marker without colour", async () => {
    mount(
      tokens,
      fakeModel(
        tokenState({
          signed: true,
          scores: f32([
            [-1, 0.5, 0, 0.25],
            [1, 1, 1, 1],
          ]),
          encoding: "underline",
        }),
      ),
    );
    const [a, b, c] = spans();
    expect(a.style.backgroundColor).toBe("");
    expect(a.style.borderBottom).toContain("6px solid");
    expect(b.style.borderBottom).toContain("3.5px solid");
    expect(a.dataset.iwSign).toBe("\u2212");
    expect(b.dataset.iwSign).toBe("+");
    expect(c.dataset.iwSign).toBeUndefined();
    expect(el.querySelector(".iw-legend").textContent).toContain("underline weight");
  });

  it("keeps an off-screen table alternative and tokens as inert text", async () => {
    mount(tokens, fakeModel(tokenState()));
    await settle(); // the table is built in idle time after the tokens
    const rows = Array.from(el.querySelectorAll(".iw-sr-only table tr"));
    expect(rows).toHaveLength(5);
    expect(rows[4].children[0].textContent).toBe(EVIL);
    expect(el.querySelector("img")).toBeNull();
    expect(spans()[3].textContent).toBe(EVIL);
  });

  it("renders 10k tokens block by block: the first block at once, all after a few frames", async () => {
    const n = 10000;
    const toks = Array.from({ length: n }, (_, i) => `t${i}`);
    const model = fakeModel(tokenState({
      tokens: toks, spaces_before: toks.map(() => " "), special_mask: bool(new Array(n).fill(0)),
      word_ids: payload(Int32Array.from(toks, (_, i) => i), "int32", [n], 0),
      sentence_ids: payload(new Int32Array(n), "int32", [n], 0),
      scores: payload(Float32Array.from({ length: 2 * n }, (_, i) => Math.sin(i)), "float32", [2, n], 0),
    })); // prettier-ignore
    mount(tokens, model);
    const box = el.querySelector(".iw-tokens");
    expect(box.querySelectorAll(".iw-token").length).toBeLessThan(n);
    // Only the first block exists right after mount (structure, not timing: the first-paint goal is measured by
    // benchmarks/widgets.py in a real browser).
    const all = Array.from(box.querySelectorAll(".iw-token"));
    expect(all[0].style.backgroundColor).not.toBe(""); // the first block is painted at once
    expect(box.querySelectorAll(".iw-token[aria-label]").length).toBe(box.querySelectorAll(".iw-token").length);
    for (let k = 0; k < 400 && box.querySelectorAll(".iw-token").length < n; k += 1)
      await new Promise((r) => setTimeout(r, 20));
    expect(box.querySelectorAll(".iw-token")).toHaveLength(n);
    expect(box.textContent.trim().startsWith("t0 t1 t2")).toBe(true);
  }, 60000);
});

describe("long inputs", () => {
  const long = (n) => {
    const toks = Array.from({ length: n }, (_, i) => `t${i}`);
    return fakeModel(tokenState({
      tokens: toks, spaces_before: toks.map((_, i) => (i ? " " : "")), special_mask: bool(new Array(n).fill(0)),
      word_ids: payload(Int32Array.from(toks, (_, i) => i), "int32", [n], 0),
      sentence_ids: payload(new Int32Array(n), "int32", [n], 0),
      scores: payload(Float32Array.from({ length: 2 * n }, (_, i) => i % n), "float32", [2, n], 0),
    })); // prettier-ignore
  };
  const waitFor = async (ready) => {
    for (let k = 0; k < 400 && !ready(); k += 1) await new Promise((r) => setTimeout(r, 10));
  };

  it("keeps keyboard navigation, selection and the table correct for units not built yet", async () => {
    const n = 3000;
    const model = mount(tokens, long(n));
    const box = el.querySelector(".iw-tokens");
    expect(box.querySelectorAll(".iw-token-block").length).toBeGreaterThan(5);
    model.set("selected_token", 2900); // not built yet: marked when its block is built
    const first = box.querySelector(".iw-token");
    first.focus();
    first.dispatchEvent(new KeyboardEvent("keydown", { key: "End", bubbles: true }));
    expect(document.activeElement.textContent).toBe(`t${n - 1}`); // its block was built on demand
    expect(el.querySelector(".iw-tooltip").textContent).toContain(`"t${n - 1}"`);
    document.activeElement.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowLeft", bubbles: true }));
    expect(document.activeElement.textContent).toBe(`t${n - 2}`);
    await waitFor(
      () => box.querySelectorAll(".iw-token").length === n && el.querySelectorAll(".iw-sr-table tbody tr").length === n,
    );
    expect(box.querySelectorAll(".iw-token")).toHaveLength(n);
    expect(Array.from(box.querySelectorAll('.iw-token[aria-selected="true"]'), (s) => s.textContent)).toEqual([
      "t2900",
    ]);
    const rows = el.querySelectorAll(".iw-sr-table tbody tr");
    expect(rows).toHaveLength(n); // every unit, not only the first few hundred
    expect(Array.from(rows[n - 1].children, (c) => c.textContent)).toEqual([
      `t${n - 1}`,
      "+2999",
      `1 of ${n} by |score|`,
    ]);
    expect(box.textContent.split(" ").slice(-2)).toEqual([`t${n - 2}`, `t${n - 1}`]); // no text lost between blocks
  });

  it("exports every token to CSV, not only the ones already drawn", async () => {
    const n = 3000;
    mount(tokens, long(n));
    const blobs = [];
    const original = URL.createObjectURL;
    URL.createObjectURL = (blob) => (blobs.push(blob), "blob:test");
    try {
      el.querySelector('[data-iw-export="csv"]').click();
      await waitFor(() => blobs.length > 0);
    } finally {
      URL.createObjectURL = original;
    }
    const lines = (await blobs[0].text()).trim().split("\r\n");
    expect(lines).toHaveLength(n + 1);
    expect(lines[0]).toBe("position,token,start_token,x,y");
    expect(lines[n]).toBe(`${n - 1},t${n - 1},${n - 1},${n - 1},${n - 1}`);
  });
});

describe("shared list helpers", () => {
  it("pages, sorts with NaN last and ties in index order, ranks labels, joins unit text, builds inert tables", () => {
    expect(pageOf([5, 6, 7], 9, 2)).toEqual({ page: 1, pages: 2, items: [7] });
    expect(pageOf([], 0, 10)).toEqual({ page: 0, pages: 1, items: [] });
    const keys = [2, NaN, 1, 2, -Infinity];
    expect(sortIndices([0, 1, 2, 3, 4], (i) => keys[i], false)).toEqual([4, 2, 0, 3, 1]);
    expect(sortIndices([0, 1, 2, 3, 4], (i) => keys[i], true)).toEqual([0, 3, 2, 4, 1]);
    expect([...labelRanks(["b", "a", "b"])]).toEqual([
      ["a", 0],
      ["b", 1],
    ]);
    expect(unitText([1, 2], ["a", "un", "able"], ["", " ", ""])).toBe("unable");
    expect(unitText([0, 1], ["x", "y"], ["  ", "\n"])).toBe("x\ny");
    const table = textTable(["token"], [[EVIL]], { caption: "c" });
    expect(table.querySelector("td").textContent).toBe(EVIL);
    expect(table.querySelector("img")).toBeNull();
  });
});

describe("renderTokenRun", () => {
  it("splits long runs into blocks at newlines, else sentence starts, else after `size` units", () => {
    expect(blockBounds(5, { size: 4 })).toEqual([[0, 5]]); // a short tail joins the block
    expect(blockBounds(10, { size: 4 })).toEqual([
      [0, 4],
      [4, 10],
    ]);
    expect(blockBounds(13, { size: 4 })).toEqual([
      [0, 4],
      [4, 8],
      [8, 13],
    ]);
    const rank = { 5: 1, 6: 2, 13: 1 };
    expect(blockBounds(20, { size: 4, breakRank: (u) => rank[u] ?? 0 })).toEqual([
      [0, 6],
      [6, 13],
      [13, 17],
      [17, 20],
    ]);
  });

  it("builds one block at once, the rest in idle time, and any unit on demand", async () => {
    const box = document.createElement("div");
    const built = [];
    const build = (u, parent, atBlockStart) => {
      built.push(u);
      const span = document.createElement("span");
      span.textContent = `${atBlockStart ? "|" : ""}${u}`;
      parent.append(span);
      return span;
    };
    const run = renderTokenRun(box, { count: 10, build, size: 3, single: 4 });
    expect(Array.from(box.children, (b) => b.className)).toEqual([
      "iw-token-block",
      "iw-token-block",
      "iw-token-block",
    ]);
    expect(box.textContent).toBe("|012");
    expect(run.span(8)).toBeUndefined();
    expect(run.ensure(8).textContent).toBe("8"); // the last block (3 + 3 + 4 units), before the middle one
    expect(box.textContent).toBe("|012|6789");
    run.finish();
    expect(box.textContent).toBe("|012|345|6789");
    expect(built.sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]); // each unit built once

    const small = renderTokenRun(box, { count: 3, build, single: 4 });
    expect(box.children).toHaveLength(3); // one inline run, no blocks
    expect(small.built()).toHaveLength(3);
    const idle = renderTokenRun(box, { count: 10, build, size: 3, single: 4 });
    await settle();
    await settle();
    expect(idle.built()).toHaveLength(10);
  });
});

function generationState(overrides = {}) {
  return {
    tokens: ["The", EVIL, "was", "great", "!"],
    spaces_before: ["", " ", " ", " ", ""],
    special_mask: bool([0, 0, 0, 0, 0]),
    generated_mask: bool([0, 0, 0, 1, 1], 7),
    scores: f32([
      [0.1, -0.4, 0.2, NaN, NaN],
      [0.05, 0.3, -0.1, 0.6, NaN],
    ]),
    step_tokens: [3, 4],
    step_probs: [0.42, 0.9],
    method: "integrated_gradients",
    score_meaning: "",
    signed: true,
    foil_tokens: [],
    foil_probs: [],
    contrast: "",
    shared_scale: false,
    encoding: "colour",
    high_contrast: false,
    view: "text",
    selected_step: 0,
    selected_token: -1,
    hovered_token: -1,
    error: "",
    ...overrides,
  };
}

describe("generation view", () => {
  it("annotates generated tokens with probabilities and colours the selected step's sources", () => {
    mount(generation, fakeModel(generationState()));
    const [, evil, , great, bang] = spans();
    expect(great.dataset.prob).toBe("42.0%");
    expect(bang.dataset.prob).toBe("90.0%");
    expect(great.classList.contains("iw-source-of")).toBe(true);
    expect(evil.style.backgroundColor).toBe(scoreColours(-0.4, 0.4).background);
    expect(bang.classList.contains("iw-unseen")).toBe(true);
    expect(evil.textContent).toBe(EVIL);
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector(".iw-generation-status").textContent).toContain('"great" (p = 42.0%)');
  });

  it("labels the turns of a chat conversation and folds the template's tokens", () => {
    const chat = generationState({
      tokens: ["<|im_start|>", "user", "\n", "Hi", "<|im_end|>", "<|im_start|>", "Hello", "!"],
      spaces_before: ["", "", "", "", "", "", "", ""],
      special_mask: bool([1, 1, 1, 0, 1, 1, 0, 0]),
      generated_mask: bool([0, 0, 0, 0, 0, 0, 1, 1], 7),
      turn_ids: payload(Int32Array.from([-1, -1, -1, 0, -1, -1, 1, 1]), "int32", [8], 4),
      turn_roles: ["user", EVIL],
      scores: f32([
        [0, 0, 0, 0.5, 0, 0, NaN, NaN],
        [0, 0, 0, 0.2, 0, 0, 0.4, NaN],
      ]),
      step_tokens: [6, 7],
    });
    mount(generation, fakeModel(chat));
    expect(spans().map((s) => s.textContent)).toEqual(["Hi", "Hello", "!"]);
    expect(Array.from(el.querySelectorAll(".iw-role"), (r) => r.textContent)).toEqual(["user", EVIL]);
    expect(el.querySelector("img")).toBeNull();
  });

  it("previews sources on hover and selects the step on click", async () => {
    const model = mount(generation, fakeModel(generationState()));
    const bang = spans()[4];
    bang.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(spans()[1].style.backgroundColor).toBe(scoreColours(0.3, 0.6).background);
    expect(model.state.selected_step).toBe(0);
    el.querySelector(".iw-tokens").dispatchEvent(new MouseEvent("mouseleave"));
    expect(spans()[1].style.backgroundColor).toBe(scoreColours(-0.4, 0.4).background);
    bang.click();
    expect(model.state.selected_step).toBe(1);
    await settle();
    expect(spans()[4].classList.contains("iw-source-of")).toBe(true);
    expect(spans()[3].classList.contains("iw-unseen")).toBe(false);
  });

  it("switches to the heatmap and maps canvas pixels to cells", async () => {
    const model = mount(generation, fakeModel(generationState()));
    el.querySelector('button[data-view="heatmap"]').click();
    expect(model.state.view).toBe("heatmap");
    await settle();
    expect(el.querySelector(".iw-tokens").hidden).toBe(true);
    expect(el.querySelector(".iw-heatmap-box").hidden).toBe(false);
    expect(el.querySelector(".iw-heatmap").getAttribute("aria-label")).toContain(
      "2 generated tokens (rows) by 5 source tokens",
    );
    const layout = { cellWidth: 10, steps: 2, tokens: 5 };
    expect(heatmapCell(125, 20, layout)).toEqual({ step: 1, token: 0 });
    expect(heatmapCell(165, 3, layout)).toEqual({ step: 0, token: 4 });
    expect(heatmapCell(100, 3, layout)).toBeNull();
    expect(heatmapCell(175, 3, layout)).toBeNull();
  });

  it("shows each generated token beside its foil, and a chip selects the step", async () => {
    const contrast = { foil_tokens: [EVIL, "!"], foil_probs: [0.05, 0.9], contrast: ` ${EVIL}!` };
    const model = mount(generation, fakeModel(generationState(contrast)));
    const chips = Array.from(el.querySelectorAll(".iw-pair"));
    expect(chips.map((c) => c.querySelector(".iw-pair-foil").textContent)).toEqual([EVIL, "!"]);
    expect(chips[0].querySelector(".iw-pair-target").textContent).toBe("great");
    expect(chips[0].querySelector(".iw-pair-ratio").textContent).toBe(
      `ln(p/p\u2032) = +${Number(Math.log(0.42 / 0.05).toPrecision(3))}`,
    );
    expect(chips[1].querySelector(".iw-pair-ratio").textContent).toBe("ln(p/p\u2032) = 0");
    expect(chips.map((c) => c.getAttribute("aria-pressed"))).toEqual(["true", "false"]);
    expect(el.querySelector("img")).toBeNull();
    expect(window.__xss).toBe(0);
    const status = el.querySelector(".iw-generation-status").textContent;
    expect(status).toContain(`"great" (p = 42.0%) rather than "${EVIL}" (p = 5.0%)`);
    expect(el.querySelector(".iw-legend-title").textContent).toContain(`rather than "${EVIL}"`);
    expect(el.querySelector(".iw-contrast-title").textContent).toContain("orange pushes towards the generated token");
    chips[1].click();
    expect(model.state.selected_step).toBe(1);
    await settle();
    expect(el.querySelectorAll(".iw-pair")[1].getAttribute("aria-pressed")).toBe("true");
    expect(logRatio(0.5, 0)).toBeNull();
  });

  it("hides the foil chips without a contrast and refuses a foil list of the wrong length", () => {
    mount(generation, fakeModel(generationState()));
    expect(el.querySelector(".iw-contrast").hidden).toBe(true);
    cleanup();
    cleanup = undefined;
    el.replaceChildren();
    mount(generation, fakeModel(generationState({ foil_tokens: ["x"] })));
    expect(el.querySelector('[role="alert"]').textContent).toContain(
      "foil_tokens has 1 entries for 2 generated tokens",
    );
  });

  it("shows an encoder–decoder's source and target sides, with units on each side", async () => {
    const seq2seq = {
      tokens: ["Das", "Zim", "mer", "<pad>", "The", " room"],
      spaces_before: ["", " ", "", "", "", ""],
      special_mask: bool([0, 0, 0, 1, 0, 0]),
      generated_mask: bool([0, 0, 0, 0, 1, 1]),
      scores: f32([
        [0.1, -0.4, 0.2, 0.5, NaN, NaN],
        [0.05, 0.3, 0.1, 0.2, 0.6, NaN],
      ]),
      step_tokens: [4, 5],
      word_ids: i32([0, 1, 1, -1, 2, 3]),
      sentence_ids: i32([0, 0, 0, -1, 1, 1]),
      source_mask: bool([1, 1, 1, 0, 0, 0]),
    };
    const model = mount(generation, fakeModel(generationState(seq2seq)));
    const labels = Array.from(el.querySelectorAll(".iw-side-label")).map((l) => l.dataset.side);
    expect(labels).toEqual(["source", "target"]);
    expect(spans()).toHaveLength(5); // the decoder's start token (special) is hidden
    el.querySelector(".iw-granularity-select").value = "word";
    el.querySelector(".iw-granularity-select").dispatchEvent(new Event("change"));
    expect(model.state.granularity).toBe("word");
    await settle();
    const [, zim, mer] = spans();
    expect(zim.style.backgroundColor).toBe(mer.style.backgroundColor); // one word: one colour (-0.4 + 0.2)
    // scale: the row's largest content unit (0.2); the hidden special <pad> (0.5) does not count
    expect(zim.style.backgroundColor).toBe(scoreColours(-0.2, 0.2).background);
    const data = { wordIds: [0, 1, 1, -1, 2, 3], sentenceIds: [0, 0, 0, -1, 1, 1], special: [0, 0, 0, 1, 0, 0] };
    expect(Array.from(unitRow(data, [0.25, 0.5, 0.125, 0.2, 0.75, NaN], "sentence"))).toEqual([
      0.875, 0.875, 0.875, 0.2, 0.75, 0.75,
    ]);
  });

  it("shows an error instead of a blank cell for inconsistent data", () => {
    mount(generation, fakeModel(generationState({ step_tokens: [1, 4] })));
    expect(el.querySelector('[role="alert"]').textContent).toContain("step token 1 is not a generated token");
  });
});

describe("comparison view", () => {
  const state = (overrides = {}) => ({
    tokens: ["a", EVIL, "c"],
    spaces_before: ["", " ", " "],
    special_mask: bool([0, 0, 0]),
    word_ids: payload(Int8Array.from([0, 0, 1]), "int8", [3], 5), // "a" and EVIL are pieces of one word
    sentence_ids: payload(Int16Array.from([0, 0, 0]), "int16", [3], 6),
    scores: f32([
      [0.5, -1, 0.25],
      [2, 1, 0],
    ]),
    granularity: "token",
    methods: ["ig", "saliency"],
    signed: [true, false],
    target_label: "positive",
    agreements: {
      token: [{ a: "ig", b: "saliency", spearman: 0.5, top_k_overlap: 1, k: 2 }],
      word: [{ a: "ig", b: "saliency", spearman: -1, top_k_overlap: 0.5, k: 2 }],
      sentence: [{ a: "ig", b: "saliency", spearman: null, top_k_overlap: 1, k: 1 }],
    },
    agreement_by: "magnitude",
    shared_scale: false,
    encoding: "colour",
    high_contrast: false,
    hovered_token: -1,
    selected_token: -1,
    error: "",
    ...overrides,
  });

  it("draws one row per method with its own scale, and the agreement table", () => {
    mount(comparison, fakeModel(state()));
    const rows = el.querySelectorAll(".iw-method-row");
    expect(rows).toHaveLength(2);
    const igSpans = rows[0].querySelectorAll(".iw-token");
    const salSpans = rows[1].querySelectorAll(".iw-token");
    expect(igSpans[1].style.backgroundColor).toBe(scoreColours(-1, 1).background);
    expect(salSpans[0].style.backgroundColor).toBe(scoreColours(2, 2, "light", { signed: false }).background);
    const cells = Array.from(el.querySelectorAll(".iw-agreement td"), (c) => c.textContent);
    expect(cells).toEqual(["ig", "saliency", "0.500", "1.00"]);
    expect(igSpans[1].textContent).toBe(EVIL);
  });

  it("synchronises hover across rows and writes hovered_token", () => {
    const model = mount(comparison, fakeModel(state()));
    const second = el.querySelectorAll(".iw-method-row")[1].querySelectorAll(".iw-token")[2];
    second.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(model.state.hovered_token).toBe(2);
    const linked = Array.from(el.querySelectorAll(".iw-linked"), (s) => s.dataset.index);
    expect(linked).toEqual(["2", "2"]);
    expect(el.querySelector(".iw-tooltip").textContent).toContain("ig");
  });

  it("uses one scale for all methods when shared", () => {
    mount(comparison, fakeModel(state({ shared_scale: true })));
    const ig = el.querySelectorAll(".iw-method-row")[0].querySelectorAll(".iw-token");
    expect(ig[1].style.backgroundColor).toBe(scoreColours(-1, 2).background);
  });

  it("switches granularity in the browser: word and sentence sums in every row, hover linked by unit", async () => {
    const model = mount(comparison, fakeModel(state()));
    const select = el.querySelector(".iw-granularity-select");
    select.value = "word";
    select.dispatchEvent(new Event("change"));
    expect(model.state.granularity).toBe("word");
    await settle();
    const row = (m) => Array.from(el.querySelectorAll(".iw-method-row")[m].querySelectorAll(".iw-token"));
    expect(row(0).map((s) => s.textContent)).toEqual([`a ${EVIL}`, "c"]);
    // ig: word sums 0.5 - 1 = -0.5 and 0.25 on its own scale (max 0.5); saliency: 3 and 0 (max 3).
    expect(row(0)[0].style.backgroundColor).toBe(scoreColours(-0.5, 0.5).background);
    expect(row(0)[1].style.backgroundColor).toBe(scoreColours(0.25, 0.5).background);
    expect(Array.from(el.querySelectorAll(".iw-agreement td"), (c) => c.textContent)).toEqual([
      "ig",
      "saliency",
      "-1.000",
      "0.50",
    ]);
    expect(row(1)[0].style.backgroundColor).toBe(scoreColours(3, 3, "light", { signed: false }).background);
    row(1)[0].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(model.state.hovered_token).toBe(0);
    expect(Array.from(el.querySelectorAll(".iw-linked"), (s) => s.textContent)).toEqual([`a ${EVIL}`, `a ${EVIL}`]);
    expect(el.querySelector(".iw-tooltip").textContent).toContain("sum of2 tokens");
    model.set("granularity", "sentence");
    await settle();
    expect(row(0).map((s) => s.textContent)).toEqual([`a ${EVIL} c`]);
    expect(el.querySelector(".iw-caption").textContent).toContain("sum per sentence");
    expect(Array.from(el.querySelectorAll(".iw-agreement td"), (c) => c.textContent)).toEqual([
      "ig",
      "saliency",
      "n/a",
      "1.00",
    ]);
    expect(el.querySelector(".iw-agreement caption").textContent).toContain("over sentences");
    expect(el.querySelector("img")).toBeNull();
  });
});

describe("comparison and example views on long inputs", () => {
  it("draw rows block by block, link hover and move focus to units not built yet", async () => {
    const n = 1200;
    const toks = Array.from({ length: n }, (_, i) => `t${i}`);
    const ids = payload(
      Int32Array.from(toks, (_, i) => i),
      "int32",
      [n],
      0,
    );
    const model = mount(comparison, fakeModel({
      tokens: toks, spaces_before: toks.map((_, i) => (i ? " " : "")), special_mask: bool(new Array(n).fill(0)),
      word_ids: ids, sentence_ids: ids, scores: payload(Float32Array.from({ length: 2 * n }, (_, i) => i % n), "float32", [2, n], 0),
      methods: ["ig", "sal"], signed: [true, true], target_label: "y", agreements: {}, agreement_by: "magnitude",
      granularity: "token", shared_scale: false, encoding: "colour", high_contrast: false, hovered_token: -1, selected_token: -1, error: "",
    })); // prettier-ignore
    const rows = () => Array.from(el.querySelectorAll(".iw-method-row .iw-tokens"));
    expect(rows()[0].querySelectorAll(".iw-token-block").length).toBeGreaterThan(2);
    expect(rows()[0].querySelectorAll(".iw-token").length).toBeLessThan(n);
    const lastBuilt = Array.from(rows()[0].querySelectorAll(".iw-token")).at(-1);
    expect(rows()[0].querySelector('[data-unit="1199"]')).toBeNull();
    lastBuilt.focus();
    lastBuilt.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight", bubbles: true }));
    expect(document.activeElement.textContent).toBe(`t${Number(lastBuilt.dataset.unit) + 1}`); // built on demand
    model.set("hovered_token", 1100); // in a block not built yet: marked when it is built
    for (let k = 0; k < 200 && rows()[1].querySelectorAll(".iw-token").length < n; k += 1)
      await new Promise((r) => setTimeout(r, 10));
    expect(rows().map((r) => r.querySelectorAll(".iw-token").length)).toEqual([n, n]);
    expect(Array.from(el.querySelectorAll(".iw-linked"), (s) => s.textContent)).toEqual(["t1100", "t1100"]);
    const far = rows()[0].querySelectorAll(".iw-token")[1150];
    far.focus();
    far.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowDown", bubbles: true }));
    expect(document.activeElement.closest("[data-method]").dataset.method).toBe("1");
    expect(document.activeElement.textContent).toBe("t1150");
    model.set("hovered_token", 3);
    expect(Array.from(el.querySelectorAll(".iw-linked"), (s) => s.textContent)).toEqual(["t3", "t3"]);
  });
});

describe("example list view", () => {
  const data = {
    predicted: ["neg", "pos", "pos", "neg"],
    trueLabels: ["neg", "neg", "pos", ""],
    confidence: [0.8, 0.9, 0.6, 0.95],
    maxAttribution: [0.5, 2, 0.3, 0.7],
  };
  it("sorts and filters like the Python side", () => {
    const o = (options) =>
      visibleOrder(data, { sortBy: "index", descending: false, filterLabel: "", filterOutcome: "all", ...options });
    expect(o({})).toEqual([0, 1, 2, 3]);
    expect(o({ sortBy: "confidence", descending: true })).toEqual([3, 1, 0, 2]);
    expect(o({ sortBy: "max_attribution" })).toEqual([2, 0, 3, 1]);
    expect(o({ sortBy: "max_attribution", filterLabel: "pos" })).toEqual([2, 1]);
    expect(o({ filterOutcome: "wrong" })).toEqual([1]);
    expect(o({ filterOutcome: "correct", sortBy: "label" })).toEqual([0, 2]);
  });

  const state = (overrides = {}) => ({
    tokens: [["a", EVIL], ["b"], ["c"], ["d"]],
    spaces_before: [["", " "], [""], [""], [""]],
    special_mask: bool([0, 0, 0, 0, 0]),
    word_ids: payload(Int8Array.from([0, 1, 0, 0, 0]), "int8", [5], 3),
    sentence_ids: payload(Int8Array.from([0, 0, 0, 0, 0]), "int8", [5], 1),
    scores: payload(Float32Array.from([0.5, -0.25, 2, 0.3, 0.7]), "float32", [5], 8),
    granularity: "token",
    predicted: data.predicted,
    confidence: data.confidence,
    true_labels: data.trueLabels,
    max_attribution: data.maxAttribution,
    signed: true,
    method: "ig",
    page: 0,
    page_size: 2,
    sort_by: "index",
    descending: false,
    filter_label: "",
    filter_outcome: "all",
    shared_scale: false,
    selected_example: -1,
    error: "",
    ...overrides,
  });

  it("pages, shows labels and verdicts, and writes selection and sorting back", async () => {
    const model = mount(examples, fakeModel(state()));
    const items = () => Array.from(el.querySelectorAll(".iw-example"));
    expect(items().map((i) => i.dataset.example)).toEqual(["0", "1"]);
    expect(items()[1].querySelector(".iw-example-true").textContent).toBe("true neg \u2717");
    expect(items()[0].querySelector(".iw-example-predicted").textContent).toBe("predicted neg (80.0%)");
    expect(items()[0].querySelectorAll(".iw-token")[1].textContent).toBe(EVIL);
    el.querySelector(".iw-next").click();
    expect(model.state.page).toBe(1);
    await settle();
    expect(items().map((i) => i.dataset.example)).toEqual(["2", "3"]);
    items()[0].click();
    expect(model.state.selected_example).toBe(2);
    const sort = el.querySelector(".iw-sort-select");
    sort.value = "confidence";
    sort.dispatchEvent(new Event("change"));
    expect([model.state.sort_by, model.state.page]).toEqual(["confidence", 0]);
    await settle();
    expect(items().map((i) => i.dataset.example)).toEqual(["2", "0"]); // ascending confidence
    expect(items().map((i) => i.getAttribute("aria-selected"))).toEqual(["true", "false"]);
  });

  it("switches granularity in the browser: sums per word or sentence within each example", async () => {
    const model = mount(examples, fakeModel(state({ shared_scale: true })));
    const first = () => Array.from(el.querySelectorAll(".iw-example")[0].querySelectorAll(".iw-token"));
    expect(first().map((s) => s.textContent)).toEqual(["a", EVIL]);
    const select = el.querySelector(".iw-granularity-select");
    select.value = "sentence";
    select.dispatchEvent(new Event("change"));
    expect(model.state.granularity).toBe("sentence");
    await settle();
    expect(first().map((s) => s.textContent)).toEqual([`a ${EVIL}`]);
    // Shared scale over all listed examples at this granularity: max |sum| is example 1's 2.
    expect(first()[0].style.backgroundColor).toBe(scoreColours(0.25, 2).background);
    first()[0].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(el.querySelector(".iw-tooltip").textContent).toContain("score+0.25");
    model.set("granularity", "word");
    await settle();
    expect(first().map((s) => s.textContent)).toEqual(["a", EVIL]); // different word ids: two units
    expect(el.querySelector(".iw-legend").getAttribute("aria-label")).toContain("sum per word");
  });

  it("shows one page of a paged list (the kernel sends pages), says more exist, and waits for the next", async () => {
    // examples 4..7 of 10, held as page 1 of a list of page_size 4 (only the first two listed examples are held)
    const held = state({ tokens: [["a", EVIL], ["b"], ["c"], ["d"]], page: 1, page_size: 4, total_examples: 10,
      first_example: 4 }); // prettier-ignore
    const model = mount(examples, fakeModel(held));
    const items = () => Array.from(el.querySelectorAll(".iw-example"));
    expect(items().map((i) => i.querySelector(".iw-example-index").textContent)).toEqual(["#4", "#5", "#6", "#7"]);
    expect(el.querySelector(".iw-page-label").textContent).toContain("page 2 of 3 (examples 5\u20138 of 10)");
    expect(el.querySelector(".iw-sort-select").disabled).toBe(true);
    const caption = () => el.querySelector(".iw-legend-slot + .iw-caption").textContent;
    expect(caption()).toContain("More pages exist (3 in all)");
    items()[1].click();
    expect(model.state.selected_example).toBe(5); // the list index, not the index within the page
    el.querySelector(".iw-next").click();
    expect(model.state.page).toBe(2);
    await settle(); // no kernel answers (a saved output): the held page stays, and the view says why
    expect(items()).toHaveLength(4);
    expect(caption()).toContain("Page 3 is read by the kernel, which has not answered");
    expect(el.querySelector(".iw-next").disabled).toBe(true);
    // the kernel answers: data, first_example and page change together
    Object.assign(model.state, { tokens: [["e"], ["f"]], special_mask: bool([0, 0]), word_ids: i32([0, 0]),
      sentence_ids: i32([0, 0]), scores: payload(Float32Array.from([1, 2]), "float32", [2], 4), predicted: ["pos", "neg"],
      true_labels: ["", ""], confidence: [0.5, 0.5], max_attribution: [1, 2], spaces_before: [[""], [""]] }); // prettier-ignore
    model.set("tokens", model.state.tokens); // the change events, with every trait already in place
    model.set("first_example", 8);
    await settle();
    expect(items().map((i) => i.querySelector(".iw-example-index").textContent)).toEqual(["#8", "#9"]);
    expect(el.querySelector(".iw-page-label").textContent).toContain("page 3 of 3 (examples 9\u201310 of 10)");
    expect(el.querySelector(".iw-next").disabled).toBe(true);
  });

  it("shows the method under the legend, as the static picture does, and follows changes to it", async () => {
    const model = mount(examples, fakeModel(state()));
    const caption = () => el.querySelector(".iw-legend-slot + .iw-caption").textContent;
    expect(caption()).toBe("method: ig");
    model.set("method", "");
    await settle();
    expect(caption()).toBe("");
  });
});

describe("browser export helpers", () => {
  it("reads the SVG namespace from the parser and serialises escaped text", () => {
    expect(svgNamespace(document)).toMatch(/w3\.org\/2000\/svg$/);
    const text = sceneToSvgText({
      width: 10,
      height: 10,
      background: "#fff",
      items: [{ type: "text", text: EVIL, x: 0, y: 0, w: 5, h: 5, font: "mono", size: 12, weight: 400, fill: "#000" }],
    });
    expect(text).toContain("&lt;img src=x onerror=alert(1)&gt;");
    expect(text).not.toContain("<img");
  });

  it("quotes CSV cells and builds a static page without scripts", () => {
    expect(
      toCsv([
        ["token", "score"],
        ['a,"b"', 0.5],
        ["c", NaN],
      ]),
    ).toBe('token,score\r\n"a,""b""",0.5\r\nc,\r\n');
    const svg = document.createElementNS(svgNamespace(document), "svg");
    const page = staticPage(document, { title: `Why ${EVIL}`, svg, rows: [["token"], [EVIL]] });
    expect(page.startsWith("<!DOCTYPE html>")).toBe(true);
    expect(page).not.toContain("<img");
    expect(page).not.toContain("<script");
    expect(page).toContain("&lt;img src=x onerror=alert(1)&gt;");
  });

  it("every view has PNG, SVG, CSV and HTML buttons", () => {
    mount(tokens, fakeModel(tokenState()));
    expect(Array.from(el.querySelectorAll("[data-iw-export]"), (b) => b.dataset.iwExport)).toEqual([
      "png",
      "svg",
      "csv",
      "html",
    ]);
  });
});
