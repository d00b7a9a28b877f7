// DOM contract of the concept browser: list, sorting/filtering, selection, paging requests, histogram,
// contexts, text view, escaping, busy kernel message, visible errors, cleanup.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import browser, { BUSY_AFTER, histogramSvg, searchText, textPreview, visibleConcepts } from "../src/concept_browser.js";
import { controlSentence, pValueText } from "../src/views/concept_browser/draw.js";
import { scoreColours } from "../src/lib/colour.js";
import { fakeModel, payload, settle } from "./fake_model.js";

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
  vi.useRealTimers();
});
const f32 = (values, offset = 12) => payload(Float32Array.from(values), "float32", [values.length], offset);
const i32 = (values, offset = 8) => payload(Int32Array.from(values), "int32", [values.length], offset);

function detail(c, overrides = {}) {
  return {
    concept: c,
    label: `label ${c}`,
    density: 0.5,
    mean: 0.1,
    max: 2,
    min: 0,
    examples: [{ tokens: ["the", " ", EVIL, "!"], center: 2, activation: 2, text_id: 0, activations: [0, 0, 2, 1] }],
    top_texts: [{ text_id: 0, max_activation: 2, text: `a text with ${EVIL}` }],
    vocabulary: [{ token: "</script>", logit: 1.5 }],
    text_activations: f32([0, 1, 2]),
    hist_edges: f32([0, 0.5, 1, 1.5, 2], 4),
    hist_counts: i32([4, 0, 2, 1], 4),
    ...overrides,
  };
}

function state(overrides = {}) {
  return {
    method: "NMFConcepts",
    layer: "layer.1",
    n_rows: 40,
    labels: ["zeta", EVIL, "alpha", "dead one"],
    top_tokens: [["z"], ["x"], ["a", "bad"], []],
    density: f32([0.2, 0.5, 0.1, 0]),
    max_activation: f32([1, 3, 2, 0]),
    importance: f32([0.5, -2, NaN, 1]),
    importance_label: "contribution to positive",
    sort_by: "index",
    descending: false,
    search: "",
    hide_dead: false,
    page: 0,
    page_size: 2,
    selected_concept: -1,
    requested: [0, 1],
    details: { 0: detail(0), 1: detail(1, { label: EVIL }) },
    text_tokens: [["Cold", " soup", EVIL]],
    text_gaps: [["", "", " "]],
    text_top_concepts: payload(Int32Array.from([0, -1, 1, 0, 2, -1]), "int32", [3, 2], 4),
    text_top_values: payload(Float32Array.from([1, 0, 2, 1, 3, 0]), "float32", [3, 2], 8),
    selected_text: 0,
    selected_token: -1,
    text_mode: "activation",
    attribution_method: "",
    error: "",
    ...overrides,
  };
}
const mount = (overrides) => {
  const model = fakeModel(state(overrides));
  cleanup = browser.render({ model, el });
  return model;
};
const items = () => Array.from(el.querySelectorAll(".iw-concept"), (li) => Number(li.dataset.concept));

