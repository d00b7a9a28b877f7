// A notebook saved by interp_widgets 0.1 (tests/fixtures/saved_v0_1/views.ipynb, written once by
// scripts/make_saved_fixtures.py): every view output in it renders through the mime renderer from its saved payload,
// with no kernel, and shows no note and no error.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { mountOutput } from "../src/labextension/mount.js";
import { VIEWS } from "../src/labextension/views.js";
import { MIME_TYPE, readPayload } from "../src/lib/payload.js";
import { settle } from "./fake_model.js";

const NOTEBOOK = JSON.parse(readFileSync(resolve(__dirname, "../../tests/fixtures/saved_v0_1/views.ipynb"), "utf-8"));
const OUTPUTS = NOTEBOOK.cells.flatMap((cell) => (cell.outputs ?? []).filter((output) => output.data?.[MIME_TYPE]));

let el;
let cleanups;
beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
  cleanups = [];
  vi.spyOn(HTMLCanvasElement.prototype, "getContext").mockImplementation(
    () => new Proxy({}, { get: (target, key) => (key in target ? target[key] : () => ({ width: 0 })) }),
  );
});
afterEach(() => {
  for (const cleanup of cleanups.reverse()) cleanup?.();
  el.remove();
  vi.restoreAllMocks();
});

describe("a notebook saved by 0.1", () => {
  it("holds outputs of several views", () => {
    expect(OUTPUTS.map((output) => output.data[MIME_TYPE].view)).toEqual([
      "token_highlight",
      "generation",
      "lens",
      "comparison",
      "example_list",
    ]);
  });

  it.each(OUTPUTS.map((output) => [output.data[MIME_TYPE].view, output]))(
    "renders its %s output from the saved payload, without a kernel",
    async (view, output) => {
      expect(readPayload(JSON.parse(JSON.stringify(output.data[MIME_TYPE]))).kind).toBe("view");
      cleanups.push(await mountOutput(el, output.data, { loadView: (name) => VIEWS[name]() }));
      await settle();
      expect(el.querySelector(".iw-mime-view > .iw-root")).not.toBeNull();
      expect(el.querySelector(".iw-error, .iw-mime-note")).toBeNull();
      expect(el.querySelector("b, script")).toBeNull(); // the "<b>bad</b>" token stays text
    },
  );
});
