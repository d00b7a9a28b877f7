/**
 * The JupyterLab / Notebook 7 renderer of `application/vnd.interp-widgets.v1+json` outputs.
 *
 * Its factory ranks ahead of ipywidgets' (rank -10, `safe: false`), so it is the one JupyterLab picks for our outputs,
 * trusted or not (it is `safe: true`: it renders from checked data, strings as text, and runs nothing from the
 * output). It then decides who draws the output:
 *   - the live widget, when the output is trusted and the notebook's widget manager has its model (the cell was just
 *     run, or the kernel still holds it, or widget state was saved): the output is handed to ipywidgets' own renderer,
 *     so the view talks to the kernel and the monitor keeps streaming;
 *   - otherwise the view rebuilt from the payload (mount.js): reopened notebooks without a kernel, without saved
 *     widget state or untrusted, where ipywidgets would say "model not found".
 * If the widget manager is not ready yet (the kernel is still starting) the rebuilt view shows at once and gives way
 * to the live widget as soon as ipywidgets' renderer draws it; when the model is not found it never does, and the
 * rebuilt view stays. Only one of the two is ever visible, and the traits the user changed on the rebuilt view before
 * the hand-over are set on the live widget's model when it takes over (carryOver).
 *
 * A renderer finds its notebook (or console) through its Lumino parents: JupyterLab may render a reopened notebook's
 * outputs before the notebook panel is announced to extensions, and before the cell is inserted into the notebook,
 * so the search is retried for a few seconds; outputs outside notebooks and consoles are rebuilt from the payload.
 *
 * @example
 *   rendermime.addFactory(rendererFactory({ placeholder: () => rendermime.getFactory(WIDGET_VIEW_MIME) }), RANK);
 */
import { Panel, Widget } from "@lumino/widgets";
import { MIME_TYPE, WIDGET_VIEW_MIME } from "../lib/payload.js";
import { mountOutput } from "./mount.js";
import { loadView } from "./views.js";

/** Ahead of ipywidgets' widget-view renderer (-10): lower ranks win. */
export const RANK = -20;

/**
 * Where a notebook's (or console's) live widgets come from: its rendermime registry, once jupyterlab-manager has
 * bound the widget-view factory there to the panel's widget manager (after the session is ready).
 * @param {{sessionContext: {ready: Promise<void>}}} panel
 * @param {{getFactory: (mime: string) => any}} rendermime  the panel's registry
 * @param {() => any} placeholder  ipywidgets' unbound factory (the application registry's), which never renders
 */