describe("visibleConcepts", () => {
  const data = {
    labels: ["b", "a", "c"],
    topTokens: [["x"], ["bad"], []],
    density: [0.2, 0, 0.5],
    maxActivation: [1, 2, 3],
    importance: [1, NaN, -3],
  };
  const opts = (o) => ({ sortBy: "index", descending: false, search: "", hideDead: false, ...o });
  it("sorts, filters dead concepts, searches labels and tokens, and puts unknown importance last", () => {
    expect(visibleConcepts(data, opts({ sortBy: "label" }))).toEqual([1, 0, 2]);
    expect(visibleConcepts(data, opts({ sortBy: "density", descending: true }))).toEqual([2, 0, 1]);
    expect(visibleConcepts(data, opts({ hideDead: true }))).toEqual([0, 2]);
    expect(visibleConcepts(data, opts({ search: "BA" }))).toEqual([1]);
    expect(visibleConcepts(data, opts({ sortBy: "importance", descending: true }))).toEqual([0, 2, 1]);
    expect(visibleConcepts(data, opts({ sortBy: "abs_importance", descending: true }))).toEqual([2, 0, 1]);
    expect(() => visibleConcepts(data, opts({ sortBy: "nope" }))).toThrow(/unknown sort key/);
  });

  it("sorts by the label scores, unscored labels last in either direction", () => {
    const scored = { ...data, detection: [0.5, NaN, 0.875], fuzzing: [0.75, NaN, 0.25] };
    expect(visibleConcepts(scored, opts({ sortBy: "detection", descending: true }))).toEqual([2, 0, 1]);
    expect(visibleConcepts(scored, opts({ sortBy: "detection" }))).toEqual([0, 2, 1]);
    expect(visibleConcepts(scored, opts({ sortBy: "fuzzing", descending: true }))).toEqual([0, 2, 1]);
    expect(visibleConcepts(data, opts({ sortBy: "fuzzing" }))).toEqual([0, 1, 2]); // no scores: all unknown, id order
    expect(visibleConcepts(scored, opts({ minScore: 0.5 }))).toEqual([0]); // both scores must reach it; 1 is unscored
    expect(visibleConcepts({ ...scored, fuzzing: [0.75, NaN, 0.5] }, opts({ minScore: 0.5 }))).toEqual([0, 2]);
    expect(visibleConcepts(scored, opts({ minScore: 0 }))).toEqual([0, 1, 2]);
  });

  it("gives the same order with the precomputed search text, which never matches across a label and a token", () => {
    const labels = Array.from({ length: 300 }, (_, c) => `Label ${c % 17} ${c % 5 ? "Foo" : "BAR"}`);
    const topTokens = labels.map((_, c) => [`t${c % 11}`, c % 3 ? "x" : "Def"]);
    const many = {
      labels,
      topTokens,
      density: labels.map((_, c) => (c % 7 ? 0.1 : 0)),
      maxActivation: labels.map((_, c) => c % 13),
      importance: null,
    };
    const haystack = searchText(labels, topTokens);
    for (const search of ["", "bar", "def", "label 1", "t1", "foox", "3 foo"]) {
      for (const sortBy of ["index", "label", "max"]) {
        for (const descending of [false, true]) {
          const options = opts({ search, sortBy, descending, hideDead: true });
          expect(visibleConcepts({ ...many, haystack }, options)).toEqual(visibleConcepts(many, options));
        }
      }
    }
    expect(visibleConcepts({ ...many, haystack }, opts({ search: "foox" }))).toEqual([]); // "Foo" then the token "x"
    expect(visibleConcepts(many, opts({ sortBy: "index", descending: true })).slice(0, 2)).toEqual([299, 298]);
  });
});

describe("concept list", () => {
  it("lists the page with labels, density, dead flag and signed importance, escaped", () => {
    mount({ page_size: 4 });
    expect(items()).toEqual([0, 1, 2, 3]);
    const evil = el.querySelector('[data-concept="1"]');
    expect(evil.querySelector(".iw-concept-label").textContent).toBe(EVIL);
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector('[data-concept="3"] .iw-concept-dead').textContent).toBe("dead");
    expect(el.querySelector('[data-concept="0"] .iw-concept-dead')).toBeNull();
    const chip = evil.querySelector(".iw-concept-importance");
    expect(chip.textContent).toBe("\u22122");
    expect(chip.style.backgroundColor).toBe(scoreColours(-2, 2, "light").background);
    expect(el.querySelector('[data-concept="2"] .iw-concept-importance').textContent).toBe("");
    expect(el.querySelector(".iw-concept-summary").textContent).toContain("4 NMFConcepts concepts at layer.1");
  });

  it("sorting and searching write traits, reset the page and request the new page's details", async () => {
    const model = mount();
    const sort = el.querySelector(".iw-sort-select");
    sort.value = "max";
    sort.dispatchEvent(new Event("change"));
    el.querySelector(".iw-descending-toggle").click();
    await settle();
    expect(model.state.sort_by).toBe("max");
    expect(model.state.page).toBe(0);
    expect(items()).toEqual([1, 2]);
    expect(model.state.requested).toEqual([1, 2]);
    const search = el.querySelector(".iw-concept-search");
    search.value = "ALPHA";
    search.dispatchEvent(new Event("input"));
    await settle();
    expect(items()).toEqual([2]);
    expect(model.state.requested).toEqual([2]);
  });

  it("pages forward and asks only for the visible concepts", async () => {
    const model = mount();
    expect(model.save_changes).not.toHaveBeenCalled(); // the kernel already sent page 0
    el.querySelector(".iw-next").click();
    await settle();
    expect(model.state.page).toBe(1);
    expect(items()).toEqual([2, 3]);
    expect(model.state.requested).toEqual([2, 3]);
    expect(el.querySelector(".iw-next").disabled).toBe(true);
  });

  it("selects by click and by keyboard, moving focus with the arrows", async () => {
    const model = mount();
    el.querySelector('[data-concept="0"]').click();
    expect(model.state.selected_concept).toBe(0);
    await settle();
    const first = el.querySelector('[data-concept="0"]');
    expect(first.getAttribute("aria-selected")).toBe("true");
    expect(first.tabIndex).toBe(0);
    first.focus();
    first.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowDown", bubbles: true }));
    expect(model.state.selected_concept).toBe(1);
    await settle();
    expect(document.activeElement.dataset.concept).toBe("1");
    document.activeElement.dispatchEvent(new KeyboardEvent("keydown", { key: "PageDown", bubbles: true }));
    expect(model.state.page).toBe(1);
  });

  it("hides importance sorting when there is no importance", () => {
    mount({ importance: {} });
    const options = Array.from(el.querySelectorAll(".iw-sort-select option"), (o) => o.value);
    expect(options).toEqual(["index", "label", "density", "max"]);
  });
});

