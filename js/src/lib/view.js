/**
 * How every view is mounted: `mountView(widgetName, view)` owns the wiring that every view shares (subscriptions
 * to the data and UI traits, the theme, coalesced redraws, the error guard and the teardown), so that a view is
 * only its `read` (traits -> plain state), `build` (DOM skeleton and controls) and `draw` (painting).
 * `viewKit` is the plumbing under it: handlers whose exceptions are shown in the cell, trait writes sent to
 * Python in one message, and redraws coalesced so a burst of trait changes redraws once.
 *
 * @example
 *   export default mountView("TokenHighlightWidget", { dataTraits: DATA_TRAITS, uiTraits, read, build, draw });
 *   // in build(ctx): button.addEventListener("click", ctx.safely(() => ctx.save({ page: 0 })));
 */
import { guardedRender } from "./errors.js";
import { detectTheme, watchTheme } from "./theme.js";

/**
 * @param {{set: Function, save_changes: Function}} model
 * @param {(error: unknown) => void} reportError
 */
export function viewKit(model, reportError) {
  /** `fn` wrapped so that an exception is reported (shown in place of the view) instead of lost. */
  const safely =
    (fn) =>
    (...args) => {
      try {
        return fn(...args);
      } catch (error) {
        reportError(error);
        return undefined;
      }
    };
  /** Set traits and send them to Python in one message. */
  const save = (changes) => {
    for (const [name, value] of Object.entries(changes)) model.set(name, value);
    model.save_changes();
  };
  /** A `request(level)` that runs `fn(maxLevel)` once, in a microtask, for any number of calls before it. */
  const coalesce = (fn) => {
    let pending = 0;
    return (level = 1) => {
      if (pending === 0) {
        queueMicrotask(
          safely(() => {
            const requested = pending;
            pending = 0;
            fn(requested);
          }),
        );
      }
      pending = Math.max(pending, level);
    };
  };
  return { safely, save, coalesce };
}

/** Redraw levels given to `draw(ctx, level)`: a UI change redraws, a data change re-reads the traits first. */
export const REDRAW = 1;
export const REREAD = 2;

/**
 * What `build` and `draw` receive: the anywidget model and element, the state `read` made (`data`), the theme, and
 * the shared plumbing. A view keeps its DOM parts and its own mutable state on it (`ctx.parts`, `ctx.state`).
 * @typedef {object} ViewContext
 * @property {any} model
 * @property {HTMLElement} el
 * @property {Document} doc
 * @property {"light" | "dark"} theme  Updated before the redraw that follows a theme change.
 * @property {any} data  What `read(model)` returned; re-read before a `draw(ctx, REREAD)`.
 * @property {any} parts  What `build(ctx)` returned.
 * @property {Record<string, any>} state  The view's own mutable state, `{}` at first.
 * @property {boolean} disposed  True once the view is torn down.
 * @property {boolean} immediate  True for a hidden warm-up copy, which draws on every request.
 * @property {(error: unknown) => void} reportError  Show an error in place of the view.
 * @property {<F extends Function>(fn: F) => F} safely  `fn`, with its exceptions shown in place of the view.
 * @property {(changes: Record<string, unknown>) => void} save  Set traits and send them in one message.
 * @property {(level?: number) => void} request  Ask for a redraw (1) or a re-read and redraw (2), coalesced.
 * @property {(fn: (level: number) => void) => (level?: number) => void} coalesce  Another coalesced request, for
 *   partial repaints (e.g. on scroll); see viewKit.
 * @property {(event: string, handler: Function) => void} listen  A model listener (guarded, removed on teardown).
 * @property {(cleanup: () => void) => void} onCleanup  Run `cleanup` on teardown (last registered runs first).
 */

/**
 * Start a view in `el` without the error guard (mountView adds it); returns the teardown.
 * `immediate` draws on every request instead of coalescing (a hidden warm-up copy of a view).
 * @param {ViewSpec} view
 * @param {{model: any, el: HTMLElement, reportError: (error: unknown) => void, immediate?: boolean}} props
 */
