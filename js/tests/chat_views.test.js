// @vitest-environment jsdom
// Chat conversations in the views: template tokens never set the colour scale, and every token view labels roles.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import comparison from "../src/comparison.js";
import examples from "../src/example_list.js";
import generation from "../src/generation.js";
import { contentMaxMagnitude } from "../src/lib/aggregate.js";
import { scoreColours } from "../src/lib/colour.js";
import tokens from "../src/token_highlight.js";
import { fakeModel, payload } from "./fake_model.js";

const EVIL = "<img src=x onerror=alert(1)>";
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
});
const mount = (widget, state) => {
  const model = fakeModel(state);
  cleanup = widget.render({ model, el });
  return model;
};
const bool = (values, offset = 3) => payload(Uint8Array.from(values), "bool", [values.length], offset);
const i32 = (values, offset = 4) => payload(Int32Array.from(values), "int32", [values.length], offset);
const f32 = (rows, offset = 12) =>
  payload(Float32Array.from(rows.flat()), "float32", [rows.length, rows[0].length], offset);
const roles = () => Array.from(el.querySelectorAll(".iw-role"), (r) => r.textContent);
const spanText = (text) => Array.from(el.querySelectorAll(".iw-token")).find((s) => s.textContent === text);

// <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello !  (template tokens special, turn -1)
const CHAT = {
  tokens: ["<|im_start|>", "user", "\n", "Hi", "<|im_end|>", "<|im_start|>", "Hello", "!"],
  spaces_before: ["", "", "", "", "", "", "", ""],
  special_mask: [1, 1, 1, 0, 1, 1, 0, 0],
  turn_ids: [-1, -1, -1, 0, -1, -1, 1, 1],
  turn_roles: ["user", EVIL],
};

describe("contentMaxMagnitude", () => {
  it("skips special entries, and falls back to all of them when there is no other", () => {
    expect(contentMaxMagnitude([5, -2, 1], [1, 0, 0])).toBe(2);
    expect(contentMaxMagnitude([5, -2], [1, 1])).toBe(5);
    expect(contentMaxMagnitude(Float64Array.from([NaN, -3]), [0, 0])).toBe(3);
  });
});

describe("colour scale over content tokens only", () => {
  it("token view: a shown (greyed) template token with the largest score does not set the scale", () => {
    mount(tokens, {
      tokens: CHAT.tokens, spaces_before: CHAT.spaces_before, special_mask: bool(CHAT.special_mask),
      word_ids: i32([-1, -1, -1, 0, -1, -1, 1, 2], 8), sentence_ids: i32([-1, -1, -1, 0, -1, -1, 1, 1]),
      turn_ids: i32(CHAT.turn_ids), turn_roles: CHAT.turn_roles,
      scores: f32([[9, 0, 0, 0.5, -8, 0, 0.25, 0.1]]), target_labels: ["next"], target_probs: [0.5],
      selected_target: 0, selected_token: -1, hovered_token: -1, granularity: "token", show_special_tokens: true,
      method: "saliency", score_meaning: "", completeness_error: [], signed: true, shared_scale: false,
      encoding: "colour", high_contrast: false, error: "",
    }); // prettier-ignore
    expect(spanText("Hi").style.backgroundColor).toBe(scoreColours(0.5, 0.5).background); // full colour: max 0.5
    expect(spanText("Hello").style.backgroundColor).toBe(scoreColours(0.25, 0.5).background);
    expect(el.querySelector(".iw-legend").textContent).toContain("0.5");
  });

  it("generation view: hidden template tokens do not set the scale, in the text and the shared scale", async () => {
    const state = {
      tokens: CHAT.tokens, spaces_before: CHAT.spaces_before, special_mask: bool(CHAT.special_mask),
      generated_mask: bool([0, 0, 0, 0, 0, 0, 1, 1], 7), turn_ids: i32(CHAT.turn_ids), turn_roles: CHAT.turn_roles,
      scores: f32([[7, 0, 0, 0.5, -6, 3, NaN, NaN], [7, 0, 0, 0.2, 0, 0, 0.4, NaN]]), step_tokens: [6, 7],
      step_probs: [0.4, 0.9], method: "integrated_gradients", score_meaning: "", signed: true, foil_tokens: [],
      foil_probs: [], contrast: "", shared_scale: false, encoding: "colour", high_contrast: false, view: "text",
      selected_step: 0, selected_token: -1, hovered_token: -1, error: "",
    }; // prettier-ignore
    const model = mount(generation, state);
    expect(spanText("Hi").style.backgroundColor).toBe(scoreColours(0.5, 0.5).background);
    model.set("shared_scale", true);
    model.set("selected_step", 1);
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(spanText("Hi").style.backgroundColor).toBe(scoreColours(0.2, 0.5).background); // shared max 0.5, not 7
    expect(spanText("Hello").style.backgroundColor).toBe(scoreColours(0.4, 0.5).background);
  });
});

