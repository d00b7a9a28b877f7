/**
 * The widgets' own ES modules (js/src/<view>.js), loaded on demand: the bundler puts each view in its own chunk,
 * so a notebook loads only the views it shows. `js/tests/labextension.test.js` checks that every view of the
 * payload schema is here.
 *
 * @example const module = await VIEWS.token_highlight();
 */
export const VIEWS = {
  attention: () => import("../attention.js"),
  circuit: () => import("../circuit.js"),
  comparison: () => import("../comparison.js"),
  concept_browser: () => import("../concept_browser.js"),
  example_list: () => import("../example_list.js"),
  generation: () => import("../generation.js"),
  lens: () => import("../lens.js"),
  monitor: () => import("../monitor.js"),
  patching: () => import("../patching.js"),
  steering: () => import("../steering.js"),
  token_highlight: () => import("../token_highlight.js"),
};

/** Import the ES module of `view` (a name the payload schema knows). */
export function loadView(view) {
  if (!Object.prototype.hasOwnProperty.call(VIEWS, view))
    throw new Error(`no front end for view ${JSON.stringify(view)}`);
  return VIEWS[view]();
}
