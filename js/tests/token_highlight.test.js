import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { scoreColours } from "../src/lib/colour.js";
import widget from "../src/token_highlight.js";
import { fakeModel, payload, settle } from "./fake_model.js";

// "[CLS] The film was un|believ|able.\n[SEP]" — text "The film was unbelievable.\nGreat"
const TOKENS = ["[CLS]", "The", "film", "was", "un", "believ", "able", ".", "Great", "[SEP]"];
const SPACES = ["", "", " ", " ", " ", "", "", "", "\n", ""];
const SPECIAL = [1, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const WORDS = [-1, 0, 1, 2, 3, 3, 3, 4, 5, -1];
const SENTENCES = [-1, 0, 0, 0, 0, 0, 0, 0, 1, -1];
// target 0 ("negative") and target 1 ("positive")
const SCORES = [
  [5, 0.1, -0.2, 0.05, -0.4, -0.3, -0.1, 0.0, 0.8, 5],
  [-5, -0.1, 0.2, -0.05, 0.4, 0.3, 0.1, 0.0, -0.8, -5],
];

function state(overrides = {}) {
  return {
    tokens: TOKENS,
    spaces_before: SPACES,
    special_mask: payload(Uint8Array.from(SPECIAL), "bool", [10], 5),
    word_ids: payload(Int32Array.from(WORDS), "int32", [10], 8),
    sentence_ids: payload(Int32Array.from(SENTENCES), "int32", [10], 4),
    scores: payload(Float32Array.from(SCORES.flat()), "float32", [2, 10], 12),
    target_labels: ["negative", "positive"],
    target_probs: [0.25, 0.75],
    selected_target: 1,
    selected_token: -1,
    hovered_token: -1,
    granularity: "token",
    show_special_tokens: false,
    method: "saliency",
    score_meaning: "gradient x input, summed over the embedding dimension",
    completeness_error: [],
    error: "",
    ...overrides,
  };
}

let el;
let cleanup;
beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
});
afterEach(() => {
  cleanup?.();
  cleanup = undefined;
  el.remove();
  document.body.removeAttribute("data-jp-theme-light");
});

function mount(model) {
  cleanup = widget.render({ model, el });
  return model;
}
const spans = () => Array.from(el.querySelectorAll(".iw-token"));
const f32 = (x) => Math.fround(x);

