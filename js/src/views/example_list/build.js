/**
 * Example list, build: the sort / filter / granularity / paging toolbar and the list, and their handlers
 * (a filter or sort change goes back to page 0; click or Enter selects an example; hover shows a unit's score).
 *
 * @example
 *   const parts = build(ctx);
 */
import { createPager, granularitySelect } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { formatScore } from "../../lib/format.js";
import { quoteToken } from "../../lib/text.js";
import { createTooltip } from "../../lib/tooltip.js";
import { textOf, unitsOf } from "./draw.js";
import { SORT_KEYS } from "./read.js";

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, state, safely, save, reportError } = ctx;
  const root = h("div", { class: "iw-root iw-examples" });
  const sortSelect = h(
    "select",
    { class: "iw-sort-select" },
    Object.entries(SORT_KEYS).map(([v, t]) => h("option", { value: v }, t)),
  );
  const orderToggle = h("input", { type: "checkbox", class: "iw-descending-toggle" });
  const labelSelect = h("select", { class: "iw-label-filter" });
  const outcomeSelect = h(
    "select",
    { class: "iw-outcome-filter" },
    ["all", "correct", "wrong"].map((v) => h("option", { value: v }, v)),
  );
  const granularity = granularitySelect();
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const pager = createPager();
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Sort ", sortSelect]),
    h("label", {}, [orderToggle, " descending"]),
    h("label", {}, ["Predicted ", labelSelect]),
    h("label", {}, ["Outcome ", outcomeSelect]),
    h("label", {}, ["Granularity ", granularity]),
    h("label", { title: "One colour scale for all examples" }, [sharedToggle, " shared scale"]),
    pager.element,
  ]);
  const list = h("ol", { class: "iw-example-list", "aria-label": "Explained examples" });
  const legendSlot = h("div", { class: "iw-legend-slot" });
  const caption = h("div", { class: "iw-caption" });
  root.append(toolbar, list, legendSlot, caption);
  el.append(root);
  const tooltip = createTooltip(root);
  Object.assign(state, { order: [], cache: new Map(), cachedFor: null, runs: [] });
  ctx.onCleanup(() => {
    for (const run of state.runs) run.cancel();
  });

  const resetPage = (changes) => save({ ...changes, page: 0 });
  sortSelect.addEventListener(
    "change",
    safely(() => resetPage({ sort_by: sortSelect.value })),
  );
  orderToggle.addEventListener(
    "change",
    safely(() => resetPage({ descending: orderToggle.checked })),
  );
  labelSelect.addEventListener(
    "change",
    safely(() => resetPage({ filter_label: labelSelect.value })),
  );
  outcomeSelect.addEventListener(
    "change",
    safely(() => resetPage({ filter_outcome: outcomeSelect.value })),
  );
  granularity.addEventListener(
    "change",
    safely(() => save({ granularity: granularity.value })),
  );
  sharedToggle.addEventListener(
    "change",
    safely(() => save({ shared_scale: sharedToggle.checked })),
  );
  pager.prev.addEventListener(
    "click",
    safely(() => save({ page: Math.max(0, model.get("page") - 1) })),
  );
  pager.next.addEventListener(
    "click",
    safely(() => save({ page: model.get("page") + 1 })),
  );
  const itemOf = (event) => (event.target instanceof Element ? event.target.closest(".iw-example") : null);
  list.addEventListener("click", safely((event) => {
    const item = itemOf(event);
    if (item) save({ selected_example: (model.get("first_example") ?? 0) + Number(item.dataset.example) });
  })); // prettier-ignore
  list.addEventListener("keydown", safely((event) => {
    const item = itemOf(event);
    if (!item) return;
    if (event.key === "Enter" || event.key === " ")
      save({ selected_example: (model.get("first_example") ?? 0) + Number(item.dataset.example) });
    else if (event.key === "ArrowDown") item.nextElementSibling?.focus();
    else if (event.key === "ArrowUp") item.previousElementSibling?.focus();
    else return;
    event.preventDefault();
  })); // prettier-ignore
  list.addEventListener("mouseover", safely((event) => {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    if (!span || span === tooltip.target) return;
    const { data } = ctx;
    const i = Number(span.dataset.example);
    const u = Number(span.dataset.unit);
    const { units, sums, starts } = unitsOf(ctx, i);
    const role = [...starts.entries()].filter(([start]) => start <= u).at(-1)?.[1];
    const rows = [[state.cachedFor, quoteToken(textOf(data, i, units[u]))], ...(role ? [["turn", role]] : []), ["score", Number.isNaN(sums[u]) ? "not seen" : formatScore(sums[u], { digits: 6, sign: data.signed })], ["example", `#${i}`]];
    if (units[u].length > 1) rows.push(["sum of", `${units[u].length} tokens`]);
    tooltip.show(span, rows);
  })); // prettier-ignore
  list.addEventListener("mouseleave", () => tooltip.hide());
  const csvRows = () => {
    const { data } = ctx;
    const header = ["example", "predicted", "confidence", "true_label", "max_attribution", "position"];
    return [
      [...header, state.cachedFor, "start_token", "score"],
      ...state.order.flatMap((i) => {
        const { units, sums } = unitsOf(ctx, i);
        return units.map((unit, u) => [
          i,
          data.predicted[i],
          data.confidence[i] ?? "",
          data.trueLabels[i],
          data.maxAttribution[i],
          u,
          textOf(data, i, unit),
          unit[0],
          sums[u],
        ]);
      }),
    ];
  };
  toolbar.append(
    createExportMenu({
      name: "examples",
      root,
      rows: csvRows,
      prepare: () => state.runs.forEach((run) => run.finish()),
      title: () => "Explained examples",
      reportError,
    }),
  );
  return {
    root,
    sortSelect,
    orderToggle,
    labelSelect,
    outcomeSelect,
    granularity,
    sharedToggle,
    pager,
    list,
    legendSlot,
    caption,
  };
}
