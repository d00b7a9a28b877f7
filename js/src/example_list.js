/**
 * Paged list of explained examples (front end of interp_widgets.widgets.ExampleListWidget): predicted
 * label with confidence, true label, coloured tokens; sort, filter, page and switch granularity (token,
 * word or sentence sums, computed here from the ids sent once) in the browser.
 *
 * Synced traits: the ExampleListModel typedef below; the fields marked "written" are also set by the view.
 *
 * @example
 *   import widget from "./example_list.js";
 *   widget.render({model, el});
 */

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of ExampleListWidget: its data (ExampleListData, generated in lib/view_traits.js) and its view
 * state (ExampleListState).
 * @typedef {import("./lib/view_traits.js").ExampleListData & ExampleListState} ExampleListModel
 */
/**
 * View state of ExampleListWidget (and its bases PagedList, InterpWidget). Per-token arrays hold the tokens of
 * all examples concatenated, in example order.
 * @typedef {object} ExampleListState
 * @property {"index" | "confidence" | "max_attribution" | "label"} sort_by  (written)
 * @property {boolean} descending  (written)
 * @property {string} filter_label  Show only examples predicted as this label, "" = all (written).
 * @property {"all" | "correct" | "wrong"} filter_outcome  (written)
 * @property {"token" | "word" | "sentence" | "turn"} granularity  (written)
 * @property {boolean} shared_scale  One colour scale for all examples (written).
 * @property {number} page  Page shown, 0-based (written).
 * @property {number} page_size  Examples per page.
 * @property {number} selected_example  Example clicked, -1: none (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./example_list.css";
import { buildUnits, maxMagnitude, roleStarts, unitScores, unitText } from "./lib/aggregate.js";
import { decodeArray, hasArray } from "./lib/codec.js";
import { GRANULARITIES, createPager, granularitySelect, labelRanks, pageOf, sortIndices } from "./lib/controls.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { createExportMenu } from "./lib/export.js";
import { formatProbability, formatScore } from "./lib/format.js";
import { createLegend } from "./lib/legend.js";
import { paintToken, renderTokenRun } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";
import { viewKit } from "./lib/view.js";
import { EXAMPLE_LIST_DATA_TRAITS } from "./lib/view_traits.js";

/** Traits whose change redraws. @type {(keyof ExampleListModel)[]} */
const TRAITS = [
  ...EXAMPLE_LIST_DATA_TRAITS,
  "page",
  "page_size",
  "sort_by",
  "descending",
  "filter_label",
  "filter_outcome",
  "granularity",
  "shared_scale",
  "selected_example",
];
const SORT_KEYS = {
  index: "input order",
  confidence: "confidence",
  max_attribution: "max |attribution|",
  label: "predicted label",
};

/**
 * Example indices after filtering and sorting (ties keep input order); the same rule as
 * ExampleListWidget.visible_order() in Python.
 */
export function visibleOrder(
  { predicted, trueLabels, confidence, maxAttribution },
  { sortBy, descending, filterLabel, filterOutcome },
) {
  const keep = predicted
    .map((_, i) => i)
    .filter((i) => !filterLabel || predicted[i] === filterLabel)
    .filter(
      (i) =>
        filterOutcome === "all" ||
        (trueLabels[i] !== "" && (predicted[i] === trueLabels[i]) === (filterOutcome === "correct")),
    );
  const ranks = labelRanks(predicted);
  const key = {
    index: (i) => i,
    label: (i) => ranks.get(predicted[i]),
    confidence: (i) => (confidence[i] === null || confidence[i] === undefined ? -Infinity : confidence[i]),
    max_attribution: (i) => maxAttribution[i],
  }[sortBy];
  if (!key) throw new RangeError(`unknown sort key "${sortBy}"; use ${Object.keys(SORT_KEYS).join(", ")}`);
  return sortIndices(keep, key, descending);
}