export function startView(view, { model, el, reportError, immediate = false }) {
  const { dataTraits = [], uiTraits = [], read = () => null, build, draw, onTheme, schedule = "microtask" } = view;
  const doc = el.ownerDocument;
  const { safely, save, coalesce } = viewKit(model, reportError);
  const cleanups = [];
  const listeners = [];
  const redraw = (level) => {
    if (ctx.disposed) return;
    if (level >= REREAD) ctx.data = read(model);
    draw(ctx, level);
  };
  let frame = 0;
  let frameLevel = 0;
  const win = doc.defaultView;
  /** @type {(level?: number) => void} */
  const request = immediate
    ? (level = REDRAW) => redraw(level)
    : schedule === "frame"
      ? (level = REDRAW) => {
          frameLevel = Math.max(frameLevel, level);
          if (frame || ctx.disposed) return;
          const raf = win?.requestAnimationFrame ?? ((fn) => setTimeout(fn, 16));
          frame = raf(
            safely(() => {
              const requested = frameLevel;
              frame = 0;
              frameLevel = 0;
              redraw(requested);
            }),
          );
        }
      : coalesce(redraw);
  /** @type {ViewContext} */
  const ctx = {
    model,
    el,
    doc,
    theme: detectTheme(doc),
    data: null,
    parts: null,
    state: {},
    disposed: false,
    immediate,
    reportError,
    safely,
    save,
    request,
    coalesce,
    listen(event, handler) {
      const guarded = safely(handler);
      model.on(event, guarded);
      listeners.push([event, guarded]);
    },
    onCleanup: (cleanup) => cleanups.push(cleanup),
  };
  const onData = () => request(REREAD);
  const onUi = () => request(REDRAW);
  const subscriptions = [
    ...dataTraits.map((name) => [`change:${name}`, onData]),
    ...uiTraits.map((name) => [`change:${name}`, onUi]),
  ];
  for (const [event, handler] of subscriptions) model.on(event, handler);
  const stopTheme = watchTheme(doc, (next) => {
    ctx.theme = next;
    onTheme?.(ctx);
    request(REDRAW);
  });
  const teardown = () => {
    ctx.disposed = true;
    if (frame) (win?.cancelAnimationFrame ?? clearTimeout)(frame);
    for (const [event, handler] of [...subscriptions, ...listeners]) model.off(event, handler);
    stopTheme();
    for (const cleanup of cleanups.reverse()) cleanup();
  };
  try {
    ctx.parts = build(ctx);
    ctx.data = read(model);
    draw(ctx, REREAD);
  } catch (error) {
    teardown();
    throw error;
  }
  return teardown;
}

/**
 * A view: what it reads, builds and draws. `draw(ctx, level)` paints from `ctx.data` and the UI traits;
 * level is REREAD (2) on the first draw and after a data trait changed (ctx.data was just re-read), else REDRAW (1).
 * @typedef {object} ViewSpec
 * @property {readonly string[]} [dataTraits]  Traits whose change re-reads the data (then draws).
 * @property {readonly string[]} [uiTraits]  Traits whose change only redraws.
 * @property {(model: any) => any} [read]  Model traits -> plain view state (throws a readable error when invalid).
 * @property {(ctx: ViewContext) => any} build  The DOM skeleton and controls, appended to `ctx.el`; returns the parts.
 * @property {(ctx: ViewContext, level: number) => void} draw  Paint from the state.
 * @property {(ctx: ViewContext) => void} [onTheme]  Runs on a theme change, before the redraw.
 * @property {"microtask" | "frame"} [schedule]  Coalesce redraws per microtask (default) or per animation frame.
 * @property {(props: {model: any}) => (() => void) | void} [initialize]  anywidget's per-model initialize.
 */

/**
 * The anywidget module of a view: `render` mounts `view` in the cell under the error guard (an exception, or a
 * message in the `error` trait, is shown instead of a blank cell) and returns its teardown to anywidget.
 * @param {string} widgetName  the Python class name, shown in error messages
 * @param {ViewSpec} view
 */
export function mountView(widgetName, view) {
  const render = guardedRender(widgetName, (props) => startView(view, props));
  return view.initialize ? { initialize: view.initialize, render } : { render };
}
