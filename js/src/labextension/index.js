/**
 * The `interp-widgets` JupyterLab 4 / Notebook 7 extension: renders the `application/vnd.interp-widgets.v1+json`
 * output every interp_widgets view saves (renderer.js), so a notebook reopened without its kernel, without saved
 * widget state or untrusted shows the same interactive views, drawn by the widgets' own ES modules.
 *
 * The factory goes into the application's rendermime registry, which every notebook and console copies; each
 * renderer finds its panel and hands outputs whose widget model exists to ipywidgets (renderer.js). Nothing here
 * loads anything from the network.
 *
 * @example // package.json: "jupyterlab": {"extension": "src/labextension/index.js"}
 */
import { IRenderMimeRegistry } from "@jupyterlab/rendermime";
import { WIDGET_VIEW_MIME } from "../lib/payload.js";
import { RANK, rendererFactory } from "./renderer.js";
import "./style.css";

const plugin = {
  id: "interp-widgets:mime-renderer",
  description: "Renders interp_widgets views from their saved outputs when the live widget is gone.",
  autoStart: true,
  requires: [IRenderMimeRegistry],
  activate(app, rendermime) {
    // ipywidgets' own factory in the application registry is a placeholder bound to no widget manager; each notebook
    // gets one bound to its manager once its session is ready (jupyterlab-manager).
    const placeholder = () => rendermime.getFactory(WIDGET_VIEW_MIME);
    rendermime.addFactory(rendererFactory({ placeholder }), RANK);
  },
};

export default plugin;
