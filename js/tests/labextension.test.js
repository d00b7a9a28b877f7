// The JupyterLab renderer's hand-over between the live widget and the view rebuilt from the saved output
// (labextension/renderer.js), with ipywidgets' renderer and the notebook's rendermime replaced by test doubles that
// behave as jupyterlab-manager's do: a placeholder factory until the panel's widget manager is bound, then a renderer
// that shows the widget when the manager has its model and stays empty ("model not found") when it has not.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MIME_TYPE, WIDGET_VIEW_MIME } from "../src/lib/payload.js";
import FIXTURES from "./fixtures/payloads.json";
import { settle } from "./fake_model.js";

// jsdom has no DragEvent, which @lumino/widgets (the page's own copy in JupyterLab) refers to when it loads.
globalThis.DragEvent ??= class DragEvent extends MouseEvent {};
const { Panel, Widget } = await import("@lumino/widgets");
const { InterpWidgetsRenderer, RANK, hostOf, panelHost, rendererFactory } =
  await import("../src/labextension/renderer.js");

const clone = (value) => JSON.parse(JSON.stringify(value));

/** ipywidgets' WidgetRenderer: shows a "live" child when `models` has the output's model id. */
class FakeWidgetRenderer extends Panel {
  constructor(manager) {
    super();
    this.manager = manager;
    this._manager = { promise: Promise.resolve(manager) }; // jupyterlab-manager's PromiseDelegate of its manager
    this.renders = 0;
  }
  async renderModel(model) {
    this.renders += 1;
    const id = model.data[WIDGET_VIEW_MIME].model_id;
    this.modelId = id;
    if (this.manager.models.has(id)) this.show_live();
    else if (this.manager.forgetful) this.node.textContent = "Error displaying widget: model not found";
    else this.manager.waiting.push(this); // re-rendered when the manager restores (jupyterlab-manager's `restored`)
  }
  show_live() {
    const live = new Widget();
    live.addClass("live-widget");
    this.addWidget(live);
  }
}

const placeholder = { safe: false, mimeTypes: [WIDGET_VIEW_MIME], createRenderer: () => new Panel() };

function fakeNotebook() {
  const manager = {
    models: new Set(),
    waiting: [],
    live: {}, // model id -> the live model's traits set and saves
    async get_model(id) {
      if (!this.models.has(id)) throw new Error("widget model not found");
      const record = (this.live[id] ??= { set: {}, saves: 0 });
      return { set: (name, value) => (record.set[name] = value), save_changes: () => (record.saves += 1) };
    },
  };
  const bound = { safe: false, mimeTypes: [WIDGET_VIEW_MIME], createRenderer: () => new FakeWidgetRenderer(manager) };
  let factory = placeholder;
  let ready;
  const sessionContext = { ready: new Promise((resolve) => (ready = resolve)) };
  const rendermime = { getFactory: () => factory };
  const host = panelHost({ sessionContext }, rendermime, () => placeholder);
  return {
    host,
    manager,
    sessionContext,
    rendermime,
    bind() {
      factory = bound;
      ready();
    },
    restore(...ids) {
      for (const id of ids) manager.models.add(id);
      for (const renderer of manager.waiting.splice(0)) if (manager.models.has(renderer.modelId)) renderer.show_live();
    },
  };
}

const output = (trusted = true, modelId = "w1") => ({
  trusted,
  data: {
    [WIDGET_VIEW_MIME]: { version_major: 2, version_minor: 1, model_id: modelId },
    [MIME_TYPE]: clone(FIXTURES.token_highlight),
    "image/svg+xml": "<svg/>",
  },
});

let renderer;
const mount = (host) => {
  renderer = new InterpWidgetsRenderer({ mimeType: MIME_TYPE }, { host });
  Widget.attach(renderer, document.body);
  return renderer;
};
const saved = () => renderer.node.querySelectorAll(".iw-mime-saved .iw-root").length;
const live = () => renderer.node.querySelectorAll(".live-widget").length;
const visibleLive = () =>
  [...renderer.node.querySelectorAll(".live-widget")].filter(
    (n) => !n.parentElement.classList.contains("lm-mod-hidden"),
  ).length;

beforeEach(() => {
  renderer = null;
});
afterEach(() => {
  if (renderer && !renderer.isDisposed) {
    Widget.detach(renderer);
    renderer.dispose();
  }
});

describe("the rendermime factory", () => {
  it("is safe, ranks ahead of ipywidgets' -10 and renders our MIME type", () => {
    const factory = rendererFactory();
    expect(factory).toMatchObject({ safe: true, mimeTypes: [MIME_TYPE], defaultRank: RANK });
    expect(RANK).toBeLessThan(-10);
    expect(factory.createRenderer({ mimeType: MIME_TYPE })).toBeInstanceOf(InterpWidgetsRenderer);
  });
});

