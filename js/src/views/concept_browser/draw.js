/**
 * Concept browser, draw: the summary line, the page of concepts (importance chips coloured, label scores as text
 * beside the label), and the selected
 * concept's details (histogram, top contexts, top texts, vocabulary, and the input text coloured by activation or
 * attribution). Keeps in `ctx.state`: `busyTimer` (the "kernel busy" note's timer), `focusAfterDraw` (concept to
 * focus once the list is redrawn) and `impMax` (largest |importance|, per data change).
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { decodeArray } from "../../lib/codec.js";
import { pageOf } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { svgNamespace } from "../../lib/export.js";
import { formatScore } from "../../lib/format.js";
import { createLegend } from "../../lib/legend.js";
import { paintToken } from "../../lib/paint.js";
import { displayToken, quoteToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";
import { LABEL_SCORE_KEYS, SORT_KEYS, textPreview, visibleConcepts } from "./read.js";

/** Milliseconds to wait for requested details before saying the kernel is busy or gone. */
export const BUSY_AFTER = 3000;
const svg = (tag, attrs = {}) => {
  const node = document.createElementNS(svgNamespace(document), tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
};

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

/** Ask the kernel for the details of `ids` unless it already has that request. */
function requestDetails(ctx, ids) {
  const current = ctx.model.get("requested") ?? [];
  if (current.length === ids.length && current.every((c, i) => c === ids[i])) return;
  ctx.save({ requested: ids });
}

const CHANCE_MARK = " (not above chance)";

/**
 * "detection 0.875 · fuzzing 0.75" for a scored label (balanced accuracies), "" otherwise; a score marked in `marks`
 * ({detection, fuzzing}: no better than chance) is followed by " (not above chance)".
 */
export function labelScoreText(detection, fuzzing, marks = {}) {
  if (!Number.isFinite(detection) && !Number.isFinite(fuzzing)) return "";
  return `detection ${formatScore(detection)}${marks.detection ? CHANCE_MARK : ""} \u00b7 fuzzing ${formatScore(fuzzing)}${marks.fuzzing ? CHANCE_MARK : ""}`;
}

/** Which of concept `c`'s scores are marked no better than chance: none unless the swapped-label control passed. */
export function chanceMarks(data, c) {
  const shown = data.control?.discriminates;
  return { detection: Boolean(shown && data.detectionChance?.[c] === 1), fuzzing: Boolean(shown && data.fuzzingChance?.[c] === 1) };
} // prettier-ignore

const percent = (fraction) => Math.round(100 * fraction);

/** The swapped-label control's outcome, in the words of the static picture (`ConceptBrowser.label_control_text`). */
export function controlText(control) {
  if (!control || control.n === 0) return "no swapped-label control was run, so no score is marked as chance";
  const told = `control: the true label outscores a swapped one in ${control.wins} of ${control.n} concepts (${percent(control.wins / control.n)} %, ${control.ties} tied; \u2265 ${percent(control.threshold)} % needed)`;
  return control.discriminates
    ? `${told}: the scorer discriminates; scores no better than chance are marked`
    : `${told}: the scorer cannot discriminate, so no score is marked as chance`;
}

/** A number of the detail pane, "n/a" when it is missing (null: not computed). */
const orNa = (value) => (value === null || value === undefined || !Number.isFinite(value) ? "n/a" : formatScore(value));

/** A score's chance p-value as the detail pane writes it: "p = 0.031", "p n/a" when it was not tested. */
export function pValueText(p) {
  return p === null || p === undefined || !Number.isFinite(p) ? "p n/a" : `p = ${formatScore(p)}`;
}

/**
 * One concept's swapped-label control (`label_scores.control`), in the words of the static picture (Python
 * `label_control_sentence`): the concept whose label its examples were judged under, its scores there and whether
 * the true label outscored it.
 */
export function controlSentence(control) {
  const scores = ["detection", "fuzzing"]
    .map((kind) => `${kind} ${orNa(control[kind]?.balanced_accuracy)} (${pValueText(control[kind]?.p_value)})`)
    .join(" \u00b7 ");
  const verdict = control.outscores ? "outscores it" : "does not outscore it";
  return `control: judged again under the label of #${control.swapped_from} (\u201c${control.swapped_label}\u201d): ${scores}; the true label ${verdict} (mean ${orNa(control.true_score)} against ${orNa(control.swapped_score)})`;
}

/** The label's two scores as text beside it (the numbers and marks are the accessible form: no colour carries them). */
function labelScoreChip(ctx, c) {
  const { detection, fuzzing } = ctx.data;
  if (!detection) return "";
  const marks = chanceMarks(ctx.data, c);
  const text = labelScoreText(detection[c], fuzzing?.[c] ?? NaN, marks);
  if (!text) return h("span", { class: "iw-label-scores iw-label-unscored" }, "not scored");
  return h(
    "span",
    {
      class: `iw-label-scores${marks.detection || marks.fuzzing ? " iw-label-chance" : ""}`,
      title: `how well the label lets ${ctx.data.scorer || "the scorer"} tell where the concept fires: balanced accuracy, chance 0.5${marks.detection || marks.fuzzing ? "; not above chance: a one-sided test at 0.05 did not find the score above 0.5" : ""}`,
    },
    text,
  );
}

function conceptItem(ctx, c, selected) {
  const imp = ctx.data.importance ? ctx.data.importance[c] : NaN;
  const scores = ctx.data.detection
    ? labelScoreText(ctx.data.detection[c], ctx.data.fuzzing?.[c] ?? NaN, chanceMarks(ctx.data, c))
    : "";
  const dead = ctx.data.density[c] === 0;
  const chip = h("span", { class: "iw-concept-importance" }, Number.isNaN(imp) ? "" : formatScore(imp, { sign: true }));
  if (!Number.isNaN(imp)) paintToken(chip, imp, importanceMax(ctx), { theme: ctx.theme, signed: true });
  return h(
    "li",
    {
      class: "iw-concept",
      role: "option",
      tabindex: selected ? 0 : -1,
      "data-concept": c,
      "aria-selected": String(selected),
      "aria-label": `Concept ${c}: ${ctx.data.labels[c]}${scores ? `, label ${scores.replace(" \u00b7 ", ", ")}` : ""}, density ${formatScore(ctx.data.density[c])}${dead ? ", dead" : ""}${Number.isNaN(imp) ? "" : `, importance ${formatScore(imp)}`}`,
    },
    [
      // prettier-ignore
      h("span", { class: "iw-concept-id" }, `#${c}`),
      h(
        "span",
        { class: "iw-concept-label" },
        (ctx.model.get("details") ?? {})[String(c)]?.label || ctx.data.labels[c] || (dead ? "(never fired)" : ""),
      ),
      labelScoreChip(ctx, c),
      chip,
      h(
        "span",
        { class: "iw-concept-density", title: "fraction of rows where the concept is active" },
        formatScore(ctx.data.density[c]),
      ),
      dead ? h("span", { class: "iw-concept-dead" }, "dead") : "",
      h("span", { class: "iw-concept-tokens" }, ctx.data.topTokens[c].map(displayToken).join(" \u00b7 ")),
    ],
  );
}

const deadCount = (ctx) => Array.from(ctx.data.density).filter((v) => v === 0).length;
/** The largest |importance| (for the chips' colour scale), computed once per data change. */
function importanceMax(ctx) {
  const { state } = ctx;
  if (state.impMax === null)
    state.impMax = ctx.data.importance
      ? Math.max(0, ...Array.from(ctx.data.importance).filter(Number.isFinite).map(Math.abs))
      : 0;
  return state.impMax;
}

function contextLine(ctx, example, max) {
  const line = h("div", { class: "iw-tokens iw-context" });
  example.tokens.forEach((text, k) => {
    const span = h(
      "span",
      { class: k === example.center ? "iw-token iw-center" : "iw-token", "data-value": example.activations[k] },
      displayToken(text),
    );
    paintToken(span, Math.max(0, example.activations[k]), max, { theme: ctx.theme, signed: false });
    line.append(span);
  });
  return h("li", { class: "iw-example-context" }, [
    h("span", { class: "iw-context-value" }, formatScore(example.activation ?? NaN)),
    line,
  ]);
}

/** The input text coloured by concept `c`'s activation or attribution, with its controls (null: no text). */
function textView(ctx, c, info) {
  const { tokens, gaps, starts } = ctx.data.texts;
  if (tokens.length === 0) return null;
  const t = Math.min(ctx.model.get("selected_text") ?? 0, tokens.length - 1);
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
      ctx.safely(() => ctx.save({ selected_text: Number(select.value), selected_token: -1 })),
    );
    section.append(select);
  }
  const method = ctx.model.get("attribution_method") ?? "";
  const mode = method && ctx.model.get("text_mode") === "attribution" ? "attribution" : "activation";
  if (method) {
    const toggle = h("select", { class: "iw-text-mode", "aria-label": "Colour the input text by" }, [
      h("option", { value: "activation" }, `activation of concept ${c}`),
      h("option", { value: "attribution" }, `input attribution (${method}): which tokens make it fire`),
    ]);
    toggle.value = mode;
    toggle.addEventListener(
      "change",
      ctx.safely(() => ctx.save({ text_mode: toggle.value })),
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
  const selectedToken = ctx.model.get("selected_token") ?? -1;
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
    paintToken(span, values ? (signed ? values[k] : Math.max(0, values[k])) : NaN, max, { theme: ctx.theme, signed });
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
        ctx.theme,
        mode === "attribution" ? `input attribution to concept ${c}` : `activation of concept ${c}`,
        { signed },
      ),
    );
  if (selectedToken >= 0 && selectedToken < tokens[t].length && ctx.data.texts.top) {
    const row = starts[t] + selectedToken;
    const w = ctx.data.texts.topWidth;
    const active = [];
    for (let j = 0; j < w; j += 1)
      if (ctx.data.texts.top[row * w + j] >= 0)
        active.push([ctx.data.texts.top[row * w + j], ctx.data.texts.topValues[row * w + j]]);
    section.append(h("div", { class: "iw-token-concepts" }, [
      h("span", {}, `Concepts active at ${quoteToken(tokens[t][selectedToken])}: `),
      ...(active.length ? active.map(([cc, v]) => h("button", { type: "button", class: "iw-button iw-goto-concept", "data-concept": cc }, `#${cc} ${ctx.data.labels[cc]} (${formatScore(v)})`)) : ["none"]),
    ])); // prettier-ignore
  }
  return section;
}

