/**
 * Token attribution highlighter (front end of interp_widgets.widgets.TokenHighlightWidget).
 *
 * Synced traits read here: tokens, spaces_before, special_mask, word_ids, sentence_ids, scores
 * (binary {dtype, shape, data}), target_labels, target_probs, selected_target, granularity,
 * show_special_tokens, selected_token, hovered_token, method, score_meaning, completeness_error, signed,
 * shared_scale, encoding, high_contrast, error. The view writes back selected_target, granularity,
 * show_special_tokens, shared_scale, encoding, high_contrast, selected_token and hovered_token.
 * Word/sentence sums are computed here, never in the kernel. Long inputs render in chunks.
 *
 * @example
 *   import widget from "./token_highlight.js";
 *   const cleanup = widget.render({model, el});
 */
import "./token_highlight.css";
import { buildUnits, maxMagnitude, ranksByMagnitude, unitScores } from "./lib/aggregate.js";
import { decodeArray } from "./lib/codec.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { createExportMenu } from "./lib/export.js";
import { formatProbability, formatScore } from "./lib/format.js";
import { createLegend } from "./lib/legend.js";
import { appendChunked, paintToken } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";

const GRANULARITIES = ["token", "word", "sentence"];
const DATA_TRAITS = [
  "tokens",
  "spaces_before",
  "special_mask",
  "word_ids",
  "sentence_ids",
  "scores",
  "target_labels",
  "target_probs",
  "method",
  "score_meaning",
  "completeness_error",
  "signed",
];
const VIEW_TRAITS = ["selected_target", "granularity", "show_special_tokens", "shared_scale", "encoding", "high_contrast"];
/** Units listed in the screen-reader table; longer inputs point to the CSV export instead. */
const MAX_TABLE_ROWS = 500;

