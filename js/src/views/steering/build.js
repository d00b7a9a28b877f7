/**
 * Steering view, build: the toolbar (one toggle button per scale, and export), the caption, the chart box and the
 * generation columns, and the toggles' handler (writes `hidden_scales`).
 *
 * @example
 *   const parts = build(ctx);
 */
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { shownScales } from "./draw.js";

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, safely, save, reportError } = ctx;
  const toggles = h("div", { class: "iw-steer-toggles", role: "group", "aria-label": "Scales shown" });
  const toolbar = h("div", { class: "iw-toolbar" }, [toggles]);
  const caption = h("div", { class: "iw-caption" });
  const chartBox = h("div", { class: "iw-steer-chart-box" });
  const columns = h("div", { class: "iw-steer-columns", tabindex: "0", "aria-label": "Generations per scale" });
  const root = h("div", { class: "iw-root iw-steering" }, [toolbar, caption, chartBox, columns]);
  el.append(root);
  toggles.addEventListener(
    "click",
    safely((event) => {
      const button = event.target.closest?.("button[data-scale]");
      if (!button) return;
      const k = Number(button.dataset.scale);
      const hidden = new Set(model.get("hidden_scales") ?? []);
      if (hidden.has(k)) hidden.delete(k);
      else hidden.add(k);
      save({ hidden_scales: [...hidden].sort((a, b) => a - b) });
    }),
  );
  const csvRows = () => {
    const { data } = ctx;
    const rows = [["scale", "shown", "metric", "metric_spread", "damage", "generation"]];
    const shown = shownScales(model.get("hidden_scales"), data.S);
    data.scales.forEach((s, k) =>
      rows.push([
        s,
        shown.includes(k),
        data.metricMean[k],
        data.metricSpread[k],
        data.damage[k],
        data.steered[k].join(""),
      ]),
    );
    return rows;
  };
  toolbar.append(
    createExportMenu({
      name: "steering",
      root,
      rows: csvRows,
      title: () => `steering at ${ctx.data.layer}`,
      reportError,
    }),
  );
  return { root, toolbar, toggles, caption, chartBox, columns };
}