/** A button that selects concept `c` (the detail pane's click handler reads `iw-goto-concept`). */
function gotoButton(c, label) {
  return h("button", { type: "button", class: "iw-button iw-goto-concept", "data-concept": c }, `#${c} ${label}`);
}

/**
 * The selected concept's place in a concept hierarchy (a Matryoshka SAE's parent -> children links): its parent,
 * and its children as a collapsible tree (`<details>`, open at first) rebuilt from their pre-order depths, each with
 * P(parent fires | child fires), the decoder cosine and, for a parent, its absorption rate.
 */
export function hierarchyView(hierarchy) {
  const percent = (v) => `${formatScore(100 * v, { digits: 3 })}%`;
  const link = (item) => `P(parent | child) ${formatScore(item.conditional)} \u00b7 cos ${formatScore(item.cosine)}`;
  const blocks = [h("h4", {}, "Hierarchy")];
  if (hierarchy.parent) {
    blocks.push(h("p", { class: "iw-concept-parent" }, [
      "parent ", gotoButton(hierarchy.parent.concept, hierarchy.parent.label), h("span", { class: "iw-caption" }, ` ${link(hierarchy.parent)}`),
    ])); // prettier-ignore
  }
  const kids = hierarchy.children;
  if (kids.length) {
    const root = h("ul", { class: "iw-concept-tree" });
    const stack = [root]; // stack[d - 1] is the list that takes the children of depth d
    kids.forEach((item, i) => {
      stack.length = item.depth;
      const caption = `${link(item)}${item.absorption === null ? "" : ` \u00b7 absorption ${percent(item.absorption)}`}`;
      const line = [gotoButton(item.concept, item.label), h("span", { class: "iw-caption" }, ` ${caption}`)];
      const hasKids = kids[i + 1]?.depth > item.depth;
      if (hasKids) {
        const sub = h("ul", { class: "iw-concept-tree" });
        stack[item.depth - 1].append(h("li", {}, h("details", { open: "" }, [h("summary", {}, line), sub])));
        stack.push(sub);
      } else stack[item.depth - 1].append(h("li", {}, line));
    });
    const direct = kids.filter((item) => item.depth === 1).length;
    const absorbed =
      hierarchy.absorption === null
        ? ""
        : ` \u00b7 absorption ${percent(hierarchy.absorption)} (rows where a child fires and this concept does not: a proxy for Chanin et al.'s probe-based measure)`;
    blocks.push(h("details", { class: "iw-concept-children", open: "" }, [
      h("summary", {}, `${direct} ${direct === 1 ? "child" : "children"}${kids.length > direct ? ` (${kids.length} below)` : ""}${absorbed}`), root,
    ])); // prettier-ignore
  }
  return h("section", { class: "iw-concept-hierarchy" }, blocks);
}