describe("label scores", () => {
  const scored = (overrides = {}) =>
    mount({
      page_size: 4,
      label_detection: f32([0.625, 0.875, NaN, NaN], 4),
      label_fuzzing: f32([0.5, 0.75, NaN, NaN], 8),
      label_scorer: EVIL,
      ...overrides,
    });

  it("shows both scores as text beside each scored label, says which are not scored, and names them for readers", () => {
    scored();
    const evil = el.querySelector('[data-concept="1"]');
    const chip = evil.querySelector(".iw-label-scores");
    expect(chip.textContent).toBe("detection 0.875 \u00b7 fuzzing 0.75");
    expect(chip.previousElementSibling.className).toBe("iw-concept-label"); // beside the label
    expect(chip.getAttribute("title")).toContain(EVIL); // the scorer's name, as an attribute value: inert
    expect(evil.getAttribute("aria-label")).toContain(`Concept 1: ${EVIL}, label detection 0.875, fuzzing 0.75,`);
    expect(el.querySelector('[data-concept="2"] .iw-label-scores').textContent).toBe("not scored");
    expect(el.querySelector('[data-concept="2"]').getAttribute("aria-label")).not.toContain("detection");
    expect(el.querySelector(".iw-concept-summary").textContent).toContain(`labels scored by ${EVIL}`);
    expect(el.querySelector("img")).toBeNull();
  });

  const i8 = (values, offset = 4) => payload(Int8Array.from(values), "int8", [values.length], offset);
  const control = (wins, discriminates) => ({
    label_detection_chance: i8([1, 0, -1, -1]),
    label_fuzzing_chance: i8([0, 1, -1, -1], 12),
    label_control_n: 10,
    label_control_wins: wins,
    label_control_ties: 1,
    label_control_threshold: 0.7,
    label_discriminates: discriminates,
  });

  it("marks scores no better than chance, in text, when the swapped-label control passed", () => {
    scored(control(7, true));
    const summary = el.querySelector(".iw-concept-summary").textContent;
    expect(summary).toContain(
      "control: the true label outscores a swapped one in 7 of 10 concepts (70 %, 1 tied; \u2265 70 % needed): the scorer discriminates; scores no better than chance are marked",
    );
    const chips = [0, 1].map((c) => el.querySelector(`[data-concept="${c}"] .iw-label-scores`));
    expect(chips.map((chip) => chip.textContent)).toEqual([
      "detection 0.625 (not above chance) \u00b7 fuzzing 0.5",
      "detection 0.875 \u00b7 fuzzing 0.75 (not above chance)",
    ]);
    expect(chips[1].classList.contains("iw-label-chance")).toBe(true);
    expect(chips[1].getAttribute("title")).toContain(EVIL); // the scorer's name stays an attribute value
    const evil = el.querySelector('[data-concept="1"]');
    expect(evil.getAttribute("aria-label")).toContain(
      `Concept 1: ${EVIL}, label detection 0.875, fuzzing 0.75 (not above chance),`,
    );
    expect(el.querySelector("img")).toBeNull();
  });

  it("says the scorer cannot discriminate and marks nothing when the control failed", () => {
    scored(control(6, false));
    const summary = el.querySelector(".iw-concept-summary").textContent;
    expect(summary).toContain(
      "in 6 of 10 concepts (60 %, 1 tied; \u2265 70 % needed): the scorer cannot discriminate, so no score is marked as chance",
    );
    expect(el.textContent).not.toContain("not above chance");
    expect(el.querySelector(".iw-label-chance")).toBeNull();
    expect(el.querySelector("img")).toBeNull();
  });

  it("says no control was run for scores saved before it existed, and marks nothing", () => {
    scored();
    expect(el.querySelector(".iw-concept-summary").textContent).toContain(
      "no swapped-label control was run, so no score is marked as chance",
    );
    expect(el.textContent).not.toContain("not above chance");
  });

  it("offers sorting by each score, which writes the trait and orders the list", async () => {
    const model = scored({ page_size: 2 });
    const sort = el.querySelector(".iw-sort-select");
    expect(Array.from(sort.options, (o) => o.value)).toContain("detection");
    sort.value = "fuzzing";
    sort.dispatchEvent(new Event("change"));
    el.querySelector(".iw-descending-toggle").click();
    await settle();
    expect(model.state.sort_by).toBe("fuzzing");
    expect(items()).toEqual([1, 0]);
    expect(model.state.requested).toEqual([1, 0]);
  });

  it("filters by the lower of the two scores through its number box, back to page 0", async () => {
    const model = scored({ page: 1, page_size: 1 });
    const box = el.querySelector(".iw-score-filter");
    expect(box.closest("label").hidden).toBe(false);
    expect(box.getAttribute("aria-label")).toContain("detection and fuzzing scores are both at least");
    box.value = "0.7";
    box.dispatchEvent(new Event("change"));
    await settle();
    expect([model.state.min_label_score, model.state.page]).toEqual([0.7, 0]);
    expect(items()).toEqual([1]);
    box.value = "3";
    box.dispatchEvent(new Event("change"));
    await settle();
    expect(model.state.min_label_score).toBe(1);
  });

  it("shows no score and no score sorting without scored labels", () => {
    mount({ page_size: 4 });
    expect(el.querySelector(".iw-score-filter").closest("label").hidden).toBe(true);
    expect(el.querySelector(".iw-label-scores")).toBeNull();
    const options = Array.from(el.querySelectorAll(".iw-sort-select option"), (o) => o.value);
    expect(options).not.toContain("detection");
    expect(options).not.toContain("fuzzing");
    expect(el.querySelector(".iw-concept-summary").textContent).not.toContain("scored");
  });

  const score = (ba, auc, p_value = null) => ({
    balanced_accuracy: ba,
    auc,
    p_value,
    n_examples: 8,
    n_activating: 4,
    n_non_activating: 4,
    n_failed: 0,
  });
  const rowsOf = (table) =>
    Array.from(table.querySelectorAll("tbody tr"), (tr) => Array.from(tr.children, (td) => td.textContent));

  it("lists the selected label's balanced accuracies, p-values, AUCs and sample sizes in the detail pane", () => {
    const label_scores = {
      scorer: EVIL,
      detection: score(0.875, 0.9, 0.0004),
      fuzzing: { ...score(0.75, null, 0.25), n_failed: 2 },
      control: null,
    };
    scored({ selected_concept: 1, details: { 0: detail(0), 1: detail(1, { label: EVIL, label_scores }) } });
    const table = el.querySelector(".iw-label-score-table");
    expect(table.querySelector("caption").textContent).toBe(`Label scores (scorer ${EVIL}; chance is 0.5)`);
    expect(Array.from(table.querySelectorAll("thead th"), (th) => th.textContent)).toEqual([
      "score",
      "balanced accuracy",
      "p-value",
      "AUC",
      "firing + not firing",
    ]);
    expect(rowsOf(table)).toEqual([
      ["detection", "0.875", "4e-4", "0.9", "4 + 4"],
      ["fuzzing", "0.75", "0.25", "n/a", "4 + 4 (2 unreadable)"],
    ]);
    expect(el.querySelector(".iw-label-control")).toBeNull(); // no control judged this label
    expect(el.querySelector("img")).toBeNull();
  });

  it("says n/a for the p-values of scores saved before the chance test", () => {
    const { p_value: _, ...old } = score(0.875, 0.9);
    scored({ selected_concept: 1, details: { 1: detail(1, { label_scores: { scorer: "j", detection: old, fuzzing: old } }) } });
    expect(rowsOf(el.querySelector(".iw-label-score-table")).map((row) => row[2])).toEqual(["n/a", "n/a"]);
    expect(el.querySelector(".iw-label-control")).toBeNull();
  }); // prettier-ignore

  const controlOf = (overrides = {}) => ({
    swapped_from: 3,
    swapped_label: "food words",
    detection: { balanced_accuracy: 0.25, p_value: 0.625 },
    fuzzing: { balanced_accuracy: 0.5, p_value: null },
    true_score: 0.75,
    swapped_score: 0.375,
    outscores: true,
    ...overrides,
  });

  it("gives the label's swapped-label control: the label swapped in, its scores and whether the true label won", () => {
    const label_scores = { scorer: "j", detection: score(0.875, 0.9, 0.01), fuzzing: score(0.625, 0.8, 0.2), control: controlOf() };
    scored({ selected_concept: 1, details: { 1: detail(1, { label_scores }) } });
    const line = el.querySelector(".iw-label-score-detail .iw-label-control");
    expect(line.textContent).toBe(
      "control: judged again under the label of #3 (\u201cfood words\u201d): detection 0.25 (p = 0.625) \u00b7 fuzzing 0.5 (p n/a); the true label outscores it (mean 0.75 against 0.375)",
    );
    expect(line.classList.contains("iw-label-control-lost")).toBe(false);
    expect(controlSentence(controlOf({ outscores: false, true_score: 0.375 }))).toContain(
      "the true label does not outscore it (mean 0.375 against 0.375)",
    );
    expect(pValueText(1.5e-5)).toBe("p = 1.5e-5");
  }); // prettier-ignore

  it("keeps a hostile swapped label as text", () => {
    const hostile = `</script><script>window.__pwned = 1</script>${EVIL}\u201d`;
    const label_scores = { scorer: EVIL, detection: score(0.875, 0.9, 0.01), fuzzing: score(0.625, 0.8, 0.2), control: controlOf({ swapped_label: hostile, outscores: false, true_score: 0.375 }) };
    scored({ selected_concept: 1, details: { 1: detail(1, { label: EVIL, label_scores }) } });
    const line = el.querySelector(".iw-label-control");
    expect(line.textContent).toContain(`under the label of #3 (\u201c${hostile}\u201d)`);
    expect(line.classList.contains("iw-label-control-lost")).toBe(true);
    expect(line.children.length).toBe(0); // one text node: no markup made of the label
    expect(el.querySelector("img, script")).toBeNull();
    expect(window.__pwned).toBeUndefined();
  }); // prettier-ignore

  it("draws no score table for a concept whose label is not scored", () => {
    scored({ selected_concept: 0, details: { 0: detail(0, { label_scores: null }) } });
    expect(el.querySelector(".iw-label-score-table")).toBeNull();
  });
});