describe("token highlight view", () => {
  it("renders one coloured span per visible token, scaled by the largest |score|", () => {
    mount(fakeModel(state()));
    const s = spans();
    expect(s.map((span) => span.textContent)).toEqual(TOKENS.slice(1, 9));
    const row = SCORES[1].slice(1, 9).map(f32);
    const max = Math.max(...row.map(Math.abs));
    s.forEach((span, k) => {
      const expected = scoreColours(row[k], max, "light");
      expect(span.style.backgroundColor).toBe(expected.background);
      expect(span.style.color).toBe(expected.color);
    });
    // the extreme token gets the end of the scale: "Great" = -0.8 is strongest blue
    expect(s[7].style.backgroundColor).toBe("rgb(33, 102, 172)");
    const labels = Array.from(el.querySelectorAll(".iw-legend-labels span"), (n) => n.textContent);
    expect(labels).toEqual(["\u22120.8", "0", "+0.8"]);
    expect(el.querySelector(".iw-caption").textContent).toContain("method: saliency");
  });

  it("reproduces the original text, whitespace and newlines included, and joins sub-word pieces", () => {
    mount(fakeModel(state()));
    expect(el.querySelector(".iw-tokens").textContent).toBe("The film was unbelievable.\nGreat");
    const joined = spans().map((span) => span.classList.contains("iw-join"));
    expect(joined).toEqual([false, false, false, false, true, true, false, false]);
  });

  it("shows special tokens only when asked, from Python or from the checkbox", async () => {
    const model = mount(fakeModel(state()));
    expect(spans()).toHaveLength(8);
    const toggle = el.querySelector(".iw-special-toggle");
    toggle.checked = true;
    toggle.dispatchEvent(new Event("change"));
    expect(model.set).toHaveBeenCalledWith("show_special_tokens", true);
    expect(model.save_changes).toHaveBeenCalled();
    await settle();
    expect(spans().map((s) => s.textContent)).toEqual(TOKENS);
    expect(spans()[0].classList.contains("iw-special")).toBe(true);
  });

  it("aggregates word and sentence sums in the browser when granularity changes", async () => {
    const model = mount(fakeModel(state({ selected_target: 0 })));
    const select = el.querySelector(".iw-granularity-select");
    select.value = "word";
    select.dispatchEvent(new Event("change"));
    expect(model.set).toHaveBeenCalledWith("granularity", "word");
    expect(model.save_changes).toHaveBeenCalledTimes(1);
    await settle();
    expect(spans().map((s) => s.textContent)).toEqual(["The", "film", "was", "unbelievable", ".", "Great"]);
    const row = SCORES[0].map(f32);
    const sums = [row[1], row[2], row[3], row[4] + row[5] + row[6], row[7], row[8]];
    const max = Math.max(...sums.map(Math.abs));
    expect(spans()[3].getAttribute("aria-label")).toContain("score \u22120.8, rank 1 of 6");
    spans().forEach((span, k) => {
      expect(span.style.backgroundColor).toBe(scoreColours(sums[k], max, "light").background);
    });
    expect(el.querySelector(".iw-legend-title").textContent).toBe("attribution (sum per word)");

    model.set("granularity", "sentence"); // as if Python changed it
    await settle();
    expect(spans().map((s) => s.textContent)).toEqual(["The film was unbelievable.", "Great"]);
    expect(el.querySelector(".iw-tokens").textContent).toBe("The film was unbelievable.\nGreat");
  });

  it("labels chat turns by role, folds or greys the template's tokens, and sums whole turns", async () => {
    // "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi <b>!<|im_end|>"; the template's tokens are special
    const tokens = [
      "<|im_start|>",
      "system",
      "\n",
      "Be",
      "nice",
      ".",
      "<|im_end|>",
      "\n",
      "<|im_start|>",
      "user",
      "\n",
      "Hi",
      "<b>!",
      "<|im_end|>",
    ];
    const special = [1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1];
    const turns = [-1, -1, -1, 0, 0, 0, -1, -1, -1, -1, -1, 1, 1, -1];
    const n = tokens.length;
    const model = mount(fakeModel(state({
      tokens, spaces_before: tokens.map((_, i) => ([4, 12].includes(i) ? " " : "")),
      special_mask: payload(Uint8Array.from(special), "bool", [n], 1),
      word_ids: payload(Int32Array.from(turns.map((t, i) => (t < 0 ? -1 : i))), "int32", [n], 4),
      sentence_ids: payload(Int32Array.from(turns), "int32", [n], 4),
      turn_ids: payload(Int32Array.from(turns), "int32", [n], 4),
      turn_roles: ["system", "<i>user</i>"],
      scores: payload(Float32Array.from({ length: 2 * n }, (_, i) => (i % n) / n), "float32", [2, n], 4),
    }))); // prettier-ignore
    const roles = () => Array.from(el.querySelectorAll(".iw-role"), (r) => r.textContent);
    expect(spans().map((s) => s.textContent)).toEqual(["Be", "nice", ".", "Hi", "<b>!"]); // template folded away
    expect(roles()).toEqual(["system", "<i>user</i>"]); // role text is never HTML
    expect(el.querySelector("i, b")).toBeNull();
    expect(spans()[3].getAttribute("aria-label")).toMatch(/^<i>user<\/i> turn: "Hi"/);
    expect(Array.from(el.querySelectorAll(".iw-granularity-select option"), (o) => o.value)).toContain("turn");
    model.set("show_special_tokens", true);
    await settle();
    expect(spans()).toHaveLength(n);
    const greyed = spans()
      .filter((s) => s.classList.contains("iw-special"))
      .map((s) => s.textContent);
    expect(greyed).toEqual(tokens.filter((_, i) => special[i]).map((t) => (t === "\n" ? "\u21b5\n" : t)));
    expect(roles()).toEqual(["system", "<i>user</i>"]);
    model.set("show_special_tokens", false);
    model.set("granularity", "turn");
    await settle();
    expect(spans().map((s) => s.textContent)).toEqual(["Be nice.", "Hi <b>!"]);
    const row = Array.from({ length: n }, (_, i) => f32(((n + i) % n) / n));
    expect(spans()[1].getAttribute("aria-label")).toContain(
      `score +${(row[11] + row[12]).toPrecision(6).replace(/0+$/, "")}`,
    );
  });

  it("offers the turn granularity only for chat conversations", () => {
    mount(fakeModel(state()));
    expect(Array.from(el.querySelectorAll(".iw-granularity-select option"), (o) => o.value)).toEqual([
      "token",
      "word",
      "sentence",
    ]);
    expect(el.querySelector(".iw-role")).toBeNull();
  });

  it("switches class through the selector, writing selected_target back to Python", async () => {
    const model = mount(fakeModel(state()));
    const select = el.querySelector(".iw-target-select");
    expect(Array.from(select.options, (o) => o.textContent)).toEqual(["negative (25.0%)", "positive (75.0%)"]);
    expect(select.value).toBe("1");
    const before = spans()[1].style.backgroundColor;
    select.value = "0";
    select.dispatchEvent(new Event("change"));
    expect(model.set).toHaveBeenCalledWith("selected_target", 0);
    expect(model.save_changes).toHaveBeenCalledTimes(1);
    await settle();
    const after = spans()[1].style.backgroundColor;
    expect(after).not.toBe(before);
    expect(after).toBe(scoreColours(f32(-0.2), f32(0.8), "light").background);
  });

  it("moves focus with the arrow keys and opens the tooltip on focus", () => {
    const model = mount(fakeModel(state()));
    const s = spans();
    expect(s.map((span) => span.tabIndex)).toEqual([0, -1, -1, -1, -1, -1, -1, -1]);
    expect(el.querySelector(".iw-tokens").getAttribute("role")).toBe("listbox");
    expect(s[0].getAttribute("role")).toBe("option");
    s[0].focus();
    const tooltip = el.querySelector(".iw-tooltip");
    expect(tooltip.hidden).toBe(false);
    expect(s[0].getAttribute("aria-describedby")).toBe(tooltip.id);
    expect(tooltip.textContent).toContain('"The"');

    s[0].dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight", bubbles: true }));
    expect(document.activeElement).toBe(s[1]);
    expect(s[1].tabIndex).toBe(0);
    expect(s[0].tabIndex).toBe(-1);
    expect(tooltip.textContent).toContain('"film"');
    expect(tooltip.textContent).toContain("score+0.2");
    expect(tooltip.textContent).toMatch(/rank\d+ of 8 by \|score\|/);

    s[1].dispatchEvent(new KeyboardEvent("keydown", { key: "End", bubbles: true }));
    expect(document.activeElement).toBe(s[7]);
    s[7].dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight", bubbles: true }));
    expect(document.activeElement).toBe(s[7]); // stays on the last token
    s[7].dispatchEvent(new KeyboardEvent("keydown", { key: "Home", bubbles: true }));
    expect(document.activeElement).toBe(s[0]);
    s[0].dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    expect(model.set).toHaveBeenCalledWith("selected_token", 1); // token index in the full sequence
    expect(s[0].getAttribute("aria-selected")).toBe("true");
    s[0].dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
    expect(tooltip.hidden).toBe(true);
  });

  it("reports hover to Python and shows the tooltip", () => {
    const model = mount(fakeModel(state()));
    const s = spans();
    s[2].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(model.set).toHaveBeenCalledWith("hovered_token", 3);
    expect(el.querySelector(".iw-tooltip").textContent).toContain('"was"');
    el.querySelector(".iw-tokens").dispatchEvent(new MouseEvent("mouseleave"));
    expect(model.set).toHaveBeenLastCalledWith("hovered_token", -1);
    expect(el.querySelector(".iw-tooltip").hidden).toBe(true);
  });

  it("follows selected_token set from Python", () => {
    const model = mount(fakeModel(state()));
    model.set("selected_token", 5);
    expect(spans().map((s) => s.getAttribute("aria-selected"))).toEqual([
      "false",
      "false",
      "false",
      "false",
      "true",
      "false",
      "false",
      "false",
    ]);
  });

  it("marks tokens a class cannot see (NaN scores) and leaves them out of the scale and ranks", () => {
    const row = [0, 0.5, -0.25, Number.NaN, Number.NaN, 0, 0, 0, 0, 0];
    mount(
      fakeModel(
        state({ selected_target: 0, scores: payload(Float32Array.from([...row, ...row]), "float32", [2, 10], 8) }),
      ),
    );
    const s = spans();
    expect(s[2].classList.contains("iw-unseen")).toBe(true);
    expect(s[2].getAttribute("aria-label")).toBe('"was", score none (this class does not see it), rank unranked');
    expect(s[0].getAttribute("aria-label")).toBe('"The", score +0.5, rank 1 of 6 by |score|');
    expect(s[0].style.backgroundColor).toBe("rgb(230, 97, 1)");
    expect(s[2].style.backgroundColor).toBe("rgb(247, 247, 247)");
  });

  it("never interprets token text as HTML", () => {
    const evil = ["<img src=x onerror=alert(1)>", "</script><b>x</b>", "{{7*7}}"];
    mount(
      fakeModel(
        state({
          tokens: evil,
          spaces_before: ["", " ", " "],
          special_mask: payload(new Uint8Array(3), "bool", [3], 1),
          word_ids: payload(Int32Array.from([0, 1, 2]), "int32", [3], 4),
          sentence_ids: payload(new Int32Array(3), "int32", [3], 4),
          scores: payload(Float32Array.from([1, -1, 0.5, 0, 0, 0]), "float32", [2, 3], 4),
          target_labels: ["<b>bold</b>", "ok"],
          selected_target: 0,
        }),
      ),
    );
    expect(el.querySelector("img, b, script")).toBeNull();
    expect(spans().map((s) => s.textContent)).toEqual(evil);
    expect(el.querySelector(".iw-target-select option").textContent).toBe("<b>bold</b> (25.0%)");
    spans()[0].focus();
    expect(el.querySelector(".iw-tooltip").textContent).toContain('"<img src=x onerror=alert(1)>"');
    expect(el.querySelector(".iw-tooltip img")).toBeNull();
  });

  it("uses the dark palette under a dark JupyterLab theme and recolours when the theme changes", async () => {
    document.body.setAttribute("data-jp-theme-light", "false");
    mount(fakeModel(state()));
    const root = el.querySelector(".iw-root");
    expect(root.dataset.iwTheme).toBe("dark");
    const great = () => spans()[7].style.backgroundColor;
    expect(great()).toBe(scoreColours(-0.8, 0.8, "dark").background);
    document.body.setAttribute("data-jp-theme-light", "true");
    await settle();
    expect(root.dataset.iwTheme).toBe("light");
    expect(great()).toBe(scoreColours(-0.8, 0.8, "light").background);
  });

  it("redraws once for a burst of data changes from Python", async () => {
    const model = mount(fakeModel(state()));
    model.state.tokens = ["a", "b"];
    model.state.spaces_before = ["", " "];
    model.state.special_mask = payload(new Uint8Array(2), "bool", [2], 2);
    model.state.word_ids = payload(Int32Array.from([0, 1]), "int32", [2], 4);
    model.state.sentence_ids = payload(new Int32Array(2), "int32", [2], 4);
    model.set("scores", payload(Float32Array.from([1, 2, 3, 4]), "float32", [2, 2], 8));
    for (const name of ["tokens", "spaces_before", "special_mask", "word_ids", "sentence_ids"]) {
      for (const handler of model.handlers.get(`change:${name}`)) handler();
    }
    await settle();
    expect(spans().map((s) => s.textContent)).toEqual(["a", "b"]);
    expect(spans()[1].style.backgroundColor).toBe("rgb(230, 97, 1)");
  });

  it("removes its model listeners on cleanup", () => {
    const model = fakeModel(state());
    mount(model);
    expect(model.listenerCount()).toBeGreaterThan(10);
    cleanup();
    cleanup = undefined;
    expect(model.listenerCount()).toBe(0);
  });
});

