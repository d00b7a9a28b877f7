/**
 * Concept browser (front end of interp_widgets.widgets.ConceptBrowser): a sortable, searchable, paged list
 * of concepts and a detail pane for the selected one (activation histogram, top contexts with the
 * activating token highlighted, top texts, promoted vocabulary, per-token activations of an input text).
 *
 * Synced traits: the ConceptBrowserModel typedef below; the fields marked "written" are also set by the view. The
 * view writes `requested` (the concept ids on the page) and the kernel answers with their `details`.
 *
 * @example
 *   import widget from "./concept_browser.js";
 *   widget.render({model, el});
 */

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * What the kernel sends for one requested concept (Python `ConceptBrowser.concept_detail`).
 * @typedef {object} ConceptDetail
 * @property {number} concept
 * @property {string} label
 * @property {string} label_source  Who made the label ("top tokens", an LM labeller's name ...).
 * @property {number | null} density
 * @property {number | null} mean
 * @property {number | null} max
 * @property {number | null} min
 * @property {BinaryArray} hist_edges  bins + 1 edges.
 * @property {BinaryArray} hist_counts
 * @property {{tokens: string[], center: number, activation: number | null, text_id: number, activations: number[]}[]} examples
 *   Top activating contexts, the activating token at `center`.
 * @property {{text_id: number, max_activation: number | null, text: string}[]} top_texts
 * @property {{token: string, logit: number | null}[] | null} vocabulary  Promoted tokens, null without an unembedding.
 * @property {BinaryArray | null} text_activations  Activation on each token of the selected input text.
 * @property {ConceptTextAttribution | null} [text_attribution]  In the "attribution" text mode: which tokens of the
 *   selected text make the concept fire (null until the kernel has computed it).
 */

/**
 * Attribution of a concept's activation to the shown tokens of the selected text (Python
 * `ConceptBrowser._text_attribution`).
 * @typedef {object} ConceptTextAttribution
 * @property {BinaryArray} values  float32, one score per shown token.
 * @property {string} method  Attribution method.
 * @property {boolean} signed
 * @property {string} score  What was attributed ("activation of concept 3 summed over the non-special tokens").
 * @property {number | null} activation  Its value on the text.
 * @property {number | null} completeness_error  Σ scores − (score(x) − score(baseline)), path methods only.
 */

/**
 * Synced traits of ConceptBrowser: its data (ConceptBrowserData, generated in lib/view_traits.js) and its view
 * state (ConceptBrowserState).
 * @typedef {import("./lib/view_traits.js").ConceptBrowserData & ConceptBrowserState} ConceptBrowserModel
 */
/**
 * View state of ConceptBrowser (and its bases PagedList, InterpWidget).
 * @typedef {object} ConceptBrowserState
 * @property {"index" | "label" | "density" | "max" | "importance" | "abs_importance"} sort_by  (written)
 * @property {boolean} descending  (written)
 * @property {string} search  Keep concepts whose label or top tokens contain this (written).
 * @property {boolean} hide_dead  Hide concepts that are never active (written).
 * @property {number} page  Page shown, 0-based (written).
 * @property {number} page_size  Concepts per page.
 * @property {number} selected_concept  Concept in the detail pane, -1: none (written).
 * @property {number[]} requested  Concept ids on the page (written; read to skip repeated requests).
 * @property {Object<string, ConceptDetail>} details  Detail of each requested concept, by str(concept).
 * @property {number} selected_text  Input text shown in the text view (written).
 * @property {number} selected_token  Token of that text whose active concepts are listed, -1: none (written).
 * @property {"activation" | "attribution"} text_mode  What colours the text view (written).
 * @property {string} attribution_method  Method of the input attributions, empty when none are available.
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./concept_browser.css";
import { decodeArray } from "./lib/codec.js";
import { createPager, labelRanks, pageOf, sortIndices } from "./lib/controls.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { formatScore } from "./lib/format.js";
import { svgNamespace } from "./lib/export.js";
import { createLegend } from "./lib/legend.js";
import { paintToken } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";
import { viewKit } from "./lib/view.js";
import { CONCEPT_BROWSER_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";

/** Traits whose change redraws. @type {(keyof ConceptBrowserModel)[]} */
const TRAITS = [
  ...DATA_TRAITS,
  "sort_by",
  "descending",
  "search",
  "hide_dead",
  "page",
  "page_size",
  "selected_concept",
  "details",
  "selected_text",
  "selected_token",
  "text_mode",
  "attribution_method",
];
const SORT_KEYS = {
  index: "concept id",
  label: "label",
  density: "density",
  max: "max activation",
  importance: "importance",
  abs_importance: "|importance|",
};
/** Milliseconds to wait for requested details before saying the kernel is busy or gone. */
export const BUSY_AFTER = 3000;
const svg = (tag, attrs = {}) => {
  const node = document.createElementNS(svgNamespace(document), tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
};

/**
 * Concept ids after search, dead filter and sort (ties keep id order, NaN values last); the same rule as
 * ConceptBrowser.visible_order() in Python. `haystack` (optional, from searchText) holds each concept's lower-cased
 * label and top tokens, so that a keystroke over 16k concepts does not lower-case them again.
 */
export function visibleConcepts(
  { labels, topTokens, density, maxActivation, importance, haystack },
  { sortBy, descending, search, hideDead },
) {
  const needle = (search ?? "").toLowerCase();
  const ranked = {
    index: null,
    label: () => {
      const ranks = labelRanks(labels);
      return (c) => ranks.get(labels[c]);
    },
    density: () => (c) => density[c],
    max: () => (c) => maxActivation[c],
    importance: () => (c) => (importance ? importance[c] : NaN),
    abs_importance: () => (c) => (importance ? Math.abs(importance[c]) : NaN),
  };
  if (!(sortBy in ranked))
    throw new RangeError(`unknown sort key "${sortBy}"; use ${Object.keys(SORT_KEYS).join(", ")}`);
  const text = haystack ?? searchText(labels, topTokens);
  const keep = [];
  for (let c = 0; c < labels.length; c += 1) {
    if (hideDead && !(density[c] > 0)) continue;
    if (needle && !text[c].includes(needle)) continue;
    keep.push(c);
  }
  if (sortBy === "index") return descending ? keep.reverse() : keep; // ids are already in order
  return sortIndices(keep, ranked[sortBy](), descending);
}

/** Each concept's lower-cased label and top tokens, separated so that a search never matches across them. */
export function searchText(labels, topTokens) {
  return labels.map((label, c) => [label, ...(topTokens[c] ?? [])].join("\u0000").toLowerCase());
}

/**
 * SVG bar chart of binned counts: one `rect.iw-hist-bar` per bin (height ∝ count), axis labels for the
 * first and last edge and the largest count; each bar has a <title> with its range and count.
 * @param {ArrayLike<number>} edges  bins + 1 bin edges
 * @param {ArrayLike<number>} counts
 */
export function histogramSvg(edges, counts, { width = 320, height = 110, label = "activation histogram" } = {}) {
  const n = counts.length;
  if (edges.length !== n + 1)
    throw new RangeError(`histogram needs ${n + 1} edges for ${n} counts, got ${edges.length}`);
  const top = Math.max(1, ...Array.from(counts));
  const total = Array.from(counts).reduce((a, b) => a + b, 0);
  const [left, bottom, plotH] = [36, 18, height - 26];
  const plotW = width - left - 6;
  const root = svg("svg", { class: "iw-histogram", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `${label}: ${total} active rows in ${n} bins from ${formatScore(edges[0])} to ${formatScore(edges[n])}, tallest bin ${top}` }); // prettier-ignore
  for (let i = 0; i < n; i += 1) {
    const barH = (counts[i] / top) * plotH;
    const bar = svg("rect", {
      class: "iw-hist-bar",
      x: (left + (i * plotW) / n).toFixed(1),
      y: (6 + plotH - barH).toFixed(1),
      width: Math.max(0.5, plotW / n - 1).toFixed(1),
      height: barH.toFixed(1),
      "data-count": counts[i],
    });
    const title = svg("title");
    title.textContent = `${formatScore(edges[i])} to ${formatScore(edges[i + 1])}: ${counts[i]} rows`;
    bar.append(title);
    root.append(bar);
  }
  const text = (x, y, content, anchor = "start") => {
    const node = svg("text", { class: "iw-hist-axis", x, y, "text-anchor": anchor });
    node.textContent = content;
    root.append(node);
  };
  root.append(svg("line", { class: "iw-hist-baseline", x1: left, x2: left + plotW, y1: 6 + plotH, y2: 6 + plotH }));
  text(left - 4, 14, String(top), "end");
  text(left - 4, 6 + plotH, "0", "end");
  text(left, height - 4, formatScore(edges[0]));
  text(left + plotW, height - 4, formatScore(edges[n]), "end");
  return root;
}

/** The first characters of an input text, rebuilt from its tokens and the gaps before them. */
export function textPreview(tokens, gaps, limit = 40) {
  const text = tokens.map((t, k) => (k ? (gaps[k] ?? "") : "") + t).join("");
  return text.length > limit ? `${text.slice(0, limit)}\u2026` : text;
}

/** @param {AnyModel<ConceptBrowserModel>} model */
function readConcepts(model) {
  const labels = model.get("labels") ?? [];
  if (labels.length === 0) throw new RangeError("there are no concepts to browse");
  const column = (name) => {
    const payload = model.get(name);
    if (!payload || !payload.data) return null;
    const { values } = decodeArray(payload);
    if (values.length !== labels.length)
      throw new RangeError(`${name} needs ${labels.length} values (one per concept), got ${values.length}`);
    return values;
  };
  const tokens = model.get("text_tokens") ?? [];
  const topTokens = model.get("top_tokens") ?? labels.map(() => []);
  const starts = [];
  tokens.reduce((start, t) => (starts.push(start), start + t.length), 0);
  const topPayload = model.get("text_top_concepts");
  const top = topPayload?.data ? decodeArray(topPayload) : null;
  return {
    labels,
    topTokens,
    haystack: searchText(labels, topTokens),
    density: column("density"),
    maxActivation: column("max_activation"),
    importance: column("importance"),
    texts: { tokens, gaps: model.get("text_gaps") ?? [], starts, top: top?.values, topWidth: top?.shape[1] ?? 0, topValues: top ? decodeArray(model.get("text_top_values")).values : null },
  }; // prettier-ignore
}

/** @param {{model: AnyModel<ConceptBrowserModel>, el: HTMLElement, reportError: (error: unknown) => void}} props */
function renderBrowser({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const root = h("div", { class: "iw-root iw-concepts" });
  const searchBox = h("input", {
    type: "search",
    class: "iw-concept-search",
    placeholder: "label or token",
    "aria-label": "Search concepts by label or top token",
  });
  const sortSelect = h("select", { class: "iw-sort-select" });
  const orderToggle = h("input", { type: "checkbox", class: "iw-descending-toggle" });
  const deadToggle = h("input", { type: "checkbox", class: "iw-dead-toggle" });
  const pager = createPager();
  const { prev, next } = pager;
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Search ", searchBox]),
    h("label", {}, ["Sort ", sortSelect]),
    h("label", {}, [orderToggle, " descending"]),
    h("label", {}, [deadToggle, " hide dead"]),
    pager.element,
  ]);
  const list = h("ol", { class: "iw-concept-list", role: "listbox", "aria-label": "Concepts" });
  const detail = h("section", { class: "iw-concept-detail", "aria-live": "polite" });
  const summary = h("div", { class: "iw-caption iw-concept-summary" });
  root.append(summary, toolbar, h("div", { class: "iw-concept-panes" }, [list, detail]));
  el.append(root);
  const tooltip = createTooltip(root);
  let theme = detectTheme(doc);
  let data = null;
  let dataChanged = false;
  let busyTimer = null;
  let focusAfterDraw = null;

  const { safely, save, coalesce } = viewKit(model, reportError);

  /** Ask the kernel for the details of `ids` unless it already has that request. */
  function request(ids) {
    const current = model.get("requested") ?? [];
    if (current.length === ids.length && current.every((c, i) => c === ids[i])) return;
    save({ requested: ids });
  }

  function conceptItem(c, selected) {
    const imp = data.importance ? data.importance[c] : NaN;
    const dead = data.density[c] === 0;
    const chip = h(
      "span",
      { class: "iw-concept-importance" },
      Number.isNaN(imp) ? "" : formatScore(imp, { sign: true }),
    );
    if (!Number.isNaN(imp)) paintToken(chip, imp, importanceMax(), { theme, signed: true });
    return h(
      "li",
      {
        class: "iw-concept",
        role: "option",
        tabindex: selected ? 0 : -1,
        "data-concept": c,
        "aria-selected": String(selected),
        "aria-label": `Concept ${c}: ${data.labels[c]}, density ${formatScore(data.density[c])}${dead ? ", dead" : ""}${Number.isNaN(imp) ? "" : `, importance ${formatScore(imp)}`}`,
      },
      [
        // prettier-ignore
        h("span", { class: "iw-concept-id" }, `#${c}`),
        h(
          "span",
          { class: "iw-concept-label" },
          (model.get("details") ?? {})[String(c)]?.label || data.labels[c] || (dead ? "(never fired)" : ""),
        ),
        chip,
        h(
          "span",
          { class: "iw-concept-density", title: "fraction of rows where the concept is active" },
          formatScore(data.density[c]),
        ),
        dead ? h("span", { class: "iw-concept-dead" }, "dead") : "",
        h("span", { class: "iw-concept-tokens" }, data.topTokens[c].map(displayToken).join(" \u00b7 ")),
      ],
    );
  }

  const deadCount = () => Array.from(data.density).filter((v) => v === 0).length;
  let impMax = null;
  const importanceMax = () => {
    if (impMax === null)
      impMax = data.importance ? Math.max(0, ...Array.from(data.importance).filter(Number.isFinite).map(Math.abs)) : 0;
    return impMax;
  };

  function contextLine(example, max) {
    const line = h("div", { class: "iw-tokens iw-context" });
    example.tokens.forEach((text, k) => {
      const span = h(
        "span",
        { class: k === example.center ? "iw-token iw-center" : "iw-token", "data-value": example.activations[k] },
        displayToken(text),
      );
      paintToken(span, Math.max(0, example.activations[k]), max, { theme, signed: false });
      line.append(span);
    });
    return h("li", { class: "iw-example-context" }, [
      h("span", { class: "iw-context-value" }, formatScore(example.activation ?? NaN)),
      line,
    ]);
  }

  function textView(c, info) {
    const { tokens, gaps, starts } = data.texts;
    if (tokens.length === 0) return null;
    const t = Math.min(model.get("selected_text") ?? 0, tokens.length - 1);
    const section = h("div", { class: "iw-text-view" }, [h("h4", {}, "Input text")]);
    if (tokens.length > 1) {
      const select = h(
        "select",
        { class: "iw-text-select", "aria-label": "Input text" },
        tokens.map((tk, i) => h("option", { value: i }, `text ${i}: ${textPreview(tk, gaps[i])}`)),
      );
      select.value = String(t);
      select.addEventListener(
        "change",
        safely(() => save({ selected_text: Number(select.value), selected_token: -1 })),
      );
      section.append(select);
    }
    const method = model.get("attribution_method") ?? "";
    const mode = method && model.get("text_mode") === "attribution" ? "attribution" : "activation";
    if (method) {
      const toggle = h("select", { class: "iw-text-mode", "aria-label": "Colour the input text by" }, [
        h("option", { value: "activation" }, `activation of concept ${c}`),
        h("option", { value: "attribution" }, `input attribution (${method}): which tokens make it fire`),
      ]);
      toggle.value = mode;
      toggle.addEventListener(
        "change",
        safely(() => save({ text_mode: toggle.value })),
      );
      section.append(h("label", { class: "iw-text-mode-label" }, ["Colour by ", toggle]));
    }
    const attribution = mode === "attribution" ? (info?.text_attribution ?? null) : null;
    const kind = mode === "attribution" ? "attribution" : "activation";
    const payload = mode === "attribution" ? attribution?.values : info?.text_activations;
    const values = payload?.data ? decodeArray(payload).values : null;
    const signed = mode === "attribution" && attribution ? Boolean(attribution.signed) : false;
    const max = values ? Math.max(0, ...Array.from(values, (v) => (signed ? Math.abs(v) : v))) : 0;
    const box = h("div", {
      class: "iw-tokens iw-text-tokens",
      role: "group",
      "data-mode": mode,
      "aria-label":
        mode === "attribution"
          ? `Attribution of concept ${c}'s activation to each token`
          : `Activation of concept ${c} on each token`,
    });
    const selectedToken = model.get("selected_token") ?? -1;
    tokens[t].forEach((text, k) => {
      if (gaps[t][k]) box.append(gaps[t][k]);
      const span = h(
        "span",
        {
          class: "iw-token iw-text-token",
          tabindex: 0,
          "data-token": k,
          "data-value": values ? values[k] : null,
          "data-kind": kind,
          "aria-pressed": String(k === selectedToken),
        },
        displayToken(text),
      );
      paintToken(span, values ? (signed ? values[k] : Math.max(0, values[k])) : NaN, max, { theme, signed });
      box.append(span);
    });
    section.append(box);
    if (mode === "attribution" && !attribution) {
      section.append(
        h(
          "p",
          { class: "iw-caption iw-attribution-pending", role: "status" },
          `The input attribution of concept ${c} on this text is computed by the kernel when the concept is selected; it has not arrived (a kernel is needed, and a busy one answers when its cell finishes).`,
        ),
      );
    }
    if (attribution) {
      const completeness =
        attribution.completeness_error === null || attribution.completeness_error === undefined
          ? ""
          : ` \u00b7 completeness error ${formatScore(attribution.completeness_error)}`;
      section.append(
        h(
          "div",
          { class: "iw-caption iw-attribution-caption" },
          `${attribution.method}: contribution of each token to the ${attribution.score || `activation of concept ${c}`}${attribution.activation === null ? "" : ` (${formatScore(attribution.activation)})`}${completeness}`,
        ),
      );
    }
    if (values)
      section.append(
        createLegend(
          max,
          theme,
          mode === "attribution" ? `input attribution to concept ${c}` : `activation of concept ${c}`,
          { signed },
        ),
      );
    if (selectedToken >= 0 && selectedToken < tokens[t].length && data.texts.top) {
      const row = starts[t] + selectedToken;
      const w = data.texts.topWidth;
      const active = [];
      for (let j = 0; j < w; j += 1)
        if (data.texts.top[row * w + j] >= 0)
          active.push([data.texts.top[row * w + j], data.texts.topValues[row * w + j]]);
      section.append(h("div", { class: "iw-token-concepts" }, [
        h("span", {}, `Concepts active at ${quoteToken(tokens[t][selectedToken])}: `),
        ...(active.length ? active.map(([cc, v]) => h("button", { type: "button", class: "iw-button iw-goto-concept", "data-concept": cc }, `#${cc} ${data.labels[cc]} (${formatScore(v)})`)) : ["none"]),
      ])); // prettier-ignore
    }
    return section;
  }

  function drawDetail(selected) {
    const details = model.get("details") ?? {};
    clearTimeout(busyTimer);
    if (selected < 0) {
      detail.replaceChildren(
        h(
          "p",
          { class: "iw-caption" },
          "Select a concept to see its histogram, top contexts, top texts and vocabulary.",
        ),
      );
      return;
    }
    const info = details[String(selected)];
    if (!info) {
      const waiting = h("p", { class: "iw-concept-loading", role: "status" }, `Loading concept ${selected}\u2026`);
      detail.replaceChildren(waiting);
      busyTimer = setTimeout(() => {
        waiting.textContent = `Concept ${selected} has not arrived after ${BUSY_AFTER / 1000} s: the kernel is busy (a cell is running) or not connected. Details appear when it is free.`;
        waiting.classList.add("iw-concept-busy");
      }, BUSY_AFTER);
      return;
    }
    if (info.density === 0) {
      detail.replaceChildren(
        h("h3", { class: "iw-detail-title" }, [
          `#${info.concept} `,
          h("span", { class: "iw-detail-label" }, "(never fired)"),
        ]),
        h(
          "p",
          { class: "iw-concept-dead", role: "note" },
          `Concept ${info.concept} never fired: it is zero on every one of the ${model.get("n_rows") ?? "scanned"} rows, so it has no top contexts and no label.`,
        ),
      );
      return;
    }
    const max = info.max ?? 0;
    const stats = `density ${formatScore(info.density ?? NaN)} \u00b7 mean ${formatScore(info.mean ?? NaN)} \u00b7 max ${formatScore(max)} \u00b7 min ${formatScore(info.min ?? NaN)}`;
    const parts = [
      h("h3", { class: "iw-detail-title" }, [`#${info.concept} `, h("span", { class: "iw-detail-label" }, info.label)]),
      info.label_source ? h("div", { class: "iw-caption iw-label-source" }, `label from ${info.label_source}`) : "",
      h("div", { class: "iw-caption" }, stats),
      h("h4", {}, "Activation histogram (active rows)"),
      histogramSvg(decodeArray(info.hist_edges).values, decodeArray(info.hist_counts).values, {
        label: `activation histogram of concept ${info.concept}`,
      }),
      h("h4", {}, "Top activating contexts"),
      h(
        "ol",
        { class: "iw-contexts" },
        info.examples.map((example) => contextLine(example, max)),
      ),
      createLegend(max, theme, "activation", { signed: false }),
    ];
    if (info.top_texts.length) {
      parts.push(
        h("h4", {}, "Top texts"),
        h(
          "ol",
          { class: "iw-top-texts" },
          info.top_texts.map((t) =>
            h("li", {}, [
              h("span", { class: "iw-context-value" }, formatScore(t.max_activation ?? NaN)),
              h("span", { class: "iw-top-text" }, t.text),
            ]),
          ),
        ),
      );
    }
    if (info.vocabulary) {
      parts.push(h("h4", {}, "Promoted tokens (vocabulary projection)"), h("table", { class: "iw-table iw-vocabulary" }, [
        h("thead", {}, h("tr", {}, [h("th", {}, "token"), h("th", {}, "logit")])),
        h("tbody", {}, info.vocabulary.map((v) => h("tr", {}, [h("td", {}, displayToken(v.token)), h("td", {}, formatScore(v.logit ?? NaN, { sign: true }))]))),
      ])); // prettier-ignore
    }
    const text = textView(info.concept, info);
    if (text) parts.push(text);
    detail.replaceChildren(...parts);
  }

  function draw() {
    if (data === null || dataChanged) {
      data = readConcepts(model); // decoded once per data change, not per keystroke or page
      dataChanged = false;
      impMax = null;
    }
    const options = {
      sortBy: model.get("sort_by") ?? "index",
      descending: Boolean(model.get("descending")),
      search: model.get("search") ?? "",
      hideDead: Boolean(model.get("hide_dead")),
    };
    const order = visibleConcepts(data, options);
    const { page, pages, items: shown } = pageOf(order, model.get("page"), model.get("page_size"));
    const selected = model.get("selected_concept") ?? -1;
    root.dataset.iwTheme = theme;
    summary.textContent = `${data.labels.length} ${model.get("method") ?? ""} concepts${model.get("layer") ? ` at ${model.get("layer")}` : ""}${model.get("n_rows") ? ` over ${model.get("n_rows")} rows` : ""}${data.importance ? ` \u00b7 importance: ${model.get("importance_label") || "importance"}` : ""}${deadCount() ? ` \u00b7 ${deadCount()} never fired${options.hideDead ? " (hidden)" : ""}` : ""}`;
    sortSelect.replaceChildren(
      ...Object.entries(SORT_KEYS)
        .filter(([k]) => data.importance || !k.includes("importance"))
        .map(([v, t]) => h("option", { value: v }, t)),
    );
    sortSelect.value = options.sortBy;
    if (searchBox.value !== options.search) searchBox.value = options.search;
    orderToggle.checked = options.descending;
    deadToggle.checked = options.hideDead;
    pager.update(page, pages, `${order.length} of ${data.labels.length} concepts`);
    const items = shown.map((c) => conceptItem(c, c === selected));
    if (items.length && !items.some((li) => li.tabIndex === 0)) items[0].tabIndex = 0;
    list.replaceChildren(...(items.length ? items : [h("li", { class: "iw-caption" }, "No concept matches.")]));
    if (focusAfterDraw !== null) list.querySelector(`[data-concept="${focusAfterDraw}"]`)?.focus();
    focusAfterDraw = null;
    drawDetail(selected);
    request(shown);
  }

  const resetPage = (changes) => save({ ...changes, page: 0 });
  searchBox.addEventListener(
    "input",
    safely(() => resetPage({ search: searchBox.value })),
  );
  sortSelect.addEventListener(
    "change",
    safely(() => resetPage({ sort_by: sortSelect.value })),
  );
  orderToggle.addEventListener(
    "change",
    safely(() => resetPage({ descending: orderToggle.checked })),
  );
  deadToggle.addEventListener(
    "change",
    safely(() => resetPage({ hide_dead: deadToggle.checked })),
  );
  prev.addEventListener(
    "click",
    safely(() => save({ page: Math.max(0, model.get("page") - 1) })),
  );
  next.addEventListener(
    "click",
    safely(() => save({ page: model.get("page") + 1 })),
  );
  const closest = (event, selector) => (event.target instanceof Element ? event.target.closest(selector) : null);
  const select = (c) => save({ selected_concept: c, selected_token: -1 });
  list.addEventListener("click", safely((event) => {
    const item = closest(event, ".iw-concept");
    if (item) select(Number(item.dataset.concept));
  })); // prettier-ignore
  list.addEventListener("keydown", safely((event) => {
    const item = closest(event, ".iw-concept");
    if (!item) return;
    const move = { ArrowDown: item.nextElementSibling, ArrowUp: item.previousElementSibling, Home: list.firstElementChild, End: list.lastElementChild }[event.key];
    if (event.key === "Enter" || event.key === " ") select(Number(item.dataset.concept));
    else if (move !== undefined) {
      if (move?.dataset.concept !== undefined) {
        focusAfterDraw = Number(move.dataset.concept);
        select(focusAfterDraw);
      }
    } else if (event.key === "PageDown" && !next.disabled) next.click();
    else if (event.key === "PageUp" && !prev.disabled) prev.click();
    else return;
    event.preventDefault();
  })); // prettier-ignore
  detail.addEventListener("click", safely((event) => {
    const token = closest(event, ".iw-text-token");
    if (token) save({ selected_token: Number(token.dataset.token) });
    const goto = closest(event, ".iw-goto-concept");
    if (goto) select(Number(goto.dataset.concept));
  })); // prettier-ignore
  detail.addEventListener("keydown", safely((event) => {
    const token = closest(event, ".iw-text-token");
    if (!token || (event.key !== "Enter" && event.key !== " ")) return;
    save({ selected_token: Number(token.dataset.token) });
    event.preventDefault();
  })); // prettier-ignore
  const describe = safely((event) => {
    const span = closest(event, ".iw-token");
    if (!span || span === tooltip.target) return;
    const value = span.dataset.value !== undefined ? Number(span.dataset.value) : null;
    tooltip.show(span, [
      ["token", quoteToken(span.textContent)],
      ...(value === null ? [] : [[span.dataset.kind ?? "activation", formatScore(value, { digits: 6 })]]),
    ]);
  });
  detail.addEventListener("mouseover", describe);
  detail.addEventListener("focusin", describe);
  detail.addEventListener("mouseleave", () => tooltip.hide());

  const redraw = coalesce(() => draw());
  const dataRedraw = () => {
    dataChanged = true;
    redraw();
  };
  for (const name of TRAITS) model.on(`change:${name}`, DATA_TRAITS.includes(name) ? dataRedraw : redraw);
  const stopWatchingTheme = watchTheme(doc, (nextTheme) => {
    theme = nextTheme;
    redraw();
  });
  draw();
  return () => {
    clearTimeout(busyTimer);
    for (const name of TRAITS) model.off(`change:${name}`, DATA_TRAITS.includes(name) ? dataRedraw : redraw);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("ConceptBrowser", renderBrowser) };
