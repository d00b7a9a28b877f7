/**
 * Method comparison view (front end of interp_widgets.widgets.ComparisonWidget): one token row per
 * method, synchronised hover/focus across rows, per-method or shared colour scale, a token/word/sentence
 * granularity switch (sums computed here from the ids sent once) and the pairwise agreement table
 * computed in Python.
 *
 * Synced traits: the ComparisonModel typedef below; the fields marked "written" are also set by the view.
 *
 * @example
 *   import widget from "./comparison.js";
 *   widget.render({model, el});
 */

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * One row of the pairwise agreement table (Python `agreement_table`).
 * @typedef {object} AgreementRow
 * @property {string} a  Method A.
 * @property {string} b  Method B.
 * @property {number | null} spearman  Rank correlation (null: undefined, e.g. constant scores).
 * @property {number | null} top_k_overlap
 * @property {number} k
 */

/**
 * Synced traits of ComparisonWidget: its data (ComparisonData, generated in lib/view_traits.js) and its view
 * state (ComparisonState).
 * @typedef {import("./lib/view_traits.js").ComparisonData & ComparisonState} ComparisonModel
 */
/**
 * View state of ComparisonWidget (and its bases TokenScoresWidget, GroupedTokens, InterpWidget).
 * @typedef {object} ComparisonState
 * @property {"token" | "word" | "sentence" | "turn"} granularity  (written)
 * @property {boolean} shared_scale  One colour scale for all methods (written).
 * @property {"colour" | "underline"} encoding
 * @property {boolean} high_contrast
 * @property {number} selected_token  Token clicked, -1: none (written).
 * @property {number} hovered_token  Token under the pointer, -1: none (read and written: every row outlines it).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./comparison.css";
import { buildUnits, maxMagnitude, roleStarts, unitScores, unitText } from "./lib/aggregate.js";
import { decodeArray, hasArray } from "./lib/codec.js";
import { GRANULARITIES, granularitySelect, textTable } from "./lib/controls.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { createExportMenu } from "./lib/export.js";
import { formatScore } from "./lib/format.js";
import { createLegend } from "./lib/legend.js";
import { paintToken, renderTokenRun } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";
import { viewKit } from "./lib/view.js";
import { COMPARISON_DATA_TRAITS } from "./lib/view_traits.js";

/** Traits whose change redraws. @type {(keyof ComparisonModel)[]} */
const TRAITS = [...COMPARISON_DATA_TRAITS, "granularity", "shared_scale", "encoding", "high_contrast"];

