/**
 * Visible failure instead of a blank cell: a widget's render is wrapped so that an exception, or a
 * message in the Python `error` trait, replaces the view with a readable message.
 *
 * Every view gets it through lib/view.js mountView.
 *
 * @example
 *   const render = guardedRender("TokenHighlightWidget", ({ model, el, reportError }) => startView(view, { model, el, reportError }));
 */
import { h } from "./dom.js";
import { detectTheme } from "./theme.js";

/** Replace the content of `el` with an error box. */
export function showError(el, widgetName, message) {
  el.replaceChildren(
    h("div", { class: "iw-root iw-error", role: "alert", "data-iw-theme": detectTheme(el.ownerDocument) }, [
      h("strong", {}, `${widgetName} could not be displayed`),
      h("div", { class: "iw-error-message" }, String(message)),
    ]),
  );
}

function messageOf(error) {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/**
 * Wrap `render({model, el, reportError})` so failures are shown. The inner render receives
 * `reportError(err)` to show errors raised later (in event handlers) the same way, and may return a
 * cleanup function. When the `error` trait is non-empty its text is shown instead of the view.
 * @param {string} widgetName
 * @param {(ctx: {model: any, el: HTMLElement, reportError: (e: unknown) => void}) => (() => void) | void} render
 */
export function guardedRender(widgetName, render) {
  return ({ model, el }) => {
    let cleanup = null;
    const teardown = () => {
      const fn = cleanup;
      cleanup = null;
      try {
        fn?.();
      } catch {
        // a failing cleanup must not hide the message being shown
      }
    };
    const reportError = (error) => {
      teardown();
      showError(el, widgetName, messageOf(error));
    };
    const mount = () => {
      teardown();
      el.replaceChildren();
      const message = model.get("error");
      if (message) {
        showError(el, widgetName, message);
        return;
      }
      try {
        cleanup = render({ model, el, reportError }) ?? null;
      } catch (error) {
        reportError(error);
      }
    };
    model.on("change:error", mount);
    mount();
    return () => {
      model.off("change:error", mount);
      teardown();
    };
  };
}