function drawDetail(ctx, selected) {
  const { state, parts } = ctx;
  const details = ctx.model.get("details") ?? {};
  clearTimeout(state.busyTimer);
  if (selected < 0) {
    parts.detail.replaceChildren(
      h("p", { class: "iw-caption" }, "Select a concept to see its histogram, top contexts, top texts and vocabulary."),
    );
    return;
  }
  const info = details[String(selected)];
  if (!info) {
    const waiting = h("p", { class: "iw-concept-loading", role: "status" }, `Loading concept ${selected}\u2026`);
    parts.detail.replaceChildren(waiting);
    state.busyTimer = setTimeout(() => {
      waiting.textContent = `Concept ${selected} has not arrived after ${BUSY_AFTER / 1000} s: the kernel is busy (a cell is running) or not connected. Details appear when it is free.`;
      waiting.classList.add("iw-concept-busy");
    }, BUSY_AFTER);
    return;
  }
  if (info.density === 0) {
    parts.detail.replaceChildren(
      h("h3", { class: "iw-detail-title" }, [
        `#${info.concept} `,
        h("span", { class: "iw-detail-label" }, "(never fired)"),
      ]),
      h(
        "p",
        { class: "iw-concept-dead", role: "note" },
        `Concept ${info.concept} never fired: it is zero on every one of the ${ctx.model.get("n_rows") ?? "scanned"} rows, so it has no top contexts and no label.`,
      ),
    );
    return;
  }
  const max = info.max ?? 0;
  const stats = `density ${formatScore(info.density ?? NaN)} \u00b7 mean ${formatScore(info.mean ?? NaN)} \u00b7 max ${formatScore(max)} \u00b7 min ${formatScore(info.min ?? NaN)}`;
  const blocks = [
    h("h3", { class: "iw-detail-title" }, [`#${info.concept} `, h("span", { class: "iw-detail-label" }, info.label)]),
    info.label_source ? h("div", { class: "iw-caption iw-label-source" }, `label from ${info.label_source}`) : "",
    info.label_scores ? labelScoresTable(info.label_scores) : "",
    h("div", { class: "iw-caption" }, stats),
    info.hierarchy ? hierarchyView(info.hierarchy) : "",
    h("h4", {}, "Activation histogram (active rows)"),
    histogramSvg(decodeArray(info.hist_edges).values, decodeArray(info.hist_counts).values, {
      label: `activation histogram of concept ${info.concept}`,
    }),
    h("h4", {}, "Top activating contexts"),
    h(
      "ol",
      { class: "iw-contexts" },
      info.examples.map((example) => contextLine(ctx, example, max)),
    ),
    createLegend(max, ctx.theme, "activation", { signed: false }),
  ];
  if (info.top_texts.length) {
    blocks.push(
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
    blocks.push(h("h4", {}, "Promoted tokens (vocabulary projection)"), h("table", { class: "iw-table iw-vocabulary" }, [
      h("thead", {}, h("tr", {}, [h("th", {}, "token"), h("th", {}, "logit")])),
      h("tbody", {}, info.vocabulary.map((v) => h("tr", {}, [h("td", {}, displayToken(v.token)), h("td", {}, formatScore(v.logit ?? NaN, { sign: true }))]))),
    ])); // prettier-ignore
  }
  const text = textView(ctx, info.concept, info);
  if (text) blocks.push(text);
  parts.detail.replaceChildren(...blocks);
}

/**
 * The selected label's detection and fuzzing scores: balanced accuracy, its chance p-value, AUC of P("1") and the
 * examples judged, then the label's swapped-label control (which concept's label was swapped in, the scores under it
 * and whether the true label outscored it).
 */
function labelScoresTable(scores) {
  const row = (kind, name) => {
    const s = scores[kind] ?? {};
    return h("tr", {}, [
      h("th", { scope: "row" }, name),
      h("td", {}, formatScore(s.balanced_accuracy ?? NaN)),
      h("td", { class: "iw-label-p" }, orNa(s.p_value)),
      h("td", {}, s.auc === null || s.auc === undefined ? "n/a" : formatScore(s.auc)),
      h(
        "td",
        {},
        `${s.n_activating ?? 0} + ${s.n_non_activating ?? 0}${s.n_failed ? ` (${s.n_failed} unreadable)` : ""}`,
      ),
    ]);
  };
  const table = h("table", { class: "iw-table iw-label-score-table" }, [
    h("caption", {}, `Label scores (scorer ${scores.scorer || "unknown"}; chance is 0.5)`),
    h("thead", {}, h("tr", {}, [h("th", {}, "score"), h("th", {}, "balanced accuracy"), h("th", { title: "one-sided Fisher exact test of balanced accuracy > 0.5" }, "p-value"), h("th", {}, "AUC"), h("th", {}, "firing + not firing")])),
    h("tbody", {}, [row("detection", "detection"), row("fuzzing", "fuzzing")]),
  ]); // prettier-ignore
  if (!scores.control) return table;
  const control = h("p", { class: `iw-caption iw-label-control${scores.control.outscores ? "" : " iw-label-control-lost"}` }, controlSentence(scores.control)); // prettier-ignore
  return h("div", { class: "iw-label-score-detail" }, [table, control]);
}

/**
 * Paint the summary, the controls' values, the page of concepts and the selected concept's details, and ask the
 * kernel for the details of the concepts on the page.
 * @param {import("../../lib/view.js").ViewContext} ctx
 */
export function draw(ctx, level) {
  const { state, parts } = ctx;
  if (level >= REREAD) state.impMax = null; // ctx.data was just decoded again
  const options = {
    sortBy: ctx.model.get("sort_by") ?? "index",
    descending: Boolean(ctx.model.get("descending")),
    search: ctx.model.get("search") ?? "",
    hideDead: Boolean(ctx.model.get("hide_dead")),
    minScore: Number(ctx.model.get("min_label_score") ?? 0),
  };
  const order = visibleConcepts(ctx.data, options);
  const { page, pages, items: shown } = pageOf(order, ctx.model.get("page"), ctx.model.get("page_size"));
  const selected = ctx.model.get("selected_concept") ?? -1;
  parts.root.dataset.iwTheme = ctx.theme;
  parts.summary.textContent = `${ctx.data.labels.length} ${ctx.model.get("method") ?? ""} concepts${ctx.model.get("layer") ? ` at ${ctx.model.get("layer")}` : ""}${ctx.model.get("n_rows") ? ` over ${ctx.model.get("n_rows")} rows` : ""}${ctx.data.importance ? ` \u00b7 importance: ${ctx.model.get("importance_label") || "importance"}` : ""}${deadCount(ctx) ? ` \u00b7 ${deadCount(ctx)} never fired${options.hideDead ? " (hidden)" : ""}` : ""}${ctx.data.detection ? ` \u00b7 labels scored by ${ctx.data.scorer || "a scorer"} (balanced accuracy, chance 0.5) \u00b7 ${controlText(ctx.data.control)}` : ""}`;
  parts.sortSelect.replaceChildren(
    ...Object.entries(SORT_KEYS)
      .filter(([k]) => ctx.data.importance || !k.includes("importance"))
      .filter(([k]) => ctx.data.detection || !LABEL_SCORE_KEYS.includes(k))
      .map(([v, t]) => h("option", { value: v }, t)),
  );
  parts.sortSelect.value = options.sortBy;
  if (parts.searchBox.value !== options.search) parts.searchBox.value = options.search;
  parts.orderToggle.checked = options.descending;
  parts.deadToggle.checked = options.hideDead;
  parts.scoreLabel.hidden = !ctx.data.detection;
  if (Number(parts.scoreFilter.value) !== options.minScore || parts.scoreFilter.value === "")
    parts.scoreFilter.value = String(options.minScore);
  parts.pager.update(page, pages, `${order.length} of ${ctx.data.labels.length} concepts`);
  const items = shown.map((c) => conceptItem(ctx, c, c === selected));
  if (items.length && !items.some((li) => li.tabIndex === 0)) items[0].tabIndex = 0;
  parts.list.replaceChildren(...(items.length ? items : [h("li", { class: "iw-caption" }, "No concept matches.")]));
  if (state.focusAfterDraw !== null) parts.list.querySelector(`[data-concept="${state.focusAfterDraw}"]`)?.focus();
  state.focusAfterDraw = null;
  drawDetail(ctx, selected);
  requestDetails(ctx, shown);
}
