// The model typedefs at runtime: each view, rendered on the fake model and poked through every control, touches
// (get, set, change:… subscriptions) only traits its model declares: its generated data traits and its
// `@typedef {object} <Stem>State`. This sees reads
// through variables (`model.get(name)` in a helper) that the static check in tests/widgets/test_widget_contract.py cannot.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import * as generated from "../src/lib/view_traits.js";
import { fakeModel, settle } from "./fake_model.js";
import { VIEWS } from "./view_states.js";

const SRC = join(dirname(fileURLToPath(import.meta.url)), "..", "src");

/** `@property` names of `@typedef {object} <name>` in js/src/<file>. */
function typedefFields(file, name) {
  const source = readFileSync(join(SRC, file), "utf8");
  const block = source
    .split("/**")
    .find((text) => new RegExp(`@typedef\\s+\\{object\\}\\s+${name}\\b`).test(text.split("*/")[0]));
  if (!block) throw new Error(`${file} has no @typedef {object} ${name}`);
  const fields = [];
  const body = block.split("*/")[0];
  for (let at = body.indexOf("@property"); at >= 0; at = body.indexOf("@property", at + 1)) {
    let i = body.indexOf("{", at);
    for (let depth = 0; ; i += 1) {
      if (body[i] === "{") depth += 1;
      else if (body[i] === "}" && (depth -= 1) === 0) break;
    }
    fields.push(/^\s*\[?(\w+)/.exec(body.slice(i + 1))[1]);
  }
  return fields;
}

/**
 * The synced traits of a view's model `<Stem>Model`: its data traits (generated in lib/view_traits.js from the
 * Python view-data class) and the `@property` names of its hand-written `<Stem>State` typedef.
 */
function modelFields(file, name) {
  const data = generated[`${file.replace(/\.js$/, "").toUpperCase()}_DATA_TRAITS`];
  if (!data) throw new Error(`lib/view_traits.js has no data traits of ${file}`);
  return [...data, ...typedefFields(file, name.replace(/Model$/, "State"))];
}

let el;
let cleanups = [];
beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
});
afterEach(() => {
  for (const cleanup of cleanups) cleanup?.();
  cleanups = [];
  el.remove();
});

describe.each(VIEWS)("$file", ({ file, model: name, widget, state }) => {
  it(`touches only the traits of its ${name} typedef, and the fixture declares exactly those`, async () => {
    const fields = modelFields(file, name);
    expect(Object.keys(state).sort()).toEqual([...fields].sort()); // the fixture is a complete model of the typedef
    const model = fakeModel(state);
    cleanups.push(widget.initialize?.({ model }), widget.render({ model, el }));
    await settle();
    expect(el.querySelector(".iw-error")).toBeNull();
    // Poke every control and token once: hover, focus, click, Enter, and a change event on each input.
    for (const node of el.querySelectorAll(".iw-token, .iw-example, .iw-concept, canvas")) {
      for (const type of ["mouseover", "focusin", "mouseleave", "click"])
        node.dispatchEvent(new Event(type, { bubbles: true }));
      node.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    }
    for (const node of el.querySelectorAll("select, input"))
      node.dispatchEvent(new Event(node.type === "search" ? "input" : "change", { bubbles: true }));
    for (const node of el.querySelectorAll(":not(.iw-export) > button:not([disabled])")) node.click(); // export needs a layout engine
    await settle();
    expect(el.querySelector(".iw-error")).toBeNull();
    const touched = new Set([
      ...model.get.mock.calls.map(([trait]) => trait),
      ...model.set.mock.calls.map(([trait]) => trait),
      ...model.on.mock.calls
        .map(([event]) => event)
        .filter((event) => event.startsWith("change:"))
        .map((event) => event.slice(7)),
    ]);
    expect([...touched].filter((trait) => !fields.includes(trait))).toEqual([]);
    expect(model.get).toHaveBeenCalledWith("error");
  });
});
