// Saved-output payloads (lib/payload.js) and the kernel-less rebuild of a view from one (labextension/mount.js):
// every view's payload (tests/fixtures/payloads.json, written by the Python views) reads and renders with the view's
// own module; newer, over-cap and broken payloads show a note and the saved picture; payloads that do not match the
// schema are refused with the path of the problem; and hostile payloads (an XSS fuzz over every string of every
// view's payload, plus structural attacks) never put markup, script or event handlers into the page.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { mountOutput, staticPicture } from "../src/labextension/mount.js";
import { VIEWS } from "../src/labextension/views.js";
import { MIME_TYPE, PayloadError, knownViews, readPayload } from "../src/lib/payload.js";
import SCHEMA from "../src/lib/view_schema.json";
import FIXTURES from "./fixtures/payloads.json";
import { settle } from "./fake_model.js";

const clone = (value) => JSON.parse(JSON.stringify(value));
const bundle = (payload, extra = {}) => ({
  [MIME_TYPE]: payload,
  "image/svg+xml":
    '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><script>window.__xss = 1</script></svg>',
  ...extra,
});

let el;
let cleanups;
beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
  cleanups = [];
  window.__xss = 0;
  // jsdom has no 2D canvas (the monitor and the generation heatmap draw on one): a context that accepts any call
  vi.spyOn(HTMLCanvasElement.prototype, "getContext").mockImplementation(
    () => new Proxy({}, { get: (target, key) => (key in target ? target[key] : () => ({ width: 0 })) }),
  );
});
afterEach(() => {
  for (const cleanup of cleanups.reverse()) cleanup?.();
  el.remove();
  vi.restoreAllMocks();
});

const render = async (data) => {
  cleanups.push(await mountOutput(el, data, { loadView: (view) => VIEWS[view]() }));
  await settle();
};

describe("payload schema and loaders", () => {
  it("knows every view the Python side writes, and the extension has a front end for each", () => {
    expect(Object.keys(FIXTURES).sort()).toEqual(Object.keys(SCHEMA.views).sort());
    expect(Object.keys(VIEWS).sort()).toEqual(Object.keys(SCHEMA.views).sort());
    expect(knownViews().token_highlight).toEqual({
      widget: "TokenHighlightWidget",
      version: SCHEMA.views.token_highlight.version,
    });
    expect(MIME_TYPE).toBe("application/vnd.interp-widgets.v1+json");
  });
});

describe.each(Object.keys(FIXTURES))("%s payload", (view) => {
  it("reads into the traits of the view: arrays and bytes as DataViews, NaN for null numbers", () => {
    const read = readPayload(clone(FIXTURES[view]));
    expect(read.kind).toBe("view");
    expect(read.widget).toBe(SCHEMA.views[view].widget);
    expect(Object.keys(read.traits).sort()).toEqual(
      [...Object.keys(SCHEMA.views[view].data), ...Object.keys(SCHEMA.views[view].state)].sort(),
    );
    for (const [name, type] of Object.entries(SCHEMA.views[view].data)) {
      if (type.array && Object.keys(read.traits[name]).length) expect(read.traits[name].data).toBeInstanceOf(DataView);
      if (type === "bytes") expect(read.traits[name]).toBeInstanceOf(DataView);
    }
  });

  it("renders with the view's own module, without a kernel, and stays interactive", async () => {
    await render(bundle(clone(FIXTURES[view])));
    const root = el.querySelector(".iw-mime-view > .iw-root");
    expect(root).not.toBeNull();
    expect(el.querySelector(".iw-error, .iw-mime-note")).toBeNull();
    for (const node of el.querySelectorAll(".iw-token, .iw-example, .iw-concept")) {
      for (const type of ["mouseover", "focusin", "click"]) node.dispatchEvent(new Event(type, { bubbles: true }));
    }
    for (const node of el.querySelectorAll("select, input"))
      node.dispatchEvent(new Event(node.type === "search" ? "input" : "change", { bubbles: true }));
    await settle();
    expect(el.querySelector(".iw-error")).toBeNull();
  });
});

describe("a monitor saved before any step", () => {
  it("has an empty checkpoint and still renders its panels", async () => {
    const payload = clone(FIXTURES.monitor);
    payload.data = { checkpoint: { base64: "" }, checkpoint_schema: {} };
    await render(bundle(payload));
    expect(el.querySelector(".iw-mime-view > .iw-root.iw-monitor, .iw-mime-view > .iw-root")).not.toBeNull();
    expect(el.querySelector(".iw-error, .iw-mime-note")).toBeNull();
  });
});

