/**
 * Method comparison, build: the toolbar, the rows box and the agreement box, and the handlers of the controls and
 * tokens (hover links a unit across rows, click selects, arrows move within a row and between methods).
 *
 * @example
 *   const parts = build(ctx);
 */
import { granularitySelect } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { quoteToken } from "../../lib/text.js";
import { createTooltip } from "../../lib/tooltip.js";
import { linkHover, scoreText, textOf } from "./draw.js";

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, state, safely, save, reportError } = ctx;
  const root = h("div", { class: "iw-root iw-comparison" });
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const granularity = granularitySelect();
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Granularity ", granularity]),
    h("label", { title: "One colour scale for all methods" }, [sharedToggle, " shared scale"]),
  ]);
  const heading = h("div", { class: "iw-caption" });
  const rowsBox = h("div", { class: "iw-method-rows" });
  const agreementBox = h("div", { class: "iw-agreement" });
  root.append(toolbar, heading, rowsBox, agreementBox);
  el.append(root);
  const tooltip = createTooltip(root);
  ctx.onCleanup(() => {
    for (const run of state.view?.runs ?? []) run.cancel();
  });

  const spanOf = (event) => (event.target instanceof Element ? event.target.closest(".iw-token") : null);
  const show = (span) => {
    const { data } = ctx;
    const { view } = state;
    const u = Number(span.dataset.unit);
    const unit = view.units[u];
    linkHover(ctx, unit[0]);
    const rows = [
      [view.granularity, quoteToken(textOf(data, unit))],
      ...data.methods.map((method, m) => [method, scoreText(data, m, view.sums[m][u])]),
    ];
    if (unit.length > 1) rows.push(["sum of", `${unit.length} tokens`]);
    tooltip.show(span, rows);
    return unit[0];
  };
  rowsBox.addEventListener("mouseover", safely((event) => {
    const span = spanOf(event);
    if (!span || span === tooltip.target) return;
    save({ hovered_token: show(span) });
  })); // prettier-ignore
  rowsBox.addEventListener("mouseleave", safely(() => {
    tooltip.hide();
    linkHover(ctx, -1);
    save({ hovered_token: -1 });
  })); // prettier-ignore
  rowsBox.addEventListener("focusin", safely((event) => {
    const span = spanOf(event);
    if (span) show(span);
  })); // prettier-ignore
  rowsBox.addEventListener("focusout", safely((event) => {
    if (!rowsBox.contains(event.relatedTarget)) {
      tooltip.hide();
      linkHover(ctx, -1);
    }
  })); // prettier-ignore
  rowsBox.addEventListener("click", safely((event) => {
    const span = spanOf(event);
    if (span) save({ selected_token: Number(span.dataset.index) });
  })); // prettier-ignore
  rowsBox.addEventListener("keydown", safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    const { view } = state;
    const m = Number(span.closest("[data-method]").dataset.method);
    let [nm, nu] = [m, Number(span.dataset.unit)];
    if (event.key === "ArrowRight") nu += 1;
    else if (event.key === "ArrowLeft") nu -= 1;
    else if (event.key === "ArrowDown") nm += 1; // same unit, next method
    else if (event.key === "ArrowUp") nm -= 1;
    else if (event.key === "Enter" || event.key === " ") return save({ selected_token: Number(span.dataset.index) }), event.preventDefault();
    else if (event.key === "Escape") return tooltip.hide();
    else return;
    event.preventDefault();
    nm = Math.min(Math.max(nm, 0), ctx.data.methods.length - 1);
    nu = Math.min(Math.max(nu, 0), view.units.length - 1);
    const next = view.runs[nm].ensure(nu);
    span.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  })); // prettier-ignore
  sharedToggle.addEventListener(
    "change",
    safely(() => save({ shared_scale: sharedToggle.checked })),
  );
  granularity.addEventListener(
    "change",
    safely(() => save({ granularity: granularity.value })),
  );
  const csvRows = () => {
    const { view } = state;
    return [
      ["position", view.granularity, "start_token", ...ctx.data.methods],
      ...view.units.map((unit, u) => [u, textOf(ctx.data, unit), unit[0], ...view.sums.map((row) => row[u])]),
    ];
  };
  toolbar.append(
    createExportMenu({
      name: "method-comparison",
      root,
      rows: csvRows,
      prepare: () => state.view.runs.forEach((run) => run.finish()),
      title: () => `Method comparison: ${model.get("target_label")}`,
      reportError,
    }),
  );
  // a hover elsewhere (another view of the same widget, or Python) outlines the unit: no redraw
  ctx.listen("change:hovered_token", () => linkHover(ctx, model.get("hovered_token")));
  return { root, sharedToggle, granularity, heading, rowsBox, agreementBox };
}