describe("who draws the output", () => {
  it("the live widget, when the manager has the model (a cell just ran): nothing is rebuilt", async () => {
    const nb = fakeNotebook();
    nb.manager.models.add("w1");
    nb.bind();
    await mount(nb.host).renderModel(output());
    expect([live(), visibleLive(), saved()]).toEqual([1, 1, 0]);
  });

  it("the rebuilt view, when the manager does not have it (reopened notebook, new kernel): never 'model not found'", async () => {
    const nb = fakeNotebook();
    nb.bind();
    await mount(nb.host).renderModel(output());
    await settle();
    expect([live(), saved()]).toEqual([0, 1]);
    expect(renderer.node.textContent).not.toContain("model not found");
  });

  it("the rebuilt view at once while the kernel starts, replaced by the live widget restored from saved state", async () => {
    const nb = fakeNotebook();
    await mount(nb.host).renderModel(output());
    expect(saved()).toBe(1); // before the session is ready: no waiting, no "Loading widget..."
    expect(renderer.node.dataset.iwHandover).toBe("pending"); // the rebuilt view is about to give way
    nb.bind();
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(saved()).toBe(1); // bound, but the model is not restored yet: the live renderer waits hidden
    nb.restore("w1");
    await settle();
    expect([visibleLive(), saved()]).toEqual([1, 0]); // one view only
    expect(renderer.node.dataset.iwHandover).toBeUndefined();
  });

  it("carries what the user changed on the rebuilt view over to the live widget that replaces it", async () => {
    const nb = fakeNotebook();
    await mount(nb.host).renderModel(output());
    const select = renderer.node.querySelector(".iw-mime-saved .iw-granularity-select");
    select.value = "word";
    select.dispatchEvent(new Event("change"));
    nb.bind();
    await new Promise((resolve) => setTimeout(resolve, 120));
    nb.restore("w1");
    await settle();
    expect([visibleLive(), saved()]).toEqual([1, 0]);
    expect(nb.manager.live.w1).toEqual({ set: { granularity: "word" }, saves: 1 }); // set, then sent to Python
  });

  it("carries nothing over when the user changed nothing", async () => {
    const nb = fakeNotebook();
    await mount(nb.host).renderModel(output());
    nb.bind();
    await new Promise((resolve) => setTimeout(resolve, 120));
    nb.restore("w1");
    await settle();
    expect(visibleLive()).toBe(1);
    expect(nb.manager.live).toEqual({});
  });

  it("asks again when ipywidgets said 'model not found' before the saved state was loaded (its restore race)", async () => {
    const nb = fakeNotebook();
    nb.bind();
    nb.manager.forgetful = true;
    await mount(nb.host).renderModel(output());
    expect(saved()).toBe(1);
    nb.manager.models.add("w1"); // the saved state is loaded after the first answer
    await new Promise((resolve) => setTimeout(resolve, 1800)); // the first retry comes 1.5 s later
    expect([visibleLive(), live(), saved()]).toEqual([1, 1, 0]); // the failed stand-by was dropped
  });

  it("only the rebuilt view for untrusted outputs, whatever the manager holds", async () => {
    const nb = fakeNotebook();
    nb.manager.models.add("w1");
    nb.bind();
    await mount(nb.host).renderModel(output(false));
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect([live(), saved()]).toEqual([0, 1]);
  });

  it("only the rebuilt view outside notebooks and consoles (no host)", async () => {
    await mount(null).renderModel(output());
    expect([live(), saved()]).toEqual([0, 1]);
  });

  it("keeps the live view when the same widget's display is updated (the monitor's handle.update)", async () => {
    const nb = fakeNotebook();
    nb.manager.models.add("w1");
    nb.bind();
    mount(nb.host);
    await renderer.renderModel(output());
    const first = renderer.node.querySelector(".live-widget");
    await renderer.renderModel(output());
    expect(renderer.node.querySelector(".live-widget")).toBe(first);
    await renderer.renderModel(output(true, "w2")); // another widget: drawn afresh
    expect(renderer.node.querySelector(".live-widget")).toBeNull();
    expect(saved()).toBe(1);
  });

  it("finds its notebook through its parents, also when the cell joins the notebook after the output rendered", async () => {
    const nb = fakeNotebook();
    nb.manager.models.add("w1");
    nb.bind();
    const panel = new Panel(); // a NotebookPanel: session context, and content with the notebook's rendermime
    panel.sessionContext = nb.sessionContext;
    panel.content = { rendermime: nb.rendermime };
    const cell = new Panel();
    renderer = new InterpWidgetsRenderer({ mimeType: MIME_TYPE }, { placeholder: () => placeholder });
    cell.addWidget(renderer);
    expect(hostOf(renderer, () => placeholder)).toBeNull();
    await renderer.renderModel(output()); // no notebook yet: the rebuilt view
    expect(saved()).toBe(1);
    panel.addWidget(cell); // the cell is inserted into the notebook
    Widget.attach(panel, document.body);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect([visibleLive(), saved()]).toEqual([1, 0]);
    expect(hostOf(renderer, () => placeholder)).toBe(hostOf(renderer, () => placeholder)); // one host per panel
    Widget.detach(panel);
    panel.dispose();
    renderer = null;
  });

  it("cleans up on dispose", async () => {
    const nb = fakeNotebook();
    nb.bind();
    await mount(nb.host).renderModel(output());
    Widget.detach(renderer);
    renderer.dispose();
    expect(renderer.node.querySelector(".iw-root")).toBeNull();
  });
});
