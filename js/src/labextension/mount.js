/**
 * Rebuild a view from a saved output alone (no kernel, no widget manager): the DOM half of the JupyterLab mime
 * renderer (renderer.js adds the Lumino glue and the hand-over to the live widget).
 *
 * The output's `application/vnd.interp-widgets.v1+json` payload is checked against the view schema
 * (lib/payload.js), then the view's own ES module (js/src/<view>.js, the widget's front end) renders against a
 * kernel-less model shim that serves the payload's traits: hover, click, class / granularity switches, paging and
 * export all work; `save_changes` and `send` go nowhere. A payload that cannot be rendered (written by a newer
 * interp-widgets, over the size cap, or not matching the schema) shows a note and the static picture saved beside it.
 * Every string of the payload reaches the page as text only.
 *
 * @example
 *   const cleanup = await mountOutput(node, outputModel.data, { loadView: (view) => VIEWS[view]() });
 */
import { h } from "../lib/dom.js";
import { createModelShim, mountModule } from "../lib/export_page.js";
import { MIME_TYPE, PayloadError, omittedMessage, readPayload, snapshotTraits } from "../lib/payload.js";

/**
 * The static picture saved beside the payload (SVG or PNG), as an <img>: an image element runs no script, even in
 * an SVG, and the picture is a data: URL, so nothing is requested from the network.
 * @param {Record<string, unknown>} data  the output's MIME bundle
 */
export function staticPicture(data, doc = document) {
  const svg = data["image/svg+xml"];
  const png = data["image/png"];
  let src = null;
  if (typeof svg === "string" && svg) src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
  else if (typeof png === "string" && /^[A-Za-z0-9+/=\s]+$/.test(png))
    src = `data:image/png;base64,${png.replace(/\s/g, "")}`;
  if (src === null) return null;
  const img = doc.createElement("img");
  img.className = "iw-mime-picture";
  img.alt = "Static picture of the view";
  img.src = src;
  return img;
}

/**
 * A note above the static picture, for outputs that cannot be rebuilt.
 * @param {HTMLElement} el
 * @param {Record<string, unknown>} data
 * @param {string} message  plain text
 * @param {"info" | "error"} tone
 */
export function showNote(el, data, message, tone = "info") {
  const note = h("div", { class: `iw-mime-note iw-mime-${tone}`, role: tone === "error" ? "alert" : "note" }, message);
  const picture = staticPicture(data, el.ownerDocument);
  el.replaceChildren(...(picture ? [note, picture] : [note]));
}

/**
 * Render the output's payload into `el`; resolves with a cleanup function.
 * @param {HTMLElement} el
 * @param {Record<string, unknown>} data  the output's MIME bundle (the payload is `data[MIME_TYPE]`)
 * @param {{loadView: (view: string) => Promise<{default: any}>, onModel?: (model: any) => void}} options  `loadView`
 *   imports the view's ES module; `onModel` receives the view's model shim once the view is drawn (its
 *   `savedChanges()` are the traits the user changed since)
 */
export async function mountOutput(el, data, { loadView, onModel }) {
  let read;
  try {
    read = readPayload(data[MIME_TYPE]);
  } catch (error) {
    const reason = error instanceof PayloadError ? error.message : String(error);
    showNote(
      el,
      data,
      `This interp-widgets output could not be rebuilt: its saved data is not valid (${reason}). Showing the saved picture instead.`,
      "error",
    );
    return () => {};
  }
  if (read.kind === "newer") {
    showNote(
      el,
      data,
      `${read.message} Upgrade interp-widgets (pip install -U interp-widgets) and reload to see it interactive; showing the saved picture.`,
    );
    return () => {};
  }
  if (read.kind === "omitted") {
    showNote(el, data, omittedMessage(read));
    return () => {};
  }
  if (read.kind === "failed") {
    showNote(
      el,
      data,
      `This ${read.widget} output saved no data (${read.message}); showing the saved picture. Re-run the cell to see it interactive.`,
      "error",
    );
    return () => {};
  }
  const model = createModelShim(snapshotTraits(read.traits));
  const root = h("div", { class: "iw-mime-view" });
  el.replaceChildren(root);
  try {
    const cleanup = await mountModule(root, model, await loadView(read.view));
    model.startRecording(); // from now on the traits saved are the user's doing
    onModel?.(model);
    return cleanup;
  } catch (error) {
    showNote(
      el,
      data,
      `This ${read.widget} output could not be rebuilt (${error instanceof Error ? error.message : error}); showing the saved picture.`,
      "error",
    );
    return () => {};
  }
}
