// The circuit view: node ids and layout (read.js), and the view on a fake model: hover, click, pin (Enter), group
// (G with a typed name), sliders, keyboard moves, the no-kernel messages, and labels that stay text.
import { afterEach, describe, expect, it, vi } from "vitest";
import circuit from "../src/circuit.js";
import { layoutNodes, nodeIds, read } from "../src/views/circuit/read.js";
import { moveFocus, NO_KERNEL_MS } from "../src/views/circuit/build.js";
import { fakeModel, payload, settle } from "./fake_model.js";
import { VIEWS } from "./view_states.js";

const HOSTILE = "<img src=x onerror=alert(1)>";
const state = () => structuredClone({ ...VIEWS.find((v) => v.file === "circuit.js").state, edge_weights: null });
const weights = () => new DataView(Uint16Array.from([0x4000, 0x3e00, 0xb800]).buffer); // 2, 1.5, -0.5 as float16
const i32 = (values) => payload(Int32Array.from(values), "int32", [values.length]);
const f32 = (values) => payload(Float32Array.from(values), "float32", [values.length]);
const fresh = () => ({
  ...VIEWS.find((v) => v.file === "circuit.js").state,
  edge_weights: weights(),
  pinned: [],
  groups: [],
  selected: "",
});

describe("read", () => {
  it("makes circuit-tracer's node ids from the arrays", () => {
    expect(nodeIds([0, 1, 2, 3], [0, 0, -1, 2], [1, 0, 0, 1], [7, -1, 10, 12])).toEqual([
      "0_7_1",
      "0_-1_0",
      "E_10_0",
      "2_12_1",
    ]);
  });
  it("decodes float16 weights and builds the graph", () => {
    const data = read(fakeModel(fresh()));
    expect(Array.from(data.weight)).toEqual([2, 1.5, -0.5]);
    expect(data.ids).toEqual(["0_7_1", "0_-1_0", "E_10_0", "E_11_1", "2_12_1"]);
    expect(data.graph.nNodes).toBe(5);
  });
  it("refuses edges and weights of different lengths", () => {
    expect(() => read(fakeModel({ ...fresh(), edge_src: i32([2, 0]), edge_dst: i32([0, 4]) }))).toThrow(
      /2 sources, 2 targets and 3 weights/,
    );
    expect(() => read(fakeModel({ ...fresh(), node_pos: i32([0]) }))).toThrow(/node_pos has 1 entries for 5 nodes/);
  });
  it("uses a file's own ids when given", () => {
    expect(read(fakeModel({ ...fresh(), node_ids: ["a", "b", "c", "d", "e"] })).ids).toEqual(["a", "b", "c", "d", "e"]);
  });
});

describe("layout", () => {
  it("puts tokens at the bottom, logits on top, layers between, cells side by side", () => {
    const layout = layoutNodes({ kind: [2, 0, 0, 0, 1, 3], layer: [-1, 0, 0, 1, 0, 2], pos: [0, 1, 1, 1, 1, 1], influence: [1, 0.2, 0.9, 0.5, 0, 1], nLayers: 2, nPos: 2 }); // prettier-ignore
    expect(Array.from(layout.row)).toEqual([0, 1, 1, 2, 1, 4]);
    expect(layout.rows).toBe(5);
    // the most influential of cell (layer 0, position 1) sits in the middle, the others either side
    expect(layout.col[2]).toBe(1);
    expect(layout.col[1]).toBeGreaterThan(1);
    expect(layout.col[4]).toBeLessThan(1);
    expect(layout.cellMax).toBe(3);
  });
  it("spreads 30 layers x 24 positions of a 5,000-node graph within their cells", () => {
    const n = 5000;
    const kind = new Uint8Array(n);
    const layer = Int16Array.from({ length: n }, (_, i) => i % 30);
    const pos = Int32Array.from({ length: n }, (_, i) => Math.floor(i / 30) % 24);
    const influence = Float32Array.from({ length: n }, (_, i) => (i * 7919) % 101);
    const layout = layoutNodes({ kind, layer, pos, influence, nLayers: 30, nPos: 24 });
    for (let i = 0; i < n; i++) expect(Math.abs(layout.col[i] - pos[i])).toBeLessThan(0.45);
  });
});