describe("switching granularity in a rebuilt view", () => {
  it("regroups the tokens in the browser, as the live widget does", async () => {
    const payload = clone(FIXTURES.token_highlight);
    await render(bundle(payload));
    const count = () => el.querySelectorAll(".iw-tokens .iw-token").length;
    const tokens = count();
    const select = el.querySelector(".iw-granularity-select");
    select.value = "sentence";
    select.dispatchEvent(new Event("change", { bubbles: true }));
    await settle();
    expect(count()).toBeLessThan(tokens);
    expect(count()).toBe(1);
  });
});

describe("outputs that cannot be rebuilt show a note and the saved picture", () => {
  const note = () => el.querySelector(".iw-mime-note")?.textContent ?? "";
  const picture = () => el.querySelector("img.iw-mime-picture");

  it("a newer data version says so and how to upgrade", async () => {
    const known = SCHEMA.views.token_highlight.version;
    await render(bundle({ ...clone(FIXTURES.token_highlight), version: known + 1 }));
    expect(note()).toContain(`data format version ${known + 1}; this extension reads up to version ${known}`);
    expect(note()).toContain("pip install -U interp-widgets");
    expect(picture().getAttribute("src")).toMatch(/^data:image\/svg\+xml;charset=utf-8,/);
    expect(el.querySelector("script")).toBeNull();
  });

  it("a newer envelope or an unknown view is also a newer writer", async () => {
    expect(readPayload({ format: 2, view: "anything" })).toMatchObject({ kind: "newer" });
    expect(readPayload({ format: 1, view: "sankey", version: 1 }).message).toContain('does not know ("sankey")');
  });

  it("an over-cap output gives its size, the cap and how to export instead", async () => {
    await render(
      bundle({
        format: 1,
        view: "concept_browser",
        version: 1,
        widget: "ConceptBrowser",
        omitted: { bytes: 3_500_000, cap: 1_048_576 },
      }),
    );
    expect(note()).toContain("ConceptBrowser holds 3.3 MB of data, over the 1.0 MB cap");
    expect(note()).toContain('widget.export_html("view.html")');
    expect(note()).toContain("set_output_cap");
    expect(picture()).not.toBeNull();
  });

  it("a PNG picture is shown when there is no SVG", async () => {
    await render({
      [MIME_TYPE]: { format: 1, view: "monitor", version: 1, widget: "MonitorWidget", omitted: { bytes: 2, cap: 1 } },
      "image/png": "iVBORw0KGgo=",
    });
    expect(picture().getAttribute("src")).toBe("data:image/png;base64,iVBORw0KGgo=");
    expect(staticPicture({ "image/png": '"><script>' })).toBeNull();
  });

  it("an invalid payload names the problem", async () => {
    const payload = clone(FIXTURES.token_highlight);
    payload.data.tokens[1] = 7;
    await render(bundle(payload));
    expect(note()).toContain("data.tokens[1] must be a string, got a number");
    expect(el.querySelector(".iw-mime-note").getAttribute("role")).toBe("alert");
  });
});

