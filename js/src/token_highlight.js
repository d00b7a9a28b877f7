/**
 * Token attribution highlighter (front end of interp_widgets.widgets.TokenHighlightWidget).
 *
 * Synced traits: the TokenHighlightModel typedef below; the fields marked "written" are also set by the view.
 * Word/sentence sums are computed here, never in the kernel. Long inputs render block by block (lib/paint.js renderTokenRun).
 *
 * @example
 *   import widget from "./token_highlight.js";
 *   const cleanup = widget.render({model, el});
 */

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of TokenHighlightWidget: its data (TokenHighlightData, generated in lib/view_traits.js) and its view
 * state (TokenHighlightState).
 * @typedef {import("./lib/view_traits.js").TokenHighlightData & TokenHighlightState} TokenHighlightModel
 */
/**
 * View state of TokenHighlightWidget (and its bases TokenScoresWidget, GroupedTokens, InterpWidget).
 * @typedef {object} TokenHighlightState
 * @property {number} selected_target  Row of scores on display (written).
 * @property {"token" | "word" | "sentence" | "turn"} granularity  Units coloured; sums are computed here (written).
 * @property {boolean} show_special_tokens  (written)
 * @property {boolean} shared_scale  One colour scale for all targets (written).
 * @property {"colour" | "underline"} encoding  (written)
 * @property {boolean} high_contrast  (written)
 * @property {number} selected_token  Token clicked or chosen with Enter, -1: none (written).
 * @property {number} hovered_token  Token under the pointer, -1: none (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./token_highlight.css";
import {
  buildUnits,
  contentMaxMagnitude,
  ranksByMagnitude,
  roleStarts,
  unitScores,
  unitText,
} from "./lib/aggregate.js";
import { decodeArray, hasArray } from "./lib/codec.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { GRANULARITIES, fillTableIdle, granularitySelect } from "./lib/controls.js";
import { createExportMenu } from "./lib/export.js";
import { formatProbability, formatScore } from "./lib/format.js";
import { createLegend } from "./lib/legend.js";
import { paintToken, renderTokenRun } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";
import { viewKit } from "./lib/view.js";
import { TOKEN_HIGHLIGHT_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";

/** Traits whose change only redraws. @type {(keyof TokenHighlightModel)[]} */
const VIEW_TRAITS = [
  "selected_target",
  "granularity",
  "show_special_tokens",
  "shared_scale",
  "encoding",
  "high_contrast",
];

/** Index of the unit holding token `i` (-1 if none is shown). */
function unitOfToken(units, i) {
  if (i < 0) return -1;
  return units.findIndex((unit) => unit[0] <= i && i <= unit.at(-1) && unit.includes(i));
}

/**
 * @param {AnyModel<TokenHighlightModel>} model
 * @param {"special_mask" | "word_ids" | "sentence_ids" | "turn_ids"} name
 * @param {number} n
 */