export function panelHost(panel, rendermime, placeholder) {
  const current = () => {
    const factory = rendermime.getFactory(WIDGET_VIEW_MIME);
    return factory && factory !== placeholder() ? factory : null;
  };
  let bound = null;
  const whenBound = () => {
    bound ??= (async () => {
      await panel.sessionContext.ready;
      // jupyterlab-manager binds its factory in a continuation of the same `ready`; give it a few ticks.
      for (let tick = 0; tick < 40; tick += 1) {
        const factory = current();
        if (factory) return factory;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return null;
    })().catch(() => null);
    return bound;
  };
  return { current, whenBound };
}

function showsWidget(renderer) {
  return !renderer.isDisposed && renderer.widgets.length > 0;
}

const HOSTS = new WeakMap(); // notebook / console panel -> its panelHost, shared by the panel's renderers
const FIND_HOST_TRIES = 100; // x 100 ms: the parents are complete once the cell is in the notebook
/**
 * Later attempts at the live widget, in ms after the previous one. jupyterlab-manager marks itself restored after a
 * restore from the kernel alone when the kernel connects during its first restore, before the saved widget state
 * is loaded; a renderer asking in between says "model not found" for good, so the hand-over asks again.
 */
const RETRIES = [1500, 4000, 10000];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The host of the notebook or console panel `widget` sits in (found through its Lumino parents), or null.
 * @param {Widget} widget
 * @param {() => any} placeholder
 */
export function hostOf(widget, placeholder) {
  for (let node = widget.parent; node; node = node.parent) {
    const rendermime = node.content?.rendermime ?? node.console?.rendermime; // NotebookPanel, ConsolePanel
    if (node.sessionContext && rendermime) {
      if (!HOSTS.has(node)) HOSTS.set(node, panelHost(node, rendermime, placeholder));
      return HOSTS.get(node);
    }
  }
  return null;
}

/**
 * Set on the live widget's model the traits the user changed on the rebuilt view before the hand-over (a sort chosen,
 * a token clicked), and send them to Python as that view would have, so that no action is lost when the live widget
 * replaces the rebuilt one. The model comes from the manager of ipywidgets' renderer (its `_manager` promise); a
 * renderer without one carries nothing over.
 * @param {any} live  ipywidgets' renderer showing the live widget
 * @param {string} modelId
 * @param {Record<string, unknown>} changes
 */
export async function carryOver(live, modelId, changes) {
  try {
    const manager = await live._manager?.promise;
    const model = await manager?.get_model?.(modelId);
    if (!model) return;
    for (const [name, value] of Object.entries(changes)) model.set(name, value);
    model.save_changes();
  } catch (error) {
    console.error("interp-widgets: the changes made before the live widget took over could not be carried over", error);
  }
}

/** The IRenderer: a Lumino panel holding either the rebuilt view or ipywidgets' renderer of the live widget. */
export class InterpWidgetsRenderer extends Panel {
  /**
   * @param {any} options  JupyterLab's renderer options
   * @param {{host?: ReturnType<typeof panelHost>, placeholder?: () => any}} context  the host if known (tests), else
   *   found through the renderer's parents; `placeholder` gives ipywidgets' unbound factory
   */
  constructor(options, { host = null, placeholder = () => null } = {}) {
    super();
    this.addClass("iw-mime-output");
    this._options = options;
    this._host = host;
    this._placeholder = placeholder;
    this._saved = null; // the Widget holding the view rebuilt from the payload
    this._savedModel = null; // its model shim (the traits the user changed on it)
    this._cleanup = null;
    this._observer = null;
    this._live = null; // {modelId, renderer} once ipywidgets' renderer shows the live widget
    this._generation = 0; // bumped by every renderModel, so late callbacks of an earlier one do nothing
    this._standby = null; // ipywidgets' renderer waiting (hidden) for the model
  }

  /** Draw `model` (an output's IMimeModel); resolves once something is on screen. */
  async renderModel(model) {
    const data = model.data;
    const spec = data[WIDGET_VIEW_MIME];
    const modelId =
      model.trusted && spec && typeof spec === "object" && typeof spec.model_id === "string" ? spec.model_id : "";
    // An updated display of the same widget (the monitor refreshes its output with `handle.update`) keeps the live
    // view, which already shows the model's current state, instead of building it again.
    if (modelId && this._live?.modelId === modelId && showsWidget(this._live.renderer)) return;
    this._reset();
    const generation = (this._generation += 1);
    const stale = () => this.isDisposed || this._generation !== generation;
    const host = modelId ? this._findHost() : null;
    const factory = host?.current() ?? null;
    let first = null;
    if (factory) {
      // The manager is bound (the usual case right after a cell ran): ask it first, so a live widget shows at once.
      first = this._liveRenderer(factory);
      try {
        await first.renderModel(model);
      } catch (error) {
        console.error("interp-widgets: the live widget could not be drawn", error);
      }
      if (stale()) return first.dispose();
      if (showsWidget(first)) {
        this.addWidget(first);
        this._live = { modelId, renderer: first };
        return undefined;
      }
    }
    await this._showSaved(data);
    if (!modelId || stale()) return first?.dispose();
    if (first) this._standBy(first, modelId);
    // While the hand-over is pending the node says so (`data-iw-handover`), e.g. for browser tests; the traits the
    // user changes on the rebuilt view meanwhile are carried over to the live widget (carryOver).
    this.node.dataset.iwHandover = "pending";
    this._goLive(host, model, modelId, stale, first !== null)
      .catch((error) => console.error("interp-widgets: the live widget could not be drawn", error))
      .finally(() => {
        if (!stale()) delete this.node.dataset.iwHandover;
      });
    return undefined;
  }

  /** Hand over to the live widget once it exists: find the notebook, wait for its manager, then ask (and ask again). */
  async _goLive(host, model, modelId, stale, asked) {
    for (let tries = 0; host === null && tries < FIND_HOST_TRIES && !stale(); tries += 1) {
      await sleep(100);
      host = this._findHost();
    }
    const factory = host && !stale() ? await host.whenBound() : null;
    if (!factory) return;
    for (const delay of asked ? RETRIES : [0, ...RETRIES]) {
      if (delay) await sleep(delay);
      if (stale() || this._live) return;
      const live = this._liveRenderer(factory);
      this._standBy(live, modelId);
      await live.renderModel(model);
    }
  }

  _findHost() {
    return this._host ?? hostOf(this, this._placeholder);
  }

  _liveRenderer(factory) {
    return factory.createRenderer({ ...this._options, mimeType: WIDGET_VIEW_MIME });
  }

  async _showSaved(data) {
    const saved = new Widget();
    saved.addClass("iw-mime-saved");
    this._saved = saved;
    this.addWidget(saved);
    let shim = null;
    const cleanup = await mountOutput(saved.node, data, { loadView, onModel: (model) => (shim = model) });
    if (this._saved === saved) {
      this._cleanup = cleanup;
      this._savedModel = shim;
    } else cleanup();
  }

  /**
   * Keep ipywidgets' renderer hidden until it shows the live widget, then let it replace the rebuilt view. A new
   * stand-by replaces the previous one (a renderer that said "model not found").
   */
  _standBy(live, modelId) {
    this._observer?.disconnect();
    if (this._standby && this._standby !== live) this._standby.dispose();
    this._standby = live;
    live.hide();
    this.addWidget(live);
    const promote = () => {
      if (!showsWidget(live)) return;
      this._observer?.disconnect();
      this._observer = null;
      this._standby = null;
      const changes = this._savedModel?.savedChanges() ?? {};
      this._dropSaved();
      live.show();
      if (Object.keys(changes).length) carryOver(live, modelId, changes);
      this._live = { modelId, renderer: live };
      delete this.node.dataset.iwHandover;
    };
    this._observer = new MutationObserver(promote);
    this._observer.observe(live.node, { childList: true });
    promote();
  }

  _dropSaved() {
    const cleanup = this._cleanup;
    this._cleanup = null;
    try {
      cleanup?.();
    } catch (error) {
      console.error(error);
    }
    this._saved?.dispose();
    this._saved = null;
    this._savedModel = null;
  }

  _reset() {
    delete this.node.dataset.iwHandover;
    this._live = null;
    this._standby = null;
    this._observer?.disconnect();
    this._observer = null;
    this._dropSaved();
    for (const child of [...this.widgets]) child.dispose();
  }

  dispose() {
    if (this.isDisposed) return;
    this._reset();
    super.dispose();
  }
}

/**
 * The rendermime factory (`safe: true`: it renders untrusted outputs too, from checked data).
 * @param {{host?: ReturnType<typeof panelHost>, placeholder?: () => any}} [context]  see InterpWidgetsRenderer
 */
export function rendererFactory(context = {}) {
  return {
    safe: true,
    mimeTypes: [MIME_TYPE],
    defaultRank: RANK,
    createRenderer: (options) => new InterpWidgetsRenderer(options, context),
  };
}