describe("readPayload refuses what the schema does not allow", () => {
  const base = () => clone(FIXTURES.token_highlight);
  const refused = (payload) => {
    try {
      readPayload(payload);
    } catch (error) {
      expect(error).toBeInstanceOf(PayloadError);
      return error.message;
    }
    throw new Error("the payload was accepted");
  };
  it.each([
    ["not an object", () => "<b>", "the output must be an object, got a string"],
    ["a list", () => [], "the output must be an object, got a list"],
    ["no format", () => ({ ...base(), format: "1" }), "its format must be a positive integer"],
    [
      "an unknown data field",
      () => ({ ...base(), data: { ...base().data, colour: "red" } }),
      'data has an unknown field "colour"',
    ],
    [
      "a missing data field without a default",
      () => {
        const p = base();
        delete p.data.scores;
        return p;
      },
      'data lacks "scores"',
    ],
    [
      "a wrong dtype",
      () => {
        const p = base();
        p.data.scores.dtype = "float64";
        return p;
      },
      'data.scores has dtype "float64"',
    ],
    [
      "a shape that does not fit the bytes",
      () => {
        const p = base();
        p.data.scores.shape = [100, 100];
        return p;
      },
      "data.scores holds",
    ],
    [
      "a negative or fractional shape",
      () => {
        const p = base();
        p.data.scores.shape = [-1, 2.5];
        return p;
      },
      "data.scores must have a shape of 2",
    ],
    [
      "text that is not base64",
      () => {
        const p = base();
        p.data.scores.data = "<script>";
        return p;
      },
      "data.scores.data must be base64 text",
    ],
    [
      "extra array keys",
      () => {
        const p = base();
        p.data.scores.onload = "x";
        return p;
      },
      'data.scores has an unknown key "onload"',
    ],
    [
      "a value outside an enum",
      () => {
        const p = base();
        p.state.granularity = "<b>word</b>";
        return p;
      },
      'state.granularity must be one of "token", "word", "sentence"',
    ],
    [
      "a float id",
      () => {
        const p = base();
        p.state.selected_target = 0.5;
        return p;
      },
      "state.selected_target must be an integer",
    ],
    [
      "Infinity-like strings for numbers",
      () => {
        const p = base();
        p.data.target_probs = ["1e999"];
        return p;
      },
      "data.target_probs[0] must be a number",
    ],
    [
      "an object where a list belongs",
      () => {
        const p = base();
        p.data.tokens = { length: 3 };
        return p;
      },
      "data.tokens must be a list",
    ],
    [
      "no state",
      () => {
        const p = base();
        delete p.state;
        return p;
      },
      "state must be an object",
    ],
    [
      "deep nesting",
      () => {
        const p = clone(FIXTURES.comparison);
        let deep = [];
        for (let i = 0; i < 50; i += 1) deep = [deep];
        p.data.agreements = { token: deep };
        return p;
      },
      "data.agreements",
    ],
  ])("%s", (_, make, message) => {
    expect(refused(make())).toContain(message);
  });

  it("keeps a __proto__ key an ordinary property and pollutes no prototype", () => {
    const payload = clone(FIXTURES.concept_browser);
    const text = JSON.stringify(payload).replace(
      '"details":{',
      '"details":{"__proto__":' + JSON.stringify(payload.state.details["0"]) + ",",
    );
    const read = readPayload(JSON.parse(text));
    expect(Object.prototype.hasOwnProperty.call(read.traits.details, "__proto__")).toBe(true);
    expect(Object.getPrototypeOf(read.traits.details)).toBe(Object.prototype);
    expect({}.label).toBeUndefined();
  });

  it("reads an older payload: fields added since take their defaults, as Python's from_json does", () => {
    const payload = clone(FIXTURES.generation);
    for (const name of ["foil_tokens", "foil_probs", "contrast"]) delete payload.data[name]; // generation data version 1
    delete payload.state.view; // a state trait of a later interp-widgets
    const read = readPayload({ ...payload, version: 1 });
    expect(read.kind).toBe("view");
    expect([read.traits.foil_tokens, read.traits.foil_probs, read.traits.contrast, read.traits.view]).toEqual([
      [],
      [],
      "",
      "text",
    ]);
  });

  it("reads payloads written before chat turns and concept text attributions, and renders them", async () => {
    for (const view of ["token_highlight", "generation"]) {
      const payload = clone(FIXTURES[view]);
      delete payload.data.turn_ids; // token data version 1, generation data version 2
      delete payload.data.turn_roles;
      const read = readPayload({ ...payload, version: SCHEMA.views[view].version - 1 });
      expect(read.kind).toBe("view");
      expect([read.traits.turn_ids, read.traits.turn_roles]).toEqual([{}, []]); // absent, as a plain text's trait sends it
      for (const cleanup of cleanups.splice(0).reverse()) cleanup?.();
      el.replaceChildren();
      await render(bundle({ ...payload, version: SCHEMA.views[view].version - 1 }));
      expect(el.querySelector(".iw-mime-view > .iw-root .iw-token")).not.toBeNull();
      expect(el.querySelector(".iw-error, .iw-mime-note")).toBeNull();
    }
    const concepts = clone(FIXTURES.concept_browser);
    const details = Object.values(concepts.state.details);
    expect(details.length).toBeGreaterThan(0);
    for (const detail of details) delete detail.text_attribution;
    const read = readPayload(concepts);
    expect(Object.values(read.traits.details).map((d) => d.text_attribution)).toEqual(details.map(() => null));
  });

  it("shows the label scores of a saved concept browser with no kernel (p-values and control in the detail pane), and reads one saved before them", async () => {
    await render(bundle(clone(FIXTURES.concept_browser)));
    const scores = Array.from(el.querySelectorAll(".iw-mime-view .iw-label-scores"), (s) => s.textContent);
    expect(scores).toContain("detection 0.875 \u00b7 fuzzing 0.75 (not above chance)"); // the control passed
    expect(scores).toContain("detection 0.625 (not above chance) \u00b7 fuzzing 0.5");
    expect(el.querySelector(".iw-mime-view .iw-concept-summary").textContent).toContain(
      "in 3 of 3 concepts (100 %, 0 tied; \u2265 70 % needed): the scorer discriminates",
    );
    expect(el.querySelector(".iw-error, .iw-mime-note")).toBeNull();
    for (const cleanup of cleanups.splice(0).reverse()) cleanup?.();
    el.replaceChildren();
    const selected = clone(FIXTURES.concept_browser); // its detail pane: p-values and the label's control
    selected.state.selected_concept = 0;
    await render(bundle(selected));
    const table = el.querySelector(".iw-mime-view .iw-label-score-table");
    const rows = Array.from(table.querySelectorAll("tbody tr"), (tr) =>
      Array.from(tr.children, (td) => td.textContent),
    );
    expect(rows.map((row) => row.slice(0, 3))).toEqual([
      ["detection", "0.625", "0.3"],
      ["fuzzing", "0.5", "0.01"],
    ]);
    const control = el.querySelector(".iw-mime-view .iw-label-control").textContent;
    expect(control).toContain("control: judged again under the label of #1 (\u201c<img src=x onerror=alert(1)>\u201d)");
    expect(control).toContain("detection 0.25 (p = 0.625) \u00b7 fuzzing 0.25 (p = 4e-4); the true label outscores it");
    expect(el.querySelector(".iw-mime-view img, .iw-error, .iw-mime-note")).toBeNull();
    for (const cleanup of cleanups.splice(0).reverse()) cleanup?.();
    el.replaceChildren();
    const untested = clone(selected); // details saved before the p-values and the control: read as null
    for (const detail of Object.values(untested.state.details)) {
      if (!detail.label_scores) continue;
      delete detail.label_scores.control;
      for (const kind of ["detection", "fuzzing"]) delete detail.label_scores[kind].p_value;
    }
    const readUntested = readPayload(clone(untested));
    expect(readUntested.traits.details["0"].label_scores.control).toBeNull();
    expect(readUntested.traits.details["0"].label_scores.detection.p_value).toBeNull();
    await render(bundle(untested));
    expect(el.querySelector(".iw-mime-view .iw-label-score-table tbody td:nth-child(3)").textContent).toBe("n/a");
    expect(el.querySelector(".iw-mime-view .iw-label-control, .iw-error, .iw-mime-note")).toBeNull();
    for (const cleanup of cleanups.splice(0).reverse()) cleanup?.();
    el.replaceChildren();
    const older = clone(FIXTURES.concept_browser);
    const added = ["label_detection_chance", "label_fuzzing_chance", "label_control_n", "label_control_wins"];
    for (const name of [...added, "label_control_ties", "label_control_threshold", "label_discriminates"])
      delete older.data[name]; // saved before the control: no marks, no control text
    const unchecked = readPayload(clone(older));
    expect([unchecked.traits.label_control_n, unchecked.traits.label_discriminates]).toEqual([0, false]);
    for (const name of ["label_detection", "label_fuzzing", "label_scorer"]) delete older.data[name];
    for (const detail of Object.values(older.state.details)) delete detail.label_scores;
    const read = readPayload(older);
    expect([read.traits.label_detection, read.traits.label_scorer]).toEqual([{}, ""]);
    expect(Object.values(read.traits.details).every((d) => d.label_scores === null)).toBe(true);
    await render(bundle(older));
    expect(el.querySelector(".iw-mime-view .iw-concept")).not.toBeNull();
    expect(el.querySelector(".iw-label-scores, .iw-error, .iw-mime-note")).toBeNull();
  });

  it("drops unknown state traits (a newer writer's extras) but refuses unknown data fields", () => {
    const read = readPayload({ ...base(), state: { ...base().state, future_toggle: true } });
    expect(read.traits.future_toggle).toBeUndefined();
  });
});