describe("concept detail", () => {
  it("draws the histogram from binary counts, contexts with the centre token highlighted, texts and vocabulary", () => {
    mount({ selected_concept: 1 });
    const bars = Array.from(el.querySelectorAll(".iw-hist-bar"));
    expect(bars.map((b) => Number(b.dataset.count))).toEqual([4, 0, 2, 1]);
    const heights = bars.map((b) => Number(b.getAttribute("height")));
    expect(heights[0]).toBeGreaterThan(heights[2]);
    expect(heights[2] / heights[0]).toBeCloseTo(0.5, 1);
    expect(heights[1]).toBe(0);
    expect(el.querySelector(".iw-histogram").getAttribute("aria-label")).toContain("7 active rows in 4 bins");
    const center = el.querySelector(".iw-context .iw-center");
    expect(center.textContent).toBe(EVIL);
    expect(center.style.backgroundColor).toBe(scoreColours(2, 2, "light", { signed: false }).background);
    expect(el.querySelector(".iw-detail-label").textContent).toBe(EVIL);
    expect(el.querySelector(".iw-top-text").textContent).toBe(`a text with ${EVIL}`);
    expect(el.querySelector(".iw-vocabulary td").textContent).toBe("</script>");
    expect(el.querySelector("img, script")).toBeNull();
  });

  it("shows the parent and the children as a collapsible tree with absorption, and selects from it", () => {
    const hierarchy = {
      parent: { concept: 3, label: EVIL, conditional: 0.9, cosine: 0.4 },
      absorption: 0.125,
      children: [
        { concept: 1, label: "first", depth: 1, conditional: 1, cosine: 0.5, absorption: 0.25 },
        { concept: 2, label: "grandchild", depth: 2, conditional: 0.85, cosine: 0.3, absorption: null },
        { concept: 0, label: "second", depth: 1, conditional: 0.8, cosine: 0.35, absorption: null },
      ],
    };
    const model = mount({ selected_concept: 0, details: { 0: detail(0, { hierarchy }), 1: detail(1) } });
    const section = el.querySelector(".iw-concept-hierarchy");
    expect(section.querySelector(".iw-concept-parent .iw-goto-concept").textContent).toBe(`#3 ${EVIL}`);
    const top = section.querySelector("details.iw-concept-children");
    expect(top.open).toBe(true);
    expect(top.querySelector("summary").textContent).toContain("2 children (3 below) \u00b7 absorption 12.5%");
    expect(top.querySelector("summary").textContent).toContain("a proxy for Chanin et al.");
    const root = top.querySelector(":scope > ul.iw-concept-tree");
    expect(Array.from(root.children, (li) => li.querySelector(".iw-goto-concept").dataset.concept)).toEqual(["1", "0"]);
    const nested = root.children[0].querySelector("details");
    expect(nested.querySelector("summary").textContent).toContain("absorption 25%");
    expect(Array.from(nested.querySelectorAll(":scope > ul .iw-goto-concept"), (b) => b.dataset.concept)).toEqual([
      "2",
    ]);
    nested.open = false; // collapsing hides the grandchild but keeps it in the tree
    expect(nested.querySelector(":scope > ul .iw-goto-concept").dataset.concept).toBe("2");
    expect(el.querySelector("img, script")).toBeNull();
    nested.querySelector(":scope > ul .iw-goto-concept").click();
    expect(model.state.selected_concept).toBe(2);
  });

  it("draws no hierarchy section without a hierarchy", () => {
    mount({ selected_concept: 1 });
    expect(el.querySelector(".iw-concept-hierarchy")).toBeNull();
  });

  it("colours the input text by the selected concept and lists the concepts active at a clicked token", async () => {
    const model = mount({ selected_concept: 0 });
    const tokens = Array.from(el.querySelectorAll(".iw-text-token"));
    expect(tokens.map((t) => t.textContent)).toEqual(["Cold", " soup", EVIL]);
    expect(tokens[2].style.backgroundColor).toBe(scoreColours(2, 2, "light", { signed: false }).background);
    tokens[1].click();
    expect(model.state.selected_token).toBe(1);
    await settle();
    const buttons = Array.from(el.querySelectorAll(".iw-goto-concept"));
    expect(buttons.map((b) => b.dataset.concept)).toEqual(["1", "0"]);
    expect(buttons[0].textContent).toContain(EVIL);
    buttons[0].click();
    expect(model.state.selected_concept).toBe(1);
  });

  it("shows which input tokens make the concept fire in the attribution mode, signed, and switches modes", async () => {
    const attribution = {
      values: f32([-1, 0.5, 2]),
      method: "integrated_gradients",
      signed: true,
      score: "activation of concept 0 summed over the non-special tokens",
      activation: 1.5,
      completeness_error: 0.001,
    };
    const model = mount({ selected_concept: 0, attribution_method: "integrated_gradients", text_mode: "activation", details: { 0: detail(0, { text_attribution: null }), 1: detail(1) } }); // prettier-ignore
    const toggle = el.querySelector(".iw-text-mode");
    expect(Array.from(toggle.options, (o) => o.value)).toEqual(["activation", "attribution"]);
    expect(toggle.value).toBe("activation");
    expect(el.querySelector(".iw-text-tokens").dataset.mode).toBe("activation");
    toggle.value = "attribution";
    toggle.dispatchEvent(new Event("change"));
    expect(model.state.text_mode).toBe("attribution");
    await settle();
    expect(el.querySelector(".iw-attribution-pending").textContent).toContain("computed by the kernel");
    model.set("details", { 0: detail(0, { text_attribution: attribution }) }); // what the kernel answers
    await settle();
    expect(el.querySelector(".iw-attribution-pending")).toBeNull();
    const tokens = Array.from(el.querySelectorAll(".iw-text-token"));
    expect(tokens.map((t) => t.dataset.kind)).toEqual(["attribution", "attribution", "attribution"]);
    expect(tokens[0].style.backgroundColor).toBe(scoreColours(-1, 2, "light", { signed: true }).background);
    expect(tokens[2].style.backgroundColor).toBe(scoreColours(2, 2, "light", { signed: true }).background);
    expect(el.querySelector(".iw-attribution-caption").textContent).toContain(
      "integrated_gradients: contribution of each token to the activation of concept 0 summed",
    );
    expect(el.querySelector(".iw-text-view .iw-legend-title").textContent).toBe("input attribution to concept 0");
    tokens[0].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(el.querySelector(".iw-tooltip")?.textContent ?? "").toContain("attribution");
  });

  it("offers no attribution mode without input attributions", () => {
    mount({ selected_concept: 0, attribution_method: "", text_mode: "activation" });
    expect(el.querySelector(".iw-text-mode")).toBeNull();
  });

  it("says it is waiting, then that the kernel is busy, when a detail has not arrived", async () => {
    vi.useFakeTimers();
    const model = mount({ selected_concept: 3 });
    expect(el.querySelector(".iw-concept-loading").textContent).toContain("Loading concept 3");
    vi.advanceTimersByTime(BUSY_AFTER + 10);
    expect(el.querySelector(".iw-concept-busy").textContent).toContain("kernel is busy");
    model.set("details", { 3: detail(3) });
    await vi.runAllTimersAsync();
    expect(el.querySelector(".iw-concept-busy")).toBeNull();
    expect(el.querySelectorAll(".iw-hist-bar")).toHaveLength(4);
  });
});