function perToken(model, name, n) {
  const { values } = decodeArray(model.get(name));
  if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} tokens`);
  return values;
}

/** Read and check the synced data; throws a readable error when it is inconsistent. */
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
    method: model.get("method") ?? "",
    meaning: model.get("score_meaning") ?? "",
    signed: model.get("signed") !== false,
  };
}

function renderTokenHighlight({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const root = h("div", { class: "iw-root iw-token-highlight" });
  const targetSelect = h("select", { class: "iw-target-select" });
  const granularitySelect = h(
    "select",
    { class: "iw-granularity-select" },
    GRANULARITIES.map((g) => h("option", { value: g }, g)),
  );
  const specialToggle = h("input", { type: "checkbox", class: "iw-special-toggle" });
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const encodingSelect = h("select", { class: "iw-encoding-select" }, [
    h("option", { value: "colour" }, "colour"),
    h("option", { value: "underline" }, "underline + sign"),
  ]);
  const contrastToggle = h("input", { type: "checkbox", class: "iw-contrast-toggle" });
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Class ", targetSelect]),
    h("label", {}, ["Granularity ", granularitySelect]),
    h("label", {}, [specialToggle, " special tokens"]),
    h("label", { title: "One colour scale for all classes instead of one per class" }, [sharedToggle, " shared scale"]),
    h("label", {}, ["Encoding ", encodingSelect]),
    h("label", {}, [contrastToggle, " high contrast"]),
  ]);
  const tokensBox = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal" });
  const legendSlot = h("div", { class: "iw-legend-slot" });
  const caption = h("div", { class: "iw-caption" });
  const table = h("table", { class: "iw-sr-only" });
  root.append(toolbar, tokensBox, legendSlot, caption, table);
  el.append(root);
  const tooltip = createTooltip(root);

  let theme = detectTheme(doc);
  let data = null;
  let view = null; // {units, sums, ranks, ranked, spans, target}
  let focusToken = -1; // token index that owns the roving tabindex
  let rendering = null; // chunked append in progress

  const safely =
    (fn) =>
    (...args) => {
      try {
        fn(...args);
      } catch (error) {
        reportError(error);
      }
    };

  function save(name, value) {
    model.set(name, value);
    model.save_changes();
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

  function unitText(unit) {
    return unit.map((i, k) => (k > 0 ? data.spaces[i] : "") + data.tokens[i]).join("");
  }

  function describe(u) {
    const unit = view.units[u];
    const granularity = model.get("granularity");
    const rows = [
      [granularity, quoteToken(unitText(unit))],
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
    const max = shared
      ? Math.max(...data.labels.map((_, t) => maxMagnitude(unitScores(units, data.scores, t, data.n))))
      : maxMagnitude(sums);
    const paint = { theme, signed: data.signed, encoding: model.get("encoding") || "colour", boost: Boolean(model.get("high_contrast")) };
    const hadFocus = tokensBox.contains(doc.activeElement);
    tooltip.hide();

    const nodes = [];
    const spans = units.map((unit, u) => {
      const first = unit[0];
      if (data.spaces[first]) nodes.push(doc.createTextNode(data.spaces[first]));
      const text = unitText(unit);
      const special = data.specialMask[first] !== 0;
      const joined =
        granularity === "token" &&
        u > 0 &&
        !special &&
        data.spaces[first] === "" &&
        data.wordIds[first] >= 0 &&
        data.wordIds[first] === data.wordIds[units[u - 1][0]];
      const unseen = Number.isNaN(sums[u]);
      const classes = ["iw-token", special && "iw-special", joined && "iw-join", unseen && "iw-unseen"];
      const span = h("span", { class: classes.filter(Boolean).join(" "), role: "option", tabindex: -1, "aria-selected": "false", "data-unit": u }, displayToken(text));
      nodes.push(span);
      return span;
    });
    // Colours and labels are set as each chunk enters the DOM, so the first paint costs one chunk.
    const prepare = (node) => {
      if (node.nodeType !== 1) return;
      const u = Number(node.dataset.unit);
      node.setAttribute("aria-label", `${quoteToken(unitText(units[u]))}, score ${scoreText(sums[u])}, rank ${rankText(ranks[u], ranked)}`);
      paintToken(node, sums[u], max, paint);
    };
    rendering?.cancel();
    rendering = appendChunked(tokensBox, nodes, { prepare });
    view = { units, sums, ranks, ranked, spans, target };

    targetSelect.value = String(target);
    granularitySelect.value = granularity;
    specialToggle.checked = showSpecial;
    sharedToggle.checked = shared;
    encodingSelect.value = paint.encoding;
    contrastToggle.checked = paint.boost;
    root.dataset.iwTheme = theme;
    root.classList.toggle("iw-high-contrast", paint.boost);
    const per = granularity === "token" ? "" : ` (sum per ${granularity})`;
    const scaleNote = shared ? ", scale shared by all classes" : "";
    tokensBox.setAttribute("aria-label", `${units.length} ${granularity}s coloured by attribution for class ${data.labels[target]}`);
    legendSlot.replaceChildren(
      createLegend(max, theme, `attribution${per}${scaleNote}`, { signed: data.signed, encoding: paint.encoding }),
    );
    fillTable(units, sums, ranks, ranked, granularity);
    const parts = [data.method && `method: ${data.method}`, data.meaning && `score: ${data.meaning}`];
    const delta = data.completeness[target];
    if (Number.isFinite(delta)) parts.push(`completeness error: ${formatScore(delta, { digits: 3 })}`);
    caption.textContent = parts.filter(Boolean).join(" \u00b7 ");

    markSelection();
    const focusUnit = Math.max(0, unitOfToken(focusToken));
    spans[focusUnit].tabIndex = 0;
    if (hadFocus) {
      if (!spans[focusUnit].isConnected) rendering.finish();
      spans[focusUnit].focus();
    }
  }

  function fillTable(units, sums, ranks, ranked, granularity) {
    const shown = units.slice(0, MAX_TABLE_ROWS);
    const caption = `Attribution per ${granularity} for class ${data.labels[view.target]}` +
      (units.length > shown.length ? ` (first ${shown.length} of ${units.length}; use the CSV export for all)` : "");
    table.replaceChildren(
      h("caption", {}, caption),
      h("tr", {}, [h("th", { scope: "col" }, granularity), h("th", { scope: "col" }, "score"), h("th", { scope: "col" }, "rank")]),
      ...shown.map((unit, u) =>
        h("tr", {}, [h("td", {}, unitText(unit)), h("td", {}, scoreText(sums[u])), h("td", {}, rankText(ranks[u], ranked))]),
      ),
    );
  }

  function csvRows() {
    const units = view.units;
    const header = ["position", model.get("granularity"), "start_token", ...data.labels];
    const perTarget = data.labels.map((_, t) => unitScores(units, data.scores, t, data.n));
    return [header, ...units.map((unit, u) => [u, unitText(unit), unit[0], ...perTarget.map((row) => row[u])])];
  }

  function unitOfToken(i) {
    return view ? view.units.findIndex((unit) => unit.includes(i)) : -1;
  }

  function markSelection() {
    const selected = unitOfToken(model.get("selected_token"));
    for (const span of tokensBox.querySelectorAll('.iw-token[aria-selected="true"]')) span.setAttribute("aria-selected", "false");
    if (selected >= 0) view.spans[selected].setAttribute("aria-selected", "true");
  }

  // Coalesce bursts of change events (one Python hold_sync message fires several) into one redraw.
  let pending = 0; // 1 = redraw, 2 = re-read data then redraw
  function request(level) {
    if (pending === 0) queueMicrotask(safely(flush));
    pending = Math.max(pending, level);
  }
  let disposed = false;
  function flush() {
    if (disposed) return;
    const level = pending;
    pending = 0;
    if (level === 2) {
      data = readData(model);
      fillTargets();
    }
    draw();
  }

  function spanOf(event) {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    return span && tokensBox.contains(span) ? span : null;
  }

  function showTip(span) {
    tooltip.show(span, describe(Number(span.dataset.unit)));
  }

  function focusUnit(u) {
    const next = view.spans[Math.min(Math.max(u, 0), view.spans.length - 1)];
    if (!next.isConnected) rendering.finish();
    for (const span of tokensBox.querySelectorAll(".iw-token[tabindex=\"0\"]")) span.tabIndex = -1;
    next.tabIndex = 0;
    focusToken = view.units[Number(next.dataset.unit)][0];
    next.focus();
  }

  function toggleSelection(u) {
    const unit = view.units[u];
    save("selected_token", unit.includes(model.get("selected_token")) ? -1 : unit[0]);
  }

  const KEY_STEPS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
  const onKeyDown = safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    const u = Number(span.dataset.unit);
    if (event.key in KEY_STEPS) focusUnit(u + KEY_STEPS[event.key]);
    else if (event.key === "Home") focusUnit(0);
    else if (event.key === "End") focusUnit(view.spans.length - 1);
    else if (event.key === "Enter" || event.key === " ") toggleSelection(u);
    else if (event.key === "Escape") tooltip.hide();
    else return;
    event.preventDefault();
  });
  const onMouseOver = safely((event) => {
    const span = spanOf(event);
    if (!span || span === tooltip.target) return;
    showTip(span);
    save("hovered_token", view.units[Number(span.dataset.unit)][0]);
  });
  const onMouseLeave = safely(() => {
    tooltip.hide();
    save("hovered_token", -1);
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
  targetSelect.addEventListener("change", safely(() => save("selected_target", Number(targetSelect.value))));
  granularitySelect.addEventListener("change", safely(() => save("granularity", granularitySelect.value)));
  specialToggle.addEventListener("change", safely(() => save("show_special_tokens", specialToggle.checked)));
  sharedToggle.addEventListener("change", safely(() => save("shared_scale", sharedToggle.checked)));
  encodingSelect.addEventListener("change", safely(() => save("encoding", encodingSelect.value)));
  contrastToggle.addEventListener("change", safely(() => save("high_contrast", contrastToggle.checked)));
  toolbar.append(
    createExportMenu({
      name: "token-attribution",
      root,
      rows: csvRows,
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
    for (const name of DATA_TRAITS) model.off(`change:${name}`, onData);
    for (const name of VIEW_TRAITS) model.off(`change:${name}`, onView);
    model.off("change:selected_token", onSelection);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("TokenHighlightWidget", renderTokenHighlight) };