// ------------------------------------------------------------------------------------------------- XSS fuzz
const HOSTILE = [
  '<img src=x onerror="window.__xss=1">',
  "</script><script>window.__xss=1</script>",
  "<svg onload=window.__xss=1>",
  '"><iframe srcdoc="<script>parent.__xss=1</script>">',
  "javascript:window.__xss=1",
  "' onmouseover='window.__xss=1' x='",
  "<style>*{display:none}</style>",
  "{{constructor.constructor('window.__xss=1')()}}",
  "\u202e\u0000<b>bold</b>\ud800",
  "__proto__",
];

/** Every path to a string in `value` (keys of maps included), for substitution. */
function stringPaths(value, path = [], out = []) {
  if (typeof value === "string") out.push(path);
  else if (Array.isArray(value)) value.forEach((item, i) => stringPaths(item, [...path, i], out));
  else if (value && typeof value === "object")
    for (const [k, v] of Object.entries(value)) stringPaths(v, [...path, k], out);
  return out;
}

function setAt(root, path, value) {
  let node = root;
  for (const key of path.slice(0, -1)) node = node[key];
  node[path[path.length - 1]] = value;
}

function assertInert(container) {
  expect(window.__xss).toBe(0);
  expect(container.querySelector("script, iframe, object, embed, style, link, meta, base, form")).toBeNull();
  for (const node of container.querySelectorAll("*")) {
    for (const { name, value } of node.attributes) {
      expect(name.startsWith("on"), `${node.tagName} has the event attribute ${name}`).toBe(false);
      if (["href", "src", "xlink:href", "action", "formaction"].includes(name))
        expect(value).not.toMatch(/^\s*javascript:/i);
    }
    if (node.tagName === "IMG") expect(node.getAttribute("src")).toMatch(/^data:image\/(svg\+xml|png)/);
  }
}