describe("text choice and theme", () => {
  it("switches input texts through the select, clearing the token choice", () => {
    const model = mount({ selected_concept: 0, selected_token: 1, text_tokens: [["Cold", " soup", EVIL], ["Hot", " tea", "!"]], text_gaps: [["", "", " "], ["", "", ""]],
      text_top_concepts: payload(Int32Array.from([0, -1, 1, 0, 2, -1, 0, -1, 0, -1, 0, -1]), "int32", [6, 2], 4),
      text_top_values: payload(Float32Array.from([1, 0, 2, 1, 3, 0, 1, 0, 1, 0, 1, 0]), "float32", [6, 2], 8) }); // prettier-ignore
    const select = el.querySelector(".iw-text-select");
    expect(Array.from(select.options, (o) => o.textContent)).toEqual([`text 0: Cold soup ${EVIL}`, "text 1: Hot tea!"]);
    select.value = "1";
    select.dispatchEvent(new Event("change"));
    expect(model.state.selected_text).toBe(1);
    expect(model.state.selected_token).toBe(-1);
  });

  it("follows a dark JupyterLab theme", async () => {
    document.body.setAttribute("data-jp-theme-light", "false");
    try {
      mount({ selected_concept: 1 });
      expect(el.querySelector(".iw-concepts").dataset.iwTheme).toBe("dark");
      const center = el.querySelector(".iw-context .iw-center");
      expect(center.style.backgroundColor).toBe(scoreColours(2, 2, "dark", { signed: false }).background);
    } finally {
      document.body.removeAttribute("data-jp-theme-light");
    }
  });
});

describe("textPreview", () => {
  it("keeps the original spacing and cuts long texts", () => {
    expect(textPreview(["Not", "bad", "."], ["", " ", ""])).toBe("Not bad.");
    expect(textPreview(["abcdef"], [""], 3)).toBe("abc\u2026");
  });
});

describe("histogramSvg", () => {
  it("rejects mismatched edges", () => {
    expect(() => histogramSvg([0, 1], [1, 2])).toThrow(/3 edges/);
  });
});

describe("errors and cleanup", () => {
  it("shows the error trait and malformed payloads instead of a blank cell", () => {
    mount({ error: "boom <b>" });
    expect(el.querySelector(".iw-error").textContent).toContain("boom <b>");
    cleanup();
    cleanup = undefined;
    mount({ density: f32([1, 2]) });
    expect(el.querySelector(".iw-error").textContent).toContain("density needs 4 values");
  });

  it("removes its listeners on teardown", () => {
    const model = mount();
    cleanup();
    cleanup = undefined;
    expect(model.listenerCount()).toBe(0);
  });
});
