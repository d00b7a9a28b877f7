// lib/view.js mountView: the wiring every view shares (subscriptions, coalesced redraws, theme, error guard,
// teardown), on a tiny view over the fake model.
import { afterEach, describe, expect, it, vi } from "vitest";
import { REDRAW, REREAD, mountView } from "../src/lib/view.js";
import { fakeModel, settle } from "./fake_model.js";

function tinyView(extra = {}) {
  const calls = { read: 0, draw: [] };
  const view = {
    dataTraits: ["values"],
    uiTraits: ["label"],
    read(model) {
      calls.read += 1;
      const values = model.get("values");
      if (!Array.isArray(values)) throw new RangeError("values must be a list");
      return { values };
    },
    build(ctx) {
      const node = document.createElement("div");
      node.className = "tiny";
      ctx.el.append(node);
      return { node };
    },
    draw(ctx, level) {
      calls.draw.push(level);
      ctx.parts.node.textContent = `${ctx.model.get("label")}: ${ctx.data.values.join(",")} (${ctx.theme})`;
    },
    ...extra,
  };
  return { view, calls };
}

let cleanups = [];
afterEach(() => {
  for (const cleanup of cleanups) cleanup();
  cleanups = [];
  vi.restoreAllMocks();
});

describe("mountView", () => {
  it("draws at once, re-reads on a data trait, only redraws on a UI trait, once per burst", async () => {
    const { view, calls } = tinyView();
    const model = fakeModel({ error: "", values: [1, 2], label: "a" });
    const el = document.createElement("div");
    cleanups.push(mountView("Tiny", view).render({ model, el }));
    expect(el.querySelector(".tiny").textContent).toBe("a: 1,2 (light)");
    expect(calls).toEqual({ read: 1, draw: [REREAD] });
    model.set("label", "b");
    model.set("label", "c");
    await settle();
    expect(calls).toEqual({ read: 1, draw: [REREAD, REDRAW] });
    model.set("label", "d");
    model.set("values", [3]);
    await settle();
    expect(calls).toEqual({ read: 2, draw: [REREAD, REDRAW, REREAD] });
    expect(el.querySelector(".tiny").textContent).toBe("d: 3 (light)");
  });

  it("shows an error in place of the view, never a blank cell, and the error trait's message", async () => {
    const { view } = tinyView();
    const model = fakeModel({ error: "", values: "oops", label: "a" });
    const el = document.createElement("div");
    cleanups.push(mountView("Tiny", view).render({ model, el }));
    expect(el.querySelector(".iw-error").textContent).toContain("Tiny could not be displayed");
    expect(el.querySelector(".iw-error").textContent).toContain("values must be a list");
    expect(model.listenerCount()).toBe(1); // only the guard's change:error: the failed view left nothing behind
    model.set("values", [1]);
    model.set("error", "the kernel said no");
    expect(el.querySelector(".iw-error").textContent).toContain("the kernel said no");
    model.set("error", "");
    expect(el.querySelector(".tiny").textContent).toBe("a: 1 (light)");
  });

  it("reports an exception thrown by a handler or a later draw in place of the view", async () => {
    const { view } = tinyView({
      build(ctx) {
        const button = document.createElement("button");
        button.addEventListener("click", ctx.safely(() => { throw new Error("handler broke"); })); // prettier-ignore
        ctx.el.append(button);
        return { node: document.createElement("div") };
      },
    });
    const model = fakeModel({ error: "", values: [1], label: "a" });
    const el = document.createElement("div");
    cleanups.push(mountView("Tiny", view).render({ model, el }));
    el.querySelector("button").click();
    expect(el.querySelector(".iw-error").textContent).toContain("handler broke");
    expect(model.listenerCount()).toBe(1);
  });

  it("tears down every listener and cleanup it registered, and draws nothing after", async () => {
    const cleanup = vi.fn();
    const onHover = vi.fn();
    const { view, calls } = tinyView({
      build(ctx) {
        ctx.listen("change:hovered", onHover);
        ctx.onCleanup(cleanup);
        return { node: document.createElement("div") };
      },
    });
    const model = fakeModel({ error: "", values: [1], label: "a", hovered: -1 });
    const el = document.createElement("div");
    const teardown = mountView("Tiny", view).render({ model, el });
    model.set("hovered", 2);
    expect(onHover).toHaveBeenCalledTimes(1);
    expect(calls.draw).toEqual([REREAD]); // a listener of its own does not redraw
    model.set("label", "b"); // a redraw is pending...
    teardown(); // ...when the view goes
    await settle();
    expect(calls.draw).toEqual([REREAD]);
    expect(cleanup).toHaveBeenCalledTimes(1);
    expect(model.listenerCount()).toBe(0);
  });

  it("coalesces redraws per animation frame with schedule: frame, and passes initialize through", async () => {
    const frames = [];
    vi.spyOn(window, "requestAnimationFrame").mockImplementation((fn) => frames.push(fn));
    const initialize = vi.fn();
    const { view, calls } = tinyView({ schedule: "frame", initialize });
    const widget = mountView("Tiny", view);
    expect(widget.initialize).toBe(initialize);
    const model = fakeModel({ error: "", values: [1], label: "a" });
    cleanups.push(widget.render({ model, el: document.createElement("div") }));
    model.set("label", "b");
    model.set("values", [2]);
    model.set("label", "c");
    await settle();
    expect(frames.length).toBe(1);
    expect(calls.draw).toEqual([REREAD]);
    frames.shift()();
    expect(calls).toEqual({ read: 2, draw: [REREAD, REREAD] });
  });

  it("redraws in the new theme after a theme change, after the view's onTheme", async () => {
    const onTheme = vi.fn((ctx) => expect(ctx.theme).toBe("dark"));
    const { view, calls } = tinyView({ onTheme });
    const model = fakeModel({ error: "", values: [1], label: "a" });
    const el = document.createElement("div");
    document.body.setAttribute("data-jp-theme-light", "true");
    cleanups.push(mountView("Tiny", view).render({ model, el }));
    cleanups.push(() => document.body.removeAttribute("data-jp-theme-light"));
    document.body.setAttribute("data-jp-theme-light", "false");
    await settle();
    await settle();
    expect(onTheme).toHaveBeenCalledTimes(1);
    expect(calls.draw).toEqual([REREAD, REDRAW]);
    expect(el.querySelector(".tiny").textContent).toBe("a: 1 (dark)");
  });
});
