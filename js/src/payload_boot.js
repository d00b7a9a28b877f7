/**
 * Module script of `interp-widgets export` pages of notebooks that hold only interp_widgets views and plain outputs
 * (interp_widgets/notebook_export.py): each view is rebuilt from its saved `application/vnd.interp-widgets.v1+json`
 * payload with the view's own ES module, with no widget manager, no require.js, no kernel and no network.
 *
 * Page contract:
 *   <div class="iw-export-widget" data-iw-esm="ID1" data-iw-payload="ID2"></div>
 *   <script type="application/json" id="ID1">"…the view's ES module source as a JSON string…"</script>
 *   <script type="application/json" id="ID2">{…the output's payload…}</script>
 * Payloads are checked against the view schema first (lib/payload.js); a failure is shown in place of the view.
 */
import { createModelShim, importSource, mountModule } from "./lib/export_page.js";
import { readPayload, snapshotTraits } from "./lib/payload.js";

function readJson(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`missing embedded data block #${id}`);
  return JSON.parse(node.textContent);
}

const modules = new Map();
for (const container of document.querySelectorAll(".iw-export-widget[data-iw-payload]")) {
  (async () => {
    const read = readPayload(readJson(container.dataset.iwPayload));
    if (read.kind !== "view") throw new Error(read.message ?? `the ${read.widget} output carries no view data`);
    const id = container.dataset.iwEsm;
    if (!modules.has(id)) modules.set(id, importSource(readJson(id)));
    await mountModule(container, createModelShim(snapshotTraits(read.traits)), await modules.get(id));
  })().catch((error) => {
    const box = document.createElement("div");
    box.className = "iw-root iw-error";
    box.setAttribute("role", "alert");
    box.textContent = `This view could not be displayed: ${error instanceof Error ? error.message : error}`;
    container.replaceChildren(box);
  });
}