describe("role labels in the comparison and example-list views", () => {
  it("comparison view: every method's row labels the turns, escaped, and offers the turn granularity", async () => {
    const model = mount(comparison, {
      tokens: CHAT.tokens, spaces_before: CHAT.spaces_before, special_mask: bool(CHAT.special_mask),
      word_ids: i32([-1, -1, -1, 0, -1, -1, 1, 2], 8), sentence_ids: i32([-1, -1, -1, 0, -1, -1, 1, 1]),
      turn_ids: i32(CHAT.turn_ids), turn_roles: CHAT.turn_roles,
      scores: f32([[0, 0, 0, 0.5, 0, 0, 0.25, 0.1], [0, 0, 0, 1, 0, 0, 2, 3]]), granularity: "token",
      methods: ["ig", "saliency"], signed: [true, false], target_label: "next",
      agreements: { token: [], word: [], sentence: [], turn: [] }, agreement_by: "magnitude", shared_scale: false,
      encoding: "colour", high_contrast: false, hovered_token: -1, selected_token: -1, error: "",
    }); // prettier-ignore
    expect(roles()).toEqual(["user", EVIL, "user", EVIL]);
    expect(el.querySelector("img")).toBeNull();
    const options = Array.from(el.querySelector(".iw-granularity-select").options, (o) => o.value);
    expect(options).toEqual(["token", "word", "sentence", "turn"]);
    const hello = el.querySelector('.iw-method-row [data-index="6"]');
    expect(hello.getAttribute("aria-label")).toMatch(/^<img src=x onerror=alert\(1\)> turn: "Hello"/);
    model.set("granularity", "turn");
    await new Promise((resolve) => setTimeout(resolve, 0));
    const first = Array.from(
      el.querySelector(".iw-method-row .iw-tokens").querySelectorAll(".iw-token"),
      (s) => s.textContent,
    );
    expect(first).toEqual(["Hi", "Hello!"]);
    expect(roles()).toEqual(["user", EVIL, "user", EVIL]);
  });

  it("comparison view: a plain text has no role label and no turn granularity", () => {
    mount(comparison, {
      tokens: ["a", "b"], spaces_before: ["", " "], special_mask: bool([0, 0]), word_ids: i32([0, 1]),
      sentence_ids: i32([0, 0]), scores: f32([[1, 2], [2, 1]]), granularity: "token", methods: ["ig", "saliency"],
      signed: [true, true], target_label: "x", agreements: {}, agreement_by: "magnitude", shared_scale: false,
      encoding: "colour", high_contrast: false, hovered_token: -1, selected_token: -1, error: "",
    }); // prettier-ignore
    expect(roles()).toEqual([]);
    expect(el.querySelector(".iw-granularity-select").options).toHaveLength(3);
  });

  it("example list: each chat example labels its own turns; a plain one has none", () => {
    const n = CHAT.tokens.length;
    mount(examples, {
      tokens: [CHAT.tokens, ["plain"]], spaces_before: [CHAT.spaces_before, [""]],
      special_mask: bool([...CHAT.special_mask, 0]), word_ids: i32([-1, -1, -1, 0, -1, -1, 1, 2, 0], 8),
      sentence_ids: i32([-1, -1, -1, 0, -1, -1, 1, 1, 0]), turn_ids: i32([...CHAT.turn_ids, 0]),
      turn_roles: [CHAT.turn_roles, []], scores: payload(Float32Array.from([0, 0, 0, 0.5, 0, 0, 0.25, 0.1, 1]), "float32", [n + 1], 8),
      granularity: "token", predicted: ["a", "b"], confidence: [0.5, 0.5], true_labels: ["", ""],
      max_attribution: [0.5, 1], signed: true, method: "ig", page: 0, page_size: 5, sort_by: "index",
      descending: false, filter_label: "", filter_outcome: "all", shared_scale: false, selected_example: -1, error: "",
    }); // prettier-ignore
    const items = el.querySelectorAll(".iw-example");
    expect(Array.from(items[0].querySelectorAll(".iw-role"), (r) => r.textContent)).toEqual(["user", EVIL]);
    expect(items[1].querySelectorAll(".iw-role")).toHaveLength(0);
    expect(el.querySelector("img")).toBeNull();
    expect(Array.from(el.querySelector(".iw-granularity-select").options, (o) => o.value)).toContain("turn");
  });
});