/** @param {AnyModel<ExampleListModel>} model */
function readExamples(model) {
  const tokens = model.get("tokens") ?? [];
  if (tokens.length === 0) throw new RangeError("there are no examples to list");
  const total = tokens.reduce((sum, t) => sum + t.length, 0);
  const concatenated = (name) => {
    const { values } = decodeArray(model.get(name));
    if (values.length !== total)
      throw new RangeError(`${name} needs ${total} entries (all tokens of all examples), got ${values.length}`);
    return values;
  };
  const starts = [];
  tokens.reduce((start, t) => (starts.push(start), start + t.length), 0);
  return {
    tokens, starts,
    scores: concatenated("scores"),
    special: concatenated("special_mask"),
    wordIds: concatenated("word_ids"),
    sentenceIds: concatenated("sentence_ids"),
    // payloads from before turns existed have none: every example is then one turn without a role
    turnIds: hasArray(model.get("turn_ids")) ? concatenated("turn_ids") : null,
    roles: model.get("turn_roles") ?? [],
    spaces: model.get("spaces_before") ?? [],
    predicted: model.get("predicted") ?? [],
    trueLabels: model.get("true_labels") ?? [],
    confidence: model.get("confidence") ?? [],
    maxAttribution: model.get("max_attribution") ?? [],
    signed: model.get("signed") !== false,
    method: model.get("method") ?? "",
  }; // prettier-ignore
}

/**
 * Units (token indices within the example), their score sums and the role label of each unit that starts a chat
 * turn (`Map(unit → role)`, empty for a plain text) for example `i` at `granularity`.
 * @returns {{units: number[][], sums: Float64Array, starts: Map<number, string>}}
 */
export function exampleUnits(data, i, granularity) {
  const [start, end] = [data.starts[i], data.starts[i] + data.tokens[i].length];
  const slice = (values) => values.subarray(start, end);
  const turnIds = data.turnIds ? slice(data.turnIds) : null;
  const specialMask = slice(data.special);
  const units = buildUnits({
    granularity,
    wordIds: slice(data.wordIds),
    sentenceIds: slice(data.sentenceIds),
    turnIds,
    specialMask,
    showSpecial: false,
  });
  const starts = roleStarts(units, turnIds, specialMask, data.roles?.[i] ?? []);
  return { units, sums: unitScores(units, slice(data.scores), 0, end - start), starts };
}

