/**
 * The `interp-widgets` JupyterLab 4 / Notebook 7 extension: renders the `application/vnd.interp-widgets.v1+json`
 * output every interp_widgets view saves (renderer.js), so a notebook reopened without its kernel, without saved
 * widget state or untrusted shows the same interactive views, drawn by the widgets' own ES modules.
 *
 * The factory goes into the application's rendermime registry (outputs outside notebooks and consoles: rebuilt
 * from the payload) and, bound to the panel, into each notebook's and console's registry, where it hands outputs
 * whose widget model exists to ipywidgets. Nothing here loads anything from the network.
 *
 * @example // package.json: "jupyterlab": {"extension": "src/labextension/index.js"}
 */
import { IConsoleTracker } from "@jupyterlab/console";
import { INotebookTracker } from "@jupyterlab/notebook";
import { IRenderMimeRegistry } from "@jupyterlab/rendermime";
import { WIDGET_VIEW_MIME } from "../lib/payload.js";
import { RANK, panelHost, rendererFactory } from "./renderer.js";
import "./style.css";

const plugin = {
  id: "interp-widgets:mime-renderer",
  description: "Renders interp_widgets views from their saved outputs when the live widget is gone.",
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [INotebookTracker, IConsoleTracker],
  activate(app, rendermime, notebooks, consoles) {
    rendermime.addFactory(rendererFactory(null), RANK);
    const placeholder = () => rendermime.getFactory(WIDGET_VIEW_MIME);
    const bind = (panel, registry) => registry.addFactory(rendererFactory(panelHost(panel, registry, placeholder)), RANK);
    if (notebooks) {
      notebooks.forEach((panel) => bind(panel, panel.content.rendermime));
      notebooks.widgetAdded.connect((_, panel) => bind(panel, panel.content.rendermime));
    }
    if (consoles) {
      const bindConsole = (panel) => bind({ sessionContext: panel.console.sessionContext }, panel.console.rendermime);
      consoles.forEach(bindConsole);
      consoles.widgetAdded.connect((_, panel) => bindConsole(panel));
    }
  },
};

export default plugin;
