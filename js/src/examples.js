/**
 * Paged list of explained examples (front end of interp_widgets.widgets.ExampleListWidget): predicted
 * label with confidence, true label, coloured tokens; sort, filter and page in the browser.
 *
 * Traits read: tokens (list per example), spaces_before, special_mask and scores (concatenated, binary),
 * predicted, confidence, true_labels, max_attribution, signed, method, page, page_size, sort_by,
 * descending, filter_label, filter_outcome, shared_scale, error. Written back: page, sort_by, descending,
 * filter_label, filter_outcome, shared_scale, selected_example.
 *
 * @example
 *   import widget from "./examples.js";
 *   widget.render({model, el});
 */
import "./examples.css";
import { decodeArray } from "./lib/codec.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { createExportMenu } from "./lib/export.js";
import { formatProbability, formatScore } from "./lib/format.js";
import { createLegend } from "./lib/legend.js";
import { paintToken } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";

const TRAITS = ["tokens", "spaces_before", "special_mask", "scores", "predicted", "confidence", "true_labels", "max_attribution", "signed", "page", "page_size", "sort_by", "descending", "filter_label", "filter_outcome", "shared_scale", "selected_example"];
const SORT_KEYS = { index: "input order", confidence: "confidence", max_attribution: "max |attribution|", label: "predicted label" };

/**
 * Example indices after filtering and sorting (ties keep input order); the same rule as
 * ExampleListWidget.visible_order() in Python.
 */
export function visibleOrder({ predicted, trueLabels, confidence, maxAttribution }, { sortBy, descending, filterLabel, filterOutcome }) {
  const keep = predicted
    .map((_, i) => i)
    .filter((i) => !filterLabel || predicted[i] === filterLabel)
    .filter((i) => filterOutcome === "all" || (trueLabels[i] !== "" && (predicted[i] === trueLabels[i]) === (filterOutcome === "correct")));
  const labelRank = new Map([...new Set(predicted)].sort().map((label, r) => [label, r]));
  const key = {
    index: (i) => i,
    label: (i) => labelRank.get(predicted[i]),
    confidence: (i) => (confidence[i] === null || confidence[i] === undefined ? -Infinity : confidence[i]),
    max_attribution: (i) => maxAttribution[i],
  }[sortBy];
  if (!key) throw new RangeError(`unknown sort key "${sortBy}"; use ${Object.keys(SORT_KEYS).join(", ")}`);
  const sign = descending ? -1 : 1;
  return keep.sort((a, b) => sign * key(a) - sign * key(b) || a - b);
}

function readExamples(model) {
  const tokens = model.get("tokens") ?? [];
  if (tokens.length === 0) throw new RangeError("there are no examples to list");
  const total = tokens.reduce((sum, t) => sum + t.length, 0);
  const scores = decodeArray(model.get("scores")).values;
  const special = decodeArray(model.get("special_mask")).values;
  if (scores.length !== total || special.length !== total) throw new RangeError(`scores and special_mask need ${total} entries (all tokens of all examples)`);
  const starts = [];
  tokens.reduce((start, t) => (starts.push(start), start + t.length), 0);
  return {
    tokens, starts, scores, special,
    spaces: model.get("spaces_before") ?? [],
    predicted: model.get("predicted") ?? [],
    trueLabels: model.get("true_labels") ?? [],
    confidence: model.get("confidence") ?? [],
    maxAttribution: model.get("max_attribution") ?? [],
    signed: model.get("signed") !== false,
  }; // prettier-ignore
}