/** @param {{model: AnyModel<ExampleListModel>, el: HTMLElement, reportError: (error: unknown) => void}} props */
function renderExamples({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const { safely, save, coalesce } = viewKit(model, reportError);
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
  let theme = detectTheme(doc);
  let data = null;
  let order = [];
  let cache = new Map(); // example index -> exampleUnits() at the current granularity
  let cachedFor = null;
  let runs = []; // token run of each example shown (see renderTokenRun)

  const unitsOf = (i) => {
    if (!cache.has(i)) cache.set(i, exampleUnits(data, i, cachedFor));
    return cache.get(i);
  };
  const textOf = (i, unit) => unitText(unit, data.tokens[i], data.spaces[i]);

  function draw(level) {
    if (level === 2 || data === null) data = readExamples(model);
    const chosen = model.get("granularity") || "token";
    if (level === 2 || chosen !== cachedFor) [cache, cachedFor] = [new Map(), chosen];
    const options = {
      sortBy: model.get("sort_by"),
      descending: Boolean(model.get("descending")),
      filterLabel: model.get("filter_label") ?? "",
      filterOutcome: model.get("filter_outcome") ?? "all",
    };
    order = visibleOrder(data, options);
    const { page, pages, items } = pageOf(order, model.get("page"), model.get("page_size"));
    const shared = Boolean(model.get("shared_scale"));
    const sharedMax = shared ? Math.max(0, ...order.map((i) => maxMagnitude(unitsOf(i).sums))) : 0;
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
    pager.update(page, pages, `${order.length} of ${data.tokens.length} examples`);
    root.dataset.iwTheme = theme;
    const selected = model.get("selected_example");
    for (const run of runs) run.cancel();
    runs = [];
    list.replaceChildren(
      ...items.map((i) => {
        const { units, sums, starts } = unitsOf(i);
        const max = shared ? sharedMax : maxMagnitude(sums);
        const truth = data.trueLabels[i];
        const verdict = truth === "" ? "" : data.predicted[i] === truth ? " \u2713" : " \u2717";
        const conf = Number.isFinite(data.confidence[i]) ? ` (${formatProbability(data.confidence[i])})` : "";
        const header = h("div", { class: "iw-example-header" }, [
          h("span", { class: "iw-example-index" }, `#${i}`),
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
            displayToken(textOf(i, units[u])),
          );
          paintToken(span, sums[u], max, { theme, signed: data.signed });
          parent.append(span);
          return span;
        };
        runs.push(renderTokenRun(box, { count: units.length, build, breakRank: (u) => (starts.has(u) ? 2 : 0) })); // long examples: block by block
        return h("li", { class: "iw-example", tabindex: 0, "data-example": i, "aria-selected": String(i === selected),
          "aria-label": `Example ${i}: predicted ${data.predicted[i]}${conf}, true ${truth || "unknown"}` }, [header, box]); // prettier-ignore
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
    caption.textContent = data.method ? `method: ${data.method}` : ""; // as under the static picture's legend
  }

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
    if (item) save({ selected_example: Number(item.dataset.example) });
  })); // prettier-ignore
  list.addEventListener("keydown", safely((event) => {
    const item = itemOf(event);
    if (!item) return;
    if (event.key === "Enter" || event.key === " ") save({ selected_example: Number(item.dataset.example) });
    else if (event.key === "ArrowDown") item.nextElementSibling?.focus();
    else if (event.key === "ArrowUp") item.previousElementSibling?.focus();
    else return;
    event.preventDefault();
  })); // prettier-ignore
  list.addEventListener("mouseover", safely((event) => {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    if (!span || span === tooltip.target) return;
    const i = Number(span.dataset.example);
    const u = Number(span.dataset.unit);
    const { units, sums, starts } = unitsOf(i);
    const role = [...starts.entries()].filter(([start]) => start <= u).at(-1)?.[1];
    const rows = [[cachedFor, quoteToken(textOf(i, units[u]))], ...(role ? [["turn", role]] : []), ["score", Number.isNaN(sums[u]) ? "not seen" : formatScore(sums[u], { digits: 6, sign: data.signed })], ["example", `#${i}`]];
    if (units[u].length > 1) rows.push(["sum of", `${units[u].length} tokens`]);
    tooltip.show(span, rows);
  })); // prettier-ignore
  list.addEventListener("mouseleave", () => tooltip.hide());
  const csvRows = () => [
    [
      "example",
      "predicted",
      "confidence",
      "true_label",
      "max_attribution",
      "position",
      cachedFor,
      "start_token",
      "score",
    ],
    ...order.flatMap((i) => {
      const { units, sums } = unitsOf(i);
      return units.map((unit, u) => [
        i,
        data.predicted[i],
        data.confidence[i] ?? "",
        data.trueLabels[i],
        data.maxAttribution[i],
        u,
        textOf(i, unit),
        unit[0],
        sums[u],
      ]);
    }),
  ];
  toolbar.append(
    createExportMenu({
      name: "examples",
      root,
      rows: csvRows,
      prepare: () => runs.forEach((run) => run.finish()),
      title: () => "Explained examples",
      reportError,
    }),
  );

  const request = coalesce(draw);
  /** Traits whose change re-reads the data (the others only redraw). @type {Set<keyof ExampleListModel>} */
  const DATA_TRAITS = new Set(EXAMPLE_LIST_DATA_TRAITS);
  const listeners = TRAITS.map((name) => [`change:${name}`, () => request(DATA_TRAITS.has(name) ? 2 : 1)]);
  for (const [event, handler] of listeners) model.on(event, handler);
  const stopWatchingTheme = watchTheme(doc, (nextTheme) => {
    theme = nextTheme;
    request();
  });
  draw(2);
  return () => {
    for (const run of runs) run.cancel();
    for (const [event, handler] of listeners) model.off(event, handler);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("ExampleListWidget", renderExamples) };