describe("the view", () => {
  afterEach(() => {
    document.body.replaceChildren();
    vi.useRealTimers();
  });
  const mount = (initial = fresh()) => {
    const model = fakeModel(initial);
    const el = document.createElement("div");
    document.body.append(el);
    const cleanup = circuit.render({ model, el });
    return { model, el, cleanup };
  };
  it("shows details of a clicked node as text, with the activating token marked", async () => {
    const { model, el } = mount();
    model.set("selected", "0_7_1");
    await new Promise((r) => setTimeout(r, 40));
    const pane = el.querySelector(".iw-circuit-pane");
    expect(pane.textContent).toContain("a-ness");
    expect(pane.textContent).toContain(HOSTILE); // the hostile label as text
    expect(el.querySelector("img")).toBeNull();
    expect(pane.querySelector(".iw-circuit-peak").textContent).toBe("b");
    expect(pane.textContent).toContain("Strongest inputs");
  });
  it("pins with Enter, groups with G and a typed name, moves with the arrow keys", async () => {
    const { model, el } = mount();
    const stage = el.querySelector(".iw-circuit-stage");
    expect(stage.getAttribute("tabindex")).toBe("-1"); // no tab stop itself: the node options hold it
    stage.dispatchEvent(new FocusEvent("focus"));
    const key = (k) => stage.dispatchEvent(new KeyboardEvent("keydown", { key: k, bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    key("Enter");
    key("ArrowUp");
    key("Enter");
    expect(model.get("pinned").length).toBe(2);
    el.querySelector(".iw-circuit-group-name").value = "my <b>group</b>";
    key("g");
    expect(model.get("groups")).toEqual([{ name: "my <b>group</b>", members: model.get("pinned") }]);
    expect(model.save_changes).toHaveBeenCalled();
    await new Promise((r) => setTimeout(r, 40));
    expect(el.querySelector(".iw-circuit-groups strong").textContent).toBe("my <b>group</b>");
    expect(el.querySelector(".iw-circuit-groups b")).toBeNull();
  });
  it("a slider prunes in the browser and writes the threshold", async () => {
    const { model, el } = mount();
    const slider = el.querySelector(".iw-circuit-node_threshold");
    slider.value = "0.5";
    slider.dispatchEvent(new Event("input"));
    expect(model.get("node_threshold")).toBe(0.5);
    await new Promise((r) => setTimeout(r, 40));
    expect(el.querySelector(".iw-circuit-stage").getAttribute("aria-description")).toMatch(/of 5 nodes/);
  });
  it("says an intervention needs the kernel when none answers, and refuses token nodes", async () => {
    vi.useFakeTimers();
    const { model, el } = mount({ ...fresh(), selected: "E_10_0" });
    await vi.advanceTimersByTimeAsync(40);
    const button = el.querySelector(".iw-circuit-intervene");
    button.click();
    expect(el.querySelector(".iw-circuit-status").textContent).toMatch(
      /E_10_0 is a token node: interventions act on feature nodes/,
    );
    model.set("selected", "0_7_1");
    button.click();
    expect(model.send).toHaveBeenCalledWith(expect.objectContaining({ type: "intervene", nodes: ["0_7_1"] }));
    await vi.advanceTimersByTimeAsync(NO_KERNEL_MS + 10);
    expect(el.querySelector(".iw-circuit-status").textContent).toMatch(/Intervening needs the kernel/);
  });
  it("ablates, doubles or scales with frozen attention, and shows the kernel's answer as text", async () => {
    const { model, el } = mount({ ...fresh(), selected: "0_7_1" });
    await new Promise((r) => setTimeout(r, 40));
    const reply = (msg) => {
      for (const handler of model.handlers.get("msg:custom")) handler(msg);
    };
    el.querySelector(".iw-circuit-double").click();
    expect(model.send).toHaveBeenLastCalledWith(expect.objectContaining({ type: "intervene", nodes: ["0_7_1"], factor: 2, freeze_attention: true, at_generated: false, max_new_tokens: 8 })); // prettier-ignore
    const atGenerated = el.querySelector(".iw-circuit-at-generated");
    expect(atGenerated.checked).toBe(false); // generated tokens only when asked
    atGenerated.click();
    el.querySelector(".iw-circuit-double").click();
    expect(model.send).toHaveBeenLastCalledWith(expect.objectContaining({ factor: 2, at_generated: true }));
    reply({ type: "intervene", id: model.send.mock.calls.at(-1)[0].id, nodes: ["0_7_1"], factor: 2, freeze_attention: true, at_generated: true, top: [], continuation: "", base_continuation: "" }); // prettier-ignore
    expect(el.querySelector(".iw-circuit-result").textContent).toContain(
      "at the graph's positions and at every generated token",
    );
    atGenerated.click();
    const freeze = el.querySelector(".iw-circuit-freeze");
    expect(freeze.checked).toBe(true);
    freeze.click();
    el.querySelector(".iw-circuit-factor").value = "-1.5";
    el.querySelector(".iw-circuit-scale").click();
    expect(model.send).toHaveBeenLastCalledWith(expect.objectContaining({ factor: -1.5, freeze_attention: false }));
    el.querySelector(".iw-circuit-intervene").click();
    const sent = model.send.mock.calls.at(-1)[0];
    expect(sent).toMatchObject({ factor: 0, nodes: ["0_7_1"] });
    reply({ type: "intervene", id: sent.id - 1, error: "stale" }); // an older request's answer is ignored
    expect(el.querySelector(".iw-circuit-status").textContent).not.toMatch(/stale/);
    reply({
      type: "intervene", id: sent.id, nodes: ["0_7_1"], factor: 0, freeze_attention: false,
      top: [
        { token: HOSTILE, id: 5, p_before: 0.1, p_after: 0.5, logit_change: 1.25 },
        { token: " b", id: 6, p_before: 0.4, p_after: 0.2, logit_change: -0.5 },
      ],
      continuation: `${HOSTILE} after`, base_continuation: "<b>before</b>",
    }); // prettier-ignore
    const result = el.querySelector(".iw-circuit-result");
    expect(result.hidden).toBe(false);
    const cells = [...result.querySelectorAll("tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent));
    expect(cells).toEqual([
      [HOSTILE, "10.0%", "50.0%", "+1.25"],
      [" b", "40.0%", "20.0%", "−0.50"],
    ]);
    expect(result.querySelector(".iw-circuit-base-continuation pre").textContent).toBe("<b>before</b>");
    expect(result.querySelector(".iw-circuit-new-continuation pre").textContent).toBe(`${HOSTILE} after`);
    expect(result.textContent).toContain("0_7_1 ablated, attention free");
    expect(el.querySelector("img, b")).toBeNull(); // the hostile token stays text
    // an error from Python comes back as a message
    el.querySelector(".iw-circuit-intervene").click();
    reply({ type: "intervene", id: model.send.mock.calls.at(-1)[0].id, error: "ValueError: no model" });
    expect(el.querySelector(".iw-circuit-status").textContent).toBe("Cannot intervene: ValueError: no model");
    // a factor that is no number is refused in the browser
    const calls = model.send.mock.calls.length;
    el.querySelector(".iw-circuit-factor").value = "";
    el.querySelector(".iw-circuit-scale").click();
    expect(model.send.mock.calls.length).toBe(calls);
    expect(el.querySelector(".iw-circuit-status").textContent).toMatch(/factor must be a number/);
    // the buttons are real buttons (keyboard: Tab reaches them, Enter and Space press them)
    for (const name of ["intervene", "double", "scale"])
      expect(el.querySelector(`.iw-circuit-${name}`).tagName).toBe("BUTTON");
  });
  it("asks the kernel for details that did not travel, and says when none answers", async () => {
    vi.useFakeTimers();
    const { model, el } = mount({ ...fresh(), details: {}, selected: "0_7_1" });
    await vi.advanceTimersByTimeAsync(40);
    expect(model.send).toHaveBeenCalledWith(expect.objectContaining({ type: "detail", node: "0_7_1" }));
    await vi.advanceTimersByTimeAsync(NO_KERNEL_MS + 40);
    expect(el.querySelector(".iw-circuit-needs-kernel").textContent).toMatch(/need the kernel/);
  });
  it("shows lorsa graphs' scores as not computable", async () => {
    const { el } = mount({ ...fresh(), scores_note: "the graph has lorsa nodes" });
    await new Promise((r) => setTimeout(r, 20));
    expect(el.querySelector(".iw-circuit-scores").textContent).toMatch(/not computable: the graph has lorsa nodes/);
  });
  it("labels live scores as the browser's, on the graph the view holds", async () => {
    const { el } = mount();
    await new Promise((r) => setTimeout(r, 20));
    expect(el.querySelector(".iw-circuit-scores").textContent).toMatch(
      /computed in the browser on the graph this view holds/,
    );
  });
});

describe("moveFocus", () => {
  it("moves along a row and between rows", () => {
    const data = read(fakeModel(fresh()));
    const ctx = { data, model: fakeModel({ node_threshold: 1, edge_threshold: 1, pinned: [] }), state: {} };
    const first = moveFocus(ctx, -1, "ArrowRight");
    expect(data.kind[first]).toBe(2); // starts at the bottom-left token
    const right = moveFocus(ctx, first, "ArrowRight");
    expect(data.ids[right]).toBe("E_11_1");
    expect(data.layout.row[moveFocus(ctx, right, "ArrowUp")]).toBe(1);
  });
});

describe("suggestions", () => {
  it("shows a planted supernode with an Accept button and applies it only on the click", async () => {
    // features 0 and 1 read the same two tokens and drive the logit alike: one suggested group
    const initial = {
      ...fresh(),
      tokens: ["a", "b"],
      node_kind: i32([0, 0, 2, 2, 3]), node_layer: i32([0, 0, -1, -1, 2]), node_pos: i32([1, 1, 0, 1, 1]),
      node_index: i32([7, 8, 10, 11, 12]), node_influence: f32([0.5, 0.5, 0.5, 0.5, 0.9]),
      node_activation: f32([1, 1, NaN, NaN, NaN]), node_labels: ["f7", "f8", "", "", ""],
      edge_src: i32([2, 3, 2, 3, 0, 1]), edge_dst: i32([0, 0, 1, 1, 4, 4]),
      edge_weights: new DataView(Uint16Array.from([0x3c00, 0x3800, 0x3c00, 0x3800, 0x4000, 0x4000]).buffer),
      details: {}, pinned: ["0_7_1", "0_8_1"],
    }; // prettier-ignore
    const model = fakeModel(initial);
    const el = document.createElement("div");
    document.body.append(el);
    circuit.render({ model, el });
    await new Promise((r) => setTimeout(r, 40));
    const accept = el.querySelector(".iw-circuit-suggestions .iw-circuit-accept");
    expect(accept).not.toBeNull();
    expect(el.querySelector(".iw-circuit-suggestion").textContent).toContain("f7, f8");
    expect(model.get("groups")).toEqual([]); // never applied by itself
    accept.click();
    expect(model.get("groups")).toEqual([{ name: "group 1", members: ["0_7_1", "0_8_1"] }]);
    document.body.replaceChildren();
  });
});

describe("a lorsa node", () => {
  it("says the file holds no details for it, and asks no kernel", async () => {
    const model = fakeModel({
      ...fresh(),
      node_kind: i32([4, 1, 2, 2, 3]),
      details: {},
      selected: "0_7_1",
      scores_note: "lorsa",
    });
    const el = document.createElement("div");
    document.body.append(el);
    circuit.render({ model, el });
    await new Promise((r) => setTimeout(r, 40));
    expect(el.querySelector(".iw-circuit-needs-kernel").textContent).toMatch(
      /no contexts or vocabulary projection for its lorsa/,
    );
    expect(model.send).not.toHaveBeenCalled();
    document.body.replaceChildren();
  });
});

describe("the roving tabindex", () => {
  // 3 tokens, 2 layers of 3 features, one logit: strong, medium and weak chains (weights 2, 1, 0.1); at node
  // threshold 0.5 the pruning keeps the tokens, the strong chain's features (nodes 3, 6) and the logit
  const chains = () => ({
    ...fresh(),
    tokens: ["a", "b", HOSTILE], n_layers: 2, logit_tokens: ["z"], logit_probs: [0.9], pinned: [], groups: [], selected: "",
    node_labels: ["", "", "", HOSTILE, "mid", "weak", "", "", "", ""], details: {},
    node_kind: i32([2, 2, 2, 0, 0, 0, 0, 0, 0, 3]), node_layer: i32([-1, -1, -1, 0, 0, 0, 1, 1, 1, 2]),
    node_pos: i32([0, 1, 2, 0, 1, 2, 0, 1, 2, 2]), node_index: i32([1, 2, 3, 10, 11, 12, 20, 21, 22, 5]),
    node_influence: f32([1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), node_activation: f32([NaN, NaN, NaN, 1, 1, 1, 1, 1, 1, NaN]),
    edge_src: i32([0, 1, 2, 3, 4, 5, 6, 7, 8]), edge_dst: i32([3, 4, 5, 6, 7, 8, 9, 9, 9]),
    edge_weights: new DataView(Uint16Array.from([0x4000, 0x3c00, 0x2e66, 0x4000, 0x3c00, 0x2e66, 0x4000, 0x3c00, 0x2e66]).buffer),
  }); // prettier-ignore
  const mount = async (initial = chains()) => {
    const model = fakeModel(initial);
    const el = document.createElement("div");
    document.body.append(el);
    circuit.render({ model, el });
    await new Promise((r) => setTimeout(r, 40));
    return { model, el };
  };
  const options = (el) => [...el.querySelectorAll(".iw-circuit-nodes [role=option]")];
  const nodeOf = (option) => Number(option.dataset.node);
  const stops = (el) => options(el).filter((o) => o.getAttribute("tabindex") === "0");
  const place = (option) => [option.getAttribute("aria-posinset"), option.getAttribute("aria-setsize")].map(Number);
  const press = (k) =>
    document.activeElement.dispatchEvent(new KeyboardEvent("keydown", { key: k, bubbles: true, cancelable: true }));
  // move the focus to node `target` with the arrow keys, as a keyboard user does (rows first, then columns)
  const visit = (model, el, target) => {
    const { row, col } = read(model).layout;
    if (!el.querySelector(".iw-circuit-nodes").contains(document.activeElement)) el.querySelector(".iw-circuit-stage").focus(); // prettier-ignore
    for (let step = 0; step < 20 && nodeOf(document.activeElement) !== target; step++) {
      const at = nodeOf(document.activeElement);
      const up = row[target] - row[at];
      press(up > 0 ? "ArrowUp" : up < 0 ? "ArrowDown" : col[target] > col[at] ? "ArrowRight" : "ArrowLeft");
    }
    expect(nodeOf(document.activeElement)).toBe(target);
    return document.activeElement;
  };
  afterEach(() => document.body.replaceChildren());

  it("holds one option, the tab stop, over the first drawn node, with its place among the drawn nodes", async () => {
    const { model, el } = await mount();
    const box = el.querySelector(".iw-circuit-nodes");
    expect(box.getAttribute("role")).toBe("listbox");
    expect(el.querySelector("[role=application]")).toBeNull();
    expect(options(el).map(nodeOf)).toEqual([0]); // the first node: the bottom-left token
    expect(stops(el).map(nodeOf)).toEqual([0]);
    expect(place(options(el)[0])).toEqual([1, 10]); // 1 of the 10 drawn nodes
    expect(el.querySelector(".iw-circuit-stage").getAttribute("tabindex")).toBe("-1");
    expect(options(el)[0].style.left).toMatch(/px$/);
    expect(options(el)[0].getAttribute("aria-selected")).toBe("false");
    // the option follows the focus, named by label, kind, layer and token, at its place in the order bottom to
    // top, left to right; the old option goes, so there is always one
    const feature = visit(model, el, 4);
    expect(feature.getAttribute("aria-label")).toBe(
      'mid, feature 0_11_1, layer 0, token "b" at position 1, activation 1.00, influence 1.00',
    );
    expect(place(feature)).toEqual([5, 10]);
    expect(options(el)).toEqual([feature]);
    expect(visit(model, el, 2).getAttribute("aria-label")).toBe(`token ${JSON.stringify(HOSTILE)} @2, token E_3_2, embedding, influence 1.00`); // prettier-ignore
    const logit = visit(model, el, 9);
    expect(logit.getAttribute("aria-label")).toBe(`logit "z", logit 2_5_2, output, token ${JSON.stringify(HOSTILE)} at position 2, p = 0.900, influence 1.00`); // prettier-ignore
    expect(place(logit)).toEqual([10, 10]);
    expect(stops(el)).toEqual([logit]);
  });

  it("keeps hostile labels and tokens inert text", async () => {
    const { model, el } = await mount();
    const hostile = [];
    for (let i = 0; i < 10; i++) {
      const option = visit(model, el, i);
      if (option.getAttribute("aria-label").includes(HOSTILE)) hostile.push(i);
      expect(option.childNodes.length).toBe(0);
      if (i === 3) expect(option.getAttribute("aria-label").startsWith(`${HOSTILE}, feature 0_10_0`)).toBe(true);
    }
    expect(hostile).toEqual([2, 3, 5, 8, 9]); // token 2's text, feature 3's label, the position-2 nodes
    expect(el.querySelector("img")).toBeNull();
  });

  it("moves the DOM focus between options with the arrow keys; Enter pins, Space selects", async () => {
    const { model, el } = await mount();
    el.querySelector(".iw-circuit-stage").focus(); // a click on the graph, or stage.focus(): to the tab stop
    expect(nodeOf(document.activeElement)).toBe(0);
    press("ArrowRight");
    expect(nodeOf(document.activeElement)).toBe(1);
    press("ArrowUp");
    expect(nodeOf(document.activeElement)).toBe(4); // the feature above token 1
    press("ArrowUp");
    expect(nodeOf(document.activeElement)).toBe(7);
    press("ArrowLeft");
    expect(nodeOf(document.activeElement)).toBe(6);
    press("ArrowLeft"); // nothing further left: the focus stays
    expect(nodeOf(document.activeElement)).toBe(6);
    press("End");
    expect(nodeOf(document.activeElement)).toBe(9); // the last drawn node: the logit, top right
    press("Home");
    expect(nodeOf(document.activeElement)).toBe(0);
    press("ArrowUp");
    press("ArrowUp");
    expect(nodeOf(document.activeElement)).toBe(6);
    await new Promise((r) => setTimeout(r, 40));
    expect(stops(el)).toEqual([document.activeElement]); // the tab stop follows the focus
    expect(options(el)).toEqual([document.activeElement]);
    press("Enter");
    expect(model.get("pinned")).toEqual(["1_20_0"]);
    press(" ");
    expect(model.get("selected")).toBe("1_20_0");
    await new Promise((r) => setTimeout(r, 40));
    expect(nodeOf(document.activeElement)).toBe(6); // still focused after the redraw
    expect(document.activeElement.getAttribute("aria-label")).toMatch(/, pinned$/);
    expect(document.activeElement.getAttribute("aria-selected")).toBe("true");
    expect(el.querySelectorAll("[aria-selected=true]").length).toBe(1);
    press("ArrowDown");
    expect(nodeOf(document.activeElement)).toBe(3);
    expect(document.activeElement.getAttribute("aria-selected")).toBe("false"); // node 6 stays the selected one
    press("Enter");
    expect(model.get("pinned")).toEqual(["1_20_0", "0_10_0"]);
    press("g"); // no name typed: G asks for it
    expect(document.activeElement).toBe(el.querySelector(".iw-circuit-group-name"));
    document.activeElement.value = "pair";
    press("Enter");
    expect(model.get("groups")).toEqual([{ name: "pair", members: ["1_20_0", "0_10_0"] }]);
    expect(nodeOf(document.activeElement)).toBe(3); // back on the graph, on the last focused node
    await new Promise((r) => setTimeout(r, 40));
    expect(document.activeElement.getAttribute("aria-label")).toMatch(/, pinned in supernode pair$/);
  });

  it("keeps the focused option when a slider prunes, with its place among the nodes still drawn", async () => {
    const { model, el } = await mount();
    const slider = el.querySelector(".iw-circuit-node_threshold");
    const focused = visit(model, el, 3);
    expect(place(focused)).toEqual([4, 10]);
    slider.value = "0.5";
    slider.dispatchEvent(new Event("input"));
    expect(model.get("node_threshold")).toBe(0.5);
    await new Promise((r) => setTimeout(r, 40));
    expect(el.querySelector(".iw-circuit-status").dataset.nodes).toBe("6");
    expect(document.activeElement).toBe(focused); // the same element, still focused
    expect(options(el)).toEqual([focused]);
    expect(place(focused)).toEqual([4, 6]); // drawn: 0, 1, 2, 3, 6, 9
    press("ArrowRight"); // nodes 4 and 5 are gone: nothing to the right in layer 0
    expect(document.activeElement).toBe(focused);
    press("ArrowUp");
    expect(nodeOf(document.activeElement)).toBe(6);
    expect(place(document.activeElement)).toEqual([5, 6]);
    press("End");
    expect([nodeOf(document.activeElement), ...place(document.activeElement)]).toEqual([9, 6, 6]);
    // back to everything: the focus stays, and its place counts every node again
    model.set("node_threshold", 1);
    await new Promise((r) => setTimeout(r, 40));
    expect(nodeOf(document.activeElement)).toBe(9);
    expect(place(document.activeElement)).toEqual([10, 10]);
    expect(stops(el).map(nodeOf)).toEqual([9]);
  });

  it("moves the focus to the tab stop when the focused node is pruned away", async () => {
    const { model, el } = await mount();
    visit(model, el, 4);
    model.set("node_threshold", 0.5);
    await new Promise((r) => setTimeout(r, 40));
    expect(options(el).some((o) => nodeOf(o) === 4)).toBe(false);
    expect(nodeOf(document.activeElement)).toBe(0); // on the graph still, at the first node
    expect(stops(el)).toEqual([document.activeElement]);
    expect(options(el).length).toBe(1);
  });

  it("renames the options when the data changes, and keeps the focus on the graph", async () => {
    const { model, el } = await mount();
    visit(model, el, 4);
    model.set("node_labels", ["", "", "", "", "renamed", "", "", "", "", ""]);
    await new Promise((r) => setTimeout(r, 40));
    expect(options(el).length).toBe(1);
    expect(nodeOf(document.activeElement)).toBe(4);
    expect(document.activeElement.getAttribute("aria-label")).toMatch(/^renamed, feature 0_11_1/);
    expect(stops(el)).toEqual([document.activeElement]);
  });

  it("keeps pinned nodes drawn and in the list when pruning hides their neighbours", async () => {
    const { model, el } = await mount({ ...chains(), pinned: ["0_12_2"], node_threshold: 0.5 });
    expect(place(options(el)[0])).toEqual([1, 7]); // drawn: 0, 1, 2, 3, 5 (pinned), 6, 9
    const weak = visit(model, el, 5);
    expect(weak.getAttribute("aria-label")).toMatch(/^weak, .*, pinned$/);
    expect(place(weak)).toEqual([5, 7]);
    model.set("pinned", []);
    await new Promise((r) => setTimeout(r, 40));
    expect(nodeOf(document.activeElement)).toBe(0); // node 5 is no longer drawn: the focus goes to the tab stop
    expect(place(document.activeElement)).toEqual([1, 6]);
  });
});