function perToken(model, name, n) {
  const { values } = decodeArray(model.get(name));
  if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} tokens`);
  return values;
}

/**
 * Read and check the synced data; throws a readable error when it is inconsistent.
 * @param {AnyModel<TokenHighlightModel>} model
 */
function readData(model) {
  const tokens = model.get("tokens") ?? [];
  const n = tokens.length;
  if (n === 0) throw new RangeError("there are no tokens to display");
  const spaces = model.get("spaces_before") ?? [];
  if (spaces.length !== n) throw new RangeError(`spaces_before has ${spaces.length} entries for ${n} tokens`);
  const scores = decodeArray(model.get("scores"));
  if (scores.shape.length !== 2 || scores.shape[1] !== n) {
    throw new RangeError(`scores have shape [${scores.shape.join(", ")}], expected [n_targets, ${n}]`);
  }
  const labels = model.get("target_labels") ?? [];
  if (labels.length !== scores.shape[0]) {
    throw new RangeError(`${labels.length} target labels for ${scores.shape[0]} rows of scores`);
  }
  return {
    n,
    tokens,
    spaces,
    scores: scores.values,
    labels,
    probs: model.get("target_probs") ?? [],
    completeness: model.get("completeness_error") ?? [],
    specialMask: perToken(model, "special_mask", n),
    wordIds: perToken(model, "word_ids", n),
    sentenceIds: perToken(model, "sentence_ids", n),
    // payloads from before turns existed have none: every token is then in one turn without a role
    turnIds: hasArray(model.get("turn_ids")) ? perToken(model, "turn_ids", n) : null,
    roles: model.get("turn_roles") ?? [],
    method: model.get("method") ?? "",
    meaning: model.get("score_meaning") ?? "",
    signed: model.get("signed") !== false,
  };
}

/** @param {{model: AnyModel<TokenHighlightModel>, el: HTMLElement, reportError: (error: unknown) => void}} props */
function renderTokenHighlight({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const { safely, save, coalesce } = viewKit(model, reportError);
  const root = h("div", { class: "iw-root iw-token-highlight" });
  const targetSelect = h("select", { class: "iw-target-select" });
  const granularityPick = granularitySelect();
  const specialToggle = h("input", { type: "checkbox", class: "iw-special-toggle" });
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const encodingSelect = h("select", { class: "iw-encoding-select" }, [
    h("option", { value: "colour" }, "colour"),
    h("option", { value: "underline" }, "underline + sign"),
  ]);
  const contrastToggle = h("input", { type: "checkbox", class: "iw-contrast-toggle" });
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Class ", targetSelect]),
    h("label", {}, ["Granularity ", granularityPick]),
    h("label", {}, [specialToggle, " special tokens"]),
    h("label", { title: "One colour scale for all classes instead of one per class" }, [sharedToggle, " shared scale"]),
    h("label", {}, ["Encoding ", encodingSelect]),
    h("label", {}, [contrastToggle, " high contrast"]),
  ]);
  const tokensBox = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal" });
  const legendSlot = h("div", { class: "iw-legend-slot" });
  const caption = h("div", { class: "iw-caption" });
  const table = h("table");
  const tableBox = h("div", { class: "iw-sr-only iw-sr-table" }, table);
  root.append(toolbar, tokensBox, legendSlot, caption, tableBox);
  el.append(root);
  const tooltip = createTooltip(root);

  let theme = detectTheme(doc);
  let data = null;
  let view = null; // {units, sums, ranks, ranked, target, selectedUnit}
  let focusToken = -1; // token index that owns the roving tabindex
  let rendering = null; // the token run (see renderTokenRun)
  let tableFill = null; // the screen-reader table being built in idle time

  /** The granularity choices: "turn" for a chat conversation (a plain text is one turn) or when it is set. */
  function fillGranularities(granularity) {
    const choices = data.roles.length || granularity === "turn" ? [...GRANULARITIES, "turn"] : GRANULARITIES;
    if (granularityPick.options.length === choices.length) return;
    granularityPick.replaceChildren(...choices.map((g) => h("option", { value: g }, g)));
  }

  function fillTargets() {
    targetSelect.replaceChildren(
      ...data.labels.map((label, i) => {
        const p = data.probs[i];
        const text = Number.isFinite(p) ? `${label} (${formatProbability(p)})` : label;
        return h("option", { value: i }, text);
      }),
    );
  }

  const scoreText = (score) =>
    Number.isNaN(score) ? "none (this class does not see it)" : formatScore(score, { digits: 6, sign: true });
  const rankText = (rank, count) => (rank > 0 ? `${rank} of ${count} by |score|` : "unranked");

  const textOf = (unit) => unitText(unit, data.tokens, data.spaces);

  function describe(u) {
    const unit = view.units[u];
    const granularity = model.get("granularity");
    const rows = [
      [granularity, quoteToken(textOf(unit))],
      ...(view.roleOf(u) ? [["turn", view.roleOf(u)]] : []),
      ["score", scoreText(view.sums[u])],
      ["rank", rankText(view.ranks[u], view.ranked)],
      ["class", data.labels[view.target]],
    ];
    if (unit.length > 1) rows.push(["sum of", `${unit.length} tokens`]);
    return rows;
  }

  function draw() {
    const target = model.get("selected_target");
    if (!(target >= 0 && target < data.labels.length)) {
      throw new RangeError(`selected_target ${target} is out of range for ${data.labels.length} classes`);
    }
    const granularity = model.get("granularity");
    const showSpecial = Boolean(model.get("show_special_tokens"));
    const units = buildUnits({ granularity, showSpecial, ...data });
    const sums = unitScores(units, data.scores, target, data.n);
    const ranks = ranksByMagnitude(sums);
    const ranked = sums.filter((value) => !Number.isNaN(value)).length;
    const shared = Boolean(model.get("shared_scale"));
    // the colour scale is set by content units only: shown special (template) tokens are greyed, not counted
    const unitSpecial = units.map((unit) => (data.specialMask[unit[0]] !== 0 ? 1 : 0));
    const max = shared
      ? Math.max(
          ...data.labels.map((_, t) => contentMaxMagnitude(unitScores(units, data.scores, t, data.n), unitSpecial)),
        )
      : contentMaxMagnitude(sums, unitSpecial);
    const paint = {
      theme,
      signed: data.signed,
      encoding: model.get("encoding") || "colour",
      boost: Boolean(model.get("high_contrast")),
    };
    const hadFocus = tokensBox.contains(doc.activeElement);
    tooltip.hide();
    const starts = roleStarts(units, data.turnIds, data.specialMask, data.roles);
    const turnOf = (u) => units[u].map((i) => data.turnIds?.[i] ?? -1).find((t) => t >= 0 && t < data.roles.length);
    const roleOf = (u) => (turnOf(u) === undefined ? "" : data.roles[turnOf(u)]);
    view = {
      units,
      sums,
      ranks,
      ranked,
      target,
      roleOf,
      selectedUnit: unitOfToken(units, model.get("selected_token")),
    };
    const label = (u) =>
      `${starts.has(u) ? `${starts.get(u)} turn: ` : ""}${quoteToken(textOf(units[u]))}, score ${scoreText(sums[u])}, rank ${rankText(ranks[u], ranked)}`;
    // Spans are made, painted and labelled block by block (see renderTokenRun), so first paint costs one block.
    const build = (u, parent, atBlockStart) => {
      const unit = units[u];
      const first = unit[0];
      let gap = atBlockStart && u > 0 ? data.spaces[first].replace(/^\r?\n/, "") : data.spaces[first];
      if (starts.has(u)) {
        // a chat turn starts: its role's label, on a line of its own (the template's markers are special tokens)
        parent.append(h("span", { class: "iw-role", "aria-hidden": "true" }, starts.get(u)));
        gap = gap.replace(/^(\r?\n)+/, "");
      }
      if (gap) parent.append(gap);
      const special = data.specialMask[first] !== 0;
      const joined =
        granularity === "token" &&
        u > 0 &&
        !special &&
        data.spaces[first] === "" &&
        data.wordIds[first] >= 0 &&
        data.wordIds[first] === data.wordIds[units[u - 1][0]];
      const classes = ["iw-token", special && "iw-special", joined && "iw-join", Number.isNaN(sums[u]) && "iw-unseen"];
      const span = h("span", { class: classes.filter(Boolean).join(" "), role: "option", tabindex: -1, "aria-selected": String(u === view.selectedUnit), "aria-label": label(u), "data-unit": u }, displayToken(textOf(unit)));
      paintToken(span, sums[u], max, paint);
      parent.append(span);
      return span;
    }; // prettier-ignore
    const breakRank = (u) => {
      if (starts.has(u)) return 2;
      const first = units[u][0];
      const last = units[u - 1].at(-1);
      if (data.spaces[first].includes("\n") || data.tokens[last].endsWith("\n")) return 2;
      return data.sentenceIds[first] !== data.sentenceIds[last] ? 1 : 0;
    };
    rendering?.cancel();
    tableFill?.cancel();
    rendering = renderTokenRun(tokensBox, { count: units.length, build, breakRank, onDone: () => {
      // The screen-reader table lists every unit; off screen with content-visibility: auto, it is never laid out.
      tableFill = fillTableIdle(table, {
        caption: `Attribution per ${granularity} for class ${data.labels[target]} (${units.length} ${granularity}s)`,
        header: [granularity, "score", "rank"],
        count: units.length,
        row: (u) => [textOf(units[u]), scoreText(sums[u]), rankText(ranks[u], ranked)],
      });
    } }); // prettier-ignore

    targetSelect.value = String(target);
    fillGranularities(granularity);
    granularityPick.value = granularity;
    specialToggle.checked = showSpecial;
    sharedToggle.checked = shared;
    encodingSelect.value = paint.encoding;
    contrastToggle.checked = paint.boost;
    root.dataset.iwTheme = theme;
    root.classList.toggle("iw-high-contrast", paint.boost);
    const per = granularity === "token" ? "" : ` (sum per ${granularity})`;
    const scaleNote = shared ? ", scale shared by all classes" : "";
    tokensBox.setAttribute(
      "aria-label",
      `${units.length} ${granularity}s coloured by attribution for class ${data.labels[target]}`,
    );
    legendSlot.replaceChildren(
      createLegend(max, theme, `attribution${per}${scaleNote}`, { signed: data.signed, encoding: paint.encoding }),
    );
    const parts = [data.method && `method: ${data.method}`, data.meaning && `score: ${data.meaning}`];
    const delta = data.completeness[target];
    if (Number.isFinite(delta)) parts.push(`completeness error: ${formatScore(delta, { digits: 3 })}`);
    caption.textContent = parts.filter(Boolean).join(" \u00b7 ");

    const focusSpan = rendering.ensure(Math.max(0, unitOfToken(units, focusToken)));
    focusSpan.tabIndex = 0;
    if (hadFocus) focusSpan.focus();
  }

  function csvRows() {
    const units = view.units;
    const header = ["position", model.get("granularity"), "start_token", ...data.labels];
    const perTarget = data.labels.map((_, t) => unitScores(units, data.scores, t, data.n));
    return [header, ...units.map((unit, u) => [u, textOf(unit), unit[0], ...perTarget.map((row) => row[u])])];
  }

  function markSelection() {
    const selected = unitOfToken(view.units, model.get("selected_token"));
    rendering.span(view.selectedUnit)?.setAttribute("aria-selected", "false");
    rendering.span(selected)?.setAttribute("aria-selected", "true");
    view.selectedUnit = selected;
  }

  // Coalesce bursts of change events (one Python hold_sync message fires several) into one redraw:
  // level 1 = redraw, 2 = re-read data then redraw.
  let disposed = false;
  const request = coalesce((level) => {
    if (disposed) return;
    if (level === 2) {
      data = readData(model);
      fillTargets();
    }
    draw();
  });

  function spanOf(event) {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    return span && tokensBox.contains(span) ? span : null;
  }

  function showTip(span) {
    tooltip.show(span, describe(Number(span.dataset.unit)));
  }

  function focusUnit(u) {
    const next = rendering.ensure(Math.min(Math.max(u, 0), view.units.length - 1));
    for (const span of tokensBox.querySelectorAll('.iw-token[tabindex="0"]')) span.tabIndex = -1;
    next.tabIndex = 0;
    focusToken = view.units[Number(next.dataset.unit)][0];
    next.focus();
  }

  function toggleSelection(u) {
    const unit = view.units[u];
    save({ selected_token: unit.includes(model.get("selected_token")) ? -1 : unit[0] });
  }

  const KEY_STEPS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
  const onKeyDown = safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    const u = Number(span.dataset.unit);
    if (event.key in KEY_STEPS) focusUnit(u + KEY_STEPS[event.key]);
    else if (event.key === "Home") focusUnit(0);
    else if (event.key === "End") focusUnit(view.units.length - 1);
    else if (event.key === "Enter" || event.key === " ") toggleSelection(u);
    else if (event.key === "Escape") tooltip.hide();
    else return;
    event.preventDefault();
  });
  const onMouseOver = safely((event) => {
    const span = spanOf(event);
    if (!span || span === tooltip.target) return;
    showTip(span);
    save({ hovered_token: view.units[Number(span.dataset.unit)][0] });
  });
  const onMouseLeave = safely(() => {
    tooltip.hide();
    save({ hovered_token: -1 });
  });
  const onFocusIn = safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    focusToken = view.units[Number(span.dataset.unit)][0];
    showTip(span);
  });
  const onFocusOut = safely((event) => {
    if (!tokensBox.contains(event.relatedTarget)) tooltip.hide();
  });
  const onClick = safely((event) => {
    const span = spanOf(event);
    if (span) toggleSelection(Number(span.dataset.unit));
  });
  tokensBox.addEventListener("keydown", onKeyDown);
  tokensBox.addEventListener("mouseover", onMouseOver);
  tokensBox.addEventListener("mouseleave", onMouseLeave);
  tokensBox.addEventListener("focusin", onFocusIn);
  tokensBox.addEventListener("focusout", onFocusOut);
  tokensBox.addEventListener("click", onClick);
  targetSelect.addEventListener(
    "change",
    safely(() => save({ selected_target: Number(targetSelect.value) })),
  );
  granularityPick.addEventListener(
    "change",
    safely(() => save({ granularity: granularityPick.value })),
  );
  specialToggle.addEventListener(
    "change",
    safely(() => save({ show_special_tokens: specialToggle.checked })),
  );
  sharedToggle.addEventListener(
    "change",
    safely(() => save({ shared_scale: sharedToggle.checked })),
  );
  encodingSelect.addEventListener(
    "change",
    safely(() => save({ encoding: encodingSelect.value })),
  );
  contrastToggle.addEventListener(
    "change",
    safely(() => save({ high_contrast: contrastToggle.checked })),
  );
  toolbar.append(
    createExportMenu({
      name: "token-attribution",
      root,
      rows: csvRows,
      prepare: () => rendering.finish(),
      title: () => `${data.method || "attribution"}: class ${data.labels[view.target]}`,
      reportError,
    }),
  );

  const onData = () => request(2);
  const onView = () => request(1);
  const onSelection = safely(() => view && markSelection());
  for (const name of DATA_TRAITS) model.on(`change:${name}`, onData);
  for (const name of VIEW_TRAITS) model.on(`change:${name}`, onView);
  model.on("change:selected_token", onSelection);
  const stopWatchingTheme = watchTheme(doc, (next) => {
    theme = next;
    request(1);
  });

  data = readData(model);
  fillTargets();
  draw();

  return () => {
    disposed = true;
    rendering?.cancel();
    tableFill?.cancel();
    for (const name of DATA_TRAITS) model.off(`change:${name}`, onData);
    for (const name of VIEW_TRAITS) model.off(`change:${name}`, onView);
    model.off("change:selected_token", onSelection);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("TokenHighlightWidget", renderTokenHighlight) };