describe("visible failures", () => {
  it("shows a readable message instead of a blank view when the data is inconsistent", () => {
    mount(fakeModel(state({ scores: payload(new Float32Array(6), "float32", [2, 3], 4) })));
    const box = el.querySelector(".iw-error");
    expect(box).not.toBeNull();
    expect(box.getAttribute("role")).toBe("alert");
    expect(box.textContent).toContain("TokenHighlightWidget could not be displayed");
    expect(box.textContent).toContain("scores have shape [2, 3], expected [n_targets, 10]");
    expect(spans()).toHaveLength(0);
  });

  it("shows an error raised later by an update", async () => {
    const model = mount(fakeModel(state()));
    model.set("selected_target", 7);
    await settle();
    expect(el.querySelector(".iw-error").textContent).toContain("selected_target 7 is out of range for 2 classes");
  });

  it("shows the Python error trait instead of the view, and recovers when it is cleared", () => {
    const model = mount(fakeModel(state({ error: "attribution failed: <model> not supported" })));
    expect(el.querySelector(".iw-error-message").textContent).toBe("attribution failed: <model> not supported");
    expect(spans()).toHaveLength(0);
    model.set("error", "");
    expect(el.querySelector(".iw-error")).toBeNull();
    expect(spans()).toHaveLength(8);
  });
});
