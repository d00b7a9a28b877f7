/**
 * Example list, draw: the filtered, sorted page of examples, the filter controls' values, the legend and the
 * caption. Keeps in `ctx.state`: `order` (examples shown, all pages), `cache` (example -> its units at
 * `cachedFor`, the granularity) and `runs` (token run of each example shown).
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { maxMagnitude, unitText } from "../../lib/aggregate.js";
import { GRANULARITIES, pageOf } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { formatProbability, formatScore } from "../../lib/format.js";
import { createLegend } from "../../lib/legend.js";
import { paintToken, renderTokenRun } from "../../lib/paint.js";
import { displayToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";
import { exampleUnits, pagedView, visibleOrder } from "./read.js";

/** Units of example `i` at the current granularity (cached). */
export function unitsOf({ data, state }, i) {
  if (!state.cache.has(i)) state.cache.set(i, exampleUnits(data, i, state.cachedFor));
  return state.cache.get(i);
}

export const textOf = (data, i, unit) => unitText(unit, data.tokens[i], data.spaces[i]);

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function draw(ctx, level) {
  const { model, data, parts, state, theme } = ctx;
  const { root, sortSelect, orderToggle, labelSelect, outcomeSelect, granularity, sharedToggle, pager } = parts;
  const { list, legendSlot, caption } = parts;
  const chosen = model.get("granularity") || "token";
  if (level >= REREAD || chosen !== state.cachedFor) [state.cache, state.cachedFor] = [new Map(), chosen];
  const options = {
    sortBy: model.get("sort_by"),
    descending: Boolean(model.get("descending")),
    filterLabel: model.get("filter_label") ?? "",
    filterOutcome: model.get("filter_outcome") ?? "all",
  };
  const first = model.get("first_example") ?? 0;
  const paged = pagedView({
    total: model.get("total_examples") ?? 0,
    first,
    held: data.tokens.length,
    page: model.get("page"),
    pageSize: model.get("page_size"),
  });
  const order = visibleOrder(data, options);
  state.order = order;
  // a paged list holds one page (the kernel sends it): all of it is shown, numbered from first_example
  const { page, pages, items } = paged
    ? { ...paged, items: order }
    : pageOf(order, model.get("page"), model.get("page_size"));
  const shared = Boolean(model.get("shared_scale"));
  const sharedMax = shared ? Math.max(0, ...order.map((i) => maxMagnitude(unitsOf(ctx, i).sums))) : 0;
  const labels = [...new Set(data.predicted)].sort();
  labelSelect.replaceChildren(h("option", { value: "" }, "any"), ...labels.map((l) => h("option", { value: l }, l)));
  sortSelect.value = options.sortBy;
  orderToggle.checked = options.descending;
  labelSelect.value = options.filterLabel;
  outcomeSelect.value = options.filterOutcome;
  const chat = data.roles.some((roles) => roles?.length);
  const choices = chat || chosen === "turn" ? [...GRANULARITIES, "turn"] : GRANULARITIES;
  if (granularity.options.length !== choices.length)
    granularity.replaceChildren(...choices.map((g) => h("option", { value: g }, g)));
  granularity.value = chosen;
  sharedToggle.checked = shared;
  for (const control of [sortSelect, orderToggle, labelSelect, outcomeSelect]) {
    control.disabled = Boolean(paged);
    control.title = paged ? "Sorting and filtering need every example; this list is read one page at a time" : "";
  }
  const total = model.get("total_examples") ?? 0;
  pager.update(
    page,
    pages,
    paged
      ? `examples ${first + 1}\u2013${first + data.tokens.length} of ${total}`
      : `${order.length} of ${data.tokens.length} examples`,
  );
  if (paged) pager.next.disabled = page >= pages - 1 || paged.pending;
  root.dataset.iwTheme = theme;
  const selected = model.get("selected_example");
  for (const run of state.runs) run.cancel();
  const runs = [];
  state.runs = runs;
  list.replaceChildren(
    ...items.map((i) => {
      const { units, sums, starts } = unitsOf(ctx, i);
      const max = shared ? sharedMax : maxMagnitude(sums);
      const truth = data.trueLabels[i];
      const verdict = truth === "" ? "" : data.predicted[i] === truth ? " \u2713" : " \u2717";
      const conf = Number.isFinite(data.confidence[i]) ? ` (${formatProbability(data.confidence[i])})` : "";
      const header = h("div", { class: "iw-example-header" }, [
        h("span", { class: "iw-example-index" }, `#${first + i}`),
        h("span", { class: "iw-example-predicted" }, `predicted ${data.predicted[i]}${conf}`),
        h("span", { class: "iw-example-true" }, `true ${truth || "unknown"}${verdict}`),
        h("span", {}, `max |attribution| ${formatScore(data.maxAttribution[i])}`),
      ]);
      const box = h("div", { class: "iw-tokens" });
      const build = (u, parent, atBlockStart) => {
        let gap = data.spaces[i][units[u][0]];
        if (starts.has(u)) {
          // a chat turn starts: its role's label on a line of its own (the template's markers are hidden)
          parent.append(h("span", { class: "iw-role", "aria-hidden": "true" }, starts.get(u)));
          gap = gap.replace(/^(\r?\n)+/, "");
        }
        if (gap) parent.append(atBlockStart && u > 0 ? gap.replace(/^\r?\n/, "") : gap);
        const span = h(
          "span",
          { class: "iw-token", "data-example": i, "data-unit": u },
          displayToken(textOf(data, i, units[u])),
        );
        paintToken(span, sums[u], max, { theme, signed: data.signed });
        parent.append(span);
        return span;
      };
      runs.push(renderTokenRun(box, { count: units.length, build, breakRank: (u) => (starts.has(u) ? 2 : 0) })); // long examples: block by block
      return h("li", { class: "iw-example", tabindex: 0, "data-example": i, "aria-selected": String(first + i === selected),
        "aria-label": `Example ${first + i}: predicted ${data.predicted[i]}${conf}, true ${truth || "unknown"}` }, [header, box]); // prettier-ignore
    }),
  );
  const per = chosen === "token" ? "" : ` (sum per ${chosen})`;
  legendSlot.replaceChildren(
    createLegend(
      shared ? sharedMax : 1,
      theme,
      shared
        ? `attribution to the predicted class${per}`
        : `attribution${per} (each example scaled to its own max = 1)`,
      { signed: data.signed },
    ),
  );
  const note = !paged
    ? ""
    : paged.pending
      ? `Page ${paged.asked + 1} is read by the kernel, which has not answered (it is busy, or this is a saved output with no kernel); page ${page + 1} is shown.`
      : `More pages exist (${pages} in all); each is read from disk by the kernel when shown.`;
  caption.textContent = [data.method ? `method: ${data.method}` : "", note].filter(Boolean).join(" \u00b7 "); // as under the static picture's legend
}