function renderExamples({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const root = h("div", { class: "iw-root iw-examples" });
  const sortSelect = h("select", { class: "iw-sort-select" }, Object.entries(SORT_KEYS).map(([v, t]) => h("option", { value: v }, t)));
  const orderToggle = h("input", { type: "checkbox", class: "iw-descending-toggle" });
  const labelSelect = h("select", { class: "iw-label-filter" });
  const outcomeSelect = h("select", { class: "iw-outcome-filter" }, ["all", "correct", "wrong"].map((v) => h("option", { value: v }, v)));
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const prev = h("button", { type: "button", class: "iw-button iw-prev", "aria-label": "Previous page" }, "\u2039");
  const next = h("button", { type: "button", class: "iw-button iw-next", "aria-label": "Next page" }, "\u203a");
  const pageLabel = h("span", { class: "iw-page-label", "aria-live": "polite" });
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Sort ", sortSelect]),
    h("label", {}, [orderToggle, " descending"]),
    h("label", {}, ["Predicted ", labelSelect]),
    h("label", {}, ["Outcome ", outcomeSelect]),
    h("label", { title: "One colour scale for all examples" }, [sharedToggle, " shared scale"]),
    h("span", { class: "iw-pager" }, [prev, pageLabel, next]),
  ]);
  const list = h("ol", { class: "iw-example-list", "aria-label": "Explained examples" });
  const legendSlot = h("div", { class: "iw-legend-slot" });
  root.append(toolbar, list, legendSlot);
  el.append(root);
  const tooltip = createTooltip(root);
  let theme = detectTheme(doc);
  let data = null;
  let order = [];

  const safely = (fn) => (...args) => {
    try {
      fn(...args);
    } catch (error) {
      reportError(error);
    }
  }; // prettier-ignore
  const save = (name, value) => {
    model.set(name, value);
    model.save_changes();
  };

  function draw() {
    data = readExamples(model);
    const options = { sortBy: model.get("sort_by"), descending: Boolean(model.get("descending")), filterLabel: model.get("filter_label") ?? "", filterOutcome: model.get("filter_outcome") ?? "all" };
    order = visibleOrder(data, options);
    const pageSize = Math.max(1, model.get("page_size") ?? 10);
    const pages = Math.max(1, Math.ceil(order.length / pageSize));
    const page = Math.min(model.get("page") ?? 0, pages - 1);
    const shared = Boolean(model.get("shared_scale"));
    const sharedMax = Math.max(0, ...order.map((i) => data.maxAttribution[i]));
    const labels = [...new Set(data.predicted)].sort();
    labelSelect.replaceChildren(h("option", { value: "" }, "any"), ...labels.map((l) => h("option", { value: l }, l)));
    sortSelect.value = options.sortBy;
    orderToggle.checked = options.descending;
    labelSelect.value = options.filterLabel;
    outcomeSelect.value = options.filterOutcome;
    sharedToggle.checked = shared;
    prev.disabled = page <= 0;
    next.disabled = page >= pages - 1;
    pageLabel.textContent = ` page ${page + 1} of ${pages} (${order.length} of ${data.tokens.length} examples) `;
    root.dataset.iwTheme = theme;
    const selected = model.get("selected_example");
    list.replaceChildren(
      ...order.slice(page * pageSize, (page + 1) * pageSize).map((i) => {
        const start = data.starts[i];
        const values = data.scores.subarray(start, start + data.tokens[i].length);
        const max = shared ? sharedMax : data.maxAttribution[i];
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
        data.tokens[i].forEach((text, k) => {
          if (data.special[start + k]) return;
          if (data.spaces[i][k]) box.append(data.spaces[i][k]);
          const span = h("span", { class: "iw-token", "data-example": i, "data-index": k }, displayToken(text));
          paintToken(span, values[k], max, { theme, signed: data.signed });
          box.append(span);
        });
        return h("li", { class: "iw-example", tabindex: 0, "data-example": i, "aria-selected": String(i === selected),
          "aria-label": `Example ${i}: predicted ${data.predicted[i]}${conf}, true ${truth || "unknown"}` }, [header, box]); // prettier-ignore
      }),
    );
    legendSlot.replaceChildren(
      createLegend(shared ? sharedMax : 1, theme, shared ? "attribution to the predicted class" : "attribution (each example scaled to its own max = 1)", { signed: data.signed }),
    );
  }

  const setAndReset = (name, value) => {
    model.set(name, value);
    model.set("page", 0);
    model.save_changes();
  };
  sortSelect.addEventListener("change", safely(() => setAndReset("sort_by", sortSelect.value)));
  orderToggle.addEventListener("change", safely(() => setAndReset("descending", orderToggle.checked)));
  labelSelect.addEventListener("change", safely(() => setAndReset("filter_label", labelSelect.value)));
  outcomeSelect.addEventListener("change", safely(() => setAndReset("filter_outcome", outcomeSelect.value)));
  sharedToggle.addEventListener("change", safely(() => save("shared_scale", sharedToggle.checked)));
  prev.addEventListener("click", safely(() => save("page", Math.max(0, model.get("page") - 1))));
  next.addEventListener("click", safely(() => save("page", model.get("page") + 1)));
  const itemOf = (event) => (event.target instanceof Element ? event.target.closest(".iw-example") : null);
  list.addEventListener("click", safely((event) => {
    const item = itemOf(event);
    if (item) save("selected_example", Number(item.dataset.example));
  })); // prettier-ignore
  list.addEventListener("keydown", safely((event) => {
    const item = itemOf(event);
    if (!item) return;
    if (event.key === "Enter" || event.key === " ") save("selected_example", Number(item.dataset.example));
    else if (event.key === "ArrowDown") item.nextElementSibling?.focus();
    else if (event.key === "ArrowUp") item.previousElementSibling?.focus();
    else return;
    event.preventDefault();
  })); // prettier-ignore
  list.addEventListener("mouseover", safely((event) => {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    if (!span || span === tooltip.target) return;
    const i = Number(span.dataset.example);
    const k = Number(span.dataset.index);
    const value = data.scores[data.starts[i] + k];
    tooltip.show(span, [["token", quoteToken(data.tokens[i][k])], ["score", Number.isNaN(value) ? "not seen" : formatScore(value, { digits: 6, sign: data.signed })], ["example", `#${i}`]]);
  })); // prettier-ignore
  list.addEventListener("mouseleave", () => tooltip.hide());
  const csvRows = () => [
    ["example", "predicted", "confidence", "true_label", "max_attribution", "position", "token", "score"],
    ...order.flatMap((i) => data.tokens[i].map((t, k) => [i, data.predicted[i], data.confidence[i] ?? "", data.trueLabels[i], data.maxAttribution[i], k, t, data.scores[data.starts[i] + k]])),
  ];
  toolbar.append(createExportMenu({ name: "examples", root, rows: csvRows, title: () => "Explained examples", reportError }));

  let pending = false;
  const request = () => {
    if (!pending) queueMicrotask(safely(() => {
      pending = false;
      draw();
    })); // prettier-ignore
    pending = true;
  };
  for (const name of TRAITS) model.on(`change:${name}`, request);
  const stopWatchingTheme = watchTheme(doc, (nextTheme) => {
    theme = nextTheme;
    request();
  });
  draw();
  return () => {
    for (const name of TRAITS) model.off(`change:${name}`, request);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("ExampleListWidget", renderExamples) };