// Strings that are names the view looks things up by (enum values, base64, dtypes) are refused when hostile; every
// other string (tokens, labels, texts, methods, layers, panel titles ...) must reach the page as text.
describe.each(Object.keys(FIXTURES))("XSS fuzz of the %s payload", (view) => {
  const all = stringPaths(FIXTURES[view]).filter((path) => !["format", "view", "widget"].includes(path[0]));
  // Every field once (the first string of each path pattern), then more strings up to 40 cases.
  const patterns = new Map();
  for (const path of all) {
    const key = path.map((k) => (typeof k === "number" ? "*" : k)).join(".");
    if (!patterns.has(key)) patterns.set(key, path);
  }
  const paths = [...patterns.values(), ...all.filter((p) => !new Set(patterns.values()).has(p))].slice(
    0,
    Math.max(40, patterns.size),
  );
  it(
    `substitutes hostile text for ${paths.length} of its ${all.length} strings (every field) and stays inert`,
    { timeout: 60_000 },
    async () => {
      let rendered = 0;
      let shownAsText = 0;
      for (const [i, path] of paths.entries()) {
        const payload = clone(FIXTURES[view]);
        const hostile = HOSTILE[i % HOSTILE.length];
        setAt(payload, path, hostile);
        const container = document.createElement("div");
        document.body.append(container);
        const cleanup = await mountOutput(container, bundle(payload), { loadView: (name) => VIEWS[name]() });
        for (const node of container.querySelectorAll(".iw-token, .iw-example, .iw-concept")) {
          for (const type of ["mouseover", "focusin", "click"]) node.dispatchEvent(new Event(type, { bubbles: true }));
        }
        await settle();
        assertInert(container);
        if (container.querySelector(".iw-mime-view .iw-root")) rendered += 1;
        if (container.textContent.includes(hostile)) shownAsText += 1;
        cleanup();
        container.remove();
      }
      expect(rendered).toBeGreaterThan(paths.length / 3); // most substitutions still render the view
      expect(shownAsText).toBeGreaterThan(0); // and the hostile strings it shows are text on the page
    },
  );

  it(
    "survives random structural mutations (wrong types, huge numbers, nulls) without markup",
    { timeout: 60_000 },
    async () => {
      let seed = 7 + view.length;
      const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
      const junk = [
        null,
        -1,
        2 ** 53,
        1e308,
        true,
        [],
        {},
        [HOSTILE[0]],
        { dtype: "float32", shape: [1], data: "AAAAAA==" },
        HOSTILE[2],
      ];
      const all = [];
      const walk = (value, path = []) => {
        if (path.length) all.push(path);
        if (value && typeof value === "object") for (const [k, v] of Object.entries(value)) walk(v, [...path, k]);
      };
      walk(FIXTURES[view]);
      for (let round = 0; round < 40; round += 1) {
        const payload = clone(FIXTURES[view]);
        setAt(payload, all[Math.floor(random() * all.length)], junk[Math.floor(random() * junk.length)]);
        const container = document.createElement("div");
        document.body.append(container);
        const cleanup = await mountOutput(container, bundle(payload), { loadView: (name) => VIEWS[name]() });
        await settle();
        assertInert(container);
        expect(container.childElementCount).toBeGreaterThan(0); // a view, a note or an error box: never blank
        cleanup();
        container.remove();
      }
    },
  );
});