/** @param {AnyModel<ComparisonModel>} model */
function readComparison(model) {
  const tokens = model.get("tokens") ?? [];
  const methods = model.get("methods") ?? [];
  const n = tokens.length;
  if (n === 0) throw new RangeError("there are no tokens to display");
  const scores = decodeArray(model.get("scores"));
  if (scores.shape[0] !== methods.length || scores.shape[1] !== n) {
    throw new RangeError(
      `scores have shape [${scores.shape.join(", ")}], expected [${methods.length} methods, ${n} tokens]`,
    );
  }
  const perToken = (name) => {
    const { values } = decodeArray(model.get(name));
    if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} tokens`);
    return values;
  };
  const signed = model.get("signed") ?? [];
  // payloads from before turns existed have none: every token is then in one turn without a role
  const turnIds = hasArray(model.get("turn_ids")) ? perToken("turn_ids") : null;
  return { n, tokens, methods, scores: scores.values, specialMask: perToken("special_mask"), wordIds: perToken("word_ids"), sentenceIds: perToken("sentence_ids"),
    turnIds, roles: model.get("turn_roles") ?? [], signed: methods.map((_, m) => signed[m] !== false), spaces: model.get("spaces_before") ?? [] }; // prettier-ignore
}

const numberText = (value, digits = 3) => (value === null || value === undefined ? "n/a" : value.toFixed(digits));

/** @param {{model: AnyModel<ComparisonModel>, el: HTMLElement, reportError: (error: unknown) => void}} props */
function renderComparison({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const { safely, save, coalesce } = viewKit(model, reportError);
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
  let theme = detectTheme(doc);
  let data = null;
  let view = null; // {units, sums (per method), runs (token run per method), granularity, linked (unit)}

  const scoreText = (m, value) =>
    Number.isNaN(value) ? "not seen" : formatScore(value, { digits: 4, sign: data.signed[m] });
  const textOf = (unit) => unitText(unit, data.tokens, data.spaces);

  function draw() {
    data = readComparison(model);
    const shared = Boolean(model.get("shared_scale"));
    const encoding = model.get("encoding") || "colour";
    const boost = Boolean(model.get("high_contrast"));
    const chosen = model.get("granularity") || "token";
    const units = buildUnits({ granularity: chosen, showSpecial: false, ...data });
    // a chat conversation: each turn's first unit is preceded by its role's label, in every method's row
    const starts = roleStarts(units, data.turnIds, data.specialMask, data.roles);
    const roleNote = (u) => (starts.has(u) ? `${starts.get(u)} turn: ` : "");
    const sums = data.methods.map((_, m) => unitScores(units, data.scores, m, data.n));
    const sharedMax = Math.max(...sums.map(maxMagnitude));
    root.dataset.iwTheme = theme;
    root.classList.toggle("iw-high-contrast", boost);
    sharedToggle.checked = shared;
    const choices = data.roles.length || chosen === "turn" ? [...GRANULARITIES, "turn"] : GRANULARITIES;
    if (granularity.options.length !== choices.length)
      granularity.replaceChildren(...choices.map((g) => h("option", { value: g }, g)));
    granularity.value = chosen;
    const per = chosen === "token" ? "" : ` \u00b7 sum per ${chosen}`;
    heading.textContent = `${data.methods.length} methods explaining ${quoteToken(model.get("target_label") ?? "")}${shared ? " \u00b7 shared scale" : " \u00b7 scale per method"}${per}`;
    for (const run of view?.runs ?? []) run.cancel();
    view = { units, sums, runs: [], granularity: chosen, linked: -1 };
    rowsBox.replaceChildren(
      ...data.methods.map((method, m) => {
        const max = shared ? sharedMax : maxMagnitude(sums[m]);
        const box = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal", "aria-label": `${method}: ${chosen}s coloured by attribution`, "data-method": m });
        // Long inputs are drawn block by block (see renderTokenRun); spans are made as their block is built.
        const build = (u, parent, atBlockStart) => {
          const unit = units[u];
          let gap = atBlockStart ? data.spaces[unit[0]].replace(/^\r?\n/, "") : data.spaces[unit[0]];
          if (starts.has(u)) {
            // a chat turn starts: its role's label on a line of its own (the template's markers are hidden)
            parent.append(h("span", { class: "iw-role", "aria-hidden": "true" }, starts.get(u)));
            gap = gap.replace(/^(\r?\n)+/, "");
          }
          if (u > 0 && gap) parent.append(gap);
          const text = textOf(unit);
          const span = h("span", { class: u === view.linked ? "iw-token iw-linked" : "iw-token", role: "option", tabindex: m === 0 && u === 0 ? 0 : -1, "data-unit": u, "data-index": unit[0], "aria-label": `${roleNote(u)}${quoteToken(text)}, ${method} score ${scoreText(m, sums[m][u])}` }, displayToken(text));
          paintToken(span, sums[m][u], max, { theme, signed: data.signed[m], encoding, boost });
          parent.append(span);
          return span;
        };
        view.runs.push(renderTokenRun(box, { count: units.length, build, breakRank: (u) => (starts.has(u) ? 2 : 0) }));
        return h("div", { class: "iw-method-row" }, [
          h("div", { class: "iw-method-name" }, method),
          box,
          createLegend(max, theme, chosen === "token" ? method : `${method} (sum per ${chosen})`, { signed: data.signed[m], encoding }),
        ]);
      }),
    ); // prettier-ignore
    const rows = model.get("agreements")?.[chosen] ?? [];
    const k = rows[0]?.k;
    agreementBox.replaceChildren(
      textTable(
        ["method A", "method B", "Spearman \u03c1", `top-${k ?? "k"} overlap`],
        rows.map((r) => [r.a, r.b, numberText(r.spearman), numberText(r.top_k_overlap, 2)]),
        { caption: `Pairwise agreement over ${chosen}s (${model.get("agreement_by") || "magnitude"} ranks)` },
      ),
    );
    linkHover(model.get("hovered_token"));
  }

  /** Outline, in every row, the unit holding token `index` (-1: none). */
  function linkHover(index) {
    const u = index < 0 ? -1 : view.units.findIndex((unit) => unit.includes(index));
    if (u === view.linked) return;
    for (const run of view.runs) {
      run.span(view.linked)?.classList.remove("iw-linked");
      run.span(u)?.classList.add("iw-linked");
    }
    view.linked = u;
  }

  const spanOf = (event) => (event.target instanceof Element ? event.target.closest(".iw-token") : null);
  const show = (span) => {
    const u = Number(span.dataset.unit);
    const unit = view.units[u];
    linkHover(unit[0]);
    const rows = [
      [view.granularity, quoteToken(textOf(unit))],
      ...data.methods.map((method, m) => [method, scoreText(m, view.sums[m][u])]),
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
    linkHover(-1);
    save({ hovered_token: -1 });
  })); // prettier-ignore
  rowsBox.addEventListener("focusin", safely((event) => {
    const span = spanOf(event);
    if (span) show(span);
  })); // prettier-ignore
  rowsBox.addEventListener("focusout", safely((event) => {
    if (!rowsBox.contains(event.relatedTarget)) {
      tooltip.hide();
      linkHover(-1);
    }
  })); // prettier-ignore
  rowsBox.addEventListener("click", safely((event) => {
    const span = spanOf(event);
    if (span) save({ selected_token: Number(span.dataset.index) });
  })); // prettier-ignore
  rowsBox.addEventListener("keydown", safely((event) => {
    const span = spanOf(event);
    if (!span) return;
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
    nm = Math.min(Math.max(nm, 0), data.methods.length - 1);
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
  const csvRows = () => [
    ["position", view.granularity, "start_token", ...data.methods],
    ...view.units.map((unit, u) => [u, textOf(unit), unit[0], ...view.sums.map((row) => row[u])]),
  ];
  toolbar.append(
    createExportMenu({
      name: "method-comparison",
      root,
      rows: csvRows,
      prepare: () => view.runs.forEach((run) => run.finish()),
      title: () => `Method comparison: ${model.get("target_label")}`,
      reportError,
    }),
  );

  const request = coalesce(draw);
  const onHover = safely(() => linkHover(model.get("hovered_token")));
  for (const name of TRAITS) model.on(`change:${name}`, request);
  model.on("change:hovered_token", onHover);
  const stopWatchingTheme = watchTheme(doc, (next) => {
    theme = next;
    request();
  });
  draw();
  return () => {
    for (const run of view?.runs ?? []) run.cancel();
    for (const name of TRAITS) model.off(`change:${name}`, request);
    model.off("change:hovered_token", onHover);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("ComparisonWidget", renderComparison) };
